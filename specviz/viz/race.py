"""The race: target-only and speculative decoding on one wall-clock axis, from their own timings.

Each run is a sequence of StepRecords; a step commits its tokens when it ends, so a run's
timeline is the running sum of (draft + verify + other) ms, starting after its prefill. A
target-only run is the same with k = 0 (one token per step). Three views of one timeline:

- :func:`race_figure`: cumulative tokens against seconds, one staircase per run (Plotly); with
  ``static=True`` everything a reader needs is printed on the chart (finish times, the speedup,
  the last words) so a PNG screenshot tells the story without hovering;
- :func:`race_text_at`: the text each run has committed by time t, for the UI to play the race;
- :func:`race_html`: two lanes of text and progress bars at time t, plain HTML (no JS), reusing the
  token classes of :mod:`specviz.viz.tokens` (``tok tok-KIND``).

Pure functions of records; no Gradio.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Sequence

import plotly.graph_objects as go

from ..core.records import StepRecord
from .figures import _figure, _xlabel, empty_figure
from .theme import COLORS
from .tokens import _token_inner, token_label

__all__ = ["RacePoint", "race_timeline", "race_text_at", "race_figure", "race_html", "race_duration_ms"]

SPEC_COLOR = COLORS["accepted"]
BASE_COLOR = COLORS["target"]


@dataclass(frozen=True)
class RacePoint:
    """One step's end on the wall clock."""

    t_ms: float  # when the step's tokens were committed (from the run's start, prefill included)
    tokens: int  # tokens committed so far
    step: int  # the step's index
    texts: tuple[str, ...]  # the tokens this step committed
    kinds: tuple[str, ...]  # how each got there: accepted / resampled / bonus / target


def _kinds(s: StepRecord) -> tuple[str, ...]:
    n = min(s.n_accepted, s.n_committed)
    kinds = ["accepted"] * n
    if s.n_committed > n:
        kinds.append(s.next_kind)
    return tuple(kinds[: s.n_committed])


def race_timeline(steps: Sequence[StepRecord], start_ms: float = 0.0) -> list[RacePoint]:
    """The run's steps as points on its wall clock; ``start_ms`` is its prefill (first token's
    wait before the first step), so both runs start from the same moment: the request."""
    if start_ms < 0:
        raise ValueError(f"start_ms (the prefill time) must be >= 0, got {start_ms!r}")
    t, n, out = float(start_ms), 0, []
    for s in steps:
        t += s.total_ms
        n += s.n_committed
        out.append(RacePoint(t, n, s.index, tuple(s.committed_text), _kinds(s)))
    return out


def race_duration_ms(*timelines: Sequence[RacePoint]) -> float:
    """When the slower run finishes (the animation's length)."""
    return max((tl[-1].t_ms for tl in timelines if tl), default=0.0)


def race_text_at(steps: Sequence[StepRecord], t_ms: float, start_ms: float = 0.0) -> tuple[str, int, bool]:
    """(text committed by time t, its token count, whether the run had finished by then)."""
    tl = race_timeline(steps, start_ms)
    done = [p for p in tl if p.t_ms <= t_ms]
    text = "".join(t for p in done for t in p.texts)
    return text, (done[-1].tokens if done else 0), bool(tl) and len(done) == len(tl)


def _hover(p: RacePoint, name: str) -> str:
    words = html.escape("".join(token_label(t) for t in p.texts))
    return f"<b>{html.escape(name)}</b> · step {p.step + 1}<br>t = {p.t_ms / 1e3:.2f} s · {p.tokens} tokens<br>+ {words}"


def _trace(tl: Sequence[RacePoint], name: str, color: str, start_ms: float) -> dict:
    xs = [start_ms / 1e3] + [p.t_ms / 1e3 for p in tl]
    ys = [0] + [p.tokens for p in tl]
    hover = [f"<b>{html.escape(name)}</b><br>prefill done at {start_ms / 1e3:.2f} s"] + [_hover(p, name) for p in tl]
    return dict(type="scatter", mode="lines+markers", name=name, x=xs, y=ys, line=dict(color=color, width=2.5, shape="hv"),
                marker=dict(size=5, color=color), hovertext=hover, hoverinfo="text")


