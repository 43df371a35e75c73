"""The advisor's readouts as HTML (no Gradio): the ranking of every configuration, the cost
model's t(n), the notes and verdicts, and predicted against measured after a real run.

Each builder takes the plain objects :mod:`specviz.bench.advise` returns (``Forecast``\\ s,
``CostModel.curves()``, ``run_top``'s rows) and returns one HTML string.
"""

from __future__ import annotations

import html
from typing import Any, Mapping, Sequence

from .theme import COLORS

__all__ = ["ranking_html", "costs_html", "notes_html", "runs_html", "pays_words"]

_TABLE = 'style="border-collapse:collapse;font-size:0.9em;width:100%"'
_CELL = 'style="padding:2px 8px;border-bottom:1px solid #ddd;text-align:{align}"'


def _row(cells: Sequence[Any], head: bool = False, color: str | None = None) -> str:
    tag = "th" if head else "td"
    style = f' style="color:{color}"' if color else ""
    out = "".join(f'<{tag} {_CELL.format(align="left" if i == 0 else "right")}>{html.escape(str(c))}</{tag}>'
                  for i, c in enumerate(cells))
    return f"<tr{style}>{out}</tr>"


def _table(head: Sequence[str], rows: Sequence[str], cls: str) -> str:
    return f'<table class="{cls}" {_TABLE}><thead>{_row(head, head=True)}</thead><tbody>{"".join(rows)}</tbody></table>'


def pays_words(f: Any) -> str:
    """A forecast's verdict in words: pays, does not pay (slower than target-only), or drafts nothing."""
    if not f.tau > 1.0:
        return "does not pay: it drafts nothing kept"
    if f.speedup <= 1.0:
        return "does not pay: slower than target-only"
    if f.speedup_lo <= 1.0:
        return "may pay (interval reaches 1.00x)"
    return "pays"


def ranking_html(forecasts: Sequence[Any], base_step_s: float, top: int | None = 20) -> str:
    """The ranked forecasts: configuration, predicted tau with its interval, step time, predicted
    speedup with its interval and the verdict in words; target-only's step last."""
    if not forecasts:
        return '<p class="sv-advisor-empty">No configuration to rank.</p>'
    rows = []
    for i, f in enumerate(forecasts[:top] if top else forecasts, 1):
        color = COLORS["accepted"] if pays_words(f) == "pays" else (COLORS["rejected"] if not f.pays else None)
        tree = f" ({f.extra['tree']})" if f.extra.get("tree") else ""
        rows.append(_row([f"{i}. {f.label}{tree}", f"{f.tau:.2f}", f"{f.tau_lo:.2f}-{f.tau_hi:.2f}",
                          f"{1e3 * f.step_s:.2f}", f"{f.speedup:.2f}x", f"{f.speedup_lo:.2f}-{f.speedup_hi:.2f}x",
                          pays_words(f)], color=color))
    rows.append(_row(["target-only", "1.00", "", f"{1e3 * base_step_s:.2f}", "1.00x", "", "the baseline"]))
    more = len(forecasts) - len(rows) + 1
    tail = f'<p style="font-size:0.85em">… and {more} more configurations.</p>' if top and more > 0 else ""
    return _table(["configuration", "tau", "tau 95%", "step ms", "speedup", "speedup 95%", "verdict"], rows,
                  "sv-advisor-ranking") + tail


def costs_html(curves: Mapping[str, Any], machine: str = "") -> str:
    """The cost model's t(n) (ms, smoothed and raw), v(n) = t(n)/t(1) and the tree pass, one row per n;
    then each draft's step time."""
    rows = []
    for i, n in enumerate(curves.get("n") or []):
        raw = (curves.get("target_raw_ms") or [None] * (i + 1))[i]
        tree = (curves.get("tree_ms") or [None] * (i + 1))[i]
        rows.append(_row([n, f"{curves['target_ms'][i]:.2f}", "-" if raw is None else f"{raw:.2f}",
                          f"{curves['v'][i]:.2f}", "-" if tree is None else f"{tree:.2f}"]))
    title = f'<p style="font-size:0.85em">Costs measured on {html.escape(machine)}.</p>' if machine else ""
    drafts = "".join(f"<li>{html.escape(name)}: one draft step {d['step_ms']:.2f} ms</li>"
                     for name, d in (curves.get("drafts") or {}).items())
    return (title + _table(["n", "t(n) ms", "raw ms", "v(n)", "tree pass ms"], rows, "sv-advisor-costs")
            + (f"<ul>{drafts}</ul>" if drafts else ""))


def notes_html(notes: Sequence[str], verdicts: Sequence[str]) -> str:
    """The advisor's notes (calibration drafted nothing, draft too slow, ...) and its verdicts, as sentences."""
    items = "".join(f"<li>{html.escape(v)}</li>" for v in verdicts)
    notes_part = "".join(f'<p class="sv-advisor-note">Note: {html.escape(n)}</p>' for n in notes)
    return f'<div class="sv-advisor-verdicts"><ul>{items}</ul>{notes_part}</div>'


def runs_html(runs: Sequence[Mapping[str, Any]]) -> str:
    """Predicted against measured, one row per configuration run: tau, speedup and the error."""
    if not runs:
        return '<p class="sv-advisor-empty">Nothing ran.</p>'
    rows = []
    for r in runs:
        meas = "-" if r.get("measured_speedup") is None else f"{r['measured_speedup']:.2f}x"
        tau = "-" if r.get("measured_tau") is None else f"{r['measured_tau']:.2f}"
        err = "-" if r.get("error") is None else f"{100 * r['error']:+.0f}%"
        lo, hi = r.get("interval") or (None, None)
        band = "" if lo is None else f"{lo:.2f}-{hi:.2f}x"
        rows.append(_row([f"{r['spec']} k={r['k']}", f"{r['predicted_tau']:.2f}", tau, f"{r['predicted_speedup_loop']:.2f}x",
                          band, f"{r['predicted_speedup']:.2f}x", meas, err]))
    return _table(["configuration", "tau pred", "tau meas", "loop pred", "loop 95%", "run pred", "measured", "error"],
                  rows, "sv-advisor-runs")
