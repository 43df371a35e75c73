"""The playground as a lesson, its handlers: step/rejection/phase navigation, the Play speed and
the guided tours (the views are :mod:`specviz.ui.lesson_view`'s).

Every handler returns the playground's outputs by name (:func:`specviz.ui.playground_view.render`),
so each lesson view stays in step with the inspector; :func:`wire` connects the lesson's buttons.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Iterator

import gradio as gr

from ..app import runs
from ..app.replay import Replay
from ..core.records import StepRecord
from ..viz.guess import judge_guess, next_to_guess, verdict_words
from ..viz.phases import neighbour_step, next_frame, next_rejection, phase_frames, previous_frame, previous_rejection
from ..viz.tokens import message_html, phase_summary_text, step_summary_text
from ..viz.tree import chain_view
from . import playground as pg
from .handlers import by_name
from .lesson_view import SPEEDS, shown_of
from .playground_view import render, status_only
from .state import PROPOSERS, RULE_LABELS, SCHEDULES, PlaygroundState

TOUR_MAX_STEPS = 200  # a tour that looks for a moment gives up after this many steps (every seed together)
# The rejection tour's moment depends on the draws: with a close draft a whole run can accept every draft
# (issue 52: 51 of 51 at T = 1, seed 0, on one start of the app and not on another, since the int8 draft's
# floats follow the kernels it was prepared with). So a run that ends without one is followed by the next
# seed, up to this many, and the tour says which seeds it ran; the seed box then shows the run it landed on.
TOUR_SEEDS = 8

# Where each tour arrives: the moment's element id first, then what its message names, in the order
# they should stay in view with it (the page scrolls to them and focuses the moment; viz.scripts.ARRIVE_JS).
ARRIVALS: dict[str, tuple[str, ...]] = {
    "speedup": ("sv-why", "sv-race-box"),  # the card first: where both do not fit, it is the one kept in view
    "rejection": ("sv-phase", "sv-nav", "sv-draft-table"),
    "no-pay": ("sv-why",),
    "tree": ("sv-tree", "sv-tree-mask"),  # the tree; its mask beside it (under it on a phone) where it fits
}
# What a tour says when it has arrived, after "Tour: step N shows <moment>." (the controls it names
# are in ARRIVALS: the rejection tour's nav row sits right above its decide phase; the tree sits
# under the step inspector, so its text names none).
ARRIVED_HINTS = {"rejection": "Lesson mode is on, so it opens in its draft phase: phase ▶ (the ◀ phase / phase ▶ row "
                              "just above) walks it to each verdict (guess it first); rejection ▶ finds the next one.",
                 "tree": "The step inspector above replays it phase by phase."}

Frame = dict[str, Any]  # {output name: value} (specviz.ui.playground_view.OUTPUTS)


# -- navigation ----------------------------------------------------------------------------------


def on_nav(state: PlaygroundState, which: str) -> Frame:
    """Previous/next step or rejection (buttons and arrow keys)."""
    with state.lock:
        rec = state.shown_step()
        if rec is None:
            return {}
        cur = rec.index
        target = {"prev-step": lambda: neighbour_step(state.steps, cur, -1),
                  "next-step": lambda: neighbour_step(state.steps, cur, 1),
                  "prev-rejection": lambda: previous_rejection(state.steps, cur),
                  "next-rejection": lambda: next_rejection(state.steps, cur)}[which]()
        if target is None:
            where = "before" if which.startswith("prev") else "after"
            more = " yet: press Step or Play to run more." if where == "after" and not state.done else "."
            if where == "after" and state.done:
                more = ": the run has finished." if state.mode == "live" else ": this is the end of the trace."
            state.message = (f"No step with a rejection {where} step {cur + 1}{more}", "info")
            return render(state, inspector=False, chart=False, plots=False, run=False)
        state.select(target, _rejected_pos(state.steps[target]) if "rejection" in which else None)
        if "rejection" in which:
            state.phase = ("decide", state.selected_pos or 0)
        state.message = (f"Step {target + 1}.", "info")
        return render(state, plots=False)


def _rejected_pos(rec: StepRecord) -> int | None:
    return next((d.position for d in chain_view(rec).drafts if d.verdict == "rejected"), None)


def _branches(rec: StepRecord | None) -> bool:
    """True for a tree step whose tree branches somewhere (two nodes share a parent)."""
    if rec is None or not rec.tree:
        return False
    parents = [nd.parent for nd in rec.tree]
    return len(set(parents)) < len(parents)


def phase_message(state: PlaygroundState) -> tuple[str, str]:
    """The status line for the shown step at its phase: what is known so far, the whole step at commit."""
    raw = state.shown_step()
    if raw is None:
        return state.message
    shown = shown_of(state)
    if shown is not None:
        return (f"Step {raw.index + 1}: {phase_summary_text(raw, shown)}.", "info")
    text = f"Step {raw.index + 1}: {step_summary_text(raw)}."
    if raw is state.steps[-1] and state.done:
        why = {"eos": "end of sequence", "length": "max new tokens reached"}.get(raw.finished or "", "end of trace")
        return (f"{text} Finished: {why}.", "ok")
    return (text, "info")


def _move_on(state: PlaygroundState, rec: StepRecord) -> None:
    """Lesson mode, "phase ▶" at commit: the next step in its draft phase (run it when it is the latest)."""
    if rec.index + 1 < len(state.steps):
        state.select(rec.index + 1)
        nxt = state.shown_step()
        state.phase = ("draft", -1) if nxt is not None and nxt.k > 0 else None
    elif state.session is not None and not state.done:
        state.select(None)
        state.step()  # lesson mode: it opens in its draft phase
    else:
        state.message = (pg.FINISHED if state.mode == "live" and state.session is not None else
                         "This is the last step." if state.steps else "Press Step to run the first step.", "info")
        return
    state.message = phase_message(state)


def on_phase(state: PlaygroundState, delta: int) -> Frame:
    """The shown step one phase back or on (draft -> verify -> decide -> commit); in lesson mode,
    on from commit goes to the next step's draft phase (running it when it is the latest)."""
    with state.lock:
        rec = state.shown_step()
        if rec is None:
            return {}
        view = chain_view(rec)
        phase, upto = state.phase or ("commit", -1)
        if delta < 0:
            frame = previous_frame(view, phase, upto) or (phase, upto)
        else:
            frame = next_frame(view, phase, upto)
            if frame is None and state.lesson_mode:
                try:
                    _move_on(state, rec)
                except Exception as e:  # noqa: BLE001 - shown in the page
                    state.message = (pg.friendly(e), "error")
                return render(state)
            frame = frame or ("commit", -1)
        state.phase = frame
        if frame[0] == "decide":
            state.selected_pos = frame[1]
        elif frame[0] != "commit":
            state.selected_pos = None
        state.message = phase_message(state)
        return render(state, plots=frame[0] == "commit")


