"""The static step's ``fused`` runner: each decoder layer of a float32 body as one C++ op.

A small model's one-token step is mostly ~30 small ops a layer, each dispatched alone, not its
products. ``torch.ops.specviz_int8.layer`` (``layer_kernel.cpp``) is
:meth:`specviz.runtime.body.DecoderBody.layer` in C++ on the same products, one call a layer, for
bodies whose projections are all fused on specviz's int8 kernel (``@int8``) or all planned float32
layers (:class:`~specviz.runtime.projections.PlannedLinear`, whose rows sum in one order at every
width). The default where :func:`why_not` allows; hidden states match the body's to float rounding
(tests/test_layer_op.py). Measurements: docs/results-log.md.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from . import dense_kernel, int8_kernel
from .body import Runner, Step, projections_of
from .projections import PlannedLinear, fused_of
from .quantize import BlockedInt8Linear

__all__ = ["RUNNER", "products_kind", "why_not"]


def _products(layer: torch.nn.Module) -> list[torch.nn.Module | None]:
    """A decoder layer's four products as the op takes them: q/k/v fused, o, gate/up fused, down
    (a kind stored as one layer, Phi-3's q/k/v and gate/up, is that layer; None: not fused)."""
    return [fused_of(*members) or (members[0] if len(members) == 1 else None) for members in projections_of(layer)]


def products_kind(body: torch.nn.Module) -> str | None:
    """``"int8"`` where every product of ``body`` is fused on specviz's int8 kernel, ``"float32"``
    where every one is a planned float32 layer, else None."""
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


def _build(body: torch.nn.Module, example: tuple) -> Step:
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

    return step


RUNNER = Runner("fused", _build)
