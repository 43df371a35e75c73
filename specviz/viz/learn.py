"""Plotly figures for the Learn tab: pure functions of tensors and numbers (no Gradio).

Colours follow :mod:`specviz.viz.theme`, so p, q and the residual look as in the playground:
indigo = the target's p, teal = the draft's q, amber = the residual norm(max(0, p − q)),
green = the acceptance chance / the exact rule's samples, red = a rule that misses p,
slate = sampling from the target alone.
"""

from __future__ import annotations

import html
from typing import Sequence

import plotly.graph_objects as go
import torch

from ..analysis.theory import speedup_curve
from ..core.algorithm import acceptance_ratio, residual_distribution, typical_threshold
from ..core.bounds import LEARN_CURVE_MAX_K
from ..learn.chain import RULES, MeasuredRun, RuleExperiment
from ..learn.hardware import HardwareLesson
from .figures import _figure as house_figure
from .numbers import fmt_prob
from .theme import COLORS
from .tokens import message_html, token_label

__all__ = ["comparison_figure", "hardware_figure", "histogram_figure", "rule_figure", "speedup_figure", "unique_labels"]

HEIGHT = 320


def _figure(traces: list[dict], title: str, *, height: int = HEIGHT, xaxis: dict | None = None,
            yaxis: dict | None = None, annotations: list[dict] | None = None, shapes: list[dict] | None = None,
            **layout_kw) -> go.Figure:
    """The playground's house-style figure, with room for the Learn tab's side axis and shapes."""
    return house_figure(traces, title, height=height, xaxis=xaxis, yaxis=yaxis, margin=dict(l=52, r=52, t=80),
                        annotations=annotations, shapes=shapes or [], **layout_kw)


def _label(text: str) -> str:
    """A token as a chart label: whitespace visible, HTML escaped (Plotly reads some HTML)."""
    return html.escape(token_label(text), quote=False)


def unique_labels(texts: Sequence[str], ids: Sequence[int] | None = None) -> list[str]:
    """Chart labels for tokens; two tokens that render alike get their id (or position) appended."""
    out, seen = [], set()
    for i, t in enumerate(texts):
        lab = _label(t)
        if lab in seen:
            lab = f"{lab} #{ids[i] if ids is not None else i + 1}"
        seen.add(lab)
        out.append(lab)
    return out


def _hover(ys: Sequence[float], what: str) -> dict:
    """Hover text through viz.numbers (4.12e-4, never 0.000) for a trace of probabilities."""
    return dict(customdata=[fmt_prob(y) for y in ys], hovertemplate="%{x}<br>" + what + " = %{customdata}<extra></extra>")


def _vals(t: torch.Tensor) -> list[float]:
    return [float(v) for v in t.double()]


# -- part 1: the rule on a toy vocabulary -------------------------------------------------------


