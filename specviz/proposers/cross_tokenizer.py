"""A draft model with a different tokenizer: its text is re-tokenized into target tokens.

The draft continues the text in its own vocabulary; the new text is re-encoded with the target's
tokenizer and proposed as point masses (q(x_i) = 1), so sampling stays exact whatever the draft
does. Each step records how the draft's tokens map onto the target's for the UI.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..core.records import Proposal, Sampling
from ..runtime.kv import session_cache, vocab_size
from .draft_model import _DraftState, draft_tokens


@dataclass
class _CrossState:
    draft: _DraftState  # the draft's KV cache over its own token ids
    target_tokenizer: object
    n_prompt: int | None = None  # target tokens in the prompt (set at the first step)
    prompt_text: str = ""
    log: list = field(default_factory=list)


class CrossTokenizerDraft:
    """Drafts with any causal LM, whatever its tokenizer (e.g. smollm2-135m for gemma-3-270m)."""

    def __init__(self, model, name: str | None = None):
        self.model = model  # a specviz.models.LoadedModel with its own tokenizer
        self.name = name or f"xdraft:{model.name}"

    def init_state(self, target) -> _CrossState:
        return _CrossState(
            draft=_DraftState(cache=session_cache(self.model.model), vocab=vocab_size(self.model.model)),
            target_tokenizer=target.tokenizer,
        )

    def propose(self, state: _CrossState, context: torch.Tensor, k: int, sampling: Sampling, generator, stop=None) -> Proposal:
        t_tok, d_tok = state.target_tokenizer, self.model.tokenizer
        ctx = context.tolist()
        if state.n_prompt is None:  # first step: the context is the prompt
            state.n_prompt = len(ctx)
            state.prompt_text = t_tok.decode(ctx, skip_special_tokens=True)
        generated = ctx[state.n_prompt :]
        gen_text = t_tok.decode(generated, skip_special_tokens=True)
        # 1. The draft continues the same text in its own vocabulary.
        d_ctx = d_tok(state.prompt_text + gen_text, add_special_tokens=True)["input_ids"]
        d_new, _ = draft_tokens(self.model, state.draft, d_ctx, k, sampling, generator, stop)
        d_new = d_new.tolist()
        new_text = d_tok.decode(d_new, skip_special_tokens=True)
        if not new_text:
            return Proposal(tokens=torch.empty(0, dtype=torch.long, device=context.device), q=None)
        # 2. Re-tokenize with the target's tokenizer: the tokens past what is already committed.
        tokens = text_to_target_tokens(t_tok, generated, gen_text, new_text)[:k]
        info = {
            "draft_tokens": [d_tok.decode([t]) for t in d_new],
            "target_tokens": [t_tok.decode([t]) for t in tokens],
        }
        return Proposal(tokens=torch.tensor(tokens, dtype=torch.long, device=context.device), q=None, info=info)


def text_to_target_tokens(tokenizer, committed: list[int], committed_text: str, new_text: str) -> list[int]:
    """Target token ids for ``new_text`` continuing ``committed``: encode the whole text and keep
    what follows the committed tokens; if re-encoding does not reproduce them (a token boundary
    moved), encode the new text alone."""
    full = tokenizer(committed_text + new_text, add_special_tokens=False)["input_ids"]
    if full[: len(committed)] == committed:
        return full[len(committed) :]
    return tokenizer(new_text, add_special_tokens=False)["input_ids"]
