"""Frozen dataclasses: the contracts between proposer, verifier, engine, hooks and UI.

Every field is plain Python (ints, floats, strings, tuples) so a record can be written to a
JSONL trace and read back unchanged, and so a UI never holds on to a tensor.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

import torch

# (token id, token text, probability)
TopToken = tuple[int, str, float]


@dataclass(frozen=True)
class Sampling:
    """How a distribution is made from logits; applied identically to p (target) and q (draft).

    temperature 0 means greedy: accept while x_i == argmax p, correct with argmax p.
    """

    temperature: float = 0.0  # 0 = greedy, else logits / temperature
    top_k: int | None = None  # keep the k most likely tokens (None or 0 = off)
    top_p: float | None = None  # nucleus: smallest set with mass >= top_p (None or 1.0 = off)

    def __post_init__(self) -> None:
        t = self.temperature
        if not isinstance(t, (int, float)) or t != t or t < 0 or t == float("inf"):
            raise ValueError(
                f"temperature must be a finite number >= 0 (0 = greedy), got {t!r}; "
                "try 0 for greedy or 0.7-1.0 for sampling"
            )
        if self.top_k is not None and (int(self.top_k) != self.top_k or self.top_k < 0):
            raise ValueError(f"top_k must be a whole number >= 0 (0 or None = off), got {self.top_k!r}")
        p = self.top_p
        if p is not None and (not isinstance(p, (int, float)) or p != p or not 0 < p <= 1):
            raise ValueError(f"top_p must be in (0, 1] (1 or None = off), got {p!r}; try 0.9")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


@dataclass(frozen=True)
class Proposal:
    """What a proposer drafts for one step (vLLM's SpeculativeProposals, for batch size 1)."""

    tokens: torch.Tensor  # [k] long: drafted token ids x_1..x_k (k may be 0: nothing to propose)
    q: torch.Tensor | None  # [k, V] float: draft distributions after Sampling; None = point masses
    info: dict[str, Any] = field(default_factory=dict)  # proposer-specific extras for the UI
    # Trees: parents[i] is node i's parent index (-1 = a child of the root, the last committed
    # token); nodes in topological order (parent index < node index). None = a chain.
    parents: torch.Tensor | None = None  # [k] long
    # True when the tokens were chosen deterministically (argmax, top-w, n-gram): the rule then
    # treats every node as a point mass and q, if given, is only shown.
    deterministic: bool = False

    @property
    def k(self) -> int:
        return int(self.tokens.shape[0])

    @property
    def is_tree(self) -> bool:
        return self.parents is not None

    @property
    def q_for_rule(self) -> torch.Tensor | None:
        """The q the acceptance rule uses: None (point masses) when the draft was deterministic."""
        return None if self.deterministic else self.q


@dataclass(frozen=True)
class TreeNode:
    """The verdict on one node of a token tree (see ``specviz.algorithm.verify_tree``)."""

    index: int  # node index within the step's tree
    token_id: int
    text: str
    parent: int  # parent node index, -1 = the root (the last committed token)
    depth: int  # 1 for the root's children
    q: float  # the draft's q(x) at the parent (shown; 1.0 when the proposer has no q)
    p: float  # p(x) at the parent: the target's probability of this token there
    r: float | None  # the residual's probability of x when x was tried (= p for the first child)
    ratio: float | None  # the acceptance probability used: min(1, r(x) / q(x)); greedy 1.0 / 0.0
    u: float | None  # the uniform draw (None when greedy or never tried)
    residual_mass: float | None  # after this node's rejection: mass of p still not ruled out
    verdict: str  # "accepted" | "rejected" | "not reached"
    top_q: tuple[TopToken, ...] = ()  # top-10 of q at the parent (empty for point masses)

    @property
    def accepted(self) -> bool:
        return self.verdict == "accepted"


@dataclass(frozen=True)
class DraftDecision:
    """The verdict on one drafted token x_i."""

    position: int  # i, 0-based within the step
    token_id: int  # x_i
    text: str  # x_i as text
    q: float  # q(x_i); 1.0 for point-mass proposers
    p: float  # p(x_i)
    ratio: float  # min(1, p(x_i) / q(x_i)); in greedy mode 1.0 if x_i == argmax p else 0.0
    u: float | None  # the uniform draw u_i (None in greedy mode or after the first rejection)
    verdict: str  # "accepted" | "rejected" | "discarded" (after the first rejection, never judged)
    top_p: tuple[TopToken, ...] = ()  # top-10 of p at this position
    top_q: tuple[TopToken, ...] = ()  # top-10 of q at this position (empty for point masses)
    threshold: float | None = None  # typical rule only: accepted iff p > min(eps, delta * exp(-H(p)))

    @property
    def accepted(self) -> bool:
        return self.verdict == "accepted"


@dataclass(frozen=True)
class StepRecord:
    """Everything one speculative step did. Built by the engine, read by hooks and the UI."""

    index: int  # 0-based step number within the session
    k: int  # tokens drafted this step (the schedule may vary it)
    drafts: tuple[DraftDecision, ...]  # one per drafted token
    n_accepted: int  # length of the accepted prefix, 0..k
    next_token_id: int  # the correction (after a rejection) or bonus (all accepted) token
    next_token_text: str
    next_kind: str  # "resampled" (from the residual after a rejection), "bonus", or "target" (no drafts)
    next_p: float  # p(next token) at its position
    top_next: tuple[TopToken, ...]  # top-10 of p at the next token's position
    top_residual: tuple[TopToken, ...]  # top-10 of norm(max(0, p - q)) at the rejected position
    committed: tuple[int, ...]  # token ids appended this step (after EOS / max_new_tokens truncation)
    committed_text: tuple[str, ...]  # their texts
    draft_ms: float
    verify_ms: float
    other_ms: float
    finished: str | None = None  # "eos" | "length" when this step ended the session
    info: dict[str, Any] = field(default_factory=dict)  # proposer extras (e.g. token mapping)
    rule: str = "exact"  # the acceptance rule that judged the drafts: "exact" or "typical" (LOSSY)
    tree: tuple[TreeNode, ...] = ()  # tree steps only: one entry per drafted node (chains: empty)
    accepted_path: tuple[int, ...] = ()  # tree steps only: node indices from the root down

    @property
    def total_ms(self) -> float:
        return self.draft_ms + self.verify_ms + self.other_ms

    @property
    def n_committed(self) -> int:
        return len(self.committed)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "StepRecord":
        d = dict(d)
        d["drafts"] = tuple(_draft_from_dict(x) for x in d.get("drafts", ()))
        for name in ("top_next", "top_residual"):
            d[name] = tuple(tuple(t) for t in d.get(name, ()))
        for name in ("committed", "committed_text", "accepted_path"):
            d[name] = tuple(d.get(name, ()))
        d["tree"] = tuple(_node_from_dict(x) for x in d.get("tree", ()))
        known = {f.name for f in fields(cls)}
        return cls(**{key: v for key, v in d.items() if key in known})


def _draft_from_dict(d: dict[str, Any]) -> DraftDecision:
    d = dict(d)
    for name in ("top_p", "top_q"):
        d[name] = tuple(tuple(t) for t in d.get(name, ()))
    known = {f.name for f in fields(DraftDecision)}
    return DraftDecision(**{key: v for key, v in d.items() if key in known})


def _node_from_dict(d: dict[str, Any]) -> TreeNode:
    d = dict(d)
    d["top_q"] = tuple(tuple(t) for t in d.get("top_q", ()))
    known = {f.name for f in fields(TreeNode)}
    return TreeNode(**{key: v for key, v in d.items() if key in known})


@dataclass(frozen=True)
class Stats:
    """Run metrics, defined as in vLLM (docs/architecture.md, "Metrics")."""

    steps: int  # speculative steps (target verify passes)
    drafted: int  # draft tokens proposed (tree steps: every node of the tree)
    accepted: int  # draft tokens accepted (tree steps: the accepted path length)
    new_tokens: int  # tokens committed
    acceptance_rate: float  # accepted / drafted (0 when nothing was drafted)
    mean_acceptance_length: float  # tau = committed / steps (plain decoding = 1.0)
    per_position: tuple[float, ...]  # i -> steps with draft i accepted / steps with >= i+1 drafts
    wall_s: float  # decode wall time, prefill included
    tokens_per_s: float  # new_tokens / wall_s
    target_forwards: int  # target forward passes, prefill included
    draft_ms: float  # summed step timings
    verify_ms: float
    other_ms: float
    prefill_ms: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class GenerationResult:
    text: str  # the new text only
    token_ids: tuple[int, ...]  # new tokens only
    steps: tuple[StepRecord, ...]
    stats: Stats
    prompt: str = ""
    finished: str | None = None  # "eos" | "length"
