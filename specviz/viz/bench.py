"""Plotly figures and a standalone HTML page for benchmark reports (no Gradio).

Every builder takes the plain rows of a ``specviz.bench`` report (summary rows, or per-prompt
rows for the category chart) and returns a ``plotly.graph_objects.Figure``; rows may be partial
(a sweep still running) or empty. ``report_html(report)`` writes them all into one page that
works offline (plotly.js inlined once).
"""

from __future__ import annotations

import html
import math
import re
from typing import Any, Callable, Mapping, Sequence

import plotly.graph_objects as go

from ..analysis.metrics import METRICS, expected_tokens_per_step
from ..bench.kernel_words import kernel_summary
from .bench_marks import chain_fits, mark_traces
from .bench_page import page_html
from .bench_readout import why_markdown
from .bench_rows import report_rows
from .bench_table import TABLE_COLUMNS, table_help, table_rows
from .figures import _figure as house_figure
from .theme import COLORS

__all__ = [
    "FIGURES", "acceptance_length_figure", "acceptance_rate_figure", "build_figures", "category_figure",
    "latency_figure", "per_position_figure", "predicted_speedup_figure", "report_html", "report_rows", "speedup_figure",
    "kernel_summary", "table_help", "table_rows", "TABLE_COLUMNS", "tree_speedup_figure", "tree_tau_figure", "verify_cost_figure",
    "why_markdown",
]

Row = Mapping[str, Any]
HEIGHT = 320
TARGET_ONLY = "target-only"
# One colour per proposer, in the order they appear (the token colours stay for tokens).
PALETTE = ["#2563eb", "#db2777", "#0d9488", "#ea580c", "#7c3aed", "#65a30d", "#0891b2", "#b45309"]
IMPL_DASH = {"specviz": "solid", "hf": "dot", "remote": "solid"}
SPEC_IMPLS = ("specviz", "remote")  # rows with acceptance counts: the local lab and remote servers


def _figure(traces: list[dict], title: str, xtitle: str, ytitle: str, *, shapes=None, annotations=None,
            xaxis: dict | None = None, yaxis: dict | None = None, **layout_kw) -> go.Figure:
    """The playground's house-style figure, taller, with titled axes and room for a legend."""
    return house_figure(
        traces, title, height=HEIGHT, margin=dict(l=56, t=72), annotations=annotations, shapes=shapes or [],
        xaxis=dict(title=dict(text=xtitle, font=dict(size=11)), **(xaxis or {})),
        yaxis=dict(title=dict(text=ytitle, font=dict(size=11)), **(yaxis or {})),
        hoverlabel=None,  # Plotly's default hover font, as these charts have always had
        **layout_kw,
    )


def _empty(title: str, message: str = "No results yet: run a sweep") -> go.Figure:
    note = dict(text=html.escape(message), x=0.5, y=0.5, xref="paper", yref="paper", showarrow=False,
                font=dict(size=12, color=COLORS["muted"]))
    return _figure([], title, "", "", annotations=[note], xaxis=dict(visible=False), yaxis=dict(visible=False))


def _colors(rows: Sequence[Row]) -> dict[str, str]:
    names: list[str] = []
    for r in rows:
        if r["proposer"] != TARGET_ONLY and r["proposer"] not in names:
            names.append(r["proposer"])
    return {n: PALETTE[i % len(PALETTE)] for i, n in enumerate(names)}


def _series(rows: Sequence[Row], impls: Sequence[str] = ("specviz", "hf", "remote")) -> list[tuple[str, str, list[Row]]]:
    """(proposer, impl, rows sorted by k) for every speculative configuration."""
    groups: dict[tuple[str, str], list[Row]] = {}
    for r in rows:
        if r.get("kind", "summary") != "summary" or r["proposer"] == TARGET_ONLY or r["impl"] not in impls:
            continue
        groups.setdefault((r["proposer"], r["impl"]), []).append(r)
    return [(p, i, sorted(rs, key=lambda r: r["k"])) for (p, i), rs in groups.items()]


def _name(proposer: str, impl: str) -> str:
    return f"{proposer} (hf)" if impl == "hf" else proposer


_METRICS = {m.name: m for m in METRICS}


