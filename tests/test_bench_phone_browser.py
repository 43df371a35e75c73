"""The Benchmark and Learn tabs' new pieces in headless Chromium: trees beside chains, the
verify-cost curve, the multi-candidate rule, and both tabs at phone width (390 x 844).

Serves a Blocks holding only these two tabs on tiny models, with the app's theme and CSS
(specviz/assets/style.css + specviz/viz/assets/lesson.css), and drives Debian's Chromium through
Playwright (fixtures in conftest.py; skipped without a browser).
"""

from __future__ import annotations

import os

import pytest

from tests.support import app_server
from tests.support.browser import open_page

pytestmark = pytest.mark.browser
TIMEOUT_MS = 240_000
PROGRESS = "#sv-bench-progress .sv-bench-progress"
PROMPTS = "the cat sat on the mat. the cat sat on the mat. the dog sat on the"

# Every visible element of the page that reaches past the viewport and is not inside a box that
# scrolls (or clips) sideways within the viewport: what makes a phone page wider than its screen.
OVERFLOW_JS = """() => {
  const W = window.innerWidth, bad = [];
  for (const el of document.querySelectorAll('.gradio-container *')) {
    const r = el.getBoundingClientRect();
    if (r.width === 0 || r.height === 0 || (r.right <= W + 1 && r.left >= -1)) continue;
    let p = el.parentElement, held = false;
    while (p && p !== document.body) {
      const s = getComputedStyle(p);
      if (['auto', 'scroll', 'hidden', 'clip'].includes(s.overflowX) && p.getBoundingClientRect().right <= W + 1) { held = true; break; }
      p = p.parentElement;
    }
    if (!held) bad.push(`${el.tagName.toLowerCase()}#${el.id}.${String(el.className).slice(0, 40)} right=${Math.round(r.right)}`);
  }
  return {W, scroll: document.documentElement.scrollWidth, bad: bad.slice(0, 8)};
}"""


@pytest.fixture(scope="module")
def server(needs_browser, tmp_path_factory):
    os.environ["GRADIO_ANALYTICS_ENABLED"] = "False"
    os.environ["SPECVIZ_ALLOW_LOCAL_PATHS"] = "1"
    import gradio as gr

    from specviz.ui import css, theme
    from specviz.ui.bench_tab import CUSTOM, BenchDefaults, build_bench_tab
    from specviz.ui.learn_tab import DRAFT_MODEL, LearnDefaults, build_learn_tab
    from specviz.viz.styles import lesson_css

    target, draft = app_server.make_tiny_models(tmp_path_factory.mktemp("phone-models"))
    bench = BenchDefaults(target=target, proposers=["ngram", "ngram-tree"], ks=[1, 2], n_prompts=1, max_new_tokens=8,
                          prompt_source=CUSTOM, custom_prompts=PROMPTS, tree_nodes="2,4")
    learn = LearnDefaults(target=target, draft=draft, proposer=DRAFT_MODEL, prefix="the cat",
                          target_choices=(target,), draft_choices=(draft,))
    with gr.Blocks(analytics_enabled=False) as demo:
        with gr.Tabs():
            with gr.Tab("Benchmark"):
                build_bench_tab(bench)
            with gr.Tab("Learn"):
                build_learn_tab(learn)
    port = app_server.free_port()
    demo.queue().launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True,
                        theme=theme(), css=css() + "\n" + lesson_css())
    yield app_server.wait_until_up(f"http://127.0.0.1:{port}/")
    demo.close()


def _page(browser, url, width, height):
    return open_page(browser, url, "#sv-bench-run", width=width, height=height, timeout_ms=TIMEOUT_MS)


def _wait_kind(page, kinds):
    page.wait_for_function(
        "(kinds) => { const el = document.querySelector('" + PROGRESS + "'); return el && kinds.includes(el.dataset.kind); }",
        arg=list(kinds), timeout=TIMEOUT_MS)
    return page.locator(PROGRESS).get_attribute("data-kind")


