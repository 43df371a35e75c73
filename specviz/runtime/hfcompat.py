"""Where transformers 5 releases differ in what specviz calls (the floor is 5.18: see pyproject.toml)."""

from __future__ import annotations

import functools
import inspect

import torch


@functools.cache
def _cache_arg(forward) -> str:
    """The name a model's forward takes its cache by: ``cache`` in recent transformers 5 releases,
    ``past_key_values`` before the rename (an unknown keyword would be swallowed silently)."""
    return "past_key_values" if "past_key_values" in inspect.signature(forward).parameters else "cache"


def cache_kwargs(model: torch.nn.Module, cache) -> dict:
    """``{name: cache}`` for ``model``'s forward, whichever transformers 5 release is installed."""
    return {_cache_arg(type(model).forward): cache}
