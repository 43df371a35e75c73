"""A small draft model that shares the target's tokenizer (Leviathan et al.'s M_q)."""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any

import torch

from ..core.algorithm import argmax as first_argmax
from ..core.algorithm import logits_to_probs, sample
from ..core.logits import materialize
from ..core.records import Deferred, Proposal, Sampling
from ..runtime.argmax_head import top_probability
from ..runtime.kv import cache_length, context_window, forward_logits, rollback, session_cache, take_prefix, vocab_size
from .vocab import context_rows_for, scoring


@dataclass
class _DraftState:
    cache: object  # the draft's DynamicCache
    vocab: int  # the target's vocabulary size: q is laid out on it
    ids: list[int] = field(default_factory=list)  # tokens the cache holds, in order
    context_rows: Any = None  # vocab=N drafts: a ContextRows (context tokens outside the head's set)
    stopped: float | None = None  # the last proposal: the top probability a confidence stop ended it on


DRAFT_POLICIES = ("sampled", "argmax")


class DraftModel:
    """Drafts k tokens autoregressively with its own KV cache, rolled back after rejections.

    policy "sampled" (Leviathan et al.): x_i ~ q, accepted with min(1, p(x_i) / q(x_i)).
    policy "argmax" (vLLM V1's draft model): x_i = argmax q, a point mass, accepted with
    probability p(x_i) (q is only shown). Both keep the target's distribution exactly.
    """

    def __init__(self, model, name: str | None = None, policy: str = "sampled"):
        if policy not in DRAFT_POLICIES:
            raise ValueError(f"draft policy must be one of {', '.join(DRAFT_POLICIES)}, got {policy!r}")
        self.model = model  # a specviz.models.LoadedModel
        self.policy = policy
        self.name = name or (f"draft:{model.name}" + ("" if policy == "sampled" else ",policy=argmax"))

    def init_state(self, target) -> _DraftState:
        check_same_tokenizer(target, self.model)
        return _DraftState(cache=session_cache(self.model.model), vocab=vocab_size(target.model),
                           context_rows=context_rows_for(self.model.model))

    def share_prompt(self, state: _DraftState, target, target_cache, prompt: list[int]) -> bool:
        """After the target's prefill: start from its keys and values of ``prompt`` where this draft
        is a copy of the target (see :func:`take_target_prompt`)."""
        return take_target_prompt(state, self.model, target, target_cache, prompt)

    def propose(self, state: _DraftState, context: torch.Tensor, k: int, sampling: Sampling, generator, stop=None) -> Proposal:
        argmax = self.policy == "argmax"
        tokens, q = draft_tokens(self.model, state, context, k, sampling, generator, stop, argmax=argmax)
        # a confidence stop: after how many drafts, on what top probability (the step view says why k' < k)
        info = {} if state.stopped is None else {"stopped": {"after": int(tokens.numel()), "top": state.stopped}}
        if isinstance(q, Deferred):  # greedy / argmax drafts: q is only shown, computed when read
            fn, device = q.fn, context.device
            q = Deferred(lambda: fn().to(device))
        elif q is not None:
            q = q.to(context.device)
        return Proposal(tokens=tokens.to(context.device), q=q, deterministic=argmax, info=info)


