"""The int8 self-draft stays close to its float model (specviz.runtime.quantize)."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch

from specviz.runtime.quantize import _QUANTIZED_DEPRECATED, Int8Linear, Int8Options, quantize_int8, smoothing_scales
from tests.support.tiny import outlier_llama


def _outlier_input(rows: int = 6, width: int = 64, seed: int = 0) -> torch.Tensor:
    """Activations with two channels 100x the rest, as Gemma's hidden states have."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, width, generator=g)  # [rows, width]
    x[:, 3] *= 100
    x[:, 40] *= 60
    return x


def _linear(width: int = 64, out: int = 48, seed: int = 1) -> torch.nn.Linear:
    torch.manual_seed(seed)
    return torch.nn.Linear(width, out, bias=False)


def _rel_err(y: torch.Tensor, ref: torch.Tensor) -> float:
    return float((y - ref).norm() / ref.norm())


def test_per_token_rows_equal_single_rows_whatever_their_neighbours():
    lin = _linear()
    layer = Int8Linear(lin, None, Int8Options(smooth_alpha=None))
    x = torch.randn(5, 64)
    x[0] *= 300  # an attention-sink row
    with torch.inference_mode():
        together = layer(x)
        alone = torch.cat([layer(x[i : i + 1]) for i in range(5)])
        shared = Int8Linear(lin, None, Int8Options(per_token=False, smooth_alpha=None))(x)
        ref = lin(x)
    assert torch.equal(together, alone)
    # one scale for the batch drowns the small rows; one per row does not
    assert _rel_err(together[1:], ref[1:]) < 0.05 < _rel_err(shared[1:], ref[1:])


def test_a_packed_layer_runs_a_prefill_in_one_call_per_token_and_close_to_its_row_loop(monkeypatch):
    """A packed int8 layer given PREFILL_ROWS rows or more (a prompt's prefill) runs them in one
    _int_mm call on its own int8 weight: per token (a huge row does not drown the small ones, and
    a row's output does not depend on its neighbours) and as close to the float product as the row
    loop it replaces; fewer rows keep the loop."""
    from specviz.runtime import quantize

    monkeypatch.setattr(quantize, "_int_mm_probe", {"pays": True})  # as on a CPU with VNNI
    lin = _linear()
    layer = quantize.PackedInt8Linear(lin, None, Int8Options(smooth_alpha=None))
    n = quantize.PREFILL_ROWS
    x = torch.randn(n + 3, 64)
    x[0] *= 300  # an attention-sink row
    with torch.inference_mode():
        together = layer(x)  # one call
        alone = torch.cat([layer._all_rows(x[i : i + 1]) for i in range(n + 3)])
        looped = torch.cat([layer(x[i : i + 1]) for i in range(n + 3)])  # the packed kernel, row by row
        ref = lin(x)
    assert torch.equal(together, alone)
    assert _rel_err(together[1:], ref[1:]) < 0.05 and _rel_err(together[1:], ref[1:]) < 2 * _rel_err(looped[1:], ref[1:])
    assert "_unpacked" in layer.__dict__ and copy.deepcopy(layer).__dict__.get("_unpacked") is None  # a copy rebuilds it


def test_a_prefill_keeps_the_row_loop_where_int_mm_measures_slower(monkeypatch):
    """Where one _int_mm call is slower than the loop (an AVX2-only CPU: 55x on a Zen 1 EPYC), a
    prefill's rows run through the packed kernel one by one: the same outputs as row by row."""
    from specviz.runtime import quantize

    monkeypatch.setattr(quantize, "_int_mm_probe", {})
    assert quantize.int_mm_pays(lambda: (0.150, 0.003)) is False
    assert quantize.int_mm_pays(lambda: (0.001, 0.003)) is False  # measured once per process
    layer = quantize.PackedInt8Linear(_linear(), None, Int8Options(smooth_alpha=None))
    x = torch.randn(quantize.PREFILL_ROWS + 2, 64)
    with torch.inference_mode():
        assert torch.equal(layer(x), torch.cat([layer(x[i : i + 1]) for i in range(len(x))]))
    assert "_unpacked" not in layer.__dict__  # no second int8 copy for _int_mm
    monkeypatch.setattr(quantize, "_int_mm_probe", {})
    assert quantize.int_mm_pays(lambda: (0.001, 0.003)) is True
    monkeypatch.setattr(quantize, "_int_mm_probe", {})
    assert isinstance(quantize.int_mm_pays(), bool)  # this machine's own measurement runs


