"""The playground as a lesson: the "why this speedup?" card, the race, a step in phases, the token
tree of a tree step, step/rejection/phase navigation, the Play speed and the guided tours.

Layout pieces are built here and placed by :func:`specviz.ui.playground.build_playground`; their
HTML and figures come from :mod:`specviz.viz` (explain, race, phases, tree). The handlers reuse
the playground's ``render`` so every view stays in step with the inspector.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

import gradio as gr

from ..app import runs
from ..core.records import StepRecord
from ..viz.explain import explain_run
from ..viz.phases import neighbour_step, next_frame, next_rejection, previous_frame, previous_rejection, step_phase_html
from ..viz.race import race_figure, race_html
from ..viz.styles import keys_help_html
from ..viz.tree import chain_view, tree_figure, tree_mask_figure
from .state import PlaygroundState

# Play speed: the menu's label -> the pause between steps in seconds
SPEEDS = {"as fast as it runs": 0.0, "2 steps/s": 0.5, "1 step/s": 1.0, "1 step / 3 s": 3.0}
TOUR_MAX_STEPS = 200  # a tour that looks for a moment gives up after this many steps
EARLY_NOTE = ("Early exit drafts with the target's own first layers and its output head; this model was not trained "
              "for that (LayerSkip-style models are), so its drafts are mostly junk: the struck-through text shows it.")


@dataclass
class LessonView:
    """The lesson's components that every render updates (see :func:`render_lesson`)."""

    why: gr.HTML
    race_box: gr.Column
    race_plot: gr.Plot
    race: gr.HTML
    phase: gr.HTML
    tree_row: gr.Row
    tree: gr.Plot
    mask: gr.Plot

    @property
    def outputs(self) -> list[gr.components.Component]:
        return [self.why, self.race_box, self.race_plot, self.race, self.phase, self.tree_row, self.tree, self.mask]


N_LESSON = 8
WHEN_IT_PAYS = ("What pays where: speculation trades extra work per target pass for fewer passes. On a CPU a draft "
                "model's token costs a good part of a target step, so prompt lookup (free drafts) pays most on text "
                "that repeats the prompt (code, extraction, quoting); a draft model pays more on a GPU, where the wider "
                "verify pass is nearly free; the target's own first layers (early exit) rarely guess right.")

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
    """The page's script for launch(js=...): the keyboard shortcuts and the model boxes' Enter."""
    import json

    from ..viz.styles import lesson_js

    clamp = CLAMP_JS % json.dumps(CLAMPED)
    return f"() => {{ ({lesson_js()})(); ({MODEL_BOX_JS})(); ({clamp})(); }}"


class LoadProgress:
    """The cold start's status line: what is loading, which model of how many, and for how long."""

    def __init__(self, models: int) -> None:
        import time

        self._clock = time.perf_counter
        self.t0, self.models, self.ready = self._clock(), max(1, models), 0

    def line(self, msg: str) -> str:
        if msg.endswith(" ready"):
            self.ready += 1
        at = min(self.ready + (not msg.endswith(" ready")), self.models)
        return f"Model {at} of {self.models}: {msg} ({self._clock() - self.t0:.0f} s)"


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


def why_html(state: PlaygroundState) -> str:
    """The "why this speedup?" card of the run (and its target-only run, once there is one)."""
    stats = state.stats()
    note = ""
    if state.settings is not None and runs.prefix_of(state.settings.proposer) == "early-exit":
        note = f'<p class="sv-why-note sv-muted">{EARLY_NOTE}</p>'
    if stats is None or not state.steps:
        return ('<div class="sv-why sv-why-unknown" data-verdict="none"><div class="sv-why-head">Why this speedup?'
                '</div><p class="sv-muted">Run some steps, then “Run target-only”: this card explains the speedup '
                f'from the run\'s own numbers.</p><p class="sv-muted">{WHEN_IT_PAYS}</p>{note}</div>')
    story = explain_run(state.steps, stats, state.comparable_baseline(), k=_k(state), proposer=_proposer_name(state))
    return story.html() + note


def _race(state: PlaygroundState) -> list[Any]:
    base = state.comparable_baseline()
    if base is None or not state.steps or not state.done:
        return [gr.update(visible=False), gr.skip(), gr.skip()]
    spec_start = float(getattr(state.session, "prefill_ms", 0.0) or 0.0)
    base_start = float(getattr(state.baseline_session, "prefill_ms", 0.0) or 0.0)
    steps, bsteps = [chain_view(s) for s in state.steps], list(state.baseline_steps)
    return [gr.update(visible=True),
            race_figure(steps, bsteps, spec_start_ms=spec_start, base_start_ms=base_start),
            race_html(steps, bsteps, spec_start_ms=spec_start, base_start_ms=base_start, speed=2.0)]