def on_lesson_mode(state: PlaygroundState, on: Any) -> Frame:
    """Lesson mode on: the shown step goes back to its draft phase; off: committed."""
    with state.lock:
        state.lesson_mode = bool(on)
        rec = state.shown_step()
        state.phase = ("draft", -1) if state.lesson_mode and rec is not None and rec.k > 0 else None
        state.selected_pos = None
        if rec is not None:
            state.message = phase_message(state)
        return render(state)


def on_guess(state: PlaygroundState, said: str) -> Frame:
    """Guess first: bet ``said`` ("accept" | "reject") on the next draft to be judged in the shown
    phase, then reveal it (that draft's decide frame: u and the verdict) and score the bet."""
    with state.lock:
        rec = state.shown_step()
        view = chain_view(rec) if rec is not None else None
        d = next_to_guess(view, shown_of(state))
        if d is None:
            state.message = ("Nothing to guess here: guess in the verify or decide phase, before a draft's verdict "
                             "is shown.", "info")
            return render(state, run=False, plots=False)
        guess = state.guesses.add(judge_guess(view, d, said))
        state.phase, state.selected_pos = ("decide", d.position), d.position
        book = state.guesses
        state.message = (f"Step {view.index + 1}: {verdict_words(guess)} Score {book.right} of {book.total}.",
                         "ok" if guess.right else "info")
        return render(state, plots=False)


ANIMATE_DEFAULT_S = 0.8  # "animate this step" at the Play speed "as fast as it runs": a pace one can follow


def on_animate(state: PlaygroundState) -> Iterator[Frame]:
    """The shown step's phases, one frame after another at the Play speed's pace, with no click
    (draft, verify, each decide, commit); a Reset, a new run or Pause stops it."""
    import time

    state.stop.clear()
    with state.lock:  # nothing yielded under the lock: a generator may resume on another thread
        rec = state.shown_step()
        if rec is None:
            state.message = ("Run a step first, then animate it.", "info")
            nothing = status_only(state)
        else:
            epoch, frames = state.epoch, phase_frames(chain_view(rec))
            delay = state.play_delay_s or ANIMATE_DEFAULT_S
    if rec is None:
        yield nothing
        return
    for i, frame in enumerate(frames):
        with state.lock:
            if state.epoch != epoch or state.stop.is_set() or state.shown_step() is not rec:
                return
            state.phase = frame
            state.selected_pos = frame[1] if frame[0] == "decide" else None
            state.message = phase_message(state)
            out = render(state, plots=frame[0] == "commit")
        yield out
        if i + 1 < len(frames):
            time.sleep(delay)


