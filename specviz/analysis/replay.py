"""Acceptance without running every configuration: replay proposers against the target's greedy output.

Under greedy decoding (temperature 0) the committed text of *any* exact run is the target's own
greedy continuation g, and a draft token is accepted iff it equals the target's argmax there,
which, on the path that was kept, is g's next token. So one decode of a prompt (by any exact
proposer: the advisor uses the n-gram chain) fixes every step of every other configuration:

- a proposer whose drafts are a function of the context alone (``ngram``, ``ngram-tree`` with or
  without ``shape=``, the n-gram half of ``ngram+draft``): at a step that starts after g[:t], it
  proposes from prompt + g[:t]; a chain keeps its drafts while they equal g[t], g[t+1], ...; a
  tree keeps, depth by depth, the child equal to the next token of g (siblings are distinct, as
  ``verify_tree``'s greedy walk); the step commits the kept drafts and one more token of g, and
  the next step starts there. Every k and every tree shape is a separate, exact simulation with
  no target pass;
- a draft model (``draft:NAME``, greedy: its drafts are argmax q, whatever its policy): while its
  drafts are kept, its context is prompt + g[:t+i], so one forward of the draft over prompt + g
  (teacher forcing) gives, at every position, the token it would draft (its argmax) and the
  ranks of its top-10 (a static draft tree's rank-r child). The chain at k keeps drafts while
  argmax == g; a static draft tree keeps the child whose rank path holds g's next token.

This is exact in exact arithmetic. In floating point a forward over several tokens rounds
differently from one-token steps, so a near-tie in an argmax can flip: the draft is therefore
teacher-forced as it runs (the prompt in one forward, then one token at a time on its session
cache; the engine's catch-up feed of 2 tokens after a fully kept step is the one width it does
not copy), and the target's verify passes of other widths than the decode's could, in
principle, pick another token than the decode did (a sweep's "same output" column checks that).
The advisor replays its own decode's proposer and says whether that reproduced the decode step
for step. Under sampling (temperature > 0) acceptance is random
and this does not apply: the advisor then runs each proposer (``bench.advise.calibrate``).

The steps come back as :class:`ReplayStep` records with the fields the advisor's counting reads
(``advisor.chain_calibration``, ``rank_calibration_from_tree``, ``rank_calibration_from_chain``),
so the same counts come out of a replay as out of the engine's own run.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

from ..core.algorithm import TOP_N, top_n
from ..core.algorithm import argmax as first_argmax
from ..core.records import Sampling
from ..core.trees import prune_tree
from ..proposers.draft_model import DraftModel, same_weights
from ..proposers.hybrid import NGramOrDraft
from ..proposers.ngram import NGram, ngram_lookup
from ..proposers.ngram_tree import NGramTree
from ..proposers.vocab import context_rows_for, scoring
from ..runtime.kv import context_window, forward_logits, new_cache, session_cache, take_prefix, vocab_size

__all__ = ["Decoded", "DraftRows", "ReplayStep", "ReplayNode", "replayable", "draft_rows", "replay", "replay_draft_tree",
           "decoded", "summary", "vocab_of", "GREEDY"]

GREEDY = Sampling(temperature=0.0)


@dataclass(frozen=True)
class Decoded:
    """One prompt's greedy decode: its prompt ids and the target's continuation (ending at EOS or
    at ``max_new_tokens``)."""

    prompt_ids: tuple[int, ...]
    new_ids: tuple[int, ...]
    max_new_tokens: int
    category: str = ""


@dataclass(frozen=True)
class DraftRows:
    """A draft's teacher-forced view of one decode: at position t (after prompt + g[:t], t = 0..N),
    the token it drafts (first argmax), its top-10 token ids (most likely first) and its top
    probability, max q (what a confidence stop reads)."""

    argmax: tuple[int, ...]
    top: tuple[tuple[int, ...], ...]
    top_p: tuple[float, ...] = ()

    def rank(self, t: int, token: int) -> int | None:
        """1-based rank of ``token`` in the draft's top-10 at position t (None: not in it)."""
        ids = self.top[t]
        return ids.index(token) + 1 if token in ids else None


@dataclass(frozen=True)
class ReplayNode:
    index: int
    parent: int
    depth: int


@dataclass(frozen=True)
class ReplayDraft:
    top_q: tuple[tuple[int, float], ...]  # (token id, probability unknown: nan), most likely first


