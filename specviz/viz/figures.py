"""Plotly figures of a run: pure functions of StepRecords / Stats (no Gradio).

Figures are kept light (no template, small margins, a few traces, built as one dict) so the app
can redraw them after every step: Plotly's incremental update_* calls cost ~50 ms a figure, and
even validating the finished dict costs ~10 ms, a third of a Step's overhead on the server. So a
figure is *not* validated (``VALIDATE`` is False); the tests turn validation on and check that
both ways give the same JSON. The playground's per-step figures also skip the Figure object: each
has a ``.spec`` twin returning the plain dict (``topk_figure.spec(record)``), which the app
serializes itself. Colours come from :mod:`specviz.viz.theme`.
"""

from __future__ import annotations

import functools
import html
import textwrap
from typing import Callable, Sequence

import plotly.graph_objects as go
import plotly.io as pio
from plotly.io.json import to_json_plotly

from ..core.records import Stats, StepRecord, TopToken
from ..core.stepwords import StepCounts, step_counts
from .numbers import Reveal, fmt_pair, fmt_prob
from .theme import COLORS, FONT, KIND_LABELS
from .tokens import is_greedy, token_label

__all__ = [
    "acceptance_by_position_figure", "as_figure", "empty_figure", "figure_json", "timeline_figure", "tokens_per_step_figure", "topk_figure",
]

HEIGHT = 280
VALIDATE = False  # Plotly's property validation; the tests turn it on (tests/test_viz.py)
_NO_TEMPLATE = pio.templates["none"].to_plotly_json()  # what template="none" becomes once validated
_BR = '<br><span style="font-size:11.5px">'  # the chart title's second, smaller line


# A legend at the foot of the figure (under the x axis), for the narrow charts whose legend wraps
# onto two rows: one placed above the plot grows upward into the title on a phone.
LEGEND_BELOW = dict(orientation="h", x=0, xanchor="left", yref="container", y=0.0, yanchor="bottom", font=dict(size=10),
                    bgcolor="rgba(0,0,0,0)")
MARGIN_BELOW = 96  # the bottom margin that leaves room for the tick labels, the axis title and two legend rows
TICK_ANGLES = (0, 30, 60, 90)  # the top-10 chart's token labels: the first of these angles at which none overlap


def _axis(**kw) -> dict:
    base = dict(showgrid=False, zeroline=False, linecolor=COLORS["grid"], ticks="", automargin=True)
    base.update(kw)
    return base


def _spec(traces: list[dict], title: str, *, height: int = HEIGHT, xaxis: dict | None = None,
          yaxis: dict | None = None, margin: dict | None = None, annotations: list[dict] | None = None,
          **layout_kw) -> dict:
    """One figure as a plain dict ({"data": traces, "layout": ...}), in the app's house style."""
    layout = dict(
        template=_NO_TEMPLATE,
        title=dict(text=title, x=0.01, xanchor="left", y=0.97, yanchor="top", font=dict(size=13, color=COLORS["ink"])),
        height=height,
        margin=dict(l=48, r=16, t=64, b=48) | (margin or {}),
        font=dict(family=FONT, size=11, color=COLORS["ink"]),
        paper_bgcolor="rgba(0,0,0,0)",
        plot_bgcolor="rgba(0,0,0,0)",
        legend=dict(orientation="h", x=0, xanchor="left", y=1.0, yanchor="bottom", font=dict(size=10),
                    bgcolor="rgba(0,0,0,0)"),
        hoverlabel=dict(font=dict(family=FONT, size=11)),
        xaxis=_axis(**(xaxis or {})),
        yaxis=_axis(showgrid=True, gridcolor=COLORS["grid"], **(yaxis or {})),
    )
    if annotations:
        layout["annotations"] = annotations
    layout.update(layout_kw)
    return dict(data=traces, layout=layout)


def as_figure(spec: dict) -> go.Figure:
    """A figure spec (a plain dict) as a Plotly Figure."""
    return go.Figure(spec, _validate=VALIDATE)


def figure_json(spec: dict) -> str:
    """A figure spec as the JSON ``as_figure(spec).to_json()`` gives, without building the Figure."""
    return to_json_plotly(spec)


def _figure(traces: list[dict], title: str, **kw) -> go.Figure:
    """One Figure from plain dicts, in the app's house style (see :func:`_spec`)."""
    return as_figure(_spec(traces, title, **kw))


