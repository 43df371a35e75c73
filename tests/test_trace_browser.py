"""A trace in the browser, both ways: downloaded from a live run in one page, loaded into another
whose controls say something else, it sets every control to the trace's run, and the next live
Step (after Reset) runs what the controls show. Headless Chromium on the tiny models."""

from __future__ import annotations

import pytest

from tests.support import app_server
from tests.support.browser import open_page

TIMEOUT_MS = 120_000
# Fixtures from conftest.py: app_url (the app served on the tiny models; skips without a browser), browser.

# The run the first page makes: every control the brief names away from the app's defaults
# (draft model, k = 4, T = 1, seed 0, the tiny prompt, 40 tokens).
RUN = {"proposer": "n-gram, else draft model", "k": "2", "temperature": "0.6", "seed": "5", "max-new": "10",
       "prompt": app_server.TINY_PROMPT + " and the cat"}

_SHOWN = """() => ({
  proposer: document.querySelector('#sv-proposer input:checked')?.closest('label')?.innerText.trim(),
  k: document.querySelector('#sv-k input[type=number]').value,
  temperature: document.querySelector('#sv-temperature input[type=number]').value,
  seed: document.querySelector('#sv-seed input').value,
  'max-new': document.querySelector('#sv-max-new input[type=number]').value,
  prompt: document.querySelector('#sv-prompt textarea').value,
})"""


def _page(browser, url):
    return open_page(browser, url, "#sv-step-btn", timeout_ms=TIMEOUT_MS, downloads=True)


def _set_number(page, elem_id: str, value: str) -> None:
    box = page.locator(f"#{elem_id} input[type=number]") if elem_id != "sv-seed" else page.locator("#sv-seed input")
    box.fill(value)
    box.press("Tab")


def _steps(page) -> int:
    return int(page.get_attribute("#sv-tokens .sv-tokens", "data-steps"))


def _wait_steps(page, n: int) -> None:
    page.wait_for_function(f"document.querySelector('#sv-tokens .sv-tokens')?.dataset.steps === '{n}'")


@pytest.mark.browser
def test_a_downloaded_trace_loads_back_into_the_controls_and_the_next_step_uses_them(browser, app_url, tmp_path):
    live = _page(browser, app_url)
    live.locator("#sv-proposer").get_by_label(RUN["proposer"], exact=True).check()
    for name in ("k", "temperature", "seed", "max-new"):
        _set_number(live, f"sv-{name}", RUN[name])
    live.fill("#sv-prompt textarea", RUN["prompt"])
    live.locator("#sv-prompt textarea").press("Tab")
    assert live.evaluate(_SHOWN) == RUN
    live.click("#sv-step-btn")
    _wait_steps(live, 1)
    first_step = live.inner_text("#sv-tokens .sv-out")  # what step 1 of this run commits
    live.click("#sv-play-btn")
    live.wait_for_function("document.querySelector('#sv-status').innerText.includes('Finished')")
    n = _steps(live)
    with live.expect_download() as dl:
        live.click("#sv-download")
    path = tmp_path / "trace.jsonl"
    dl.value.save_as(path)
    from specviz import load_trace

    trace = load_trace(path)
    assert len(trace.steps) == n and trace.header["k"] == 2 and "ngram+draft" in str(trace.header)

    other = _page(browser, app_url)  # another browser: the app's defaults in every control
    assert other.evaluate(_SHOWN) != RUN
    with other.expect_file_chooser() as chooser:
        other.click("#sv-upload")
    chooser.value.set_files(str(path))
    _wait_steps(other, n)
    assert "Loaded a trace" in other.inner_text("#sv-status")
    other.wait_for_function(f"(want) => JSON.stringify(({_SHOWN})()) === JSON.stringify(want)", arg=RUN)
    assert other.inner_text("#sv-tokens .sv-out") == live.inner_text("#sv-tokens .sv-out")

    other.click("#sv-reset-btn")  # back to live: the next Step runs what the controls show
    _wait_steps(other, 0)
    other.click("#sv-step-btn")
    _wait_steps(other, 1)
    assert "sv-msg-error" not in other.inner_html("#sv-status")
    assert other.evaluate(_SHOWN) == RUN
    assert other.inner_text("#sv-tokens .sv-out") == first_step
    other.click("#sv-play-btn")  # and the run goes on as the downloaded one did
    other.wait_for_function("document.querySelector('#sv-status').innerText.includes('Finished')")
    # on these tiny models seed 0, k = 4, T = 0 or 1, the draft model alone or the plain tiny prompt
    # each changes the run's text or its count of steps (tried once on the handlers)
    assert _steps(other) == n
    assert other.inner_text("#sv-tokens .sv-out") == live.inner_text("#sv-tokens .sv-out")
    assert other.js_errors == [] and live.js_errors == []
    live.context.close()
    other.context.close()
