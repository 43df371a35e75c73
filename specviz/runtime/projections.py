"""The decoder body's projections on their planned kernels: each kind (q/k/v fused, o, gate/up
fused, down) one :class:`~specviz.runtime.kernels.PlannedLinear` per layer, running the kernel the
model's plan names at each width (:mod:`specviz.runtime.plan`; read, never measured here).

gemma-3-270m on a Zen 4 EPYC, 2 threads, all 18 layers per pass: q/k/v 6.1 ms (F.linear) against
3.1 on specviz's blocked product at one row, gate/up 17.7 against 3.5 (docs/results-log.md).
``SPECVIZ_CPU_KERNELS=0`` leaves the projections alone.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence

import torch

from . import plan as kernel_plan
from . import state
from .kernels import PlannedLinear, fusable, fused_of

__all__ = ["MIN_BODY_ELEMENTS", "KIND_NAMES", "PlannedLinear", "fusable", "fused_of", "plan_projections"]

MIN_BODY_ELEMENTS = 4_000_000  # a projection kind whose layers hold fewer weights in all is left as it is
KIND_NAMES = {"qkv": "q/k/v", "o": "o", "gate_up": "gate/up", "down": "down"}  # projection kinds, as a person reads them


def _planned_of(members: Sequence[torch.nn.Linear]) -> PlannedLinear | None:
    """The planned layer ``members`` already are the rows of, or None. A body's graphs reach the
    planned layer through its members (:func:`fused_of`), so a second body planning them anew would
    take them from the first (a graph of the first would then read a copy from outside its modules)."""
    fused = fused_of(*members)
    return fused if isinstance(fused, PlannedLinear) and fused.plan is not None else None


def plan_projections(kinds: dict[str, list[Sequence[torch.nn.Linear]]], model: torch.nn.Module | None = None
                     ) -> dict[str, tuple[list[PlannedLinear], kernel_plan.KindPlan]]:
    """Each projection kind of a decoder body (``{"qkv": [(q, k, v) per layer], "o": [(o,) per
    layer], ...}``) as one :class:`PlannedLinear` per layer on the kernels ``model``'s plan names
    for it (feature defaults without one). Kinds that are not plain fp32 or bf16 Linears, or too
    small to matter (under :data:`MIN_BODY_ELEMENTS` weights in all), keep their own layers.
    Nothing is done with ``SPECVIZ_CPU_KERNELS=0``."""
    if not state.options_of(model).cpu_kernels:  # SPECVIZ_CPU_KERNELS
        return {}
    plan = kernel_plan.of(model)
    plain = _READ_PLAIN
    planned = {}
    for kind, groups in kinds.items():
        # A body's graphs reach a planned layer through the model's own projections (fused_of), so
        # layers an earlier body of this model reads (an early-exit draft shares the target's first
        # layers) stay as that body left them: its planned ones are taken over, its plain ones stay plain.
        done = [_planned_of(g) for g in groups]
        taken = [d for d in done if d is not None]  # an earlier body's planned layers
        earlier = taken[0] if taken else None
        free = [g for g, d in zip(groups, done) if d is None and not all(m in plain for m in g)]
        qualifies = (bool(groups) and all(fusable(g) for g in groups)
                     and len({(sum(m.out_features for m in g), g[0].in_features) for g in groups}) == 1  # one plan
                     and (earlier is not None or sum(m.weight.numel() for g in groups for m in g) >= MIN_BODY_ELEMENTS))
        if not free or not qualifies:
            if earlier is not None:
                planned[kind] = (taken, earlier.plan)
            plain.update(m for g in free for m in g)
            continue
        kind_plan = earlier.plan if earlier is not None else plan.kind(kind, free[0][0].weight.dtype)
        layers = [PlannedLinear.fuse(g) for g in free]
        for layer in layers:
            layer.use(kind_plan.by_width(kernel_plan.WIDTHS[-1]), kind_plan)
        planned[kind] = (taken + layers, kind_plan)
    return planned


# Layers a body reads as they are, so that a later body does not plan them from under its graphs:
# held weakly, and not carried by a copy of the model (a copy's first body plans afresh). Not in one
# model's runtime object: an early-exit draft's body and its target's share these layers.
_READ_PLAIN: "weakref.WeakSet[torch.nn.Module]" = weakref.WeakSet()