def _label(key: str) -> str:
    """A row key as the tooltips write it: the METRICS name in words, with its symbol."""
    m = _METRICS.get(key)
    return m.label if m else key


def _line(rows: Sequence[Row], key: str, name: str, color: str, dash: str = "solid", fmt: str = ".2f",
          extra: Callable[[Row], str] | None = None, symbol: str = "circle") -> dict:
    pts = [r for r in rows if isinstance(r.get(key), (int, float)) and math.isfinite(r[key])]
    hover = [
        f"{html.escape(name)}<br>k={r['k']}: {html.escape(_label(key))} = {format(r[key], fmt)}" + (extra(r) if extra else "")
        for r in pts
    ]
    return dict(type="scatter", mode="lines+markers", name=name, x=[r["k"] for r in pts], y=[r[key] for r in pts],
                line=dict(color=color, dash=dash, width=2), marker=dict(size=7, color=color, symbol=symbol),
                hovertext=hover, hoverinfo="text")


def _ks(rows: Sequence[Row]) -> list[int]:
    return sorted({r["k"] for r in rows if r["k"] > 0})


def _baseline(rows: Sequence[Row], impl: str) -> Row | None:
    return next((r for r in rows if r["proposer"] == TARGET_ONLY and r["impl"] == impl), None)


def _hline(y: float, label: str, dash: str = "dash", color: str = COLORS["target"]) -> tuple[dict, dict]:
    shape = dict(type="line", xref="paper", x0=0, x1=1, yref="y", y0=y, y1=y, line=dict(color=color, dash=dash, width=1.5))
    note = dict(text=html.escape(label), xref="paper", x=1, xanchor="right", yref="y", y=y, yanchor="bottom",
                showarrow=False, font=dict(size=10, color=color))
    return shape, note


def _kaxis(rows: Sequence[Row]) -> dict:
    ks = _ks(rows)
    return dict(tickmode="array", tickvals=ks) if ks else {}


def _k_figure(rows: Sequence[Row], traces: list[dict], title: str, ytitle: str, refs: Sequence[tuple] = (),
              yaxis: dict | None = None) -> go.Figure:
    """Lines over k (a tick at each swept k, y from zero unless ``yaxis`` says otherwise), with a
    horizontal reference line for each ``(y, label[, dash])`` in ``refs``."""
    marks = [_hline(*ref) for ref in refs]
    return _figure(traces, title, "k (tokens drafted per step)", ytitle, shapes=[s for s, _ in marks],
                   annotations=[n for _, n in marks], xaxis=_kaxis(rows), yaxis=yaxis or dict(rangemode="tozero"))


# -- the figures ------------------------------------------------------------------------------


def latency_figure(rows: Sequence[Row]) -> go.Figure:
    """Milliseconds per generated token vs k, one line per proposer, target-only as a reference."""
    title = "Latency per token vs k"
    if not rows:
        return _empty(title)
    colors = _colors(rows)
    traces = [_line(rs, "ms_per_token", _name(p, i), colors[p], IMPL_DASH[i], ".1f") for p, i, rs in _series(rows)]
    traces += mark_traces(_series(rows), "ms_per_token")
    refs = []
    for impl, dash in (("specviz", "dash"), ("hf", "dot"), ("remote", "dash")):
        b = _baseline(rows, impl)
        if b and b.get("ms_per_token"):
            refs.append((b["ms_per_token"], f"target-only{' (hf)' if impl == 'hf' else ''} {b['ms_per_token']:.1f} ms", dash))
    return _k_figure(rows, traces, title, "ms per token", refs)


def _speedup_hover(r: Row) -> str:
    """The total beside the median, the interval, the verdict and the re-runs (speedup_figure's tooltip)."""
    out = ""
    if r.get("speedup_low") is not None and r.get("speedup_high") is not None:
        out += f"<br>90% interval {r['speedup_low']:.2f}-{r['speedup_high']:.2f}" + (f" ({r['verdict']})" if r.get("verdict") else "")
    if isinstance(r.get("speedup"), (int, float)):
        out += f"<br>total (tokens / seconds): {r['speedup']:.2f}"
    if r.get("reruns") or r.get("flagged_runs"):
        out += f"<br>stalled runs: {r.get('reruns') or 0} re-run, {r.get('flagged_runs') or 0} left out"
    if r["impl"] == "hf" and r.get("speedup_vs_specviz"):
        out += f"<br>vs specviz target-only: {r['speedup_vs_specviz']:.2f}"
    return out