def phase_html(state: PlaygroundState) -> str:
    rec = state.shown_step()
    phase, upto = state.phase or ("commit", -1)
    return step_phase_html(chain_view(rec) if rec is not None else None, phase, upto if phase == "decide" else None)


def _branches(rec: StepRecord | None) -> bool:
    """True for a tree step whose tree branches somewhere (two nodes share a parent)."""
    if rec is None or not rec.tree:
        return False
    parents = [nd.parent for nd in rec.tree]
    return len(set(parents)) < len(parents)


def render_lesson(state: PlaygroundState, *, run: bool, inspector: bool, chart: bool, baseline: bool) -> list[Any]:
    """The lesson's outputs, in LessonView.outputs order; parts not asked for are skipped."""
    skip = gr.skip()
    out: list[Any] = [why_html(state) if (run or baseline) else skip]
    out += _race(state) if (baseline or run) else [skip] * 3
    out.append(phase_html(state) if inspector else skip)
    if chart:
        rec = state.shown_step()
        tree = bool(rec is not None and rec.tree)
        out += [gr.update(visible=tree), tree_figure(rec) if tree else skip, tree_mask_figure(rec) if tree else skip]
    else:
        out += [skip] * 3
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


def build_phase() -> gr.HTML:
    return gr.HTML(phase_html(PlaygroundState()), elem_id="sv-phase")


def build_tree() -> tuple[gr.Row, gr.Plot, gr.Plot]:
    """The tree step's tree and attention mask, side by side (hidden for a chain step)."""
    with gr.Row(visible=False, elem_id="sv-tree-row", equal_height=False) as row:
        tree = gr.Plot(show_label=False, min_width=300, elem_id="sv-tree")
        mask = gr.Plot(show_label=False, min_width=300, elem_id="sv-tree-mask")
    return row, tree, mask


# -- handlers ------------------------------------------------------------------------------------


def _pg():
    from . import playground

    return playground


def on_nav(state: PlaygroundState, which: str) -> list[Any]:
    """Previous/next step or rejection (buttons and arrow keys)."""
    pg = _pg()
    with state.lock:
        rec = state.shown_step()
        if rec is None:
            return pg.skips()
        cur = rec.index
        target = {"prev-step": lambda: neighbour_step(state.steps, cur, -1),
                  "next-step": lambda: neighbour_step(state.steps, cur, 1),
                  "prev-rejection": lambda: previous_rejection(state.steps, cur),
                  "next-rejection": lambda: next_rejection(state.steps, cur)}[which]()
        if target is None:
            where = "before" if which.startswith("prev") else "after"
            state.message = (f"No step with a rejection {where} step {cur + 1}"
                             + (" yet: press Step or Play to run more." if where == "after" else "."), "info")
            return pg.render(state, inspector=False, chart=False, plots=False, run=False)
        state.select(target, _rejected_pos(state.steps[target]) if "rejection" in which else None)
        if "rejection" in which:
            state.phase = ("decide", state.selected_pos or 0)
        state.message = (f"Step {target + 1}.", "info")
        return pg.render(state, plots=False)


def _rejected_pos(rec: StepRecord) -> int | None:
    return next((d.position for d in chain_view(rec).drafts if d.verdict == "rejected"), None)


def on_phase(state: PlaygroundState, delta: int) -> list[Any]:
    """The shown step one phase back or on (draft -> verify -> decide -> commit)."""
    pg = _pg()
    with state.lock:
        rec = state.shown_step()
        if rec is None:
            return pg.skips()
        rec = chain_view(rec)
        phase, upto = state.phase or ("commit", -1)
        if delta < 0:
            frame = previous_frame(rec, phase, upto) or (phase, upto)
        else:
            frame = next_frame(rec, phase, upto) or ("commit", -1)
        state.phase = frame
        if frame[0] == "decide":
            state.selected_pos = frame[1]
        return pg.render(state, run=False, plots=False)


def on_speed(state: PlaygroundState, label: str) -> None:
    state.play_delay_s = SPEEDS.get(label, 0.0)


# -- tours ---------------------------------------------------------------------------------------


