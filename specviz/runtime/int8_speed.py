"""Which int8 kernels an ``@int8`` model runs on this machine.

- The body's products (:func:`choose_kernel`): specviz's own blocked kernel
  (:mod:`specviz.runtime.int8_kernel`) where it builds, else ``torch._int_mm``;
  :func:`kernel_choice` says which and why.
- A large int8 output head (:func:`speed_up_int8_head`, the ``int_mm`` kernel's): oneDNN's int8
  linear with its weight prepacked once at the widths where it beats ``torch._int_mm``, which
  reorders the whole weight on every call (about 1.6x at one row); :func:`int8_head_report`.

The head's choice is cached per machine like the float heads' (:mod:`specviz.runtime.cpu`).
"""

from __future__ import annotations

import statistics
import time
import weakref
from pathlib import Path
from typing import Any

import torch

from .. import settings
from . import cpu, int8_kernel
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


def time_int8_head(layer: Int8Linear, repeats: int = 3):
    """(weight, rows) -> median seconds of (``_int_mm``, oneDNN) on ``rows`` random rows through
    ``layer``'s weight, interleaved as :func:`specviz.runtime.cpu.time_head` does (the weight
    argument is the layer's own int8 weight, passed for the cache's key)."""
    def time_width(_weight: torch.Tensor, rows: int) -> tuple[float, float]:
        x = torch.randn(rows, layer.in_features)  # [rows, in]
        xq, _ = quantize_rows(x, True, 127.0)
        kernels = (lambda: torch._int_mm(xq, layer.qweight.t()), lambda: layer._onednn(xq))
        times: tuple[list[float], list[float]] = ([], [])
        with torch.inference_mode():
            if rows == 1:
                kernels[0](), kernels[1]()  # warm both once (and prepack)
            for r in range(repeats):
                for i in ((0, 1) if r % 2 == 0 else (1, 0)):
                    t = time.perf_counter()
                    kernels[i]()
                    times[i].append(time.perf_counter() - t)
        return statistics.median(times[0]), statistics.median(times[1])

    return time_width


_HEAD_PLANS: "weakref.WeakKeyDictionary[Int8Linear, tuple[Any, bool]]" = weakref.WeakKeyDictionary()


def speed_up_int8_head(model: torch.nn.Module, cache_dir: str | Path | None = None, *, time_width=None) -> bool:
    """Give the model's int8 output head oneDNN's prepacked kernel at the widths where it measures
    faster than ``_int_mm`` (under ``cpu.FASTER`` of its time), as :func:`specviz.runtime.cpu.speed_up_lm_head`
    does for a float head: timed at rows 1..``cpu.MEASURED_ROWS`` or read from ``cache_dir``'s cache
    (per machine, torch, threads, shape and dtype int8). Only heads of at least ``cpu.MIN_HEAD_ELEMENTS``
    weights, where oneDNN's products are exact (:func:`onednn_exact`); ``SPECVIZ_CPU_HEAD=0`` turns
    it off. -> whether any width runs on oneDNN."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if cpu.disabled() or type(head) is not Int8Linear or head.qweight.numel() < cpu.MIN_HEAD_ELEMENTS:
        return False
    if not torch.backends.mkldnn.is_available() or not onednn_exact():
        return False
    plan = cpu.plan_head(head.qweight, cache_dir, time_width=time_width or time_int8_head(head))
    head.onednn_at = plan.onednn_at
    if not any(plan.onednn_at):
        head._packed = None  # not used: free it
    _HEAD_PLANS[head] = (plan, any(plan.onednn_at))
    return any(plan.onednn_at)


def int8_head_report(model: torch.nn.Module) -> dict[str, Any] | None:
    """The int8 head's kernel per width and both timings (ms), as ``cpu.head_kernel_report`` gives
    a float head's (its ``f_linear_ms`` column is ``_int_mm`` here: ``kernels`` names them); None
    when the head was not measured."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    found = _HEAD_PLANS.get(head) if isinstance(head, Int8Linear) else None
    if found is None:
        return None
    report = cpu.plan_report(*found)
    report["kernels"] = list(HEAD_KERNELS)
    for w in report["by_rows"]:
        w["kernel"] = HEAD_KERNELS[0] if w["kernel"] == cpu.KERNELS[0] else HEAD_KERNELS[1]
    report["wider"] = HEAD_KERNELS[0] if report["wider"] == cpu.KERNELS[0] else HEAD_KERNELS[1]
    return report
