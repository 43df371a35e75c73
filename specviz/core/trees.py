"""Token-tree helpers for the engine: cut a proposal to the step's depth, and build the step's
record (one ``TreeNode`` per node, the accepted path, and the chain view of that path that the
text markup and the per-position metrics already understand)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from .algorithm import TreeVerification, tree_depths
from .lazyrec import Floats, LazyProbs, StepTensors
from .records import DraftDecision, Proposal, StepRecord, TreeNode

if TYPE_CHECKING:  # pragma: no cover
    from .engine import Session


def prune_tree(proposal: Proposal, k: int) -> Proposal:
    """Drop the nodes deeper than ``k`` (the step's draft budget), re-indexing the parents."""
    depth = tree_depths(proposal.parents)
    if max(depth, default=0) <= k:
        return proposal
    kept = [i for i, d in enumerate(depth) if d <= k]
    new_index = {old: new for new, old in enumerate(kept)}
    parents = [(-1 if a < 0 else new_index[a]) for a in proposal.parents[kept].tolist()]
    return proposal.select(kept, torch.tensor(parents, dtype=torch.long, device=proposal.tokens.device))  # [m]


def tree_record(session: "Session", proposal: Proposal, p: LazyProbs, ver: TreeVerification, committed: list[int],
                timings: tuple[float, float, float]) -> tuple[StepRecord, StepTensors]:
    """The StepRecord of a tree step, its top-10 lists deferred; -> (record, kept tensors).
    ``drafts`` is the chain view: the accepted path, then the first child tried and rejected at
    the depth where the walk stopped (if any). ``timings``: (draft, verify, other) ms."""
    texts = session.decoder.texts
    tokens, parents = proposal.tokens.tolist(), proposal.parents.tolist()
    n = len(tokens)
    depth = tree_depths(proposal.parents)
    kept = StepTensors(texts, p, proposal, ver)  # the top-10 lists are computed when read
    lazy = kept.lazy
    has_q = proposal.has_q and n > 0
    top_q = [lazy(lambda i=i: kept.top_q(i)) if has_q else () for i in range(n)]
    vals = Floats(ver)  # p(x) under a greedy walk: computed when first read
    q_x = vals.get("q_x")
    if has_q:  # the draft's q(x), shown even where the rule used point masses
        q_x = proposal.q[torch.arange(n, device=proposal.q.device), proposal.tokens].tolist()
    nodes = tuple(
        TreeNode(
            index=i, token_id=tokens[i], text=texts(tokens[i]), parent=parents[i], depth=depth[i],
            q=q_x[i], p=lazy(lambda i=i: vals.get("p_x")[i]), r=ver.r_x[i], ratio=ver.ratio[i], u=ver.u[i],
            residual_mass=ver.residual_mass[i], verdict=ver.verdict[i], top_q=top_q[i],
        )
        for i in range(n)
    )
    # the chain view: accepted path, then the first rejected child below its last node
    last = ver.path[-1] if ver.path else -1
    shown = list(ver.path)
    rejected = [i for i in range(n) if parents[i] == last and ver.verdict[i] == "rejected"]
    if ver.resampled and rejected:
        shown.append(rejected[0])
    drafts = tuple(
        DraftDecision(
            position=j, token_id=tokens[i], text=texts(tokens[i]), q=q_x[i], p=lazy(lambda i=i: vals.get("p_x")[i]),
            ratio=ver.ratio[i] if ver.ratio[i] is not None else 0.0, u=ver.u[i], verdict=ver.verdict[i],
            top_p=lazy(lambda i=i: kept.top_p(parents[i] + 1)), top_q=top_q[i],
        )
        for j, i in enumerate(shown)
    )
    row = last + 1  # the row of p the next token was judged under
    top_residual = lazy(kept.top_residual) if ver.residual is not None else ()
    record = StepRecord(
        index=len(session.steps),
        k=n,
        drafts=drafts,
        n_accepted=ver.n_accepted,
        next_token_id=ver.next_token,
        next_token_text=texts(ver.next_token),
        next_kind="resampled" if ver.resampled else "bonus",
        next_p=lazy(lambda: float(p.get()[row, ver.next_token])),
        top_next=lazy(lambda: kept.top_p(row)),
        top_residual=top_residual,
        committed=tuple(committed),
        committed_text=tuple(texts(t) for t in committed),
        draft_ms=timings[0],
        verify_ms=timings[1],
        other_ms=timings[2],
        finished=session.finished,
        info=dict(proposal.info),
        rule="exact",
        tree=nodes,
        accepted_path=tuple(ver.path),
    )
    kept.records = [record, *drafts, *nodes]
    return record, kept
