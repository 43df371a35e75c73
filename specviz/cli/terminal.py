"""The terminal's view of a run: ANSI styles for each token's verdict, the coloured text, the stats."""

from __future__ import annotations

import os
from typing import Sequence, TextIO

from ..core.records import StepRecord

# ANSI styles for token kinds (the app uses the same meanings, see specviz.viz.theme)
RESET = "\x1b[0m"
STYLES = {
    "accepted": "\x1b[32m",  # green
    "resampled": "\x1b[33m",  # amber / yellow
    "bonus": "\x1b[35m",  # violet / magenta
    "target": "",  # plain
    "rejected": "\x1b[9m\x1b[31m",  # struck through, red
    "discarded": "\x1b[9m\x1b[2;31m",  # struck through, dim red (after the first rejection)
}


def use_color(stream: TextIO, mode: str = "auto") -> bool:
    """ANSI colour when asked, or in auto mode on a TTY without NO_COLOR set."""
    if mode == "always":
        return True
    if mode == "never":
        return False
    if os.environ.get("NO_COLOR"):
        return False
    return bool(getattr(stream, "isatty", lambda: False)())


def _style(text: str, kind: str) -> str:
    code = STYLES.get(kind, "")
    if not code or not text:
        return text
    # keep newlines outside the style so a struck-through line break does not smear the terminal
    return "\n".join(f"{code}{part}{RESET}" if part else part for part in text.split("\n"))


def render_steps(steps: Sequence[StepRecord], color: bool = True) -> str:
    """The generated text, token by token: accepted drafts, rejected drafts (struck through),
    the resampled correction or bonus token. Without colour: just the committed tokens' text."""
    out: list[str] = []
    for s in steps:
        n_ok = min(s.n_accepted, s.n_committed)
        for i, text in enumerate(s.committed_text):
            if i < n_ok:
                kind = "accepted"
            else:
                kind = s.next_kind
            if color and i == n_ok:
                # the drafts the target threw away, shown before the token that replaced them
                out.extend(_style(d.text, d.verdict) for d in s.drafts[n_ok:] if d.verdict in ("rejected", "discarded"))
            out.append(_style(text, kind) if color else text)
    return "".join(out)


def legend(color: bool) -> str:
    if not color:
        return ""
    return "legend: " + " ".join(_style(name, kind) for kind, name in (
        ("accepted", "accepted"), ("resampled", "resampled"), ("bonus", "bonus"), ("rejected", "rejected draft"),
    ))


def format_stats(stats, header: str = "") -> str:
    per = " ".join(f"{x:.2f}" for x in stats.per_position) or "-"
    lines = [header] if header else []
    lines += [
        f"tokens {stats.new_tokens} in {stats.steps} steps (mean acceptance length {stats.mean_acceptance_length:.2f})"
        + (f", drafted {stats.drafted}, accepted {stats.accepted} (acceptance rate {stats.acceptance_rate:.2f})" if stats.drafted else ""),
        f"per-position acceptance: {per}",
        f"time {stats.wall_s:.2f} s, {stats.tokens_per_s:.1f} tokens/s (prefill {stats.prefill_ms:.0f} ms, draft "
        f"{stats.draft_ms:.0f} ms, verify {stats.verify_ms:.0f} ms, other {stats.other_ms:.0f} ms; "
        f"{stats.target_forwards} target forwards)",
    ]
    return "\n".join(lines)
