"""Prompt lookup (n-gram) drafting: copy what followed the last n tokens earlier in the context.

Proposes point masses (q(x_i) = 1), so acceptance is with probability p(x_i) and sampling stays
exact. Same idea as transformers' ``prompt_lookup_num_tokens`` and vLLM's ngram proposer.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..core.proposer import empty_proposal
from ..core.records import Proposal, Sampling


@dataclass
class NGram:
    max_ngram: int = 3  # longest suffix to look up
    min_ngram: int = 1  # shortest suffix to fall back to
    name: str = "ngram"
    stops_on_q = False  # no draft probabilities: a confidence stop changes nothing (schedules.changes_nothing)

    def __post_init__(self) -> None:
        if not 1 <= self.min_ngram <= self.max_ngram:
            raise ValueError(
                f"NGram needs 1 <= min_ngram <= max_ngram, got min_ngram={self.min_ngram}, max_ngram={self.max_ngram}"
            )

    def init_state(self, target) -> None:
        return None

    def propose(self, state, context: torch.Tensor, k: int, sampling: Sampling, generator, stop=None) -> Proposal:
        tokens = ngram_lookup(context, k, self.max_ngram, self.min_ngram)
        if tokens is None:
            return empty_proposal(context.device)
        return Proposal(tokens=tokens, q=None)


def ngram_lookup(context: torch.Tensor, k: int, max_ngram: int, min_ngram: int) -> torch.Tensor | None:
    """The k tokens that followed the most recent earlier occurrence of the context's last n
    tokens, for the longest n in [min_ngram, max_ngram] that occurs; None if none does.

    context: [L] long -> [<= k] long
    """
    L = context.shape[0]
    for n in range(min(max_ngram, L - 1), min_ngram - 1, -1):
        suffix = context[L - n :]  # [n]
        windows = context[: L - 1].unfold(0, n, 1)  # [L-n, n]: every earlier n-gram (not the suffix itself)
        hits = torch.nonzero((windows == suffix).all(dim=1)).flatten()  # starts of matches
        if hits.numel():
            start = int(hits[-1]) + n  # most recent match; continuation starts after it
            return context[start : start + k]
    return None