def tour_setup(key: str, control_names: list[str]):
    """A handler that resets the playground and sets the tour's controls (controls + outputs)."""

    def setup(state: PlaygroundState) -> list[Any]:
        import torch

        pg = _pg()
        values = runs.tour_settings(key, pg.Defaults.from_env(), cuda=torch.cuda.is_available())
        rule_labels = {v: k for k, v in pg.RULES.items()}
        values["rule"] = rule_labels.get(values["rule"], values["rule"])
        updates = [gr.update(value=values[n]) if n in values else gr.skip() for n in control_names]
        state.stop.set()
        with state.lock:
            state.reset()
            tour = next(t for t in runs.TOURS if t.key == key)
            state.message = (f"Tour: {tour.button.lower()}. Setting up {tour.moment}…", "info")
            return updates + pg.render(state, download=True, baseline=True)

    return setup


def tour_run(key: str):
    """The tour's run: a generator handler over (state, *controls)."""

    def run(state: PlaygroundState, *raw) -> Iterator[list[Any]]:
        pg = _pg()
        tour = next(t for t in runs.TOURS if t.key == key)
        if key in ("speedup", "no-pay"):
            yield from pg.on_play(state, *raw)
            if state.message[1] == "error":
                return
            yield from pg.on_baseline(state, *raw)
            if state.message[1] == "error":
                return
            with state.lock:
                state.message = (f"Tour done: {tour.moment}. {state.message[0]}", "ok")
                yield pg.render(state, baseline=True)
            return
        want = _rejected_pos if key == "rejection" else (lambda r: 0 if _branches(r) else None)
        try:
            yield from pg.ensure_live_session(state, raw)
            found = None
            for _ in range(TOUR_MAX_STEPS):
                with state.lock:
                    if state.done:
                        break
                    rec = state.step()
                    if want(rec) is not None:
                        found = rec
                        break
            with state.lock:
                if found is None:
                    state.message = (f"This run finished without {('a rejection' if key == 'rejection' else 'a branching tree')}"
                                     "; try another seed or prompt.", "info")
                    frame = pg.render(state)
                else:
                    pos = want(found)
                    state.select(found.index, pos)
                    if key == "rejection":
                        state.phase = ("decide", pos)
                    state.message = (f"Tour: step {found.index + 1} shows {tour.moment}. Use ◀ phase / phase ▶ to "
                                     "replay it, rejection ▶ for the next one.", "ok")
                    frame = pg.render(state)
            yield frame
        except Exception as e:  # noqa: BLE001 - shown in the page
            state.message = (pg.friendly(e), "error")
            yield pg.status_only(state)

    return run


def trace_controls(state: PlaygroundState) -> list[Any]:
    """After a trace loads: set the temperature and acceptance-rule controls to the trace's own."""
    header = getattr(state.session, "header", None) if state.mode == "trace" else None
    if not isinstance(header, dict):
        return [gr.skip(), gr.skip()]
    t = (header.get("sampling") or {}).get("temperature")
    rule = header.get("acceptance") or "exact"
    label = {v: k for k, v in _pg().RULES.items()}.get(rule, gr.skip())
    return [gr.update(value=float(t)) if isinstance(t, (int, float)) else gr.skip(), gr.update(value=label)]


def trace_summary(header: dict) -> str:
    """How a trace was sampled, for the load message: "T = 0.8, typical acceptance (LOSSY)"."""
    t = (header.get("sampling") or {}).get("temperature")
    rule = header.get("acceptance") or "exact"
    mode = "greedy (T = 0)" if not t else f"T = {t:g}"
    how = "typical acceptance: LOSSY, the output is not exactly the target's distribution" if rule == "typical" \
        else "exact acceptance"
    return f"{mode}, {how}"


def wire(view, controls: dict[str, Any], parts: dict[str, Any], engine: dict[str, Any]) -> None:
    """Events of the lesson's buttons (view: the PlaygroundView; controls: name -> component)."""
    pg = _pg()
    state, outs = view.state, view.outputs
    fast = dict(concurrency_limit=None, show_progress="hidden")
    for key, btn in parts["nav"].items():
        if key.endswith("phase"):
            btn.click(lambda s, d=(-1 if key.startswith("prev") else 1): on_phase(s, d), [state], outs, **fast)
        else:
            btn.click(lambda s, w=key: on_nav(s, w), [state], outs, **fast)
    parts["speed"].change(on_speed, [state, parts["speed"]], None, queue=False)
    names = list(controls)
    ctrl = [controls[n] for n in names]
    for tour, btn in parts["tours"]:
        btn.click(tour_setup(tour.key, names), [state], ctrl + outs, **fast).then(
            tour_run(tour.key), [state, *pg.settings_inputs(controls)], outs, **engine)
