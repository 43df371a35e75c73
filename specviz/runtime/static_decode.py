"""A lean decode step on the CPU: static KV buffers, one compiled (or traced) body per model.

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
  version), ``trace`` (TorchScript, its plan fixed once at build) or, for an int8 body on specviz's
  kernel, ``fused`` (each layer one C++ op: :mod:`specviz.runtime.layer_op`). Each model keeps the fastest
  of :data:`AUTO` measured on its first call, or the one ``SPECVIZ_STATIC_DECODE`` names
  (:func:`mode`); any runner that fails gives way to eager, said once in the log. Building is
  logged and counted (:func:`trace_seconds`). Every shape in the body is written with -1 for n,
  so with plain ``nn.Linear`` projections, or an int8 copy's on the ``int_mm`` kernel
  (:mod:`specviz.runtime.quantize`: per-token scales for all rows at once, ``torch._int_mm``, q/k/v
  and gate/up fused), one build serves every width (tested). The default packed int8 kernel's
  projections loop over their rows in Python, which a graph unrolls: its chain feeds go one token
  at a time through a one-token graph, and a tree gets a graph per width.

A float32 or bfloat16 body's projections run fused (q/k/v, gate/up) on the kernel measured faster at each
width on this machine (:func:`specviz.runtime.projections.plan_projections`, cached): when one kind changes kernel with
the width, the widths that run the same kernels share a graph (and there is no exported one);
otherwise one serves all.

The output head stays outside the body (a vocab=N draft's head reads its session's context
rows; a large target head keeps its measured kernel switch, :mod:`specviz.runtime.cpu`), so the logits are
the model's own head applied to the body's hidden states. A prompt is prefilled by the
model's own batched decoder (its keys and values copied in) or by the body on all its rows, whichever
measured faster at its length (:class:`specviz.runtime.layer_op.Prefill`), then that head on its last
rows (not even that for a greedy caller that reads no logits).

Only Llama- and Gemma-3-text-architecture models in float32 or bfloat16 on the CPU are served (the
built-in models and the tests' tiny models). A bfloat16 body computes as the ``transformers`` bf16
forward does: products, rotary and the residual stream in bf16, RMSNorm and softmax in float32
(rounded back to bf16), so its logits match that forward to bf16 rounding (tests/test_static_bf16.py).
Anything else, or ``SPECVIZ_STATIC_DECODE=0``, keeps the ``transformers`` forward and its
DynamicCache. Token trees run here too (:meth:`StaticDecoder.run_tree`): the target's verify
pass over a whole tree, and a draft tree's levels, each on top of the levels fed before it. The logits
match the ``transformers`` forward to float rounding (tests/test_static_decode.py); greedy output
stays the target's own token for token (tested), and ``python benchmarks/draft_cost.py`` measures
both steps side by side.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections.abc import Iterable
from pathlib import Path

import torch
import torch.nn.functional as F

from . import argmax_head, cpu, layer_op, projections, runners
from .hfcompat import cache_kwargs
from .projections import fused_of
from .step_masks import step_masks

log = logging.getLogger(__name__)

ARCHITECTURES = ("llama", "gemma3_text")
DTYPES = (torch.float32, torch.bfloat16)  # the weights the body serves
MIN_CAPACITY = 128  # positions a new cache holds; it doubles when full
SPAN = 64  # attention reads the buffers up to the position rounded up to a multiple of this
FEED_WIDTH = 2  # a body with a graph per width (packed int8) takes a feed this many tokens a call at most
RUNNERS = {r.name: r for r in (runners.EAGER, runners.COMPILE, runners.EXPORT, runners.TRACE, layer_op.RUNNER)}
AUTO = ("fused", "trace", "export", "eager")  # measured by default; export only from a package already on disk,
# fused only for a body it serves (layer_op.why_not)
_OFF, _ON = ("0", "false", "no", "off"), ("", "1", "true", "yes", "on", "auto")


def mode() -> str:
    """``SPECVIZ_STATIC_DECODE``: "off" (``0``), "auto" (unset: the fastest of :data:`AUTO` by
    measurement), "all" (the fastest of every runner, each built within runners.BUDGET_S) or one
    runner's name (that one, eager if it fails)."""
    value = os.environ.get("SPECVIZ_STATIC_DECODE", "").strip().lower()
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
    """The runners :func:`mode` asks to measure for ``body`` (one: that one)."""
    how = mode()
    if how in RUNNERS:
        return (RUNNERS[how],)
    serves = {"export": lambda: runners.package_path(body, package_dir).exists(), "fused": lambda: layer_op.why_not(body) is None}
    if how == "all":
        return tuple(RUNNERS[k] for k in ("fused", "trace", "export", "compile", "eager") if k != "fused" or serves[k]())
    return tuple(RUNNERS[k] for k in AUTO if k not in serves or serves[k]())


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
    if kind == "gemma3_text" and (text.attn_logit_softcapping is not None or text.use_bidirectional_attention):
        return "attention soft-capping or bidirectional attention"
    if kind == "llama" and getattr(text, "hidden_act", "silu") != "silu":
        return f"activation {text.hidden_act!r}"
    if len(body.layers) != text.num_hidden_layers:
        return "the layer list and the config disagree"
    return None


