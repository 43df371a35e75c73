"""Which int8 kernels an ``@int8`` model runs on this machine, measured here and cached.

- The body's products (:func:`choose_kernel`): specviz's own blocked kernel
  (:mod:`specviz.runtime.int8_kernel`) where it builds and measures faster than PyTorch's packed
  one, else the packed one; :func:`kernel_choice` says which and the two timings.
- A large int8 output head (:func:`speed_up_int8_head`, the ``int_mm`` kernel's): oneDNN's int8
  linear with its weight prepacked once at the widths where it beats ``torch._int_mm``, which
  reorders the whole weight on every call (about 1.6x at one row); :func:`int8_head_report`.

Both are cached per machine like the float heads' choices (:mod:`specviz.runtime.cpu`).
"""

from __future__ import annotations

import os
import statistics
import time
import warnings
import weakref
from pathlib import Path
from typing import Any

import torch

from . import cpu, int8_kernel
from .quantize import (
    _QUANTIZED_DEPRECATED,
    HEAD_KERNELS,
    KERNELS,
    LAYERS,
    Int8Linear,
    Int8Options,
    quantize_rows,
)

_onednn_probe: dict[str, bool] = {}  # onednn_exact's


# -- which kernel an @int8 model runs here ------------------------------------------------------

CHOICE_SHAPES = ((4096, 640), (640, 2048), (1536, 640), (640, 1024))  # a body's products (gemma-3-270m's kinds)
CHOICE_LAYERS = 6  # of each: 50 MB of int8 weights, more than a CPU's caches hold, read in turn
CHOICE_ROWS = (1, 2)  # a draft's decode step and its catch-up feed
_choices: dict[str, Any] = {}
_measured: dict[str, dict[str, Any]] = {}  # choose_kernel's timings by key, this process


def time_kernels(kernels: tuple[str, ...] = ("packed", "blocked"), rounds: int = 5) -> dict[str, float]:
    """Seconds for a decode step's worth of one- and two-row products on each kernel: the same
    random float weights quantized for each (:data:`CHOICE_SHAPES` x :data:`CHOICE_LAYERS`, read in
    turn), the kernels interleaved, the least of ``rounds`` per width, summed over :data:`CHOICE_ROWS`."""
    gen = torch.Generator().manual_seed(0)
    floats = [torch.nn.Linear(k, n, bias=False) for n, k in CHOICE_SHAPES for _ in range(CHOICE_LAYERS)]
    for lin in floats:
        lin.weight.data = torch.randn(lin.weight.shape, generator=gen) * 0.02
    layers = {name: [LAYERS[name](lin, None, Int8Options(kernel=name)) for lin in floats] for name in kernels}
    inputs = {rows: {k: torch.randn(rows, k, generator=gen) for _, k in CHOICE_SHAPES} for rows in CHOICE_ROWS}
    best = {name: dict.fromkeys(CHOICE_ROWS, float("inf")) for name in kernels}
    with torch.inference_mode(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", _QUANTIZED_DEPRECATED, UserWarning)
        for r in range(rounds + 1):  # the first round warms every kernel, untimed
            for rows in CHOICE_ROWS:
                for name in (kernels if r % 2 == 0 else kernels[::-1]):
                    t = time.perf_counter()
                    for layer in layers[name]:
                        layer(inputs[rows][layer.in_features])
                    if r:
                        best[name][rows] = min(best[name][rows], time.perf_counter() - t)
    return {name: sum(by_rows.values()) for name, by_rows in best.items()}


def choose_kernel(cache_dir: str | Path | None = None, *, timed: dict[str, float] | None = None) -> str:
    """The int8 kernel an ``@int8`` model runs on this machine: ``"blocked"`` (specviz's own,
    :mod:`specviz.runtime.int8_kernel`) where it builds and measures faster than ``"packed"``
    (:func:`time_kernels`), else ``"packed"``. Measured once per machine, torch version and thread
    count, and cached in ``cache_dir`` (``lm_head_kernels.json``, beside the heads' choices; not
    on a busy machine). ``SPECVIZ_INT8_KERNEL=packed|int_mm|blocked`` names one instead.
    :func:`kernel_choice` says what was chosen and why. ``timed`` stands in for the timing in tests."""
    named = os.environ.get("SPECVIZ_INT8_KERNEL", "")
    if named in KERNELS and (named != "blocked" or int8_kernel.load() is None):  # blocked: built and loaded first
        _choices.update(kernel=named, why=f"SPECVIZ_INT8_KERNEL={named}", timings=None)
        return named
    why_not = int8_kernel.load()
    if why_not is not None:
        _choices.update(kernel="packed", why=f"specviz's own kernel: {why_not}", timings=None)
        return "packed"
    key = f"int8 kernel | {cpu.machine_id()} | torch {torch.__version__} | {torch.get_num_threads()} threads | {int8_kernel._name()}"
    path = Path(cache_dir).expanduser() / cpu.CACHE_FILE if cache_dir is not None else None
    entry = cpu._read_cache(path).get(key) if path is not None else None
    if timed is None and not _has_timings(entry):
        entry = _measured.get(key)  # measured in this process already (another cache directory)
    if not _has_timings(entry):
        times = timed if timed is not None else time_kernels()
        entry = {"ms": {name: round(t * 1e3, 3) for name, t in times.items()}}
        if timed is None:
            _measured[key] = entry
            if path is not None and not cpu.busy():
                cpu._write_cache(path, key, entry)
    ms = entry["ms"]
    kernel = "blocked" if ms.get("blocked", float("inf")) < ms.get("packed", float("inf")) else "packed"
    _choices.update(kernel=kernel, timings=dict(ms), why=(
        f"{kernel} measured faster here: one- and two-row products ({len(CHOICE_SHAPES) * CHOICE_LAYERS} layers) "
        + ", ".join(f"{name} {t:.1f} ms" for name, t in sorted(ms.items(), key=lambda kv: kv[1]))))
    return kernel


def _has_timings(entry: Any) -> bool:
    return isinstance(entry, dict) and isinstance(entry.get("ms"), dict)


def kernel_choice() -> dict[str, Any] | None:
    """The last :func:`choose_kernel` in this process: {"kernel", "why", "timings" (ms or None)}."""
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
