"""The Playground tab's handlers: step through speculative decoding and inspect every decision.

Runs live in :mod:`specviz.core.engine` (through a per-browser
:class:`~specviz.ui.state.PlaygroundState`); what the page shows comes from
:mod:`specviz.ui.playground_view`, by name; the layout and its events are
:mod:`specviz.ui.playground_tab`'s. Every handler catches errors and shows them in the page; the
session stays usable.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Iterator

import gradio as gr

from .. import viz
from ..app import runs
from ..app.limits import Limits
from ..app.replay import Replay
from ..viz.tokens import phase_summary_text
from . import zerogpu
from .handlers import friendly_error
from .lesson_view import shown_of, trace_summary
from .playground_view import render, status_only
from .state import PROPOSERS, TAKES_LAYERS, TAKES_OPTIONS, USES_DRAFT_MODEL, PlaygroundState, Settings, parse_settings
from .threads import Every, LoadProgress, loading

log = logging.getLogger("specviz.ui")

PLAY_MIN_INTERVAL_S = 0.08  # Play redraws at most this often (tiny models step in milliseconds)
PLAY_CHART_INTERVAL_S = 1.0  # ... and its Plotly charts at most this often (4 charts: ~250 ms of browser CPU)
REPLAY_MAX_DELAY_S = 0.5
FINISHED = "This run has finished. Press Reset (or change a setting) to start a new one."

Frame = dict[str, Any]  # {output name: value} (specviz.ui.playground_view.OUTPUTS)


# -- defaults and choices --------------------------------------------------------------------


Defaults = runs.Defaults  # the starting settings (specviz.app.runs)


def target_choices(defaults: Defaults) -> list[str]:
    """The default, the built-ins, and the hub pairs' targets when the hub answers (a Space)."""
    return runs.target_choices(defaults.target)


def draft_choices(defaults: Defaults) -> list[str]:
    return runs.draft_choices(defaults.draft)


auto_draft = runs.auto_draft  # the draft to switch to when the target or proposer changes
build_decoder = runs.build_decoder  # settings -> SpeculativeDecoder (outside the UI)


def friendly(e: BaseException) -> str:
    return friendly_error(e, "the playground", after=". The playground is still usable; try Reset.")


# -- loading -----------------------------------------------------------------------------------


def load_run(state: PlaygroundState, settings: Settings, *, target_only: bool = False,
             gpu_note: str | None = None) -> Iterator[Frame]:
    """The run's decoder (its models loaded in a thread, each stage in the status line), or on
    ZeroGPU the whole run recorded there (a Replay): ``x = yield from load_run(...)``."""
    if zerogpu.active():  # the GPU is lent per call, in a forked worker: record the run, replay it here
        if gpu_note:
            state.message = (gpu_note, "info")
            yield status_only(state)
        return zerogpu.record(settings, state.new_trace_path(settings, target_only=target_only), target_only=target_only)
    progress = LoadProgress(1 + (not target_only and runs.prefix_of(settings.proposer) in USES_DRAFT_MODEL))

    def on_progress(msg: str) -> None:
        log.info("%s", msg)
        state.message = (progress.line(msg), "info")

    return (yield from loading(lambda report: build_decoder(settings, report, target_only=target_only),
                               lambda _msg: status_only(state), on_progress))


def ensure_live_session(state: PlaygroundState, raw: tuple) -> Iterator[Frame]:
    """Start a live session for the current settings unless one is running for them; yields
    status updates while models load. Raises ValueError for bad settings."""
    settings = parse_settings(*raw)
    with state.lock:
        if state.mode == "live" and state.session is not None and state.settings == settings:
            return
        changed = state.session is not None
    state.message = (f"Loading {settings.describe()}…", "info")
    yield status_only(state)
    result = yield from load_run(
        state, settings, gpu_note=f"Running {settings.describe()} on a ZeroGPU GPU; its steps then replay here…")
    with state.lock:
        if state.mode == "live" and state.session is not None and state.settings == settings:
            return  # another click started this very run while the models loaded
        state.epoch += 1  # a Play still running on the old settings stops
        if isinstance(result, Replay):
            state.start_recorded(settings, result)
        else:
            state.start(settings, result)
        state.note = "Settings changed, so a new run started. " if changed else ""
        state.message = (f"{state.note}{settings.describe()}.", "info")


