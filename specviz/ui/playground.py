"""The Playground tab: step through speculative decoding and inspect every decision.

Layout and event wiring only: runs live in :mod:`specviz.core.engine` (through a per-browser
:class:`~specviz.ui.state.PlaygroundState`), HTML and figures come from :mod:`specviz.viz`.
Every handler catches errors and shows them in the page; the session stays usable.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from typing import Any, Iterator

import gradio as gr

from .. import viz
from ..app import runs
from ..app.limits import Limits
from ..app.replay import Replay
from ..viz.scripts import TABLE_JS, TOKENS_JS
from ..viz.tree import chain_view
from . import lesson, zerogpu
from .handlers import friendly_error, plot
from .state import (
    CROSS,
    DRAFT,
    HYBRID,
    PROPOSERS,
    RULES,
    SCHEDULES,
    TAKES_LAYERS,
    TAKES_OPTIONS,
    USES_DRAFT_MODEL,
    PlaygroundState,
    parse_settings,
)
from .threads import in_thread

log = logging.getLogger("specviz.ui")

PLAY_MIN_INTERVAL_S = 0.08  # Play redraws at most this often (tiny models step in milliseconds)
PLAY_CHART_INTERVAL_S = 1.0  # ... and its Plotly charts at most this often (4 charts: ~250 ms of browser CPU)
REPLAY_MAX_DELAY_S = 0.5


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



# -- the view --------------------------------------------------------------------------------

@dataclass
class PlaygroundView:
    """The playground's components (for handlers, tests and the app shell)."""

    state: gr.State
    controls: list[gr.components.Component]
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
    lesson: lesson.LessonView

    @property
    def outputs(self) -> list[gr.components.Component]:
        return [
            self.status, self.tokens, self.metrics, self.baseline, self.step_slider, self.position, self.summary,
            self.table, self.topk, self.acceptance, self.timeline, self.tokens_per_step, self.download,
            *self.lesson.outputs,
        ]


N_OUT = 13 + lesson.N_LESSON  # len(PlaygroundView.outputs)


def skips() -> list[Any]:
    return [gr.skip()] * N_OUT


def render(
    state: PlaygroundState, *, run: bool = True, inspector: bool = True, chart: bool = True, plots: bool = True,
    download: bool = False, baseline: bool = False,
) -> list[Any]:
    """Every output of the view, in PlaygroundView.outputs order; skipped parts stay as they are.

    run: status-independent text (tokens, metrics); inspector: step slider, positions, summary and
    draft table; chart: the p/q chart; plots: the three run plots. The charts are the expensive
    part in the browser (Plotly redraws each twice), so a Step sends them in a second event.
    """
    skip = gr.skip()
    text, kind = state.message
    out: list[Any] = [viz.message_html(text, kind)]
    steps = [chain_view(s) for s in state.steps]  # a tree step as its committed path (chain views)
    if run:
        out += [
            viz.tokens_html(state.prompt_text, steps, selected_step=_shown_index(state)),
            viz.metrics_html(state.stats(), state.comparable_baseline(), engine_ms=state.last_engine_ms),
        ]
    else:
        out += [skip, skip]
    if baseline:
        shown = bool(state.baseline_steps) or state.baseline_session is not None
        b = state.baseline_stats()
        head = "Target-only baseline" + (f" · {b.new_tokens} tokens · {b.tokens_per_s:.1f} tok/s" if b else "")
        body = viz.tokens_html("", state.baseline_steps, empty_hint="Loading the target…")
        out.append(gr.update(value=f'<div class="sv-subtitle">{head}</div>{body}', visible=shown))
    else:
        out.append(skip)
    rec = state.shown_step()
    rec = chain_view(rec) if rec is not None else None
    choices = viz.position_choices(rec)
    pos = state.selected_pos if state.selected_pos is not None else viz.default_position(rec)
    pos = max(0, min(pos, len(choices) - 1)) if choices else 0
    if inspector:
        n = len(steps)
        out += [
            gr.update(maximum=max(2, n), value=(rec.index + 1) if rec else 1, interactive=n > 1),
            gr.update(choices=choices, value=choices[pos] if choices else None),
            viz.step_summary(rec),
            viz.draft_table_html(rec, pos),
        ]
    else:
        out += [skip] * 4
    out.append(plot(viz.topk_figure.spec(rec, pos)) if chart else skip)
    if plots:
        stats = state.stats()
        out += [
            plot(viz.acceptance_by_position_figure.spec(stats)),
            plot(viz.timeline_figure.spec(steps)),
            plot(viz.tokens_per_step_figure.spec(steps)),
        ]
    else:
        out += [skip] * 3
    if download:
        path = state.trace_path if steps else None
        out.append(gr.update(value=path, interactive=bool(path)))
    else:
        out.append(skip)
    return out + lesson.render_lesson(state, run=run, inspector=inspector, chart=chart, baseline=baseline)


