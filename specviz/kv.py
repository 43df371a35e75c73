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
    """Drop every cached position at or after ``length`` (``cache.crop``, transformers 5 style).

    Call it once after each forward that may need undoing, even when nothing is dropped: the
    crop is also what trims sliding-window layers back to their window, and trimming before a
    later rollback would lose states that the rollback needs.
    """
    current = cache_length(cache)
    if current == 0:
        return  # nothing cached yet (layers not initialised)
    if length > current:
        raise ValueError(f"cannot roll a cache of {current} positions forward to {length}")
    cache.crop(-(current - length))


def forward_logits(model: torch.nn.Module, input_ids: torch.Tensor, cache, keep: int) -> torch.Tensor:
    """Run ``input_ids`` [n] through ``model`` on top of ``cache`` (updated in place) and return
    the float32 logits of the last ``keep`` positions [keep, V]."""
    out = model(input_ids=input_ids[None], cache=cache, use_cache=True, logits_to_keep=keep)
    return out.logits[0, -keep:].float()  # [keep, V]


def context_window(model: torch.nn.Module) -> int | None:
    """The most positions ``model`` takes (``max_position_embeddings`` of its config, or of its
    text config for multimodal ones); None when the config sets no limit."""
    config = getattr(model, "config", None)
    configs = [config]
    if config is not None and hasattr(config, "get_text_config"):
        configs.append(config.get_text_config())
    for cfg in configs:
        n = getattr(cfg, "max_position_embeddings", None)
        if isinstance(n, int) and not isinstance(n, bool) and n > 0:
            return n
    return None


def vocab_size(model: torch.nn.Module) -> int:
    """The size of the model's logits (its config's vocabulary)."""
    return int(model.config.get_text_config().vocab_size)
