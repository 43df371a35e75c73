"""Acceptance counted from a calibration's step records (:mod:`specviz.analysis.advisor`'s input):
per position for chains, per depth and sibling rank for trees, each share with a Wilson
interval; and a configuration's own greedy replay (its tokens per step, the drafts each step
offered). Counting only: what a configuration will cost or gain is the advisor's."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Any, Sequence

__all__ = ["Rate", "wilson", "ChainCalibration", "RankCalibration", "chain_calibration", "rank_calibration_from_tree",
           "rank_calibration_from_chain", "replayed_tau", "Replayed", "replayed"]

Z = 1.96  # 95% Wilson intervals


@dataclass(frozen=True)
class Rate:
    """hits / trials with its Wilson interval; no trials: p = 0 and the interval [0, 1]."""

    hits: int
    trials: int
    p: float
    lo: float
    hi: float

    def to_dict(self) -> dict[str, Any]:
        return {"hits": self.hits, "trials": self.trials, "p": self.p, "lo": self.lo, "hi": self.hi}


def wilson(hits: int, trials: int, z: float = Z) -> Rate:
    """The share hits / trials with the Wilson score interval at ``z`` standard errors."""
    if hits < 0 or trials < 0 or hits > trials:
        raise ValueError(f"need 0 <= hits <= trials, got {hits} of {trials}")
    if trials == 0:
        return Rate(0, 0, 0.0, 0.0, 1.0)
    p = hits / trials
    z2 = z * z
    centre = (p + z2 / (2 * trials)) / (1 + z2 / trials)
    half = z * math.sqrt(p * (1 - p) / trials + z2 / (4 * trials * trials)) / (1 + z2 / trials)
    return Rate(hits, trials, p, max(0.0, centre - half), min(1.0, centre + half))


# -- calibration counts -------------------------------------------------------------------------


@dataclass(frozen=True)
class ChainCalibration:
    """Per-position counts of a chain proposer's calibration at k drafts per step."""

    proposer: str
    k: int
    steps: int  # steps counted (steps the end of the run cut short are left out)
    reached: tuple[int, ...]  # [i]: steps that drafted >= i tokens and kept 1..i (reached[0] = steps)
    drafted: tuple[int, ...]  # [i]: steps that drafted >= i+1 tokens and kept 1..i
    kept: tuple[int, ...]  # [i]: steps that kept drafts 1..i+1
    at_least: tuple[int, ...]  # [i]: steps that drafted >= i+1 tokens
    draft_ms: float = 0.0  # the calibration's draft time (its own measure of draft cost)
    drafted_tokens: int = 0

    @property
    def accept(self) -> tuple[Rate, ...]:
        """a_i: P(draft i kept | drafted, 1..i-1 kept)."""
        return tuple(wilson(h, t) for h, t in zip(self.kept, self.drafted))

    @property
    def carry_on(self) -> tuple[Rate, ...]:
        """g_i: P(draft i drafted | 1..i-1 drafted and kept)."""
        return tuple(wilson(d, r) for d, r in zip(self.drafted, self.reached))

    def reach(self, i: int) -> float:
        """P(at least i + 1 tokens drafted)."""
        return self.at_least[i] / self.steps if self.steps and i < len(self.at_least) else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"proposer": self.proposer, "k": self.k, "steps": self.steps, "drafted_tokens": self.drafted_tokens,
                "draft_ms": self.draft_ms, "accept": [r.to_dict() for r in self.accept],
                "carry_on": [r.to_dict() for r in self.carry_on], "reach": [self.reach(i) for i in range(self.k)]}


def _counted(steps, k: int, max_new_tokens: int | None):
    """(step, drafted, kept) for the steps that could draft the full k (not cut by the run's end)."""
    made = 0
    for s in steps:
        cap = k if max_new_tokens is None else min(k, max_new_tokens - made - 1)
        made += s.n_committed
        if cap < k:
            continue
        yield s, min(s.n_accepted, s.n_committed)


def chain_calibration(proposer: str, runs: Sequence[Sequence[Any]], k: int, max_new_tokens: int | None = None) -> ChainCalibration:
    """Counts from chain step records (``runs``: one list of StepRecords per prompt, each run at k)."""
    reached, drafted, kept, at_least = [0] * k, [0] * k, [0] * k, [0] * k
    n = ms = tokens = 0
    for steps in runs:
        for s, ok in _counted(steps, k, max_new_tokens):
            L = min(s.k, k)
            n += 1
            ms += s.draft_ms
            tokens += L
            for i in range(k):
                at_least[i] += i < L
                reached[i] += ok >= i
                drafted[i] += i < L and ok >= i
                kept[i] += ok >= i + 1
    return ChainCalibration(proposer, k, n, tuple(reached), tuple(drafted), tuple(kept), tuple(at_least), ms, tokens)


