"""Making the ``@int8`` copy of a float32 model: SmoothQuant's calibration and the conversion of
every ``nn.Linear`` to the int8 layers of :mod:`specviz.runtime.quantize` (which run it).

Plain per-tensor int8 moves gemma-3-270m's next-token distribution far from float32 (a few hidden
channels are hundreds of times larger than the rest), so every layer takes what measured best
(``benchmarks/int8_quality.py``; docs/results-log.md): one symmetric weight scale per output row,
one 8-bit activation scale per token (exact int32 sums), and SmoothQuant (Xiao et al., 2023), which
moves the outliers into W: (x / s) @ (W * s)^T with s_j = max|X_j|^alpha / max|W_:,j|^(1 - alpha)
on calibration text. Projections that read one input (q/k/v, gate/up) share one smoothing and are
one fused layer. :mod:`specviz.models.int8cache` keeps the result on disk.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import torch

from .. import settings
from ..runtime import int8_kernel
from ..runtime.quantize import LAYERS, Int8Linear

KERNELS = tuple(LAYERS)  # Int8Options.kernel: "int_mm" (Int8Linear), "blocked" (BlockedInt8Linear)
SHARED_INPUTS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))  # sibling projections of one input


@dataclass(frozen=True)
class Int8Options:
    """How :func:`quantize_int8` quantizes (the defaults measured best)."""

    smooth_alpha: float | None = 0.5  # SmoothQuant migration strength; None: no smoothing (no tokenizer needed)
    calibration_prompts: int = 8  # bundled prompts run through the float model for smoothing
    kernel: str = "int_mm"  # "int_mm" (torch._int_mm) or "blocked" (specviz's own, built for this CPU)

    def __post_init__(self):
        if self.kernel not in KERNELS:
            raise ValueError(f"kernel must be one of {', '.join(KERNELS)}, not {self.kernel!r}")
        if self.smooth_alpha is not None and not 0.0 <= self.smooth_alpha <= 1.0:
            raise ValueError(f"smooth_alpha must lie in [0, 1] or be None, not {self.smooth_alpha}")
        if self.calibration_prompts < 1:
            raise ValueError(f"calibration_prompts must be at least 1, not {self.calibration_prompts}")


_choices: dict[str, Any] = {}


def choose_kernel(options: settings.Options | None = None) -> str:
    """The kernel an ``@int8`` copy runs here: ``"blocked"`` where specviz's own loads (built for
    this CPU), else ``"int_mm"`` (``torch._int_mm``, in every torch build); ``SPECVIZ_INT8_KERNEL=int_mm``
    asks for ``int_mm``. :func:`kernel_choice` says what was chosen and why."""
    named = (options or settings.options()).int8_kernel  # the environment's without options
    if named == "int_mm":
        _choices.update(kernel=named, why=f"SPECVIZ_INT8_KERNEL={named}")
        return named
    why_not = int8_kernel.load(options)
    if why_not is not None:
        _choices.update(kernel="int_mm", why=f"specviz's own kernel: {why_not}")
        return "int_mm"
    _choices.update(kernel="blocked", why=f"SPECVIZ_INT8_KERNEL={named}" if named == "blocked" else
                    "specviz's own kernel, built for this CPU")
    return "blocked"


def kernel_choice() -> dict[str, Any] | None:
    """The last :func:`choose_kernel` in this process: {"kernel", "why"}."""
    return dict(_choices) if _choices else None


# -- SmoothQuant's calibration ------------------------------------------------------------------


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
        if _float_linear(module) is not None:
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


# -- the conversion -----------------------------------------------------------------------------


def _fused(names: tuple[str, ...], lins: list[torch.nn.Linear], stats: dict[str, torch.Tensor],
           alpha: float | None, layer: type[Int8Linear]) -> dict[str, torch.nn.Module]:
    """One ``layer`` over the stacked weights of projections that read one input (one smoothing
    against all their weights) -> {name: its rows}."""
    weight = torch.cat([lin.weight.detach().float() for lin in lins])  # [sum out, in]
    bias = None if lins[0].bias is None else torch.cat([lin.bias.detach().float() for lin in lins])
    stacked = SimpleNamespace(in_features=weight.shape[1], out_features=weight.shape[0], weight=weight, bias=bias)
    seen = [stats[n] for n in names if n in stats]
    smooth = None
    if alpha is not None and seen:
        smooth = smoothing_scales(torch.stack(seen).amax(dim=0), weight, alpha)
    fused = layer(stacked, smooth)
    out, start = {}, 0
    for name, lin in zip(names, lins):
        out[name] = fused.rows(start, start + lin.out_features)
        start += lin.out_features
    return out


def _float_linear(module: torch.nn.Module) -> torch.nn.Linear | None:
    if type(module) is torch.nn.Linear:
        return module
    inner = getattr(module, "linear", None)  # specviz.runtime.kernels.PlannedLinear wraps the head
    return inner if type(inner) is torch.nn.Linear else None


def float_targets(model: torch.nn.Module) -> dict[str, torch.nn.Linear]:
    """The layers :func:`quantize_int8` replaces, each once, by the name it replaces them under (a
    wrapper comes before the Linear it wraps: the wrapper's name)."""
    targets, seen = {}, set()
    for name, m in model.named_modules():
        lin = _float_linear(m)
        if lin is not None and id(lin) not in seen:
            seen.add(id(lin))
            targets[name] = lin
    return targets


@torch.inference_mode()
def quantize_int8(model: torch.nn.Module, tokenizer=None, options: Int8Options | None = None) -> torch.nn.Module:
    """Replace every float32 ``nn.Linear`` of ``model`` in place (the LM head too, its own copy
    when tied; the embedding stays float) by an int8 layer; -> ``model`` (eval). ``tokenizer``
    encodes the calibration prompts smoothing needs."""
    options = options or Int8Options()
    if options.smooth_alpha is not None and tokenizer is None:
        raise ValueError("smoothing needs the model's tokenizer for its calibration text; pass tokenizer= or smooth_alpha=None")
    targets = float_targets(model)
    if not targets:
        raise ValueError("the model has no nn.Linear layers to quantize")
    stats = {}
    if options.smooth_alpha is not None:
        stats = activation_absmax(model, calibration_token_ids(tokenizer, options.calibration_prompts))
    for name, lin in targets.items():
        if lin.weight.dtype != torch.float32 or lin.weight.device.type != "cpu":
            raise ValueError(f"int8 quantization needs float32 weights on the CPU; {name} is {lin.weight.dtype} on {lin.weight.device}")
    replacements = {}
    layer = LAYERS[options.kernel]
    if options.kernel == "blocked" and (why := int8_kernel.load()) is not None:
        raise ValueError(f"the blocked int8 kernel is not available here: {why}")
    for names in shared_input_groups(targets):  # q/k/v, gate/up: one fused layer each
        replacements.update(_fused(names, [targets[n] for n in names], stats, options.smooth_alpha, layer))
    for name, lin in targets.items():
        if name in replacements:
            continue
        smooth = None
        if options.smooth_alpha is not None and name in stats:
            smooth = smoothing_scales(stats[name], lin.weight, options.smooth_alpha)
        replacements[name] = layer(lin, smooth)
    for name, new in replacements.items():
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, new)
    return model.eval()