def rule_figure(tokens: Sequence[str], p: torch.Tensor, q: torch.Tensor, rule: str = "exact", *,
                eps: float | None = None, delta: float | None = None) -> go.Figure:
    """p, q and the residual norm(max(0, p − q)) as bars, and per token the chance a drafted x is
    kept as green markers (right axis): min(1, p/q), or for typical acceptance (LOSSY) 1 above its
    threshold min(eps, δ·exp(−H(p))) (a dashed line) and 0 below."""
    labels = unique_labels(tokens)
    typical = rule == "typical" and eps is not None and delta is not None
    residual = torch.clamp(p - q, min=0.0)
    residual = residual_distribution(p, q) if float(residual.sum()) > 0 else torch.zeros_like(p)
    traces = [
        dict(type="bar", name="p (target)", x=labels, y=_vals(p), marker=dict(color=COLORS["p"]), **_hover(_vals(p), "p")),
        dict(type="bar", name="q (draft)", x=labels, y=_vals(q), marker=dict(color=COLORS["q"]), **_hover(_vals(q), "q")),
    ]
    if not typical:
        traces.append(dict(type="bar", name="residual norm(max(0, p − q))", x=labels, y=_vals(residual),
                           marker=dict(color=COLORS["residual"]), **_hover(_vals(residual), "residual")))
    shapes = []
    if typical:
        thr = float(typical_threshold(p, eps, delta))
        keep = (p > thr).to(p.dtype)
        kept = float((q * keep).sum())
        name, what = "kept if p(x) > threshold (LOSSY)", "kept"
        shapes.append(dict(type="line", xref="paper", x0=0, x1=1, yref="y", y0=thr, y1=thr,
                           line=dict(color=COLORS["rejected"], dash="dash", width=1.5)))
        traces.append(dict(type="scatter", mode="lines", x=[None], y=[None], name=f"typical threshold {thr:.3f}",
                           line=dict(color=COLORS["rejected"], dash="dash", width=1.5), hoverinfo="skip"))
        title = f"Typical acceptance (LOSSY) keeps a draft x when p(x) > {thr:.3f} · kept {kept:.0%} of drafts; else argmax p"
    else:
        keep = acceptance_ratio(p, q)  # [V]
        kept = float((q * keep).sum())
        name, what = "min(1, p/q): chance a drafted x is kept", "min(1, p/q)"
        title = f"Target p, draft q and the residual · a draft is accepted with chance β = Σ min(p, q) = {kept:.2f}"
    traces.append(dict(
        type="scatter", mode="markers+text", name=name, x=labels, y=_vals(keep), yaxis="y2",
        text=[f"{float(r):.2f}" if float(r) >= 0.01 or r == 0 else fmt_prob(float(r)) for r in keep],  # never "0.00"
        textposition="top center", cliponaxis=False,
        textfont=dict(size=10, color=COLORS["ink"]),
        marker=dict(symbol="diamond", size=9, color=COLORS["accepted"], line=dict(width=1, color="white")),
        **_hover(_vals(keep), what)))
    ymax = max(_vals(p) + _vals(q) + ([] if typical else _vals(residual)) + [0.05])
    return _figure(
        traces, title, barmode="group", bargap=0.25, bargroupgap=0.05,
        xaxis=dict(type="category", tickfont=dict(size=12)),  # "3" is a token, not a number
        yaxis=dict(range=[0, ymax * 1.15], title=dict(text="probability", font=dict(size=10)), tickformat=".0%"),
        yaxis2=dict(range=[0, 1.18], overlaying="y", side="right", showgrid=False, zeroline=False, tickformat=".0%",
                    title=dict(text="kept", font=dict(size=10, color=COLORS["accepted"])),
                    tickfont=dict(color=COLORS["accepted"])),
        shapes=shapes,
    )


def histogram_figure(exp: RuleExperiment) -> go.Figure:
    """The sampled histogram (bars) against the target p (indigo ticks) and what the rule gives in
    theory (hollow diamonds)."""
    labels = unique_labels(exp.tokens)
    good = exp.rule == "exact"
    bar_color = COLORS["accepted"] if good else COLORS["rejected"]
    lossy = " (LOSSY)" if exp.rule == "typical" else ""
    name = RULES[exp.rule].split(":")[0] if exp.rule == "exact" else RULES[exp.rule]
    freq = _vals(exp.freq)
    traces = [
        dict(type="bar", name=f"{exp.n:,} samples, rule: {name}", x=labels, y=freq,
             marker=dict(color=bar_color, opacity=0.85), customdata=[[f"{int(c):,}", fmt_prob(f)] for c, f in zip(exp.counts, freq)],
             hovertemplate="%{x}<br>sampled %{customdata[1]} (%{customdata[0]} times)<extra></extra>"),
        dict(type="scatter", mode="markers", name="target p", x=labels, y=_vals(exp.p),
             marker=dict(symbol="line-ew", size=34, color=COLORS["p"], line=dict(width=3, color=COLORS["p"])),
             **_hover(_vals(exp.p), "p")),
        dict(type="scatter", mode="markers", name=f"this rule in theory{lossy}", x=labels, y=_vals(exp.expected),
             marker=dict(symbol="diamond-open", size=10, color=COLORS["ink"], line=dict(width=1.5)),
             **_hover(_vals(exp.expected), "in theory")),
    ]
    verdict = "matches p" if exp.matches else "misses p"
    title = f"Sampled histogram vs p · TV {exp.tv:.3f} · {verdict}{lossy}"
    ymax = max(freq + _vals(exp.p) + _vals(exp.expected) + [0.05])
    return _figure(traces, title, xaxis=dict(type="category", tickfont=dict(size=12)),
                   yaxis=dict(range=[0, ymax * 1.15], tickformat=".0%", title=dict(text="share of samples", font=dict(size=10))))


