"""The playground's what-if panel: the run you just watched on the theory's speedup curve over k,
with sliders for a, k and c (its pictures and words: :mod:`specviz.viz.whatif`); and the advisor's
saved prediction for the chosen configuration, shown as the controls change (before Play) and
beside the measured speedup once a target-only run has finished.

The sliders follow the run (each redraw of the run plots seeds them from its own a, k, c) until the
user moves one; then they stay where the user put them (``PlaygroundState.whatif``) until
"this run's values", a Reset or a new run.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import gradio as gr

from ..app import runs
from ..viz.whatif import WHATIF_MAX_K, RunPoint, advice_html, run_point, whatif_figure, whatif_html
from .handlers import by_name, plot
from .state import PlaygroundState

WHATIF_OUTPUTS = ("whatif_a", "whatif_k", "whatif_c", "whatif_plot", "whatif_note")
C_MAX = 2.0  # the c slider's range: a draft token costing up to two target steps (more when the run's c is)


def _run(state: PlaygroundState) -> RunPoint | None:
    k = state.settings.k if state.settings is not None else int(getattr(state.session, "header", {}).get("k", 0) or 0)
    try:
        run = run_point(state.visible_steps(), state.visible_stats(), state.comparable_baseline(), k)
    except (TypeError, ValueError, ZeroDivisionError):
        return None
    curve = machine_curve(state)
    if run is None or curve is None or not run.timed:  # c in target steps needs the target-only run's timings
        return run
    return replace(run, v_at=tuple(curve.v(kk + 1) for kk in range(1, WHATIF_MAX_K + 1)), v_source="specviz advise")


def machine_curve(state: PlaygroundState):
    """This machine's measured v(n) for the run's target (the advisor's cached cost model), or None:
    the what-if's curve, the card's best k and Learn part 5 then read the same v(n) (issue 52)."""
    from ..learn.hardware import measured_curve
    from ..models import cache_dir

    target = state.settings.target if state.settings is not None else None
    if target is None:
        return None
    try:
        return measured_curve(cache_dir(), runs.base_name(target))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def whatif_outputs(state: PlaygroundState) -> dict[str, Any]:
    """The panel's values by name: the sliders seeded from the run unless the user set them."""
    run = _run(state)
    if state.whatif is not None and run is not None:
        a, k, c = state.whatif
        sliders = {}
    else:
        a, k, c = (run.a, run.k, run.c) if run is not None else (0.5, 4, 0.1)
        sliders = {"whatif_a": gr.update(value=round(a, 3)), "whatif_k": gr.update(value=int(k)),
                   "whatif_c": gr.update(value=round(c, 3), maximum=max(C_MAX, math.ceil(c * 10) / 10))}
    return {**sliders, "whatif_plot": plot(whatif_figure.spec(run, a, k, c)), "whatif_note": whatif_html(run, a, k, c)}


def on_whatif(state: PlaygroundState, a: Any, k: Any, c: Any) -> dict[str, Any]:
    """A slider moved: the curve at the chosen a, k, c (kept until "this run's values" or a new run)."""
    try:
        values = (min(1.0, max(0.0, float(a))), max(1, min(WHATIF_MAX_K, int(k))), max(0.0, float(c)))
    except (TypeError, ValueError):
        return {}
    with state.lock:
        state.whatif = values
        out = whatif_outputs(state)
    return {name: out[name] for name in ("whatif_plot", "whatif_note")}


def on_whatif_reset(state: PlaygroundState) -> dict[str, Any]:
    """Back to the run's own a, k, c (and follow the run again)."""
    with state.lock:
        state.whatif = None
        return whatif_outputs(state)


def measured_speedup(state: PlaygroundState) -> float | None:
    """This run's speedup over its finished target-only run (tokens/s over tokens/s), else None."""
    stats, base = state.visible_stats(), state.comparable_baseline()
    if stats is None or base is None or not base.tokens_per_s:
        return None
    return stats.tokens_per_s / base.tokens_per_s


def advice_outputs(state: PlaygroundState) -> dict[str, Any]:
    """The advisor's note for the run's own configuration (nothing before a run: the controls set it)."""
    s = state.settings
    if s is None:
        return {}
    return {"advice": advice_html(runs.saved_advice(s.target, s.proposer, s.k), measured_speedup(state))}


def on_advice(target: Any, proposer: Any, draft: Any, k: Any, layers: Any, options: Any) -> str:
    """The controls changed (before Play): the advisor's saved prediction for what they show."""
    try:
        spec = runs.spec_for(str(proposer), draft or None, int(layers) if layers not in (None, "") else None, options or "")
    except (KeyError, TypeError, ValueError):
        spec = str(proposer or "")
    try:
        kk = int(k)
    except (TypeError, ValueError):
        kk = 0
    return advice_html(runs.saved_advice(str(target or "").strip(), spec, kk))


def build_advice(target: str, proposer: str, draft: str, k: int) -> gr.HTML:
    """The advisor's note (under the speedup card), filled for the starting controls."""
    return gr.HTML(on_advice(target, proposer, draft, k, 4, ""), elem_id="sv-advice")


def build_whatif() -> tuple[dict[str, Any], gr.Button]:
    """The panel (an accordion): {output name: component} and its "this run's values" button."""
    with gr.Accordion("What if? This run on the theory's speedup curve", open=True, elem_id="sv-whatif-box"):
        note = gr.HTML(whatif_html(None, 0.5, 4, 0.1), elem_id="sv-whatif-note")
        with gr.Row(equal_height=False):
            with gr.Column(scale=1, min_width=240):
                a = gr.Slider(0, 1, value=0.5, step=0.01, label="a (acceptance rate)", elem_id="sv-whatif-a")
                k = gr.Slider(1, WHATIF_MAX_K, value=4, step=1, label="k (tokens drafted per step)", elem_id="sv-whatif-k")
                c = gr.Slider(0, C_MAX, value=0.1, step=0.01, label="c (a draft token's cost, in target steps)",
                              elem_id="sv-whatif-c")
                again = gr.Button("↺ this run's values", size="sm", elem_id="sv-whatif-reset")
            with gr.Column(scale=2, min_width=300):
                fig = gr.Plot(show_label=False, elem_id="sv-whatif-plot")
    return dict(whatif_a=a, whatif_k=k, whatif_c=c, whatif_plot=fig, whatif_note=note), again


def wire(view, again: gr.Button) -> None:
    """The sliders' and the button's events (view: the PlaygroundView)."""
    named = view.named()
    sliders = [named["whatif_a"], named["whatif_k"], named["whatif_c"]]
    fast = dict(concurrency_limit=None, show_progress="hidden")
    for s in sliders:
        s.input(by_name(on_whatif, named), [view.state, *sliders], view.outputs, trigger_mode="always_last", **fast)
    again.click(by_name(on_whatif_reset, named), [view.state], view.outputs, **fast)
    c = view.controls
    inputs = [c["target"], c["proposer"], c["draft"], c["k"], c["layers"], c["options"]]
    for control in inputs:
        control.change(on_advice, inputs, [named["advice"]], queue=False, show_progress="hidden")
