"""What if? The run you just watched, on the theory's speedup curve over k.

:func:`run_point` takes a playground run's own numbers: a (accepted / drafted; a tree: the
accepted path over its depth), k, c (one draft token's cost), v (one verify round's cost), both in
target steps, and f (the share of steps that drafted: an n-gram misses some), plus the measured
speedup once a target-only run has finished. Without a target-only run, c is estimated against the
run's own verify pass (v = 1 assumed) and the panel says so.

:func:`whatif_curve` is the theory's prediction over k, from :mod:`specviz.analysis.theory` alone
(``expected_tokens_per_step`` for E(a, k), ``expected_speedup_drafting`` for E / (f (k c + v) +
1 - f); with f = 1 it is ``expected_speedup``): no second formula. :func:`whatif_figure` draws it
for the student's a, k, c beside the run's own curve and the run's measured point;
:func:`whatif_html` says the numbers in one sentence. Pure functions; no Gradio.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Sequence

from ..analysis.theory import expected_speedup_drafting, expected_tokens_per_step
from ..core.bounds import LEARN_CURVE_MAX_K
from ..core.records import Stats, StepRecord
from ..core.stepwords import run_counts
from .explain import drafted_fraction, run_costs
from .figures import LEGEND_BELOW, MARGIN_BELOW, _spec, _with_spec, empty_figure
from .theme import COLORS

__all__ = ["RunPoint", "advice_html", "run_point", "v_words", "whatif_curve", "whatif_figure", "whatif_html",
           "WHATIF_MAX_K"]

WHATIF_MAX_K = LEARN_CURVE_MAX_K  # the curve's (and the k slider's) range: k = 1..this


@dataclass(frozen=True)
class RunPoint:
    """A run's own numbers for the what-if panel."""

    a: float  # accepted / drafted (a tree: accepted path / depth)
    k: int  # tokens drafted per step asked for (a tree: its mean depth, rounded)
    c: float  # one draft token's cost, in target steps
    v: float  # one verify round's cost, in target steps
    f: float  # steps that drafted / steps that could
    measured: float | None  # tokens/s over the target-only run's (None without one)
    timed: bool  # c and v measured against a target-only run (False: c against the run's verify pass, v = 1)
    tree: bool = False
    v_at: tuple[float, ...] = ()  # v(k + 1) for k = 1, 2, ...: this machine's measured curve (empty: v at every k)
    v_source: str = ""  # where v_at comes from, in words (the legend's subtitle)
    lossy: bool = False  # typical acceptance judged some step: a and the measured speedup are the LOSSY rule's

    def v_of(self, k: int) -> float:
        """The verify cost the curve uses at ``k``: the machine's v(k + 1), else the run's own v."""
        return self.v_at[k - 1] if 0 < k <= len(self.v_at) else self.v

    @property
    def predicted(self) -> float:
        """The theory at the run's own a, k, c, v, f."""
        return whatif_curve(self.a, self.c, self.v, self.f, self.k, self.v_at)[-1][1]


def run_point(steps: Sequence[StepRecord], stats: Stats | None, baseline: Stats | None, k: int) -> RunPoint | None:
    """The run's :class:`RunPoint`, or None before it has drafted anything (or had any timing)."""
    if stats is None or not steps or stats.steps <= 0 or stats.drafted <= 0 or k < 1:
        return None
    counts = run_counts(steps)
    positions = counts.depth if counts.tree else stats.drafted  # drafted positions: a chain's tokens, a tree's depth
    if not positions:
        return None
    a = counts.rate if counts.tree and counts.rate is not None else stats.acceptance_rate
    kk = max(1, round(counts.depth / max(1, sum(1 for s in steps if s.k > 0)))) if counts.tree else int(k)
    c, v = run_costs(stats, baseline)
    timed = c is not None and v is not None
    if timed:
        c = c * stats.drafted / positions  # a tree: one depth's nodes cost c each
    else:
        pass_ms = (stats.verify_ms + stats.other_ms) / stats.steps
        if pass_ms <= 0:
            return None
        c, v = (stats.draft_ms / positions) / pass_ms, 1.0
    measured = stats.tokens_per_s / baseline.tokens_per_s if timed and baseline and baseline.tokens_per_s > 0 else None
    f = drafted_fraction(steps)
    return RunPoint(min(1.0, max(0.0, a)), kk, max(0.0, c), max(1e-6, v), f if f > 0 else 1.0, measured, timed,
                    counts.tree, lossy=any(getattr(s, "rule", "exact") == "typical" for s in steps))


