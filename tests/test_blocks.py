"""specviz.ui.Blocks gives the page the same data as gr.Blocks for a frame that leaves outputs out,
without rebuilding the outputs it leaves out."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import gradio as gr

from specviz.ui.blocks import Blocks


def _app(cls):
    with cls() as demo:
        text, html, slider = gr.Textbox(), gr.HTML("<b>x</b>"), gr.Slider(0, 10, value=3)
        state = gr.State(1)
        button = gr.Button()
        button.click(lambda: None, None, [text, html, slider, state])
        button.click(lambda: None, None, [text])
    return demo, (text, html, slider, state)


def _run(coroutine):
    """``asyncio.run`` on a thread of its own: a worker that ran a browser test holds an event loop."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


def _sent(cls, frame) -> list:
    demo, blocks = _app(cls)
    frame = {blocks[i]: value for i, value in frame.items()} if isinstance(frame, dict) else frame
    return _run(demo.postprocess_data(demo.fns[0], frame, None))


def test_a_frame_that_leaves_outputs_out_sends_what_gradio_sends(monkeypatch):
    frames = lambda: [{0: "hello"}, {1: "<i>y</i>", 2: gr.update(maximum=20, value=5)},  # noqa: E731 - fresh each
                      {2: gr.update(interactive=False)}, ["a", gr.skip(), gr.skip(), gr.skip()], ["a", "<p>b</p>", 7, 2],
                      {0: gr.skip()}, {3: 5}, {0: "state left out"}]
    for ours, gradios in zip(frames(), frames()):  # (Gradio pops an update's value: one frame per call)
        assert _sent(Blocks, ours) == _sent(gr.Blocks, gradios), gradios

    built = []  # the components constructed while a frame is processed
    real_init = gr.HTML.__init__

    def counting_init(self, *args, **kwargs):
        built.append(type(self).__name__)
        real_init(self, *args, **kwargs)

    (ours, (text, *_)), (plain, (plain_text, *_)) = _app(Blocks), _app(gr.Blocks)
    monkeypatch.setattr(gr.HTML, "__init__", counting_init)
    _run(ours.postprocess_data(ours.fns[0], {text: "only the text"}, None))
    assert built == []  # the HTML left out is not rebuilt
    _run(plain.postprocess_data(plain.fns[0], {plain_text: "only the text"}, None))
    assert built == ["HTML"]  # the control: Gradio's own path rebuilds it


def test_a_one_output_event_is_gradios():
    demo, _ = _app(Blocks)
    assert _run(demo.postprocess_data(demo.fns[1], "one", None)) == ["one"]
