"""KV-cached forward passes and rollback, shared by the engine and model-based proposers."""

from __future__ import annotations

import torch

from .hfcompat import cache_kwargs


def new_cache(model: torch.nn.Module):
    """An empty DynamicCache for ``model`` that can be rolled back (past recording keeps the
    sliding-window layers' states until ``rollback`` trims them)."""
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    cache.activate_past_recording()
    return cache


def session_cache(model: torch.nn.Module):
    """The buffers of ``model``'s static step (:mod:`specviz.runtime.static_decode`), else :func:`new_cache`."""
    from .static_decode import static_cache

    cache = static_cache(model)
    return cache if cache is not None else new_cache(model)


def cache_length(cache) -> int:
    return int(cache.get_seq_length())


def rollback(cache, length: int) -> None:
    """Drop every cached position at or after ``length`` (``cache.crop``). Call it after each
    forward that may need undoing, even when nothing is dropped: the crop also trims sliding-window
    layers back to their window, and trimming before a later rollback would lose states it needs."""
    current = cache_length(cache)
    if current == 0:
        return  # nothing cached yet (layers not initialised)
    if length > current:
        raise ValueError(f"cannot roll a cache of {current} positions forward to {length}")
    cache.crop(-(current - length))


def forward_logits(model: torch.nn.Module, input_ids: torch.Tensor, cache, keep: int, lazy: bool = False):
    """Run ``input_ids`` [n] through ``model`` on top of ``cache`` (updated in place) -> float32
    logits of the last ``keep`` positions [keep, V]. A static step's cache runs that step; ``lazy``
    (a greedy caller) may then get a :class:`specviz.runtime.argmax_head.HeadLogits`."""
    run = getattr(cache, "run", None)
    if run is not None:
        return run(input_ids, keep, lazy)
    out = model(input_ids=input_ids[None], **cache_kwargs(model, cache), use_cache=True, logits_to_keep=keep)
    return out.logits[0, -keep:].float()  # [keep, V]


@torch.inference_mode()  # a static step's buffers are inference tensors
def take_prefix(cache, source, n: int) -> bool:
    """Start the empty ``cache`` from ``source``'s first ``n`` positions, both static step buffers
    of one layout (a copy of the same model, such as its int8 draft) -> whether it did."""
    if not all(hasattr(c, "reserve") for c in (cache, source)) or cache.length or source.keys is None:
        return False
    if not 0 < n <= source.length:
        return False
    layers, kv, _, hd = source.keys.shape
    cache.reserve(n)
    if (cache.keys.shape[0], cache.keys.shape[1], cache.keys.shape[3], cache.keys.dtype) != (layers, kv, hd, source.keys.dtype):
        return False
    cache.keys[:, :, :n] = source.keys[:, :, :n]
    cache.values[:, :, :n] = source.values[:, :, :n]
    cache.length = n
    return True


def context_window(model: torch.nn.Module) -> int | None:
    """``max_position_embeddings`` of ``model``'s config or its text config; None where unset."""
    config = getattr(model, "config", None)
    for cfg in (config, config.get_text_config() if hasattr(config, "get_text_config") else None):
        n = getattr(cfg, "max_position_embeddings", None)
        if isinstance(n, int) and not isinstance(n, bool) and n > 0:
            return n
    return None


def vocab_size(model: torch.nn.Module) -> int:
    """The size of the model's logits."""
    return int(model.config.get_text_config().vocab_size)


# -- token trees: one forward over many branches, then keep only the accepted path ---------------

TREE_ATTENTION = ("sdpa", "eager")  # attention implementations that take a 4D float mask


def tree_attention(parents: torch.Tensor) -> torch.Tensor:
    """Which node sees which: [n, n] bool, True where column j is node i itself or one of its
    ancestors (parents [n] long, -1 = the root, parent < child)."""
    n = int(parents.shape[0])
    seen = torch.eye(n, dtype=torch.bool)
    for i, a in enumerate(parents.tolist()):
        if a >= 0:
            seen[i] |= seen[a]
    return seen.to(parents.device)  # [n, n]


