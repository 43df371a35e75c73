"""A step in phases, and finding the steps worth looking at.

One speculative step, shown the way the algorithm runs it:

1. ``draft``: the k drafted tokens appear, each with q(x_i);
2. ``verify``: one target pass scores every position at once: p(x_i) arrives for all of them;
3. ``decide``: left to right, each draft is judged (u_i against min(1, p/q); p against the
   threshold for typical acceptance; x = argmax p at greedy) up to position ``upto``;
4. ``commit``: the accepted prefix stays, the correction (after a rejection) or the bonus token
   (all accepted) is appended.

:func:`step_phase_html` renders a StepRecord at one phase with the token classes of
:mod:`specviz.viz.tokens` (``tok tok-KIND`` and the same tooltips); :func:`phase_frames` lists
the frames a Play button walks through; :func:`next_rejection` / :func:`previous_rejection`
find the steps with a rejection. Pure functions of records; no Gradio.
"""

from __future__ import annotations

import html
from typing import Sequence

from ..core.records import StepRecord
from .numbers import fmt_pair, fmt_prob, rule_of
from .tokens import _draft_tip, _next_tip, _span, is_greedy, token_label

__all__ = [
    "PHASES", "PHASE_TITLES", "phase_frames", "next_frame", "previous_frame", "step_phase_html", "rejection_steps",
    "next_rejection", "previous_rejection", "neighbour_step",
]

PHASES = ("draft", "verify", "decide", "commit")
PHASE_TITLES = {
    "draft": "1 · draft: the proposer drafts k tokens, each with its probability q",
    "verify": "2 · verify: one target pass gives p at every position at once",
    "decide": "3 · decide: left to right, keep each draft while it passes the rule",
    "commit": "4 · commit: keep the accepted prefix, add the correction or the bonus token",
}


def _judged(record: StepRecord) -> int:
    """How many drafts were judged: up to and including the first rejection."""
    return sum(1 for d in record.drafts if d.verdict != "discarded")


def phase_frames(record: StepRecord) -> list[tuple[str, int]]:
    """Every frame of a step in order: (phase, upto). ``upto`` is the last judged position shown in
    "decide" (0-based), -1 elsewhere. A target-only step (k = 0) has only its commit frame."""
    if record.k == 0:
        return [("commit", -1)]
    frames = [("draft", -1), ("verify", -1)]
    frames += [("decide", i) for i in range(max(1, _judged(record)))]
    frames.append(("commit", -1))
    return frames


def next_frame(record: StepRecord, phase: str, upto: int = -1) -> tuple[str, int] | None:
    """The frame after (phase, upto), or None after commit (the UI moves on to the next step)."""
    frames = phase_frames(record)
    i = _frame_index(frames, phase, upto)
    return frames[i + 1] if i + 1 < len(frames) else None


def previous_frame(record: StepRecord, phase: str, upto: int = -1) -> tuple[str, int] | None:
    """The frame before (phase, upto), or None at the first one."""
    frames = phase_frames(record)
    i = _frame_index(frames, phase, upto)
    return frames[i - 1] if i > 0 else None


def _frame_index(frames: list[tuple[str, int]], phase: str, upto: int) -> int:
    if phase not in PHASES:
        raise ValueError(f"phase must be one of {', '.join(PHASES)}; got {phase!r}")
    if phase == "decide":
        decides = [i for i, f in enumerate(frames) if f[0] == "decide"]
        return decides[max(0, min(upto, len(decides) - 1))] if decides else len(frames) - 1
    for i, f in enumerate(frames):
        if f[0] == phase:
            return i
    return len(frames) - 1  # a target-only step has only "commit"


def _check(d, record: StepRecord) -> str:
    """The decide line of one judged draft: the numbers and the comparison that decided it."""
    rule = rule_of(record)
    ok = "✓" if d.accepted else "✗"
    if rule == "greedy":
        return f"x {'=' if d.accepted else '≠'} argmax p {ok}"
    if rule == "typical":
        if d.threshold is None:
            return ok
        sp, st = fmt_pair(d.p, d.threshold)
        return f"p {sp} {'>' if d.accepted else '≤'} thr {st} {ok}"
    if d.u is None:
        return ok
    su, sr = fmt_pair(d.u, d.ratio)
    return f"u {su} {'≤' if d.accepted else '>'} {sr} {ok}"