def speedup_figure(rows: Sequence[Row]) -> go.Figure:
    """Speedup over target-only vs k (1.0 = no gain): the median of the per-prompt speedups with its
    90% interval as error bars where the rows have it (what the verdicts read; one stalled run
    cannot drag it across 1.0x), else the total."""
    title = "Speedup vs k (median over prompts)"
    if not _series(rows):
        return _empty(title)
    colors = _colors(rows)
    traces = [_measured_speedup(rs, _name(p, i), colors[p], IMPL_DASH[i]) for p, i, rs in _series(rows)]
    traces += mark_traces(_series(rows), _speedup_key)
    return _k_figure(rows, traces, title, "speedup (x)", [(1.0, "target-only = 1.0")])


def _speedup_key(rs: Sequence[Row]) -> str:
    """The median over prompts where every row of a series has it, else the total."""
    return "speedup_median" if all(isinstance(r.get("speedup_median"), (int, float)) for r in rs) else "speedup"


def _band(rs: Sequence[Row], key: str, color: str) -> dict | None:
    """Error bars for the median's 90% interval (over prompts and passes) on each point of ``rs``
    (those with a finite ``key``), or None unless ``key`` is the median and every point has its interval."""
    pts = [r for r in rs if isinstance(r.get(key), (int, float)) and math.isfinite(r[key])]
    if key != "speedup_median" or not all(r.get("speedup_low") is not None and r.get("speedup_high") is not None for r in pts):
        return None
    return dict(type="data", symmetric=False, array=[r["speedup_high"] - r[key] for r in pts],
                arrayminus=[r[key] - r["speedup_low"] for r in pts], color=color, thickness=1.2, width=4)


def _measured_speedup(rs: Sequence[Row], name: str, color: str, dash: str = "solid") -> dict:
    """A series' measured speedup over k: the median over prompts with its 90% interval where the
    rows have them (the statistic the readout ranks and the verdicts read), else the total. Every
    plot that shows a measured speedup draws it so: a point without its interval reads noise as shape."""
    key = _speedup_key(rs)
    trace = _line(rs, key, name, color, dash, extra=_speedup_hover)
    band = _band(rs, key, color)
    if band:
        trace["error_y"] = band
    return trace


def acceptance_rate_figure(rows: Sequence[Row]) -> go.Figure:
    """Acceptance rate a (accepted / drafted) vs k."""
    title = "Acceptance rate vs k"
    series = _series(rows, SPEC_IMPLS)
    if not series:
        return _empty(title)
    colors = _colors(rows)
    traces = [_line(rs, "acceptance_rate", p, colors[p]) for p, _, rs in series]
    return _k_figure(rows, traces, title, "acceptance rate a", yaxis=dict(range=[0, 1.05]))


def acceptance_length_figure(rows: Sequence[Row]) -> go.Figure:
    """Measured mean acceptance length (tokens per step) vs k, beside the theory's
    E = (1 - a^(k+1)) / (1 - a) for each point's measured a."""
    title = "Mean acceptance length vs k (measured vs theory)"
    series = _series(rows)
    if not series:
        return _empty(title)
    colors = _colors(rows)
    traces = []
    for p, impl, rs in series:
        traces.append(_line(rs, "mean_acceptance_length", _name(p, impl), colors[p], IMPL_DASH[impl]))
        if impl not in SPEC_IMPLS:
            continue
        th = [
            {"k": r["k"], "E": expected_tokens_per_step(r["acceptance_rate"], r["k"]), "a": r["acceptance_rate"]}
            for r in rs if r.get("acceptance_rate") is not None
        ]
        traces.append(dict(
            type="scatter", mode="lines+markers", name=f"{p}: theory E(a, k)", x=[t["k"] for t in th], y=[t["E"] for t in th],
            line=dict(color=colors[p], dash="dash", width=1.5), marker=dict(symbol="diamond-open", size=9, color=colors[p]),
            hovertext=[f"{html.escape(p)} theory<br>k={t['k']}, a={t['a']:.2f}: E = {t['E']:.2f}" for t in th], hoverinfo="text",
        ))
        if any(r.get("predicted_tau_positional") is not None for r in rs):  # rows from prediction.augment_rows
            traces.append(_line(rs, "predicted_tau_positional", f"{p}: from per-position acceptance", colors[p], "dot",
                                symbol="x-thin-open"))
    return _k_figure(rows, traces, title, "tokens per step", [(1.0, "target-only = 1 token/step")])


