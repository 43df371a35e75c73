"""The screen a sampled step bounds its logits with, per model: built on the first sampled step,
used at the widths where it measured faster than the full float32 head.

A sampled step needs every probability, so the certified argmax of :mod:`argmax_head` does not
decide it; its bf16 screen still bounds every logit, y_i - b <= l_i <= y_i + b with one b a row,
and :mod:`specviz.core.certified` takes the rule's decisions on those bounds (the int8 screen's
per-id bounds are about ten times wider: on gemma-3-270m's code rows up to ~9 logits against the
bf16 screen's ~0.5, too wide to bound a softmax at T = 0.7). Where the model keeps the bf16 screen
for its argmax, that copy serves; where it keeps the int8 one, a bf16 copy is built (half the
head's bytes again) the first time a sampled step asks. Per width, the full head is timed against
the screen's values and bound plus one exponential over the row (what a bounded row costs before
its few exact logits), interleaved, and the choice cached beside the argmax screen's
(``lm_head_kernels.json``). Only where the model's argmax head screens at all (:func:`attach` kept
a screen: a large float32 head, no softcap) and ``SPECVIZ_ARGMAX_HEAD`` is not 0.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
import weakref
from pathlib import Path

import torch

from .. import settings
from . import argmax_head, cpu

log = logging.getLogger(__name__)

SAMPLE = "sample"  # forward_logits(lazy=SAMPLE): a sampled step's logits, bounded where that measured faster

_COPIES: "weakref.WeakKeyDictionary[torch.nn.Module, argmax_head.Screen]" = weakref.WeakKeyDictionary()  # the bf16 copy
_TIMED: "weakref.WeakKeyDictionary[torch.nn.Module, argmax_head.Screen | None]" = weakref.WeakKeyDictionary()  # with its widths
_CACHE_DIRS: "weakref.WeakKeyDictionary[torch.nn.Module, Path | None]" = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def remember_cache_dir(model: torch.nn.Module, cache_dir: str | Path | None) -> None:
    """Where ``model``'s timings are cached (its loader's directory), for the first sampled step."""
    _CACHE_DIRS[model] = Path(cache_dir).expanduser() if cache_dir is not None else None


def setting() -> str:
    value = settings.word("SPECVIZ_SAMPLED_HEAD", "auto")
    if value not in ("auto", "on", "0"):
        raise ValueError(f"SPECVIZ_SAMPLED_HEAD must be auto, on or 0, not {value!r}")
    return value


def screen_for(model: torch.nn.Module, rows: int) -> argmax_head.Screen | None:
    """The bf16 screen a sampled step of ``rows`` rows bounds its logits with, or None (the full head)."""
    mode = setting()
    argmax_screen = argmax_head.screen_of(model)
    if argmax_screen is None or mode == "0":
        return None
    with _LOCK:  # two sessions' first sampled steps build (and time) it once
        if model not in _COPIES:
            _COPIES[model] = (argmax_screen if isinstance(argmax_screen, argmax_head.Screen)
                              else argmax_head.build(model.get_output_embeddings().weight))
        if mode == "on":
            return _COPIES[model]
        if model not in _TIMED:
            _TIMED[model] = _timed(model, _COPIES[model])
    kept = _TIMED[model]
    return kept if kept is not None and kept.used(rows) else None


def _bounded(screen: argmax_head.Screen, h: torch.Tensor) -> torch.Tensor:
    """What a bounded row costs before its exact logits: the values, the bound, one exp a logit."""
    x, off = screen.rows(h)
    y = screen.screen(h, x)
    return torch.exp(y + screen.bound(h, off)[:, None])


def _timed(model: torch.nn.Module, screen: argmax_head.Screen) -> argmax_head.Screen | None:
    """``screen`` with the widths where it measured faster than the full head (cached), or None."""
    head = model.get_output_embeddings()
    t = time.perf_counter()
    shape = tuple(head.weight.shape)
    path = _CACHE_DIRS.get(model)
    path = path / cpu.CACHE_FILE if path is not None else None
    key = (f"sampling screen | {cpu.machine_id()} | torch {torch.__version__} | {torch.get_num_threads()} threads"
           f" | {shape[0]}x{shape[1]} | {'bf16 rows' if screen.dot else 'float32 rows'}")
    times = argmax_head.measured_widths(path, key, lambda: argmax_head.time_widths(head, screen, fast=lambda h: _bounded(screen, h)))
    use_at = argmax_head._use_at(times)
    if not any(use_at):
        log.info("specviz: sampled steps keep the full float32 head (%s)", argmax_head._words(times))
        return None
    log.info("specviz: sampled steps bound their logits through the bf16 screen of the %dx%d head (%s; %.1f s)",
             *shape, argmax_head._words(times), time.perf_counter() - t)
    return dataclasses.replace(screen, use_at=use_at, times=times)


def screen_bytes(model: torch.nn.Module) -> int:
    """Memory ``model``'s head screens take beside its weights: the argmax screen's copy and, where
    that is the int8 one, the bf16 copy a sampled step builds (counted before it is built)."""
    screen = argmax_head.screen_of(model)
    if screen is None:
        return 0
    tensors = [v for v in vars(screen).values() if isinstance(v, torch.Tensor) and v is not screen.weight]
    total = sum(t.numel() * t.element_size() for t in tensors)
    if not isinstance(screen, argmax_head.Screen):
        total += screen.weight.numel() * 2  # the bf16 copy (argmax_head.build)
    return int(total)


def report(model: torch.nn.Module) -> dict | None:
    """The sampled steps' choice and timings, once a sampled step made it: {"widths": {rows: [full ms,
    bounded ms]}, "used": [...]}, or None."""
    screen = _TIMED.get(model)
    if screen is None:
        return None
    return {"widths": {str(r): [round(a, 2), round(b, 2)] for r, (a, b) in screen.times.items()},
            "used": [r for r in range(1, len(screen.use_at)) if screen.use_at[r]], "kind": "bf16 bounds"}
