"""The @int8 copy cached on disk (specviz.models.int8cache): read back bit-identical to a fresh
quantization, rebuilt with one log line when the file is stale or corrupt, used by load_model."""

from __future__ import annotations

import copy
import logging

import pytest
import torch

from specviz.models.int8 import Int8Options, quantize_int8
from specviz.models.int8cache import cache_path, quantize_cached
from specviz.runtime.quantize import Int8Linear
from tests.support.tiny import outlier_llama

PROMPT = "the cat sat on the mat, then the dog ran off."
KERNELS = [Int8Options(), Int8Options(kernel="blocked"), Int8Options(smooth_alpha=None)]  # int_mm: the default


@pytest.fixture(scope="module")
def float_model(tokenizer):
    """A tiny Llama whose norms feed a few channels 50x louder than the rest (smoothing has work)."""
    return outlier_llama(len(tokenizer))


@torch.inference_mode()
def _logits(model, tokenizer) -> list[torch.Tensor]:
    ids = torch.tensor([tokenizer(PROMPT)["input_ids"]])
    return [model(input_ids=ids).logits[0], model(input_ids=ids[:, :1]).logits[0]]  # a batch of rows, one row


def _int8_layers(model) -> dict[str, str]:
    return {n: type(m).__name__ for n, m in model.named_modules() if isinstance(m, Int8Linear)}


@pytest.mark.parametrize("options", KERNELS, ids=["int_mm", "blocked", "unsmoothed"])
def test_the_cached_copy_gives_the_fresh_quantizations_logits_bit_for_bit(float_model, tokenizer, tmp_path, options):
    fresh = quantize_int8(copy.deepcopy(float_model), tokenizer, options)
    first, hit1 = quantize_cached(copy.deepcopy(float_model), tokenizer, "local:/a/tiny", options, directory=tmp_path)
    second, hit2 = quantize_cached(copy.deepcopy(float_model), tokenizer, "local:/b/tiny", options, directory=tmp_path)
    assert (hit1, hit2) == (False, True)  # the same weights in another directory of that name share the file
    assert len(list((tmp_path / "int8").iterdir())) == 1
    assert _int8_layers(second) == _int8_layers(fresh) and _int8_layers(fresh)
    assert all(type(m) is not torch.nn.Linear for m in second.modules())
    for a, b, c in zip(_logits(fresh, tokenizer), _logits(first, tokenizer), _logits(second, tokenizer)):
        assert torch.equal(a, b) and torch.equal(a, c)
    q, k = second.model.layers[0].self_attn.q_proj, second.model.layers[0].self_attn.k_proj  # q/k/v and gate/up: rows
    assert q.group and q.group[0] is k.group[0]  # of one fused layer, as quantize_int8 builds them
    assert k.qweight.data_ptr() == q.group[0].qweight.data_ptr() + q.out_features * q.in_features


def _cut_short(directory, monkeypatch) -> None:
    (path,) = (directory / "int8").iterdir()
    path.write_bytes(path.read_bytes()[:1000])


def _other_torch(directory, monkeypatch) -> None:
    monkeypatch.setattr(torch, "__version__", "0.0.0-other")  # another torch: its kernels may pack differently


@pytest.mark.parametrize("spoil, said", [(_cut_short, "unreadable"), (_other_torch, "stale (torch changed)")])
def test_a_corrupt_or_stale_file_is_rebuilt_with_one_log_line(spoil, said, float_model, tokenizer, tmp_path, caplog,
                                                               monkeypatch):
    quantize_cached(copy.deepcopy(float_model), tokenizer, "builtin:tiny", directory=tmp_path)
    spoil(tmp_path, monkeypatch)
    with caplog.at_level(logging.WARNING, logger="specviz.models.int8cache"):
        model, hit = quantize_cached(copy.deepcopy(float_model), tokenizer, "builtin:tiny", directory=tmp_path)
    assert not hit
    assert len(caplog.records) == 1 and said in caplog.records[0].getMessage()
    caplog.clear()
    again, hit = quantize_cached(copy.deepcopy(float_model), tokenizer, "builtin:tiny", directory=tmp_path)
    assert hit and not caplog.records  # rewritten whole
    for a, b in zip(_logits(model, tokenizer), _logits(again, tokenizer)):
        assert torch.equal(a, b)


