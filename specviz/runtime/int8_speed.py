"""Which int8 kernels an ``@int8`` model runs on this machine.

- The body's products (:func:`choose_kernel`): specviz's own blocked kernel
  (:mod:`specviz.runtime.int8_kernel`) where it builds, else ``torch._int_mm``;
  :func:`kernel_choice` says which and why.
- A large int8 output head (:func:`speed_up_int8_head`, the ``int_mm`` kernel's): oneDNN's int8
  linear with its weight prepacked once at the widths the model's plan names (``torch._int_mm``
  reorders the whole weight on every call: about 1.6x slower at one row); :func:`int8_head_report`.
  ``specviz tune`` measures it (:func:`measure`) with the float kernels (:mod:`specviz.runtime.plan`).
"""

from __future__ import annotations

import time
from typing import Any

import torch

from .. import settings
from . import cpu, int8_kernel, state
from .quantize import HEAD_KERNELS, Int8Linear, quantize_rows

_onednn_probe: dict[str, bool] = {}  # onednn_exact's


# -- which kernel an @int8 model runs here ------------------------------------------------------

_choices: dict[str, Any] = {}


def choose_kernel() -> str:
    """The int8 kernel an ``@int8`` model runs here: ``"blocked"`` (specviz's own,
    :mod:`specviz.runtime.int8_kernel`, built for this CPU) where it builds and loads, else
    ``"int_mm"`` (``torch._int_mm``, in every torch build: the fallback where no compiler is
    there). ``SPECVIZ_INT8_KERNEL=int_mm`` asks for ``int_mm``; ``blocked`` is given only where it
    loads. :func:`kernel_choice` says what was chosen and why."""
    named = settings.value("SPECVIZ_INT8_KERNEL")
    if named == "int_mm":
        _choices.update(kernel=named, why=f"SPECVIZ_INT8_KERNEL={named}")
        return named
    why_not = int8_kernel.load()
    if why_not is not None:
        _choices.update(kernel="int_mm", why=f"specviz's own kernel: {why_not}")
        return "int_mm"
    _choices.update(kernel="blocked", why=f"SPECVIZ_INT8_KERNEL={named}" if named == "blocked" else
                    "specviz's own kernel, built for this CPU")
    return "blocked"


def kernel_choice() -> dict[str, Any] | None:
    """The last :func:`choose_kernel` in this process: {"kernel", "why"}."""
    return dict(_choices) if _choices else None


# -- the head's kernel per width -----------------------------------------------------------------


def onednn_exact() -> bool:
    """Whether oneDNN's int8 linear gives exact integer products here: without VNNI, x86 int8
    kernels add pairs of uint8 x int8 products in int16, and 2 x 255 x 127 overflows it. Probed
    once (the largest products, against ``_int_mm``); False where the op is missing."""
    if "exact" not in _onednn_probe:
        try:
            w = torch.full((16, 64), 127, dtype=torch.int8)  # [out, in]
            x = torch.full((2, 64), 127, dtype=torch.int8)  # -> uint8 255
            layer = Int8Linear.__new__(Int8Linear)
            torch.nn.Module.__init__(layer)
            layer.out_features, layer._packed = 16, None
            layer.register_buffer("qweight", w)
            layer.register_buffer("scale", torch.ones(16))
            got = layer._onednn(x)  # [2, 16]
            _onednn_probe["exact"] = bool(torch.equal(got, torch._int_mm(x, w.t()).float()))
        except (RuntimeError, AttributeError):
            _onednn_probe["exact"] = False
    return _onednn_probe["exact"]


def time_int8_head(layer: Int8Linear, rows: int, repeats: int = 5) -> dict[str, float]:
    """{kernel: min ms} of ``_int_mm`` and oneDNN on ``rows`` random rows through ``layer``'s
    weight, interleaved (the order reversed every other round)."""
    x = torch.randn(rows, layer.in_features)  # [rows, in]
    xq, _ = quantize_rows(x, True, 127.0)
    kernels = {HEAD_KERNELS[0]: lambda: torch._int_mm(xq, layer.qweight.t()), HEAD_KERNELS[1]: lambda: layer._onednn(xq)}
    times: dict[str, list[float]] = {k: [] for k in kernels}
    with torch.inference_mode():
        [k() for k in kernels.values()]  # warm both (and prepack)
        for r in range(repeats):
            for name in (HEAD_KERNELS if r % 2 == 0 else HEAD_KERNELS[::-1]):
                t = time.perf_counter()
                kernels[name]()
                times[name].append((time.perf_counter() - t) * 1e3)
    return {k: round(min(v), 3) for k, v in times.items()}


def _int8_head(model: torch.nn.Module) -> Int8Linear | None:
    """The model's large int8 head where oneDNN's products are exact here, else None."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if cpu.disabled() or type(head) is not Int8Linear or head.qweight.numel() < cpu.MIN_HEAD_ELEMENTS:
        return None
    return head if torch.backends.mkldnn.is_available() and onednn_exact() else None


def measure(model: torch.nn.Module, _kinds=None):
    """``specviz tune``'s "int8_head" kind: ``_int_mm`` against oneDNN's prepacked kernel per width."""
    from . import plan

    head = _int8_head(model)
    if head is None:
        return None
    ms = {r: time_int8_head(head, r) for r in plan.WIDTHS}
    return plan.KindPlan({r: plan.choose(m, HEAD_KERNELS) for r, m in ms.items()}, ms)


def speed_up_int8_head(model: torch.nn.Module) -> bool:
    """Give the model's int8 output head oneDNN's prepacked kernel at the widths its plan names
    (its "int8_head" kind; without a tuned plan, every width where oneDNN's products are exact,
    :func:`onednn_exact`). Only heads of at least ``cpu.MIN_HEAD_ELEMENTS`` weights;
    ``SPECVIZ_CPU_HEAD=0`` turns it off. -> whether any width runs on oneDNN."""
    from . import plan

    head = _int8_head(model)
    if head is None:
        return False
    kind = plan.of(model).kind("int8_head", default=HEAD_KERNELS[1])  # the CPU's default: oneDNN, where exact
    head.onednn_at = (False,) + tuple(k == HEAD_KERNELS[1] for k in kind.by_width(plan.WIDTHS[-1]))
    if not any(head.onednn_at):
        head._packed = None  # not used: free it
    state.of(model).extra["int8_head"] = kind
    return any(head.onednn_at)


def int8_head_report(model: torch.nn.Module) -> dict[str, Any] | None:
    """The int8 head's kernel per width and timings (ms), as a float head's report; None when the
    head runs no plan here."""
    from . import plan

    head = _int8_head(model)
    held = state.peek(model)
    kind = held.extra.get("int8_head") if held is not None and head is not None else None
    if kind is None:
        return None
    report = plan.report(kind, head.qweight.shape, torch.int8, any(head.onednn_at))
    report["kernels"] = list(HEAD_KERNELS)
    return report
