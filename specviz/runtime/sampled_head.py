"""The bf16 screen a sampled step bounds every logit with (y_i - b <= l_i <= y_i + b, one b a row),
for :mod:`specviz.core.certified` to decide the rule on (docs/exactness.md, section 5), at the widths
the model's plan names ("sampled"; untuned: every width). The argmax's bf16 screen serves where the
model keeps one; else a bf16 copy is built on the first sampled step (the int8 screen's per-id
bounds are about ten times wider: too wide to bound a softmax at T = 0.7). Only where the argmax
head screens at all (:func:`specviz.runtime.argmax_head.attach`).
"""

from __future__ import annotations

import dataclasses

import torch

from . import argmax_head, plan, state

SAMPLE = "sample"  # forward_logits(lazy=SAMPLE): a sampled step's logits, bounded where the plan says


def setting(model: torch.nn.Module) -> str:
    value = state.of(model).options.sampled_head  # SPECVIZ_SAMPLED_HEAD
    if value not in ("auto", "on", "0"):
        raise ValueError(f"SPECVIZ_SAMPLED_HEAD must be auto, on or 0, not {value!r}")
    return value


def screen_for(model: torch.nn.Module, rows: int) -> argmax_head.Screen | None:
    """The bf16 screen a sampled step of ``rows`` rows bounds its logits with, or None (the full head)."""
    mode = setting(model)
    argmax_screen = argmax_head.screen_of(model)
    if argmax_screen is None or mode == "0":
        return None
    held = state.of(model)
    with held.lock:  # two sessions' first sampled steps build it once
        if held.sampled_screen is None or held.sampled_screen[0] != mode:
            bf16 = next((s for s in argmax_head.screens_of(model) if isinstance(s, argmax_head.Screen)), None) \
                or argmax_head.build(model.get_output_embeddings().weight)
            wanted = plan.of(model).kind("sampled") if mode == "auto" else plan.KindPlan({1: "bf16"})
            times = {w: (m["full"], m["bf16"]) for w, m in wanted.ms.items() if "bf16" in m}
            held.sampled_screen = (mode, dataclasses.replace(bf16, use_at=argmax_head.use_at(wanted, "bf16"), times=times))
    kept = held.sampled_screen[1]
    return kept if kept.used(rows) else None


def bounded(screen: argmax_head.Screen, h: torch.Tensor) -> torch.Tensor:
    """What a bounded row costs before its exact logits: the values, the bound, one exp a logit."""
    x, off = screen.rows(h)
    y = screen.screen(h, x)
    return torch.exp(y + screen.bound(h, off)[:, None])


def screen_bytes(model: torch.nn.Module) -> int:
    """Memory ``model``'s head screens take beside its weights: the argmax screen's copy and, where
    that is the int8 one, the bf16 copy a sampled step builds (counted before it is built)."""
    screens = argmax_head.screens_of(model)
    total = sum(t.numel() * t.element_size() for screen in screens for t in vars(screen).values()
                if isinstance(t, torch.Tensor) and t is not screen.weight)
    if screens and not any(isinstance(screen, argmax_head.Screen) for screen in screens):
        total += screens[0].weight.numel() * 2  # the bf16 copy a sampled step builds (argmax_head.build)
    return int(total)
