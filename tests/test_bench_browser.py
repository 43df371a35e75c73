"""The Benchmark tab in headless Chromium: a 2-prompt, 2-k sweep shows the plots and the table.

Serves a Blocks holding only the tab, on tiny models saved to a temporary directory, and drives
Debian's Chromium through Playwright (never `playwright install`).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support import app_server

pytestmark = pytest.mark.browser
# The browser fixture (Debian's Chromium through Playwright; skips without it) is in conftest.py.

PROMPTS = "the cat sat on the mat. the cat sat on the\nabc abc abc abc abc\nnever run: only two prompts are asked for"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    os.environ["GRADIO_ANALYTICS_ENABLED"] = "False"
    import gradio as gr

    from specviz.ui.bench_tab import CUSTOM, BenchDefaults, build_bench_tab

    target, draft = app_server.make_tiny_models(tmp_path_factory.mktemp("bench-ui-models"))
    defaults = BenchDefaults(
        target=target, proposers=["ngram", f"draft:{draft}"], ks=[1, 2, 4], n_prompts=2,
        max_new_tokens=8, prompt_source=CUSTOM, custom_prompts=PROMPTS,
    )
    with gr.Blocks(analytics_enabled=False) as demo:
        with gr.Tab("Benchmark"):
            build_bench_tab(defaults)
    port = app_server.free_port()
    demo.queue().launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    yield app_server.wait_until_up(f"http://127.0.0.1:{port}/")
    demo.close()


@pytest.fixture
def page(browser, server):
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    pg = ctx.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.goto(server)
    pg.wait_for_selector("#sv-bench-run")
    pg.js_errors = errors
    yield pg
    ctx.close()


PROGRESS = "#sv-bench-progress .sv-bench-progress"


def _wait_kind(page, kinds: tuple[str, ...], timeout_ms: int = 240_000) -> str:
    page.wait_for_function(
        "(kinds) => { const el = document.querySelector('" + PROGRESS + "'); return el && kinds.includes(el.dataset.kind); }",
        arg=list(kinds), timeout=timeout_ms,
    )
    return page.locator(PROGRESS).get_attribute("data-kind")


def test_two_prompt_two_k_sweep_shows_plots_and_table(page):
    # untick k = 4 so the sweep runs k in {1, 2}
    page.locator("#sv-bench-ks label").filter(has_text="4").first.click()
    checked = page.locator("#sv-bench-ks input[type=checkbox]:checked")
    assert checked.count() == 2
    page.click("#sv-bench-run")
    assert _wait_kind(page, ("ok", "error")) == "ok", page.inner_text("#sv-bench-progress")
    prog = page.locator(PROGRESS)
    # 2 prompts x (target-only + 2 proposers x 2 k)
    assert prog.get_attribute("data-done") == prog.get_attribute("data-total") == "10"
    assert "Done in" in page.inner_text("#sv-bench-progress")
    for name in ("latency", "speedup", "acceptance_rate", "acceptance_length", "predicted", "per_position", "category"):
        plot = page.locator(f"#sv-bench-plot-{name} .js-plotly-plot")
        plot.wait_for(timeout=30_000)
        # every plot has data traces drawn (scatter lines or bars)
        assert page.locator(f"#sv-bench-plot-{name} .trace").count() > 0, name
    table = page.inner_text("#sv-bench-table")
    for text in ("target-only", "ngram", "draft:", "speedup", "acceptance"):
        assert text in table
    why = page.inner_text("#sv-bench-why")
    assert "Best:" in why and "Worst:" in why and "a = " in why and "c = " in why and "v = " in why
    for btn in ("#sv-bench-csv", "#sv-bench-json", "#sv-bench-html"):
        loc = page.locator(f"{btn} button, button{btn}").first
        assert loc.is_enabled(), btn
    with page.expect_download() as dl:
        page.locator("#sv-bench-csv button, button#sv-bench-csv").first.click()
    lines = Path(dl.value.path()).read_text().splitlines()
    assert lines[0].startswith("proposer,k,impl") and len(lines) == 1 + 5
    assert not page.js_errors, page.js_errors


def test_stop_ends_the_sweep_early_and_keeps_the_results(page):
    page.fill("#sv-bench-max-new input[type=number]", "512")  # the cap: a sweep long enough that a Stop lands in it
    page.press("#sv-bench-max-new input[type=number]", "Enter")
    page.fill("#sv-bench-n input[type=number]", "3")
    page.press("#sv-bench-n input[type=number]", "Enter")
    page.click("#sv-bench-run")
    page.wait_for_function(
        "() => { const el = document.querySelector('" + PROGRESS + "'); return el && Number(el.dataset.done) >= 1; }",
        timeout=240_000,
    )
    page.click("#sv-bench-stop")
    assert _wait_kind(page, ("info", "ok", "error")) in ("info",)
    page.wait_for_function(
        "() => document.querySelector('#sv-bench-progress').innerText.includes('Stopped after')", timeout=240_000)
    prog = page.locator(PROGRESS)
    assert int(prog.get_attribute("data-done")) < int(prog.get_attribute("data-total")) == 3 * 7
    assert "target-only" in page.inner_text("#sv-bench-table")
    assert not page.js_errors, page.js_errors


def test_bad_input_is_a_message_not_a_traceback(page):
    page.locator("#sv-bench-ks input[type=checkbox]:checked").first.wait_for()
    for box in page.locator("#sv-bench-ks label").all():
        if box.locator("input:checked").count():
            box.click()
    page.click("#sv-bench-run")
    assert _wait_kind(page, ("error",), 60_000) == "error"
    text = page.inner_text("#sv-bench-progress")
    assert "choose at least one k" in text and "Traceback" not in text
