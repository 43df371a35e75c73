"""The playground's view: its components by name, and :func:`render`, which gives their values
by name from a :class:`~specviz.ui.state.PlaygroundState`.

Handlers (:mod:`specviz.ui.playground`, :mod:`specviz.ui.lesson`) return ``{output name: value}``;
a name left out keeps its component as it is. :func:`specviz.ui.handlers.by_name` turns those
names into the components when the events are wired, so adding a view shifts nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import gradio as gr

from .. import viz
from ..core.stepwords import run_counts
from ..viz.tree import chain_view
from .handlers import plot
from .lesson_view import LESSON_OUTPUTS, LessonView, render_lesson, shown_of
from .state import PlaygroundState


@dataclass
class PlaygroundView:
    """The playground's components (for handlers, tests and the app shell)."""

    state: gr.State
    controls: dict[str, gr.components.Component]  # name -> control, in parse_settings' order
    status: gr.HTML
    tokens: gr.HTML
    metrics: gr.HTML
    baseline: gr.HTML
    step_slider: gr.Slider
    position: gr.Radio
    summary: gr.HTML
    table: gr.HTML
    topk: gr.Plot
    acceptance: gr.Plot
    timeline: gr.Plot
    tokens_per_step: gr.Plot
    download: gr.DownloadButton
    lesson: LessonView

    def named(self) -> dict[str, Any]:
        """{output name: component}, in OUTPUTS order."""
        return {**{name: getattr(self, name) for name in VIEW_OUTPUTS}, **self.lesson.named()}

    @property
    def outputs(self) -> list[gr.components.Component]:
        """Every output component, in OUTPUTS order (an event's outputs)."""
        return list(self.named().values())


VIEW_OUTPUTS: tuple[str, ...] = tuple(f.name for f in fields(PlaygroundView) if f.name not in ("state", "controls", "lesson"))
OUTPUTS: tuple[str, ...] = VIEW_OUTPUTS + LESSON_OUTPUTS  # every name a playground handler may return


def render(
    state: PlaygroundState, *, run: bool = True, inspector: bool = True, chart: bool = True, plots: bool = True,
    download: bool = False, baseline: bool = False,
) -> dict[str, Any]:
    """The view's values by name (OUTPUTS); parts not asked for are left out, so they stay as they are.

    run: status-independent text (tokens, metrics); inspector: step slider, positions, summary and
    draft table; chart: the p/q chart; plots: the three run plots. The charts are the expensive
    part in the browser (Plotly redraws each twice), so a Step sends the run plots in a second
    event; the p/q chart goes with the inspector whose step and position its title names (a
    handler asks for both or neither), so no panel names another step than the table.
    """
    out: dict[str, Any] = status_only(state)
    steps = [chain_view(s) for s in state.steps]  # a tree step as its committed path (chain views)
    rec = state.shown_step()
    rec = chain_view(rec) if rec is not None else None
    shown = shown_of(state)  # what the shown step's phase knows (None: committed, everything)
    known = state.visible_steps()  # the run's readouts leave out a latest step not committed yet
    stats = state.visible_stats()
    if run:
        out["tokens"] = viz.tokens_html(state.prompt_text, steps, selected_step=_shown_index(state), shown=shown)
        out["metrics"] = viz.metrics_html(stats, state.comparable_baseline(), engine_ms=state.last_engine_ms,
                                          steps=known, lossy=_lossy(state))
    if baseline:
        visible = bool(state.baseline_steps) or state.baseline_session is not None
        b = state.baseline_stats()
        head = "Target-only baseline" + (f" · {b.new_tokens} tokens · {b.tokens_per_s:.1f} tok/s" if b else "")
        body = viz.tokens_html("", state.baseline_steps, empty_hint="Loading the target…")
        out["baseline"] = gr.update(value=f'<div class="sv-subtitle">{head}</div>{body}', visible=visible)
    choices = viz.position_choices(rec, shown)
    pos = state.selected_pos if state.selected_pos is not None else viz.default_position(rec, shown)
    pos = max(0, min(pos, len(choices) - 1)) if choices else 0
    if inspector:
        n = len(steps)
        out["step_slider"] = gr.update(maximum=max(2, n), value=(rec.index + 1) if rec else 1, interactive=n > 1)
        out["position"] = gr.update(choices=choices, value=choices[pos] if choices else None)
        out["summary"] = viz.step_summary(rec, shown)
        out["table"] = viz.draft_table_html(rec, pos, shown)
    if chart:
        out["topk"] = plot(viz.topk_figure.spec(rec, pos, shown))
    if plots:
        out["acceptance"] = plot(viz.acceptance_by_position_figure.spec(stats, run_counts(known), lossy=_lossy(state)))
        out["timeline"] = plot(viz.timeline_figure.spec(steps[:len(known)]))
        out["tokens_per_step"] = plot(viz.tokens_per_step_figure.spec(steps[:len(known)]))
    if download:
        path = state.trace_path if steps else None
        out["download"] = gr.update(value=path, interactive=bool(path))
    return {**out, **render_lesson(state, run=run, inspector=inspector, chart=chart, baseline=baseline, plots=plots)}


def _lossy(state: PlaygroundState) -> bool:
    """Whether the run's numbers are typical acceptance's (LOSSY): its settings say so (sampled), or a
    loaded trace's steps were judged by it."""
    st = state.settings
    if st is not None:
        return st.acceptance == "typical" and st.temperature > 0
    return any(getattr(r, "rule", "exact") == "typical" for r in state.steps)


def _shown_index(state: PlaygroundState) -> int | None:
    rec = state.shown_step()
    return rec.index if rec is not None else None


def status_only(state: PlaygroundState) -> dict[str, Any]:
    """Only the status line (the state's message)."""
    text, kind = state.message
    return {"status": viz.message_html(text, kind)}


__all__ = ["OUTPUTS", "PlaygroundView", "VIEW_OUTPUTS", "render", "status_only"]
