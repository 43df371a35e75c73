"""The Advisor panel in headless Chromium: calibrate on two typed prompts, see the ranking, run
the top one and see predicted against measured (the cost model from numbers, no timing)."""

from __future__ import annotations

import os

import pytest

from tests.support import app_server

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    os.environ["GRADIO_ANALYTICS_ENABLED"] = "False"
    import gradio as gr

    from specviz.analysis import costmodel as C
    from specviz.ui.advisor_tab import build_advisor_panel
    from tests.test_advisor_ui import _cost

    def fake_measure(target, *, context=256, drafts=(), **kw):
        cost, d = _cost(0.002), _cost(0.002).drafts["d"]
        return C.CostModel(**{**cost.__dict__, "key": C.cost_key(target, context), "target": str(target.name),
                              "drafts": {str(m.name): C.DraftCost(str(m.name), d.step_s, d.feed_s, d.level_s, d.prefill_s)
                                         for m in drafts}})

    target, draft = app_server.make_tiny_models(tmp_path_factory.mktemp("advisor-ui-models"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(C, "measure", fake_measure)
        mp.setenv("SPECVIZ_CACHE_DIR", str(tmp_path_factory.mktemp("advisor-cache")))
        with gr.Blocks(analytics_enabled=False) as demo:
            build_advisor_panel(target, ["ngram", f"draft:{draft}"], [target], ["ngram", f"draft:{draft}"], ["coding"])
        port = app_server.free_port()
        demo.queue().launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
        yield app_server.wait_until_up(f"http://127.0.0.1:{port}/")
        demo.close()


def _wait_kind(page, timeout_ms: int = 180_000) -> str:
    sel = "#sv-advisor-msg .sv-bench-progress"
    page.wait_for_function("(s) => { const el = document.querySelector(s); return el && ['ok', 'error']"
                           ".includes(el.dataset.kind); }", arg=sel, timeout=timeout_ms)
    return page.locator(sel).get_attribute("data-kind")


def test_calibrate_then_run_the_top_one(browser, server):
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = ctx.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(server)
    page.wait_for_selector("#sv-advisor-calibrate")
    page.locator("#sv-advisor-source label").filter(has_text="My prompts").click()
    page.locator("#sv-advisor-custom textarea").fill("the cat sat on the mat. the cat sat on the\nabc abc abc abc abc")
    page.click("#sv-advisor-calibrate")
    assert _wait_kind(page) == "ok", page.inner_text("#sv-advisor-msg")
    assert "target-only" in page.inner_text("#sv-advisor-ranking")
    page.wait_for_selector("#sv-advisor-budget .js-plotly-plot", timeout=30_000)  # the tree-budget plot (no tree here)
    assert "No tree proposer" in page.inner_text("#sv-advisor-budget")
    page.locator("#sv-advisor-top-n input").fill("1")
    page.wait_for_function("() => !document.querySelector('#sv-advisor-run').disabled", timeout=30_000)
    page.click("#sv-advisor-run")
    page.wait_for_function("() => (document.querySelector('#sv-advisor-runs') || {}).innerText?.includes('measured')",
                           timeout=180_000)
    assert "Ran 1 configurations" in page.inner_text("#sv-advisor-msg")
    assert not errors, errors
    ctx.close()
