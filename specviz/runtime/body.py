"""The lean decoder body of the static decode step (:mod:`specviz.runtime.static_decode`): one
function of tensors for n new tokens at positions p..p+n-1, (tokens, positions, rotary rows, masks,
K/V buffers) -> the final-norm hidden states, writing the tokens' keys and values in place.

The llama-like families (:data:`FAMILIES`) written out op by op, q/k/v and gate/up fused
(:mod:`specviz.runtime.projections`). They differ only where their ``transformers`` modeling files
do: Gemma 3 norms by 1 + w around both sublayers, scales attention by ``query_pre_attn_scalar`` and
uses GELU (tanh); Gemma 3 and Qwen3 norm q and k per head before the rotary; Qwen2 adds biases (in
the projections); Phi-3 stores q/k/v and gate/up fused and may rotate part of each head; the
sliding window is on every layer of Mistral and Phi-3, on the ``layer_types`` named ones elsewhere.
:func:`family_why_not` says what of a config the body cannot serve. Every shape is written with -1
for n, so one step serves every width.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from . import projections
from .projections import fused_of

__all__ = ["EAGER", "FAMILIES", "DecoderBody", "Runner", "family_why_not", "projections_of", "rotary_dim", "rows_at_once",
           "sliding_layers"]


FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "gemma3_text", "phi3")  # model_type values the body serves
STATIC_ROPE = ("default", "linear", "llama3", "yarn")  # rotary types whose tables are a function of the position alone


def projections_of(layer: torch.nn.Module) -> tuple[tuple[torch.nn.Module, ...], ...]:
    """A decoder layer's projections by kind, each as the members whose outputs, concatenated in
    order, are that kind's: (q, k, v), (o,), (gate, up), (down,). Phi-3 stores q/k/v and gate/up
    fused (``qkv_proj`` [q | k | v], ``gate_up_proj`` [gate | up]): one member, the same rows."""
    attn, mlp = layer.self_attn, layer.mlp
    qkv = (attn.qkv_proj,) if hasattr(attn, "qkv_proj") else (attn.q_proj, attn.k_proj, attn.v_proj)
    gate_up = (mlp.gate_up_proj,) if hasattr(mlp, "gate_up_proj") else (mlp.gate_proj, mlp.up_proj)
    return qkv, (attn.o_proj,), gate_up, (mlp.down_proj,)


def rows_at_once(layers) -> bool:
    """Whether every projection of ``layers`` takes all n rows in one call: a plain ``nn.Linear``
    or one of specviz's own (``any_width``: int8 copies, planned layers). Anything else keeps the
    ``transformers`` forward (static_decode.supports)."""
    return all(type(m) is torch.nn.Linear or getattr(m, "any_width", False) is True
               for layer in layers for members in projections_of(layer) for m in members)


def sliding_layers(text) -> list[bool]:
    """Which layers attend through the sliding window (as the module's text says; their
    ``layer_types``, if any, is unread for Mistral and Phi-3)."""
    n = text.num_hidden_layers
    if text.model_type in ("mistral", "phi3"):
        return [getattr(text, "sliding_window", None) is not None] * n
    return [t == "sliding_attention" for t in (getattr(text, "layer_types", None) or [])] or [False] * n


def rotary_dim(model: torch.nn.Module) -> int:
    """How many of each head's dims the model's rotary tables cover (2 x its inverse frequencies:
    Phi-3's ``partial_rotary_factor`` < 1 rotates only the first ones)."""
    rotary = model.model.rotary_emb
    freqs = [b for name, b in rotary.named_buffers() if name.endswith("inv_freq") and "original" not in name]
    return 2 * int(freqs[0].numel())


def _rope_types(rotary: torch.nn.Module) -> list[str]:
    kinds = getattr(rotary, "rope_type", "default")
    return list(kinds.values()) if isinstance(kinds, dict) else [kinds]


def family_why_not(model: torch.nn.Module, text) -> str | None:
    """Why the body cannot run ``model`` (config ``text``) as its ``transformers`` forward does (a
    sentence), or None. Rotary tables must be a function of the position alone (not dynamic NTK
    or LongRoPE); only Phi-3's forward passes a partial rotary's other dims through."""
    kind = text.model_type
    if kind not in FAMILIES:
        return f"architecture {kind!r} is not one of {', '.join(FAMILIES)}"
    if kind == "gemma3_text":
        if text.attn_logit_softcapping is not None or text.use_bidirectional_attention:
            return "attention soft-capping or bidirectional attention"
        if getattr(text, "hidden_activation", "gelu_pytorch_tanh") != "gelu_pytorch_tanh":
            return f"activation {text.hidden_activation!r} (the body runs Gemma's GELU, tanh approximation)"
    elif getattr(text, "hidden_act", "silu") != "silu":
        return f"activation {text.hidden_act!r}"
    rotary = getattr(model.model, "rotary_emb", None)
    if rotary is None:
        return "no rotary module at model.model.rotary_emb"
    moving = [t for t in _rope_types(rotary) if t not in STATIC_ROPE]
    if moving:
        return (f"rotary scaling {moving[0]!r} changes its tables with the length fed, not only with the position;"
                f" the body serves {', '.join(STATIC_ROPE)}")
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    turned = rotary_dim(model)
    if turned > head_dim or turned % 2 or (turned < head_dim and kind != "phi3"):
        return f"rotary tables over {turned} of a head's {head_dim} dims"
    if any(sliding_layers(text)) and getattr(text, "sliding_window", None) is None:
        return "layer_types names sliding layers but sliding_window is not set"
    return None


def _rows(module: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """A projection ``module`` on x [n, in] -> [n, out]; bf16 on one extra row (row 0 again):
    a one-row bf16 product sums in another order than a 2+ row one, so without it a token's
    one-token step would round apart from its verify row (greedy parting at near-ties)."""
    if x.dtype == torch.bfloat16:
        return module(torch.cat((x, x[:1])))[:-1]  # [n + 1, out] -> [n, out]
    return module(x)


@dataclass(frozen=True)
class LayerParts:
    """A decoder layer's products as :meth:`DecoderBody.layer` runs them, each through the planned
    layer (or int8 copy) it is part of, resolved once per body: a body's planned layers stay as they
    are once it is built (a later body takes them over, :func:`projections.plan_projections`)."""

    qkv: torch.nn.Module | None  # q, k and v as one product (planned, an int8 copy's, Phi-3's own), else None
    q_k_v: tuple[torch.nn.Module, ...]  # q, k and v apart, where qkv is None
    o: torch.nn.Module
    gate_up: torch.nn.Module | None  # gate and up as one product ([gate | up]), else None
    gate_up_split: tuple[int, int]  # that product's outputs: gate's, then up's
    gate_and_up: tuple[torch.nn.Module, ...]  # gate and up apart, where gate_up is None
    down: torch.nn.Module

    @classmethod
    def of(cls, layer: torch.nn.Module) -> "LayerParts":
        members, (o,), gate_up, (down,) = projections_of(layer)
        qkv = fused_of(*members) or (members[0] if len(members) == 1 else None)  # Phi-3's is one layer already
        if len(gate_up) == 1:  # Phi-3's gate_up_proj, or its planned copy: gate's rows, then up's, halves
            both = fused_of(gate_up[0]) or gate_up[0]
            split = (both.out_features // 2, both.out_features - both.out_features // 2)
        else:
            both = fused_of(*gate_up)
            split = (gate_up[0].out_features, gate_up[1].out_features)
        return cls(qkv, members, fused_of(o) or o, both, split, gate_up, fused_of(down) or down)

    def gate_and_up_of(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # [n, d] -> 2 x [n, inter]
        if self.gate_up is None:
            gate_proj, up_proj = self.gate_and_up
            return _rows(gate_proj, x), _rows(up_proj, x)
        gate, up = _rows(self.gate_up, x).split(self.gate_up_split, dim=-1)
        return gate, up


Step = Callable[..., torch.Tensor]  # the body's inputs -> hidden states [n, d] (writes the K/V buffers)


@dataclass(frozen=True)
class Runner:
    """One way to run a body: ``build(body, example)`` -> a step taking the body's inputs that
    gives its hidden states and writes the same K/V slots, at every width."""

    name: str
    build: Callable[[torch.nn.Module, tuple], Step]


EAGER = Runner("eager", lambda body, example: body)  # the body itself, op by op: serves every body


class DecoderBody(torch.nn.Module):
    """The decoder body for n new tokens: (tokens [n], positions [n], rotary rows, masks, K/V
    buffers) -> the final-norm hidden states [n, d]; writes the tokens' keys and values into the
    buffers. n = 1 is a draft's decode step; n = k + 1 is the target's verify pass."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        text = model.config.get_text_config()
        body = model.model
        self.gemma = text.model_type == "gemma3_text"
        self.qk_norm = self.gemma or text.model_type == "qwen3"  # q and k normed per head before the rotary
        self.layers = body.layers
        self.embedding = body.embed_tokens.weight  # [V, d]
        self.dtype = self.embedding.dtype  # float32 or bfloat16: the weights', activations' and K/V buffers'
        scale = getattr(body.embed_tokens, "embed_scale", None)  # Gemma's sqrt(d), in the weights' dtype as HF's
        self.embed_scale = float(torch.as_tensor(scale).to(self.dtype)) if scale is not None else 1.0
        self.d, self.eps = text.hidden_size, text.rms_norm_eps
        self.heads, self.kv_heads = text.num_attention_heads, text.num_key_value_heads
        self.head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
        self.scaling = (text.query_pre_attn_scalar if self.gemma else self.head_dim) ** -0.5
        self.rotary_dim = rotary_dim(model)  # < head_dim: Phi-3's partial rotary, the rest of each head passes
        self.local = sliding_layers(text)

        def scale(norm) -> torch.Tensor:  # Gemma's RMSNorm multiplies by 1 + w, the others' by w
            w = norm.weight.detach().float()
            return (1.0 + w) if self.gemma else w

        self.norms = []  # per layer: the names of its RMSNorms' scales (buffers), in the order forward uses them
        for i, layer in enumerate(self.layers):
            names = ("input_layernorm", "post_attention_layernorm") + (
                ("pre_feedforward_layernorm", "post_feedforward_layernorm") if self.gemma else ())
            scales = [scale(getattr(layer, n)) for n in names]
            if self.qk_norm:  # q's and k's heads are normed as one [h + kv, hd] tensor: q's scale per query head, then k's
                q_scale, k_scale = scale(layer.self_attn.q_norm), scale(layer.self_attn.k_norm)  # each [hd]
                scales.append(torch.cat([q_scale.expand(self.heads, -1), k_scale.expand(self.kv_heads, -1)]))
            for j, w in enumerate(scales):  # buffers: they follow the module's .to()
                self.register_buffer(f"norm_{i}_{j}", w, persistent=False)
            self.norms.append([f"norm_{i}_{j}" for j in range(len(scales))])
        self.register_buffer("final", scale(body.norm), persistent=False)
        kinds = [projections_of(layer) for layer in self.layers]  # per layer: (q, k, v), (o,), (gate, up), (down,)
        # q/k/v and gate/up fused, each kind on the kernel measured faster per width (projections.py)
        kind_names = ("qkv", "o", "gate_up", "down")
        self.kernel_plans = {kind: plan for kind, (_, plan) in projections.plan_projections({
            name: [layer[j] for layer in kinds] for j, name in enumerate(kind_names)
        }, model).items()}  # read from the model's kernel plan (specviz.runtime.plan)
        fused = [fused_of(*layer[j]) for j in range(len(kind_names)) for layer in kinds]
        self.fused = torch.nn.ModuleList([f for f in fused if f is not None])  # the planned layers this body reads
        self.parts = [LayerParts.of(layer) for layer in self.layers]  # per layer: its products, resolved once

    def _norm(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:  # [..., m] -> [..., m]
        """RMSNorm in float32 with scale ``w``, rounded back to x's dtype, as transformers' Gemma norm
        writes it (Llama's bf16 norm scales after rounding: one rounding apart, as ``F.rms_norm``)."""
        if x.dtype == torch.float32:  # no casts
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * w
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps) * w).to(x.dtype)

    def _rope(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:  # [n, h, hd]
        """x * cos + rotate_half(x) * sin over the first ``rotary_dim`` dims of each head (cos, sin
        [n, 1, rotary_dim]); Phi-3's partial rotary passes the other dims through unchanged."""
        r, half = self.rotary_dim, self.rotary_dim // 2
        xr = x[..., :r]  # [n, h, r]
        turned = xr * cos + torch.cat((-xr[..., half:], xr[..., :half]), -1) * sin
        return torch.cat((turned, x[..., r:]), -1) if r < self.head_dim else turned

    def forward(self, tokens, pos, cos, sin, cos_local, sin_local, mask, mask_local, keys, values):
        # tokens, pos [n] long; cos/sin [n, 1, hd]; masks [n, S] additive; keys/values [layers, kv, C, hd] (C >= S)
        h = F.embedding(tokens, self.embedding) * self.embed_scale  # [n, d]
        for i, parts in enumerate(self.parts):
            w = [getattr(self, name) for name in self.norms[i]]
            rows = (cos_local, sin_local, mask_local) if self.local[i] else (cos, sin, mask)
            h = self.layer(h, parts, w, pos, *rows, keys[i], values[i])
        return self._norm(h, self.final)  # [n, d]

    def layer(self, h, parts: LayerParts, w, pos, cos, sin, mask, keys, values):
        """One decoder layer: h [n, d] -> [n, d]; writes the tokens' keys and values [kv, n, hd] into
        ``keys``/``values`` [kv, C, hd] at ``pos``. Every shape is written with -1 for n."""
        hd, norm = self.head_dim, self._norm
        kv, group = self.kv_heads, self.heads // self.kv_heads
        span = mask.shape[1]  # S: attention reads the buffers' first S slots (the buffers hold C >= S)
        x = norm(h, w[0])
        if parts.qkv is not None:  # q, k and v in one product (fp32/bf16 planned, or an int8 copy's: one quantization of x)
            qk, v = _rows(parts.qkv, x).split(((self.heads + kv) * hd, kv * hd), dim=-1)  # [n, (h+kv)*hd], [n, kv*hd]
        else:
            q_proj, k_proj, v_proj = parts.q_k_v
            qk, v = torch.cat((_rows(q_proj, x), _rows(k_proj, x)), -1), _rows(v_proj, x)
        qk = qk.view(-1, self.heads + kv, hd)  # [n, h+kv, hd]: q's heads, then k's, normed and rotated as one
        if self.qk_norm:  # Gemma 3's (1 + w) or Qwen3's (w): the last scale of the layer
            qk = norm(qk, w[-1])
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
        o = _rows(parts.o, o.permute(2, 0, 1, 3).reshape(-1, self.heads * hd))  # [n, d]
        if self.gemma:
            h = h + norm(o, w[1])
            gate, up = parts.gate_and_up_of(norm(h, w[2]))
            return h + norm(_rows(parts.down, F.gelu(gate, approximate="tanh") * up), w[3])
        h = h + o
        gate, up = parts.gate_and_up_of(norm(h, w[1]))
        return h + _rows(parts.down, F.silu(gate) * up)
