"""The Learn tab's part 5: why the best k on this CPU is not the best k on a GPU.

Layout and wiring only; the numbers are :mod:`specviz.learn.hardware` (theory's expected speedup
on two verify-cost curves), the figure :func:`specviz.viz.learn.hardware_figure`.
``build_hardware_section()`` lays out its components in the current Blocks context
(``build_learn_tab`` calls it).
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Any

import gradio as gr

from ..learn import chain as learn
from ..learn import hardware as hw
from ..viz import learn as vl
from ..viz import message_html
from .handlers import friendly_error

__all__ = ["HardwareSectionView", "build_hardware_section", "on_hardware"]

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


def on_hardware(a: Any, c: Any) -> tuple[str, Any]:
    """(the sentence and the curves' sources as HTML, the figure) for the sliders' a and c."""
    try:
        lesson = hw.hardware_lesson(learn._to_float(a, "a"), learn._to_float(c, "c"), _cache_dir())  # noqa: SLF001
        return message_html(lesson.sentence, "ok") + _sources(lesson), vl.hardware_figure(lesson)
    except Exception as e:  # noqa: BLE001 - shown in the page
        return message_html(friendly_error(e, "the Learn tab"), "error"), gr.skip()


@dataclass
class HardwareSectionView:
    sliders: list[Any]
    words: Any
    plot: Any


def build_hardware_section() -> HardwareSectionView:
    """Part 5's accordion: a and c sliders, the sentence with the curves' sources, the two-pane figure."""
    with gr.Accordion("5 · Why the best k on this CPU is not the best k on a GPU", open=False,
                      elem_id="sv-learn-hardware"):
        gr.Markdown(HARDWARE_TEXT, latex_delimiters=[{"left": "$$", "right": "$$", "display": True},
                                                     {"left": "$", "right": "$", "display": False}])
        a0, c0 = hw.default_point(_cache_dir())  # a point where the two best k differ here, as the title says
        with gr.Row():
            a = gr.Slider(0.0, 0.99, value=a0, step=0.01, label="a: acceptance rate", elem_id="sv-learn-hw-a")
            c = gr.Slider(0.0, 1.0, value=c0, step=0.01, label="c: draft step cost / target step cost",
                          elem_id="sv-learn-hw-c")
        words0, fig0 = on_hardware(a0, c0)
        words = gr.HTML(words0, elem_id="sv-learn-hw-words")
        plot = gr.Plot(fig0, show_label=False, elem_id="sv-learn-hw-plot")
    for comp in (a, c):
        comp.change(on_hardware, [a, c], [words, plot], trigger_mode="always_last", concurrency_limit=None,
                    show_progress="hidden")
    return HardwareSectionView([a, c], words, plot)