@torch.inference_mode()
def draft_tokens(draft, state: _DraftState, ctx, k: int, sampling: Sampling, generator, stop=None, argmax: bool = False):
    """Draft up to k tokens after ``ctx`` (token ids: a list or a [n] tensor) with ``draft`` (a
    LoadedModel), reusing and rolling back its KV cache in ``state``; ``argmax`` takes argmax q
    instead of sampling from q.
    -> (tokens [k'] long, q [k', state.vocab] or None if k' = 0). Under greedy or argmax, where no
    rule reads q, q is a ``Deferred`` (computed when read). ``stop(top)`` (the confidence schedule)
    reads each draft's top probability, from a cut head's own rows where it has one: the first
    draft it says is unsure is the last one proposed (its forward is paid; the target may keep it).

    Never past the draft's context window: drafting x_k feeds positions up to len(ctx) + k - 2,
    so a draft with a shorter window than the target drafts fewer tokens near its end and none
    past it (the target goes on alone; a proposer may always propose fewer than k).
    """
    device = draft.device
    state.stopped = None
    window = context_window(draft.model)
    if window is not None:
        k = min(k, window - len(ctx) + 1)
    if k <= 0:
        return torch.empty(0, dtype=torch.long), None
    # 1. Roll the cache back to the longest prefix it shares with the context (at least one
    #    context token must be fed to get the next-token logits). Usually the cache holds a
    #    prefix of the context already: one list comparison, no per-token Python loop.
    n_ctx = len(ctx)
    if len(state.ids) <= n_ctx and _prefix_list(ctx, len(state.ids)) == state.ids:
        keep = min(len(state.ids), n_ctx - 1)
    else:
        keep = min(_common_prefix(state.ids, _as_list(ctx)), n_ctx - 1)
    rollback(state.cache, keep)
    del state.ids[keep:]
    new_ids = _prefix_list(ctx[keep:], n_ctx - keep)
    feed = torch.tensor(new_ids, dtype=torch.long, device=device)  # [n_new]
    # 2. Draft x_1..x_k one at a time, sampling each from q with the session's generator.
    with scoring(state.context_rows, new_ids):  # vocab=N: score the context's own tokens too
        return _draft_loop(draft, state, new_ids, feed, k, sampling, generator, stop, argmax)


def _draft_loop(draft, state: _DraftState, new_ids: list[int], feed, k: int, sampling: Sampling, generator, stop, argmax: bool):
    device = draft.device
    tokens: list[int] = []
    rows: list = []  # greedy: the logits (deferred, [1, V], where the head gives one); sampled: q
    lazy_q = sampling.greedy or argmax  # q is only shown: computed when read
    for i in range(k):
        out = forward_logits(draft.model, feed, state.cache, 1, lazy=lazy_q)  # [1, V_draft], lazily where it can be
        state.ids.extend(new_ids)
        last = i == k - 1 or stop is None  # the stop rule is read where another draft could follow
        if lazy_q and not isinstance(out, torch.Tensor) and out.shape[-1] == state.vocab:
            x = int(out.argmax()[0])  # a screened or cut head's argmax, without the row
            unsure = not last and _stops(state, stop, float(out.top_probability()[0]))  # a cut head: from its rows
            rows.append(out)
        elif lazy_q:
            logits = _fit_vocab(materialize(out)[0], state.vocab)  # [V]
            x = int(first_argmax(logits))
            unsure = not last and _stops(state, stop, float(top_probability(logits)))
            rows.append(logits)
        else:
            logits = _fit_vocab(out[0], state.vocab)  # [V]
            q = logits_to_probs(logits, sampling)  # [V]
            x = int(first_argmax(logits)) if sampling.greedy or argmax else sample(q, generator)
            unsure = not last and _stops(state, stop, float(q.max()))
            rows.append(q)
        tokens.append(x)
        if unsure:
            break  # the draft was unsure of x: x is its last draft, the target decides from there
        new_ids = [x]
        feed = torch.tensor(new_ids, dtype=torch.long, device=device)
    assert cache_length(state.cache) == len(state.ids)
    if not rows:
        return torch.tensor(tokens, dtype=torch.long), None
    if lazy_q:
        return torch.tensor(tokens, dtype=torch.long), Deferred(
            lambda: torch.stack([logits_to_probs(r if isinstance(r, torch.Tensor) else materialize(r)[0], sampling) for r in rows]))
    return torch.tensor(tokens, dtype=torch.long), torch.stack(rows)  # [k'], [k', V]


def _stops(state: _DraftState, stop, top: float) -> bool:
    """Whether the stop rule ends the draft on a token whose top probability is ``top`` (kept in
    ``state.stopped`` when it does)."""
    if stop(top):
        state.stopped = top
        return True
    return False


