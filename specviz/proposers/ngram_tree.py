"""Prompt lookup as a token tree: every distinct continuation of the context's last n tokens,
merged into one trie and verified in one target pass.

The chain proposer (:mod:`specviz.proposers.ngram`) copies what followed the *most recent*
earlier occurrence of the suffix; this one copies what followed *every* occurrence (most recent
first, longest n first), so when the text repeated itself with variations each variation is a
branch. Nodes are point masses chosen deterministically from the context, so the tree rule for
point-mass children keeps sampling exact (``specviz.core.algorithm.verify_tree``).

Spec (the part after ``ngram-tree``): ``[:N][,nodes=M]`` with N the longest suffix looked up
(default 3) and M the node budget per step (default 16); the depth is the step's k.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..core.proposer import empty_proposal
from ..core.records import Proposal, Sampling
from ..runtime.kv import check_tree_support

NGRAM_TREE_SYNTAX = "ngram-tree[:N][,nodes=M]  (N: longest n-gram looked up, default 3; M: nodes per step, default 16)"
NGRAM_TREE_DEFAULTS = {"max_ngram": 3, "nodes": 16}


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
    for item in options:
        key, eq, value = item.partition("=")
        key = key.strip().lower()
        if key != "nodes" or not eq:
            raise ValueError(f"unknown option {item.strip()!r} for ngram-tree (accepted: nodes=M); write {NGRAM_TREE_SYNTAX}")
        out["nodes"] = _whole(value, "nodes (the node budget)", NGRAM_TREE_SYNTAX)
    return out


@dataclass
class NGramTree:
    max_ngram: int = 3  # longest suffix to look up
    min_ngram: int = 1  # shortest suffix to fall back to
    nodes: int = 16  # node budget per step
    name: str = "ngram-tree"

    def __post_init__(self) -> None:
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
        tokens, parents = ngram_trie(context, k, self.max_ngram, self.min_ngram, self.nodes)
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
