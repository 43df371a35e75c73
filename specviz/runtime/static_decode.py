"""A lean decode step: static KV buffers, one body per model, run by a runner.

A small model's decode step is mostly Python and small ops, not products. This module runs the
forward as one function of tensors (:class:`~specviz.runtime.body.DecoderBody`) for n new tokens
(a draft step, a verify pass, a prompt, a tree's nodes) on preallocated K/V buffers
[layers, kv_heads, capacity, head_dim], written in place, read under an additive [n, S] mask (a
rollback moves the length). A :class:`~specviz.runtime.body.Runner` runs the body: the one
``SPECVIZ_STATIC_DECODE`` names, else ``cuda`` on a GPU, ``fused`` (:mod:`specviz.runtime.layer_op`)
where :func:`layer_op.why_not` allows, else ``eager``; never chosen by timing, so a seed gives the
same tokens on every start. A runner that fails gives way to eager (said once, the call rerun).
Where :func:`supports` refuses, or with ``SPECVIZ_STATIC_DECODE=0``, the ``transformers`` forward
serves; the logits match it to float rounding (tests/test_static_decode.py, test_families.py).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
import weakref
from collections.abc import Iterable

import torch

from .. import settings
from . import argmax_head, cuda_step, layer_op, sampled_head, state
from .body import EAGER, FAMILIES, DecoderBody, Runner, Step, family_why_not, rows_at_once
from .step_masks import step_masks

log = logging.getLogger(__name__)

DTYPES = (torch.float32, torch.bfloat16)  # the weights the body serves
MIN_CAPACITY = 128  # positions a new cache holds; it doubles when full
SPAN = 64  # attention reads the buffers up to the position rounded up to a multiple of this
RUNNERS = {r.name: r for r in (EAGER, layer_op.RUNNER, cuda_step.RUNNER)}  # what SPECVIZ_STATIC_DECODE may name
_OFF, _ON = ("0", "false", "no", "off"), ("", "1", "true", "yes", "on", "auto")


def mode(options: settings.Options | None = None) -> str:
    """``SPECVIZ_STATIC_DECODE`` (``options.static_decode``, the environment's without): "off" (``0``),
    "auto" (unset: :func:`runner_for` chooses) or a runner's name (that one, eager if it fails)."""
    value = (options or settings.options()).static_decode
    if value in _OFF:
        return "off"
    if value in RUNNERS:
        return value
    if value not in _ON:
        _say_unknown(value)
    return "auto"


@functools.cache
def _say_unknown(value: str) -> None:
    gone = " (compile, export and `all`'s choice by timing were removed)" if value in ("all", "compile", "export") else ""
    log.warning("specviz: SPECVIZ_STATIC_DECODE=%r is none of 0, auto, %s%s; using auto", value, ", ".join(RUNNERS), gone)


def enabled(options: settings.Options | None = None) -> bool:
    return mode(options) != "off"


def runner_for(body: torch.nn.Module, options: settings.Options | None = None) -> Runner:
    """The runner :func:`mode` asks for ``body``: the one named, else fused where
    :func:`layer_op.why_not` allows, else eager (which serves every body)."""
    how = mode(options)
    if how in RUNNERS:
        return RUNNERS[how]
    if body.embedding.is_cuda:  # a GPU: the body replayed from CUDA graphs (cuda_step)
        return cuda_step.RUNNER
    return layer_op.RUNNER if layer_op.why_not(body) is None else EAGER


def supports(model: torch.nn.Module) -> str | None:
    """Why ``model`` cannot use the static step (a sentence), or None when it can."""
    cfg = getattr(model, "config", None)
    text = cfg.get_text_config() if cfg is not None and hasattr(cfg, "get_text_config") else cfg
    kind = getattr(text, "model_type", None)
    if kind not in FAMILIES:
        return f"architecture {kind!r} is not one of {', '.join(FAMILIES)}"
    body = getattr(model, "model", None)
    if body is None or not isinstance(getattr(body, "layers", None), torch.nn.ModuleList):
        return "no decoder layer list at model.model.layers"
    weight = body.embed_tokens.weight
    if weight.device.type not in ("cpu", "cuda") or weight.dtype not in DTYPES:
        return f"weights are {weight.dtype} on {weight.device}, not float32 or bfloat16 on the CPU or a CUDA GPU"
    if len(body.layers) != text.num_hidden_layers:
        return "the layer list and the config disagree"
    if not rows_at_once(body.layers):
        return "a projection that is neither an nn.Linear nor one of specviz's own"
    return family_why_not(model, text)  # what of this family's config the body serves


class StaticKV:
    """One session's K/V buffers for a :class:`StaticDecoder`; a DynamicCache stand-in for
    ``specviz.runtime.kv`` (``get_seq_length``, ``crop``) and ``forward_logits`` (:meth:`run`)."""

    def __init__(self, decoder: "StaticDecoder"):
        self.decoder = decoder
        self.length = 0
        self.keys = self.values = None  # [layers, kv, C, hd] once the first token arrives

    @property
    def capacity(self) -> int:
        return 0 if self.keys is None else int(self.keys.shape[2])

    def get_seq_length(self) -> int:
        return self.length

    def crop(self, tokens_to_remove: int) -> None:
        """transformers 5's crop: drop the last ``-tokens_to_remove`` positions (0: none)."""
        if tokens_to_remove > 0:
            raise ValueError(f"crop takes minus the number of positions to drop, got {tokens_to_remove}")
        self.length = max(0, self.length + tokens_to_remove)

    def reserve(self, n: int) -> None:
        """Room for ``n`` positions (buffers doubled and copied when full)."""
        if n <= self.capacity:
            return
        options = state.options_of(self.decoder._model())
        size = max(cuda_step.CAPACITY if runner_for(self.decoder.body, options) is cuda_step.RUNNER else MIN_CAPACITY, self.capacity)
        while size < n:
            size *= 2
        keys, values = self.decoder.buffers(size)
        if self.keys is not None:
            keys[:, :, : self.length] = self.keys[:, :, : self.length]
            values[:, :, : self.length] = self.values[:, :, : self.length]
        self.keys, self.values = keys, values

    def run(self, input_ids: torch.Tensor, keep: int = 1, lazy: bool = False):
        """Feed ``input_ids`` [n] after the cached positions -> float32 logits of the last ``keep`` [keep, V]
        (``lazy``: a :class:`~specviz.runtime.argmax_head.HeadLogits` where the model screens its head)."""
        return self.decoder.run(self, input_ids, keep, lazy)

    def run_tree(self, tokens: torch.Tensor, positions: torch.Tensor, visible: torch.Tensor, lazy: bool = False,
                 fed: torch.Tensor | None = None):
        """A token tree's nodes in one step (:meth:`StaticDecoder.run_tree`) -> logits [m, V]."""
        return self.decoder.run_tree(self, tokens, positions, visible, lazy, fed)

    @torch.inference_mode()  # the buffers are inference tensors
    def keep_slots(self, tail: int, keep: torch.Tensor) -> None:
        """Of the last ``tail`` slots keep only those at ``keep`` (indices into the tail, in
        order), moved down to follow the context: a tree's accepted path."""
        base = self.length - tail
        src = base + keep.to(torch.long).cpu()  # [j]
        j = int(src.shape[0])
        self.keys[:, :, base : base + j] = self.keys[:, :, src]  # the gather copies before the write
        self.values[:, :, base : base + j] = self.values[:, :, src]
        self.length = base + j

    def __deepcopy__(self, memo) -> "StaticKV":  # a copy of the buffers, the same decoder
        twin = StaticKV(self.decoder)
        twin.length = self.length
        if self.keys is not None:
            twin.keys, twin.values = self.keys.clone(), self.values.clone()
        return twin


class StaticDecoder:
    """The static step of one model (shared by every session that drafts or verifies with it)."""

    def __init__(self, model: torch.nn.Module):
        self._model = weakref.ref(model)  # the model holds this decoder (state.of): no strong reference back
        self.text = model.config.get_text_config()
        self.body = DecoderBody(model).eval()
        self.shape = (self.text.num_hidden_layers, self.body.kv_heads, self.body.head_dim)
        self.window = getattr(self.text, "sliding_window", None) if any(self.body.local) else None
        self.softcap = getattr(self.text, "final_logit_softcapping", None)
        self.label = type(model).__name__ + (" (int8)" if layer_op.products_kind(self.body) == "int8" else "")
        self._runner = runner_for(self.body, state.of(model).options)  # chosen now, built on the first call (or warm)
        self.runner: str | None = None  # the runner whose step serves (None before the first build)
        self.build_s = 0.0  # seconds spent building steps
        self._step: Step | None = None
        self._tables: tuple[torch.Tensor, ...] | None = None  # cos, sin, cos_local, sin_local [C, hd]
        self._lock = threading.Lock()  # the rotary tables
        self._build_lock = threading.Lock()  # the step

    @property
    def model(self) -> torch.nn.Module:
        model = self._model()
        if model is None:
            raise RuntimeError("the model of this static decode step was freed")
        return model

    def new_cache(self) -> StaticKV:
        return StaticKV(self)

    def buffers(self, capacity: int) -> tuple[torch.Tensor, torch.Tensor]:
        L, kv, hd = self.shape
        dtype = self.body.dtype
        device = self.body.embedding.device
        return (torch.zeros(L, kv, capacity, hd, dtype=dtype, device=device),
                torch.zeros(L, kv, capacity, hd, dtype=dtype, device=device))

    def _rotary(self, capacity: int) -> tuple[torch.Tensor, ...]:
        """cos, sin for global and local layers over positions 0..capacity-1 (each [>= C, hd])."""
        tables = self._tables
        if tables is None or tables[0].shape[0] < capacity:
            with self._lock:
                positions = torch.arange(capacity)[None]  # [1, C]
                x = torch.zeros(1, 1, self.text.hidden_size)
                rotary = self.model.model.rotary_emb
                if self.body.gemma:  # a table per layer type present (all sliding, all full or mixed)
                    kinds = set(self.text.layer_types)
                    full = [t[0] for t in rotary(x, positions, "full_attention")] if "full_attention" in kinds else None
                    local = [t[0] for t in rotary(x, positions, "sliding_attention")] if self.window else None
                    cos, sin = full or local
                    cos_l, sin_l = local or full
                else:
                    cos, sin = (t[0] for t in rotary(x, positions))
                    cos_l, sin_l = cos, sin
                # in the weights' dtype, as transformers' rotary modules return them
                tables = self._tables = tuple(t.float().to(self.body.dtype) for t in (cos, sin, cos_l, sin_l))
        return tables

    def _inputs(self, cache: StaticKV, tokens: torch.Tensor, p: int, positions: torch.Tensor | None = None,
                visible: torch.Tensor | None = None, fed: torch.Tensor | None = None) -> tuple:
        """The body's inputs for ``tokens`` [n] at slots p..p+n-1 (a tree's: ``positions``,
        ``visible``, ``fed`` as :func:`~specviz.runtime.step_masks.step_masks` takes them). Masks
        span S = p + n rounded up to SPAN, so attention's cost follows the context, not the capacity."""
        n = int(tokens.shape[0])
        cos, sin, cos_l, sin_l = self._rotary(cache.capacity)
        span = min(cache.capacity, -(-(p + n) // SPAN) * SPAN)
        slots, positions, mask, mask_local = step_masks(p, n, span, self.window, positions, visible, fed)  # [n], [n], 2 x [n, S]
        rot = [t[positions, None] for t in (cos, sin, cos_l, sin_l)]  # each [n, 1, hd]
        rows = (t.to(cache.keys.device) for t in (tokens, slots, *rot, mask, mask_local))  # built on the CPU
        return (*rows, cache.keys, cache.values)  # buffers [layers, kv, C, hd]

    def prepare(self, example: tuple) -> Step:
        """The step, built on first use; a runner that cannot build gives way to eager."""
        if self._step is None:
            with self._build_lock:
                if self._step is None:
                    runner = self._runner
                    try:
                        self._step = self._build(runner, example)
                    except Exception as e:
                        if runner is EAGER:
                            raise
                        log.warning("specviz: no %s static decode step for %s (%s: %s)", runner.name, self.label,
                                    type(e).__name__, e)
                        self._step = self._build(EAGER, example)
        return self._step

    def _build(self, runner: Runner, example: tuple) -> Step:
        t = time.perf_counter()
        step = runner.build(self.body, example)
        seconds = time.perf_counter() - t
        self.build_s += seconds
        self.runner = runner.name
        _built_s.append(seconds)
        _kept.append(runner.name)
        log.info("specviz: built the %s static decode step of %s in %.1f s", runner.name, self.label, seconds)
        return step

    def _call(self, example: tuple) -> torch.Tensor:
        """The body on ``example`` through the step; one that raises gives way to eager from then
        on, and this call is rerun eagerly (it writes the same slots)."""
        step = self.prepare(example)
        try:
            return step(*example)
        except Exception as e:
            if step is self.body:
                raise
            with self._build_lock:
                if self._step is step:  # not another thread's fall-back already
                    log.warning("specviz: the %s static decode step of %s failed (%s: %s); running it eagerly from now on",
                                self.runner, self.label, type(e).__name__, e)
                    self._step, self.runner = self.body, EAGER.name
                    _kept.append(EAGER.name)
            return self.body(*example)

    @torch.inference_mode()
    def run(self, cache: StaticKV, input_ids: torch.Tensor, keep: int = 1, lazy: bool = False):
        """``input_ids`` [n] (a prompt, a token, a verify pass) after the cached positions, in one
        call of the step -> logits of the last ``keep`` [keep, V] (``lazy``: see :meth:`_head`)."""
        n, start = int(input_ids.shape[0]), cache.length
        if not 1 <= keep <= n:
            raise ValueError(f"keep must lie in 1..{n}, got {keep}")
        cache.reserve(start + n)
        hidden = self._call(self._inputs(cache, input_ids, start))[n - keep :]  # [keep, d]
        cache.length = start + n
        return self._head(hidden, lazy)  # [keep, V]

    @torch.inference_mode()
    def run_tree(self, cache: StaticKV, tokens: torch.Tensor, positions: torch.Tensor, visible: torch.Tensor,
                 lazy: bool = False, fed: torch.Tensor | None = None):
        """A token tree's nodes ``tokens`` [m] at ``positions`` [m] in one call, each seeing the
        context and what ``visible`` [m, T + m] allows (T: tree slots fed earlier this step, at
        positions ``fed`` [T]) -> logits [m, V]. :meth:`StaticKV.keep_slots` keeps the accepted path."""
        m, start = int(tokens.shape[0]), cache.length
        T = 0 if fed is None else int(fed.shape[0])
        if tuple(visible.shape) != (m, T + m) or T > start:
            raise ValueError(f"visible must be [{m}, {T + m}] over the {T} tree slots fed before and the {m} new nodes")
        cache.reserve(start + m)
        example = self._inputs(cache, tokens, start, positions.cpu(), visible.cpu(), None if fed is None else fed.cpu())
        hidden = self._call(example)  # [m, d]
        cache.length = start + m
        return self._head(hidden, lazy)

    def _head(self, hidden: torch.Tensor, lazy: bool | str = False):
        """Logits [rows, V] of hidden [rows, d]; ``lazy`` (True: a greedy step): logits computed only
        when read (a certified argmax screen, or a ``vocab=N`` head's ``lazy_logits``); ``lazy`` =
        ``sampled_head.SAMPLE``: every logit bounded by the bf16 screen where the plan uses it."""
        if not lazy:
            return self._full_head(hidden)
        if lazy == sampled_head.SAMPLE:
            screen = sampled_head.screen_for(self.model, hidden.shape[0])
            return argmax_head.HeadLogits(hidden, self._full_head, screen) if screen is not None else self._full_head(hidden)
        screen = argmax_head.screen_of(self.model, hidden.shape[0])
        if screen is not None:
            return argmax_head.HeadLogits(hidden, self._full_head, screen)
        part = getattr(self.model.get_output_embeddings(), "lazy_logits", None)
        if part is not None and not self.softcap:
            return part(hidden, torch.float32)
        return self._full_head(hidden)

    def _full_head(self, hidden: torch.Tensor) -> torch.Tensor:
        head = self.model.get_output_embeddings()  # on a GPU on a fixed count of rows (cuda_step.head_rows)
        logits = (cuda_step.head_rows(head, hidden) if self.runner == "cuda" else head(hidden)).float()  # [rows, V]
        if self.softcap:
            logits = torch.tanh(logits / self.softcap) * self.softcap
        return logits


def warm(model: torch.nn.Module, widths: Iterable[int] = (1,)) -> float:
    """Build ``model``'s static step now, so a session's first timed step does not pay for it
    (one step serves every width in ``widths``) -> seconds spent (0.0: built already, or not served)."""
    cache = static_cache(model)
    if cache is None or cache.decoder._step is not None:
        return 0.0
    t = time.perf_counter()
    with torch.inference_mode():
        cache.reserve(1)
        cache.decoder.prepare(cache.decoder._inputs(cache, torch.zeros(1, dtype=torch.long), 0))
    return time.perf_counter() - t


_built_s: list[float] = []  # seconds of each step this process built
_kept: list[str] = []  # the runner of each step built or fallen back to, in order


def build_seconds() -> float:
    """Seconds this process has spent building static decode steps."""
    return sum(_built_s)


def runners_kept() -> str:
    """The runners this process's static decode steps kept ("fused", "fused, eager", ...; "" if none)."""
    return ", ".join(dict.fromkeys(_kept))


def static_cache(model: torch.nn.Module) -> StaticKV | None:
    """A new session cache on ``model``'s static step (one per model, ``state.of(model).decoder``),
    or None where :func:`supports` refuses or ``SPECVIZ_STATIC_DECODE=0``."""
    if not enabled(state.of(model).options):
        return None
    why = supports(model)  # checked per session: a model moved to a GPU since is no longer served
    if why is not None:
        log.debug("specviz: no static decode step for %s: %s", type(model).__name__, why)
        return None
    runtime = state.of(model)
    with runtime.lock:
        if runtime.decoder is None:
            runtime.decoder = StaticDecoder(model)
    return runtime.decoder.new_cache()


__all__ = ["RUNNERS", "StaticDecoder", "StaticKV", "build_seconds", "mode", "runner_for",
           "runners_kept", "static_cache", "supports", "warm"]