def race_figure(spec: Sequence[StepRecord], base: Sequence[StepRecord], *, spec_start_ms: float = 0.0,
                base_start_ms: float = 0.0, spec_label: str = "speculative", base_label: str = "target-only",
                static: bool = False, tail_chars: int = 28) -> go.Figure:
    """Cumulative committed tokens against wall-clock seconds for both runs (token text on hover).

    ``*_start_ms``: each run's prefill, so the clocks start at the request. ``static=True`` prints
    the finish times, the speedup and each run's last words on the chart, for a screenshot.
    """
    title = "The race: tokens committed over time"
    if not spec and not base:
        return empty_figure(title, "Run speculative and target-only on the same prompt to race them")
    runs = [(spec_label, spec, SPEC_COLOR, spec_start_ms), (base_label, base, BASE_COLOR, base_start_ms)]
    tls = {name: race_timeline(steps, start) for name, steps, _c, start in runs}
    traces = [_trace(tls[name], name, color, start) for name, steps, color, start in runs if steps]
    notes = []
    ends = {name: tl[-1] for name, tl in tls.items() if tl}
    if spec_label in ends and base_label in ends:
        a, b = ends[spec_label], ends[base_label]
        # the same number of tokens is the fair finish line: the shorter run's length
        line = min(a.tokens, b.tokens)
        ta = next(p.t_ms for p in tls[spec_label] if p.tokens >= line)
        tb = next(p.t_ms for p in tls[base_label] if p.tokens >= line)
        ratio = tb / ta if ta > 0 else float("inf")
        title += f"<br><span style=\"font-size:11.5px\">{line} tokens: {html.escape(spec_label)} {ta / 1e3:.2f} s, " \
                 f"{html.escape(base_label)} {tb / 1e3:.2f} s · {ratio:.2f}x</span>"
    if static:
        for name, _steps, color, _s in runs:
            if name not in ends:
                continue
            p = ends[name]
            words = "".join(t for q in tls[name] for t in q.texts)[-tail_chars:]
            notes.append(dict(x=p.t_ms / 1e3, y=p.tokens, xanchor="right", yanchor="bottom", showarrow=False,
                              text=f"{html.escape(name)}: {p.tokens} tokens at {p.t_ms / 1e3:.2f} s<br>"
                                   f"<i>…{html.escape(words.replace(chr(10), '↵ '))}</i>",
                              font=dict(size=10, color=color), align="right"))
    return _figure(traces, title, height=320, margin=dict(t=80), annotations=notes, hovermode="closest",
                   xaxis=dict(title=_xlabel("wall-clock seconds (from the request)"), rangemode="tozero"),
                   yaxis=dict(title=_xlabel("tokens committed"), rangemode="tozero"))


def _lane(name: str, steps: Sequence[StepRecord], t_ms: float, start_ms: float, total_ms: float, color: str,
          cls: str, speed: float | None = None) -> str:
    """One run's lane at time t; with ``speed`` (animated) every token is there from the start and
    CSS shows it at its own commit time (divided by speed), so the race plays without a script."""
    tl = race_timeline(steps, start_ms)
    end = tl[-1].t_ms if tl else 0.0
    if speed is not None:
        toks = "".join(
            f'<span class="tok tok-{k} sv-race-tok" style="animation-delay:{p.t_ms / speed / 1e3:.3f}s">{_token_inner(t)}</span>'
            for p in tl for t, k in zip(p.texts, p.kinds))
        width = 100.0 * end / total_ms if total_ms > 0 else 0.0
        bar = f'<div class="sv-race-grow" style="width:{width:.1f}%;background:{color};animation-duration:{end / speed / 1e3:.3f}s"></div>'
        n, finished, state = (tl[-1].tokens if tl else 0), bool(tl), f"{tl[-1].tokens if tl else 0} tokens in {end / 1e3:.2f} s"
    else:
        done = [p for p in tl if p.t_ms <= t_ms]
        n = done[-1].tokens if done else 0
        finished = bool(tl) and len(done) == len(tl)
        toks = "".join(f'<span class="tok tok-{k}">{_token_inner(t)}</span>' for p in done for t, k in zip(p.texts, p.kinds))
        width = 100.0 * min(t_ms, end) / total_ms if total_ms > 0 else 0.0
        bar = f'<div style="width:{width:.1f}%;background:{color}"></div>'
        state = f"finished at {end / 1e3:.2f} s" if finished else f"{n} tokens"
    return (
        f'<div class="sv-race-lane {cls}" data-tokens="{n}" data-done="{str(finished).lower()}">'
        f'<div class="sv-race-name"><b>{html.escape(name)}</b> <span class="sv-muted">{state}</span></div>'
        f'<div class="sv-race-bar">{bar}</div>'
        f'<div class="sv-race-text sv-out">{toks}</div></div>'
    )


def race_html(spec: Sequence[StepRecord], base: Sequence[StepRecord], t_ms: float | None = None, *,
              spec_start_ms: float = 0.0, base_start_ms: float = 0.0, spec_label: str = "speculative",
              base_label: str = "target-only", speed: float = 1.0) -> str:
    """Both runs' committed text as two lanes of tokens with progress bars: plain HTML (no script).

    With ``t_ms`` it is a frame at that time (a UI may call it with a growing t; a screenshot
    needs nothing else). With ``t_ms=None`` it is animated by CSS alone: each token appears at
    its own commit time divided by ``speed`` (2.0 = twice as fast), and a new render replays it.
    """
    if speed <= 0:
        raise ValueError(f"speed must be > 0 (1 = real time, 2 = twice as fast), got {speed!r}")
    total = race_duration_ms(race_timeline(spec, spec_start_ms), race_timeline(base, base_start_ms))
    animated = t_ms is None
    t = total if animated else max(0.0, min(float(t_ms), total))
    clock = (f"real time x{speed:g} · {total / 1e3:.2f} s in all" if animated else f"t = {t / 1e3:.2f} s")
    lanes = "".join(
        _lane(name, steps, t, start, total, color, cls, speed if animated else None)
        for name, steps, start, color, cls in ((spec_label, spec, spec_start_ms, SPEC_COLOR, "sv-race-spec"),
                                              (base_label, base, base_start_ms, BASE_COLOR, "sv-race-base"))
    )
    mode = "animated" if animated else "frame"
    return (f'<div class="sv-race sv-race-{mode}" data-t-ms="{t:.0f}" data-total-ms="{total:.0f}">'
            f'<div class="sv-race-clock">{clock}</div>{lanes}</div>')
