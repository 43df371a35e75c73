"""A draft model that drafts a token *tree*, EAGLE-2 style (Li et al. 2024, dynamic draft trees).

Depth by depth (depth = the step's k), the draft expands the ``width`` most promising nodes of
the newest depth, ranked by the product of draft probabilities along their path, each with its
``width`` most likely children (top-w of q); one draft forward per depth scores the whole
frontier at once with a tree attention mask on the draft's own KV cache. At the end the ``nodes``
best nodes overall (by the same product) are kept: a child never scores above its parent, so the
kept set is a tree.

The children are chosen deterministically (top-w of q given the context), so the target verifies
them with the point-mass rule of ``specviz.core.algorithm.verify_tree``: try each child c_j with
probability r_j(c_j), remove it from the residual on rejection. q is recorded for display only.

Spec (the part after ``draft-tree:``): ``NAME[@int8][,nodes=N,width=W][,vocab=V]``; defaults
N = 12, W = 2, cheap on a 2-core CPU; vocab=V cuts the draft's head as ``draft:`` does
(:mod:`specviz.proposers.vocab`, with the session's context rows).

``shape=S`` grows a static tree instead, Sequoia style (Chen et al. 2024; with nodes=N or width=W
too: S cut to W children per node, then its first N nodes):
S is the tree's BFS child counts (see :mod:`specviz.proposers.ngram_tree`), and its rank-r child
of a node is the draft's r-th most likely token there; each depth that grows costs one draft
forward over the nodes that have children. ``shape=auto`` takes the shape ``specviz advise``
last chose for this target and draft on this installation (docs/advisor.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from ..core.algorithm import logits_to_probs, top_n
from ..core.proposer import empty_proposal
from ..core.records import Proposal, Sampling
from ..runtime.kv import (
    check_tree_support,
    forward_logits,
    keep_slots,
    rollback,
    session_cache,
    tree_forward_logits,
    vocab_size,
)
from .draft_model import _common_prefix, _fit_vocab, check_same_tokenizer, take_target_prompt
from .ngram_tree import AUTO_MAX_NODES, cap_shape, decode_shape, shape_nodes
from .vocab import context_rows_for, scoring

DRAFT_TREE_SYNTAX = (
    "draft-tree:NAME[@int8][,nodes=N,width=W][,vocab=V][,shape=S]  (N: nodes per step, default 12; W: children per "
    "expanded node and nodes expanded per depth, default 2; the depth is k; S: a static tree's BFS child counts "
    "such as 2111, or auto: the one specviz advise chose; V: a draft head over the V tokens the target uses most, "
    "as for draft:)"
)
DRAFT_TREE_DEFAULTS = {"nodes": 12, "width": 2}
DRAFT_TREE_OPTIONS = (*DRAFT_TREE_DEFAULTS, "vocab", "shape")  # vocab has no default: the whole head


def parse_draft_tree(arg: str | None) -> tuple[str, dict[str, int]]:
    """The part of a ``draft-tree`` spec after ``draft-tree:`` -> (model name, options: nodes and
    width always, vocab when given). "smollm2-135m@int8,nodes=16,width=3" -> ("smollm2-135m@int8",
    {"nodes": 16, "width": 3})."""
    if not arg or not arg.split(",")[0].strip():
        raise ValueError(f"draft-tree needs a draft model name; write {DRAFT_TREE_SYNTAX}")
    head, *options = arg.split(",")
    out = dict(DRAFT_TREE_DEFAULTS)
    given: set[str] = set()
    for item in options:
        key, eq, value = item.partition("=")
        key, value = key.strip().lower(), value.strip()
        if key not in DRAFT_TREE_OPTIONS or not eq:
            raise ValueError(f"unknown option {item.strip()!r} for draft-tree (accepted: nodes=N, width=W, vocab=V); "
                             f"write {DRAFT_TREE_SYNTAX}")
        if key in given:
            raise ValueError(f"option {key} given twice; write {DRAFT_TREE_SYNTAX}")
        if key == "shape":
            given.add(key)
            out["shape"] = value.lower()
            shape_nodes(out["shape"])  # a ValueError for nonsense
            continue
        if not value.lstrip("-").isdigit() or int(value) < 1:
            raise ValueError(f"{key} must be a whole number >= 1, got {value!r}; write {DRAFT_TREE_SYNTAX}")
        given.add(key)
        out[key] = int(value)
    if "shape" in given:  # with nodes=N / width=W too: S cut to W children per node, then its first N nodes
        cap_n, cap_w = (out[k] if k in given else None for k in ("nodes", "width"))
        if out["shape"] == "auto":
            out["nodes"] = min(cap_n or AUTO_MAX_NODES, AUTO_MAX_NODES)
        else:
            out["shape"] = cap_shape(out["shape"], cap_n, cap_w)
            out["nodes"] = shape_nodes(out["shape"])
        out.pop("width")
    return head.strip(), out


@dataclass
class _TreeDraftState:
    cache: object  # the draft's cache (its static step's buffers, else a DynamicCache): ids, then the tree slots fed last step
    vocab: int  # the target's vocabulary size: q is laid out on it
    ids: list[int] = field(default_factory=list)  # context tokens the cache holds, in order
    fed_tokens: list[int] = field(default_factory=list)  # tree slots after ids (last propose)
    fed_parents: list[int] = field(default_factory=list)  # their parent slot (-1 = the root)
    context_rows: Any = None  # vocab=N drafts: a ContextRows (context tokens outside the head's set)


class DraftTree:
    """EAGLE-2-style dynamic draft trees from a same-tokenizer draft model."""

    stops_on_q = False  # a tree is grown to its node budget: a confidence stop changes nothing (schedules.changes_nothing)

    def __init__(self, model, nodes: int = 12, width: int = 2, name: str | None = None, shape: str | None = None):
        for what, v in (("nodes", nodes), ("width", width)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"DraftTree {what} must be a whole number >= 1, got {v!r}; write {DRAFT_TREE_SYNTAX}")
        self.model = model  # a specviz.models.LoadedModel
        self.nodes, self.width = nodes, width
        self.shape = shape  # a static tree's BFS child counts, or None (dynamic, EAGLE-2)
        self._kids: dict[int, list[int]] | None = None  # static: shape node -> its children, in rank order
        if shape is not None:
            if shape == "auto":
                raise ValueError("shape=auto is resolved when the proposer is built from its spec (registry.from_spec); "
                                 "pass the advised shape's digits here")
            parents, _ = decode_shape(shape)
            self.nodes = max(1, len(parents))
            self._kids = {-1: []}
            for i, a in enumerate(parents):
                self._kids.setdefault(a, []).append(i)
                self._kids.setdefault(i, [])
        self.name = name or f"draft-tree:{model.name}" + (f",shape={shape}" if shape else "")

    @property
    def max_nodes(self) -> int:
        return self.nodes

    def init_state(self, target) -> _TreeDraftState:
        check_same_tokenizer(target, self.model)
        check_tree_support(target.model)
        check_tree_support(self.model.model)
        return _TreeDraftState(cache=session_cache(self.model.model), vocab=vocab_size(target.model),
                               context_rows=context_rows_for(self.model.model))

    def share_prompt(self, state: _TreeDraftState, target, target_cache, prompt: list[int]) -> bool:
        """As :meth:`DraftModel.share_prompt`: the target's prompt states where this draft is its copy."""
        return take_target_prompt(state, self.model, target, target_cache, prompt)

    @torch.inference_mode()
    def propose(self, state: _TreeDraftState, context: torch.Tensor, k: int, sampling: Sampling, generator, stop=None) -> Proposal:
        ctx = context.tolist()
        new = ctx[len(state.ids):] if ctx[: len(state.ids)] == state.ids else ctx
        with scoring(state.context_rows, new):  # vocab=N: score the context's own tokens too
            return self._grow(state, ctx, k, sampling, context.device)

    def _grow(self, state: _TreeDraftState, ctx: list[int], k: int, sampling: Sampling, out_device) -> Proposal:
        draft, device, W = self.model, self.model.device, self.width
        # 1. Keep the tree slots of last step's accepted path in the draft's cache, drop the rest,
        #    then feed what the cache lacks (at least the last token) to get q at the root.
        _reconcile(state, ctx)
        keep = min(_common_prefix(state.ids, ctx), len(ctx) - 1)
        rollback(state.cache, keep)
        state.ids = ctx[:keep]
        logits = forward_logits(draft.model, torch.tensor(ctx[keep:], dtype=torch.long, device=device), state.cache, 1)[0]
        state.ids.extend(ctx[keep:])
        C = len(ctx)
        qrows = [logits_to_probs(_fit_vocab(logits, state.vocab), sampling)]  # q after the root, then per expanded node
        tok: list[int] = []
        par: list[int] = []
        score: list[float] = []  # log of the product of q along the path
        depth: list[int] = []
        qrow: list[int] = []  # which q row each node was chosen from (its parent's)

        kids = self._kids  # static shape: shape node -> children; None: dynamic
        shape_of: list[int] = []  # static: each node's shape node

        def add_children(parent: int, row: int, base: float, d: int) -> None:
            wanted = kids[shape_of[parent] if parent >= 0 else -1] if kids is not None else None
            n_kids = W if wanted is None else len(wanted)
            if not n_kids:
                return
            vals, ids = top_n(qrows[row], n_kids)  # [w] the most likely children
            for j, (v, t) in enumerate(zip(vals.tolist(), ids.tolist())):
                if v > 0:
                    tok.append(t), par.append(parent), score.append(base + math.log(v)), depth.append(d), qrow.append(row)
                    if wanted is not None:
                        shape_of.append(wanted[j])

        def next_layer(d: int) -> list[int]:
            if kids is None:  # the w best nodes of depth d
                return sorted((i for i in range(len(tok)) if depth[i] == d), key=lambda i: (-score[i], i))[:W]
            return [i for i in range(len(tok)) if depth[i] == d and kids[shape_of[i]]]  # the shape's inner nodes

        # 2. Depth 1: the root's top-w children. Depth d+1: expand the w best nodes of depth d
        #    (a static shape: the nodes of depth d that have children in it).
        add_children(-1, 0, 0.0, 1)
        fed: list[int] = []  # nodes fed to the draft, in cache-slot order
        slot_of: dict[int, int] = {}
        # a kept tree of N nodes is at most N deep (a child never outranks its parent, and ties go to
        # the earlier node), so a dynamic tree grows no deeper than its node budget, whatever k
        for d in range(1, k if kids is not None else min(k, self.nodes)):
            layer = next_layer(d)
            if not layer:
                break
            T = len(fed)
            m = len(layer)
            visible = torch.zeros(m, T + m, dtype=torch.bool)  # [m, T+m] ancestors and self
            for j, i in enumerate(layer):
                visible[j, T + j] = True
                a = par[i]
                while a >= 0:
                    visible[j, slot_of[a]] = True
                    a = par[a]
            slot_pos = torch.tensor([C + depth[i] - 1 for i in fed + layer], dtype=torch.long, device=device)  # [T+m]
            out = tree_forward_logits(
                draft.model, state.cache, torch.tensor([tok[i] for i in layer], dtype=torch.long, device=device),
                slot_pos[T:], visible.to(device), slot_pos,
            )  # [m, V_d]
            for j, i in enumerate(layer):
                slot_of[i] = T + j
                qrows.append(logits_to_probs(_fit_vocab(out[j], state.vocab), sampling))
                add_children(i, len(qrows) - 1, score[i], d + 1)
            fed.extend(layer)
        state.fed_tokens = [tok[i] for i in fed]
        state.fed_parents = [slot_of[par[i]] if par[i] >= 0 else -1 for i in fed]
        # 3. Keep the best `nodes` overall (a static shape: all it grew); parents sort before their children.
        kept = sorted(sorted(range(len(tok)), key=lambda i: (-score[i], i))[: self.nodes]) if kids is None else list(range(len(tok)))
        if not kept:
            return empty_proposal(out_device)
        index = {old: new for new, old in enumerate(kept)}
        return Proposal(
            tokens=torch.tensor([tok[i] for i in kept], dtype=torch.long, device=out_device),
            q=torch.stack([qrows[qrow[i]] for i in kept]).to(out_device),  # [n, V] shown only
            parents=torch.tensor([index[par[i]] if par[i] >= 0 else -1 for i in kept], dtype=torch.long, device=out_device),
            deterministic=True,
            info={"tree": "draft", "expanded": len(fed), **({"shape": self.shape} if self.shape else {})},
        )


def _reconcile(state: _TreeDraftState, ctx: list[int]) -> None:
    """Keep, of the tree slots fed last step, those on the path the context took; drop the rest."""
    T = len(state.fed_tokens)
    if T == 0:
        return
    matched: list[int] = []
    base = len(state.ids)
    if ctx[:base] == state.ids:
        node = -1
        for t in ctx[base:]:
            nxt = next((s for s in range(T) if state.fed_parents[s] == node and state.fed_tokens[s] == t), None)
            if nxt is None:
                break
            matched.append(nxt)
            node = nxt
    keep_slots(state.cache, T, matched)
    state.ids = state.ids + [state.fed_tokens[s] for s in matched]
    state.fed_tokens, state.fed_parents = [], []
