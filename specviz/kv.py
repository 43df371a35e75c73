"""KV-cached forward passes and rollback, shared by the engine and model-based proposers."""

from __future__ import annotations

import torch


def new_cache(model: torch.nn.Module):
    """An empty DynamicCache laid out for ``model`` (sliding-window layers included) that can be
    rolled back: past recording keeps sliding-window states until ``rollback`` trims them."""
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    cache.activate_past_recording()
    return cache


def cache_length(cache) -> int:
    return int(cache.get_seq_length())


def rollback(cache, length: int) -> None:
    """Drop every cached position at or after ``length`` (``cache.crop``, transformers 5 style)."""
    cache.crop(-(cache_length(cache) - length))


def forward_logits(model: torch.nn.Module, input_ids: torch.Tensor, cache, keep: int) -> torch.Tensor:
    """Run ``input_ids`` [n] through ``model`` on top of ``cache`` (updated in place) and return
    the float32 logits of the last ``keep`` positions [keep, V]."""
    out = model(input_ids=input_ids[None], cache=cache, use_cache=True, logits_to_keep=keep)
    rollback(cache, cache_length(cache))  # crop(0): trims sliding-window layers back to the window
    return out.logits[0, -keep:].float()  # [keep, V]


def vocab_size(model: torch.nn.Module) -> int:
    """The size of the model's logits (its config's vocabulary)."""
    return int(model.config.get_text_config().vocab_size)