def test_a_few_rows_run_in_one_packed_call_and_keep_their_own_scales():
    """2..PREFILL_ROWS-1 rows (a draft's catch-up feed, a tree level) go through the packed kernel in
    one call, each row scaled by its own absolute max first: a row 100 times smaller than another
    keeps its relative error, which one scale for the call would not."""
    from specviz.runtime import quantize

    lin = _linear()
    layer = quantize.PackedInt8Linear(lin, None, Int8Options(smooth_alpha=None))
    assert layer.bias_free == (lin.bias is None)
    x = torch.randn(3, 64) * torch.tensor([[1.0], [10.0], [0.1]])  # rows of very different sizes
    with torch.inference_mode():
        ref, ours = torch.nn.functional.linear(x, lin.weight, lin.bias), layer(x)
        rows = torch.cat([layer(x[i : i + 1]) for i in range(3)])  # one call per row
    for i in range(3):
        scale = ref[i].abs().max()
        assert (ours[i] - ref[i]).abs().max() < 0.05 * scale  # each row near its float product
        assert (ours[i] - rows[i]).abs().max() < 0.05 * scale  # and near its own row call
    with torch.inference_mode():
        squashed = quantize.torch.ops.quantized.linear_dynamic(x, layer._packed_params, layer.reduce_range)
    assert (squashed[2] - ref[2]).abs().max() > (ours[2] - ref[2]).abs().max()  # one scale for all: the small row suffers


def test_smoothing_keeps_the_product_and_cuts_the_error_of_outlier_channels():
    lin, x = _linear(), _outlier_input()
    stats = x.abs().amax(dim=0)  # [64]
    s = smoothing_scales(stats, lin.weight, 0.5)
    with torch.inference_mode():
        ref = lin(x)
        assert torch.allclose(torch.nn.functional.linear(x / s, lin.weight * s), ref, atol=1e-4)
        plain = Int8Linear(lin, None, Int8Options(smooth_alpha=None))(x)
        smooth = Int8Linear(lin, s, Int8Options())(x)
    assert _rel_err(smooth, ref) < 0.5 * _rel_err(plain, ref)


def _overlap(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.minimum(a.softmax(-1), b.softmax(-1)).sum(-1).mean())


@pytest.fixture(scope="module")
def outlier_model(tokenizer):
    """A tiny Llama whose norms feed a few channels 50x louder than the rest, as Gemma's do."""
    return outlier_llama(len(tokenizer))


def test_quantize_int8_keeps_a_tiny_model_with_outliers_close(outlier_model, tokenizer):
    ids = torch.tensor([tokenizer("the cat sat on the mat, then the dog ran off.")["input_ids"]])
    with torch.inference_mode():
        ref = outlier_model(input_ids=ids).logits[0]  # [n, V]
        ours = quantize_int8(copy.deepcopy(outlier_model), tokenizer)
        with warnings.catch_warnings():  # the baseline is torch.ao's deprecated quantize_dynamic
            warnings.filterwarnings("ignore", r"torch\.ao\.quantization is deprecated", DeprecationWarning)
            warnings.filterwarnings("ignore", _QUANTIZED_DEPRECATED, UserWarning)
            from torch.ao.quantization import quantize_dynamic

            naive = quantize_dynamic(copy.deepcopy(outlier_model), {torch.nn.Linear}, dtype=torch.qint8)
        ours_overlap = _overlap(ours(input_ids=ids).logits[0], ref)
        naive_overlap = _overlap(naive(input_ids=ids).logits[0], ref)
    assert all(type(m) is not torch.nn.Linear for m in ours.modules())
    assert ours_overlap > 0.9
    assert ours_overlap > naive_overlap + 0.05