def predicted_speedup_figure(rows: Sequence[Row]) -> go.Figure:
    """Measured speedup beside the walltime speedup predicted from the measured a, c and v."""
    title = "Measured vs predicted speedup (from a, c, v)"
    series = _series(rows, ("specviz",))
    if not series:
        return _empty(title)
    colors = _colors(rows)
    traces = []
    for p, _, rs in series:
        traces.append(_measured_speedup(rs, f"{p} measured", colors[p]))
        # the per-position prediction (prediction.augment_rows) when the rows carry it, else the i.i.d. one
        positional = any(r.get("predicted_speedup_positional") is not None for r in rs)
        traces.append(_line(
            rs, "predicted_speedup_positional" if positional else "predicted_speedup",
            f"{p} predicted" + (" (per position)" if positional else ""), colors[p], "dash",
            extra=lambda r: f"<br>a={r['acceptance_rate']:.2f}, c={r['c']:.3f}, v={r['v']:.2f}" if r.get("c") is not None else "",
            symbol="diamond-open",
        ))
    traces += mark_traces(series, _speedup_key)
    return _k_figure(rows, traces, title, "speedup (x)", [(1.0, "no gain")])


def per_position_figure(rows: Sequence[Row]) -> go.Figure:
    """Per-position acceptance: P(draft i accepted | at least i drafted), one line per proposer x k."""
    title = "Acceptance by draft position"
    series = _series(rows, SPEC_IMPLS)
    if not any(r.get("per_position") for _, _, rs in series for r in rs):
        return _empty(title)
    colors = _colors(rows)
    traces = []
    for p, _, rs in series:
        n = len(rs)
        for j, r in enumerate(rs):
            pp = list(r.get("per_position") or [])
            if not pp:
                continue
            opacity = 0.35 + 0.65 * (j + 1) / n
            traces.append(dict(
                type="scatter", mode="lines+markers", name=f"{p} k={r['k']}", x=list(range(1, len(pp) + 1)), y=pp,
                line=dict(color=colors[p], width=1.5), marker=dict(size=6, color=colors[p]), opacity=opacity,
                legendgroup=p, hovertext=[f"{html.escape(p)} k={r['k']}<br>position {i}: {v:.2f}" for i, v in enumerate(pp, 1)],
                hoverinfo="text",
            ))
    width = max(len(t["x"]) for t in traces)
    return _figure(traces, title, "draft position i", "acceptance rate at i", yaxis=dict(range=[0, 1.05]),
                   xaxis=dict(tickmode="array", tickvals=list(range(1, width + 1))))


def category_figure(prompt_rows: Sequence[Row]) -> go.Figure:
    """Acceptance rate by prompt category, one bar per proposer x k (specviz runs, pooled)."""
    title = "Acceptance rate by prompt category"
    pooled: dict[tuple[str, int], dict[str, list[int]]] = {}
    cats: list[str] = []
    for r in prompt_rows:
        if r["impl"] not in SPEC_IMPLS or r["k"] == 0 or not r.get("drafted") or r.get("accepted") is None:
            continue
        if r["category"] not in cats:
            cats.append(r["category"])
        acc = pooled.setdefault((r["proposer"], r["k"]), {}).setdefault(r["category"], [0, 0])
        acc[0] += r["accepted"]
        acc[1] += r["drafted"]
    if not pooled:
        return _empty(title)
    names: list[str] = []
    for p, _ in pooled:
        if p not in names:
            names.append(p)
    colors = {n: PALETTE[i % len(PALETTE)] for i, n in enumerate(names)}
    ks_of = {p: sorted(k for q, k in pooled if q == p) for p in names}
    traces = []
    for (p, k), by_cat in sorted(pooled.items(), key=lambda kv: (names.index(kv[0][0]), kv[0][1])):
        xs = [c for c in cats if c in by_cat]
        ys = [by_cat[c][0] / by_cat[c][1] for c in xs]
        shade = 0.45 + 0.55 * (ks_of[p].index(k) + 1) / len(ks_of[p])
        traces.append(dict(
            type="bar", name=f"{p} k={k}", x=xs, y=ys, marker=dict(color=colors[p], opacity=shade), legendgroup=p,
            hovertext=[f"{html.escape(p)} k={k}<br>{html.escape(c)}: {y:.2f} ({by_cat[c][0]}/{by_cat[c][1]})" for c, y in zip(xs, ys)],
            hoverinfo="text",
        ))
    return _figure(traces, title, "prompt category", "acceptance rate", barmode="group", yaxis=dict(range=[0, 1.05]))


