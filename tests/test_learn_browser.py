"""The Learn tab in headless Chromium, inside the whole app served with tiny models.

The app is served in this process on 127.0.0.1 by tests/support/app_server.py (tiny random models named
through SPECVIZ_DEFAULT_TARGET / SPECVIZ_DEFAULT_DRAFT); Playwright drives Debian's Chromium
(its headless shell, never a downloaded browser).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from specviz.analysis.theory import expected_speedup

TIMEOUT_MS = 30_000

pytestmark = pytest.mark.browser
# Fixtures from conftest.py: app_url (the app served on tiny models; skips without a browser) and
# browser (Debian's Chromium through Playwright).


def _open_learn(browser, url: str, width: int = 1280, height: int = 900):
    pg = browser.new_context(viewport={"width": width, "height": height}).new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.set_default_timeout(TIMEOUT_MS)
    pg.goto(url)
    pg.get_by_role("tab", name="Learn").click()
    pg.wait_for_selector("#sv-learn-sample")
    pg.js_errors = errors
    return pg


@pytest.fixture(scope="module")
def page(browser, app_url):
    pg = _open_learn(browser, app_url)
    yield pg
    pg.context.close()


def _verdict(page, matches: str) -> str:
    page.wait_for_selector(f'#sv-learn-verdict .sv-learn-verdict[data-matches="{matches}"]')
    return page.inner_text("#sv-learn-verdict")


def _pick_rule(page, label: str) -> None:
    page.locator("#sv-learn-rule-choice label").filter(has_text=label).click()
    page.wait_for_function("(t) => document.querySelector('#sv-learn-verdict').innerText.includes(t)", arg=label)


def test_toy_rule_exact_matches_and_broken_rules_miss(page):
    page.wait_for_selector("#sv-learn-intro .katex")  # the formulas render (KaTeX ships with Gradio)
    page.click("#sv-learn-sample")
    text = _verdict(page, "true")
    assert "matches p" in text and "within the sampling-noise limit" in text
    page.wait_for_selector("#sv-learn-hist g.point")
    assert page.locator("#sv-learn-hist .legendtext", has_text="target p").count() == 1

    _pick_rule(page, "broken: no residual (resample from p)")
    page.click("#sv-learn-sample")
    text = _verdict(page, "false")
    assert "misses p" in text and "not exact" in text
    assert "misses p" in page.locator("#sv-learn-hist .gtitle").text_content()

    _pick_rule(page, "typical acceptance (LOSSY)")
    page.wait_for_selector("#sv-learn-eps", state="visible")
    page.click("#sv-learn-sample")
    assert "LOSSY" in _verdict(page, "false")

    _pick_rule(page, "exact: resample from the residual")
    page.wait_for_selector("#sv-learn-eps", state="hidden")
    # an edited table: a negative q is an error message, and fixing it samples again
    cell = page.locator('#sv-learn-table [data-testid="cell-0-2"]')
    cell.dblclick()
    box = page.locator("#sv-learn-table textarea, #sv-learn-table input").first
    box.fill("-1")
    box.press("Enter")
    page.wait_for_selector("#sv-learn-verdict .sv-msg-error")
    assert "negative" in page.inner_text("#sv-learn-verdict") and "Traceback" not in page.inner_text("#sv-learn-verdict")
    cell.dblclick()
    box = page.locator("#sv-learn-table textarea, #sv-learn-table input").first
    box.fill("0.3")
    box.press("Enter")
    page.wait_for_selector("#sv-learn-verdict .sv-msg-info")
    page.click("#sv-learn-sample")
    assert "matches p" in _verdict(page, "true")
    assert not page.js_errors


def test_real_model_section_samples_the_tiny_model(page):
    assert Path(page.input_value("#sv-learn-target input")).name == "tiny-target"  # from SPECVIZ_DEFAULT_TARGET
    page.fill("#sv-learn-model-n input", "5000")
    page.click("#sv-learn-model-btn")
    page.wait_for_selector("#sv-learn-model-status .sv-learn-model")
    text = page.inner_text("#sv-learn-model-status")
    assert "Both match p" in text, text
    page.wait_for_selector("#sv-learn-model-plot g.point")
    legend = page.locator("#sv-learn-model-plot .legend").text_content()
    assert "with speculation" in legend and "without speculation" in legend
    assert not page.js_errors


def test_calculator_slider_updates_the_output(page):
    speed = '#sv-learn-calc [data-metric="speedup"] .sv-card-value'
    assert page.inner_text(speed) == f"{expected_speedup(0.7, 4, 0.1, 1.0):.2f}×"
    box = page.locator("#sv-learn-k input[type=number]")
    box.fill("8")
    box.press("Enter")
    want = f"{expected_speedup(0.7, 8, 0.1, 1.0):.2f}×"
    page.wait_for_function("([sel, w]) => document.querySelector(sel)?.innerText === w", arg=[speed, want])
    page.wait_for_selector("#sv-learn-calc-plot .legendtext >> text=your k = 8")
    page.locator("#sv-learn-runs-box").get_by_text("Your measured runs").first.click()
    runs = page.locator("#sv-learn-runs textarea")
    runs.wait_for(state="visible")  # the accordion has opened and mounted its box (a fill before that can be lost)
    page.wait_for_timeout(300)
    runs.fill("0.6, 4, 1.3  # mine")
    runs.blur()
    page.wait_for_selector("#sv-learn-calc-plot .legendtext >> text=your measured runs")
    assert not page.js_errors


def test_best_k_here_and_on_a_gpu_follows_the_sliders(page):
    page.locator("#sv-learn-hardware").get_by_text("Why the best k on this CPU").first.click()
    page.wait_for_selector("#sv-learn-hw-plot .legendtext >> text=a GPU (illustration)")
    a0 = float(page.locator("#sv-learn-hw-a input[type=number]").input_value())  # hw.default_point: this machine's
    assert f"a = {a0:.2f}" in page.inner_text("#sv-learn-hw-words")
    box = page.locator("#sv-learn-hw-a input[type=number]")
    box.fill("0.6")
    box.press("Enter")
    page.wait_for_function("() => document.querySelector('#sv-learn-hw-words')?.innerText.includes('a = 0.60')")
    assert "Leviathan" in page.inner_text("#sv-learn-hw-words")
    assert not page.js_errors


def test_narrow_screen_has_no_sideways_scroll(browser, app_url):
    pg = _open_learn(browser, app_url, 390, 844)
    pg.click("#sv-learn-sample")
    pg.wait_for_selector("#sv-learn-verdict .sv-learn-verdict")
    pg.wait_for_selector("#sv-learn-hist g.point")
    assert pg.evaluate("document.documentElement.scrollWidth") <= 391  # nothing sticks out sideways
    assert not pg.js_errors
    pg.context.close()


def test_part_5_takes_the_playground_run_and_names_the_what_ifs_best_k(browser, app_url):
    """Issue 52's one story in the page: Play and Run target-only in the Playground, then Learn part 5's
    "Use my playground run": its sliders take the run's a and c and its best k is the what-if's star
    (and the card names no other k)."""
    import re

    pg = _open_learn(browser, app_url)
    pg.get_by_role("tab", name="Playground").click()
    pg.click("#sv-play-btn")
    pg.wait_for_function("document.querySelector('#sv-status').innerText.includes('Finished')", timeout=120_000)
    pg.click("#sv-baseline-btn")
    pg.wait_for_function("document.querySelector('#sv-whatif-note').innerText.includes('measured')", timeout=120_000)
    pg.wait_for_selector("#sv-whatif-plot .legendtext >> text=/best k = /")
    star = int(re.search(r"best k = (\d+)", pg.inner_text("#sv-whatif-plot")).group(1))
    a = pg.locator("#sv-whatif-a input[type=number]").input_value()
    card = pg.inner_html("#sv-why")
    pg.get_by_role("tab", name="Learn").click()
    pg.locator("#sv-learn-hardware").get_by_text("Why the best k on this CPU").first.click()
    pg.click("#sv-learn-hw-run")
    pg.wait_for_selector("#sv-learn-hw-words .sv-learn-hw-best", state="attached")
    pg.wait_for_function("() => document.querySelector('#sv-learn-hw-words').innerText.includes('playground run')")
    learn = int(pg.get_attribute("#sv-learn-hw-words .sv-learn-hw-best", "data-best-k"))
    assert learn == star, (learn, star)
    assert abs(float(pg.locator("#sv-learn-hw-a input[type=number]").input_value()) - float(a)) < 1e-3
    said = re.search(r'data-best-k="(\d+)"', card)
    assert said is None or int(said.group(1)) == star, card
    box = pg.locator("#sv-learn-hw-a input[type=number]")  # a slider moved by hand leaves the run
    box.fill("0.55")
    box.press("Enter")
    pg.wait_for_function("() => document.querySelector('#sv-learn-hw-words')?.innerText.includes('a = 0.55')")
    assert not pg.js_errors
    pg.context.close()
