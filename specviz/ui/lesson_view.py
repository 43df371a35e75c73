"""The lesson's views: the "why this speedup?" card, the race, a step in phases, the token tree of
a tree step, the step/rejection/phase navigation, the Play speed, the guided tours' buttons and
the page's keyboard script.

Layout pieces are built here and placed by :func:`specviz.ui.playground_tab.build_playground`;
their HTML and figures come from :mod:`specviz.viz` (explain, race, phases, tree); their events
are :mod:`specviz.ui.lesson`'s. :func:`render_lesson` gives their values by name, as
:func:`specviz.ui.playground_view.render` does for the rest of the playground.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, fields
from typing import Any

import gradio as gr

from ..app import runs
from ..viz.explain import explain_run
from ..viz.guess import guess_html, next_to_guess
from ..viz.numbers import Reveal, reveal
from ..viz.phases import step_phase_html
from ..viz.race import race_figure, race_html
from ..viz.styles import keys_help_html
from ..viz.tree import chain_view, tree_figure, tree_mask_figure
from ..viz.whatif import WHATIF_MAX_K, whatif_curve
from .state import PlaygroundState
from .whatif_view import _run as whatif_run
from .whatif_view import advice_outputs, whatif_outputs

# Play speed: the menu's label -> the pause between steps in seconds
SPEEDS = {"as fast as it runs": 0.0, "2 steps/s": 0.5, "1 step/s": 1.0, "1 step / 3 s": 3.0}
WHEN_IT_PAYS = ("What pays where: speculation trades extra work per target pass for fewer passes. On a CPU a draft "
                "model's token costs a good part of a target step, so prompt lookup (free drafts) pays most on text "
                "that repeats the prompt (code, extraction, quoting); a draft model pays more on a GPU, where the wider "
                "verify pass is nearly free; the target's own first layers (early exit) rarely guess right.")


@dataclass
class LessonView:
    """The lesson's components that every render updates, by name (see :func:`render_lesson`)."""

    why: gr.HTML
    race_box: gr.Column
    race_plot: gr.Plot
    race: gr.HTML
    phase: gr.HTML
    tree_row: gr.Row
    tree: gr.Plot
    mask: gr.Plot
    guess: gr.HTML  # "guess first": the question, the latest verdict, the score
    guess_accept: gr.Button
    guess_reject: gr.Button
    whatif_a: gr.Slider  # the what-if panel (specviz.ui.whatif_view)
    whatif_k: gr.Slider
    whatif_c: gr.Slider
    whatif_plot: gr.Plot
    whatif_note: gr.HTML
    advice: gr.HTML  # the advisor's saved prediction for the chosen configuration (specviz.ui.whatif_view)

    def named(self) -> dict[str, Any]:
        """{output name: component}."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


LESSON_OUTPUTS: tuple[str, ...] = tuple(f.name for f in fields(LessonView))


# Typing a model id and pressing Enter must keep what was typed: Gradio's dropdown would pick the
# first menu item the text filters to ("gemma-3-270m" -> "gemma-3-270m@int8"). Enter in a model box
# commits the typed text (a blur, as allow_custom_value does), unless an item was chosen with the arrows.
MODEL_BOX_JS = """() => {
  if (window.__svModelBoxes) return;
  window.__svModelBoxes = true;
  const BOXES = "#sv-target, #sv-draft";
  let arrowed = false;
  document.addEventListener("input", (e) => { if (e.target?.closest?.(BOXES)) arrowed = false; }, true);
  document.addEventListener("keydown", (e) => {
    const input = e.target;
    if (!input || input.tagName !== "INPUT" || !input.closest(BOXES)) return;
    if (e.key === "ArrowDown" || e.key === "ArrowUp") { arrowed = true; return; }
    if (e.key !== "Enter" || arrowed) return;
    e.preventDefault();
    e.stopImmediatePropagation();
    input.blur();
  }, true);
}"""

# A slider puts a typed value outside its range back in range; say so, naming the field, instead of
# clamping silently (k = 0 becomes 1, temperature -1 becomes 0).
CLAMP_JS = """() => {
  if (window.__svClampNotes) return;
  window.__svClampNotes = true;
  const FIELDS = %s;
  const check = (e) => {
    const input = e.target;
    if (!input || input.tagName !== "INPUT" || input.type !== "number") return;
    const block = input.closest(Object.keys(FIELDS).map((id) => "#" + id).join(", "));
    if (!block) return;
    const lo = parseFloat(input.min), hi = parseFloat(input.max), x = parseFloat(input.value);
    let note = block.querySelector(".sv-clamp-note");
    if (Number.isNaN(x) || ((Number.isNaN(lo) || x >= lo) && (Number.isNaN(hi) || x <= hi))) { note?.remove(); return; }
    const to = Number.isNaN(lo) || x > lo ? hi : lo;
    if (!note) { note = document.createElement("div"); note.className = "sv-clamp-note sv-msg sv-msg-warn"; block.appendChild(note); }
    note.textContent = `${FIELDS[block.id]} must be from ${lo} to ${hi}: ${input.value} is set to ${to}.`;
  };
  document.addEventListener("input", check, true);
  document.addEventListener("change", check, true);
}"""
CLAMPED = {"sv-k": "k (tokens drafted per step)", "sv-temperature": "Temperature", "sv-max-new": "Max new tokens",
           "sv-top-p": "Top-p"}


def page_js() -> str:
    """The page's script for launch(js=...): the keyboard shortcuts, the model boxes' Enter, the
    clamp notes and the tours' arrival (scroll to the moment and focus it)."""
    import json

    from ..viz.scripts import ARRIVE_JS
    from ..viz.styles import lesson_js

    clamp = CLAMP_JS % json.dumps(CLAMPED)
    return f"() => {{ ({lesson_js()})(); ({MODEL_BOX_JS})(); ({clamp})(); ({ARRIVE_JS})(); }}"