def _layer_types(model: torch.nn.Module) -> list[str]:
    cfg = model.config.get_text_config()
    types = getattr(cfg, "layer_types", None)
    if types:
        return list(types)
    if getattr(cfg, "sliding_window", None) and getattr(cfg, "use_sliding_window", True):
        return ["sliding_attention"]  # no per-layer map: every layer slides (and no dict of masks)
    return ["full_attention"] * int(cfg.num_hidden_layers)


def _takes_mask_per_layer_type(model: torch.nn.Module) -> bool:
    """Whether the model's forward accepts {"full_attention": mask, "sliding_attention": mask}."""
    import inspect

    try:
        source = inspect.getsource(type(model.base_model).forward)
    except (OSError, TypeError, AttributeError):
        return False
    return "causal_mask_mapping := attention_mask, dict" in source


def check_tree_support(model: torch.nn.Module) -> None:
    """Raise a ValueError now (not a wrong answer later) unless ``model`` can score a token tree in
    one forward: an sdpa or eager attention that takes a 4D mask, full-attention layers or
    sliding-window layers whose masks can be given per layer type, and a dynamic KV cache."""
    from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer

    name = getattr(model.config, "name_or_path", "") or type(model).__name__
    impl = getattr(model.config, "_attn_implementation", None)
    if impl not in TREE_ATTENTION:
        raise ValueError(
            f"{name} uses attention {impl!r}, which cannot take a token tree's attention mask; load it with "
            "attn_implementation='sdpa' (or 'eager'), or use a chain proposer (ngram, draft:NAME)"
        )
    types = set(_layer_types(model))
    if not types <= {"full_attention", "sliding_attention"}:
        raise ValueError(f"{name} has attention layers of type {sorted(types)}; token trees support full and sliding-window attention only")
    if "sliding_attention" in types and not _takes_mask_per_layer_type(model):
        raise ValueError(
            f"{name} has sliding-window layers but its forward takes one mask for all layers, so a tree mask "
            "would drop the window; use a chain proposer with this model"
        )
    layers = getattr(new_cache(model), "layers", [])
    odd = {type(layer).__name__ for layer in layers if type(layer) not in (DynamicLayer, DynamicSlidingWindowLayer)}
    if odd:
        raise ValueError(f"{name}'s KV cache has layers of type {sorted(odd)}, which token trees cannot compact; use a chain proposer")


def _sliding_layers(cache) -> list:
    return [layer for layer in getattr(cache, "layers", []) if getattr(layer, "is_sliding", False)]


def tree_forward_logits(
    model: torch.nn.Module,
    cache,
    tokens: torch.Tensor,
    positions: torch.Tensor,
    visible: torch.Tensor,
    slot_positions: torch.Tensor,
    lazy: bool = False,
) -> torch.Tensor:
    """Run ``tokens`` [m] through ``model`` in one forward on top of ``cache`` (the context, then T
    tree slots fed earlier this step), each seeing the context and what ``visible`` [m, T+m] allows
    of the tree slots -> float32 logits [m, V]; the tokens are appended (``keep_slots`` compacts).
    ``positions`` [m]: each token's (context length + depth - 1); ``slot_positions`` [T+m]: the
    tree slots'. Sliding-window layers get their own mask, by position, and their cache is widened
    by T for this forward so no context inside the window is cut off."""
    m = int(tokens.shape[0])
    T = int(slot_positions.shape[0]) - m
    run_tree = getattr(cache, "run_tree", None)
    if run_tree is not None:  # a static step's buffers (specviz.runtime.static_decode)
        return run_tree(tokens, positions, visible, lazy, slot_positions[:T] if T else None)
    types = _layer_types(model)
    dtype = next(model.parameters()).dtype
    neg = torch.finfo(dtype).min
    sliding = _sliding_layers(cache)
    for layer in sliding:
        layer.sliding_window += T
    try:
        masks = {}
        for kind in dict.fromkeys(types):
            layer_idx = types.index(kind)
            if hasattr(cache, "get_mask_sizes"):
                kv_length, kv_offset = cache.get_mask_sizes(m, layer_idx)
            else:  # pragma: no cover - caches without sizes: full attention over everything
                kv_length, kv_offset = cache_length(cache) + m, 0
            n_ctx = kv_length - T - m  # context slots this layer attends over
            ctx_pos = torch.arange(kv_offset, kv_offset + n_ctx, device=tokens.device)  # [n_ctx]
            see_ctx = torch.ones(m, n_ctx, dtype=torch.bool, device=tokens.device)  # [m, n_ctx]
            see_tree = visible.to(tokens.device)  # [m, T+m]
            if kind == "sliding_attention":
                window = int(model.config.get_text_config().sliding_window)
                see_ctx = see_ctx & (positions[:, None] - ctx_pos[None, :] < window)
                see_tree = see_tree & (positions[:, None] - slot_positions[None, :] < window)
            allowed = torch.cat([see_ctx, see_tree], dim=1)  # [m, kv_length]
            mask = torch.zeros(allowed.shape, dtype=dtype, device=tokens.device).masked_fill(~allowed, neg)
            masks[kind] = mask[None, None]  # [1, 1, m, kv_length]
        attention_mask = masks if "sliding_attention" in masks or len(masks) > 1 else masks["full_attention"]
        out = model(
            input_ids=tokens[None], attention_mask=attention_mask, position_ids=positions[None],
            **cache_kwargs(model, cache), use_cache=True, logits_to_keep=m,
        )
    finally:
        for layer in sliding:
            layer.sliding_window -= T
    return out.logits[0, -m:].float()  # [m, V]