# -- trees beside chains: against nodes verified per step -------------------------------------


def _shape_series(rows: Sequence[Row]) -> list[tuple[str, list[Row]]]:
    """(series name, rows sorted by nodes/step): a chain proposer over its k; a tree proposer over
    its node budgets at each depth k ("ngram-tree:3 depth 4")."""
    groups: dict[str, list[Row]] = {}
    for r in rows:
        if r.get("kind", "summary") != "summary" or r["proposer"] == TARGET_ONLY or r.get("impl") != "specviz":
            continue
        if r.get("nodes_per_step") is None:
            continue
        if r.get("tree"):
            base = re.sub(r",?nodes=\d+", "", r["proposer"]).rstrip(":,")
            name = f"{base} depth {r['k']}"
        else:
            name = r["proposer"]
        groups.setdefault(name, []).append(r)
    return [(n, sorted(rs, key=lambda r: r["nodes_per_step"])) for n, rs in groups.items()]


Theory = tuple[str, str, Callable[[int], float]]  # (proposer, line name, n -> value)


def _shape_figure(rows: Sequence[Row], key: str, title: str, ytitle: str, theories: Sequence[Theory],
                  ref: tuple[float, str]) -> go.Figure:
    series = _shape_series(rows)
    if not series:
        return _empty(title, "No results yet: sweep chains and trees (e.g. ngram and ngram-tree)")
    names = []
    for n, _ in series:
        base = n.split(" depth ")[0]
        if base not in names:
            names.append(base)
    colors = {n: PALETTE[i % len(PALETTE)] for i, n in enumerate(names)}
    traces = []
    for name, rs in series:
        base = name.split(" depth ")[0]
        tree = " depth " in name
        at = _speedup_key(rs) if key == "speedup" else key  # a measured speedup: the median with its interval
        pts = [r for r in rs if isinstance(r.get(at), (int, float))]
        band = _band(pts, at, colors[base])
        traces.append(dict(
            type="scatter", mode="lines+markers", name=name, x=[r["nodes_per_step"] for r in pts], y=[r[at] for r in pts],
            **({"error_y": band} if band else {}),
            line=dict(color=colors[base], width=2, dash="solid" if not tree else "dashdot"),
            marker=dict(size=8, color=colors[base], symbol="triangle-up" if tree else "circle"),
            hovertext=[f"{html.escape(r['proposer'])} k={r['k']}<br>{r['nodes_per_step']:.2f} nodes/step: "
                       f"{html.escape(_label(at))} = {r[at]:.2f}" + (_speedup_hover(r) if key == "speedup" else "")
                       + (f"<br>per-position prediction {r['predicted_tau_positional']:.2f}" if key == "mean_acceptance_length"
                          and r.get("predicted_tau_positional") is not None else "") for r in pts],
            hoverinfo="text"))
    xmax = max((r["nodes_per_step"] for _, rs in series for r in rs), default=1.0)
    ns = list(range(1, max(2, int(math.ceil(xmax))) + 1))
    for proposer, name, theory in theories:  # one line per chain proposer, in its colour
        ys = [theory(n) for n in ns]
        traces.append(dict(type="scatter", mode="lines", name=name, x=ns, y=ys, meta="theory",
                           line=dict(color=colors.get(proposer, COLORS["muted"]), dash="dash", width=1.5),
                           hovertext=[f"{html.escape(name)}<br>n={n}: {y:.2f}" for n, y in zip(ns, ys)], hoverinfo="text"))
    shape, note = _hline(*ref)
    return _figure(traces, title, "nodes verified per step (chains: k)", ytitle, shapes=[shape], annotations=[note],
                   yaxis=dict(rangemode="tozero"))