# -- rendering ---------------------------------------------------------------------------------


def _proposer_name(state: PlaygroundState) -> str:
    if state.settings is not None:
        return runs.prefix_of(state.settings.proposer)
    spec = str(getattr(state.session, "header", {}).get("proposer", "") or "draft")
    return spec.partition(":")[0]


def _k(state: PlaygroundState) -> int:
    if state.settings is not None:
        return state.settings.k
    try:
        return int(getattr(state.session, "header", {}).get("k", 0) or 0)
    except (TypeError, ValueError):
        return 0


def _k_curve(state: PlaygroundState) -> list[tuple[int, float]]:
    """The what-if chart's curve at this run's own a, c and f on this machine's measured v(k + 1) (the
    chart's :func:`specviz.ui.whatif_view._run`): the card names its best k, the chart's star."""
    run = whatif_run(state)
    if run is None or not run.timed or not run.v_at:
        return []
    return whatif_curve(run.a, run.c, run.v, run.f, WHATIF_MAX_K, run.v_at)


def why_html(state: PlaygroundState) -> str:
    """The "why this speedup?" card of the run (and its target-only run, once there is one)."""
    stats = state.visible_stats()  # a latest step not committed yet is not told
    said = runs.card_note(runs.prefix_of(state.settings.proposer)) if state.settings is not None else ""
    note = f'<p class="sv-why-note sv-muted">{html.escape(said)}</p>' if said else ""
    if stats is None or not state.visible_steps():
        return ('<div class="sv-why sv-why-unknown" data-verdict="none"><div class="sv-why-head">Why this speedup?'
                '</div><p class="sv-muted">Run some steps, then “Run target-only”: this card explains the speedup '
                f'from the run\'s own numbers.</p><p class="sv-muted">{WHEN_IT_PAYS}</p>{note}</div>')
    base = state.comparable_baseline()
    st = state.settings
    story = explain_run(state.visible_steps(), stats, base, k=_k(state), proposer=_proposer_name(state),
                        k_curve=_k_curve(state) if base is not None else (),
                        baseline_steps=state.baseline_steps if base is not None else (),
                        temperature=st.temperature if st is not None else None,
                        lossy=st is not None and st.acceptance == "typical" and st.temperature > 0)
    return story.html() + note