def test_packed_siblings_are_one_fused_layer_run_once_per_input(outlier_model, tokenizer):
    """The packed kernel's q/k/v and gate/up are rows of one fused layer: the model's own forward
    runs each fused product once per input (the other members slice it), and every member equals
    its rows of the fused product."""
    from specviz.runtime.quantize import PackedInt8Linear, PackedRows

    q8 = quantize_int8(copy.deepcopy(outlier_model), tokenizer)
    attn, mlp = q8.model.layers[0].self_attn, q8.model.layers[0].mlp
    members = (attn.q_proj, attn.k_proj, attn.v_proj)
    assert all(type(m) is PackedRows for m in (*members, mlp.gate_proj, mlp.up_proj))
    assert type(attn.o_proj) is PackedInt8Linear and type(mlp.down_proj) is PackedInt8Linear
    fused = attn.q_proj.group[0]
    assert all(m.group == (fused,) for m in members) and fused not in list(q8.modules())
    assert sum(m.out_features for m in members) == fused.out_features
    assert [m.weight().shape[0] for m in members] == [m.out_features for m in members]
    calls = []
    fused.register_forward_hook(lambda *_: calls.append(1))
    x = _outlier_input(3, width=fused.in_features)
    with torch.inference_mode():
        whole = fused(x)  # [3, q + k + v]
        calls.clear()
        parts = [m(x) for m in members]
        assert len(calls) == 1  # one product for the three members
        assert torch.equal(torch.cat(parts, dim=-1), whole)
        members[1](x.clone())  # another input: its own product
        assert len(calls) == 2
    apart = quantize_int8(copy.deepcopy(outlier_model), tokenizer, Int8Options(fuse_siblings=False))
    assert type(apart.model.layers[0].self_attn.q_proj) is PackedInt8Linear


def test_options_are_checked(outlier_model):
    with pytest.raises(ValueError, match="smooth_alpha"):
        Int8Options(smooth_alpha=1.5)
    with pytest.raises(ValueError, match="tokenizer"):
        quantize_int8(copy.deepcopy(outlier_model))
    kept = quantize_int8(copy.deepcopy(outlier_model), options=Int8Options(smooth_alpha=None, keep_float=("lm_head",)))
    assert type(kept.lm_head) is torch.nn.Linear and isinstance(kept.model.layers[0].mlp.down_proj, Int8Linear)


HELD_OUT = [  # not the bundled dev prompts (those calibrate the smoothing)
    "The quick brown fox jumps over the",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "Shopping list:\n1. Eggs\n2. Milk\n3.",
    "La capitale de l'Italie est",
]


@pytest.mark.slow
def test_gemma_int8_overlaps_its_float_model():
    """Next-token overlap sum(min(p, q)) of the int8 copy with float32 gemma-3-270m, after a
    batched prefill, at the prompt's end and 3 greedy tokens on (a faithful self-draft: >= 0.8)."""
    from specviz.models import load_model
    from specviz.runtime.kv import forward_logits, new_cache

    torch.set_num_threads(2)
    try:
        fp = load_model("gemma-3-270m")
    except ValueError as exc:
        pytest.skip(str(exc))
    q8 = quantize_int8(copy.deepcopy(fp.model), fp.tokenizer)
    values = []
    with torch.inference_mode():
        for text in HELD_OUT:
            ids = fp.tokenizer(text)["input_ids"]
            cont: list[int] = []
            for _ in range(3):  # the float model's greedy continuation
                cont.append(int(fp.model(input_ids=torch.tensor([ids + cont])).logits[0, -1].argmax()))
            p = fp.model(input_ids=torch.tensor([ids + cont])).logits[0, len(ids) - 1 :]  # [4, V]
            cache = new_cache(q8)
            rows = [forward_logits(q8, torch.tensor(ids), cache, 1)[0]]  # batched prefill
            rows += [forward_logits(q8, torch.tensor([t]), cache, 1)[0] for t in cont]
            values.append(_overlap(torch.stack(rows), p))
    assert sum(values) / len(values) >= 0.8, values


