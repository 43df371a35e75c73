"""Hardware-aware token trees: the shape that maximises predicted tokens per second (Sequoia-style).

A static tree is a topology of ranks: each node is "the rank-r child of its parent" (rank 1 = the
proposer's most likely or most recent candidate). With ``accept[d][r]`` the probability that the
rank-(r+1) child of a node at depth d is the one the target keeps, given that node was kept
(Chen et al. 2024, Sequoia; the root is depth 0 and always kept), the expected tokens of one step
are

    tau(tree) = 1 + sum over nodes v of P(path to v accepted) = 1 + sum_v prod_{u on path(v)} accept[d(u)-1][r(u)-1]

(+1: the correction or bonus token). At most one child of a node is kept, so the children's
terms add. :func:`best_trees` finds, for every node budget n and depth bound D, the tree of at
most n nodes and depth at most D with the largest tau by a dynamic program over (depth, rank,
nodes left); :func:`best_shape` then divides by the measured step time of each candidate
(``step_seconds(tree)``: the draft's cost plus the target's pass over n + 1 positions) and picks
the most tokens per second, the empty tree (no speculation) included.

Shapes travel in proposer specs as BFS child counts (``shape=DIGITS``, :func:`encode`): the
number of children of the root, then of each node in breadth-first order, trailing zeros
dropped; ``1111`` is a chain of four, ``21`` a root with two children the first of which has one
(the codec is the proposers', :mod:`specviz.proposers.ngram_tree`). Pure functions of numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

from ..proposers.ngram_tree import decode_shape, encode_shape

__all__ = ["TreeShape", "best_trees", "best_shape", "best_per_budget", "expected_tokens", "filled_at_least", "node_reach", "to_depth", "encode", "decode", "chain", "EMPTY"]


@dataclass(frozen=True)
class TreeShape:
    """A static tree: ``parents[i]`` (-1 = the root) and ``ranks[i]`` (1-based sibling rank) per node,
    parents before children and siblings in rank order (breadth-first)."""

    parents: tuple[int, ...] = ()
    ranks: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if len(self.parents) != len(self.ranks):
            raise ValueError("a tree shape needs one rank per node")

    @property
    def nodes(self) -> int:
        return len(self.parents)

    @property
    def depths(self) -> tuple[int, ...]:
        out: list[int] = []
        for a in self.parents:
            out.append(1 if a < 0 else out[a] + 1)
        return tuple(out)

    @property
    def depth(self) -> int:
        return max(self.depths, default=0)

    def children(self, node: int) -> list[int]:
        """The children of ``node`` (-1 = the root), in rank order."""
        return [i for i, a in enumerate(self.parents) if a == node]

    @property
    def branching(self) -> tuple[int, ...]:
        """Per depth d = 0..depth-1: the most children any node at depth d has."""
        depths = (0, *self.depths)
        out = [0] * self.depth
        for i, a in enumerate(self.parents):
            d = depths[a + 1]
            out[d] = max(out[d], self.ranks[i])
        return tuple(out)

    def level_widths(self) -> tuple[int, ...]:
        """Per depth d = 1..depth-1: how many depth-d nodes have children (what a draft model feeds
        to grow depth d + 1)."""
        depths = self.depths
        parents = set(self.parents)
        return tuple(sum(1 for i in range(self.nodes) if depths[i] == d and i in parents) for d in range(1, self.depth))

    def rank_paths(self) -> frozenset[tuple[int, ...]]:
        """Every node as the ranks along its path from the root: (1,), (1, 2), ..."""
        paths: list[tuple[int, ...]] = []
        for a, r in zip(self.parents, self.ranks):
            paths.append((() if a < 0 else paths[a]) + (r,))
        return frozenset(paths)

    @property
    def text(self) -> str:
        return encode(self)

    def describe(self) -> str:
        """'chain of 4' / '9 nodes, depth 4, branching 3-2-1-1' / 'no speculation'."""
        if not self.nodes:
            return "no speculation"
        if all(r == 1 for r in self.ranks):
            return f"chain of {self.nodes}"
        return f"{self.nodes} nodes, depth {self.depth}, branching {'-'.join(map(str, self.branching))}"


EMPTY = TreeShape()


def chain(n: int) -> TreeShape:
    """A chain of n nodes."""
    return TreeShape(tuple(range(-1, n - 1)), (1,) * n)


def encode(shape: TreeShape) -> str:
    """BFS child counts, trailing zeros dropped: a chain of 3 -> '111'; the empty tree -> '0'
    (the proposers' codec, ``specviz.proposers.ngram_tree.encode_shape``)."""
    return encode_shape(list(_bfs_order(shape).parents))


def decode(text: str) -> TreeShape:
    """The inverse of :func:`encode`: '21' -> a root with two children, the first with one child."""
    parents, ranks = decode_shape(text)
    return TreeShape(tuple(parents), tuple(ranks))


def _bfs(shape: TreeShape) -> list[int]:
    order, frontier = [], shape.children(-1)
    while frontier:
        order.extend(frontier)
        frontier = [c for v in frontier for c in shape.children(v)]
    return order


def _rate(accept: Sequence[Sequence[float]], d: int, r: int) -> float:
    """accept[d][r] (0 past the calibrated depths and ranks)."""
    if d >= len(accept) or r >= len(accept[d]):
        return 0.0
    p = float(accept[d][r])
    if math.isnan(p) or not 0.0 <= p <= 1.0:
        raise ValueError(f"acceptance at depth {d + 1}, rank {r + 1} must be from 0 to 1, got {p!r}")
    return p


def node_reach(shape: TreeShape, accept: Sequence[Sequence[float]]) -> list[float]:
    """Per node: P(the path to the node is accepted)."""
    reach: list[float] = []
    for a, r, d in zip(shape.parents, shape.ranks, shape.depths):
        reach.append((1.0 if a < 0 else reach[a]) * _rate(accept, d - 1, r - 1))
    return reach


def filled_at_least(shape: TreeShape, fill: Sequence[Sequence[float]] | None) -> list[float]:
    """P(a step drafts at least i of the shape's nodes), i = 1..nodes, where ``fill[d][r]`` is the
    probability that a drafted node at depth d (the root: 0) has a rank-(r+1) child drafted (an
    n-gram trie often finds fewer continuations than the shape has room for; past the given depths
    and ranks: 1). The nodes' fills are taken as independent given their parents: the node count's
    distribution is the product of each subtree's generating function. None: every node is drafted."""
    if fill is None:
        return [1.0] * shape.nodes

    def rate(d: int, r: int) -> float:
        return float(fill[d][r]) if d < len(fill) and r < len(fill[d]) else 1.0

    def count(v: int) -> list[float]:  # P(j nodes drafted below and at v, given v is drafted), j = 0..
        dist = [1.0] if v < 0 else [0.0, 1.0]
        depth = 0 if v < 0 else shape.depths[v]
        for c in shape.children(v):
            f = rate(depth, shape.ranks[c] - 1)
            sub = [f * x for x in count(c)]
            sub[0] += 1.0 - f
            dist = [sum(dist[i] * sub[j - i] for i in range(len(dist)) if 0 <= j - i < len(sub))
                    for j in range(len(dist) + len(sub) - 1)]
        return dist

    dist = count(-1)  # [nodes + 1]
    return [sum(dist[i:]) for i in range(1, shape.nodes + 1)]


def expected_tokens(shape: TreeShape, accept: Sequence[Sequence[float]]) -> float:
    """1 + sum over nodes of P(the path to the node is accepted)."""
    return 1.0 + sum(node_reach(shape, accept))


def to_depth(shape: TreeShape, depth: int) -> TreeShape:
    """The shape cut to its nodes at depth <= ``depth`` (as the engine cuts a tree to k)."""
    keep = [i for i, d in enumerate(shape.depths) if d <= depth]
    index = {old: new for new, old in enumerate(keep)}
    return TreeShape(tuple(-1 if shape.parents[i] < 0 else index[shape.parents[i]] for i in keep),
                     tuple(shape.ranks[i] for i in keep))


def best_trees(accept: Sequence[Sequence[float]], max_nodes: int, max_depth: int) -> dict[int, TreeShape]:
    """For every budget n = 0..max_nodes: the tree of at most n nodes and depth at most
    ``max_depth`` with the largest :func:`expected_tokens` (ties: fewer nodes, then the first found).

    g(d, n): the best sum of path probabilities below a kept node at depth d with n nodes to
    place; h(d, r, n): the same using only children of rank >= r (ranks contiguous from 1):
    h(d, r, n) = max(0, max_j accept[d][r-1] (1 + g(d+1, j)) + h(d, r+1, n-1-j)).
    """
    if max_nodes < 0 or max_depth < 0:
        raise ValueError(f"the node budget and the depth must be >= 0, got {max_nodes} and {max_depth}")
    N = max_nodes
    g = [[0.0] * (N + 1) for _ in range(max_depth + 1)]  # g[d][n]; g[max_depth] = 0 (no deeper)
    choice: dict[tuple[int, int, int], int] = {}  # (d, r, n) -> nodes j under the rank-r child; absent: stop
    for d in range(max_depth - 1, -1, -1):
        h = [[0.0] * (N + 1) for _ in range(N + 2)]  # h[r][n], r = 1..N (h[N+1] = 0)
        for r in range(N, 0, -1):
            p = _rate(accept, d, r - 1)
            for n in range(1, N + 1):
                best, pick = 0.0, None
                if p > 0:
                    for j in range(n):
                        v = p * (1.0 + g[d + 1][j]) + h[r + 1][n - 1 - j]
                        if v > best + 1e-12:
                            best, pick = v, j
                h[r][n] = best
                if pick is not None:
                    choice[(d, r, n)] = pick
        g[d] = h[1]
    out: dict[int, TreeShape] = {}
    for n in range(N + 1):
        parents: list[int] = []
        ranks: list[int] = []
        _build(choice, 0, -1, n, parents, ranks)
        out[n] = _bfs_order(TreeShape(tuple(parents), tuple(ranks)))
    return out


def _build(choice, d: int, parent: int, n: int, parents: list[int], ranks: list[int]) -> None:
    """Place the DP's children of ``parent`` (at depth d) with n nodes, depth first."""
    r = 1
    while n > 0 and (d, r, n) in choice:
        j = choice[(d, r, n)]
        parents.append(parent)
        ranks.append(r)
        me = len(parents) - 1
        _build(choice, d + 1, me, j, parents, ranks)
        n -= 1 + j
        r += 1


def _bfs_order(shape: TreeShape) -> TreeShape:
    """The same tree renumbered breadth-first (siblings in rank order), as specs and proposers use."""
    order = _bfs(shape)
    new = {old: i for i, old in enumerate(order)}
    return TreeShape(tuple(-1 if shape.parents[o] < 0 else new[shape.parents[o]] for o in order),
                     tuple(shape.ranks[o] for o in order))


@dataclass(frozen=True)
class ShapeChoice:
    shape: TreeShape
    tau: float  # expected tokens per step
    step_s: float  # predicted seconds per step
    tokens_per_s: float

    @property
    def text(self) -> str:
        return encode(self.shape)


def best_shape(accept: Sequence[Sequence[float]], step_seconds: Callable[[TreeShape], float], max_nodes: int = 16,
               max_depth: int = 8) -> tuple[ShapeChoice, list[ShapeChoice]]:
    """(the most tokens per second, every candidate): the DP's best tree for each budget
    n = 0..max_nodes and depth bound 1..max_depth, each timed by ``step_seconds(shape)`` (the empty
    shape is target-only decoding). Ties go to the smaller tree."""
    seen: dict[str, ShapeChoice] = {}
    for d in range(1, max(1, max_depth) + 1):
        for shape in best_trees(accept, max_nodes, d).values():
            key = encode(shape)
            if key in seen:
                continue
            s = step_seconds(shape)
            if s <= 0:
                raise ValueError(f"a step must take a positive time, got {s!r} s for shape {key}")
            tau = expected_tokens(shape, accept)
            seen[key] = ShapeChoice(shape, tau, s, tau / s)
    cands = sorted(seen.values(), key=lambda c: (-c.tokens_per_s, c.shape.nodes))
    return cands[0], cands


def best_per_budget(accept: Sequence[Sequence[float]], step_seconds: Callable[[TreeShape], float], max_nodes: int = 16,
                    max_depth: int = 8) -> list[ShapeChoice]:
    """[n]: the tree a budget of n nodes buys, n = 0..max_nodes (the tree-budget curve): of the
    DP's best trees of at most n nodes, one per depth bound 1..max_depth, those that place the
    most nodes (n, unless more nodes would add nothing), and of these the fastest. So tau rises
    with n and the speed peaks; the fastest of the list is :func:`best_shape`'s choice."""
    timed: dict[str, ShapeChoice] = {}
    out: list[ShapeChoice | None] = [None] * (max_nodes + 1)
    for d in range(1, max(1, max_depth) + 1):
        for n, shape in best_trees(accept, max_nodes, d).items():
            key = encode(shape)
            if key not in timed:
                s = step_seconds(shape)
                if s <= 0:
                    raise ValueError(f"a step must take a positive time, got {s!r} s for shape {key}")
                tau = expected_tokens(shape, accept)
                timed[key] = ShapeChoice(shape, tau, s, tau / s)
            c, cur = timed[key], out[n]
            if cur is None or (c.shape.nodes, c.tokens_per_s) > (cur.shape.nodes, cur.tokens_per_s + 1e-12):
                out[n] = c
    return [c for c in out if c is not None]
