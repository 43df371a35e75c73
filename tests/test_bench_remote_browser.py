"""The Benchmark tab's remote source in headless Chromium: with SPECVIZ_ALLOW_REMOTE=1 for the
served app, a run against a stub vLLM server fills the table and shows the remote steps' verdict
strips. (Handler-level checks, the policy included, are in test_bench_remote_ui.py.)
"""

from __future__ import annotations

import os

import pytest

from tests.support import app_server
from tests.support.remote_stub import STEP_ACCEPTED, StubConfig, StubServer

pytestmark = pytest.mark.browser

PROMPTS = "def add(a, b): return a + b\nabc abc abc abc"


@pytest.fixture(scope="module")
def server(needs_browser):
    os.environ["GRADIO_ANALYTICS_ENABLED"] = "False"
    import gradio as gr

    from specviz.ui.bench_tab import CUSTOM, BenchDefaults, build_bench_tab

    with app_server.patched_environ({"SPECVIZ_ALLOW_REMOTE": "1"}):  # read when the tab is built and in the handler
        defaults = BenchDefaults(target="gemma-3-270m", proposers=["ngram"], n_prompts=2, max_new_tokens=16,
                                 prompt_source=CUSTOM, custom_prompts=PROMPTS)
        with gr.Blocks(analytics_enabled=False) as demo:
            with gr.Tab("Benchmark"):
                build_bench_tab(defaults)
        port = app_server.free_port()
        demo.queue().launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
        with StubServer(StubConfig(engine="vllm")) as stub:
            yield app_server.wait_until_up(f"http://127.0.0.1:{port}/"), stub.url
        demo.close()


def test_remote_run_shows_table_and_steps(browser, server):
    url, stub_url = server
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = ctx.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(url)
        page.wait_for_selector("#sv-bench-remote")
        page.get_by_text("Remote engine (measure").click()
        urls = page.locator("#sv-bench-remote-urls textarea")
        urls.wait_for(state="visible")  # the accordion has rendered its contents
        urls.fill(f"spec k=3={stub_url}")
        urls.press("Tab")  # blur: the value is committed before the click reads it
        page.wait_for_function("(want) => document.querySelector('#sv-bench-remote-urls textarea').value === want",
                               arg=f"spec k=3={stub_url}")
        page.click("#sv-bench-remote-run")
        page.wait_for_function(
            "() => { const el = document.querySelector('#sv-bench-progress .sv-bench-progress');"
            " return el && ['ok', 'error'].includes(el.dataset.kind); }", timeout=120_000)
        progress = page.inner_text("#sv-bench-progress")
        assert "Done in" in progress and "Traceback" not in progress
        page.wait_for_selector("#sv-bench-remote-step-strips .sv-step", timeout=30_000)
        assert page.locator("#sv-bench-remote-step-strips .sv-step").count() == len(STEP_ACCEPTED)
        assert "p, q or u" in page.inner_text("#sv-bench-remote-step-strips")
        assert "spec" in page.inner_text("#sv-bench-table")
        assert not errors
    finally:
        ctx.close()