# -- running -----------------------------------------------------------------------------------


def on_step(state: PlaygroundState, *raw) -> Iterator[Frame]:
    """One speculative step (or the next record of a loaded trace).

    Gradio may resume a generator on another thread, so no ``yield`` happens while the state's
    lock is held: each frame is rendered under the lock and yielded after it is released.
    """
    try:
        if state.mode == "live":
            yield from ensure_live_session(state, raw)
        with state.lock:
            stepped = not (state.mode == "live" and state.session is not None and state.session.done)
            if stepped:
                record = state.step()
                state.message = _step_message(state, record)
                frame = render(state, plots=False)  # the text, the inspector and its p/q chart: one step, one frame
            else:
                state.message = (FINISHED, "info")
                frame = status_only(state)
        yield frame  # the browser shows the step (its chart title included) while the run plots are built
        if stepped:
            yield on_charts(state)
    except Exception as e:  # noqa: BLE001 - shown in the page, never a traceback
        state.message = (friendly(e), "error")
        yield status_only(state)


def on_charts(state: PlaygroundState) -> Frame:
    """The second frame of a Step: the run plots and the trace download. The p/q chart went with
    the step's text (its title names the step and position the table shows: sent later, it named
    the previous step for about half a second)."""
    with state.lock:
        return render(state, run=False, inspector=False, chart=False,
                      download=state.mode == "live" and bool(state.steps))


def _step_message(state: PlaygroundState, record) -> tuple[str, str]:
    ms = state.last_engine_ms or 0.0
    where = "trace" if state.mode == "trace" else "engine"
    shown = shown_of(state) if state.shown_step() is record else None
    what = viz.step_summary_text(record) if shown is None else phase_summary_text(record, shown)
    head = f"{state.note}Step {record.index + 1}: {what} ({where} {ms:.0f} ms)."
    state.note = ""
    if shown is not None:
        return (head, "info")  # the outcome (and a finished run) is told at commit
    if state.done:
        why = {"eos": "end of sequence", "length": "max new tokens reached"}.get(record.finished or "", "end of trace")
        return (f"{head} Finished: {why}.", "ok")
    return (head, "info")


def on_play(state: PlaygroundState, *raw) -> Iterator[Frame]:
    """Step until done, redrawing after each step; Pause stops it after the current step."""
    state.stop.clear()
    try:
        if state.mode == "live":
            yield from ensure_live_session(state, raw)
        epoch = state.epoch  # a Reset, a trace load or a new run (another event) stops this loop
        if state.mode == "live":
            if state.session is not None and state.session.done:
                state.message = (FINISHED, "info")
                yield status_only(state)
                return
        else:
            with state.lock:
                if state.done:
                    state.rewind_trace()
                frame = render(state)
            yield frame
        redraw, redraw_charts = Every(PLAY_MIN_INTERVAL_S), Every(PLAY_CHART_INTERVAL_S)
        while True:
            with state.lock:
                if state.epoch != epoch:
                    return
                if state.done or state.stop.is_set():
                    break
                record = state.step()
                if state.selected_step is None:
                    state.phase = None  # Play shows each step committed (lesson mode opens Step's in draft)
                state.message = _step_message(state, record)
                frame = None
                if redraw.due(force=state.done):
                    charts = redraw_charts.due(force=state.play_delay_s > 0)
                    frame = render(state, inspector=charts, chart=charts, plots=charts)  # the inspector with its chart
            if state.play_delay_s > 0:  # the Play speed control
                time.sleep(state.play_delay_s)
            elif state.mode == "trace":
                time.sleep(min(REPLAY_MAX_DELAY_S, max(0.05, record.total_ms / 1e3)))
            if frame is not None:
                yield frame
        with state.lock:
            if state.epoch != epoch:
                return
            if state.stop.is_set() and not state.done:
                state.message = (f"Paused after step {len(state.steps)}. Press Play to continue or Step to go one at a time.", "info")
            frame = render(state, download=state.mode == "live")
        yield frame
    except Exception as e:  # noqa: BLE001
        state.message = (friendly(e), "error")
        yield status_only(state)