def whatif_curve(a: float, c: float, v: float, f: float = 1.0, k_max: int = WHATIF_MAX_K,
                 v_at: Sequence[float] = ()) -> list[tuple[int, float]]:
    """[(k, predicted speedup)] for k = 1..k_max: i.i.d. acceptance a, a draft token at c and a verify
    round at v target steps, a share f of the steps drafting (the rest plain target steps). ``v_at``:
    v(k + 1) for each k (this machine's measured curve), where a (k + 1)-token pass costs more as k
    grows; without it the run's one v is used at every k."""
    def vk(kk: int) -> float:
        return v_at[kk - 1] if 0 < kk <= len(v_at) else v

    return [(kk, expected_speedup_drafting(expected_tokens_per_step(a, kk), f, kk, c, vk(kk)))
            for kk in range(1, int(k_max) + 1)]


def _line(points: list[tuple[int, float]], name: str, color: str, dash: str = "solid", width: float = 2.5) -> dict:
    return dict(type="scatter", mode="lines+markers", name=name, x=[p[0] for p in points], y=[p[1] for p in points],
                line=dict(color=color, width=width, dash=dash), marker=dict(size=4, color=color),
                hovertemplate="k = %{x}<br>predicted %{y:.2f}×<extra></extra>")


def _v(x: float) -> str:
    """a or c as the panel's number boxes show it (rounded to 3 decimals, ui.whatif_view), so the
    sentence and the legend never read 0.00 beside a box that says 0.001."""
    return f"{round(float(x), 3):g}"


@_with_spec
def whatif_figure(run: RunPoint | None, a: float, k: int, c: float, k_max: int = WHATIF_MAX_K) -> dict:
    """The predicted speedup over k at the chosen a and c (the run's v and f), the run's own curve
    (dotted) and its measured speedup (a diamond at its k), break-even at 1×."""
    title = "What if? Predicted speedup vs k"
    if run is None:
        return empty_figure.spec(title, "Run a few steps: the curve starts from this run's own a, k and c")
    if run.lossy:  # the exact rule's theory at a typical-acceptance run's a (issue 52: every number says LOSSY)
        title += " · LOSSY"
    k_max = max(int(k_max), int(k), run.k)
    mine = whatif_curve(a, c, run.v, run.f, k_max, run.v_at)
    own = whatif_curve(run.a, run.c, run.v, run.f, k_max, run.v_at)
    cur = mine[int(k) - 1]
    best = max(mine, key=lambda t: (t[1], -t[0]))
    traces = [
        _line(own, f"this run (a = {_v(run.a)}, c = {_v(run.c)})", COLORS["muted"], "dot", 1.5),
        _line(mine, f"what if (a = {_v(a)}, c = {_v(c)})", COLORS["p"]),
        dict(type="scatter", mode="markers", name=f"k = {cur[0]}: {cur[1]:.2f}×", x=[cur[0]], y=[cur[1]],
             marker=dict(symbol="circle-open", size=14, color=COLORS["ink"], line=dict(width=2)),
             hovertemplate="k = %{x}<br>predicted %{y:.2f}×<extra></extra>"),
        # with the run's one v at every k the star is that assumption's, not advice: its name says so
        dict(type="scatter", mode="markers", name=f"best k = {best[0]}" + ("" if run.v_at else " if v stayed flat"),
             x=[best[0]], y=[best[1]],
             marker=dict(symbol="star", size=14, color=COLORS["bonus"], line=dict(width=1, color="white")),
             hovertemplate="best k = %{x}<br>%{y:.2f}×<extra></extra>"),
    ]
    ys = [p[1] for p in mine + own] + [1.0]
    if run.measured is not None:
        traces.append(dict(type="scatter", mode="markers", name=f"measured {run.measured:.2f}× (k = {run.k})"
                           + (" LOSSY" if run.lossy else ""),
                           x=[run.k], y=[run.measured], hovertemplate="this run, measured<br>k = %{x}: %{y:.2f}×<extra></extra>",
                           marker=dict(symbol="diamond", size=12, color=COLORS["resampled"], line=dict(width=1, color="white"))))
        ys.append(run.measured)
    shapes = [dict(type="line", xref="paper", x0=0, x1=1, yref="y", y0=1, y1=1,
                   line=dict(color=COLORS["rejected"], dash="dash", width=1))]
    sub = v_words(run) + (f", drafting on {run.f:.0%} of steps" if run.f < 0.999 else "")
    return _spec(traces, f'{title}<br><span style="font-size:11.5px">{html.escape(sub)}</span>', height=360,
                 shapes=shapes, margin=dict(t=56, b=MARGIN_BELOW), legend=LEGEND_BELOW,
                 xaxis=dict(title=dict(text="k (tokens drafted per step)", font=dict(size=10)), dtick=1 if k_max <= 16 else 2,
                            range=[0.5, k_max + 0.5]),
                 yaxis=dict(range=[0, max(ys) * 1.15], title=dict(text="speedup ×", font=dict(size=10))))


