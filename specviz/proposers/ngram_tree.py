"""Prompt lookup as a token tree: every distinct continuation of the context's last n tokens,
merged into one trie and verified in one target pass.

The chain proposer (:mod:`specviz.proposers.ngram`) copies what followed the *most recent*
earlier occurrence of the suffix; this one copies what followed *every* occurrence (most recent
first, longest n first), so when the text repeated itself with variations each variation is a
branch. Nodes are point masses chosen deterministically from the context, so the tree rule for
point-mass children keeps sampling exact (``specviz.core.algorithm.verify_tree``).

Spec (the part after ``ngram-tree``): ``[:N][,nodes=M][,shape=S]`` (a budget or a shape, not both) with N the longest suffix
looked up (default 3) and M the node budget per step (default 16); the depth is the step's k.

``shape=S`` fixes a static tree instead of a budget: S is the tree's BFS child counts (digits: the
root's number of children, then each node's in breadth-first order, trailing zeros dropped;
``1111`` is a chain of four, ``3111`` three branches), a node being "the rank-r child of its
parent" (rank = the order the trie met the continuations in). The trie keeps only the nodes
whose rank path is in S; with ``nodes=M`` as well, S's first M nodes (breadth-first). ``shape=auto`` takes the shape ``specviz advise`` last chose for this
target and spec on this installation (the machine's cache directory, :func:`advised_shape`; see
docs/advisor.md); without one it is a ValueError saying to run the advisor.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import torch

from ..core.proposer import empty_proposal
from ..core.records import Proposal, Sampling
from ..runtime.kv import check_tree_support

NGRAM_TREE_SYNTAX = ("ngram-tree[:N][,nodes=M][,shape=S]  (N: longest n-gram looked up, default 3; M: nodes per step, "
                     "default 16; S: a static tree's BFS child counts such as 2111, or auto: the one specviz advise chose)")
NGRAM_TREE_DEFAULTS = {"max_ngram": 3, "nodes": 16}
AUTO_MAX_NODES = 16  # the advisor's trees have at most this many nodes (its cost curve ends at 17 positions)
SHAPE_HELP = ("a tree shape is its BFS child counts, digits such as 2111 (the root's children, then each node's "
              "in breadth-first order), or auto")


def decode_shape(text: str) -> tuple[list[int], list[int]]:
    """BFS child counts -> (parents, ranks) per node, breadth-first (parent -1 = the root, ranks
    from 1): "21" -> ([-1, -1, 0], [1, 2, 1])."""
    text = text.strip()
    if not text or not text.isdigit():
        raise ValueError(f"{SHAPE_HELP}; got {text!r}")
    parents: list[int] = []
    ranks: list[int] = []
    queue = [-1]
    for i, c in enumerate(int(ch) for ch in text):
        if i >= len(queue):
            raise ValueError(f"tree shape {text!r} gives children to nodes that do not exist (too many digits); {SHAPE_HELP}")
        for r in range(1, c + 1):
            parents.append(queue[i])
            ranks.append(r)
            queue.append(len(parents) - 1)
    return parents, ranks


def encode_shape(parents: list[int]) -> str:
    """(parents per node, breadth-first) -> BFS child counts, trailing zeros dropped ("0": no node)."""
    counts = [parents.count(-1)] + [parents.count(i) for i in range(len(parents))]
    if max(counts) > 9:
        raise ValueError("a shape in a spec takes at most 9 children per node")
    return "".join(map(str, counts)).rstrip("0") or "0"


def cap_shape(shape: str, nodes: int | None = None, width: int | None = None) -> str:
    """A shape cut to at most ``width`` children per node and then its first ``nodes`` nodes in
    breadth-first order (``shape=S,nodes=M``: the first M nodes of S)."""
    parents, ranks = decode_shape(shape)
    keep: dict[int, int] = {}  # old index -> new
    out: list[int] = []
    for i, (a, r) in enumerate(zip(parents, ranks)):
        if (width is not None and r > width) or (a >= 0 and a not in keep) or (nodes is not None and len(out) >= nodes):
            continue
        keep[i] = len(out)
        out.append(keep[a] if a >= 0 else -1)
    return encode_shape(out)


def shape_nodes(shape: str) -> int:
    """The nodes of a ``shape=`` value (auto: the advisor's most)."""
    return AUTO_MAX_NODES if shape == "auto" else len(decode_shape(shape)[0])


def advised_shapes_path():
    """Where ``specviz advise`` keeps the shapes it chose: <models cache dir>/advisor/shapes.json."""
    from ..models import cache_dir

    return cache_dir() / "advisor" / "shapes.json"


def advised_shape(target: str, proposer: str) -> str:
    """The shape ``specviz advise`` last chose for ``proposer`` (its spec without ``shape=``) on
    ``target`` here; a ValueError saying how to get one when there is none."""
    path = advised_shapes_path()
    try:
        entry = json.loads(path.read_text(encoding="utf-8")).get(f"{target}|{proposer}")
    except (OSError, ValueError, AttributeError):
        entry = None
    if not entry or not isinstance(entry.get("shape"), str):
        raise ValueError(f"shape=auto: no shape was advised for {proposer} on {target} on this machine yet; run "
                         f"`specviz advise --target {target} --proposer {proposer},shape=auto` first (or give shape=DIGITS)")
    if entry["shape"] == "0":
        raise ValueError(f"shape=auto: the advisor found that {proposer} does not pay on {target} here (no tree beats "
                         "target-only decoding); use --proposer none, or give shape=DIGITS to try one anyway")
    decode_shape(entry["shape"])
    return entry["shape"]


def _whole(text: str, what: str, syntax: str) -> int:
    text = text.strip()
    if not text.lstrip("-").isdigit() or int(text) < 1:
        raise ValueError(f"{what} must be a whole number >= 1, got {text!r}; write {syntax}")
    return int(text)


def parse_ngram_tree(arg: str | None) -> dict[str, int]:
    """The part of an ``ngram-tree`` spec after the prefix -> NGramTree keyword arguments.

    None or "" -> defaults; "4" -> max_ngram 4; "4,nodes=24" or ",nodes=24" also set the budget.
    """
    out = dict(NGRAM_TREE_DEFAULTS)
    if not arg:
        return out
    head, *options = arg.split(",")
    if head.strip():
        out["max_ngram"] = _whole(head, "the n-gram size N", NGRAM_TREE_SYNTAX)
    given = set()
    shape = None
    for item in options:
        key, eq, value = item.partition("=")
        key = key.strip().lower()
        if key not in ("nodes", "shape") or not eq:
            raise ValueError(f"unknown option {item.strip()!r} for ngram-tree (accepted: nodes=M, shape=S); write {NGRAM_TREE_SYNTAX}")
        given.add(key)
        if key == "shape":
            shape = value.strip().lower()
            shape_nodes(shape)  # a ValueError for nonsense
        else:
            out["nodes"] = _whole(value, "nodes (the node budget)", NGRAM_TREE_SYNTAX)
    if shape is not None:  # with nodes=M too: the shape's first M nodes
        cap = out["nodes"] if "nodes" in given else None
        out["shape"] = shape if shape == "auto" else cap_shape(shape, cap)
        out["nodes"] = min(cap or AUTO_MAX_NODES, AUTO_MAX_NODES) if shape == "auto" else shape_nodes(out["shape"])
    return out


@dataclass
class NGramTree:
    max_ngram: int = 3  # longest suffix to look up
    min_ngram: int = 1  # shortest suffix to fall back to
    nodes: int = 16  # node budget per step
    name: str = "ngram-tree"
    stops_on_q = False  # no draft probabilities: a confidence stop changes nothing (schedules.changes_nothing)
    shape: str | None = None  # a static tree's BFS child counts ("auto" is resolved by the registry's builder)

    def __post_init__(self) -> None:
        if self.shape is not None:
            if self.shape == "auto":
                raise ValueError("shape=auto is resolved when the proposer is built from its spec (registry.from_spec); "
                                 "pass the advised shape's digits here")
            parents, ranks = decode_shape(self.shape)
            self.nodes = max(1, len(parents))
            paths: list[tuple[int, ...]] = []
            for a, r in zip(parents, ranks):
                paths.append((() if a < 0 else paths[a]) + (r,))
            self._paths = frozenset(paths)
            self._depth = max((len(p) for p in paths), default=0)
        for what, v in (("max_ngram", self.max_ngram), ("min_ngram", self.min_ngram), ("nodes", self.nodes)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"NGramTree {what} must be a whole number >= 1, got {v!r}; write {NGRAM_TREE_SYNTAX}")
        if self.min_ngram > self.max_ngram:
            raise ValueError(f"NGramTree needs min_ngram <= max_ngram, got {self.min_ngram} > {self.max_ngram}")

    @property
    def max_nodes(self) -> int:
        return self.nodes

    def init_state(self, target) -> None:
        check_tree_support(target.model)
        return None

    def propose(self, state, context: torch.Tensor, k: int, sampling: Sampling, generator, stop=None) -> Proposal:
        if self.shape is None:
            tokens, parents = ngram_trie(context, k, self.max_ngram, self.min_ngram, self.nodes)
        else:
            tokens, parents = ngram_trie(context, min(k, self._depth), self.max_ngram, self.min_ngram, 4 * AUTO_MAX_NODES)
            tokens, parents = keep_rank_paths(tokens, parents, self._paths)
        if not tokens:
            return empty_proposal(context.device)
        return Proposal(
            tokens=torch.tensor(tokens, dtype=torch.long, device=context.device),
            q=None,
            parents=torch.tensor(parents, dtype=torch.long, device=context.device),
            deterministic=True,
            info={"tree": "ngram"},
        )


def ngram_continuations(context: torch.Tensor, k: int, max_ngram: int, min_ngram: int) -> list[list[int]]:
    """Every distinct continuation (up to k tokens) of an earlier occurrence of the context's last
    n tokens: longest n first, most recent occurrence first. context: [L] long."""
    L = context.shape[0]
    found: list[list[int]] = []
    seen: set[tuple[int, ...]] = set()
    for n in range(min(max_ngram, L - 1), min_ngram - 1, -1):
        suffix = context[L - n :]  # [n]
        windows = context[: L - 1].unfold(0, n, 1)  # [L-n, n]: every earlier n-gram
        hits = torch.nonzero((windows == suffix).all(dim=1)).flatten().tolist()
        for start in reversed(hits):
            cont = tuple(context[start + n : start + n + k].tolist())
            if cont and cont not in seen:
                seen.add(cont)
                found.append(list(cont))
    return found


def ngram_trie(context: torch.Tensor, k: int, max_ngram: int, min_ngram: int, budget: int) -> tuple[list[int], list[int]]:
    """The continuations merged into a trie of at most ``budget`` nodes (siblings distinct,
    parents before children). -> (tokens, parents) with parent -1 for the root's children."""
    tokens: list[int] = []
    parents: list[int] = []
    child: dict[tuple[int, int], int] = {}  # (parent, token) -> node
    for cont in ngram_continuations(context, k, max_ngram, min_ngram):
        node = -1
        for t in cont:
            nxt = child.get((node, t))
            if nxt is None:
                if len(tokens) >= budget:
                    break
                nxt = len(tokens)
                tokens.append(t)
                parents.append(node)
                child[(node, t)] = nxt
            node = nxt
        if len(tokens) >= budget:
            break
    return tokens, parents


def keep_rank_paths(tokens: list[int], parents: list[int], paths: frozenset[tuple[int, ...]]) -> tuple[list[int], list[int]]:
    """The trie's nodes whose rank path (the order among siblings, from the root) is in ``paths``;
    parents stay before children."""
    out_tokens: list[int] = []
    out_parents: list[int] = []
    path_of: dict[int, tuple[int, ...]] = {}
    new_index: dict[int, int] = {}
    seen_children: dict[int, int] = {}
    for i, (t, a) in enumerate(zip(tokens, parents)):
        rank = seen_children.get(a, 0) + 1
        seen_children[a] = rank
        if a >= 0 and a not in new_index:
            continue  # its parent was dropped
        path = (path_of[a] if a >= 0 else ()) + (rank,)
        if path not in paths:
            continue
        path_of[i] = path
        new_index[i] = len(out_tokens)
        out_tokens.append(t)
        out_parents.append(new_index[a] if a >= 0 else -1)
    return out_tokens, out_parents