# -- part 2: a real model's next token ---------------------------------------------------------


def comparison_figure(labels: Sequence[str], p: Sequence[float], q: Sequence[float], spec: Sequence[float],
                      plain: Sequence[float], *, n: int, tv_spec: float, tv_plain: float, q_name: str = "q (draft)",
                      rule: str = "exact") -> go.Figure:
    """Grouped bars over the shown next tokens: p, q, N samples with speculation (``rule``), N without."""
    how = "with speculation, typical acceptance (LOSSY)" if rule == "typical" else "with speculation"
    if not labels:
        return empty_learn_figure("Next-token histograms", "Press Sample to compare")
    def trace(name, ys, color, what, **kw):
        return dict(type="bar", name=name, x=list(labels), y=list(ys), marker=dict(color=color, **kw),
                    **_hover([float(y) for y in ys], what))
    traces = [
        trace("p (target)", p, COLORS["p"], "p"),
        trace(q_name, q, COLORS["q"], "q", opacity=0.55),
        trace(f"{how} ({n:,} samples)", spec, COLORS["accepted" if rule == "exact" else "rejected"], how),
        trace(f"without speculation ({n:,} samples)", plain, COLORS["target"], "without speculation"),
    ]
    ymax = max(list(p) + list(q) + list(spec) + list(plain) + [0.05])
    title = f"Next token: {how} TV {tv_spec:.3f} from p · without TV {tv_plain:.3f}"
    return _figure(traces, title, barmode="group", bargap=0.2, bargroupgap=0.04,
                   xaxis=dict(type="category", tickangle=-35, tickfont=dict(size=11)),
                   yaxis=dict(range=[0, ymax * 1.12], tickformat=".0%" if ymax > 0.2 else ".2f"))


def empty_learn_figure(title: str, message: str) -> go.Figure:
    note = dict(text=html.escape(message), x=0.5, y=0.5, xref="paper", yref="paper", showarrow=False,
                font=dict(size=12, color=COLORS["muted"]))
    return _figure([], title, height=260, xaxis=dict(visible=False), yaxis=dict(visible=False), annotations=[note])


# -- part 3: the expected-speedup calculator ---------------------------------------------------


