"""The advisor's readouts (no Gradio): the ranking of every configuration, the cost model's
t(n), the notes and verdicts, predicted against measured after a real run (HTML), the
tree-budget plot (Plotly) and the standalone page ``specviz advise --html`` writes.

Each builder takes the plain objects :mod:`specviz.bench.advise` returns (``Forecast``\\ s,
``CostModel.curves()``, ``TreeBudget``\\ s, ``run_top``'s rows) and returns one HTML string or
one figure.
"""

from __future__ import annotations

import html
from typing import Any, Mapping, Sequence

import plotly.graph_objects as go

from .figures import _figure
from .theme import COLORS, FONT

__all__ = ["ranking_html", "costs_html", "notes_html", "runs_html", "pays_words", "tree_budget_figure", "advice_page_html"]

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
    speedup with its interval (the decode steps), over whole runs (prefills included: the
    ranking's order) and the verdict in words; target-only's step last."""
    if not forecasts:
        return '<p class="sv-advisor-empty">No configuration to rank.</p>'
    rows = []
    for i, f in enumerate(forecasts[:top] if top else forecasts, 1):
        color = COLORS["accepted"] if pays_words(f) == "pays" else (COLORS["rejected"] if not f.pays else None)
        tree = f" ({f.extra['tree']})" if f.extra.get("tree") else ""
        run = f"{f.extra['run_speedup']:.2f}x" if "run_speedup" in f.extra else "-"
        rows.append(_row([f"{i}. {f.label}{tree}", f"{f.tau:.2f}", f"{f.tau_lo:.2f}-{f.tau_hi:.2f}",
                          f"{1e3 * f.step_s:.2f}", f"{f.speedup:.2f}x", f"{f.speedup_lo:.2f}-{f.speedup_hi:.2f}x",
                          run, pays_words(f)], color=color))
    rows.append(_row(["target-only", "1.00", "", f"{1e3 * base_step_s:.2f}", "1.00x", "", "1.00x", "the baseline"]))
    more = len(forecasts) - len(rows) + 1
    tail = f'<p style="font-size:0.85em">… and {more} more configurations.</p>' if top and more > 0 else ""
    return _table(["configuration", "tau", "tau 95%", "step ms", "speedup", "speedup 95%", "whole runs", "verdict"], rows,
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
    """Predicted against measured, one row per configuration run: tau, speedup (the total, and the
    median over prompts with its 90% interval: a measured point is shown with its noise) and the error."""
    if not runs:
        return '<p class="sv-advisor-empty">Nothing ran.</p>'
    rows = []
    for r in runs:
        meas = "-" if r.get("measured_speedup") is None else f"{r['measured_speedup']:.2f}x"
        tau = "-" if r.get("measured_tau") is None else f"{r['measured_tau']:.2f}"
        err = "-" if r.get("error") is None else f"{100 * r['error']:+.0f}%"
        lo, hi = r.get("interval") or (None, None)
        band = "" if lo is None else f"{lo:.2f}-{hi:.2f}x"
        med, (mlo, mhi) = r.get("measured_median"), (list(r.get("measured_interval") or []) + [None, None])[:2]
        median = "-" if med is None else f"{med:.2f}x" + ("" if mlo is None or mhi is None else f" ({mlo:.2f}-{mhi:.2f}x)")
        rows.append(_row([f"{r['spec']} k={r['k']}", f"{r['predicted_tau']:.2f}", tau, f"{r['predicted_speedup_loop']:.2f}x",
                          band, f"{r['predicted_speedup']:.2f}x", meas, median, err]))
    return _table(["configuration", "tau pred", "tau meas", "loop pred", "loop 95%", "run pred", "measured",
                   "median (90%)", "error"], rows, "sv-advisor-runs")


# -- the tree-budget plot -------------------------------------------------------------------------

_SERIES = ("p", "q", "bonus", "resampled")  # one theme colour per tree proposer


def _measured(runs: Sequence[Mapping[str, Any]], proposer: str) -> list[Mapping[str, Any]]:
    return [r for r in runs if r.get("proposer") == proposer and r.get("nodes") and r.get("measured_speedup") is not None]


def tree_budget_figure(budgets: Sequence[Any], runs: Sequence[Mapping[str, Any]] = ()) -> go.Figure:
    """Per tree proposer (``analysis.advisor.TreeBudget``): predicted tokens per step against the
    node budget (left axis, dotted, with its 95% interval), rising; the predicted speedup (right
    axis, solid), peaking; the optimum starred (the shape ``shape=auto`` takes); measured points
    (``run_top``'s rows of that proposer: tau and the whole run's speedup) as diamonds."""
    if not budgets:
        note = dict(text="No tree proposer advised on: add ngram-tree or draft-tree:NAME to see its budget curve.",
                    x=0.5, y=0.5, xref="paper", yref="paper", showarrow=False, font=dict(size=12, color=COLORS["muted"]))
        return _figure([], "Tree budget", height=240, xaxis=dict(visible=False), yaxis=dict(visible=False),
                       annotations=[note])
    traces: list[dict] = []
    top = 1.0
    for i, b in enumerate(budgets):
        color = COLORS[_SERIES[i % len(_SERIES)]]
        pts = list(b.points)
        xs = [p.nodes for p in pts]
        name = html.escape(b.proposer)
        shapes = [p.shape for p in pts]
        traces.append(dict(
            type="scatter", mode="lines+markers", name=f"{name}: tokens per step", x=xs, y=[p.tau for p in pts],
            line=dict(color=color, dash="dot", width=1.5), marker=dict(size=4, color=color),
            error_y=dict(type="data", symmetric=False, array=[p.tau_hi - p.tau for p in pts],
                         arrayminus=[p.tau - p.tau_lo for p in pts], color=color, thickness=1, width=2),
            customdata=shapes, hovertemplate="budget %{x} nodes, shape %{customdata}<br>tau %{y:.2f}<extra></extra>"))
        traces.append(dict(
            type="scatter", mode="lines+markers", name=f"{name}: predicted speedup", x=xs, y=[p.speedup for p in pts],
            yaxis="y2", line=dict(color=color, width=2.5), marker=dict(size=5, color=color), customdata=shapes,
            hovertemplate="budget %{x} nodes, shape %{customdata}<br>predicted %{y:.2f}x<extra></extra>"))
        best = b.best
        traces.append(dict(
            type="scatter", mode="markers", name=f"{name}: best, {best.nodes} nodes ({best.shape}) {best.speedup:.2f}x",
            x=[best.nodes], y=[best.speedup], yaxis="y2",
            marker=dict(symbol="star", size=16, color=COLORS["bonus"], line=dict(width=1, color="white")),
            hovertemplate=f"the optimum: shape {html.escape(best.shape)}<br>%{{x}} nodes, %{{y:.2f}}x<extra></extra>"))
        meas = _measured(runs, b.proposer)
        if meas:
            traces.append(dict(
                type="scatter", mode="markers", name=f"{name}: measured speedup (whole run)", yaxis="y2",
                x=[r["nodes"] for r in meas], y=[r["measured_speedup"] for r in meas],
                marker=dict(symbol="diamond", size=11, color=COLORS["resampled"], line=dict(width=1, color="white")),
                customdata=[html.escape(str(r["spec"])) for r in meas],
                hovertemplate="%{customdata}<br>measured %{y:.2f}x (prefill included)<extra></extra>"))
            taus = [r for r in meas if r.get("measured_tau") is not None]
            traces.append(dict(
                type="scatter", mode="markers", name=f"{name}: measured tokens per step",
                x=[r["nodes"] for r in taus], y=[r["measured_tau"] for r in taus],
                marker=dict(symbol="diamond-open", size=11, color=color, line=dict(width=2)),
                hovertemplate="measured tau %{y:.2f}<extra></extra>"))
        top = max(top, *(p.speedup for p in pts), *(r["measured_speedup"] for r in meas))
    tau_top = max(max(p.tau_hi for p in b.points) for b in budgets)
    line = [dict(type="line", xref="paper", x0=0, x1=1, yref="y2", y0=1, y1=1,
                 line=dict(color=COLORS["rejected"], dash="dash", width=1))]
    return _figure(traces, "Tree budget: tokens per step rise with the nodes, the speedup peaks", height=380,
                   shapes=line, margin=dict(r=56, t=96),
                   xaxis=dict(title=dict(text="node budget (nodes per step)", font=dict(size=10)), dtick=2),
                   yaxis=dict(title=dict(text="tokens per step (tau)", font=dict(size=10)), range=[0, tau_top * 1.1]),
                   yaxis2=dict(title=dict(text="predicted speedup x (1x dashed)", font=dict(size=10)), overlaying="y",
                               side="right", showgrid=False, zeroline=False, range=[0, top * 1.15],
                               dtick=0.25 if top < 2.5 else 0.5, tickformat=".2f"))


# -- the standalone page --------------------------------------------------------------------------


def advice_page_html(advice: Any, runs: Sequence[Mapping[str, Any]] = (), include_plotlyjs: bool | str = True) -> str:
    """The page ``specviz advise --html`` writes: the verdicts, the ranking, the tree-budget plot,
    predicted against measured (when the top ran) and the cost model. ``include_plotlyjs=True``
    inlines plotly.js (works offline); "cdn" links it instead."""
    fig = tree_budget_figure(list(advice.budgets.values()), runs).to_html(full_html=False, include_plotlyjs=include_plotlyjs)
    title = f"specviz advise: {advice.target}"
    parts = [f"<h1>{html.escape(title)}</h1>",
             f"<p>Predicted on {html.escape(advice.cost.machine)} (calibrated on {advice.prompts} prompts, "
             f"{advice.max_new_tokens} new tokens each; 95% intervals from the acceptance counts).</p>",
             "<h2>Verdicts</h2>", notes_html(advice.notes, advice.verdicts),
             "<h2>Ranking</h2>", ranking_html(advice.forecasts, advice.cost.base_step_s, top=None),
             "<h2>Tree budget</h2>", fig]
    if runs:
        parts += ["<h2>Predicted against measured</h2>", runs_html(runs)]
    parts += ["<h2>The cost model</h2>", costs_html(advice.cost.curves(), advice.cost.machine)]
    return (f'<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title></head>'
            f'<body style="font-family:{html.escape(FONT)};max-width:1100px;margin:auto;padding:1em">'
            + "\n".join(parts) + "</body></html>")