def on_speed(state: PlaygroundState, label: str) -> None:
    state.play_delay_s = SPEEDS.get(label, 0.0)


# -- tours ---------------------------------------------------------------------------------------


def _tour(key: str) -> runs.Tour:
    return next(t for t in runs.TOURS if t.key == key)


def tour_setup(key: str):
    """A handler that resets the playground and sets the tour's controls: the playground's outputs
    and the controls' updates, by name."""

    def setup(state: PlaygroundState) -> Frame:
        import torch

        values = runs.tour_settings(key, pg.Defaults.from_env(), cuda=torch.cuda.is_available())
        values["rule"] = RULE_LABELS.get(values["rule"], values["rule"])
        updates = {name: gr.update(value=value) for name, value in values.items()}
        state.stop.set()
        with state.lock:
            state.reset()
            state.lesson_mode = True  # a tour is a lesson: Step after it opens each step in its draft phase
            tour = _tour(key)
            state.message = (f"Tour: {tour.button.lower()}. Setting up {tour.moment}…", "info")
            return {**updates, "lesson_mode": gr.update(value=True), **render(state, download=True, baseline=True)}

    return setup


def tour_run(key: str):
    """The tour's run: a generator handler over (state, *controls)."""

    def run(state: PlaygroundState, *raw) -> Iterator[Frame]:
        tour = _tour(key)
        if key in ("speedup", "no-pay"):
            yield from pg.on_play(state, *raw)
            if state.message[1] == "error":
                return
            yield from pg.on_baseline(state, *raw)
            if state.message[1] == "error":
                return
            with state.lock:  # rendered under the lock, yielded after it (a generator may resume on another thread)
                state.message = (f"Tour done: {tour.moment}. {state.message[0]}", "ok")
                frame = arrived(render(state, baseline=True), state, key)
            yield frame
            return
        try:
            yield from pg.ensure_live_session(state, raw)
            search = yield from _seek(state, key)
            with state.lock:
                found = search.found
                if found is None:
                    state.message = (f"{search.tried()} without {search.what}; try a higher temperature or another "
                                     "prompt.", "info")
                    frame = render(state)
                else:
                    pos = _want(key)(found)
                    state.select(found.index, pos)
                    if key == "rejection":  # the lesson walks up to the verdict: the step opens in its draft phase
                        state.phase, state.selected_pos = ("draft", -1), None
                    before = f"{search.tried()} without {search.what}, so the tour ran seed {search.seed}: " \
                        if search.seeds > 1 else "Tour: "
                    state.message = (f"{before}step {found.index + 1} shows {tour.moment}. {ARRIVED_HINTS[key]}", "ok")
                    frame = arrived(render(state), state, key)
                if search.seeds > 1:
                    frame["seed"] = gr.update(value=search.seed)  # the controls show the run on the page
            yield frame
        except Exception as e:  # noqa: BLE001 - shown in the page
            state.message = (pg.friendly(e), "error")
            yield status_only(state)

    return run


def _want(key: str):
    """The step a tour looks for -> the position to show in it (None: not this step)."""
    return _rejected_pos if key == "rejection" else (lambda r: 0 if _branches(r) else None)


@dataclass
class Search:
    """What a tour's search for its moment did: the seeds it ran and the steps they took."""

    what: str  # "a rejection" | "a branching tree"
    first_seed: int
    seeds: int = 0  # runs started (one per seed)
    steps: int = 0  # steps taken over all of them
    drafts: int = 0  # drafts judged over the runs that ended without the moment
    accepted: int = 0  # ... and of those, the ones kept
    found: StepRecord | None = None

    @property
    def seed(self) -> int:
        """The seed of the latest run (the one the tour landed on)."""
        return self.first_seed + self.seeds - 1

    def tried(self) -> str:
        """The runs before the one that found it (all of them, if none did), in words."""
        done = self.seeds - (self.found is not None)
        which = f"seed {self.first_seed}" if done == 1 else f"seeds {self.first_seed} to {self.first_seed + done - 1}"
        kept = f", {self.accepted} of {_count(self.drafts, 'draft')} accepted" if self.what == "a rejection" else ""
        return f"{which.capitalize()} ran to the end ({_count(self.steps_before(), 'step')}{kept})"

    def steps_before(self) -> int:
        return self.steps - (self.found.index + 1 if self.found is not None else 0)