def step_phase_html(record: StepRecord | None, phase: str = "commit", upto: int | None = None) -> str:
    """One step at one phase, as a row of token cells (token, q, p, the check) and a caption.

    phase: "draft" | "verify" | "decide" | "commit"; upto: in "decide", the last position judged so
    far (0-based; None = all judged). Tokens are ``tok tok-KIND`` spans with the inspector's
    tooltips; a draft not decided yet is ``tok-pending``.
    """
    if phase not in PHASES:
        raise ValueError(f"phase must be one of {', '.join(PHASES)}; got {phase!r}")
    if record is None:
        return '<div class="sv-phase sv-muted">Run a step to watch it in phases.</div>'
    greedy = is_greedy(record)
    judged = _judged(record)
    if phase == "decide":
        shown = judged if upto is None else max(0, min(int(upto) + 1, judged))
    else:
        shown = judged if phase == "commit" else 0
    rule = rule_of(record)
    cells = []
    if record.tree and phase in ("draft", "verify"):  # a tree before decide: its nodes (the path is not known yet)
        cells = [_node_cell(record, nd, phase) for nd in record.tree]
    for d in record.drafts:
        if record.tree and phase != "commit" and d.position >= shown:
            continue  # a tree's path nodes not judged yet would tell the path
        decided = d.position < shown
        kind = d.verdict if decided or (phase == "commit" and d.verdict == "discarded") else "pending"
        tip = _draft_tip(record, d, greedy) if phase in ("decide", "commit") else (
            f"draft {d.position + 1} of {record.k}: q = {fmt_prob(d.q)}" + (f", p = {fmt_prob(d.p)}" if phase == "verify" else ""))
        lines = [f'<div class="sv-phase-num sv-phase-q">q {fmt_prob(d.q)}</div>']
        if phase != "draft":
            lines.append(f'<div class="sv-phase-num sv-phase-p">p {fmt_prob(d.p)}</div>')
        if decided:
            lines.append(f'<div class="sv-phase-check sv-v sv-v-{d.verdict}">{html.escape(_check(d, record))}</div>')
        elif phase == "commit" and d.verdict == "discarded":
            lines.append('<div class="sv-phase-check sv-v sv-v-discarded">never judged</div>')
        cur = " sv-phase-cur" if phase == "decide" and d.position == shown - 1 else ""
        cells.append(
            f'<div class="sv-phase-cell{cur}" data-pos="{d.position}" data-kind="{kind}">'
            f'{_span(kind, d.text, record.index, d.position, tip)}{"".join(lines)}</div>'
        )
    if phase == "commit" and record.n_committed > min(record.n_accepted, record.n_committed):
        what = {"resampled": "correction", "bonus": "bonus", "target": "target"}[record.next_kind]
        cells.append(
            f'<div class="sv-phase-cell sv-phase-next" data-pos="{record.n_accepted}" data-kind="{record.next_kind}">'
            f'{_span(record.next_kind, record.next_token_text, record.index, record.n_accepted, _next_tip(record, greedy))}'
            f'<div class="sv-phase-num sv-phase-p">p {fmt_prob(record.next_p)}</div>'
            f'<div class="sv-phase-check sv-v sv-v-{record.next_kind}">{what}</div></div>'
        )
    caption = _caption(record, phase, shown, rule)
    steps = "".join(
        f'<span class="sv-phase-tab{" on" if p == phase else ""}" data-phase="{p}">{p}</span>' for p in PHASES)
    return (
        f'<div class="sv-phase" data-step="{record.index}" data-phase="{phase}" data-upto="{shown - 1}">'
        f'<div class="sv-phase-tabs">{steps}</div><div class="sv-phase-title">{html.escape(PHASE_TITLES[phase])}</div>'
        f'<div class="sv-phase-row">{"".join(cells)}</div><div class="sv-phase-caption">{html.escape(caption)}</div></div>'
    )


