"""A lean decode step on the CPU: static KV buffers, one body per model, run by a runner.

For a small model most of a decode step is not the matrix products: gemma-3-270m's int8 copy
spends about 6 ms of a 24 ms token in its int8 GEMMs and the rest in Python and in ~2,000 small
ops (module calls, RMSNorm's five ops, mask building, the DynamicCache's concatenations); the
fp32 target pays the same ~10 ms on every verify pass. This module writes the same forward as a
single function of tensors for n new tokens at positions p..p+n-1 (n = 1: a draft's step or
target-only decoding; n = k + 1: the target's verify pass):

- the KV cache is a pair of preallocated buffers [layers, kv_heads, capacity, head_dim] written in
  place (``index_copy_``) and read up to the context, with an additive [n, S] mask per attention
  type (causal, and the sliding window for Gemma 3's local layers); a rollback moves the length;
- RMSNorm is one fused ``F.rms_norm`` with its scale precomputed (Gemma's 1 + w);
- the rotary tables come from the model's own rotary module, once per capacity;
- the function runs through a runner (:mod:`specviz.runtime.runners`): ``eager`` (op by op from
  Python), ``compile`` (``torch.compile``: one decoder layer compiled, shared by every layer),
  ``export`` (``torch.export`` + AOTInductor, a package on disk built once per model and torch
  version) or, for an int8 body on specviz's kernel, ``fused`` (each layer one C++ op: :mod:`specviz.runtime.layer_op`). Each model keeps the first
  of :data:`AUTO` that serves it (no timing: the same runner, and floats, on every start), or the
  one ``SPECVIZ_STATIC_DECODE`` names, or with ``all`` the fastest by measurement (:func:`mode`); any runner that fails gives way to eager, said once in the log. Building is
  logged and counted (:func:`trace_seconds`). Every shape in the body is written with -1 for n,
  so with plain ``nn.Linear`` projections, or an int8 copy's (:mod:`specviz.runtime.quantize`:
  per-token scales for all rows at once, specviz's blocked kernel or ``torch._int_mm``, q/k/v and
  gate/up fused), one build serves every width (tested).

A float32 or bfloat16 body's projections run fused (q/k/v, gate/up) on the kernel measured faster at each
width on this machine (:func:`specviz.runtime.projections.plan_projections`, cached): when one kind changes kernel with
the width, the widths that run the same kernels share a graph (and there is no exported one);
otherwise one serves all.

The output head stays outside the body (a vocab=N draft's head reads its session's context
rows; a large target head keeps its measured kernel switch, :mod:`specviz.runtime.cpu`), so the logits are
the model's own head applied to the body's hidden states. A prompt is prefilled by the
body on all its rows (or, measured under ``all``, by the model's own batched decoder, its keys and
values copied in: :class:`specviz.runtime.layer_op.Prefill`), then that head on its last
rows (not even that for a greedy caller that reads no logits).

Models of the llama-like families (:data:`ARCHITECTURES`: Llama, Mistral, Qwen2, Qwen3, Gemma 3
text with any layer pattern, Phi-3) in float32 or bfloat16 on the CPU are served; :func:`supports`
says in a sentence why any other model or config is not (tests/test_families.py). A bfloat16 body
computes as the ``transformers`` bf16 forward does: products, rotary and the residual stream in
bf16, RMSNorm and softmax in float32 (rounded back to bf16), so its logits match that forward to
bf16 rounding (tests/test_static_bf16.py).
Anything else, or ``SPECVIZ_STATIC_DECODE=0``, keeps the ``transformers`` forward and its
DynamicCache. Token trees run here too (:meth:`StaticDecoder.run_tree`): the target's verify
pass over a whole tree, and a draft tree's levels, each on top of the levels fed before it. The logits
match the ``transformers`` forward to float rounding (tests/test_static_decode.py); greedy output
stays the target's own token for token (tested), and ``python benchmarks/draft_cost.py`` measures
both steps side by side.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Iterable
from pathlib import Path

import torch

from .. import settings
from . import argmax_head, layer_op, plan, runners, sampled_head
from .body import FAMILIES, DecoderBody, family_why_not
from .hfcompat import cache_kwargs
from .step_masks import step_masks

log = logging.getLogger(__name__)

ARCHITECTURES = FAMILIES  # llama, mistral, qwen2, qwen3, gemma3_text, phi3 (body.py: what each differs in)
DTYPES = (torch.float32, torch.bfloat16)  # the weights the body serves
MIN_CAPACITY = 128  # positions a new cache holds; it doubles when full
SPAN = 64  # attention reads the buffers up to the position rounded up to a multiple of this
RUNNERS = {r.name: r for r in (runners.EAGER, runners.COMPILE, runners.EXPORT, layer_op.RUNNER)}
AUTO = ("fused", "export", "eager")  # by default the first of these that serves a body (fused: where
# layer_op.why_not allows; export: from a package already on disk), never by timing: the kernels a model
# runs, and so its floats and a seed's tokens, are the same on every start; "all" measures (tuning)
_OFF, _ON = ("0", "false", "no", "off"), ("", "1", "true", "yes", "on", "auto")


def mode() -> str:
    """``SPECVIZ_STATIC_DECODE``: "off" (``0``), "auto" (unset: the first of :data:`AUTO` that serves
    the body, the same on every start), "all" (the fastest of every runner by measurement, each built
    within runners.BUDGET_S, and each prompt length's prefill way measured too) or one runner's name
    (that one, eager if it fails)."""
    value = settings.word("SPECVIZ_STATIC_DECODE")
    if value in _OFF:
        return "off"
    if value in RUNNERS or value == "all":
        return value
    if value not in _ON:
        log.warning("specviz: SPECVIZ_STATIC_DECODE=%r is none of 0, auto, all, %s; measuring (auto)", value, ", ".join(RUNNERS))
    return "auto"


def enabled() -> bool:
    return mode() != "off"


def candidates(body: torch.nn.Module, package_dir: Path | None = None) -> tuple[runners.Runner, ...]:
    """The runners :func:`mode` asks for ``body``: one (the first of :data:`AUTO` that serves it, or
    the one named), or every runner that serves it, to measure ("all")."""
    how = mode()
    if how in RUNNERS:
        return (RUNNERS[how],)
    serves = {"export": lambda: runners.package_path(body, package_dir).exists(), "fused": lambda: layer_op.why_not(body) is None}
    if how == "all":
        return tuple(RUNNERS[k] for k in ("fused", "export", "compile", "eager") if k != "fused" or serves[k]())
    return tuple(RUNNERS[k] for k in AUTO if k not in serves or serves[k]())[:1]  # eager serves every body


def supports(model: torch.nn.Module) -> str | None:
    """Why ``model`` cannot use the static step (a sentence), or None when it can."""
    cfg = getattr(model, "config", None)
    text = cfg.get_text_config() if cfg is not None and hasattr(cfg, "get_text_config") else cfg
    kind = getattr(text, "model_type", None)
    if kind not in ARCHITECTURES:
        return f"architecture {kind!r} is not one of {', '.join(ARCHITECTURES)}"
    body = getattr(model, "model", None)
    if body is None or not isinstance(getattr(body, "layers", None), torch.nn.ModuleList):
        return "no decoder layer list at model.model.layers"
    weight = body.embed_tokens.weight
    if weight.device.type != "cpu" or weight.dtype not in DTYPES:
        return f"weights are {weight.dtype} on {weight.device}, not float32 or bfloat16 on the CPU"
    if len(body.layers) != text.num_hidden_layers:
        return "the layer list and the config disagree"
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
        size = max(MIN_CAPACITY, self.capacity)
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

    def __init__(self, model: torch.nn.Module, package_dir: Path | None = None):
        self._model = weakref.ref(model)  # the cache is keyed weakly on the model: no strong reference back
        self.text = model.config.get_text_config()
        self.body = DecoderBody(model, runners.cache_home()).eval()
        self.shape = (self.text.num_hidden_layers, self.body.kv_heads, self.body.head_dim)
        self.window = getattr(self.text, "sliding_window", None) if any(self.body.local) else None
        self.softcap = getattr(self.text, "final_logit_softcapping", None)
        label = type(model).__name__ + (" (int8)" if layer_op.products_kind(self.body) == "int8" else "")  # a target and its int8 draft apart
        self._runner = runners.Choice(self.body, candidates(self.body, package_dir), label, package_dir)
        self._prefills = {way: layer_op.Prefill(f"{label} ({way} body)", measure=mode() == "all")
                          for way in ("fused", "eager")}  # a prompt's way
        self._tables: tuple[torch.Tensor, ...] | None = None  # cos, sin, cos_local, sin_local [C, hd]
        self._lock = threading.Lock()

    @property
    def runner(self) -> str | None:
        """The runner this model's step kept (None before its first call)."""
        return None if self._runner.runner is None else self._runner.runner.name

    @property
    def _steps(self) -> dict:
        """The kept runner's steps by width (None: one for every width)."""
        return self._runner.steps

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
        return torch.zeros(L, kv, capacity, hd, dtype=dtype), torch.zeros(L, kv, capacity, hd, dtype=dtype)

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
        """The body's inputs for ``tokens`` [n] written to slots p..p+n-1, a chain's or a token
        tree's (:func:`~specviz.runtime.step_masks.step_masks`: ``positions``, ``visible``, ``fed``).
        Attention reads only the buffers' first S = p + n slots rounded up to SPAN (the mask's
        width; the body narrows the whole buffers to it), so its cost follows the context, not the
        capacity."""
        n = int(tokens.shape[0])
        cos, sin, cos_l, sin_l = self._rotary(cache.capacity)
        span = min(cache.capacity, -(-(p + n) // SPAN) * SPAN)
        slots, positions, mask, mask_local = step_masks(p, n, span, self.window, positions, visible, fed)  # [n], [n], 2 x [n, S]
        rot = [t[positions, None] for t in (cos, sin, cos_l, sin_l)]  # each [n, 1, hd]
        return (tokens, slots, *rot, mask, mask_local, cache.keys, cache.values)  # buffers [layers, kv, C, hd]

    def has_graph(self, n: int) -> bool:
        """Whether the step for n tokens is built (its runner chosen, its graph made)."""
        return self._runner.has_step(n)

    def prepare(self, example: tuple) -> None:
        """Choose the runner and build the step for ``example``'s width, without running it."""
        self._runner.prepare(example)

    def _call(self, example: tuple) -> torch.Tensor:
        """The body on ``example`` through the runner this model keeps (chosen on its first call)."""
        return self._runner(example)

    @torch.inference_mode()
    def run(self, cache: StaticKV, input_ids: torch.Tensor, keep: int = 1, lazy: bool = False):
        n = int(input_ids.shape[0])
        if not 1 <= keep <= n:
            raise ValueError(f"keep must lie in 1..{n}, got {keep}")
        start = cache.length
        cache.reserve(start + n)
        if start == 0 and n > 1:  # a prompt: the body on all n rows (or the model's own forward: Prefill)
            model_way = lambda: self._prefill(cache, input_ids, keep, lazy)  # noqa: E731
            if not self.body.rows_at_once:
                return model_way()
            way = "fused" if self.runner == "fused" else "eager"  # eager: a graph per width would be built for n
            step = self._call if way == "fused" else (lambda example: self.body(*example))
            return self._prefills[way](n, model_way, lambda: self._fed(cache, input_ids, keep, lazy, 0, step))
        return self._fed(cache, input_ids, keep, lazy, start)

    def _fed(self, cache: StaticKV, input_ids: torch.Tensor, keep: int, lazy: bool, start: int, step=None):
        n = int(input_ids.shape[0])
        if self.body.rows_at_once:  # all n tokens in one call (``step``: the body's way, default the kept runner)
            hidden = (step or self._call)(self._inputs(cache, input_ids, start))[n - keep :]  # [keep, d]
        else:  # projections that take one row a call (none of specviz's own): a token at a time
            hidden = torch.cat([self._call(self._inputs(cache, input_ids[i : i + 1], start + i))
                                for i in range(n)])[n - keep :]  # [keep, d]
        cache.length = start + n
        return self._head(hidden, lazy)  # [keep, V]

    @torch.inference_mode()
    def run_tree(self, cache: StaticKV, tokens: torch.Tensor, positions: torch.Tensor, visible: torch.Tensor,
                 lazy: bool = False, fed: torch.Tensor | None = None):
        """A token tree's nodes ``tokens`` [m] at ``positions`` [m] in one call, each seeing
        the cached context and the nodes ``visible`` [m, T + m] allows, T the tree slots fed
        before them this step at positions ``fed`` [T] (a draft tree's earlier levels) -> float32
        logits [m, V] (``lazy``: as :meth:`run`'s). The nodes take the next m slots;
        :meth:`StaticKV.keep_slots` keeps the accepted path."""
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
        """Logits [rows, V] of hidden [rows, d]; ``lazy`` (True: a greedy step): where the model has a
        certified argmax screen for this width, or a head over part of the vocabulary (a draft's
        ``vocab=N``: its ``lazy_logits``), an :class:`~specviz.runtime.argmax_head.LazyLogits`:
        logits computed only when read, argmax without them; ``lazy`` = ``sampled_head.SAMPLE`` (a
        sampled step): a :class:`~specviz.runtime.argmax_head.HeadLogits` whose every logit the bf16
        screen bounds, at the widths where that measured faster."""
        if not lazy:
            return self._full_head(hidden)
        if lazy == sampled_head.SAMPLE:  # a sampled step: every logit bounded by a bf16 screen, where faster
            screen = sampled_head.screen_for(self.model, hidden.shape[0])
            return argmax_head.HeadLogits(hidden, self._full_head, screen) if screen is not None else self._full_head(hidden)
        screen = argmax_head.screen_of(self.model)
        if screen is not None and screen.used(hidden.shape[0]):
            return argmax_head.HeadLogits(hidden, self._full_head, screen)
        part = getattr(self.model.get_output_embeddings(), "lazy_logits", None)
        if part is not None and not self.softcap:
            return part(hidden, torch.float32)
        return self._full_head(hidden)

    def _full_head(self, hidden: torch.Tensor) -> torch.Tensor:
        logits = self.model.get_output_embeddings()(hidden).float()  # [rows, V]
        if self.softcap:
            logits = torch.tanh(logits / self.softcap) * self.softcap
        return logits

    def _prefill(self, cache: StaticKV, input_ids: torch.Tensor, keep: int, lazy: bool = False) -> torch.Tensor:
        """A prompt through the model's own batched forward; its keys and values copied in."""
        from transformers import DynamicCache

        n = int(input_ids.shape[0])
        dynamic = DynamicCache(config=self.model.config)
        dynamic.activate_past_recording()  # sliding layers keep the whole prompt: a later rollback may reach into it
        # the decoder alone, then this step's own head on 2-D rows: a bf16 head called on the
        # model's [1, keep, d] takes a batched-matmul path that copies its whole weight (0.7 s)
        out = self.model.model(input_ids=input_ids[None], **cache_kwargs(self.model.model, dynamic), use_cache=True)
        for i, layer in enumerate(dynamic.layers):
            kept = layer.keys.shape[2]  # every position (past recording), as a full layer holds
            cache.keys[i, :, n - kept : n] = layer.keys[0]
            cache.values[i, :, n - kept : n] = layer.values[0]
        cache.length = n
        return self._head(out.last_hidden_state[0, -keep:], lazy)  # [keep, V]


def warm(model: torch.nn.Module, widths: Iterable[int] = (1,)) -> float:
    """Build ``model``'s static step and choose its runner now (with one untimed one-token call on
    a scratch cache), and its graph for each of ``widths`` tokens (widths whose kernels agree share
    one), so that a session's first timed step of those widths does not pay that one-off cost. ->
    seconds spent (0.0 when all of it was built already or the model is not served)."""
    cache = static_cache(model)
    decoder = cache.decoder if cache is not None else None
    todo = [n for n in sorted(set(widths)) if decoder is not None and not decoder.has_graph(n)]
    if not todo:
        return 0.0
    t = time.perf_counter()
    with torch.inference_mode():
        cache.reserve(todo[-1])
        for n in todo:  # tokens 0 at slots 0..n-1, the body only
            decoder.prepare(decoder._inputs(cache, torch.zeros(n, dtype=torch.long), 0))
    return time.perf_counter() - t


def projection_kernel_report(model: torch.nn.Module | None) -> dict | None:
    """The kernel per width of each planned projection kind of ``model``'s static step, with both
    timings (ms, for all its layers), as :func:`specviz.runtime.plan.report` gives them; None
    when the model has no static step yet or nothing was planned."""
    try:
        decoder = _decoders.get(model) if model is not None else None
    except TypeError:  # not a module
        decoder = None
    if decoder is None or not decoder.body.kernel_plans:
        return None
    layers = len(decoder.body.layers)
    return {kind: {**plan.report(p, [], decoder.body.dtype), "layers": layers} for kind, p in decoder.body.kernel_plans.items()}


def trace_seconds() -> float:
    """Seconds this process has spent building static decode steps, any runner (once per model;
    the name is from when tracing was the only way)."""
    return runners.build_seconds()


def runners_kept() -> str:
    """The runners this process's static decode steps kept ("fused", "export, eager", ...; "" if none)."""
    return ", ".join(runners.kept())


_decoders: "weakref.WeakKeyDictionary[torch.nn.Module, StaticDecoder]" = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def static_cache(model: torch.nn.Module) -> StaticKV | None:
    """A new session cache on ``model``'s static decode step (built once per model), or None when
    the model is not served (see :func:`supports`) or ``SPECVIZ_STATIC_DECODE=0``."""
    if not enabled():
        return None
    why = supports(model)  # checked per session: a model moved to a GPU since is no longer served
    if why is not None:
        log.debug("specviz: no static decode step for %s: %s", type(model).__name__, why)
        return None
    with _lock:
        decoder = _decoders.get(model)
        if decoder is None:
            decoder = _decoders[model] = StaticDecoder(model)
    return decoder.new_cache()


__all__ = ["AUTO", "RUNNERS", "StaticDecoder", "StaticKV", "candidates", "mode", "projection_kernel_report", "runners_kept",
           "static_cache", "supports",
           "trace_seconds", "warm"]