def on_pause(state: PlaygroundState) -> None:
    state.stop.set()


def on_reset(state: PlaygroundState) -> Frame:
    state.stop.set()
    with state.lock:
        state.reset()
        state.message = ("Reset. Press Step or Play to start a new run.", "info")
        return render(state, download=True, baseline=True)


def on_baseline(state: PlaygroundState, *raw) -> Iterator[Frame]:
    """Target-only decoding on the same target, prompt and sampling settings, streamed."""
    state.stop.clear()
    epoch = state.epoch
    try:
        settings = parse_settings(*raw)
        state.message = (f"Loading {settings.target} for the target-only baseline…", "info")
        yield status_only(state)
        result = yield from load_run(state, settings, target_only=True)
        with state.lock:
            recorded = isinstance(result, Replay)
            state.start_baseline(settings, None if recorded else result, result if recorded else None)
            session = state.baseline_session
            state.message = ("Running target-only: one target forward pass per token.", "info")
            frame = render(state, plots=False, inspector=False, baseline=True)
        yield frame
        redraw = Every(PLAY_MIN_INTERVAL_S)
        while True:
            with state.lock:
                if state.epoch != epoch or state.baseline_session is not session:
                    return
                if session.done or state.stop.is_set():
                    break
                session.step()
                frame = render(state, plots=False, inspector=False, baseline=True) if redraw.due(force=session.done) else None
            if frame is not None:
                yield frame
        with state.lock:
            b = session.stats()
            if state.stop.is_set() and not session.done:
                state.message = (f"Target-only paused after {b.new_tokens} tokens ({b.tokens_per_s:.1f} tok/s).", "info")
            elif state.comparable_baseline() is not None and state.steps:
                s = state.stats()
                state.message = (
                    f"Target-only: {b.new_tokens} tokens at {b.tokens_per_s:.1f} tok/s with {b.target_forwards} target "
                    f"forwards. Speculative: {s.tokens_per_s:.1f} tok/s, speedup {s.tokens_per_s / b.tokens_per_s:.2f}×.", "ok")
            else:
                state.message = (
                    f"Target-only: {b.new_tokens} tokens at {b.tokens_per_s:.1f} tok/s. Run the speculative decoder "
                    "on the same prompt and settings (Step / Play) to see the speedup.", "ok")
            frame = render(state, plots=False, inspector=False, baseline=True)
        yield frame
    except Exception as e:  # noqa: BLE001
        state.message = (friendly(e), "error")
        yield status_only(state)


# -- the inspector -----------------------------------------------------------------------------


def on_pick(state: PlaygroundState, evt: gr.EventData) -> Frame:
    """A token was clicked: inspect its step (at the clicked position)."""
    try:
        step = int(evt.step)
        pos = int(evt.pos)
    except (AttributeError, TypeError, ValueError):
        return {}
    with state.lock:
        if not 0 <= step < len(state.steps):
            return {}
        state.select(step, pos)
        return render(state, plots=False)


def on_step_slider(state: PlaygroundState, value: Any) -> Frame:
    with state.lock:
        try:
            state.select(int(value) - 1)
        except (TypeError, ValueError):
            return {}
        return render(state, plots=False)


def on_position(state: PlaygroundState, index: Any) -> Frame:
    with state.lock:
        if index is None or not state.steps:
            return {}
        state.selected_pos = int(index)
        return render(state, plots=False, run=False)


def on_table_pick(state: PlaygroundState, evt: gr.EventData) -> Frame:
    """A row of the draft table was clicked: chart that position."""
    try:
        pos = int(evt.pos)
    except (AttributeError, TypeError, ValueError):
        return {}
    with state.lock:
        if state.shown_step() is None:
            return {}
        state.selected_pos = pos
        return render(state, run=False, plots=False)