def test_no_deprecated_kernels_and_no_warnings(outlier_model, tokenizer):
    """kernel="int_mm": quantizing and running raise no warning at all (no quantized tensors, no
    packed params)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        q8 = quantize_int8(copy.deepcopy(outlier_model), tokenizer, Int8Options(kernel="int_mm"))
        with torch.inference_mode():
            q8(input_ids=torch.tensor([[1, 5, 9, 12]]))
    assert not any(t.is_quantized for t in q8.buffers()) and not any(hasattr(m, "_packed_params") for m in q8.modules())


def test_one_traced_graph_serves_every_width():
    """Per-token scales for all rows at once: a graph traced at one width gives every other width
    exactly what the layer gives (the static decode step traces its body once for all widths)."""
    lin = _linear()
    layer = Int8Linear(lin, torch.rand(64) + 0.5, Int8Options()).eval()
    assert layer.any_width
    with torch.inference_mode(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", r"`torch\.jit\.trace(_method)?` is deprecated", DeprecationWarning)
        traced = torch.jit.trace(layer, (torch.randn(3, 64),), check_trace=False)
        for rows in range(1, 10):
            x = _outlier_input(rows, seed=rows)
            assert torch.equal(traced(x), layer(x))


class _HeadOnly(torch.nn.Module):
    """A model that is just an int8 output head of ``vocab`` x 64 (for speed_up_int8_head)."""

    def __init__(self, vocab: int):
        super().__init__()
        torch.manual_seed(2)
        self.head = Int8Linear(torch.nn.Linear(64, vocab, bias=False), None, Int8Options(smooth_alpha=None))

    def get_output_embeddings(self):
        return self.head


def test_int8_head_takes_onednn_where_it_measures_faster_and_caches_the_choice(tmp_path):
    from specviz.runtime import cpu
    from specviz.runtime.int8_speed import int8_head_report, onednn_exact, speed_up_int8_head

    if not torch.backends.mkldnn.is_available() or not onednn_exact():
        pytest.skip("no exact oneDNN int8 linear on this CPU")
    calls = []

    def timer(weight, rows):  # (_int_mm s, oneDNN s): oneDNN faster at 1-3 rows only
        calls.append(rows)
        return (1.0, 0.5) if rows <= 3 else (1.0, 1.2)

    model = _HeadOnly(cpu.MIN_HEAD_ELEMENTS // 64 + 1)
    assert speed_up_int8_head(model, tmp_path, time_width=timer) and calls == list(range(1, cpu.MEASURED_ROWS + 1))
    head = model.head
    assert [head.kernel(r) for r in (1, 3, 4, 9, 40)] == ["oneDNN", "oneDNN", "_int_mm", "_int_mm", "_int_mm"]
    x = _outlier_input(3, seed=3)
    with torch.inference_mode():
        fast = head(x)  # oneDNN at 3 rows
        head.onednn_at = (False,)
        plain = head(x)  # _int_mm
    torch.testing.assert_close(fast, plain, rtol=1e-5, atol=1e-5)  # the same integers, float rounding only
    report = int8_head_report(model)
    assert report["kernels"] == ["_int_mm", "oneDNN"] and report["by_rows"][0]["kernel"] == "oneDNN"
    again = _HeadOnly(cpu.MIN_HEAD_ELEMENTS // 64 + 1)
    assert speed_up_int8_head(again, tmp_path, time_width=lambda w, r: pytest.fail("measured twice"))
    assert int8_head_report(again)["cached"] and copy.deepcopy(again).head._packed is None
    small = _HeadOnly(1000)  # nothing to gain: not measured
    assert not speed_up_int8_head(small, tmp_path, time_width=timer) and int8_head_report(small) is None
