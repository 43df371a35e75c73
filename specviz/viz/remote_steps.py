"""A remote run's verification steps as verdict strips (pure HTML, no Gradio).

Input: the steps of :func:`specviz.remote.replay.steps_of_row` (anything with ``index`` and
``verdicts``). Each cell reuses the token view's classes (``tok tok-KIND`` inside ``sv-step``,
styled by ``specviz/assets/style.css`` and :func:`specviz.viz.tokens.legend_html`), so a remote
step looks like a playground step: accepted drafts, the rejected one and those after it struck
through, then the target's correction or bonus token. The engine gives counts, not tokens, so a
cell shows a mark, never text; the note beside the strips says what is not exposed.
"""

from __future__ import annotations

import html
from typing import Any, Sequence

__all__ = ["REMOTE_KIND", "remote_steps_html"]

# a remote verdict -> the token view's kind (its CSS class tok-KIND) and the cell's mark
REMOTE_KIND = {
    "accepted": ("accepted", "✓"),
    "rejected": ("rejected", "✗"),
    "unchecked": ("discarded", "·"),
    "correction": ("resampled", "↺"),
    "bonus": ("bonus", "+"),
}
_TIPS = {
    "accepted": "draft {pos}: accepted",
    "rejected": "draft {pos}: rejected (the first draft the target disagreed with)",
    "unchecked": "draft {pos}: after a rejection, never checked",
    "correction": "the target's own token after the rejection (correction)",
    "bonus": "every draft kept: the target's bonus token",
}


def _cell(verdict: str, step: int, pos: int) -> str:
    if verdict not in REMOTE_KIND:
        raise ValueError(f"unknown remote verdict {verdict!r}: expected one of {', '.join(REMOTE_KIND)}")
    kind, mark = REMOTE_KIND[verdict]
    tip = _TIPS[verdict].format(pos=pos + 1)
    return (f'<span class="tok tok-{kind}" data-step="{step}" data-pos="{pos}" data-verdict="{verdict}" '
            f'data-tip="{html.escape(tip, quote=True)}">{mark}</span>')


def remote_steps_html(steps: Sequence[Any], note: str, *, title: str = "", max_steps: int = 400) -> str:
    """The verdict strips of one prompt's steps (one ``sv-step`` per target pass), a count line
    and ``note`` (what the engine does not expose). Long runs show their first ``max_steps``."""
    head = f'<div class="sv-remote-title">{html.escape(title, quote=False)}</div>' if title else ""
    note_html = f'<div class="sv-remote-note sv-muted">{html.escape(note, quote=False)}</div>'
    if not steps:
        body = '<div class="sv-empty">This row has no per-step counts (only vLLM with --per-request-spec-decode-metrics detailed gives them).</div>'
        return f'<div class="sv-remote-steps" data-steps="0">{head}{body}{note_html}</div>'
    shown = list(steps)[:max_steps]
    strips = []
    for s in shown:
        cells = "".join(_cell(v, s.index, i) for i, v in enumerate(s.verdicts))
        strips.append(f'<span class="sv-step" data-step="{s.index}">{cells}</span>')
    accepted = sum(v == "accepted" for s in steps for v in s.verdicts)
    drafted = sum(v in ("accepted", "rejected", "unchecked") for s in steps for v in s.verdicts)
    summary = f"{len(steps)} target passes, {accepted} of {drafted} drafts accepted"
    if len(shown) < len(steps):
        summary += f" (the first {len(shown)} passes shown)"
    body = (f'<div class="sv-step-summary">{html.escape(summary)}</div>'
            f'<div class="sv-out">{" ".join(strips)}</div>')
    return f'<div class="sv-remote-steps" data-steps="{len(steps)}">{head}{body}{note_html}</div>'