def on_load_trace(state: PlaygroundState, path: Any) -> Frame:
    state.stop.set()
    try:
        if not path:
            raise ValueError("no file was uploaded")
        with state.lock:
            state.epoch += 1
            state.load_trace(str(path))
            h = state.session.header
            what = f"{h.get('target', '?')} + {h.get('proposer', '?')}, k={h.get('k', '?')}, {trace_summary(h)}"
            state.message = (
                f"Loaded a trace of {len(state.session.records)} steps ({what}). Click tokens to inspect them, Play to "
                "replay it step by step, Reset to go back to live mode.", "ok")
            return render(state, download=True)
    except Exception as e:  # noqa: BLE001
        state.message = (friendly(e), "error")
        return status_only(state)


# -- the start-up preparation, said before the first click ---------------------------------------


STARTUP_TICK_S = 1.0  # the note under the buttons is redrawn this often while the preparation runs


def startup_note() -> str:
    """What a Step pressed now would wait for (the start-up preparation of the default models) and
    about how long, as the page shows it before any click; "" when a Step would not wait: a page
    that looked ready and then sat 10-22 s on its first Step told nothing (issue 52)."""
    from ..app.warmup import STARTUP

    line = STARTUP.ahead()
    return viz.message_html(line, "info") if line else ""


def on_startup_tick() -> tuple[Any, Any]:
    """The timer's tick: the note (hidden once the preparation is over) and the timer, which stops then."""
    from ..app.warmup import STARTUP

    note = startup_note()
    return gr.update(value=note, visible=bool(note)), gr.Timer(active=STARTUP.running)


# -- the settings' controls ----------------------------------------------------------------------


def on_target_change(target: str, proposer: str, draft: str) -> Any:
    """Pair a built-in target with a sensible draft (its own int8 copy; the other family's
    model for the re-tokenizing proposer), unless the user typed a draft; the menu offers only
    the drafts whose tokenizer can serve this target (runs.draft_menu)."""
    new = auto_draft(target, proposer, draft)
    choices = runs.draft_menu(target, proposer, new or draft)
    return gr.update(choices=choices, **({"value": new} if new and new != draft else {}))


def on_proposer_change(target: str, proposer: str, draft: str) -> tuple[Any, Any, Any]:
    """The draft, layers and options boxes for a proposer (a spec prefix): shown where it takes them,
    each hint from the proposer's registry entry (replacing the last proposer's, "" where it has
    none), the draft menu the drafts its tokenizer rule allows."""
    uses = proposer in USES_DRAFT_MODEL
    new = auto_draft(target, proposer, draft) if uses else None
    hint = runs.box_hint(proposer)
    draft_update = gr.update(visible=uses, info=hint if uses else "",
                             choices=runs.draft_menu(target, proposer, new or draft),
                             **({"value": new} if new and new != draft else {}))
    known = proposer in PROPOSERS
    takes = proposer in TAKES_OPTIONS and known
    opts = gr.update(visible=proposer in TAKES_OPTIONS, info=runs.options_hint(proposer) if takes else "",
                     placeholder=runs.options_example(proposer) if takes else "")
    layers = proposer in TAKES_LAYERS
    return draft_update, gr.update(visible=layers, **({"info": hint} if layers else {})), opts


def on_auto_k(target: str, proposer: str, k: float) -> Any:
    """The k slider when the proposer turns to ``auto``: the saved pick's k (``specviz advise``),
    capped by the slider's hosting limit; unchanged for any other proposer or with no pick saved
    (the run then says how to get one)."""
    if (proposer or "").strip() != "auto":
        return gr.update()
    advice = runs.saved_advice(target, "auto", int(k or 1))
    return gr.update() if advice is None else gr.update(value=max(1, min(advice.k, Limits.from_env().max_k)))


__all__ = [
    "Defaults", "auto_draft", "draft_choices", "ensure_live_session", "load_run", "on_baseline", "on_charts", "on_load_trace",
    "on_auto_k", "on_pause", "on_pick", "on_play", "on_position", "on_proposer_change", "on_reset", "on_step", "on_step_slider",
    "on_startup_tick", "on_table_pick", "on_target_change", "startup_note", "target_choices",
]