def _race(state: PlaygroundState) -> dict[str, Any]:
    """The race box, shown (with its figure and text) once the run and its target-only run have finished."""
    base = state.comparable_baseline()
    if base is None or not state.steps or not state.done:
        return {"race_box": gr.update(visible=False)}
    spec_start = float(getattr(state.session, "prefill_ms", 0.0) or 0.0)
    base_start = float(getattr(state.baseline_session, "prefill_ms", 0.0) or 0.0)
    steps, bsteps = [chain_view(s) for s in state.steps], list(state.baseline_steps)
    return {"race_box": gr.update(visible=True),
            "race_plot": race_figure(steps, bsteps, spec_start_ms=spec_start, base_start_ms=base_start),
            "race": race_html(steps, bsteps, spec_start_ms=spec_start, base_start_ms=base_start, speed=2.0)}


def shown_of(state: PlaygroundState) -> Reveal | None:
    """What the shown step's phase knows (:func:`specviz.viz.numbers.reveal`); None at commit."""
    rec = state.shown_step()
    if rec is None or state.phase is None:
        return None
    phase, upto = state.phase
    return reveal(chain_view(rec), phase, upto if phase == "decide" else None)


def phase_html(state: PlaygroundState) -> str:
    rec = state.shown_step()
    phase, upto = state.phase or ("commit", -1)
    return step_phase_html(chain_view(rec) if rec is not None else None, phase, upto if phase == "decide" else None)


def guess_outputs(state: PlaygroundState) -> dict[str, Any]:
    """The guess panel and its two buttons (pressable only while the shown phase has a draft to guess)."""
    rec = state.shown_step()
    view, shown = (chain_view(rec) if rec is not None else None), shown_of(state)
    can = next_to_guess(view, shown) is not None
    return {"guess": guess_html(view, shown, state.guesses, lesson=state.lesson_mode), "guess_accept": gr.update(interactive=can),
            "guess_reject": gr.update(interactive=can)}


def render_lesson(state: PlaygroundState, *, run: bool, inspector: bool, chart: bool, baseline: bool,
                  plots: bool = False) -> dict[str, Any]:
    """The lesson's outputs by name (LESSON_OUTPUTS); parts not asked for are left out (unchanged).
    The what-if panel is redrawn with the run plots (``plots``) and after a target-only run."""
    out: dict[str, Any] = {}
    if plots or baseline:
        out.update(whatif_outputs(state))
    if run or baseline:
        out["why"] = why_html(state)
        out.update(advice_outputs(state))
        out.update(_race(state))
    if inspector:
        out["phase"] = phase_html(state)
        out.update(guess_outputs(state))
    if chart:
        rec = state.shown_step()
        tree = bool(rec is not None and rec.tree)
        out["tree_row"] = gr.update(visible=tree)
        if tree:
            out["tree"], out["mask"] = tree_figure(rec, shown=shown_of(state)), tree_mask_figure(rec)
    return out


# -- layout --------------------------------------------------------------------------------------


def build_tours() -> list[tuple[runs.Tour, gr.Button]]:
    with gr.Row(elem_id="sv-tours", elem_classes=["sv-tours"]):
        return [(t, gr.Button(t.button, size="sm", elem_id=f"sv-tour-{t.key}", min_width=120)) for t in runs.TOURS]


