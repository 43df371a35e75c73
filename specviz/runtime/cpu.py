"""A measured CPU fast path for the LM head of large-vocabulary models.

Verifying k drafts runs the target's LM head on k + 1 rows at once. On x86 CPUs PyTorch's fp32
``F.linear`` switches GEMM kernels at 4 rows, and a large head's cost nearly doubles there:
gemma-3-270m's 262,144 x 640 head on 2 threads takes 34 ms for 3 rows, 63 ms for 4 and 102 ms
for 9, while oneDNN's linear (``torch.ops.mkldnn._linear_pointwise``, the kernel Inductor uses)
takes 44, 44 and 55 ms (``python benchmarks/lm_head.py``). Whether that holds on another CPU is measured,
not assumed: :func:`speed_up_lm_head` times both kernels on the model's own head when it is loaded
and only switches when oneDNN is faster. Both compute the same product; they differ in float
rounding (~1e-4 on logits), as any two GEMM kernels do.

Only the output head is wrapped (the body's small matrices do not gain), only for float32 on the
CPU, and ``SPECVIZ_CPU_HEAD=0`` turns it off.
"""

from __future__ import annotations

import os
import time

import torch
import torch.nn.functional as F

MIN_HEAD_ELEMENTS = 8_000_000  # smaller heads are fast either way
WIDE_ROWS = 4  # F.linear's kernel switch; below it F.linear is the faster one


def _onednn_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """oneDNN's fp32 linear: [rows, in] -> [rows, out]."""
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


class RowAdaptiveLinear(torch.nn.Module):
    """Wraps an ``nn.Linear``: ``F.linear`` for fewer than ``WIDE_ROWS`` rows, oneDNN from there.
    Holds the same weight (tied embeddings stay tied); behaves as the wrapped layer otherwise."""

    def __init__(self, linear: torch.nn.Linear):
        super().__init__()
        self.linear = linear

    @property
    def weight(self) -> torch.Tensor:  # HF code may read lm_head.weight
        return self.linear.weight

    @property
    def bias(self) -> torch.Tensor | None:
        return self.linear.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [..., in] -> [..., out]
        lin = self.linear
        rows = x.numel() // max(1, x.shape[-1])
        if rows < WIDE_ROWS or type(lin) is not torch.nn.Linear or lin.weight.dtype != torch.float32:
            return lin(x)
        y = _onednn_linear(x.reshape(rows, x.shape[-1]), lin.weight, lin.bias)  # [rows, out]
        return y.reshape(*x.shape[:-1], y.shape[-1])


def time_head(weight: torch.Tensor, rows: int, repeats: int = 3) -> tuple[float, float]:
    """Median seconds of (F.linear, oneDNN) on ``rows`` random rows through ``weight`` [out, in]."""
    x = torch.randn(rows, weight.shape[1], dtype=weight.dtype)

    def median(fn) -> float:
        fn()  # warm
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        return sorted(times)[len(times) // 2]

    with torch.inference_mode():
        return median(lambda: F.linear(x, weight)), median(lambda: _onednn_linear(x, weight, None))


def speed_up_lm_head(model: torch.nn.Module) -> bool:
    """Wrap the model's output head in :class:`RowAdaptiveLinear` when it is a large fp32
    ``nn.Linear`` on the CPU and oneDNN measures faster on it at 5 and 9 rows. -> whether it did."""
    if os.environ.get("SPECVIZ_CPU_HEAD", "").strip().lower() in ("0", "false", "no", "off"):
        return False
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if type(head) is not torch.nn.Linear or head.weight.device.type != "cpu" or head.weight.dtype != torch.float32:
        return False
    if head.weight.numel() < MIN_HEAD_ELEMENTS or not torch.backends.mkldnn.is_available():
        return False
    try:
        faster = all(onednn < plain * 0.9 for plain, onednn in (time_head(head.weight, r) for r in (5, 9)))
    except (RuntimeError, AttributeError):  # an op missing from this build
        return False
    if faster:
        model.set_output_embeddings(RowAdaptiveLinear(head))
    return faster