@dataclass(frozen=True)
class RankCalibration:
    """Per-depth, per-rank counts: ``kept[d][r]`` of ``trials[d]`` kept nodes at depth d (root 0)
    had their rank-(r+1) child kept; for a proposer whose trees are not always full (an n-gram
    trie), ``has[d][r]`` of ``seen[d]`` drafted nodes at depth d had a rank-(r+1) child drafted."""

    proposer: str
    trials: tuple[int, ...]
    kept: tuple[tuple[int, ...], ...]
    steps: int = 0
    draft_ms: float = 0.0
    nodes: float = 0.0  # mean nodes per calibration step (the realised tree)
    seen: tuple[int, ...] = ()  # () : every shape's nodes are always drafted (a draft model's tree)
    has: tuple[tuple[int, ...], ...] = ()

    def matrix(self, which: str = "p") -> list[list[float]]:
        """accept[d][r] at the estimate ("p") or a Wilson bound ("lo", "hi")."""
        return [[getattr(wilson(h, t), which) for h in row] for row, t in zip(self.kept, self.trials)]

    def fill(self) -> list[list[float]] | None:
        """fill[d][r]: P(a drafted node at depth d has a rank-(r+1) child drafted), 1 where nothing
        was seen (treeshape.filled_at_least); None: trees always full."""
        if not self.seen:
            return None
        return [[h / n if n else 1.0 for h in row] for row, n in zip(self.has, self.seen)]

    def to_dict(self) -> dict[str, Any]:
        return {"proposer": self.proposer, "steps": self.steps, "trials": list(self.trials),
                "accept": [[wilson(h, t).to_dict() for h in row] for row, t in zip(self.kept, self.trials)],
                "fill": self.fill()}


def _rank_table(depth: int, ranks: int):
    return [0] * depth, [[0] * ranks for _ in range(depth)]


def rank_calibration_from_tree(proposer: str, runs: Sequence[Sequence[Any]], k: int, ranks: int = 8,
                               max_new_tokens: int | None = None) -> RankCalibration:
    """Counts from token-tree step records: at the root and at each kept node at depth d < k, the
    rank (order among its siblings) of the kept child, if any."""
    trials, kept = _rank_table(k, ranks)
    seen, has = _rank_table(k, ranks)
    n = ms = nodes = 0
    for steps in runs:
        for s, _ in _counted(steps, k, max_new_tokens):
            if not s.tree:
                continue
            n += 1
            ms += s.draft_ms
            nodes += len(s.tree)
            children = Counter(x.parent for x in s.tree)
            for v, d in ((-1, 0), *((x.index, x.depth) for x in s.tree)):  # the root and every drafted node
                if d < k:  # how many children it got
                    seen[d] += 1
                    for r in range(min(children[v], ranks)):
                        has[d][r] += 1
            path = list(s.accepted_path)[: s.n_committed]
            parent = -1
            for d in range(k):
                trials[d] += 1
                child = path[d] if d < len(path) else None
                if child is None:
                    break
                siblings = [x.index for x in s.tree if x.parent == parent]
                r = siblings.index(child)
                if r < ranks:
                    kept[d][r] += 1
                parent = child
    return RankCalibration(proposer, tuple(trials), tuple(map(tuple, kept)), n, ms, nodes / n if n else 0.0,
                           tuple(seen), tuple(map(tuple, has)))


def rank_calibration_from_chain(proposer: str, runs: Sequence[Sequence[Any]], k: int, ranks: int = 8,
                                max_new_tokens: int | None = None) -> RankCalibration:
    """Counts for a static draft tree from a draft model's chain records: at each position the
    chain reached with drafts 1..i-1 kept, the rank of the target's token in the draft's top-10
    of q there (the static tree's rank-r child is the draft's rank-r token)."""
    trials, kept = _rank_table(k, ranks)
    n = 0
    for steps in runs:
        for s, ok in _counted(steps, k, max_new_tokens):
            n += 1
            for i in range(min(ok + 1, s.k, k)):
                if i >= len(s.committed):
                    break
                trials[i] += 1
                ids = [t[0] for t in s.drafts[i].top_q]
                tok = s.committed[i]
                if tok in ids and ids.index(tok) < ranks:
                    kept[i][ids.index(tok)] += 1
    return RankCalibration(proposer, tuple(trials), tuple(map(tuple, kept)), n)


def replayed_tau(runs: Sequence[Sequence[Any]], k: int, max_new_tokens: int | None = None) -> float:
    """1 + the mean kept drafts (a tree: its path's length) per step, over the steps that could
    draft the full k: a configuration's own tokens per step, e.g. on its greedy replay."""
    kept = [ok for steps in runs for _, ok in _counted(steps, k, max_new_tokens)]
    return 1.0 + sum(kept) / len(kept) if kept else 1.0


@dataclass(frozen=True)
class Replayed:
    """A configuration's own greedy replay: its tokens per step, and the drafts (a tree: its
    nodes) each of its steps actually offered, which is what that step's verify pass scored."""

    tau: float
    drafted: tuple[int, ...]  # per step that could draft the full k
    kept: tuple[int, ...] = ()  # per such step: the drafts kept (a tree: its path's length)


def replayed(runs: Sequence[Sequence[Any]], k: int, max_new_tokens: int | None = None) -> Replayed:
    counted = [(s.k, ok) for steps in runs for s, ok in _counted(steps, k, max_new_tokens)]
    return Replayed(replayed_tau(runs, k, max_new_tokens), tuple(d for d, _ in counted), tuple(ok for _, ok in counted))