def _rows(module: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """A projection ``module`` on x [n, in] -> [n, out]; bf16: on the rows and one more (the first
    again), so that every width rounds alike. A bf16 product of one row (oneDNN's, packed or not)
    sums a long input in another order than products of 2+ rows do (gemma-3-270m's down
    projection, 2,048 inputs, on a Zen 4 EPYC): a one-token step then rounds apart from the same
    token's row of a verify pass, and greedy decoding parts from target-only's at near-ties. On
    2+ rows every time the two give the same floats (no cost measured: bf16's curve is flat)."""
    if x.dtype == torch.bfloat16:
        return module(torch.cat((x, x[:1])))[:-1]  # [n + 1, out] -> [n, out]
    return module(x)


def _project(linear: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``linear`` on x [n, in] -> [n, out], through the planned layer it is part of, if any."""
    return _rows(fused_of(linear) or linear, x)


class _Body(torch.nn.Module):
    """The decoder body for n new tokens: (tokens [n], positions [n], rotary rows, masks, K/V
    buffers) -> the final-norm hidden states [n, d]; writes the tokens' keys and values into the
    buffers. n = 1 is a draft's decode step; n = k + 1 is the target's verify pass."""

    def __init__(self, model: torch.nn.Module, kernel_dir: Path | None = None):
        super().__init__()
        text = model.config.get_text_config()
        body = model.model
        self.gemma = text.model_type == "gemma3_text"
        self.layers = body.layers
        self.embedding = body.embed_tokens.weight  # [V, d]
        self.dtype = self.embedding.dtype  # float32 or bfloat16: the weights', activations' and K/V buffers'
        scale = getattr(body.embed_tokens, "embed_scale", None)  # Gemma scales embeddings by sqrt(d)
        # ... by sqrt(d) rounded to the weights' dtype, as transformers' Gemma3ScaledWordEmbedding does
        self.embed_scale = float(torch.as_tensor(scale).to(self.dtype)) if scale is not None else 1.0
        self.d, self.eps = text.hidden_size, text.rms_norm_eps
        self.heads, self.kv_heads = text.num_attention_heads, text.num_key_value_heads
        self.head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
        self.scaling = (text.query_pre_attn_scalar if self.gemma else self.head_dim) ** -0.5
        self.local = [t == "sliding_attention" for t in (getattr(text, "layer_types", None) or [])] or [False] * len(self.layers)

        def scale(norm) -> torch.Tensor:  # Gemma's RMSNorm multiplies by 1 + w, Llama's by w
            w = norm.weight.detach().float()
            return (1.0 + w) if self.gemma else w

        self.norms = []  # per layer: the names of its RMSNorms' scales (buffers), in the order forward uses them
        for i, layer in enumerate(self.layers):
            names = ("input_layernorm", "post_attention_layernorm") + (
                ("pre_feedforward_layernorm", "post_feedforward_layernorm") if self.gemma else ())
            scales = [scale(getattr(layer, n)) for n in names]
            if self.gemma:  # q's and k's heads are normed as one [h + kv, hd] tensor: q's scale per query head, then k's
                q_scale, k_scale = scale(layer.self_attn.q_norm), scale(layer.self_attn.k_norm)  # each [hd]
                scales.append(torch.cat([q_scale.expand(self.heads, -1), k_scale.expand(self.kv_heads, -1)]))
            for j, w in enumerate(scales):  # buffers, so an exported graph names them (runners.py)
                self.register_buffer(f"norm_{i}_{j}", w, persistent=False)
            self.norms.append([f"norm_{i}_{j}" for j in range(len(scales))])
        self.register_buffer("final", scale(body.norm), persistent=False)
        linears = [m for layer in self.layers for m in (
            layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj, layer.self_attn.o_proj,
            layer.mlp.gate_proj, layer.mlp.up_proj, layer.mlp.down_proj)]
        # all n tokens in one call: plain Linears, or int8 ones (specviz.runtime.quantize: no row loop)
        self.rows_at_once = all(type(m) is torch.nn.Linear or getattr(m, "any_width", False) is True for m in linears)
        # a feed of n tokens in one call of the body: those, or packed int8 layers (a graph per width)
        self.feeds_at_once = all(type(m) is torch.nn.Linear or getattr(m, "any_width", False) is True
                                 or getattr(m, "rows_in_one_call", False) is True for m in linears)
        # fp32 or bf16 projections: q/k/v and gate/up fused, each kind on the kernel measured faster per width
        # (projections.py)
        attns, mlps = [layer.self_attn for layer in self.layers], [layer.mlp for layer in self.layers]
        self.kernel_plans = {kind: plan for kind, (_, plan) in projections.plan_projections({
            "qkv": [(a.q_proj, a.k_proj, a.v_proj) for a in attns], "o": [(a.o_proj,) for a in attns],
            "gate_up": [(m.gate_proj, m.up_proj) for m in mlps], "down": [(m.down_proj,) for m in mlps],
        }, kernel_dir).items()} if self.rows_at_once else {}
        fused = [fused_of(a.q_proj, a.k_proj, a.v_proj) for a in attns] + [fused_of(a.o_proj) for a in attns]
        fused += [fused_of(m.gate_proj, m.up_proj) for m in mlps] + [fused_of(m.down_proj) for m in mlps]
        self.fused = torch.nn.ModuleList([f for f in fused if f is not None])  # registered: an export names their weights
        # one build serves every n unless a projection's kernel changes with the width
        self.any_width = self.rows_at_once and all(getattr(f, "uniform", lambda: True)() for f in self.fused)

    def graph_key(self, n: int) -> object:
        """What a graph of this body for n tokens depends on: the kernel each planned projection runs
        at width n (widths that agree share one graph), or n itself for projections that loop over
        their rows (a packed int8 copy's). Weight-first (code 4) runs one row through another
        product than wider widths (cpu._weight_first_linear), so its one row has a graph of its own."""
        if not self.rows_at_once:
            return n
        codes = (f.onednn_at[min(n, len(f.onednn_at) - 1)] for f in self.fused if hasattr(f, "onednn_at"))
        return tuple((c, n == 1) if c == 4 else c for c in codes)

    def _norm(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:  # [..., m] -> [..., m]
        """RMSNorm in float32 with scale ``w`` (broadcast over x), rounded back to x's dtype (a no-op
        cast in float32), written out as transformers' Gemma norm writes it (Llama's, in bf16, scales
        after rounding back: one rounding apart, as ``F.rms_norm`` was). The same floats as
        ``F.rms_norm``, which on a CPU runs these ops one by one with casts around them: about 10 us
        a call in a trace against under 2 written out (109 norms a gemma-3-270m step)."""
        if x.dtype == torch.float32:  # no casts: a trace would keep them as two ops a norm (~180 a step)
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * w
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps) * w).to(x.dtype)

    def _rope(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:  # [n, h, hd]
        half = self.head_dim // 2
        return x * cos + torch.cat((-x[..., half:], x[..., :half]), -1) * sin

    def forward(self, tokens, pos, cos, sin, cos_local, sin_local, mask, mask_local, keys, values):
        # tokens, pos [n] long; cos/sin [n, 1, hd]; masks [n, S] additive; keys/values [layers, kv, C, hd] (C >= S)
        return self.run_layers(self.layer, tokens, pos, cos, sin, cos_local, sin_local, mask, mask_local, keys, values)

    def run_layers(self, layer_step, tokens, pos, cos, sin, cos_local, sin_local, mask, mask_local, keys, values):
        """The forward with each decoder layer run by ``layer_step`` (:meth:`layer`, or a compiled
        copy of it that every layer shares: specviz.runtime.runners)."""
        h = F.embedding(tokens, self.embedding) * self.embed_scale  # [n, d]
        for i, layer in enumerate(self.layers):
            w = [getattr(self, name) for name in self.norms[i]]
            rows = (cos_local, sin_local, mask_local) if self.local[i] else (cos, sin, mask)
            h = layer_step(h, layer, w, pos, *rows, keys[i], values[i])
        return self._norm(h, self.final)  # [n, d]

    def layer(self, h, layer, w, pos, cos, sin, mask, keys, values):
        """One decoder layer: h [n, d] -> [n, d]; writes the tokens' keys and values [kv, n, hd] into
        ``keys``/``values`` [kv, C, hd] at ``pos``. Every shape is written with -1 for n, so one
        graph (trace, export) serves any number of tokens."""
        hd, norm = self.head_dim, self._norm
        kv, group = self.kv_heads, self.heads // self.kv_heads
        span = mask.shape[1]  # S: attention reads the buffers' first S slots (the buffers hold C >= S)
        attn, mlp = layer.self_attn, layer.mlp
        x = norm(h, w[0])
        qkv = fused_of(attn.q_proj, attn.k_proj, attn.v_proj)
        if qkv is not None:  # q, k and v in one product (fp32/bf16 planned, or an int8 copy's: one quantization of x)
            qk, v = _rows(qkv, x).split(((self.heads + kv) * hd, kv * hd), dim=-1)  # [n, (h+kv)*hd], [n, kv*hd]
        else:
            qk, v = torch.cat((_rows(attn.q_proj, x), _rows(attn.k_proj, x)), -1), _rows(attn.v_proj, x)
        qk = qk.view(-1, self.heads + kv, hd)  # [n, h+kv, hd]: q's heads, then k's, normed and rotated as one
        if self.gemma:
            qk = norm(qk, w[4])
        qk = self._rope(qk, cos, sin)
        q, k = qk[:, : self.heads], qk[:, self.heads :]  # [n, h, hd], [n, kv, hd]
        keys.index_copy_(1, pos, k.transpose(0, 1))  # [kv, n, hd] at the tokens' positions
        values.index_copy_(1, pos, v.view(-1, kv, hd).transpose(0, 1))
        # query head j reads kv head j // g: a kv head's g query heads x n tokens as the rows of one
        # product with its keys (a broadcast matmul would copy the keys g times, 1 MB a layer)
        q = q.reshape(-1, kv, group, hd).permute(1, 2, 0, 3).reshape(kv, -1, hd)  # [kv, g*n, hd]
        seen_k, seen_v = keys.narrow(1, 0, span), values.narrow(1, 0, span)  # [kv, S, hd]: the slots attention reads
        scores = torch.bmm(q, seen_k.transpose(1, 2)).view(kv, group, -1, span) * self.scaling  # [kv, g, n, S]
        weights = torch.softmax(scores + mask, dim=-1)  # [kv, g, n, S] in float32 (the mask's dtype)
        if seen_v.dtype != weights.dtype:
            weights = weights.to(seen_v.dtype)  # bf16
        o = torch.bmm(weights.view(kv, -1, span), seen_v).view(kv, group, -1, hd)  # [kv, g, n, hd]
        o = _project(attn.o_proj, o.permute(2, 0, 1, 3).reshape(-1, self.heads * hd))  # [n, d]
        if self.gemma:
            h = h + norm(o, w[1])
            x = norm(h, w[2])
            gate, up = self._gate_up(mlp, x)
            return h + norm(_project(mlp.down_proj, F.gelu(gate, approximate="tanh") * up), w[3])
        h = h + o
        x = norm(h, w[1])
        gate, up = self._gate_up(mlp, x)
        return h + _project(mlp.down_proj, F.silu(gate) * up)

    @staticmethod
    def _gate_up(mlp, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # [n, d] -> 2 x [n, inter]
        both = fused_of(mlp.gate_proj, mlp.up_proj)
        if both is None:
            return _rows(mlp.gate_proj, x), _rows(mlp.up_proj, x)
        return _rows(both, x).split((mlp.gate_proj.out_features, mlp.up_proj.out_features), dim=-1)


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
        self.body = _Body(model, runners.cache_home()).eval()
        self.shape = (self.text.num_hidden_layers, self.body.kv_heads, self.body.head_dim)
        self.window = getattr(self.text, "sliding_window", None) if any(self.body.local) else None
        self.softcap = getattr(self.text, "final_logit_softcapping", None)
        label = type(model).__name__ + (" (int8)" if layer_op.products_kind(self.body) == "int8" else "")  # a target and its int8 draft apart
        self._runner = runners.Choice(self.body, candidates(self.body, package_dir), label, package_dir)
        self._prefills = {way: layer_op.Prefill(f"{label} ({way} body)") for way in ("fused", "eager")}  # a prompt's way
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
                if self.body.gemma:
                    cos, sin = (t[0] for t in rotary(x, positions, "full_attention"))
                    cos_l, sin_l = (t[0] for t in rotary(x, positions, "sliding_attention")) if self.window else (cos, sin)
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
        if start == 0 and n > 1:  # a prompt: the model's own forward, or the body on all n rows (by measurement)
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
        else:  # a draft's catch-up feed (usually [x_k, bonus]) in calls of up to FEED_WIDTH tokens: a
            # packed int8 body reads each weight once per call, on graphs of the widths a draft warms, not
            # a new graph per feed length (a hybrid's draft catches up on every token the n-gram drafted)
            width = FEED_WIDTH if self.body.feeds_at_once else 1
            hidden = torch.cat([self._call(self._inputs(cache, input_ids[i : i + width], start + i))
                                for i in range(0, n, width)])[n - keep :]  # [keep, d]
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

    def _head(self, hidden: torch.Tensor, lazy: bool = False):
        """Logits [rows, V] of hidden [rows, d]; ``lazy`` (a greedy step): where the model has a
        certified argmax screen for this width, or a head over part of the vocabulary (a draft's
        ``vocab=N``: its ``lazy_logits``), an :class:`~specviz.runtime.argmax_head.LazyLogits`:
        logits computed only when read, argmax without them."""
        if not lazy:
            return self._full_head(hidden)
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
    timings (ms, for all its layers), as :func:`specviz.runtime.cpu.plan_report` gives them; None
    when the model has no static step yet or nothing was planned."""
    try:
        decoder = _decoders.get(model) if model is not None else None
    except TypeError:  # not a module
        decoder = None
    if decoder is None or not decoder.body.kernel_plans:
        return None
    layers = len(decoder.body.layers)
    return {kind: {**cpu.plan_report(plan, True), "layers": layers} for kind, plan in decoder.body.kernel_plans.items()}


def trace_seconds() -> float:
    """Seconds this process has spent building static decode steps, any runner (once per model;
    the name is from when tracing was the only way)."""
    return runners.build_seconds()


def runners_kept() -> str:
    """The runners this process's static decode steps kept ("trace", "export, eager", ...; "" if none)."""
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
