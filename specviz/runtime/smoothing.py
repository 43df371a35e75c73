"""SmoothQuant's calibration for :mod:`specviz.runtime.quantize`: the calibration text, the
activation maxima per input channel, the scales s_j (Xiao et al., 2023), and the projections that
read one input (q/k/v, gate/up), which share one smoothing.

A bottom-layer module: it imports nothing from specviz but the bundled prompts.
"""

from __future__ import annotations

import torch


def calibration_token_ids(tokenizer, n_prompts: int = 8, max_tokens: int = 256) -> list[list[int]]:
    """Token ids of the first ``n_prompts`` bundled Spec-Bench dev prompts (round robin over
    categories), each cut to ``max_tokens``."""
    from ..prompts import load_prompts

    rows = load_prompts(limit=n_prompts)
    return [tokenizer(r.prompt, add_special_tokens=True)["input_ids"][:max_tokens] for r in rows]


@torch.inference_mode()
def activation_absmax(model: torch.nn.Module, batches: list[list[int]]) -> dict[str, torch.Tensor]:
    """Per-input-channel max |x| seen by every ``nn.Linear`` of ``model`` -> {name: [in]}."""
    stats: dict[str, torch.Tensor] = {}
    handles = []

    def observe(name):
        def hook(_module, args):
            x = args[0].detach().reshape(-1, args[0].shape[-1]).abs().amax(dim=0).float()  # [in]
            stats[name] = x if name not in stats else torch.maximum(stats[name], x)

        return hook

    for name, module in model.named_modules():
        if type(module) is torch.nn.Linear or hasattr(module, "linear") and type(module.linear) is torch.nn.Linear:
            handles.append(module.register_forward_pre_hook(observe(name)))
    try:
        for ids in batches:
            model(input_ids=torch.tensor([ids]), use_cache=False)
    finally:
        for h in handles:
            h.remove()
    return stats


def smoothing_scales(act_absmax: torch.Tensor, weight: torch.Tensor, alpha: float) -> torch.Tensor:
    """SmoothQuant's s_j = max|X_j|^alpha / max_i |W_ij|^(1 - alpha) ([in]; 1 where a channel is dead)."""
    w = weight.detach().float().abs().amax(dim=0)  # [in]
    a = act_absmax.float()
    s = a.clamp_min(1e-5).pow(alpha) / w.clamp_min(1e-5).pow(1.0 - alpha)  # [in]
    dead = (a <= 0) | (w <= 0)
    return torch.where(dead, torch.ones_like(s), s).clamp(1e-4, 1e4)


SHARED_INPUTS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))  # sibling projections of one input


def shared_input_groups(linears: dict[str, torch.nn.Linear]) -> list[tuple[str, ...]]:
    """Qualified names of the sibling projections that read one input (:data:`SHARED_INPUTS`,
    all present with the same input width and all with a bias or none), e.g.
    ("model.layers.0.self_attn.q_proj", "...k_proj", "...v_proj")."""
    groups = []
    for name in linears:
        parent, _, child = name.rpartition(".")
        for members in SHARED_INPUTS:
            if child != members[0]:
                continue
            names = tuple(f"{parent}.{m}" if parent else m for m in members)
            lins = [linears.get(n) for n in names]
            if all(lin is not None for lin in lins) and len({lin.in_features for lin in lins}) == 1 \
                    and len({lin.bias is None for lin in lins}) == 1:
                groups.append(names)
    return groups


__all__ = ["SHARED_INPUTS", "activation_absmax", "calibration_token_ids", "shared_input_groups", "smoothing_scales"]
