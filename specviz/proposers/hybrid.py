"""Prompt lookup first, a draft model otherwise: free drafts when the text repeats itself.

Each step tries the n-gram lookup (:func:`specviz.proposers.ngram.ngram_lookup`); when the
context's last ``min_ngram``+ tokens occurred before, their continuation is proposed as point
masses and the draft model is not run at all. Otherwise the draft model drafts as usual (its KV
cache catches up on the tokens it skipped at its next call). Either way the proposal is verified
by the same exact rule, so the output distribution is still the target's. SGLang and vLLM users
pick one proposer or the other; this one switches per step, and the step's ``info["source"]``
records which one drafted.
"""

from __future__ import annotations

import torch

from ..core.records import Proposal, Sampling, evolve
from .draft_model import DraftModel
from .ngram import ngram_lookup


class NGramOrDraft:
    """The n-gram's drafts when it finds a match of at least ``min_ngram`` tokens, else the draft model's."""

    def __init__(self, draft: DraftModel, max_ngram: int = 3, min_ngram: int = 2, name: str | None = None):
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"NGramOrDraft needs 1 <= min_ngram <= max_ngram, got {min_ngram}, {max_ngram}")
        self.draft = draft
        self.model = draft.model  # pinned in the model cache with the run, as a DraftModel's is
        self.max_ngram, self.min_ngram = max_ngram, min_ngram
        self.name = name or f"ngram+{draft.name}"

    def init_state(self, target):
        return self.draft.init_state(target)

    def share_prompt(self, state, target, target_cache, prompt: list[int]) -> bool:
        return self.draft.share_prompt(state, target, target_cache, prompt)

    def propose(self, state, context: torch.Tensor, k: int, sampling: Sampling, generator, stop=None) -> Proposal:
        tokens = ngram_lookup(context, k, self.max_ngram, self.min_ngram)  # [<= k] or None
        if tokens is not None and tokens.numel() > 0:
            return Proposal(tokens=tokens, q=None, info={"source": "ngram"})
        proposal = self.draft.propose(state, context, k, sampling, generator, stop)
        # evolve, not dataclasses.replace: replace reads every field, so a greedy draft's q (a softmax
        # over the vocabulary a drafted token, which nothing reads) would be computed here
        return evolve(proposal, info={**proposal.info, "source": "draft"})