def _with_spec(build: Callable[..., dict]) -> Callable[..., go.Figure]:
    """A figure function from a spec builder: ``f(...)`` returns a Figure and ``f.spec(...)`` the
    same figure as a plain dict, for a caller that only serializes it (the playground, after every
    step: building a Figure object costs 1–2 ms a figure, serializing the dict a tenth of that)."""

    @functools.wraps(build)
    def figure(*args, **kw) -> go.Figure:
        return as_figure(build(*args, **kw))

    figure.__annotations__ = {**build.__annotations__, "return": go.Figure}
    figure.spec = build  # type: ignore[attr-defined]
    return figure


EMPTY_LINE_CHARS = 40  # an empty figure's note, in lines a phone's plot holds (about 280 px at 12 px type)


@_with_spec
def empty_figure(title: str, message: str = "No steps yet") -> dict:
    """A figure with nothing to plot yet: its title and a centred note, broken into short lines
    (one long line ran off both sides of a phone's plot)."""
    lines = textwrap.wrap(message, EMPTY_LINE_CHARS, break_long_words=False) or [message]
    note = dict(text="<br>".join(html.escape(line) for line in lines), x=0.5, y=0.5, xref="paper", yref="paper",
                showarrow=False, font=dict(size=12, color=COLORS["muted"]))
    return _spec([], title, xaxis=dict(visible=False), yaxis=dict(visible=False), annotations=[note])


def _axis_label(text: str) -> str:
    """A token as a chart label: whitespace visible and escaped, since Plotly reads some HTML."""
    return html.escape(token_label(text), quote=False)


def _xlabel(text: str) -> dict:
    return dict(text=text, font=dict(size=10))


# -- the step inspector chart ------------------------------------------------------------------