@dataclass(frozen=True)
class ReplayStep:
    """One replayed step, with the StepRecord fields the advisor's counts read."""

    k: int  # drafts proposed (a tree: its nodes)
    n_accepted: int  # drafts kept (a tree: its path's length)
    committed: tuple[int, ...]
    draft_ms: float = 0.0  # the proposer's own time for this step (n-grams: measured; draft models: 0)
    tree: tuple[ReplayNode, ...] = ()
    accepted_path: tuple[int, ...] = ()
    drafts: tuple[ReplayDraft, ...] = ()
    source: str = ""  # ngram+draft: "ngram" or "draft"
    feed: int = 0  # ngram+draft draft steps: tokens its draft had to catch up on first (the first: the prompt)
    stopped: bool = False  # a confidence stop ended the draft before k (after a draft it was unsure of)

    @property
    def n_committed(self) -> int:
        return len(self.committed)


def decoded(session, category: str = "") -> Decoded:
    """A finished engine Session under greedy decoding as a :class:`Decoded`."""
    return Decoded(tuple(session.prompt_ids), tuple(session.new_token_ids), session.max_new_tokens, category)


def replayable(proposer) -> bool:
    """Whether :func:`replay` reproduces ``proposer``'s greedy steps: an n-gram (chain or tree), a
    draft model (``early-exit`` included; a ``vocab=N`` head with its session's context rows, added
    as the teacher-forced text arrives, as the engine's draft adds them: see :func:`draft_rows`), or
    ``ngram+draft`` of one. Not ``xdraft`` (another tokenizer)."""
    if isinstance(proposer, (NGram, NGramTree)):
        return True
    if isinstance(proposer, NGramOrDraft):
        return replayable(proposer.draft)
    return isinstance(proposer, DraftModel)


@torch.inference_mode()
def draft_rows(draft, runs: Sequence[Decoded], vocab: int, top: int = TOP_N, batched: bool = False,
               target=None) -> list[DraftRows]:
    """The draft (a LoadedModel) teacher-forced on each decode, its logits laid out on the
    target's ``vocab`` as the engine's draft does. By default as the engine's draft runs: the
    prompt in one forward on its session cache (its static step where it has one; where the draft
    is ``target``'s own weights, the target's prompt states and the prompt's last token, as
    :func:`~specviz.proposers.draft_model.take_target_prompt` starts it), then g one token at a
    time, so each position is computed by the same kernels at the same width as a one-token draft
    step; ``batched``: prompt + g in one forward (faster, but its rounding differs: on
    gemma-3-270m@int8 one argmax in 192 positions flipped; a cut head without its context rows).

    A cut head (``vocab=N``) also scores the session's context tokens outside its N (a
    :class:`~specviz.proposers.vocab.ContextRows`), added as they are fed: at position t the
    prompt and g[:t], which is the engine's set whenever the drafts before were kept (a draft's
    own tokens are always in the set already), so the rows are the engine's there too."""
    out = []
    for run in runs:
        extra = context_rows_for(draft.model)  # a cut head's context rows, this run's own (None: a full head)
        ids = torch.tensor(run.prompt_ids + run.new_ids, dtype=torch.long, device=draft.device)  # [L + N]
        keep, L = len(run.new_ids) + 1, len(run.prompt_ids)
        if batched:
            logits = forward_logits(draft.model, ids, new_cache(draft.model), keep)  # [N + 1, V_draft]
        else:
            cache, start = session_cache(draft.model), 0
            if target is not None and L > 1 and same_weights(draft, target):
                prefilled = session_cache(target.model)
                forward_logits(target.model, ids[: L - 1], prefilled, 1, lazy=True)  # the engine's prefill
                start = L - 1 if take_prefix(cache, prefilled, L - 1) else 0
            with scoring(extra, run.prompt_ids):  # the whole prompt, fed or taken from the target
                rows = [forward_logits(draft.model, ids[start:L], cache, 1)]  # [1, V_draft]: after the prompt
            for t in range(keep - 1):
                with scoring(extra, run.new_ids[t: t + 1]):
                    rows.append(forward_logits(draft.model, ids[L + t: L + t + 1], cache, 1))
            logits = torch.cat(rows)  # [N + 1, V_draft]
        logits = _fit_vocab(logits, vocab)  # [N + 1, V]
        best = first_argmax(logits).tolist()
        q = torch.softmax(logits, dim=-1)  # [N + 1, V]: greedy q, the plain softmax
        probs, tops = top_n(q, min(top, vocab))  # as the record's top_q: of q
        out.append(DraftRows(tuple(best), tuple(tuple(r) for r in tops.tolist()), tuple(probs[:, 0].tolist())))
    return out


def _fit_vocab(logits: torch.Tensor, vocab: int) -> torch.Tensor:
    """[R, V_d] -> [R, vocab]: cut, or pad with -inf (``draft_model._fit_vocab`` row by row)."""
    if logits.shape[-1] >= vocab:
        return logits[:, :vocab]
    pad = logits.new_full((logits.shape[0], vocab - logits.shape[-1]), float("-inf"))
    return torch.cat([logits, pad], dim=-1)