def _count(n: int, noun: str) -> str:
    """"1 draft", "15 drafts"."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _seek(state: PlaygroundState, key: str) -> Iterator[Frame]:
    """Step the live run until the tour's moment; the rejection tour runs the next seed after a run
    that ended without one (TOUR_SEEDS at most). ``search = yield from _seek(...)``."""
    want = _want(key)
    search = Search("a rejection" if key == "rejection" else "a branching tree", state.settings.seed)
    for attempt in range(TOUR_SEEDS if key == "rejection" else 1):
        if attempt:
            yield from _restart(state, replace(state.settings, seed=search.first_seed + attempt), search)
        search.seeds += 1
        while search.steps < TOUR_MAX_STEPS:
            with state.lock:
                if state.done:
                    break
                rec = state.step()
                search.steps += 1
                if want(rec) is not None:
                    search.found = rec
                    return search
        verdicts = [d.verdict for r in state.steps for d in chain_view(r).drafts]
        search.drafts += len(verdicts)
        search.accepted += verdicts.count("accepted")
        if search.steps >= TOUR_MAX_STEPS:
            break
    return search


def _restart(state: PlaygroundState, settings, search: Search) -> Iterator[Frame]:
    """A new live run of ``settings`` (the next seed) for a tour's search, saying why."""
    state.message = (f"{search.tried()} without {search.what}: running seed {settings.seed}…", "info")
    yield status_only(state)
    result = yield from pg.load_run(state, settings)  # the models are cached: no load
    with state.lock:
        state.epoch += 1
        if isinstance(result, Replay):
            state.start_recorded(settings, result)
        else:
            state.start(settings, result)


def arrived(frame: Frame, state: PlaygroundState, key: str) -> Frame:
    """A tour's last frame: its status message carries the moment to scroll to and focus (ARRIVALS),
    and the run's epoch (a tour resets the run: each tour a page takes is a new visit)."""
    text, kind = state.message
    return {**frame, "status": message_html(text, kind, arrive=ARRIVALS[key], visit=state.epoch)}


def trace_controls(state: PlaygroundState) -> dict[str, Any]:
    """After a trace loads: every control set to the trace's own run (target, proposer, draft,
    layers, options, k, schedule, rule, T, top-p, top-k, seed, max new tokens, prompt), by name,
    so Reset and Step run what the controls show."""
    header = getattr(state.session, "header", None) if state.mode == "trace" else None
    if not isinstance(header, dict):
        return {}
    values = runs.trace_settings(header)
    if values.get("proposer") not in PROPOSERS:
        for name in ("proposer", "draft", "layers", "options"):
            values.pop(name, None)
    if "rule" in values:
        values["rule"] = RULE_LABELS.get(values["rule"], values["rule"])
    if values.get("schedule") not in SCHEDULES:
        values.pop("schedule", None)
    return {name: gr.update(value=value) for name, value in values.items()}


def wire(view, parts: dict[str, Any], engine: dict[str, Any]) -> None:
    """Events of the lesson's buttons (view: the PlaygroundView; parts: its nav buttons, Play speed
    and tours; engine: the engine queue's event settings)."""
    state, outs, named = view.state, view.outputs, view.named()
    fast = dict(concurrency_limit=None, show_progress="hidden")
    for key, btn in parts["nav"].items():
        if key.endswith("phase"):
            btn.click(by_name(lambda s, d=(-1 if key.startswith("prev") else 1): on_phase(s, d), named), [state], outs,
                      **fast)
        else:
            btn.click(by_name(lambda s, w=key: on_nav(s, w), named), [state], outs, **fast)
    parts["speed"].change(on_speed, [state, parts["speed"]], None, queue=False)
    if parts.get("animate") is not None:
        parts["animate"].click(by_name(on_animate, named), [state], outs, **fast)
    for said in ("accept", "reject"):
        if parts.get(f"guess_{said}") is not None:
            parts[f"guess_{said}"].click(by_name(lambda s, g=said: on_guess(s, g), named), [state], outs, **fast)
    if parts.get("lesson_mode") is not None:
        # .input, not .change: a tour sets the box (and the state) itself, and must not replay the shown step
        parts["lesson_mode"].input(by_name(on_lesson_mode, named), [state, parts["lesson_mode"]], outs, **fast)
    controls = list(view.controls.values())
    lesson_box = {"lesson_mode": parts["lesson_mode"]} if parts.get("lesson_mode") is not None else {}
    with_controls = {**view.controls, **lesson_box, **named}
    for tour, btn in parts["tours"]:  # the run may set the seed box (the rejection tour's search)
        btn.click(by_name(tour_setup(tour.key), with_controls), [state], list(with_controls.values()), **fast).then(
            by_name(tour_run(tour.key), with_controls), [state, *controls], list(with_controls.values()), **engine)