def speedup_figure(a: float, c: float, v: float, k: int, runs: Sequence[MeasuredRun] = (), k_max: int = LEARN_CURVE_MAX_K) -> go.Figure:
    """Expected speedup vs k for a, c, v (line), the chosen k and the best k marked, E[tokens/step]
    dotted on the right axis, break-even at 1×, and measured runs as amber points."""
    k_max = max(int(k_max), int(k), *(r.k for r in runs)) if runs else max(int(k_max), int(k))
    curve = speedup_curve(a, c, v, k_max)
    ks = [t[0] for t in curve]
    es = [t[1] for t in curve]
    ss = [t[2] for t in curve]
    kb = max(curve, key=lambda t: (t[2], -t[0]))
    cur = curve[int(k) - 1]
    traces = [
        dict(type="scatter", mode="lines+markers", name="expected speedup", x=ks, y=ss,
             line=dict(color=COLORS["p"], width=2.5), marker=dict(size=5, color=COLORS["p"]),
             customdata=es, hovertemplate="k = %{x}<br>speedup %{y:.2f}×<br>E[tokens/step] %{customdata:.2f}<extra></extra>"),
        dict(type="scatter", mode="lines", name="E[tokens/step] (right axis)", x=ks, y=es, yaxis="y2",
             line=dict(color=COLORS["muted"], width=1.5, dash="dot"),
             hovertemplate="k = %{x}<br>E[tokens/step] %{y:.2f}<extra></extra>"),
        dict(type="scatter", mode="markers", name=f"best k = {kb[0]} ({kb[2]:.2f}×)", x=[kb[0]], y=[kb[2]],
             marker=dict(symbol="star", size=16, color=COLORS["bonus"], line=dict(width=1, color="white")),
             hovertemplate="best k = %{x}<br>%{y:.2f}×<extra></extra>"),
        dict(type="scatter", mode="markers", name=f"your k = {cur[0]} ({cur[2]:.2f}×)", x=[cur[0]], y=[cur[2]],
             marker=dict(symbol="circle-open", size=15, color=COLORS["ink"], line=dict(width=2)),
             hovertemplate="your k = %{x}<br>%{y:.2f}×<extra></extra>"),
    ]
    if runs:
        traces.append(dict(
            type="scatter", mode="markers", name="your measured runs", x=[r.k for r in runs], y=[r.speedup for r in runs],
            marker=dict(symbol="diamond", size=11, color=COLORS["resampled"], line=dict(width=1, color="white")),
            customdata=[[r.a, html.escape(r.label or "run")] for r in runs],
            hovertemplate="%{customdata[1]}<br>k = %{x}, a = %{customdata[0]:.2f}<br>measured %{y:.2f}×<extra></extra>",
        ))
    ys = ss + [r.speedup for r in runs] + [1.0]
    ymax = max(ys) * 1.15
    shapes = [dict(type="line", xref="paper", x0=0, x1=1, yref="y", y0=1, y1=1,
                   line=dict(color=COLORS["rejected"], dash="dash", width=1))]
    notes = [dict(xref="paper", x=1, xanchor="right", yref="y", y=1, yanchor="bottom", showarrow=False,
                  text="break-even (no speedup)", font=dict(size=10, color=COLORS["rejected"]))]
    title = f"Expected speedup vs k · a = {a:.2f}, c = {c:.2f}, v = {v:.2f}"
    return _figure(traces, title, height=340, shapes=shapes, annotations=notes,
                   xaxis=dict(title=dict(text="k (tokens drafted per step)", font=dict(size=10)), dtick=1 if k_max <= 20 else 2,
                              range=[0.5, k_max + 0.5]),
                   yaxis=dict(range=[0, ymax], title=dict(text="speedup ×", font=dict(size=10))),
                   yaxis2=dict(range=[0, max(es) * 1.15], overlaying="y", side="right", showgrid=False, zeroline=False,
                               title=dict(text="E[tokens/step]", font=dict(size=10, color=COLORS["muted"])),
                               tickfont=dict(color=COLORS["muted"])))


# -- part 5: the best k here and on a GPU -------------------------------------------------------