@_with_spec
def topk_figure(record: StepRecord | None, position: int | None = None, shown: Reveal | None = None) -> dict:
    """Grouped bars of the top-10 tokens of p (target) and q (draft) at one position of a step.

    At the rejected position it also shows the residual norm(max(0, p − q)) and marks the token
    sampled from it; at the bonus position (all drafts accepted) it shows p and the bonus token.
    Point-mass proposers (n-gram) have q = 1 on the drafted token. ``position`` is 0-based
    (0..k-1 the drafts, k the bonus position); None means where the step was decided.
    ``shown`` (:func:`specviz.viz.numbers.reveal`): a phase before commit: q only until verify,
    no verdict before its decide frame, no residual or sampled token before commit.
    """
    title = "Top-10 of p and q"
    if record is None:
        return empty_figure.spec(title, "Run a step to see its distributions")
    n, k = record.n_accepted, record.k
    pos = n if position is None else max(0, min(int(position), k if n == k else k - 1))
    if shown is not None and record.tree and shown.judged == 0:  # which node is on the path is not known yet
        return empty_figure.spec(f"Step {record.index + 1}: {len(record.tree)} tree nodes",
                                 "The decide phase walks the tree: its nodes' charts appear as they are judged")
    if shown is not None:
        pos = max(0, min(pos if position is not None else shown.judged - 1, k - 1))
    greedy = is_greedy(record)

    p_top: Sequence[TopToken]
    q_top: Sequence[TopToken] = ()
    residual: Sequence[TopToken] = ()
    exact_p: dict[int, float] = {}
    exact_q: dict[int, float] = {}
    drafted: tuple[int, str] | None = None
    sampled: tuple[int, str] | None = None
    if pos < k:
        d = record.drafts[pos]
        p_top = d.top_p
        q_top = d.top_q or ((d.token_id, d.text, 1.0),)  # point mass on the drafted token
        exact_p[d.token_id], exact_q[d.token_id] = d.p, d.q
        drafted = (d.token_id, d.text)
        if d.verdict == "rejected":
            residual = record.top_residual
            sampled = (record.next_token_id, record.next_token_text)
            exact_p[record.next_token_id] = record.next_p
        verdict = {"accepted": "accepted", "rejected": "rejected", "discarded": "discarded (never judged)"}[d.verdict]
        if greedy and d.verdict != "discarded":
            why = " (= argmax p)" if d.accepted else " (≠ argmax p)"
        elif d.u is not None:
            su, sr = fmt_pair(d.u, d.ratio)
            why = f": u {su} {'≤' if d.accepted else '>'} min(1, p/q) {sr}"
        else:
            why = ""
        title = f"Step {record.index + 1} · position {pos + 1}{_BR}draft “{_axis_label(d.text)}” {verdict}{why}</span>"
        if shown is not None:
            residual, sampled = (), None  # the correction is drawn at commit
            exact_p.pop(record.next_token_id, None)
            if not shown.p:
                p_top, exact_p = (), {}
                title = (f"Step {record.index + 1} · position {pos + 1}{_BR}draft “{_axis_label(d.text)}”: "
                         f"q = {fmt_prob(d.q)}; not scored yet</span>")  # short: a phone holds one line
            elif pos >= shown.judged:
                exact_p[d.token_id] = d.p
                title = (f"Step {record.index + 1} · position {pos + 1}{_BR}draft “{_axis_label(d.text)}”: "
                         f"q = {fmt_prob(d.q)}, p = {fmt_prob(d.p)}; not judged yet</span>")
            else:
                exact_p[d.token_id] = d.p
    else:
        p_top = record.top_next
        sampled = (record.next_token_id, record.next_token_text)
        exact_p[record.next_token_id] = record.next_p
        kind = "bonus token" if record.k else "target-only token"
        title = f"Step {record.index + 1} · position {pos + 1}{_BR}{kind} “{_axis_label(record.next_token_text)}” from p</span>"

    p_map = {t: v for t, _s, v in p_top} | exact_p
    q_map = {t: v for t, _s, v in q_top} | exact_q
    r_map = {t: v for t, _s, v in residual}
    texts = {t: s for t, s, _v in (*p_top, *q_top, *residual)}
    forced = [x for x in (drafted, sampled) if x is not None]
    for t, s in forced:
        texts.setdefault(t, s)

    def score(t: int) -> float:
        return max(p_map.get(t, 0.0), q_map.get(t, 0.0), r_map.get(t, 0.0))

    ids = sorted(texts, key=score, reverse=True)[:12]
    for t, _s in forced:
        if t not in ids:
            ids.append(t)
    labels, seen = [], set()  # unique axis labels: two ids can render the same
    for t in ids:
        lab = _axis_label(texts[t])
        if lab in seen:
            lab = f"{lab} #{t}"
        seen.add(lab)
        labels.append(lab)

    def bars(name: str, what: str, values: dict[int, float], color: str) -> dict:
        ys = [values.get(t) for t in ids]  # hover text from viz.numbers: 4.12e-4, never 0.000
        return dict(type="bar", name=name, x=labels, y=ys, marker=dict(color=color), customdata=[fmt_prob(y) for y in ys],
                    offsetgroup=what, hovertemplate=f"%{{x}}<br>{what} = %{{customdata}}<extra></extra>")

    point_mass = pos < k and not record.drafts[pos].top_q
    if point_mass:  # an n-gram's q: 1 on its token and exactly 0 on every other, not "unknown"
        q_map = {t: q_map.get(t, 0.0) for t in ids}
    # the residual is exactly 0 wherever p <= q (both known); elsewhere a token outside its top list is unknown
    r_map = {**{t: 0.0 for t in ids if t in p_map and t in q_map and p_map[t] <= q_map[t]}, **r_map} if residual else r_map
    series = [("p (target)", "p", p_map, COLORS["p"])] if shown is None or shown.p else []
    if pos < k:
        series.append(("q (point mass)" if point_mass else "q (draft)", "q", q_map, COLORS["q"]))
    if residual:
        series.append(("residual norm(max(0, p − q))", "residual", r_map, COLORS["residual"]))
    traces = [bars(*one) for one in series]
    ymax = max([score(t) for t in ids] + [0.05])
    traces += absent_bars(labels, ids, series, ymax)
    if drafted is not None:
        # A marker TRACE, not an annotation: Plotly places an annotation's x on a category axis with
        # r2c, which reads a number-like label ("9") as a category INDEX (the 10th bar); a trace's x
        # is looked up by its label. So a drafted "9" is marked over the bar "9", not over bar #9.
        # Its words lean inward at either end: centred over the first bar they reached over the y axis's
        # tick labels on a phone (issue 52: "drafted x" across "100%" at 390 px)
        i = ids.index(drafted[0])
        lean = "top right" if i == 0 and len(ids) > 1 else "top left" if i == len(ids) - 1 and i > 0 else "top center"
        traces.append(dict(type="scatter", x=[labels[i]], y=[score(drafted[0]) + ymax * 0.03], mode="markers+text",
                           name="drafted x", showlegend=False, text=["drafted x"], textposition=lean,
                           textfont=dict(size=10, color=COLORS["q"]), cliponaxis=False,
                           marker=dict(symbol="triangle-down", size=9, color=COLORS["q"]),
                           hovertemplate="drafted x = %{x}<extra></extra>"))
    if sampled is not None:
        i = ids.index(sampled[0])
        color = COLORS[record.next_kind]
        name = {"resampled": "resampled", "bonus": "bonus", "target": "sampled"}[record.next_kind]
        y = max(p_map.get(sampled[0], 0.0), r_map.get(sampled[0], 0.0)) + ymax * 0.07
        traces.append(dict(type="scatter", x=[labels[i]], y=[y], mode="markers", name=f"{name} token",
                           marker=dict(symbol="star", size=13, color=color, line=dict(width=1, color="white")),
                           hovertemplate=f"{name}: %{{x}}<extra></extra>"))
    return _spec(
        traces, title, height=320, barmode="group", bargap=0.25, bargroupgap=0.05, margin=dict(t=96),
        # "3" is a token, not a number: a category axis in the bars' own order. The labels turn only as far as
        # they must not to overlap (Plotly measures them at the drawn width): level on a wide chart, up to
        # upright on a phone, where a fixed -35 degrees laid the top-10 tokens over each other at 390 px
        xaxis=dict(type="category", categoryorder="array", categoryarray=labels,  # tickangle unset: "auto"
                   autotickangles=list(TICK_ANGLES), tickfont=dict(size=11)),
        yaxis=dict(range=[0, ymax * 1.22], tickformat=".0%" if ymax > 0.2 else ".2f"),
    )


