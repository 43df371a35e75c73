"""The int8 self-draft stays close to its float model (specviz.models.int8, specviz.runtime.quantize)."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch

from specviz.models.int8 import Int8Options, quantize_int8, smoothing_scales
from specviz.runtime.quantize import Int8Linear
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
    layer = Int8Linear(lin, None)
    x = torch.randn(5, 64)
    x[0] *= 300  # an attention-sink row
    with torch.inference_mode():
        together = layer(x)
        alone = torch.cat([layer(x[i : i + 1]) for i in range(5)])
        step = x.abs().amax() / 127.0  # one activation scale for the whole call, as plain dynamic int8
        xq = torch.round(x / step).to(torch.int8)
        shared = torch._int_mm(xq, layer.qweight.t()).float() * step * layer.scale
        ref = lin(x)
    assert torch.equal(together, alone)
    # one scale for the batch drowns the small rows; one per row does not
    assert _rel_err(together[1:], ref[1:]) < 0.05 < _rel_err(shared[1:], ref[1:])


def test_smoothing_keeps_the_product_and_cuts_the_error_of_outlier_channels():
    lin, x = _linear(), _outlier_input()
    stats = x.abs().amax(dim=0)  # [64]
    s = smoothing_scales(stats, lin.weight, 0.5)
    with torch.inference_mode():
        ref = lin(x)
        assert torch.allclose(torch.nn.functional.linear(x / s, lin.weight * s), ref, atol=1e-4)
        plain = Int8Linear(lin, None)(x)
        smooth = Int8Linear(lin, s)(x)
    assert _rel_err(smooth, ref) < 0.5 * _rel_err(plain, ref)


def _overlap(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.minimum(a.softmax(-1), b.softmax(-1)).sum(-1).mean())


@pytest.fixture(scope="module")
def outlier_model(tokenizer):
    """A tiny Llama whose norms feed a few channels 50x louder than the rest, as Gemma's do."""
    return outlier_llama(len(tokenizer))


def _naive_int8(model: torch.nn.Module) -> torch.nn.Module:
    """torch.ao's quantize_dynamic, the baseline quantize_int8 beats, as float arithmetic on int8
    values (torch.ao is deprecated upstream): one weight scale per matrix, one activation scale
    per call, no smoothing."""
    def fake(t: torch.Tensor) -> torch.Tensor:  # symmetric int8 with one scale for all of t
        step = t.abs().amax().clamp_min(1e-12) / 127.0
        return torch.round(t / step).clamp(-127, 127) * step

    for m in model.modules():
        if type(m) is torch.nn.Linear:
            m.weight.data = fake(m.weight.data)
            m.register_forward_pre_hook(lambda _m, args: (fake(args[0]),))
    return model


def test_quantize_int8_keeps_a_tiny_model_with_outliers_close(outlier_model, tokenizer):
    ids = torch.tensor([tokenizer("the cat sat on the mat, then the dog ran off.")["input_ids"]])
    with torch.inference_mode():
        ref = outlier_model(input_ids=ids).logits[0]  # [n, V]
        ours = quantize_int8(copy.deepcopy(outlier_model), tokenizer)
        naive = _naive_int8(copy.deepcopy(outlier_model))
        ours_overlap = _overlap(ours(input_ids=ids).logits[0], ref)
        naive_overlap = _overlap(naive(input_ids=ids).logits[0], ref)
    assert all(type(m) is not torch.nn.Linear for m in ours.modules())
    assert ours_overlap > 0.9
    assert ours_overlap > naive_overlap + 0.05


def test_siblings_are_rows_of_one_fused_layer(outlier_model, tokenizer):
    """q/k/v and gate/up are rows of one fused layer (views of its int8 weight): each member equals
    its rows of the fused product."""
    q8 = quantize_int8(copy.deepcopy(outlier_model), tokenizer)
    attn = q8.model.layers[0].self_attn
    members = (attn.q_proj, attn.k_proj, attn.v_proj)
    fused = attn.q_proj.group[0]
    assert all(m.group == (fused,) for m in members) and fused not in list(q8.modules())
    assert sum(m.out_features for m in members) == fused.out_features
    assert all(m.qweight.untyped_storage().data_ptr() == fused.qweight.untyped_storage().data_ptr() for m in members)
    x = _outlier_input(3, width=fused.in_features)
    with torch.inference_mode():
        assert torch.equal(torch.cat([m(x) for m in members], dim=-1), fused(x))


def test_options_are_checked(outlier_model):
    with pytest.raises(ValueError, match="smooth_alpha"):
        Int8Options(smooth_alpha=1.5)
    with pytest.raises(ValueError, match="tokenizer"):
        quantize_int8(copy.deepcopy(outlier_model))
    plain = quantize_int8(copy.deepcopy(outlier_model), options=Int8Options(smooth_alpha=None))  # no tokenizer needed
    assert isinstance(plain.lm_head, Int8Linear) and plain.model.layers[0].mlp.down_proj.inv_smooth is None


def test_no_deprecated_kernels_and_no_warnings(outlier_model, tokenizer):
    """kernel="int_mm" (the default): quantizing and running raise no warning at all (no quantized
    tensors, no packed params); "packed" (torch.ao's kernel) is no option any more."""
    with pytest.raises(ValueError, match="kernel must be one of int_mm, blocked"):
        Int8Options(kernel="packed")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        q8 = quantize_int8(copy.deepcopy(outlier_model), tokenizer, Int8Options(kernel="int_mm"))
        with torch.inference_mode():
            q8(input_ids=torch.tensor([[1, 5, 9, 12]]))
    assert not any(t.is_quantized for t in q8.buffers()) and not any(hasattr(m, "_packed_params") for m in q8.modules())


def test_one_exported_graph_serves_every_width():
    """Per-token scales for all rows at once: a graph exported at one width with the width symbolic
    gives every other width exactly what the layer gives (the static decode step builds one graph of
    its body for all widths), with no warning."""
    lin = _linear()
    layer = Int8Linear(lin, torch.rand(64) + 0.5).eval()
    assert layer.any_width
    with torch.inference_mode(), warnings.catch_warnings():
        warnings.simplefilter("error")
        rows = torch.export.Dim("rows", min=1, max=1 << 16)
        graph = torch.export.export(layer, (torch.randn(3, 64),), dynamic_shapes=({0: rows},), strict=False).module()
        for n in range(1, 10):
            x = _outlier_input(n, seed=n)
            assert torch.equal(graph(x), layer(x))
