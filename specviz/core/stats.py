"""Per-position acceptance, defined as in vLLM (docs/architecture.md, "Metrics").

Per-position rate i (0-based) = steps whose draft at position i was accepted / steps that drafted
at least i+1 tokens. A tree's positions are its depths: a tree of 16 nodes and depth 4 can commit
at most 4 drafts, like a chain of 4. :func:`position_counts` is the one definition; the engine's
``Stats``, the benchmark's rows and the serving engines' per-step arrays all count with it.

No torch here (records are only type hints), so torch-free callers (specviz.remote) count alike.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:  # pragma: no cover
    from .records import StepRecord


def position_counts(accepted: Sequence[int], drafted: Sequence[int]) -> tuple[list[int], list[int]]:
    """Per-position (hits, trials) from per-step counts: position i was tried in every step that
    drafted more than i tokens, and accepted in those that also accepted more than i."""
    width = max(drafted, default=0)
    hits, trials = [0] * width, [0] * width
    for a, n in zip(accepted, drafted):
        for i in range(n):
            trials[i] += 1
            if i < a:
                hits[i] += 1
    return hits, trials


def drafted_positions(step: "StepRecord") -> int:
    """The positions a step drafted: k for a chain, the deepest node for a tree."""
    return max((node.depth for node in step.tree), default=0) if step.tree else step.k


def accepted_positions(step: "StepRecord") -> int:
    """The drafts a step accepted and committed (drafts cut off by EOS / max_new_tokens were never
    committed, so they do not count)."""
    return min(step.n_accepted, step.n_committed)


def step_position_counts(steps: Sequence["StepRecord"]) -> tuple[list[int], list[int]]:
    """Per-position (hits, trials) of step records (:func:`position_counts`)."""
    return position_counts([accepted_positions(s) for s in steps], [drafted_positions(s) for s in steps])
