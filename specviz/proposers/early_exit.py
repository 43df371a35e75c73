"""Early-exit self-speculation (LayerSkip-style): the target's first L layers, its final norm and
its LM head draft for the full target. No extra weights: the draft shares the target's tensors."""

from __future__ import annotations

import copy
from dataclasses import replace

import torch

from .draft_model import DraftModel


def _shallow(module: torch.nn.Module) -> torch.nn.Module:
    """A copy of ``module`` that shares its parameters but owns its child/parameter dicts, so
    swapping a child on the copy never touches the original. It is another model, so
    :func:`specviz.runtime.state.of` gives it its own runtime object (never the target's static step)."""
    twin = copy.copy(module)
    twin._modules = dict(module._modules)
    twin._parameters = dict(module._parameters)
    twin._buffers = dict(module._buffers)
    return twin


def truncated_model(model: torch.nn.Module, layers: int) -> torch.nn.Module:
    """The causal LM ``model`` cut to its first ``layers`` decoder layers (weights shared)."""
    base = model.get_decoder()  # the decoder stack: embeddings, layers, final norm
    blocks = getattr(base, "layers", None)
    if not isinstance(blocks, torch.nn.ModuleList):
        raise ValueError(f"early exit needs a decoder with a `.layers` list; {type(model).__name__} has none")
    if not 1 <= layers < len(blocks):
        raise ValueError(f"early exit needs 1 <= layers < {len(blocks)} (the target's depth), got {layers}")
    config = copy.deepcopy(model.config)
    text = config.get_text_config()
    text.num_hidden_layers = layers
    if getattr(text, "layer_types", None):
        text.layer_types = list(text.layer_types[:layers])
    short_base = _shallow(base)
    short_base.layers = torch.nn.ModuleList(list(blocks)[:layers])
    short_base.config = text
    short = _shallow(model)
    short.config = config
    for name, child in model._modules.items():
        if child is base:
            short._modules[name] = short_base
    return short


class EarlyExit(DraftModel):
    """Drafts with the target's first ``layers`` layers (its own KV cache, rolled back like any
    draft's). Cheap to set up, and exact like every proposer here; how often it is accepted
    depends on how much the early layers already know (models trained with LayerSkip: a lot)."""

    def __init__(self, target, layers: int):
        self.layers = layers
        short = truncated_model(target.model, layers)
        super().__init__(replace(target, model=short, name=f"{target.name}[:{layers}]"), name=f"early-exit:{layers}")
