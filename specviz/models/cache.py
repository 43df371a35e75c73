"""The in-process model cache: LRU by count and by a memory budget, never evicting a pinned model."""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .. import settings
from .loaded import LoadedModel

_CacheKey = tuple[str, str, str, str | None]
_cache: OrderedDict[_CacheKey, LoadedModel] = OrderedDict()
_cache_lock = threading.Lock()
_key_locks: dict[Any, threading.Lock] = {}


def _cache_size() -> int:
    try:
        return max(0, int(settings.value("SPECVIZ_MODEL_CACHE_SIZE", "4")))
    except ValueError:
        return 4


def _key_lock(key: Any) -> threading.Lock:
    with _cache_lock:
        return _key_locks.setdefault(key, threading.Lock())


def _cache_get(key: _CacheKey) -> LoadedModel | None:
    with _cache_lock:
        hit = _cache.get(key)
        if hit is not None:
            _cache.move_to_end(key)
        return hit


def _memory_budget() -> int | None:
    """``SPECVIZ_MODEL_MEMORY_GB`` in bytes (None: no byte budget, only the count limit)."""
    raw = settings.value("SPECVIZ_MODEL_MEMORY_GB").strip()
    if not raw:
        return None
    try:
        gb = float(raw)
    except ValueError:
        return None
    return int(gb * (1 << 30)) if math.isfinite(gb) and gb > 0 else None


def model_bytes(lm: LoadedModel) -> int:
    """Memory the model's weights take: parameters and buffers (shared tensors once), plus the
    packed weights of int8 Linear layers, which are neither, and its head's screens
    (:func:`specviz.runtime.sampled_head.screen_bytes`)."""
    from ..runtime.sampled_head import screen_bytes

    seen: set[int] = set()
    total = screen_bytes(lm.model)
    for t in (*lm.model.parameters(), *lm.model.buffers()):
        if t.device.type == "meta" or id(t) in seen:
            continue
        seen.add(id(t))
        total += t.numel() * t.element_size()
    return int(total)


_pins: dict[int, int] = {}  # id(LoadedModel) -> how many runs use it now


def pin(*models: LoadedModel | None) -> None:
    """Mark models as in use: the cache will not drop them while pinned (see :func:`model_in_use`)."""
    with _cache_lock:
        for lm in models:
            if lm is not None:
                _pins[id(lm)] = _pins.get(id(lm), 0) + 1


def unpin(*models: LoadedModel | None) -> None:
    with _cache_lock:
        for lm in models:
            if lm is not None and id(lm) in _pins:
                _pins[id(lm)] -= 1
                if _pins[id(lm)] <= 0:
                    del _pins[id(lm)]


@contextmanager
def model_in_use(*models: LoadedModel | None) -> Iterator[None]:
    """``with model_in_use(target, draft): ...``: the cache keeps them while the block runs."""
    pin(*models)
    try:
        yield
    finally:
        unpin(*models)


def _evict_locked(keep: _CacheKey | None = None) -> None:
    """Drop least recently used, unpinned models until within the count and byte budgets."""
    size, budget = _cache_size(), _memory_budget()
    sizes = {k: _sizes.setdefault(id(lm), model_bytes(lm)) for k, lm in _cache.items()} if budget is not None else {}
    for key in list(_cache):  # oldest first
        over_count = len(_cache) > size
        over_bytes = budget is not None and sum(sizes[k] for k in _cache) > budget
        if not (over_count or over_bytes):
            break
        if key == keep or id(_cache[key]) in _pins:
            continue
        lm = _cache.pop(key)
        _sizes.pop(id(lm), None)


_sizes: dict[int, int] = {}  # id(LoadedModel) -> model_bytes, computed once per cached model


def _cache_put(key: _CacheKey, lm: LoadedModel) -> None:
    size = _cache_size()
    nbytes = model_bytes(lm) if _memory_budget() is not None else 0
    with _cache_lock:
        if size <= 0:
            return
        _cache[key] = lm
        _cache.move_to_end(key)
        if nbytes:
            _sizes[id(lm)] = nbytes
        _evict_locked(keep=key)


def clear_model_cache() -> None:
    """Forget every model loaded in this process (the on-disk converted copies stay)."""
    with _cache_lock:
        _cache.clear()
        _sizes.clear()