def absent_bars(labels: list[str], ids: list[int], series: list[tuple[str, str, dict, str]], ymax: float) -> list[dict]:
    """A hatched stub, in its series' slot, for each token outside that series' top list: its value
    is not recorded (smaller than the list's last), which an empty slot would show as 0 (issue 52:
    p = None for a drafted token, a residual-only token with neither bar). One legend entry."""
    out, stub = [], ymax * 0.06
    for name, what, values, color in series:
        ys = [None if t in values else stub for t in ids]
        if all(y is None for y in ys):
            continue
        out.append(dict(type="bar", name="not in this top list", x=labels, y=ys, offsetgroup=what,
                        legendgroup="absent", showlegend=not out, meta=what,
                        marker=dict(color="rgba(0,0,0,0)", line=dict(color=color, width=1),
                                    pattern=dict(shape="/", fgcolor=color, size=5)),
                        hovertemplate=f"%{{x}}<br>{what}: not in this top list (below its last entry)<extra></extra>"))
    return out


# -- run plots ---------------------------------------------------------------------------------


@_with_spec
def acceptance_by_position_figure(stats: Stats | None, counts: StepCounts | None = None, lossy: bool = False) -> dict:
    """Acceptance rate per draft position i (steps with draft i accepted / steps with >= i drafts).
    ``counts`` (:func:`specviz.core.stepwords.run_counts` of the run) words a token-tree run: its
    positions are depths and the overall line is the accepted path over the depth."""
    tree = counts is not None and counts.tree and counts.depth > 0
    title = "Acceptance rate by tree depth" if tree else "Acceptance rate by draft position"
    if stats is None or not stats.per_position:
        return empty_figure.spec(title, "No drafts yet")
    if lossy:  # typical acceptance: these rates are the LOSSY rule's
        title += " · LOSSY"
    overall, name = stats.acceptance_rate, f"overall {stats.acceptance_rate:.0%}"
    if tree:
        overall = counts.rate
        name = f"overall {overall:.0%} (path / depth)"
        title += f"{_BR}accepted path / depth {overall:.0%}; over the {counts.nodes_drafted} nodes drafted: {counts.rate_over_nodes:.0%}</span>"
    xs = list(range(1, len(stats.per_position) + 1))
    traces = [
        dict(type="bar", x=xs, y=list(stats.per_position), marker=dict(color=COLORS["accepted"]), name="per position",
             text=[f"{v:.0%}" for v in stats.per_position], textposition="outside", cliponaxis=False,
             hovertemplate="position %{x}<br>accepted in %{y:.0%} of the steps that drafted it<extra></extra>"),
        dict(type="scatter", x=[0.5, len(xs) + 0.5], y=[overall] * 2, mode="lines",
             name=name, line=dict(color=COLORS["muted"], dash="dash", width=1.5),
             hoverinfo="skip"),
    ]
    return _spec(traces, title, yaxis=dict(range=[0, 1.15], tickformat=".0%"),
                   xaxis=dict(title=_xlabel("depth" if tree else "draft position"), dtick=1, range=[0.4, len(xs) + 0.6]),
                   margin=dict(t=80) if tree else None)