def tree_tau_figure(rows: Sequence[Row]) -> go.Figure:
    """Tokens per step (tau) against nodes verified per step: chains over k, trees over their
    node budget, beside each chain proposer's theory E(a, n) at its own pooled a."""
    theories = [(p, f"{p}: chain theory E(a={a:.2f}, n)", lambda n, a=a: expected_tokens_per_step(a, n))
                for p, a, _, _ in chain_fits(rows)]
    return _shape_figure(rows, "mean_acceptance_length", "Tokens per step vs nodes verified (chains and trees)",
                         "tokens per step (tau)", theories, (1.0, "target-only = 1"))


def tree_speedup_figure(rows: Sequence[Row], curve: Sequence[Sequence[float]] | None = None) -> go.Figure:
    """Speedup against nodes verified per step, beside each chain proposer's theory
    E(a, n) / (n c + v(n+1)) from its own a and c, with v(n) this machine's measured verify curve
    when there is one (else that proposer's mean v)."""
    theories: list[Theory] = []
    vc = None
    if curve:
        from ..bench.verify_cost import v_at, verify_curve

        vc = verify_curve(curve)
    for p, a, c, v in chain_fits(rows):
        if vc:
            fn = lambda n, a=a, c=c: expected_tokens_per_step(a, n) / (n * c + (v_at(vc, n + 1) or vc[-1][1]))  # noqa: E731
            theories.append((p, f"{p}: theory, measured v(n): a={a:.2f}, c={c:.3f}", fn))
        elif v is not None:
            fn = lambda n, a=a, c=c, v=v: expected_tokens_per_step(a, n) / (n * c + v)  # noqa: E731
            theories.append((p, f"{p}: theory, v = {v:.2f} for every n: a={a:.2f}, c={c:.3f}", fn))
    return _shape_figure(rows, "speedup", "Speedup vs nodes verified (chains and trees)", "speedup (x)", theories,
                         (1.0, "target-only = 1.0"))


def verify_cost_figure(rows: Sequence[Row], curve: Sequence[Sequence[float]] | None = None,
                       floor: Sequence[Sequence[float]] | None = None) -> go.Figure:
    """This machine's verify cost v(n) = t(n) / t(1) for n positions, beside the paper's v = 1,
    with the theory's best k at each chain proposer's own measured a and c (when the rows have them), and, when
    given, the least v(n) this CPU allows ([(n, overlapped, one after the other)]: the weights read
    once and the products at the rate its BLAS reaches on n rows)."""
    title = "Verify cost v(n) = t(n) / t(1) on this machine"
    if not curve:
        return _empty(title, "No results yet: press “Measure verify cost” to time n = 1..17 positions")
    from ..bench.verify_cost import best_k_with_curve, verify_curve

    vc = verify_curve(curve)
    ms = dict((int(n), float(t)) for n, t in curve)
    traces = [
        dict(type="scatter", mode="lines+markers", name="measured v(n)", x=[n for n, _ in vc], y=[v for _, v in vc],
             line=dict(color=COLORS["verify_ms"], width=2), marker=dict(size=7, color=COLORS["verify_ms"]),
             hovertext=[f"n={n}: t = {ms[n]:.1f} ms, v = {v:.2f}" for n, v in vc], hoverinfo="text"),
        dict(type="scatter", mode="lines", name="paper's idealisation v = 1", x=[vc[0][0], vc[-1][0]], y=[1.0, 1.0],
             line=dict(color=COLORS["muted"], dash="dash", width=1.5), hoverinfo="skip"),
    ]
    for i, (name, dash) in enumerate((("least v(n) here: reading and products overlapped", "dot"),
                                      ("least v(n) here: one after the other", "dashdot")), start=1):
        if floor:
            traces.append(dict(type="scatter", mode="lines", name=name, x=[int(p[0]) for p in floor],
                               y=[float(p[i]) for p in floor], line=dict(color=COLORS["ink"], dash=dash, width=1.2),
                               hovertext=[f"n={int(p[0])}: v >= {float(p[i]):.2f}" for p in floor], hoverinfo="text"))
    notes = []
    for i, (p, a, c, _) in enumerate(chain_fits(rows)):  # each proposer's own a and c, never pooled
        best = best_k_with_curve(min(a, 0.999), c, vc)
        if best:
            notes.append(dict(text=html.escape(f"{p} (a={a:.2f}, c={c:.3f}): theory's best k = {best[0]} ({best[1]:.2f}x)"),
                              xref="paper", x=0.02, yref="paper", y=0.98 - 0.08 * i, showarrow=False, xanchor="left",
                              font=dict(size=11, color=COLORS["ink"])))
    return _figure(traces, title, "positions scored in one pass n (k drafts: n = k + 1)", "v(n) (target decode steps)",
                   annotations=notes, yaxis=dict(rangemode="tozero"))


