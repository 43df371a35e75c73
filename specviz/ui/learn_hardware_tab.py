"""The Learn tab's part 5: why the best k on this CPU is not the best k on a GPU.

Layout and wiring only; the numbers are :mod:`specviz.learn.hardware` (theory's expected speedup
on two verify-cost curves), the figure :func:`specviz.viz.learn.hardware_figure`.
``build_hardware_section()`` lays out its components in the current Blocks context
(``build_learn_tab`` calls it).
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass
from typing import Any

import gradio as gr

from ..learn import chain as learn
from ..learn import hardware as hw
from ..viz import learn as vl
from ..viz import message_html
from .handlers import friendly_error

__all__ = ["HardwareSectionView", "build_hardware_section", "on_hardware", "on_hardware_run", "run_lesson"]

DEFAULT_A, DEFAULT_C = hw.START_POINTS[0]  # the preferred opening point (hw.default_point picks the one shown)

HARDWARE_TEXT = r"""
The expected speedup of part 3 is $\dfrac{E(a, k)}{k\,c + v}$, and $v$ is not one number: it is the
cost $v(n)$ of one target pass over $n = k + 1$ positions, in target steps, and it depends on the
machine. On a GPU a decode step is bound by reading the weights, so a few more positions ride along
almost free ($v(n) \approx 1$); on a CPU the arithmetic of every extra position shows. Below, **the
same drafts** (the same $a$ and $c$) on two curves: each peaks where the next draft's expected gain,
$a^{k+1}$ tokens, stops paying for its $c$ and the rise of $v$.
"""


def _sources(lesson: hw.HardwareLesson) -> str:
    items = "".join(f"<li><b>{html.escape(kc.curve.name)}</b>: {html.escape(kc.curve.source)}.</li>"
                    for kc in (lesson.cpu, lesson.gpu))
    return f'<ul class="sv-learn-hw-sources" style="font-size:0.85em">{items}</ul>'


def _cache_dir():
    from ..models import cache_dir

    return cache_dir()


def _words(lesson: hw.HardwareLesson) -> str:
    best = f'<span hidden class="sv-learn-hw-best" data-best-k="{lesson.cpu.best_k}"></span>'
    return message_html(lesson.sentence, "ok") + _sources(lesson) + best


def on_hardware(a: Any, c: Any, f: Any = 1.0) -> tuple[str, Any]:
    """(the sentence and the curves' sources as HTML, the figure) for the sliders' a, c and f."""
    try:
        lesson = hw.hardware_lesson(learn._to_float(a, "a"), learn._to_float(c, "c"), _cache_dir(),  # noqa: SLF001
                                    f=learn._to_float(f, "f"))  # noqa: SLF001
        return _words(lesson), vl.hardware_figure(lesson)
    except Exception as e:  # noqa: BLE001 - shown in the page
        return message_html(friendly_error(e, "the Learn tab"), "error"), gr.skip()


def run_lesson(state: Any) -> hw.HardwareLesson | None:
    """Part 5 at a playground run's own a, c and drafting share f, on the v(n) its what-if chart and
    card read (this machine's measured curve for its target, else the run's own v at every k):
    the same curve and best k as the playground's what-if (issue 52). None before a run with a
    target-only run."""
    from . import whatif_view

    run = whatif_view._run(state) if state is not None else None  # noqa: SLF001
    if run is None or not run.timed or run.tree:
        return None
    curve = whatif_view.machine_curve(state) if run.v_at else None
    return hw.hardware_lesson(run.a, run.c, k_max=hw.K_MAX, f=run.f, curve=curve or hw.fitted_curve(run.v))


def on_hardware_run(state: Any) -> tuple[Any, Any, Any, str, Any]:
    """"Use my playground run": the sliders set to the run's a, c and f, and the lesson on its curve."""
    lesson = run_lesson(state)
    if lesson is None:
        why = ("Play a chain run in the Playground (not a tree) and press “Run target-only” there first: part 5 needs "
               "its a, its draft cost c and its verify cost, all measured against the target alone.")
        return gr.skip(), gr.skip(), gr.skip(), message_html(why, "info"), gr.skip()
    c_box = gr.update(value=round(lesson.c, 3), maximum=max(1.0, math.ceil(lesson.c * 10) / 10))  # a slow draft: c > 1
    return (round(lesson.a, 3), c_box, round(lesson.f, 3), _words(lesson) + message_html(
        "These are your playground run's a, c and f on the v(n) its what-if chart reads; the best k here is that "
        "chart's star. Move a slider to leave the run.", "info"), vl.hardware_figure(lesson))


@dataclass
class HardwareSectionView:
    sliders: list[Any]
    words: Any
    plot: Any


def build_hardware_section(playground_state: Any = None) -> HardwareSectionView:
    """Part 5's accordion: a, c and f sliders (and "use my playground run" where the playground's
    state is given), the sentence with the curves' sources, the two-pane figure."""
    with gr.Accordion("5 · Why the best k on this CPU is not the best k on a GPU", open=False,
                      elem_id="sv-learn-hardware"):
        gr.Markdown(HARDWARE_TEXT, latex_delimiters=[{"left": "$$", "right": "$$", "display": True},
                                                     {"left": "$", "right": "$", "display": False}])
        a0, c0 = hw.default_point(_cache_dir())  # a point where the two best k differ here, as the title says
        with gr.Row():
            a = gr.Slider(0.0, 0.99, value=a0, step=0.001, label="a: acceptance rate", elem_id="sv-learn-hw-a")
            c = gr.Slider(0.0, 1.0, value=c0, step=0.001, label="c: draft step cost / target step cost",
                          elem_id="sv-learn-hw-c")
            f = gr.Slider(0.05, 1.0, value=1.0, step=0.001, label="f: share of steps that draft (an n-gram misses some)",
                          elem_id="sv-learn-hw-f")
        mine = gr.Button("Use my playground run (its a, c, f and v)", size="sm", elem_id="sv-learn-hw-run",
                         visible=playground_state is not None)
        words0, fig0 = on_hardware(a0, c0)
        words = gr.HTML(words0, elem_id="sv-learn-hw-words")
        plot = gr.Plot(fig0, show_label=False, elem_id="sv-learn-hw-plot")
    for comp in (a, c, f):  # .input: the run button's values must not redraw part 5 on the CPU's curve
        comp.input(on_hardware, [a, c, f], [words, plot], trigger_mode="always_last", concurrency_limit=None,
                   show_progress="hidden")
    if playground_state is not None:
        mine.click(on_hardware_run, [playground_state], [a, c, f, words, plot], concurrency_limit=None,
                   show_progress="hidden")
    return HardwareSectionView([a, c, f], words, plot)