def _shown_index(state: PlaygroundState) -> int | None:
    rec = state.shown_step()
    return rec.index if rec is not None else None


def status_only(state: PlaygroundState) -> list[Any]:
    text, kind = state.message
    return [viz.message_html(text, kind)] + [gr.skip()] * (N_OUT - 1)



# -- handlers --------------------------------------------------------------------------------


def ensure_live_session(state: PlaygroundState, raw: tuple) -> Iterator[list[Any]]:
    """Start a live session for the current settings unless one is running for them; yields
    status updates while models load. Raises ValueError for bad settings."""
    settings = parse_settings(*raw)
    with state.lock:
        if state.mode == "live" and state.session is not None and state.settings == settings:
            return
        changed = state.session is not None
    state.message = (f"Loading {settings.describe()}…", "info")
    yield status_only(state)

    progress = lesson.LoadProgress(1 + (settings.proposer in USES_DRAFT_MODEL))

    def on_progress(msg: str) -> None:
        log.info("%s", msg)
        state.message = (progress.line(msg), "info")

    result: Any = None
    if zerogpu.active():  # the GPU is lent per call, in a forked worker: record the run, replay it here
        state.message = (f"Running {settings.describe()} on a ZeroGPU GPU; its steps then replay here…", "info")
        yield status_only(state)
        result = zerogpu.record(settings, state.new_trace_path(settings))
    else:
        for item in in_thread(lambda report: build_decoder(settings, report), on_progress):
            if isinstance(item, tuple):
                result = item[0]
            elif item is not None:
                yield status_only(state)
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


def on_step(state: PlaygroundState, *raw) -> Iterator[list[Any]]:
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
                frame = render(state, chart=False, plots=False)
            else:
                state.message = ("This run has finished. Press Reset (or change a setting) to start a new one.", "info")
                frame = status_only(state)
        yield frame  # the step's text first: the browser shows it while the charts are built
        if stepped:
            yield on_charts(state)
    except Exception as e:  # noqa: BLE001 - shown in the page, never a traceback
        state.message = (friendly(e), "error")
        yield status_only(state)


def on_charts(state: PlaygroundState) -> list[Any]:
    """The second frame of a Step: the p/q chart, the run plots and the trace download."""
    with state.lock:
        return render(state, run=False, inspector=False, download=state.mode == "live" and bool(state.steps))


def _step_message(state: PlaygroundState, record) -> tuple[str, str]:
    ms = state.last_engine_ms or 0.0
    where = "trace" if state.mode == "trace" else "engine"
    head = f"{state.note}Step {record.index + 1}: {viz.step_summary_text(record)} ({where} {ms:.0f} ms)."
    state.note = ""
    if state.done:
        why = {"eos": "end of sequence", "length": "max new tokens reached"}.get(record.finished or "", "end of trace")
        return (f"{head} Finished: {why}.", "ok")
    return (head, "info")


