"""A model's plan applied (:mod:`specviz.runtime.plan`; read, never measured here): its LM head's
kernels and certified screens when it loads (:func:`load`), and its decoder body's projections when
the decoder is built, each kind (q/k/v fused, o, gate/up fused, down) one
:class:`~specviz.runtime.kernels.PlannedLinear` per layer running the kernel the plan names per width.

gemma-3-270m on a Zen 4 EPYC, 2 threads, all 18 layers per pass: q/k/v 6.1 ms (F.linear) against
3.1 on specviz's blocked product at one row, gate/up 17.7 against 3.5 (docs/results-log.md).
``SPECVIZ_CPU_KERNELS=0`` leaves the projections alone.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Sequence
from pathlib import Path

import torch

from . import argmax_head, cpu, state
from . import plan as kernel_plan
from .kernels import DEFAULT, PlannedLinear, fusable, fused_of

log = logging.getLogger(__name__)
__all__ = ["MIN_BODY_ELEMENTS", "KIND_NAMES", "PlannedLinear", "apply", "float_head", "fusable", "fused_of", "load",
           "plan_head", "plan_projections"]

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


_said: set[str] = set()  # the keys whose missing plan was logged


def load(model: torch.nn.Module, key: str, cache_dir: str | Path | None) -> kernel_plan.Plan:
    """Read ``key``'s plan (never measuring) and give ``model`` its kernels: the head's, its
    screens'. Without a plan file: the CPU features' defaults, said once in the log."""
    plan = kernel_plan.read(key, cache_dir)
    if plan is None:
        plan = kernel_plan.Plan(key)
        if key not in _said and all(p.device.type == "cpu" for p in model.parameters()):  # a GPU model plans nothing
            _said.add(key)
            log.info("specviz: no tuned kernel plan for %s on this machine (`specviz tune --target ...` makes one);"
                     " kernels from CPU features: %s", key, kernel_plan.default_kernel("head"))
    apply(model, plan, cache_dir)
    return plan


def apply(model: torch.nn.Module, plan: kernel_plan.Plan, cache_dir: str | Path | None = None) -> None:
    """Give ``model`` ``plan``'s head kernels and screens (its body's projections read it when its
    decoder is built: :func:`specviz.runtime.projections.plan_projections`)."""
    held = state.of(model)
    held.plan, held.sampled_screen = plan, None
    if cache_dir is not None:
        held.cache_dir = Path(cache_dir).expanduser()
    plan_head(model, plan)
    argmax_head.attach(model)


def float_head(model: torch.nn.Module) -> torch.nn.Linear | None:
    """A model's large fp32 or bf16 ``nn.Linear`` head on the CPU (or its planned wrapper's), else None."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    head = head.linear if isinstance(head, PlannedLinear) else head
    if type(head) is not torch.nn.Linear or head.weight.device.type != "cpu" or head.weight.dtype not in cpu.DTYPES:
        return None
    return head if head.weight.numel() >= cpu.MIN_HEAD_ELEMENTS else None


def plan_head(model: torch.nn.Module, plan: kernel_plan.Plan) -> bool:
    """Run the model's large float head on ``plan``'s kernels (:class:`PlannedLinear`); -> whether it
    runs another kernel than F.linear at some width. ``SPECVIZ_CPU_HEAD=0``: its own head."""
    linear = float_head(model)
    if linear is None:
        return False
    wrapped = model.get_output_embeddings()
    kind = plan.kind("head", linear.weight.dtype)
    kernels = kind.by_width(len(kernel_plan.WIDTHS))
    if cpu.disabled(state.of(model).options) or set(kernels) == {DEFAULT}:
        if isinstance(wrapped, PlannedLinear):
            model.set_output_embeddings(linear)
        return False
    head = wrapped if isinstance(wrapped, PlannedLinear) else PlannedLinear(linear)
    head.use(kernels, kind)
    if head is not wrapped:
        model.set_output_embeddings(head)
    return set(head.kernels) != {DEFAULT}
