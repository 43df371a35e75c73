"""One step's counts, defined once: what every readout of a step (status line, step summary,
cards, chart titles) says about it, for chains and token trees alike.

A chain's nodes are its drafts and its depth is k. A tree drafts ``nodes_drafted`` nodes, the
target scores all of them in one pass, and at most one path of ``depth`` nodes can be accepted:
the acceptance rate of a tree step divides the accepted path by the depth (what the per-position
chart shows), the rate over nodes is ``path_accepted / nodes_drafted``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from .records import StepRecord
from .stats import drafted_positions

__all__ = ["StepCounts", "step_counts", "run_counts"]


@dataclass(frozen=True)
class StepCounts:
    """The vocabulary of one step (or, from :func:`run_counts`, of a run: the sums)."""

    tree: bool  # a token tree (False: a chain, whose nodes are its drafts)
    nodes_drafted: int  # draft tokens proposed (a tree: every node)
    nodes_verified: int  # nodes the target scored in its one verify pass (= nodes_drafted)
    depth: int  # positions drafted: k for a chain, the deepest node for a tree
    path_accepted: int  # drafts accepted along the path (the accepted prefix), 0..depth
    path_committed: int  # ... of which committed (EOS / max new tokens may cut the rest)
    rejected_at: int | None  # 1-based position (a tree: depth) of the rejection that ended the path
    next_kind: str  # "bonus" | "correction" | "target" (nothing drafted)
    next_how: str  # how the next token was chosen: "argmax p" | "resampled" | "sampled from p" | "target"
    next_committed: bool  # whether the correction / bonus token was committed
    rule: str  # "exact" | "typical" | "greedy"

    @property
    def rate(self) -> float | None:
        """Accepted path / depth (per position: what the per-position chart shows); None when nothing was drafted."""
        return self.path_accepted / self.depth if self.depth else None

    @property
    def rate_over_nodes(self) -> float | None:
        """Accepted path / nodes drafted (a tree's Stats.acceptance_rate); None when nothing was drafted."""
        return self.path_accepted / self.nodes_drafted if self.nodes_drafted else None

    @property
    def committed(self) -> int:
        return self.path_committed + int(self.next_committed)


def _rule(record: StepRecord) -> str:
    if record.rule == "typical":
        return "typical"
    judged = [d for d in record.drafts if d.verdict != "discarded"]
    return "greedy" if judged and all(d.u is None for d in judged) else "exact"


def step_counts(record: StepRecord) -> StepCounts:
    """The counts of one step record (a tree's chain view gives the same counts: they come from
    ``record.tree`` when there is one, never from ``record.k``)."""
    tree = bool(record.tree)
    nodes = len(record.tree) if tree else record.k
    depth = drafted_positions(record)
    n = record.n_accepted
    rule = _rule(record)
    if nodes == 0:
        kind, how = "target", "target"
    elif record.next_kind == "bonus":
        kind, how = "bonus", "argmax p" if rule == "greedy" else "sampled from p"
    else:
        kind = "correction"
        how = "resampled" if rule == "exact" else "argmax p"
    rejected = next((d.position + 1 for d in record.drafts if d.verdict == "rejected"), None)
    return StepCounts(
        tree=tree, nodes_drafted=nodes, nodes_verified=nodes, depth=depth, path_accepted=n,
        path_committed=min(n, record.n_committed), rejected_at=rejected if kind == "correction" else None,
        next_kind=kind, next_how=how, next_committed=record.n_committed > n, rule=rule,
    )


def run_counts(steps: Sequence[StepRecord]) -> StepCounts | None:
    """The counts of a run, summed over its steps (None for no steps); ``path_accepted`` counts
    committed drafts only, as ``Stats.accepted`` does."""
    if not steps:
        return None
    cs = [step_counts(s) for s in steps]
    return StepCounts(
        tree=any(c.tree for c in cs), nodes_drafted=sum(c.nodes_drafted for c in cs),
        nodes_verified=sum(c.nodes_verified for c in cs), depth=sum(c.depth for c in cs),
        path_accepted=sum(c.path_committed for c in cs), path_committed=sum(c.path_committed for c in cs),
        rejected_at=None, next_kind="", next_how="", next_committed=False, rule=cs[-1].rule,
    )