@dataclass
class _Walk:
    """One decode being replayed: where the next step starts."""

    run: Decoded
    ctx: torch.Tensor  # [L + N] prompt + g
    t: int = 0  # tokens of g committed so far
    draft_valid: int = 0  # ngram+draft: positions the draft's cache holds that are still the context's
    steps: list[ReplayStep] = field(default_factory=list)

    @property
    def n(self) -> int:
        return len(self.run.new_ids)

    @property
    def length(self) -> int:
        return len(self.run.prompt_ids) + self.t

    def k_left(self, k: int) -> int:
        """The engine's k for this step: never past max_new_tokens (k drafts + 1 token <= tokens left)."""
        return max(0, min(k, self.run.max_new_tokens - self.t - 1))

    def matches(self, tokens: Sequence[int]) -> int:
        """How many of ``tokens`` a greedy target keeps: the prefix equal to g from t."""
        g, n = self.run.new_ids, 0
        while n < len(tokens) and self.t + n < self.n and tokens[n] == g[self.t + n]:
            n += 1
        return n

    def commit(self, step: ReplayStep) -> None:
        self.steps.append(step)
        self.t += step.n_committed

    def committed(self, kept: int) -> tuple[int, ...]:
        """The kept drafts and the next token, cut where g ends (EOS or max_new_tokens)."""
        return self.run.new_ids[self.t: self.t + min(kept + 1, self.n - self.t)]


def _chain_step(w: _Walk, tokens: list[int], ms: float, **extra) -> ReplayStep:
    kept = w.matches(tokens)
    return ReplayStep(len(tokens), kept, w.committed(kept), ms, **extra)


def _tree_step(w: _Walk, proposal, ms: float) -> ReplayStep:
    tokens, parents = proposal.tokens.tolist(), proposal.parents.tolist()
    children: dict[int, list[int]] = {}
    depth: list[int] = []
    for i, a in enumerate(parents):
        children.setdefault(a, []).append(i)
        depth.append(1 if a < 0 else depth[a] + 1)
    g, path, node = w.run.new_ids, [], -1
    while w.t + len(path) < w.n:
        want = g[w.t + len(path)]
        kept = None
        for c in children.get(node, ()):  # siblings are distinct; verify_tree keeps the last equal one
            kept = c if tokens[c] == want else kept
        if kept is None:
            break
        path.append(kept)
        node = kept
    nodes = tuple(ReplayNode(i, a, d) for i, (a, d) in enumerate(zip(parents, depth)))
    return ReplayStep(len(tokens), len(path), w.committed(len(path)), ms, tree=nodes, accepted_path=tuple(path))


def _draft_chain(w: _Walk, rows: DraftRows, k: int, window: int | None, ms: float = 0.0, stop: float | None = None,
                 **extra) -> ReplayStep:
    """A greedy draft model's chain from its teacher-forced argmax: drafted tokens past the first
    one the target rejects are never compared, so they need not be known. ``stop``: a confidence
    stop's threshold, ending the chain after the first draft whose top probability is below it
    (as ``draft_model._draft_loop``). Up to the first rejected draft the rows are the draft's own;
    past it the draft conditions on its rejected token, which teacher forcing does not see, so
    there the chain's length is an estimate (its drafts are never kept either way)."""
    if window is not None:
        k = min(k, window - w.length + 1)  # draft_tokens: never past the draft's context window
    if k <= 0:
        return ReplayStep(0, 0, w.committed(0), ms, **extra)
    stopped = False
    if stop is not None:
        unsure = next((i for i in range(k - 1) if w.t + i <= w.n and rows.top_p[w.t + i] < stop), None)
        stopped, k = unsure is not None, k if unsure is None else unsure + 1
    kept = 0
    while kept < k and w.t + kept < w.n and rows.argmax[w.t + kept] == w.run.new_ids[w.t + kept]:
        kept += 1
    drafts = tuple(ReplayDraft(tuple((x, float("nan")) for x in rows.top[w.t + i])) for i in range(min(kept + 1, k)))
    return ReplayStep(k, kept, w.committed(kept), ms, drafts=drafts, stopped=stopped, **extra)


