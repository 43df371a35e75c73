"""The logits contract: what a target pass may hand the rule, and what the engine asks of it.

A forward pass over n positions is asked for one of three things (:class:`Want`), and returns:

- ``Want.FULL``: a float32 tensor [n, V], every logit computed;
- ``Want.ARGMAX``: a tensor, or a :class:`DeferredLogits`: ``argmax()`` [n] is each row's first
  largest logit (as ``logits.max(-1).indices``), certified without the whole row where the model
  can (a screened head); ``get()`` computes the row [n, V] when something reads it (a record's p);
- ``Want.BOUNDS``: a tensor, or a :class:`BoundedLogits`: besides the above, ``bounds()`` gives
  (y [n, V], b per row) with |l_i - y_i| <= b for every logit l_i the full head would compute, and
  ``exact(r, ids)`` the float32 logits of a few ids of row r.

Whatever a pass returns, a decision taken on it is the one the rule takes on the full head's
float32 logits: docs/exactness.md states each bound, what it assumes and the test that checks it.
The runtime's classes (``specviz.runtime.argmax_head``) satisfy these protocols by their shape; the
engine never names them, so a new kind of head (another screen, a GPU head) needs no engine change.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch

from .algorithm import argmax

__all__ = ["BoundedLogits", "DeferredLogits", "Want", "greedy_argmax", "is_bounded", "materialize"]


class Want:
    """What a pass's caller reads of its logits (the value passed as ``forward_logits(lazy=...)``)."""

    FULL = False  # every logit
    ARGMAX = True  # the argmax alone (a greedy step with lean records); the rest when read
    BOUNDS = "sample"  # a sampled step: certified bounds on every logit, exact logits of a few ids


@runtime_checkable
class DeferredLogits(Protocol):
    """Logits [n, V] computed only when read; the argmax and the top probability without them."""

    shape: torch.Size

    def get(self) -> torch.Tensor: ...  # [n, V] float32, computed once

    def argmax(self) -> torch.Tensor: ...  # [n] long

    def top_probability(self) -> torch.Tensor: ...  # [n]: each row's largest softmax probability


@runtime_checkable
class BoundedLogits(DeferredLogits, Protocol):
    """Deferred logits with a certified bound on each one (a sampled step's, :mod:`specviz.core.certified`)."""

    def bounds(self) -> tuple[torch.Tensor, list[float]]: ...  # (y [n, V] float32, b per row): |l - y| <= b

    def exact(self, row: int, ids: torch.Tensor) -> torch.Tensor: ...  # ids [m] -> their logits [m] float32


def materialize(logits) -> torch.Tensor:
    """A tensor of logits [n, V] from a tensor or a :class:`DeferredLogits`."""
    return logits if isinstance(logits, torch.Tensor) else logits.get()


def greedy_argmax(logits) -> torch.Tensor:
    """[n]: each row's first largest logit; a deferred head's without computing its logits."""
    return argmax(logits) if isinstance(logits, torch.Tensor) else logits.argmax()


def is_bounded(logits) -> bool:
    """Whether ``logits`` carries certified bounds (a sampled step may decide on them)."""
    return not isinstance(logits, torch.Tensor) and isinstance(logits, BoundedLogits)
