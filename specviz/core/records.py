"""Frozen dataclasses: the contracts between proposer, verifier, engine, hooks and UI.

Every field is plain Python (ints, floats, strings, tuples) so a record can be written to a
JSONL trace and read back unchanged, and so a UI never holds on to a tensor.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from typing import Any

import torch

# (token id, token text, probability)
TopToken = tuple[int, str, float]


class Deferred:
    """A field value computed on first read: ``fn()`` once, then remembered.

    The engine fills the costly fields of a record (top-10 lists over the vocabulary, token
    texts, p and q at the drafted tokens) with Deferred values built from tensors kept for the
    step, so a run nobody reads pays nothing for them. Reading the field gives the same value an
    eager build would have given.
    """

    __slots__ = ("fn",)

    def __init__(self, fn):
        self.fn = fn


class _Required:
    """The default of a Lazy field that must be given (a dataclass needs a default after one)."""

    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED = _Required()


class Lazy:
    """A dataclass field descriptor whose value may be a :class:`Deferred` (resolved on first read).

    Frozen dataclasses still set it in ``__init__`` (``object.__setattr__`` calls ``__set__``),
    ``asdict``, ``==``, ``hash`` and ``repr`` read it through ``__get__`` (so they see the value),
    and pickling resolves it first (see :class:`LazyFields`).
    """

    def __init__(self, default: Any = REQUIRED):
        self.default = default

    def __set_name__(self, owner, name: str) -> None:
        self.slot = "_lazy_" + name

    def __get__(self, obj, owner=None):
        if obj is None:
            return self.default  # the dataclass default
        value = obj.__dict__[self.slot]
        if type(value) is Deferred:
            value = value.fn()
            obj.__dict__[self.slot] = value
        return value

    def __set__(self, obj, value) -> None:
        obj.__dict__[self.slot] = value


class LazyFields:
    """Mixin for dataclasses with :class:`Lazy` fields: pickling / copying writes resolved values."""

    def __post_init__(self) -> None:
        missing = [key[6:] for key, v in self.__dict__.items() if key.startswith("_lazy_") and v is REQUIRED]
        if missing:
            raise TypeError(f"{type(self).__name__}() missing required argument(s): {', '.join(missing)}")

    def pending(self) -> tuple[str, ...]:
        """Names of Lazy fields not computed yet."""
        return tuple(key[6:] for key, v in self.__dict__.items() if key.startswith("_lazy_") and type(v) is Deferred)

    def given(self, name: str) -> bool:
        """Whether the Lazy field ``name`` holds something other than None, without computing it
        (a pending value counts as given)."""
        return self.__dict__["_lazy_" + name] is not None

    def resolve(self) -> "LazyFields":
        """Compute every pending field now (nested records too); -> self."""
        for name in self.pending():
            getattr(self, name)
        for value in self.__dict__.values():
            if isinstance(value, tuple):
                for item in value:
                    if isinstance(item, LazyFields):
                        item.resolve()
        return self

    def __getstate__(self):
        self.resolve()
        return dict(self.__dict__)

    def __setstate__(self, state) -> None:
        self.__dict__.update(state)


def evolve(record, **changes):
    """``dataclasses.replace`` that keeps pending Lazy fields pending (replace would compute them)."""
    new = object.__new__(type(record))
    new.__dict__.update(record.__dict__)
    for key, value in changes.items():
        object.__setattr__(new, key, value)
    return new


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
class Proposal(LazyFields):
    """What a proposer drafts for one step (vLLM's SpeculativeProposals, for batch size 1)."""

    tokens: torch.Tensor  # [k] long: drafted token ids x_1..x_k (k may be 0: nothing to propose)
    # [k, V] float: draft distributions after Sampling; None = point masses. May be a Deferred
    # (computed on first read) when the rule does not need it (greedy, argmax drafts).
    q: torch.Tensor | None = Lazy()
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

    @property
    def has_q(self) -> bool:
        """Whether the proposer gave q (computed or pending), without computing a pending q."""
        return self.given("q")

    def head(self, k: int) -> "Proposal":
        """The first k drafts of a chain; a q is sliced when first read."""
        if k >= self.k:
            return self
        q = Deferred(lambda: self.q[:k]) if self.has_q else None  # [k, V]
        return evolve(self, tokens=self.tokens[:k], q=q)

    def select(self, nodes: list[int], parents: torch.Tensor) -> "Proposal":
        """A tree's nodes ``nodes`` (indices, in order) with their re-indexed ``parents``; a q is
        sliced when first read."""
        idx = torch.tensor(nodes, dtype=torch.long, device=self.tokens.device)  # [m]
        q = Deferred(lambda: self.q[idx]) if self.has_q else None  # [m, V]
        return evolve(self, tokens=self.tokens[idx], q=q, parents=parents)


@dataclass(frozen=True)
class TreeNode(LazyFields):
    """The verdict on one node of a token tree (see ``specviz.core.algorithm.verify_tree``)."""

    index: int  # node index within the step's tree
    token_id: int
    text: str
    parent: int  # parent node index, -1 = the root (the last committed token)
    depth: int  # 1 for the root's children
    q: float = Lazy()  # the draft's q(x) at the parent (shown; 1.0 when the proposer has no q)
    p: float = Lazy()  # p(x) at the parent: the target's probability of this token there
    r: float | None = Lazy()  # the residual's probability of x when x was tried (= p for the first child)
    ratio: float | None = Lazy()  # the acceptance probability used: min(1, r(x) / q(x)); greedy 1.0 / 0.0
    u: float | None = Lazy()  # the uniform draw (None when greedy or never tried)
    residual_mass: float | None = Lazy()  # after this node's rejection: mass of p still not ruled out
    verdict: str = Lazy()  # "accepted" | "rejected" | "not reached"
    top_q: tuple[TopToken, ...] = Lazy(())  # top-10 of q at the parent (empty for point masses)

    @property
    def accepted(self) -> bool:
        return self.verdict == "accepted"


@dataclass(frozen=True)
class DraftDecision(LazyFields):
    """The verdict on one drafted token x_i."""

    position: int  # i, 0-based within the step
    token_id: int  # x_i
    text: str = Lazy()  # x_i as text
    q: float = Lazy()  # q(x_i); 1.0 for point-mass proposers
    p: float = Lazy()  # p(x_i)
    ratio: float = Lazy()  # min(1, p(x_i) / q(x_i)); in greedy mode 1.0 if x_i == argmax p else 0.0
    u: float | None = Lazy()  # the uniform draw u_i (None in greedy mode or after the first rejection)
    verdict: str = Lazy()  # "accepted" | "rejected" | "discarded" (after the first rejection, never judged)
    top_p: tuple[TopToken, ...] = Lazy(())  # top-10 of p at this position
    top_q: tuple[TopToken, ...] = Lazy(())  # top-10 of q at this position (empty for point masses)
    threshold: float | None = None  # typical rule only: accepted iff p > min(eps, delta * exp(-H(p)))

    @property
    def accepted(self) -> bool:
        return self.verdict == "accepted"


@dataclass(frozen=True)
class StepRecord(LazyFields):
    """Everything one speculative step did. Built by the engine, read by hooks and the UI.

    Fields marked Lazy may be computed on first read (same values); see :class:`Deferred`."""

    index: int  # 0-based step number within the session
    k: int  # tokens drafted this step (the schedule may vary it)
    drafts: tuple[DraftDecision, ...]  # one per drafted token
    n_accepted: int  # length of the accepted prefix, 0..k
    next_token_id: int  # the correction (after a rejection) or bonus (all accepted) token
    next_token_text: str = Lazy()
    next_kind: str = Lazy()  # "resampled" (from the residual after a rejection), "bonus", or "target" (no drafts)
    next_p: float = Lazy()  # p(next token) at its position
    top_next: tuple[TopToken, ...] = Lazy()  # top-10 of p at the next token's position
    top_residual: tuple[TopToken, ...] = Lazy()  # top-10 of norm(max(0, p - q)) at the rejected position
    committed: tuple[int, ...] = Lazy()  # token ids appended this step (after EOS / max_new_tokens truncation)
    committed_text: tuple[str, ...] = Lazy()  # their texts
    draft_ms: float = Lazy()
    verify_ms: float = Lazy()
    other_ms: float = Lazy()
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
        return _plain(self)

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


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _plain(obj: Any) -> Any:
    """``dataclasses.asdict`` for records (dataclasses of numbers, strings and tuples), without its
    deep copies: a step's record is written to the trace on every step."""
    cls = type(obj)
    if cls in (int, float, str, bool) or obj is None:
        return obj
    if cls is tuple or cls is list:
        return cls(_plain(x) for x in obj)
    names = _FIELD_NAMES.get(cls)
    if names is None:
        if not is_dataclass(obj):
            return copy.deepcopy(obj)
        names = _FIELD_NAMES.setdefault(cls, tuple(f.name for f in fields(obj)))
    return {name: _plain(getattr(obj, name)) for name in names}


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