def _step_axis(n: int) -> dict:
    """The x axis of a per-step chart: whole steps only (one step drew ticks at 0.5 and 1.5, over
    the y axis' 0 on a phone), at most about 8 of them, on a round spacing."""
    dtick = next(d for d in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 10**9) if d * 8 >= n)
    return dict(title=_xlabel("step"), dtick=dtick, tick0=1 if dtick == 1 else 0)


@_with_spec
def timeline_figure(steps: Sequence[StepRecord]) -> dict:
    """Per-step time as stacked bars (draft, verify, other ms), with the k of each step."""
    title = "Time per step (ms)"
    if not steps:
        return empty_figure.spec(title)
    xs = [s.index + 1 for s in steps]
    counts = [step_counts(s) for s in steps]  # a tree drafts nodes: the vocabulary of core.stepwords
    tree = any(c.tree for c in counts)
    drafted = [c.nodes_drafted for c in counts]
    custom = [[c.nodes_drafted, c.path_accepted, s.n_committed] for s, c in zip(steps, counts)]
    what = "nodes drafted" if tree else "k"
    hover = (f"step %{{x}}<br>%{{fullData.name}}: %{{y:.1f}} ms<br>{what} = %{{customdata[0]}}, accepted %{{customdata[1]}}, "
             "committed %{customdata[2]}<extra></extra>")
    traces = [
        dict(type="bar", x=xs, y=[round(getattr(s, key), 2) for s in steps], name=name, marker=dict(color=COLORS[key]),
             customdata=custom, hovertemplate=hover)
        for key, name in (("draft_ms", "draft"), ("verify_ms", "verify"), ("other_ms", "other"))
    ]
    traces.append(dict(type="scatter", x=xs, y=drafted, name="nodes drafted" if tree else "k (drafted)", yaxis="y2",
                       mode="lines+markers", line=dict(color=COLORS["muted"], width=1, shape="hv"), marker=dict(size=4),
                       hovertemplate=f"step %{{x}}: {what} = %{{y}}<extra></extra>"))
    kmax = max(max(drafted), 1)
    return _spec(
        traces, title, height=HEIGHT + 40, barmode="stack", bargap=0.15, margin=dict(r=32, t=40, b=MARGIN_BELOW),
        legend=LEGEND_BELOW, xaxis=_step_axis(len(steps)),
        yaxis2=dict(overlaying="y", side="right", range=[0, kmax * 1.6], showgrid=False, zeroline=False,
                    tickfont=dict(size=9, color=COLORS["muted"]), dtick=max(1, kmax // 4)),
    )


@_with_spec
def tokens_per_step_figure(steps: Sequence[StepRecord]) -> dict:
    """Tokens committed per step: the accepted drafts plus the correction / bonus token."""
    title = "Tokens committed per step"
    if not steps:
        return empty_figure.spec(title)
    xs = [s.index + 1 for s in steps]
    traces = [dict(type="bar", x=xs, y=[min(s.n_accepted, s.n_committed) for s in steps], name="accepted",
                   marker=dict(color=COLORS["accepted"]), hovertemplate="step %{x}: %{y} accepted<extra></extra>")]
    names = {"resampled": "resampled", "bonus": "bonus", "target": "target"}
    for kind, name in names.items():
        ys = [1 if (s.next_kind == kind and s.n_committed > s.n_accepted) else 0 for s in steps]
        if any(ys):
            traces.append(dict(type="bar", x=xs, y=ys, name=name, marker=dict(color=COLORS[kind]),
                               hovertemplate=f"step %{{x}}: + {KIND_LABELS[kind]}<extra></extra>"))
    depth = [step_counts(s).depth for s in steps]  # a tree commits at most its depth + 1
    traces.append(dict(type="scatter", x=xs, y=[d + 1 for d in depth], name="depth + 1" if any(s.tree for s in steps) else "k + 1",
                       mode="markers", marker=dict(symbol="line-ew", size=9, line=dict(width=1.5, color=COLORS["muted"])),
                       hovertemplate="step %{x}: at most %{y}<extra></extra>"))
    tau = sum(s.n_committed for s in steps) / len(steps)
    kmax = max(depth)
    lossy = " · LOSSY" if any(s.rule == "typical" for s in steps) else ""  # typical acceptance's tokens
    return _spec(traces, f"{title} · τ = {tau:.2f}{lossy}", height=HEIGHT + 40, barmode="stack", bargap=0.15,
                 margin=dict(t=40, b=MARGIN_BELOW), legend=LEGEND_BELOW, xaxis=_step_axis(len(steps)),
                 yaxis=dict(dtick=1 if kmax <= 8 else 2, rangemode="tozero"))