def test_the_key_follows_the_weights_and_the_options(float_model, tokenizer, tmp_path):
    quantize_cached(copy.deepcopy(float_model), tokenizer, "builtin:tiny", directory=tmp_path)
    other = copy.deepcopy(float_model)
    with torch.no_grad():
        other.model.layers[1].mlp.down_proj.weight.mul_(1.5)
    model, hit = quantize_cached(other, tokenizer, "builtin:tiny", directory=tmp_path)
    assert not hit  # same name, other weights: the built-in's file is stale and rebuilt
    _, hit = quantize_cached(copy.deepcopy(float_model), tokenizer, "builtin:tiny", Int8Options(smooth_alpha=0.8),
                             directory=tmp_path)
    assert not hit  # other options: another file
    assert cache_path("builtin:tiny", Int8Options(), "w", tmp_path) != cache_path("builtin:tiny", Int8Options(kernel="blocked"), "w", tmp_path)


def test_load_model_reads_the_int8_copy_from_the_cache_dir(float_model, tokenizer, tmp_path, monkeypatch):
    from specviz.models import clear_model_cache, load_model

    monkeypatch.setenv("SPECVIZ_CACHE_DIR", str(tmp_path / "cache"))
    d = tmp_path / "tiny"
    float_model.save_pretrained(str(d))
    tokenizer.save_pretrained(str(d))
    runs = []
    for _ in range(2):
        clear_model_cache()
        said: list[str] = []
        lm = load_model(f"{d}@int8", progress=said.append)
        runs.append((lm, said))
    clear_model_cache()
    assert any(m.startswith("quantizing") for m in runs[0][1]) and not any("disk cache" in m for m in runs[0][1])
    assert any("from the disk cache" in m for m in runs[1][1]) and not any(m.startswith("quantizing") for m in runs[1][1])
    assert runs[1][0].quantize == "int8" and list((tmp_path / "cache" / "int8").iterdir())
    for a, b in zip(_logits(runs[0][0].model, tokenizer), _logits(runs[1][0].model, tokenizer)):
        assert torch.equal(a, b)


def test_an_int8_copy_of_a_loaded_float_model_leaves_it_untouched(float_model, tokenizer, tmp_path, monkeypatch):
    """With the float model already loaded, its int8 copy shares its float tensors (no clone) and
    is still the fresh quantization's, from the cache or not; the float model keeps its layers."""
    from specviz.models import clear_model_cache, load_model

    monkeypatch.setenv("SPECVIZ_CACHE_DIR", str(tmp_path / "cache"))
    d = tmp_path / "tiny"
    float_model.save_pretrained(str(d))
    tokenizer.save_pretrained(str(d))
    from specviz.models.int8 import choose_kernel

    kernel = choose_kernel()  # the kernel the loader picks here (blocked where it builds)
    fresh = _logits(quantize_int8(copy.deepcopy(float_model), tokenizer, Int8Options(kernel=kernel)), tokenizer)
    clear_model_cache()
    base = load_model(str(d))
    before = _logits(base.model, tokenizer)
    for _ in range(2):  # quantized, then read from the disk cache
        lm = load_model(f"{d}@int8")
        assert lm.model.get_input_embeddings().weight is base.model.get_input_embeddings().weight
        for a, b in zip(fresh, _logits(lm.model, tokenizer)):
            assert torch.equal(a, b)
        assert sum(type(m) is torch.nn.Linear for m in base.model.modules()) == 15  # 2 layers x 7 + the head
        for a, b in zip(before, _logits(base.model, tokenizer)):
            assert torch.equal(a, b)
        clear_model_cache()
        base = load_model(str(d))  # a fresh base for the second round, as a restart would have
    clear_model_cache()


def test_a_layer_the_cache_cannot_store_leaves_the_model_working_uncached(float_model, tokenizer, tmp_path, caplog,
                                                                          monkeypatch):
    from specviz.models import int8cache

    def unknown(*_args, **_kw):
        raise TypeError("model.layers.0.mlp.up_proj: NewInt8Linear is not an int8 layer this cache knows")

    monkeypatch.setattr(int8cache, "_dump", unknown)  # as if quantize_int8 had grown a new layer type
    with caplog.at_level(logging.WARNING, logger="specviz.models.int8cache"):
        model, hit = quantize_cached(copy.deepcopy(float_model), tokenizer, "builtin:tiny", directory=tmp_path)
    assert not hit and "not cached on disk" in caplog.records[0].getMessage()
    assert not (tmp_path / "int8").exists() or not list((tmp_path / "int8").iterdir())
    fresh = quantize_int8(copy.deepcopy(float_model), tokenizer)
    for a, b in zip(_logits(fresh, tokenizer), _logits(model, tokenizer)):
        assert torch.equal(a, b)
