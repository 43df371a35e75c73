"""The proposer contract: anything that drafts tokens for the target to verify."""

from __future__ import annotations

from typing import Any, Callable, Protocol, runtime_checkable

import torch

from .records import Proposal, Sampling


@runtime_checkable
class Proposer(Protocol):
    """Drafts up to k tokens after a context.

    A proposer is shared read-only between sessions; whatever it must remember between steps of
    one session (a KV cache, say) lives in the state object that ``init_state`` returns and the
    session hands back to every ``propose`` call.
    """

    name: str  # shown in the UI, traces and benchmark rows

    def init_state(self, target: Any) -> Any:
        """Fresh per-session state (None if the proposer needs none). Raises ValueError if this
        proposer cannot draft for ``target`` (e.g. a different tokenizer)."""
        ...

    def propose(
        self,
        state: Any,
        context: torch.Tensor,  # [n] long: prompt + committed tokens, on the target's device
        k: int,
        sampling: Sampling,
        generator: torch.Generator,
        stop: Callable[[float], bool] | None = None,
    ) -> Proposal:
        """Up to k drafted tokens (fewer, even none, is allowed). A proposer with draft
        distributions may end early when ``stop(max q_i)`` says so (the confidence schedule: it reads
        only each draft's top probability, which a cut head gives without the whole row)."""
        ...


def empty_proposal(device: torch.device | str) -> Proposal:
    return Proposal(tokens=torch.empty(0, dtype=torch.long, device=device), q=None)
