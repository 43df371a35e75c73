"""Phone width (390 x 844): the Benchmark tab's target and proposer fields stack, each the full
width, instead of squeezing side by side (a model name was cut, "gemma-3-27"); at 1280 px they stay
side by side. The CSS: specviz/assets/style.css (@media max-width 640px). Serves the tab alone, no
model is loaded (nothing is run)."""

from __future__ import annotations

import os

import pytest

from tests.support import app_server
from tests.support.browser import open_page

pytestmark = pytest.mark.browser
NAME = "google/gemma-3-270m-it"
BOX_JS = """(ids) => ids.map(id => { const r = document.getElementById(id).getBoundingClientRect();
  return {left: r.left, right: r.right, top: r.top, bottom: r.bottom, width: r.width}; })"""


@pytest.fixture(scope="module")
def server(needs_browser):
    os.environ["GRADIO_ANALYTICS_ENABLED"] = "False"
    import gradio as gr

    from specviz.ui import css, theme
    from specviz.ui.bench_tab import BenchDefaults, build_bench_tab

    with gr.Blocks(analytics_enabled=False) as demo:
        build_bench_tab(BenchDefaults(target=NAME, proposers=["ngram", f"draft:{NAME}@int8"]))
    port = app_server.free_port()
    demo.queue().launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True,
                        theme=theme(), css=css())
    yield app_server.wait_until_up(f"http://127.0.0.1:{port}/")
    demo.close()


def _boxes(browser, url, width, height):
    page = open_page(browser, url, "#sv-bench-run", width=width, height=height)
    try:
        target, proposers, ks = page.evaluate(BOX_JS, ["sv-bench-target", "sv-bench-proposers", "sv-bench-ks"])
        shown = page.input_value("#sv-bench-target input")
        return target, proposers, ks, page.evaluate("() => window.innerWidth"), shown
    finally:
        page.context.close()


def test_on_a_phone_the_target_and_proposer_fields_stack_at_full_width(browser, server):
    target, proposers, ks, width, shown = _boxes(browser, server, 390, 844)
    assert shown == NAME
    for box in (target, proposers, ks):
        assert box["width"] >= 0.8 * width, (box, width)  # a row of its own, not a 160 px column
        assert box["right"] <= width + 1
    assert proposers["top"] >= target["bottom"] - 1 and ks["top"] >= proposers["bottom"] - 1  # stacked
    wide_target, wide_proposers, _, wide, _ = _boxes(browser, server, 1280, 800)
    assert abs(wide_target["top"] - wide_proposers["top"]) < 2 and wide_target["width"] < 0.5 * wide  # desktop: a row
