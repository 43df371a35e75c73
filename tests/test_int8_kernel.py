"""specviz's own int8 product (specviz.runtime.int8_kernel) and the kernel an @int8 model runs."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch

from specviz.models import int8
from specviz.models.int8 import Int8Options, quantize_int8
from specviz.runtime import int8_kernel
from specviz.runtime.quantize import BlockedInt8Linear
from tests.support.kernel import NEEDS_OP
from tests.support.tiny import outlier_llama

pytestmark = NEEDS_OP


def _reference(x, ints, scale, bias, inv_smooth):
    """The product the kernel promises, in float64 from the same quantization: each row of x
    (times 1 / smoothing) to uint8 with its own step and zero point (its range widened to hold
    0), then s_m s_n (sum_k u w - z sum_k w) + b."""
    xs = (x * inv_smooth if inv_smooth is not None else x).double()
    lo, hi = xs.amin(1, keepdim=True).clamp(max=0), xs.amax(1, keepdim=True).clamp(min=0)
    step = ((hi - lo) / 255).float().double()
    zero = torch.round(-lo / step).clamp(0, 255)
    u = (torch.round(xs / step) + zero).clamp(0, 255)
    w = ints.double()
    y = step * scale.double() * (u @ w.t() - zero * w.sum(1))
    return (y + bias.double() if bias is not None else y).float()


@pytest.mark.parametrize("out, inp", [(64, 64), (100, 30), (1536, 640), (70, 2051)])
def test_the_kernel_gives_the_exact_integer_product_at_every_width(out, inp):
    """Every width a decode step, a feed or a tree uses (1-20 rows), shapes that need padding
    (outputs not a multiple of 64, inputs not of 4), bias and smoothing: the result equals the
    float64 product of the same uint8 rows and int8 weight to float32 rounding. A sum off by one
    product in 640 would miss it by far more."""
    g = torch.Generator().manual_seed(out + inp)
    ints = torch.randint(-127, 128, (out, inp), dtype=torch.int8, generator=g)
    scale, bias, inv = torch.rand(out, generator=g) / 100, torch.randn(out, generator=g), torch.rand(inp, generator=g) + 0.5
    blocked, wsum = int8_kernel.block(ints)
    assert blocked.shape == (-(-out // 64), -(-inp // 4), 64, 4) and torch.equal(wsum, ints.sum(1, dtype=torch.int32))
    for rows in (1, 2, 3, 4, 5, 9, 20):
        x = torch.randn(rows, inp, generator=g) * 3
        x[:, 1] *= 80  # an outlier channel
        for b, s in ((bias, inv), (None, None)):
            got = int8_kernel.linear(x, blocked, scale, wsum, b, s, out)
            want = _reference(x, ints, scale, b, s)
            assert got.shape == (rows, out)
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-4 * float(want.abs().max()))


def test_a_row_of_one_value_and_a_row_of_zeros():
    """Degenerate rows (every input equal; all zeros) give the exact product, not NaN."""
    ints = torch.randint(-127, 128, (64, 32), dtype=torch.int8)
    blocked, wsum = int8_kernel.block(ints)
    x = torch.stack([torch.full((32,), 2.5), torch.zeros(32)])
    got = int8_kernel.linear(x, blocked, torch.ones(64), wsum, None, None, 64)
    torch.testing.assert_close(got, x @ ints.float().t(), rtol=1e-5, atol=1e-3)


def test_a_blocked_layer_is_close_to_its_float_layer_and_raises_no_warning():
    """The layer: smoothing, per-channel weights and per-token activations; a row's bits the same
    at every width (a prompt's many rows too); nothing deprecated, no warning."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 48)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        layer = BlockedInt8Linear(lin, torch.rand(64) + 0.5).eval()
        with torch.inference_mode():
            x = torch.randn(5, 64)
            x[:, 3] *= 100
            y, ref = layer(x), lin(x)
            assert float((y - ref).norm() / ref.norm()) < 0.02
            alone = torch.cat([layer(x[i : i + 1]) for i in range(5)])
            assert torch.equal(alone, y)  # per-token: a row's neighbours change nothing
    assert layer.any_width and not any(t.is_quantized for t in layer.buffers())
    with torch.inference_mode():
        x = torch.randn(40, 64)
        assert torch.equal(layer(x), torch.cat([layer(x[i : i + 1]) for i in range(len(x))]))  # 40 rows: each as alone


def test_a_blocked_copy_of_a_model_keeps_its_fused_rows_and_its_float_model_close():
    """quantize_int8(kernel="blocked"): q/k/v and gate/up are rows of one fused layer; the model's
    own forward (which calls the rows) gives what the fused layer gives, and stays close to the
    float model's next-token distribution."""
    torch.manual_seed(0)
    model = outlier_llama(128)
    q8 = quantize_int8(copy.deepcopy(model), options=Int8Options(kernel="blocked", smooth_alpha=None))
    attn = q8.model.layers[0].self_attn
    assert type(attn.q_proj) is BlockedInt8Linear and attn.q_proj.group and attn.q_proj.group[0] is attn.k_proj.group[0]
    assert "blocked" not in attn.q_proj._buffers  # a row blocks its part only when called
    x = torch.randn(3, attn.q_proj.in_features)
    with torch.inference_mode():
        fused = attn.q_proj.group[0](x)
        assert torch.equal(torch.cat([attn.q_proj(x), attn.k_proj(x), attn.v_proj(x)], -1), fused)
        ids = torch.tensor([[1, 5, 9, 12, 7, 5]])
        p, q = (torch.softmax(m(input_ids=ids).logits[0], -1) for m in (model, q8))
    assert float(torch.minimum(p, q).sum(-1).mean()) > 0.9


def test_an_int8_model_runs_specviz_kernel_where_it_builds_else_int_mm(monkeypatch):
    """choose_kernel: blocked where specviz's kernel loads, said in words; torch._int_mm where it
    does not (no compiler) or where SPECVIZ_INT8_KERNEL=int_mm asks for it."""
    monkeypatch.delenv("SPECVIZ_INT8_KERNEL", raising=False)
    assert int8.choose_kernel() == "blocked" and "built for this CPU" in int8.kernel_choice()["why"]
    monkeypatch.setattr(int8_kernel, "load", lambda options=None: "no C++ compiler")
    assert int8.choose_kernel() == "int_mm" and "no C++ compiler" in int8.kernel_choice()["why"]
    monkeypatch.undo()
    monkeypatch.setenv("SPECVIZ_INT8_KERNEL", "int_mm")
    assert int8.choose_kernel() == "int_mm" and "SPECVIZ_INT8_KERNEL" in int8.kernel_choice()["why"]


def test_a_named_blocked_kernel_is_loaded_before_the_copy_is_built(monkeypatch):
    """SPECVIZ_INT8_KERNEL=blocked: the op is loaded by the choice itself (a copy read from the disk
    cache builds its layers without quantize_int8's check), and needs_build says nothing is left."""
    monkeypatch.setenv("SPECVIZ_INT8_KERNEL", "blocked")
    assert int8.choose_kernel() == "blocked" and hasattr(torch.ops.specviz_int8, "linear")
    assert not int8_kernel.needs_build()