def keep_slots(cache, tail: int, keep: torch.Tensor | list[int]) -> None:
    """Of the last ``tail`` slots in every layer of ``cache`` (sliding ones too, for a
    :func:`new_cache`), keep only those at ``keep`` (indices into that tail, in order): a tree's
    accepted path, gathered."""
    keep = torch.as_tensor(keep, dtype=torch.long)
    dropped = tail - int(keep.shape[0])
    if tail == 0 or (dropped == 0 and bool((keep == torch.arange(tail)).all())):
        return
    if hasattr(cache, "keep_slots"):  # a static step's buffers
        return cache.keep_slots(tail, keep)
    for layer in getattr(cache, "layers", []):
        if not getattr(layer, "is_initialized", False) or layer.keys is None or layer.keys.numel() == 0:
            continue
        L = layer.keys.shape[-2]
        idx = torch.cat([torch.arange(L - tail), L - tail + keep]).to(layer.keys.device)  # [L - dropped]
        layer.keys = layer.keys.index_select(-2, idx)
        layer.values = layer.values.index_select(-2, idx)
        if hasattr(layer, "cumulative_length"):
            layer.cumulative_length -= dropped


def score_tree(model: torch.nn.Module, cache, root: torch.Tensor, tokens: torch.Tensor, parents: torch.Tensor,
               lazy: bool = False) -> torch.Tensor:
    """One target forward over ``root`` [1] and ``tokens`` [n] on top of ``cache`` (the context before
    the root): node i (parent ``parents[i]``, -1: the root) sees the context, the root and its ancestors,
    at position len(context) + depth - 1 -> float32 logits [n+1, V] (row i+1 after node i; ``lazy``
    as :func:`forward_logits`'s)."""
    feed = torch.cat([root, tokens])  # [n+1]
    par = torch.cat([parents.new_full((1,), -1), torch.where(parents < 0, 0, parents + 1)])  # [n+1] root = slot 0
    par[0] = -1
    depth = [0]
    for a in par[1:].tolist():
        depth.append(depth[a] + 1)
    positions = cache_length(cache) + torch.tensor(depth, dtype=torch.long, device=tokens.device)  # [n+1]
    return tree_forward_logits(model, cache, feed, positions, tree_attention(par), positions, lazy)


def keep_path(cache, n: int, path: list[int] | tuple[int, ...]) -> None:
    """After ``score_tree`` over n nodes: keep the root and the accepted ``path`` (node indices) only."""
    keep_slots(cache, n + 1, [0] + [i + 1 for i in path])