def v_words(run: RunPoint) -> str:
    """What v the curve uses, said on the chart: this machine's measured v(k + 1), or the run's one v
    at every k, labelled as fitted from this run (it puts the run's own point on the curve)."""
    if run.v_at:
        return f"v(k + 1) measured on this machine ({run.v_source or 'specviz advise'}): v = {run.v_of(1):.2f} at k = 1 to " \
               f"{run.v_of(len(run.v_at)):.2f} at k = {len(run.v_at)}"
    return f"v = {run.v:.2f} at every k, fitted from this run (run specviz advise for this machine's v(k + 1))"


def whatif_html(run: RunPoint | None, a: float, k: int, c: float) -> str:
    """One or two sentences: the prediction at the chosen a, k, c against the run's own."""
    if run is None:
        return ('<div class="sv-whatif sv-muted" data-ready="0">Run a few steps: this panel starts from the run\'s own '
                'acceptance a, k and draft cost c, and moves the theory\'s curve as you change them.</div>')
    now = whatif_curve(a, c, run.v, run.f, max(int(k), 1), run.v_at)[-1][1]
    own = f"this run's own a = {_v(run.a)}, k = {run.k}, c = {_v(run.c)}: {run.predicted:.2f}×"
    if run.measured is not None:
        own += f" predicted, {run.measured:.2f}× measured (prefill and timing noise included)"
    else:
        own += " predicted"
    how = ("c from the target-only run, v(k + 1) from this machine's cost model" if run.v_at else
           "c and v from the target-only run (v fitted from this run: the same at every k)" if run.timed else
           "no target-only run yet: c is estimated against this run's verify pass, taken as one target step (v = 1)")
    tree = " A tree's a is its accepted path over the depth; the curve is a chain's." if run.tree else ""
    lossy = ('<b class="sv-lossy-tag">LOSSY</b> this run\'s a and speedup are typical acceptance\'s, which does not '
             "keep the target's distribution; the curve is the exact rule's at that a. " if run.lossy else "")
    tag = ' data-lossy="true"' if run.lossy else ""
    return (f'<div class="sv-whatif" data-ready="1" data-predicted="{now:.4f}"{tag}>'
            f'{lossy}<b>At a = {_v(a)}, k = {int(k)}, '
            f"c = {_v(c)}: {now:.2f}×</b> predicted ({html.escape(own)}). <span class=\"sv-muted\">i.i.d. acceptance; "
            f"{html.escape(how)}.{tree}</span></div>")


def advice_html(advice, measured: float | None = None) -> str:
    """The advisor's saved prediction for the chosen configuration, before a run, and beside the
    measured speedup after (``advice``: a :class:`specviz.app.runs.SavedAdvice` or None; ``measured``:
    this run's speedup over its target-only run). No saved advice: one line saying how to get one."""
    if advice is None:
        return ('<div class="sv-advice sv-muted" data-advice="none">No advisor prediction is saved for this target on '
                'this machine: the Benchmark tab\'s Advisor (or <code>specviz advise</code>) predicts every '
                'configuration\'s speedup before it runs.</div>')
    when = f", saved {html.escape(advice.saved)}" if advice.saved else ""
    where = f" on {html.escape(advice.machine)}" if advice.machine else " on this machine"
    pick = f"{html.escape(advice.spec)} k = {advice.k}"
    if not advice.matches:
        return (f'<div class="sv-advice sv-muted" data-advice="other">The advisor\'s pick for this target{where} is {pick} '
                f'(predicted {advice.speedup:.2f}×{when}); it saved no prediction for the configuration chosen here.</div>')
    head = (f"The advisor predicted <b>{advice.speedup:.2f}×</b> (τ {advice.tau:.2f}) for {pick}{where}{when}, "
            "the decode loop without the prefill.")
    if measured is None:
        return (f'<div class="sv-advice" data-advice="predicted" data-predicted="{advice.speedup:.3f}">{head} '
                "Play, then Run target-only, to measure it.</div>")
    gap = measured / advice.speedup - 1 if advice.speedup > 0 else 0.0
    return (f'<div class="sv-advice" data-advice="compared" data-predicted="{advice.speedup:.3f}" '
            f'data-measured="{measured:.3f}">{head} Measured here: <b>{measured:.2f}×</b> ({gap:+.0%} against the '
            "prediction; this run's speedup includes its prefill).</div>")
