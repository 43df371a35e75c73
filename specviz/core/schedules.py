"""Dynamic k: how many tokens to draft next step, from how the last step went."""

from __future__ import annotations

from dataclasses import dataclass

from .records import StepRecord


@dataclass(frozen=True)
class ConstantK:
    """Always draft k tokens."""

    name: str = "constant"

    def next_k(self, k: int, k_max: int, last: StepRecord) -> int:
        return k

    def stop_drafting(self, top: float) -> bool:
        return False


@dataclass(frozen=True)
class HeuristicK:
    """k + 2 after a step that accepted every draft, k - 1 otherwise (transformers' "heuristic")."""

    up: int = 2
    down: int = 1
    name: str = "heuristic"

    def next_k(self, k: int, k_max: int, last: StepRecord) -> int:
        if last.k == 0:
            return k
        return min(k_max, k + self.up) if last.n_accepted == last.k else max(1, k - self.down)

    def stop_drafting(self, top: float) -> bool:
        return False


@dataclass(frozen=True)
class ConfidenceK:
    """Draft up to k tokens, but stop after the first draft whose top probability is below
    ``threshold`` (that draft is still proposed: its forward is paid, and the target may keep it,
    as in ``transformers``' assisted generation)."""

    threshold: float = 0.4
    name: str = "confidence"

    def __post_init__(self) -> None:
        if not 0 <= self.threshold <= 1:
            raise ValueError(f"the confidence threshold must be in [0, 1], got {self.threshold!r}")

    def next_k(self, k: int, k_max: int, last: StepRecord) -> int:
        return k

    def stop_drafting(self, top: float) -> bool:
        return top < self.threshold  # top: max q, the draft's top probability for this token


SCHEDULES = {"constant": ConstantK, "heuristic": HeuristicK, "confidence": ConfidenceK}


def stops_early(schedule) -> bool:
    """Whether ``schedule`` may end a proposal before k (a stop rule of its own, not the never-stop
    of :class:`ConstantK` and :class:`HeuristicK`)."""
    return type(schedule).stop_drafting not in (ConstantK.stop_drafting, HeuristicK.stop_drafting)


def changes_nothing(schedule, proposer) -> str | None:
    """Why ``schedule`` would run exactly as constant k with ``proposer`` (None: it can change the
    run). A stop rule reads each draft's distribution q as it is drafted; a proposer that never ends
    a proposal on it says so with ``stops_on_q = False`` (an n-gram's drafts carry no q; a token
    tree is grown to its node budget)."""
    if proposer is None or not stops_early(schedule) or getattr(proposer, "stops_on_q", True):
        return None
    tree = hasattr(type(proposer), "max_nodes")  # a token tree (draft-tree, ngram-tree): grown to its node budget
    why = " and ".join(w for w, yes in (("its n-gram drafts carry no probabilities", proposer.name.startswith("ngram")),
                                        ("its token tree is grown to its node budget", tree)) if yes) or "it never reads them"
    return (f"the {schedule.name} schedule stops drafting when the draft's top probability is low, and "
            f"{proposer.name} never ends a proposal on it ({why}): it would run exactly as constant k. Use constant or heuristic.")


def make_schedule(spec: str | object | None):
    """"constant" | "heuristic" | "confidence" | "confidence:0.6" | a schedule object -> schedule."""
    if spec is None:
        return ConstantK()
    if not isinstance(spec, str):
        return spec
    name, _, arg = spec.partition(":")
    if name not in SCHEDULES:
        raise ValueError(f"unknown k schedule {spec!r}: use one of {', '.join(SCHEDULES)} (e.g. confidence:0.5)")
    if name == "confidence" and arg:
        try:
            return ConfidenceK(float(arg))
        except ValueError as exc:
            raise ValueError(f"bad confidence threshold in {spec!r}: {exc}") from exc
    return SCHEDULES[name]()