def same_weights(draft, target) -> bool:
    """Whether ``draft`` is ``target``'s own weights in another form (``NAME@int8``, ``NAME,vocab=N``
    or both, drafting for ``NAME``): its keys and values of a prompt are then the target's, up to
    the precision of its products. -> by name and by the shape of each layer's attention."""
    base = draft.name.split(",", 1)[0].split("@", 1)[0]
    if base != target.name:
        return False
    a, b = (m.model.config.get_text_config() for m in (draft, target))
    keys = ("num_hidden_layers", "num_key_value_heads", "head_dim", "hidden_size")
    return all(getattr(a, key, None) == getattr(b, key, None) for key in keys)


def take_target_prompt(state, draft, target, target_cache, prompt: list[int]) -> bool:
    """Start a new session's draft cache (``state.cache``, ``state.ids``) from the target's keys and
    values of ``prompt`` (its prefill's, in ``target_cache``) instead of running the prompt through
    the draft: where the draft is the target's own weights (:func:`same_weights`: an int8 copy
    drafting for its float32 model) and both run a static step with the same buffers. The draft
    then attends to the target's exact prompt states (it never computes its own: a 40-token prompt
    costs gemma-3-270m@int8 30-60 ms). Exactness does not depend on it: every draft is verified.
    -> whether it did; a cut head (``vocab=N``) scores the prompt's own tokens as if it had fed them."""
    if state.ids or not prompt or not same_weights(draft, target) or not take_prefix(state.cache, target_cache, len(prompt)):
        return False
    state.ids = list(prompt)
    if state.context_rows is not None:
        state.context_rows.add(prompt)
    return True


def _as_list(ctx) -> list[int]:
    return ctx.tolist() if isinstance(ctx, torch.Tensor) else list(ctx)


def _prefix_list(ctx, n: int) -> list[int]:
    """ctx[:n] as a list of ints (ctx: a list or a [>= n] tensor)."""
    return ctx[:n].tolist() if isinstance(ctx, torch.Tensor) else list(ctx[:n])


def _fit_vocab(logits: torch.Tensor, vocab: int) -> torch.Tensor:
    """Draft logits [V_d] -> [vocab]: pad with -inf or cut, so q lives on the target's vocabulary."""
    if logits.shape[-1] == vocab:
        return logits
    if logits.shape[-1] > vocab:
        return logits[:vocab]
    pad = logits.new_full((vocab - logits.shape[-1],), float("-inf"))
    return torch.cat([logits, pad])


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


_vocab_keys: "weakref.WeakKeyDictionary[Any, int]" = weakref.WeakKeyDictionary()


def _vocab_key(tokenizer) -> int:
    """A hash of the tokenizer's {token: id} map, computed once per tokenizer object (building a
    262k-entry vocabulary takes a quarter of a second; sessions start often)."""
    try:
        return _vocab_keys[tokenizer]
    except (KeyError, TypeError):
        key = hash(frozenset(tokenizer.get_vocab().items()))
        try:
            _vocab_keys[tokenizer] = key
        except TypeError:  # not weak-referenceable: just do not remember it
            pass
        return key


def check_same_tokenizer(target, draft) -> None:
    """Raise a ValueError unless the draft's token ids mean the same strings as the target's."""
    if target.tokenizer is draft.tokenizer or _vocab_key(target.tokenizer) == _vocab_key(draft.tokenizer):
        return
    tv, dv = target.tokenizer.get_vocab(), draft.tokenizer.get_vocab()
    if tv != dv:
        only_t = len(tv.keys() - dv.keys())
        only_d = len(dv.keys() - tv.keys())
        raise ValueError(
            f"the draft model {draft.name!r} does not share the target {target.name!r}'s tokenizer "
            f"({len(dv)} vs {len(tv)} tokens; {only_d} only in the draft, {only_t} only in the target). "
            "Pick a draft from the same model family (e.g. smollm2-135m for SmolLM2 targets, the "
            "target's own @int8 copy), or use the n-gram proposer."
        )
