"""The static step's ``fused`` runner: each decoder layer of an int8 or float32 body as one op.

An int8 draft's one-token step is mostly not its products: on a Zen 4 EPYC (2 threads) gemma-3-270m's
int8 body spent about 2.6 ms of 6 ms in its 72 int8 products and the rest in ~30 small ops a layer
(norms, rotary, K/V writes, attention, the activation, residual adds), each dispatched alone, even
traced. ``torch.ops.specviz_int8.layer`` (``layer_kernel.cpp``, built with the int8 kernel) is
:meth:`specviz.runtime.body.DecoderBody.layer` written out in C++ on the same products: one
call a layer. This runner calls it from Python for each layer (no graph to build) and serves
float32 bodies whose projections all run on specviz's int8 kernel (``@int8``, ``kernel="blocked"``,
q/k/v and gate/up fused) or are all planned float32 layers
(:class:`~specviz.runtime.projections.PlannedLinear`), which it runs on specviz's float32 product
(a blocked copy of each weight; every row's sums in one order, so a row gets the same bits at every
width). gemma-3-270m in float32 on that CPU: 17.1 -> 13.8 ms at one token, 21.4 -> 16.5 at five
(trace -> fused). Whether a model keeps it is measured with the other runners on its first call
(:class:`specviz.runtime.runners.Choice`); its hidden states match the body's to float rounding
(tests/test_layer_op.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from . import dense_kernel, int8_kernel, runners
from .body import projections_of
from .projections import PlannedLinear, fused_of
from .quantize import BlockedInt8Linear

__all__ = ["RUNNER", "Prefill", "products_kind", "why_not"]

log = logging.getLogger(__name__)


def _products(layer: torch.nn.Module) -> list[torch.nn.Module | None]:
    """A decoder layer's four products as the op takes them: q/k/v fused, o, gate/up fused, down
    (a kind stored as one layer, Phi-3's q/k/v and gate/up, is that layer; None: not fused)."""
    return [fused_of(*members) or (members[0] if len(members) == 1 else None) for members in projections_of(layer)]


def products_kind(body: torch.nn.Module) -> str | None:
    """``"int8"`` where every projection of ``body`` is fused (q/k/v, gate/up) on specviz's int8
    kernel (an ``@int8`` model's), ``"float32"`` where every one is a planned float32 layer
    (:class:`~specviz.runtime.projections.PlannedLinear`, run on specviz's float32 product), else None."""
    kinds = set()
    for layer in body.layers:
        for m in _products(layer):
            if isinstance(m, BlockedInt8Linear) and "blocked" in m._buffers:  # a part blocks on its own
                kinds.add("int8")
            elif isinstance(m, PlannedLinear) and m.weight.dtype == torch.float32:
                kinds.add("float32")
            else:
                return None
    return kinds.pop() if len(kinds) == 1 else None


def why_not(body: torch.nn.Module) -> str | None:
    """Why ``body`` (a static step's) cannot run each layer as one op (a sentence), or None."""
    if body.dtype != torch.float32:
        return f"its activations are {body.dtype}, not float32"
    if products_kind(body) is None:
        return ("not every projection is fused and on specviz's int8 kernel (an @int8 model's) or planned in float32"
                " (q/k/v, o, gate/up, down)")
    if body.heads % body.kv_heads or body.head_dim % 2:
        return "query heads not a multiple of the key/value heads, or an odd head size"
    if body.rotary_dim != body.head_dim:
        return f"its rotary covers {body.rotary_dim} of a head's {body.head_dim} dims (the op rotates whole heads)"
    return int8_kernel.load()


def _weights(p: torch.nn.Module) -> tuple[torch.Tensor, ...]:
    """A product's blocked weight, steps, row sums, bias, smoothing (empty: none) as the op takes them;
    a float32 layer's blocked copy made here where its plan keeps none (it lives with the step)."""
    empty = torch.empty(0)
    if isinstance(p, PlannedLinear):
        blocked = p.blocked if p.blocked is not None else dense_kernel.block(p.weight)
        return blocked, empty, empty, empty if p.bias is None else p.bias.detach(), empty
    return (p.blocked, p.scale, p.wsum, empty if p.bias is None else p.bias,
            empty if p.inv_smooth is None else p.inv_smooth)


def _layer_args(body: torch.nn.Module) -> list[tuple]:
    """Per layer, the op's arguments that do not change between calls (the weights, by reference)."""
    out = []
    for i, layer in enumerate(body.layers):
        ps = _products(layer)
        parts = list(zip(*(_weights(p) for p in ps)))  # 5 lists of 4
        out.append(([getattr(body, name) for name in body.norms[i]], *(list(t) for t in parts), [p.out_features for p in ps]))
    return out


def _build(body: torch.nn.Module, example: tuple, directory) -> runners.Step:
    why = why_not(body)
    if why is not None:
        raise RuntimeError(why)
    args, op = _layer_args(body), torch.ops.specviz_int8.layer
    shape = (body.heads, body.kv_heads, body.scaling, body.eps, body.gemma)

    def step(tokens, pos, cos, sin, cos_local, sin_local, mask, mask_local, keys, values):
        # as DecoderBody.forward: tokens, pos [n]; cos/sin [n, 1, hd]; masks [n, S]; keys/values [layers, kv, C, hd]
        h = F.embedding(tokens, body.embedding) * body.embed_scale  # [n, d]
        for i, fixed in enumerate(args):
            rows = (cos_local, sin_local, mask_local) if body.local[i] else (cos, sin, mask)
            h = op(h, *fixed, *rows, keys[i], values[i], pos, *shape)  # [n, d]
        return body._norm(h, body.final)  # [n, d]

    step(*example)
    return step


RUNNER = runners.Runner("fused", _build, every_body_any_width=True)


class Prefill:
    """How a model's static step prefills a prompt of n tokens: through the body on all n rows at
    once (the fused runner's layer op for an int8 or planned float32 body; else the body op by op),
    or through the model's own batched forward (``transformers``: MKL's products, SDPA).

    By default always the body, never by timing: the two ways write other floats into the keys and
    values (an int8 model's forward quantizes its activations otherwise), so a choice by timing made
    a seed's tokens differ from one start to the next; and the body measured faster at every length
    tried (below). With ``measure`` (``SPECVIZ_STATIC_DECODE=all``, tuning) it is measured: a length
    no longer than one where the body measured faster takes the body, one no shorter than one where
    the model measured faster takes the model, and any other runs both ways once (the same keys and
    values written to the same slots; the faster way last, so they are its), said in the log.
    On a Zen 4 EPYC (2 threads): gemma-3-270m@int8, 26 tokens 46 ms (the model's) against 21
    (the fused body's), 120: 91 against 75; gemma-3-270m in float32, 50 tokens 150 against 84 ms,
    120: 268 against 172. The int8 body's per-token activation quantization is also its decode
    step's, closer to float32 (softmax overlap 0.934 against 0.919 on a 48-token prompt)."""

    def __init__(self, label: str, measure: bool = False):
        self.label, self.measure = label, measure
        self.body_upto = 0  # the longest prompt at which the body measured faster
        self.model_from: int | None = None  # the shortest at which the model's forward did

    def __call__(self, n: int, model_way: Callable[[], torch.Tensor], body_way: Callable[[], torch.Tensor]) -> torch.Tensor:
        if not self.measure or n <= self.body_upto:
            return body_way()
        if self.model_from is not None and n >= self.model_from:
            return model_way()
        t = time.perf_counter()
        model_way()
        t_model = time.perf_counter() - t
        t = time.perf_counter()
        out = body_way()
        t_body = time.perf_counter() - t
        if t_body < t_model:
            self.body_upto = n
        else:
            self.model_from = n if self.model_from is None else min(self.model_from, n)
            out = model_way()  # the keys and values of the way every later prompt of this length takes
        log.info("specviz: prefill of %d tokens for %s: the body %.1f ms, the model's forward %.1f ms; %s", n,
                 self.label, t_body * 1e3, t_model * 1e3, "the body" if t_body < t_model else "the model's forward")
        return out