def _fits(page, where: str) -> None:
    page.wait_for_timeout(300)
    out = page.evaluate(OVERFLOW_JS)
    assert out["scroll"] <= out["W"] + 1 and not out["bad"], (where, out)


def test_benchmark_sweeps_trees_and_measures_verify_cost_at_phone_width(browser, server):
    page = _page(browser, server, 390, 844)
    _fits(page, "benchmark before a run")
    page.click("#sv-bench-run")
    assert _wait_kind(page, ("ok", "error")) == "ok", page.inner_text("#sv-bench-progress")
    # 1 prompt x (target-only + ngram x 2 k + ngram-tree at 2 budgets x 2 k)
    assert page.locator(PROGRESS).get_attribute("data-total") == "7"
    page.locator("#sv-bench-plot-tree_tau .js-plotly-plot").wait_for()
    legend = page.inner_text("#sv-bench-plot-tree_tau")
    assert "ngram-tree:3 depth 1" in legend and "chain theory" in legend
    table = page.inner_text("#sv-bench-table")
    assert "ngram-tree:3,nodes=4" in table and "nodes/step" in table and "speedup predicted" in table
    why = page.inner_text("#sv-bench-why")
    assert "per-position acceptance" in why and "leaves out the prefill" in why
    _fits(page, "benchmark after a run (the table scrolls inside its box)")
    # the table's box scrolls sideways rather than widening the page
    box = page.evaluate("""() => { const t = document.querySelector('#sv-bench-table table');
        let p = t.parentElement; while (p && !['auto','scroll'].includes(getComputedStyle(p).overflowX)) p = p.parentElement;
        return {table: t.scrollWidth, box: p ? p.clientWidth : null}; }""")
    assert box["box"] is not None and box["box"] <= 390 < box["table"], box

    page.click("#sv-bench-verify")
    page.wait_for_function("() => document.querySelector('#sv-bench-verify-msg').innerText.includes('t(1) =')",
                           timeout=TIMEOUT_MS)
    page.wait_for_function("() => document.querySelectorAll('#sv-bench-plot-verify_cost .trace').length > 0")
    assert "best k" in page.inner_text("#sv-bench-plot-verify_cost")
    assert "The verify curve decides" in page.inner_text("#sv-bench-why")
    _fits(page, "benchmark after the verify curve")
    assert not page.js_errors, page.js_errors
    page.context.close()


def test_learn_multi_candidate_rule_and_phone_width(browser, server):
    page = _page(browser, server, 390, 844)
    page.get_by_role("tab", name="Learn").click()
    page.wait_for_selector("#sv-learn-tree-sample")
    _fits(page, "learn")
    page.wait_for_selector("#sv-learn-tree-residual .trace")
    page.fill("#sv-learn-tree-n input[type=number]", "1500")
    page.press("#sv-learn-tree-n input[type=number]", "Tab")
    page.locator("#sv-learn-tree-rule label").filter(has_text="broken").click()
    page.click("#sv-learn-tree-sample")
    page.wait_for_selector('#sv-learn-tree-verdict .sv-learn-tree-verdict[data-matches="false"]')
    verdict = page.locator("#sv-learn-tree-verdict .sv-learn-tree-verdict")
    tv, limit = float(verdict.get_attribute("data-tv")), float(verdict.get_attribute("data-limit"))
    assert tv > limit and "above the sampling-noise limit" in page.inner_text("#sv-learn-tree-verdict")
    page.locator("#sv-learn-tree-rule label").filter(has_text="exact").click()
    page.click("#sv-learn-tree-sample")
    page.wait_for_selector('#sv-learn-tree-verdict .sv-learn-tree-verdict[data-matches="true"]')
    verdict = page.locator("#sv-learn-tree-verdict .sv-learn-tree-verdict")
    assert float(verdict.get_attribute("data-tv")) <= float(verdict.get_attribute("data-limit"))
    assert "within the sampling-noise limit" in page.inner_text("#sv-learn-tree-verdict")
    page.wait_for_selector("#sv-learn-tree-hist .trace")
    _fits(page, "learn after sampling")
    assert not page.js_errors, page.js_errors
    page.context.close()