def on_play(state: PlaygroundState, *raw) -> Iterator[list[Any]]:
    """Step until done, redrawing after each step; Pause stops it after the current step."""
    state.stop.clear()
    try:
        if state.mode == "live":
            yield from ensure_live_session(state, raw)
        epoch = state.epoch  # a Reset, a trace load or a new run (another event) stops this loop
        if state.mode == "live":
            if state.session is not None and state.session.done:
                state.message = ("This run has finished. Press Reset (or change a setting) to start a new one.", "info")
                yield status_only(state)
                return
        else:
            with state.lock:
                if state.done:
                    state.rewind_trace()
                frame = render(state)
            yield frame
        last = last_charts = 0.0
        while True:
            with state.lock:
                if state.epoch != epoch:
                    return
                if state.done or state.stop.is_set():
                    break
                record = state.step()
                state.message = _step_message(state, record)
                now = time.perf_counter()
                frame = None
                if now - last >= PLAY_MIN_INTERVAL_S or state.done:
                    charts = now - last_charts >= PLAY_CHART_INTERVAL_S or state.play_delay_s > 0
                    frame = render(state, chart=charts, plots=charts)
                    last, last_charts = now, (now if charts else last_charts)
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


def on_reset(state: PlaygroundState) -> list[Any]:
    state.stop.set()
    with state.lock:
        state.reset()
        state.message = ("Reset. Press Step or Play to start a new run.", "info")
        return render(state, download=True, baseline=True)


def on_baseline(state: PlaygroundState, *raw) -> Iterator[list[Any]]:
    """Target-only decoding on the same target, prompt and sampling settings, streamed."""
    state.stop.clear()
    epoch = state.epoch
    try:
        settings = parse_settings(*raw)
        state.message = (f"Loading {settings.target} for the target-only baseline…", "info")
        yield status_only(state)

        progress = lesson.LoadProgress(1)

        def on_progress(msg: str) -> None:
            state.message = (progress.line(msg), "info")

        decoder = recorded = None
        if zerogpu.active():
            recorded = zerogpu.record(settings, state.new_trace_path(settings, target_only=True), target_only=True)
        else:
            for item in in_thread(lambda report: build_decoder(settings, report, target_only=True), on_progress):
                if isinstance(item, tuple):
                    decoder = item[0]
                elif item is not None:
                    yield status_only(state)
        with state.lock:
            state.start_baseline(settings, decoder, recorded)
            session = state.baseline_session
            state.message = ("Running target-only: one target forward pass per token.", "info")
            frame = render(state, plots=False, inspector=False, baseline=True)
        yield frame
        last = 0.0
        while True:
            with state.lock:
                if state.epoch != epoch or state.baseline_session is not session:
                    return
                if session.done or state.stop.is_set():
                    break
                session.step()
                now = time.perf_counter()
                frame = None
                if now - last >= PLAY_MIN_INTERVAL_S or session.done:
                    frame = render(state, plots=False, inspector=False, baseline=True)
            if frame is not None:
                last = now
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


def on_pick(state: PlaygroundState, evt: gr.EventData) -> list[Any]:
    """A token was clicked: inspect its step (at the clicked position)."""
    try:
        step = int(evt.step)
        pos = int(evt.pos)
    except (AttributeError, TypeError, ValueError):
        return skips()
    with state.lock:
        if not 0 <= step < len(state.steps):
            return skips()
        state.select(step, pos)
        return render(state, plots=False)


def on_step_slider(state: PlaygroundState, value: Any) -> list[Any]:
    with state.lock:
        try:
            state.select(int(value) - 1)
        except (TypeError, ValueError):
            return skips()
        return render(state, plots=False)


def on_position(state: PlaygroundState, index: Any) -> list[Any]:
    with state.lock:
        if index is None or not state.steps:
            return skips()
        state.selected_pos = int(index)
        return render(state, plots=False, run=False)