def hardware_figure(lesson: HardwareLesson) -> go.Figure:
    """Left: the two verify-cost curves v(n) against n = k + 1 (this CPU measured or documented,
    the GPU-like one dashed and labelled an illustration). Right: the expected speedup against k
    on each, for the same a and c, each optimum starred; break-even at 1x."""
    traces: list[dict] = []
    top = 1.0
    for kc, color, dash in ((lesson.cpu, COLORS["resampled"], "solid"), (lesson.gpu, COLORS["p"], "dash")):
        name = html.escape(kc.curve.name)
        ns = [k + 1 for k in (0, *kc.ks)]
        traces.append(dict(type="scatter", mode="lines+markers", name=f"v(n): {name}", x=ns, y=[kc.curve.v(n) for n in ns],
                           line=dict(color=color, dash=dash, width=2), marker=dict(size=4, color=color), legendgroup=name,
                           hovertemplate="n = %{x} positions<br>v(n) = %{y:.2f} target steps<extra></extra>"))
        traces.append(dict(type="scatter", mode="lines+markers", name=f"speedup: {name}", x=list(kc.ks), y=list(kc.speedup),
                           xaxis="x2", yaxis="y2", line=dict(color=color, dash=dash, width=2.5), legendgroup=name,
                           marker=dict(size=5, color=color), customdata=list(kc.tokens),
                           hovertemplate="k = %{x}<br>speedup %{y:.2f}×<br>E[tokens/step] %{customdata:.2f}<extra></extra>"))
        traces.append(dict(type="scatter", mode="markers", name=f"best k = {kc.best_k} ({kc.best_speedup:.2f}×): {name}",
                           x=[kc.best_k], y=[kc.best_speedup], xaxis="x2", yaxis="y2", legendgroup=name,
                           marker=dict(symbol="star", size=16, color=color, line=dict(width=1, color="white")),
                           hovertemplate="best k = %{x}<br>%{y:.2f}×<extra></extra>"))
        top = max(top, *kc.speedup)
    vmax = max(max(kc.curve.v(k + 1) for k in (0, *kc.ks)) for kc in (lesson.cpu, lesson.gpu))
    k_max = max(lesson.cpu.ks)
    shapes = [dict(type="line", xref="x2 domain", x0=0, x1=1, yref="y2", y0=1, y1=1,
                   line=dict(color=COLORS["rejected"], dash="dash", width=1))]
    axis_title = lambda text: dict(text=text, font=dict(size=10))  # noqa: E731
    title = f"Same drafts (a = {lesson.a:.2f}, c = {lesson.c:.2f}), two verify costs: best k here and on a GPU"
    return _figure(traces, title, height=440, shapes=shapes,
                   legend=dict(orientation="h", x=0, xanchor="left", y=-0.22, yanchor="top", font=dict(size=10),
                               bgcolor="rgba(0,0,0,0)"),
                   xaxis=dict(domain=[0, 0.4], title=axis_title("n: positions in the verify pass (k + 1)"), dtick=4),
                   yaxis=dict(range=[0, vmax * 1.15], title=axis_title("v(n): pass cost in target steps")),
                   xaxis2=dict(domain=[0.52, 1], anchor="y2", title=axis_title("k (tokens drafted per step)"),
                               range=[0.5, k_max + 0.5], dtick=2, showgrid=False, zeroline=False),
                   yaxis2=dict(anchor="x2", range=[0, top * 1.15], title=axis_title("expected speedup ×"),
                               showgrid=True, gridcolor=COLORS["grid"], zeroline=False))


# -- the Learn tab's HTML ----------------------------------------------------------------------


def _card(key: str, label: str, value: str, sub: str = "") -> str:
    sub_html = f'<div class="sv-card-sub">{sub}</div>' if sub else ""
    return (f'<div class="sv-card" data-metric="{key}"><div class="sv-card-label">{label}</div>'
            f'<div class="sv-card-value">{value}</div>{sub_html}</div>')


def calc_cards_html(k: int, expected: float, speedup: float, best_k: int, best_speedup: float, cost: float) -> str:
    """The calculator's four cards: E[tokens / step], the expected speedup, the best k, the cost."""
    verdict = "faster" if speedup > 1 else "slower"
    return (
        '<div class="sv-metrics sv-learn-calc">'
        + _card("tokens", "E[tokens / step]", f"{expected:.2f}", f"of at most {k + 1}")
        + _card("speedup", "expected speedup", f"{speedup:.2f}×", f"{verdict} than target-only")
        + _card("best", "best k", str(best_k), f"{best_speedup:.2f}×")
        + _card("cost", "cost / step", f"{cost:.2f}", "target steps (k c + v)")
        + "</div>"
    )


def verdict_html(text: str, kind: str, matches: bool) -> str:
    """Part 1's verdict: does the sampled histogram match p?"""
    return f'<div class="sv-learn-verdict" data-matches="{str(matches).lower()}">{message_html(text, kind)}</div>'


def model_comparison_html(text: str, kind: str, tv_spec: float, tv_plain: float, tv_between: float) -> str:
    """Part 2's message, with the total-variation distances as data attributes (for tests)."""
    return (f'<div class="sv-learn-model" data-tv-spec="{tv_spec:.4f}" data-tv-plain="{tv_plain:.4f}" '
            f'data-tv-between="{tv_between:.4f}">{message_html(text, kind)}</div>')