def replay(proposer, runs: Sequence[Decoded], k: int, rows: Sequence[DraftRows] | None = None,
           clock: Callable[[], float] = time.perf_counter, shared_prompt: bool = False,
           stop: float | None = None) -> list[list[ReplayStep]]:
    """The steps ``proposer`` takes at ``k`` drafts per step on each greedy decode in ``runs``, as
    the engine would take them (constant k, no tree-node cap). ``rows``: the draft's
    :func:`draft_rows` on the same runs (a draft model or ngram+draft). An n-gram's ``draft_ms`` is
    the time of its own lookup here. ``shared_prompt``: the draft starts from the target's prompt
    states (the target's own weights: ``draft_model.take_target_prompt``), so ngram+draft's first
    draft step catches up from the prompt's end, not from its start. ``stop``: a confidence
    schedule's threshold (``confidence:T``), for a draft model's chains."""
    if not replayable(proposer):
        raise ValueError(f"{getattr(proposer, 'name', proposer)!r} cannot be replayed from a greedy decode")
    needs_rows = isinstance(proposer, (DraftModel, NGramOrDraft))
    if needs_rows and (rows is None or len(rows) != len(runs)):
        raise ValueError("a draft model's replay needs its teacher-forced rows (draft_rows) for every run")
    draft = proposer if isinstance(proposer, DraftModel) else getattr(proposer, "draft", None)
    window = context_window(draft.model.model) if draft is not None else None  # draft: a DraftModel
    out = []
    for i, run in enumerate(runs):
        w = _Walk(run, torch.tensor(run.prompt_ids + run.new_ids, dtype=torch.long),
                  draft_valid=max(0, len(run.prompt_ids) - 1) if shared_prompt else 0)
        while w.t < w.n:
            kk = w.k_left(k)
            if kk == 0:
                w.commit(ReplayStep(0, 0, w.committed(0)))
            elif isinstance(proposer, DraftModel):
                w.commit(_draft_chain(w, rows[i], kk, window, stop=stop))
            elif isinstance(proposer, NGramOrDraft):
                w.commit(_hybrid_step(w, proposer, rows[i], kk, window, clock, stop))
            else:
                t0 = clock()
                proposal = proposer.propose(None, w.ctx[: w.length], kk, GREEDY, None)
                ms = (clock() - t0) * 1e3
                if proposal.is_tree:
                    w.commit(_tree_step(w, prune_tree(proposal, kk), ms))
                else:
                    w.commit(_chain_step(w, proposal.tokens[:kk].tolist(), ms))
        out.append(w.steps)
    return out


def _hybrid_step(w: _Walk, proposer: NGramOrDraft, rows: DraftRows, k: int, window: int | None, clock,
                 stop: float | None = None) -> ReplayStep:
    """ngram+draft: the n-gram's drafts when its lookup finds a match, else the draft's; the draft
    catches up on every token committed since it last ran (``feed``) before drafting."""
    t0 = clock()
    tokens = ngram_lookup(w.ctx[: w.length], k, proposer.max_ngram, proposer.min_ngram)
    ms = (clock() - t0) * 1e3
    if tokens is not None and tokens.numel() > 0:
        return _chain_step(w, tokens.tolist(), ms, source="ngram")
    feed = w.length - min(w.draft_valid, w.length - 1)
    step = _draft_chain(w, rows, k, window, ms, stop, source="draft", feed=feed)
    # the draft's cache now holds the context and its first k - 1 drafts; those the target kept stay valid
    w.draft_valid = w.length + min(step.n_accepted, max(0, step.k - 1))
    return step


def replay_draft_tree(rows: Sequence[DraftRows], runs: Sequence[Decoded], paths: frozenset[tuple[int, ...]],
                      k: int) -> list[list[ReplayStep]]:
    """A static draft tree (``draft-tree:NAME,shape=S``, ``paths``: S's rank paths) at depth bound
    k on each decode: at each depth, the child kept is the one whose rank (in the draft's top-10
    at that point of g) continues a rank path of S. Only the kept path is known (the records
    carry no nodes)."""
    out = []
    for run, r in zip(runs, rows):
        w = _Walk(run, torch.empty(0))
        while w.t < w.n:
            kk = w.k_left(k)
            path: tuple[int, ...] = ()
            while len(path) < kk and w.t + len(path) < w.n:
                rank = r.rank(w.t + len(path), run.new_ids[w.t + len(path)])
                if rank is None or path + (rank,) not in paths:
                    break
                path += (rank,)
            w.commit(ReplayStep(len(paths) if kk else 0, len(path), w.committed(len(path))))
        out.append(w.steps)
    return out


def vocab_of(target) -> int:
    """The target's vocabulary size (the layout of q)."""
    return vocab_size(target.model)


def summary(steps: Sequence[Sequence[Any]]) -> list[tuple[int, int, int]]:
    """(drafts, kept drafts, committed) per step, the kept count cut at the committed one: what a
    replay and the engine's own run must agree on."""
    return [(s.k, min(s.n_accepted, s.n_committed), s.n_committed) for run in steps for s in run]