def on_table_pick(state: PlaygroundState, evt: gr.EventData) -> list[Any]:
    """A row of the draft table was clicked: chart that position."""
    try:
        pos = int(evt.pos)
    except (AttributeError, TypeError, ValueError):
        return skips()
    with state.lock:
        if state.shown_step() is None:
            return skips()
        state.selected_pos = pos
        return render(state, run=False, plots=False)


def on_load_trace(state: PlaygroundState, path: Any) -> list[Any]:
    state.stop.set()
    try:
        if not path:
            raise ValueError("no file was uploaded")
        with state.lock:
            state.epoch += 1
            state.load_trace(str(path))
            h = state.session.header
            what = f"{h.get('target', '?')} + {h.get('proposer', '?')}, k={h.get('k', '?')}, {lesson.trace_summary(h)}"
            state.message = (
                f"Loaded a trace of {len(state.session.records)} steps ({what}). Click tokens to inspect them, Play to "
                "replay it step by step, Reset to go back to live mode.", "ok")
            return render(state, download=True)
    except Exception as e:  # noqa: BLE001
        state.message = (friendly(e), "error")
        return status_only(state)


_DRAFT_INFO = {DRAFT: "must share the target's tokenizer",
               HYBRID: "drafts only when the n-gram finds no match; must share the target's tokenizer", CROSS: "any tokenizer: its text is re-tokenized (q = 1)"}


def on_target_change(target: str, proposer: str, draft: str) -> Any:
    """Pair a built-in target with a sensible draft (its own int8 copy; the other family's
    model for the re-tokenizing proposer), unless the user typed a draft."""
    new = auto_draft(target, proposer, draft)
    return gr.update(value=new) if new and new != draft else gr.skip()


def on_proposer_change(target: str, proposer: str, draft: str) -> tuple[Any, Any, Any]:
    new = auto_draft(target, proposer, draft) if proposer in USES_DRAFT_MODEL else None
    draft_update = gr.update(visible=proposer in USES_DRAFT_MODEL, info=_DRAFT_INFO.get(proposer),
                             **({"value": new} if new and new != draft else {}))
    known = proposer in PROPOSERS
    opts = gr.update(visible=proposer in TAKES_OPTIONS, info=runs.options_hint(proposer) if known else None,
                     placeholder=runs.options_example(proposer) if known else None)
    return draft_update, gr.update(visible=proposer in TAKES_LAYERS), opts


def settings_inputs(named: dict[str, Any]) -> list[Any]:
    """The controls in parse_settings' order (a dict built in that order)."""
    return list(named.values())


# -- layout ----------------------------------------------------------------------------------