def build_why() -> tuple[gr.HTML, gr.Column, gr.Plot, gr.HTML]:
    why = gr.HTML(why_html(PlaygroundState()), elem_id="sv-why")
    with gr.Column(visible=False, elem_id="sv-race-box") as box:
        plot = gr.Plot(show_label=False, elem_id="sv-race-plot")
        race = gr.HTML("", elem_id="sv-race")
    return why, box, plot, race


def build_nav() -> dict[str, gr.Button]:
    ids = [("prev-step", "◀ step"), ("next-step", "step ▶"), ("prev-rejection", "◀ rejection"),
           ("next-rejection", "rejection ▶"), ("prev-phase", "◀ phase"), ("next-phase", "phase ▶")]
    with gr.Row(elem_id="sv-nav", elem_classes=["sv-nav"]):
        buttons = {key: gr.Button(text, size="sm", min_width=70, elem_id=f"sv-{key}") for key, text in ids}
    gr.HTML(keys_help_html(), elem_id="sv-keys")
    return buttons


LESSON_LABEL = "Lesson mode"
LESSON_NOTE = ("Lesson mode: each Step opens in its draft phase and phase ▶ walks it to the verdict (untick it for the "
               "quick mode: each Step committed at once).")


def build_lesson_mode() -> tuple[gr.Checkbox, gr.Button]:
    """The lesson mode switch, on for a first visit (PlaygroundState.lesson_first) and after a tour,
    at the top of the step inspector, "animate this step" (at the Play speed's pace) beside it, and
    a line under them saying what the switch does. The switch's label is two words so that on a
    phone the two fit one short bar that stays at the top of the screen while the inspector is in
    view (style.css): the page's settings come first there, and the switch was ~3,700 px down."""
    with gr.Row(elem_id="sv-lesson-row"):
        box = gr.Checkbox(value=True, label=LESSON_LABEL, elem_id="sv-lesson-mode", scale=3)
        animate = gr.Button("▶ animate this step", size="sm", min_width=140, scale=1, elem_id="sv-animate")
    gr.HTML(f'<div class="sv-lesson-note sv-muted">{html.escape(LESSON_NOTE)}</div>', elem_id="sv-lesson-note",
            padding=False)
    return box, animate


def build_phase() -> gr.HTML:
    return gr.HTML(phase_html(PlaygroundState()), elem_id="sv-phase")


def build_guess() -> tuple[gr.HTML, gr.Button, gr.Button]:
    """Guess first: the panel and the accept / reject buttons (under the step in phases)."""
    with gr.Row(elem_id="sv-guess-row", equal_height=False):
        panel = gr.HTML(guess_html(None, None, PlaygroundState().guesses), elem_id="sv-guess")
        with gr.Column(scale=0, min_width=150, elem_id="sv-guess-buttons"):
            accept = gr.Button("I guess: accept ✓", size="sm", interactive=False, elem_id="sv-guess-accept")
            reject = gr.Button("I guess: reject ✗", size="sm", interactive=False, elem_id="sv-guess-reject")
    return panel, accept, reject


def build_tree() -> tuple[gr.Row, gr.Plot, gr.Plot]:
    """The tree step's tree and attention mask, side by side (hidden for a chain step)."""
    with gr.Row(visible=False, elem_id="sv-tree-row", equal_height=False) as row:
        tree = gr.Plot(show_label=False, min_width=300, elem_id="sv-tree")
        mask = gr.Plot(show_label=False, min_width=300, elem_id="sv-tree-mask")
    return row, tree, mask


def trace_summary(header: dict) -> str:
    """How a trace was sampled, for the load message: "T = 0.8, typical acceptance (LOSSY)"."""
    t = (header.get("sampling") or {}).get("temperature")
    rule = header.get("acceptance") or "exact"
    mode = "greedy (T = 0)" if not t else f"T = {t:g}"
    how = "typical acceptance: LOSSY, the output is not exactly the target's distribution" if rule == "typical" \
        else "exact acceptance"
    return f"{mode}, {how}"