# -- part 4: several candidates (token trees) --------------------------------------------------


def residual_steps_figure(tokens: Sequence[str], steps: Sequence[tuple[torch.Tensor, float]],
                          candidates: Sequence[int]) -> go.Figure:
    """How the residual shrinks as candidates fail: r_1 = p, then r_j after each rejection, one
    group of bars per token (the failed candidate's bar drops to zero, the rest grow)."""
    labels = unique_labels(tokens)
    shades = ["#4f46e5", "#d97706", "#ea580c", "#b45309", "#92400e", "#78350f"]
    traces = []
    for j, (r, mass) in enumerate(steps):
        if j == 0:
            name = "r₁ = p"
        else:
            name = f"r{j + 1} after “{token_label(tokens[candidates[j - 1]])}” failed" if candidates else f"r{j + 1}"
        ys = _vals(r)
        traces.append(dict(type="bar", name=name, x=labels, y=ys, marker=dict(color=shades[min(j, len(shades) - 1)]),
                           customdata=[[fmt_prob(y), f"{mass:.3f}"] for y in ys],
                           hovertemplate="%{x}<br>" + html.escape(name) + " = %{customdata[0]}"
                                         "<br>mass of p not yet ruled out: %{customdata[1]}<extra></extra>"))
    masses = " → ".join(f"{m:.2f}" for _, m in steps)
    return _figure(traces, f"The residual as candidates fail (mass left {masses})", barmode="group", bargap=0.2,
                   xaxis=dict(type="category", tickfont=dict(size=12)), yaxis=dict(rangemode="tozero", tickformat=".0%"))


def tree_histogram_figure(exp) -> go.Figure:
    """The output of N tries with m candidates (bars) against the target p (ticks)."""
    labels = unique_labels(exp.tokens)
    good = exp.rule == "exact"
    freq = _vals(exp.freq)
    traces = [
        dict(type="bar", name=f"{exp.n:,} tries, {'exact' if good else 'broken'} rule", x=labels, y=freq,
             marker=dict(color=COLORS["accepted"] if good else COLORS["rejected"], opacity=0.85),
             customdata=[[f"{int(c):,}", fmt_prob(f)] for c, f in zip(exp.counts, freq)],
             hovertemplate="%{x}<br>sampled %{customdata[1]} (%{customdata[0]} times)<extra></extra>"),
        dict(type="scatter", mode="markers", name="target p", x=labels, y=_vals(exp.p),
             marker=dict(symbol="line-ew", size=34, color=COLORS["p"], line=dict(width=3, color=COLORS["p"])),
             **_hover(_vals(exp.p), "p")),
    ]
    verdict = "matches p" if exp.matches else "misses p"
    ymax = max(freq + _vals(exp.p) + [0.05])
    return _figure(traces, f"{exp.m} candidates per try · TV {exp.tv:.3f} · {verdict}",
                   xaxis=dict(type="category", tickfont=dict(size=12)),
                   yaxis=dict(range=[0, ymax * 1.15], tickformat=".0%", title=dict(text="share of tries", font=dict(size=10))))


def tree_verdict_html(exp) -> str:
    """The verdict with its numbers as data attributes (for tests and the page)."""
    kept = ", ".join(f"child {j + 1}: {c / exp.n:.0%}" for j, c in enumerate(exp.kept_by_child[:-1]))
    text = f"{exp.message} Kept: {kept}; none (from the residual): {exp.kept_by_child[-1] / exp.n:.0%}."
    return (f'<div class="sv-learn-tree-verdict" data-matches="{str(exp.matches).lower()}" data-tv="{exp.tv:.4f}" '
            f'data-limit="{exp.limit:.4f}">{message_html(text, exp.kind)}</div>')


__all__ += ["residual_steps_figure", "tree_histogram_figure", "tree_verdict_html"]