# name -> (title for the page, builder, whether it takes per-prompt rows)
FIGURES: dict[str, tuple[str, Callable[[Sequence[Row]], go.Figure], bool]] = {
    "latency": ("Latency per token", latency_figure, False),
    "speedup": ("Speedup", speedup_figure, False),
    "acceptance_rate": ("Acceptance rate", acceptance_rate_figure, False),
    "acceptance_length": ("Mean acceptance length", acceptance_length_figure, False),
    "predicted": ("Measured vs predicted speedup", predicted_speedup_figure, False),
    "per_position": ("Per-position acceptance", per_position_figure, False),
    "category": ("Acceptance by category", category_figure, True),
    "tree_tau": ("Tokens per step vs nodes verified", tree_tau_figure, False),
    "tree_speedup": ("Speedup vs nodes verified", tree_speedup_figure, False),
    "verify_cost": ("Verify cost v(n)", verify_cost_figure, False),
}


def build_figures(report: Mapping[str, Any] | None) -> dict[str, go.Figure]:
    """Every figure of a report (``{"rows", "prompt_rows"[, "verify_cost", "verify_floor"]}``), keyed as in ``FIGURES``.
    Summary rows carry the per-position prediction; the tree speedup and verify-cost figures use
    the report's measured verify-cost curve when it has one."""
    rows = report_rows(report)
    prompt_rows = list((report or {}).get("prompt_rows") or [])
    curve = (report or {}).get("verify_cost") or None
    out = {}
    for name, (_, fn, per_prompt) in FIGURES.items():
        if name == "verify_cost":
            out[name] = fn(rows, curve, (report or {}).get("verify_floor") or None)
        elif name == "tree_speedup":
            out[name] = fn(rows, curve)
        else:
            out[name] = fn(prompt_rows if per_prompt else rows)
    return out


# -- the standalone page ----------------------------------------------------------------------


def report_html(report: Mapping[str, Any], include_plotlyjs: bool | str = True) -> str:
    """One self-contained HTML page: settings, every figure, the table and the readout
    (:func:`specviz.viz.bench_page.page_html`).

    ``include_plotlyjs=True`` inlines plotly.js (works offline, ~4 MB); "cdn" links it instead.
    """
    return page_html(report, build_figures(report), HEIGHT, include_plotlyjs)


def progress_html(done: int, total: int, label: str, kind: str = "info") -> str:
    """A progress bar and a one-line message (kind: info, ok, error)."""
    color = {"info": COLORS["p"], "ok": COLORS["accepted"], "error": COLORS["rejected"]}.get(kind, COLORS["p"])
    bar = ""
    if total:
        pct = 100.0 * done / total
        bar = (
            f'<div class="sv-bench-bar" role="progressbar" aria-valuenow="{done}" aria-valuemax="{total}" '
            f'style="height:8px;border-radius:4px;background:{COLORS["track"]};overflow:hidden;margin:4px 0">'
            f'<div style="width:{pct:.1f}%;height:100%;background:{color};transition:width .3s"></div></div>'
        )
    count = f" ({done}/{total} runs)" if total else ""
    return (
        f'<div class="sv-bench-progress" data-done="{done}" data-total="{total}" data-kind="{kind}">{bar}'
        f'<span style="color:{color if kind == "error" else "inherit"}">{html.escape(label)}{count}</span></div>'
    )
