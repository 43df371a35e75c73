"""``specviz tune`` and a model's load: the step that measures a plan and the one that reads it.

:func:`tune` times every kernel of :mod:`specviz.runtime.kernels` on the model's LM head and each
projection kind of its body at widths 1..9, and its head screens, once per machine, model, torch
version and thread count, and writes the plan file (:mod:`specviz.runtime.plan`); :func:`load`
(called by ``load_model``) reads it and gives the model its head kernels and screens; the decoder
reads the projections' kinds when it is built. Nothing here is timed on a load or a step.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import torch

from . import argmax_head, cpu, projections, sampled_head, state
from . import plan as plans
from .body import projections_of
from .kernels import DEFAULT, TABLE, PlannedLinear, fusable, fused_of

log = logging.getLogger(__name__)
key_of = plans.key_of  # a model's plan key, for its loader

_said: set[str] = set()  # the keys whose missing plan was logged


def load(model: torch.nn.Module, key: str, cache_dir: str | Path | None) -> plans.Plan:
    """Read ``key``'s plan (never measuring) and give ``model`` its kernels: the head's, its
    screens'. Without a plan file: the CPU features' defaults, said once in the log."""
    plan = plans.read(key, cache_dir)
    if plan is None:
        plan = plans.Plan(key)
        if key not in _said and all(p.device.type == "cpu" for p in model.parameters()):  # a GPU model plans nothing
            _said.add(key)
            log.info("specviz: no tuned kernel plan for %s on this machine (`specviz tune --target ...` makes one);"
                     " kernels from CPU features: %s", key, plans.default_kernel("head"))
    apply(model, plan, cache_dir)
    return plan


def apply(model: torch.nn.Module, plan: plans.Plan, cache_dir: str | Path | None = None) -> None:
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


def plan_head(model: torch.nn.Module, plan: plans.Plan) -> bool:
    """Run the model's large float head on ``plan``'s kernels (:class:`PlannedLinear`); -> whether it
    runs another kernel than F.linear at some width. ``SPECVIZ_CPU_HEAD=0``: its own head."""
    linear = float_head(model)
    if linear is None:
        return False
    wrapped = model.get_output_embeddings()
    kind = plan.kind("head", linear.weight.dtype)
    kernels = kind.by_width(len(plans.WIDTHS))
    if cpu.disabled(state.of(model).options) or set(kernels) == {DEFAULT}:
        if isinstance(wrapped, PlannedLinear):
            model.set_output_embeddings(linear)
        return False
    head = wrapped if isinstance(wrapped, PlannedLinear) else PlannedLinear(linear)
    head.use(kernels, kind)
    if head is not wrapped:
        model.set_output_embeddings(head)
    return set(head.kernels) != {DEFAULT}


def body_kinds(model: torch.nn.Module) -> dict[str, list[torch.Tensor]]:
    """Each projection kind of ``model``'s decoder layers as one weight per layer (q/k/v, gate/up
    fused), where the body could plan it (plain fp32 or bf16 Linears, large enough)."""
    layers = getattr(getattr(model, "model", None), "layers", None)
    if layers is None:
        return {}
    try:
        per_layer = [projections_of(layer) for layer in layers]
    except AttributeError:  # not a llama-like family
        return {}
    out = {}
    for j, kind in enumerate(("qkv", "o", "gate_up", "down")):
        groups = [layer[j] for layer in per_layer]
        fused = [fused_of(*g) for g in groups]
        weights = [f.weight.detach() if isinstance(f, PlannedLinear) else
                   torch.cat([m.weight.detach() for m in g]) if fusable(g) else None for f, g in zip(fused, groups)]
        if None not in weights and len({tuple(w.shape) for w in weights}) == 1 \
                and sum(w.numel() for w in weights) >= projections.MIN_BODY_ELEMENTS:
            out[kind] = weights
    return out


def tune(model: torch.nn.Module, cache_dir: str | Path | None = None, *, again: bool = False,
         progress: Callable[[str], None] | None = None) -> tuple[plans.Plan, bool]:
    """Measure ``model``'s plan here once and write its file (:func:`load` read its key); with a
    plan file there already, read it instead unless ``again``. -> (the plan, whether measured).
    The fresh plan is given to the model (its decoder, if built already, keeps the old one)."""
    held = state.of(model)
    key = held.plan.key if held.plan is not None else plans.key_of(type(model).__name__, torch.float32)
    cache_dir = Path(cache_dir).expanduser() if cache_dir is not None else held.cache_dir
    found = plans.read(key, cache_dir) if cache_dir is not None and not again else None
    if found is not None:  # measured before: the model's load read it (a model loaded otherwise gets it now)
        if held.plan is None or held.plan.path != found.path:
            apply(model, found, cache_dir)
        return found, False
    say = progress or (lambda s: None)
    if cpu.busy():  # two jobs on 2 cores double every kernel's time: the plan is written, and says the load
        log.warning("specviz: tuning on a busy machine (load %.1f): the timings are noisy", cpu.load_average() or 0.0)
    kinds: dict[str, plans.KindPlan] = {}
    head = float_head(model)
    if head is not None:
        say(f"timing the LM head's kernels ({len(TABLE)} kernels, widths 1-{plans.WIDTHS[-1]})")
        kinds["head"] = plans.measure_kind([head.weight.detach()], plans.HEAD_REPEATS)
    for kind, weights in body_kinds(model).items():
        say(f"timing the {kind} projections' kernels")
        kinds[kind] = plans.measure_kind(weights, plans.BODY_REPEATS)
    plan_head(model, plans.Plan(key, dict(kinds)))  # the screens are timed against the head as it will run
    for kind, measure in (("argmax", argmax_head.measure), ("sampled", sampled_head.measure)):
        found_kind = measure(model, kinds)
        if found_kind is not None:
            say(f"timed {kind}")
            kinds[kind] = found_kind
    plan = plans.Plan(key, kinds)
    if cache_dir is not None:
        plan = plans.Plan(key, kinds, plans.write(plan, cache_dir))
    if held.decoder is None:
        apply(model, plan, cache_dir)
    else:
        log.info("specviz: %s's decoder was built before tuning: the new plan applies from its next load", key)
        held.plan = plan
    return plan, True