def _node_cell(record: StepRecord, nd, phase: str) -> str:
    """One node of a tree before decide: its token and depth, q, and p once verified."""
    tip = f"node {nd.index + 1} of {len(record.tree)}, depth {nd.depth}: q = {fmt_prob(nd.q)}" + (
        f", p = {fmt_prob(nd.p)}" if phase == "verify" else "")
    lines = [f'<div class="sv-phase-num sv-phase-q">q {fmt_prob(nd.q)}</div>']
    if phase == "verify":
        lines.append(f'<div class="sv-phase-num sv-phase-p">p {fmt_prob(nd.p)}</div>')
    return (f'<div class="sv-phase-cell" data-pos="{nd.index}" data-kind="pending" data-depth="{nd.depth}">'
            f'{_span("pending", nd.text, record.index, nd.index, tip)}{"".join(lines)}</div>')


def _caption(record: StepRecord, phase: str, shown: int, rule: str) -> str:
    k, n = record.k, record.n_accepted
    if record.tree and phase in ("draft", "verify"):
        nodes = len(record.tree)
        if phase == "draft":
            return f"The proposer drafted a tree of {nodes} nodes; q is how likely it found each one."
        return f"One target forward over the context and all {nodes} nodes (a tree attention mask) gives p at each."
    if k == 0:
        return f"Nothing drafted: one target pass commits one token, {token_label(record.next_token_text)!r}."
    if phase == "draft":
        return f"The proposer drafted {k} token{'s' if k != 1 else ''}; q is how likely it found each one."
    if phase == "verify":
        drafts = "its 1 draft" if k == 1 else f"all {k} drafts"
        return f"One target forward over the context and {drafts} gives p at {k + 1} positions (the last one for a bonus)."
    if phase == "decide":
        how = {"exact": "accept while u ≤ min(1, p/q)", "typical": "accept while p > the threshold (LOSSY)",
               "greedy": "accept while x = argmax p (temperature 0: no u, the ratio is not used)"}[rule]
        if shown == 0:
            return f"Rule: {how}."
        d = record.drafts[shown - 1]
        return f"Rule: {how}. Draft {shown}: {d.verdict}" + (" — the step stops here." if d.verdict == "rejected" else ".")
    committed = min(n, record.n_committed)
    if record.next_kind == "bonus":
        tail = f"all {k} accepted, so the target's own next token comes free: the bonus."
    else:
        src = "argmax p" if rule != "exact" else "the residual norm(max(0, p − q))"
        tail = f"draft {n + 1} was rejected, so the correction is drawn from {src}."
    return f"Committed {record.n_committed} token{'s' if record.n_committed != 1 else ''} ({committed} accepted): {tail}"


# -- navigation ----------------------------------------------------------------------------------


def rejection_steps(steps: Sequence[StepRecord]) -> list[int]:
    """The indices (StepRecord.index) of the steps in which a draft was rejected."""
    return [s.index for s in steps if any(d.verdict == "rejected" for d in s.drafts)]


def next_rejection(steps: Sequence[StepRecord], current: int | None) -> int | None:
    """The first step after ``current`` (a StepRecord.index; None = before the first) with a
    rejection, or None when there is none after it."""
    after = [i for i in rejection_steps(steps) if current is None or i > current]
    return after[0] if after else None


def previous_rejection(steps: Sequence[StepRecord], current: int | None) -> int | None:
    """The last step before ``current`` (None = after the last) with a rejection, or None."""
    before = [i for i in rejection_steps(steps) if current is None or i < current]
    return before[-1] if before else None


def neighbour_step(steps: Sequence[StepRecord], current: int | None, delta: int) -> int | None:
    """The step index ``delta`` steps from ``current`` (clamped to the run), for previous/next
    buttons and the arrow keys; None when there are no steps."""
    if not steps:
        return None
    idx = [s.index for s in steps]
    pos = idx.index(current) if current in idx else (len(idx) - 1 if delta < 0 else -1)
    return idx[max(0, min(len(idx) - 1, pos + delta))]