def build_playground(defaults: Defaults | None = None) -> PlaygroundView:
    """Lay out the playground (inside a gr.Blocks / gr.Tab context) and wire its events."""
    d = defaults or Defaults.from_env()
    lim = Limits.from_env()  # the sliders stop at the host's caps
    examples = runs.example_prompts()
    state = gr.State(PlaygroundState, delete_callback=lambda s: s.close() if isinstance(s, PlaygroundState) else None)

    with gr.Row(equal_height=False, elem_id="sv-main-row"):
        with gr.Column(scale=1, min_width=280, elem_id="sv-settings"):
            target = gr.Dropdown(target_choices(d), value=d.target, label="Target model", allow_custom_value=True,
                                 info="built-in, Hugging Face id or local directory", elem_id="sv-target")
            proposer = gr.Radio(list(PROPOSERS), value=d.proposer, label="Proposer", elem_id="sv-proposer")
            draft = gr.Dropdown(draft_choices(d), value=d.draft, label="Draft model", allow_custom_value=True,
                                info=_DRAFT_INFO[d.proposer] if d.proposer in _DRAFT_INFO else None,
                                visible=d.proposer in USES_DRAFT_MODEL, elem_id="sv-draft")
            layers = gr.Number(value=4, label="Early-exit layers", info="the target's first L layers draft",
                               precision=0, visible=d.proposer in TAKES_LAYERS, elem_id="sv-layers")
            options = gr.Textbox("", label="Proposer options", info=runs.options_hint(d.proposer), max_lines=1,
                                 placeholder=runs.options_example(d.proposer), visible=d.proposer in TAKES_OPTIONS,
                                 elem_id="sv-options")
            k = gr.Slider(1, lim.max_k, value=min(d.k, lim.max_k), step=1, label="k", info="tokens drafted per step", elem_id="sv-k")
            schedule = gr.Dropdown(list(SCHEDULES), value="constant", label="k schedule",
                                   info="how k changes from step to step", elem_id="sv-schedule")
            rule = gr.Radio(list(RULES), value="exact", label="Acceptance rule",
                                  info="exact keeps the target's distribution; typical is LOSSY (Medusa, vLLM) "
                                       "and only applies when sampling (T > 0)", elem_id="sv-acceptance")
            max_new = gr.Slider(1, lim.max_new_tokens, value=d.max_new_tokens, step=1, label="Max new tokens", elem_id="sv-max-new")
            with gr.Accordion("Sampling", open=True):
                temperature = gr.Slider(0, 2, value=d.temperature, step=0.05, label="Temperature", info="0 = greedy",
                                        elem_id="sv-temperature")
                with gr.Row():
                    top_p = gr.Number(value=d.top_p, label="Top-p", info="1 = off", minimum=0, maximum=1, step=0.05,
                                      min_width=80, elem_id="sv-top-p")
                    top_k = gr.Number(value=d.top_k, label="Top-k", info="0 = off", precision=0, min_width=80,
                                      elem_id="sv-top-k")  # no minimum: parse_settings names a bad value
                    seed = gr.Number(value=d.seed, label="Seed", info="reproducible", precision=0, min_width=80,
                                     elem_id="sv-seed")
            chat = gr.Checkbox(value=True, label="Use the chat template (when the model has one)", elem_id="sv-chat")
        with gr.Column(scale=3, min_width=320, elem_id="sv-run-column"):
            tours = lesson.build_tours()
            prompt = gr.Textbox(value=d.prompt, label="Prompt", lines=3, max_lines=8, elem_id="sv-prompt")
            if examples:
                example = gr.Dropdown([label for label, _ in examples], value=None, label="Example prompts (Spec-Bench)",
                                      elem_id="sv-examples", container=True)
                example.input(lambda label: dict(examples).get(label, gr.skip()), [example], [prompt], queue=False)
            with gr.Row(elem_id="sv-buttons"):
                step_btn = gr.Button("Step", variant="primary", elem_id="sv-step-btn")
                play_btn = gr.Button("▶ Play", variant="primary", elem_id="sv-play-btn")
                pause_btn = gr.Button("❚❚ Pause", elem_id="sv-pause-btn")
                reset_btn = gr.Button("↺ Reset", elem_id="sv-reset-btn")
                base_btn = gr.Button("Run target-only", elem_id="sv-baseline-btn", min_width=150)
                speed = gr.Dropdown(list(lesson.SPEEDS), value=next(iter(lesson.SPEEDS)), label="Play speed",
                                    min_width=150, elem_id="sv-speed")
            status = gr.HTML(viz.message_html("Press Step to run one speculative step, or Play to run to the end.", "info"),
                             elem_id="sv-status")
            metrics = gr.HTML(viz.metrics_html(None), elem_id="sv-metrics")
            why, race_box, race_plot, race = lesson.build_why()
            gr.HTML(viz.legend_html(), elem_id="sv-legend")
            tokens = gr.HTML(viz.tokens_html(d.prompt, []), elem_id="sv-tokens", elem_classes=["sv-pickable"],
                             js_on_load=TOKENS_JS)
            baseline = gr.HTML("", elem_id="sv-baseline", visible=False, js_on_load=TOKENS_JS)

    gr.HTML('<div class="sv-section-title">Step inspector</div>')
    with gr.Row(equal_height=False):
        with gr.Column(scale=5, min_width=300):
            step_slider = gr.Slider(1, 2, value=1, step=1, label="Step", interactive=False, elem_id="sv-step-slider")
            nav = lesson.build_nav()
            phase = lesson.build_phase()
            position = gr.Radio([], label="Position in the step", type="index", elem_id="sv-position")
            summary = gr.HTML(viz.step_summary(None), elem_id="sv-summary")
            table = gr.HTML(viz.draft_table_html(None), elem_id="sv-draft-table", js_on_load=TABLE_JS)
        with gr.Column(scale=6, min_width=300):
            topk = gr.Plot(viz.topk_figure(None), show_label=False, elem_id="sv-topk")
    tree_row, tree, mask = lesson.build_tree()
    with gr.Row(elem_classes=["sv-plots"]):
        acceptance = gr.Plot(viz.acceptance_by_position_figure(None), show_label=False, min_width=300,
                             elem_id="sv-plot-acceptance")
        timeline = gr.Plot(viz.timeline_figure([]), show_label=False, min_width=300, elem_id="sv-plot-timeline")
        tps = gr.Plot(viz.tokens_per_step_figure([]), show_label=False, min_width=300, elem_id="sv-plot-tokens")
    with gr.Row():
        download = gr.DownloadButton("⤓ Download trace (JSONL)", value=None, interactive=False, elem_id="sv-download", size="md")
        upload = gr.UploadButton("⤒ Load a trace to replay", file_types=[".jsonl", ".json", ".txt"], type="filepath",
                                 elem_id="sv-upload", size="md")

    named = dict(target=target, proposer=proposer, draft=draft, k=k, temperature=temperature, top_p=top_p, top_k=top_k,
                 seed=seed, max_new_tokens=max_new, prompt=prompt, chat=chat, schedule=schedule, layers=layers, rule=rule,
                 options=options)  # parse_settings' order
    controls = list(named.values())
    view = PlaygroundView(state, controls, status, tokens, metrics, baseline, step_slider, position, summary, table,
                          topk, acceptance, timeline, tps, download,
                          lesson.LessonView(why, race_box, race_plot, race, phase, tree_row, tree, mask))
    outs = view.outputs
    engine = dict(concurrency_id="specviz-engine", concurrency_limit=_concurrency(), show_progress="hidden")
    inputs = [state, *controls]

    proposer.change(on_proposer_change, [target, proposer, draft], [draft, layers, options], queue=False)
    lesson.wire(view, named, dict(nav=nav, speed=speed, tours=tours), engine)
    target.change(on_target_change, [target, proposer, draft], [draft], queue=False)
    step_btn.click(on_step, inputs, outs, trigger_mode="multiple", **engine)
    play_btn.click(on_play, inputs, outs, **engine)
    base_btn.click(on_baseline, inputs, outs, **engine)
    pause_btn.click(on_pause, [state], None, queue=False)
    reset_btn.click(on_reset, [state], outs, concurrency_limit=None, show_progress="hidden")
    tokens.pick(on_pick, [state], outs, concurrency_limit=None, show_progress="hidden")
    step_slider.release(on_step_slider, [state, step_slider], outs, concurrency_limit=None, show_progress="hidden")
    position.input(on_position, [state, position], outs, concurrency_limit=None, show_progress="hidden")
    table.pick(on_table_pick, [state], outs, concurrency_limit=None, show_progress="hidden")
    upload.upload(on_load_trace, [state, upload], outs, concurrency_limit=None, show_progress="hidden").then(
        lesson.trace_controls, [state], [temperature, rule], queue=False)
    return view


def _concurrency() -> int:
    try:
        return max(1, int(os.environ.get("SPECVIZ_CONCURRENCY", "2")))
    except ValueError:
        return 2
