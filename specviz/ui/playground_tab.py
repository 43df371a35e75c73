"""The Playground tab's layout and events: :func:`build_playground` lays out the controls, the run
and the step inspector (with the lesson's pieces) and wires each event to its handler
(:mod:`specviz.ui.playground`, :mod:`specviz.ui.lesson`), outputs by name
(:func:`specviz.ui.handlers.by_name`).
"""

from __future__ import annotations

import gradio as gr

from .. import viz
from ..app import runs
from ..app.limits import Limits
from ..viz.scripts import TABLE_JS, TOKENS_JS
from . import lesson, lesson_view, whatif_view
from . import playground as pg
from .handlers import by_name, engine_concurrency
from .playground_view import PlaygroundView
from .state import MENU, RULES, SCHEDULES, TAKES_LAYERS, TAKES_OPTIONS, USES_DRAFT_MODEL, PlaygroundState

__all__ = ["build_playground"]


def build_playground(defaults: pg.Defaults | None = None) -> PlaygroundView:
    """Lay out the playground (inside a gr.Blocks / gr.Tab context) and wire its events."""
    d = defaults or pg.Defaults.from_env()
    lim = Limits.from_env()  # the sliders stop at the host's caps
    examples = runs.example_prompts()
    state = gr.State(PlaygroundState.lesson_first, delete_callback=lambda s: s.close() if isinstance(s, PlaygroundState) else None)

    with gr.Row(equal_height=False, elem_id="sv-main-row"):
        with gr.Column(scale=1, min_width=280, elem_id="sv-settings"):
            target = gr.Dropdown(pg.target_choices(d), value=d.target, label="Target model", allow_custom_value=True,
                                 info="built-in, Hugging Face id or local directory", elem_id="sv-target")
            proposer = gr.Radio(list(MENU), value=d.proposer, label="Proposer", elem_id="sv-proposer")  # (label, prefix)
            draft = gr.Dropdown(runs.draft_menu(d.target, d.proposer, d.draft), value=d.draft, label="Draft model",
                                allow_custom_value=True, info=runs.box_hint(d.proposer) if d.proposer in USES_DRAFT_MODEL else "",
                                visible=d.proposer in USES_DRAFT_MODEL,
                                elem_id="sv-draft")
            layers = gr.Number(value=4, label="Early-exit layers", info=runs.box_hint(TAKES_LAYERS[0]) if TAKES_LAYERS else "",
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
            tours = lesson_view.build_tours()
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
                speed = gr.Dropdown(list(lesson_view.SPEEDS), value=next(iter(lesson_view.SPEEDS)), label="Play speed",
                                    min_width=190, elem_id="sv-speed")  # "as fast as it runs" reads whole
            startup = gr.HTML(pg.startup_note, elem_id="sv-startup", padding=False)  # before a click: Step waits?
            startup_timer = gr.Timer(pg.STARTUP_TICK_S, active=True)
            status = gr.HTML(viz.message_html("Press Step to run one speculative step, or Play to run to the end.", "info"),
                             elem_id="sv-status")
            metrics = gr.HTML(viz.metrics_html(None), elem_id="sv-metrics")
            why, race_box, race_plot, race = lesson_view.build_why()
            advice = whatif_view.build_advice(d.target, d.proposer, d.draft, d.k)
            gr.HTML(viz.legend_html(), elem_id="sv-legend")
            tokens = gr.HTML(viz.tokens_html(d.prompt, []), elem_id="sv-tokens", elem_classes=["sv-pickable"],
                             js_on_load=TOKENS_JS)
            baseline = gr.HTML("", elem_id="sv-baseline", visible=False, js_on_load=TOKENS_JS)

    with gr.Column(elem_id="sv-inspector"):  # the box a phone's lesson switch sticks to the top of (style.css)
        gr.HTML('<div class="sv-section-title">Step inspector</div>')
        lesson_mode, animate = lesson_view.build_lesson_mode()  # first: how each Step opens (on for a student)
        with gr.Row(equal_height=False, elem_id="sv-inspector-row"):  # on a phone: one column, the chart under the phases
            with gr.Column(scale=5, min_width=300, elem_id="sv-inspector-left"):
                step_slider = gr.Slider(1, 2, value=1, step=1, label="Step", interactive=False, elem_id="sv-step-slider")
                nav = lesson_view.build_nav()
                phase = lesson_view.build_phase()
                guess, guess_accept, guess_reject = lesson_view.build_guess()
                position = gr.Radio([], label="Position in the step", type="index", elem_id="sv-position")
                summary = gr.HTML(viz.step_summary(None), elem_id="sv-summary")
                table = gr.HTML(viz.draft_table_html(None), elem_id="sv-draft-table", js_on_load=TABLE_JS)
            with gr.Column(scale=6, min_width=300, elem_id="sv-inspector-right"):
                topk = gr.Plot(viz.topk_figure(None), show_label=False, elem_id="sv-topk")
    tree_row, tree, mask = lesson_view.build_tree()
    with gr.Row(elem_classes=["sv-plots"]):
        acceptance = gr.Plot(viz.acceptance_by_position_figure(None), show_label=False, min_width=300,
                             elem_id="sv-plot-acceptance")
        timeline = gr.Plot(viz.timeline_figure([]), show_label=False, min_width=300, elem_id="sv-plot-timeline")
        tps = gr.Plot(viz.tokens_per_step_figure([]), show_label=False, min_width=300, elem_id="sv-plot-tokens")
    whatif, whatif_again = whatif_view.build_whatif()
    with gr.Row():
        download = gr.DownloadButton("⤓ Download trace (JSONL)", value=None, interactive=False, elem_id="sv-download", size="md")
        upload = gr.UploadButton("⤒ Load a trace to replay", file_types=[".jsonl", ".json", ".txt"], type="filepath",
                                 elem_id="sv-upload", size="md")

    controls = dict(target=target, proposer=proposer, draft=draft, k=k, temperature=temperature, top_p=top_p, top_k=top_k,
                    seed=seed, max_new_tokens=max_new, prompt=prompt, chat=chat, schedule=schedule, layers=layers, rule=rule,
                    options=options)  # parse_settings' order
    view = PlaygroundView(state, controls, status, tokens, metrics, baseline, step_slider, position, summary, table,
                          topk, acceptance, timeline, tps, download,
                          lesson_view.LessonView(why, race_box, race_plot, race, phase, tree_row, tree, mask,
                                                 guess, guess_accept, guess_reject, **whatif, advice=advice))
    outs, named = view.outputs, view.named()
    engine = dict(concurrency_id="specviz-engine", concurrency_limit=engine_concurrency(), show_progress="hidden")
    fast = dict(concurrency_limit=None, show_progress="hidden")
    inputs = [state, *controls.values()]

    proposer.change(pg.on_proposer_change, [target, proposer, draft], [draft, layers, options], queue=False)
    proposer.change(pg.on_auto_k, [target, proposer, k], [k], queue=False)  # auto: the saved pick's k
    lesson.wire(view, dict(nav=nav, speed=speed, tours=tours, lesson_mode=lesson_mode, animate=animate,
                           guess_accept=guess_accept, guess_reject=guess_reject), engine)
    whatif_view.wire(view, whatif_again)
    target.change(pg.on_target_change, [target, proposer, draft], [draft], queue=False)
    step_btn.click(by_name(pg.on_step, named), inputs, outs, trigger_mode="multiple", **engine)
    play_btn.click(by_name(pg.on_play, named), inputs, outs, **engine)
    base_btn.click(by_name(pg.on_baseline, named), inputs, outs, **engine)
    pause_btn.click(pg.on_pause, [state], None, queue=False)
    startup_timer.tick(pg.on_startup_tick, None, [startup, startup_timer], queue=False, show_progress="hidden")
    reset_btn.click(by_name(pg.on_reset, named), [state], outs, **fast)
    tokens.pick(by_name(pg.on_pick, named), [state], outs, **fast)
    step_slider.release(by_name(pg.on_step_slider, named), [state, step_slider], outs, **fast)
    position.input(by_name(pg.on_position, named), [state, position], outs, **fast)
    table.pick(by_name(pg.on_table_pick, named), [state], outs, **fast)
    upload.upload(by_name(pg.on_load_trace, named), [state, upload], outs, **fast).then(
        by_name(lesson.trace_controls, controls), [state], list(controls.values()), queue=False)
    return view
