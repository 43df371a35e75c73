"""One runtime object per loaded model: everything the runtime decided or built for it.

A model's static decode step, head plan, certified screens and cache directory live in one
:class:`ModelRuntime` the model carries (``of(model)``), not in module-level registries: one place
to look, and it goes when the model goes.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from .. import settings

ATTRIBUTE = "_specviz_runtime"  # where a model keeps its ModelRuntime (an attribute, not a submodule)
_CREATE = threading.Lock()


@dataclass
class ModelRuntime:
    """What the runtime holds for one model. Fields are None until the part that owns them builds
    them (each module documents its own field); ``lock`` serialises two sessions' first builds."""

    cache_dir: Path | None = None  # where this model's loader keeps converted weights and plans
    decoder: Any = None  # specviz.runtime.static_decode.StaticDecoder
    plan: Any = None  # specviz.runtime.plan.Plan: the kernel per width of each kind of weight (read at load)
    screen: Any = None  # specviz.runtime.argmax_head.Screen: the certified greedy head
    sampled_screen: Any = None  # the bf16 screen a sampled step bounds its logits with
    extra: dict[str, Any] = field(default_factory=dict)  # anything else a runtime module keeps per model
    lock: threading.RLock = field(default_factory=threading.RLock, repr=False, compare=False)
    owner: Any = field(default=None, repr=False, compare=False)  # a weakref to the model it belongs to
    pinned: settings.Options | None = None  # the options load_model was given (None: the environment's when read)

    @property
    def options(self) -> settings.Options:
        """The options this model runs with: those it was loaded with, else the environment's now
        (a model built without ``load_model(..., options=...)`` follows its process's settings)."""
        return self.pinned if self.pinned is not None else settings.options()

    def __reduce__(self):  # a copied or pickled model is another model: it starts with an empty runtime
        return (ModelRuntime, ())


def _own(model: torch.nn.Module) -> ModelRuntime | None:
    found = model.__dict__.get(ATTRIBUTE)
    return found if found is not None and found.owner is not None and found.owner() is model else None


def of(model: torch.nn.Module) -> ModelRuntime:
    """``model``'s runtime object, made on first use (one per model, shared by its sessions).

    A shallow copy of a model (``copy.copy``: a cut-vocabulary or early-exit draft, a view with its
    own config) carries the original's attribute; it is another model, so it gets a runtime of its
    own, keeping only what belongs to the shared weights (the cache directory and the kernel plan),
    never the original's decode step or screens, which compute the original's outputs."""
    found = _own(model)
    if found is None:
        with _CREATE:
            found = _own(model)
            if found is None:
                inherited = model.__dict__.get(ATTRIBUTE)
                found = ModelRuntime(owner=weakref.ref(model))
                if inherited is not None:
                    found.cache_dir, found.plan, found.pinned = inherited.cache_dir, inherited.plan, inherited.pinned
                object.__setattr__(model, ATTRIBUTE, found)  # a plain attribute: not a parameter or submodule
    return found


def peek(model: torch.nn.Module) -> ModelRuntime | None:
    """``model``'s own runtime object if it has one (never makes one; a copy's inherited one is not its own)."""
    return _own(model)


def options_of(model: torch.nn.Module | None) -> settings.Options:
    """``model``'s options (:attr:`ModelRuntime.options`), or the environment's for code with no model."""
    return settings.options() if model is None else of(model).options


def cache_home(options: settings.Options | None = None) -> Path:
    """specviz's cache directory (converted models, built kernels, measured plans):
    ``options.cache_dir`` (``$SPECVIZ_CACHE_DIR``), else ``~/.cache/specviz``."""
    env = (options or settings.options()).cache_dir
    return Path(env).expanduser() if env else Path.home() / ".cache" / "specviz"
