"""The running app: handlers called directly, then the page driven in headless Chromium.

The app is served in this process on 127.0.0.1 with tiny random models (tests/support/app_server.py);
Playwright drives Debian's Chromium (its headless shell, never a downloaded browser).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support import app_server
from tests.support.browser import boxes as page_boxes
from tests.support.browser import lesson_mode_off

TIMEOUT_MS = 120_000
# Fixtures from conftest.py: tiny_env (the tiny models as the app's defaults), app_url (the app
# served on them; skips without a browser), browser (Debian's Chromium through Playwright).


# -- handlers, without a browser ---------------------------------------------------------------


def _raw(env, **change):
    return app_server.raw_step_args(env, **change)


def test_step_handler_streams_status_then_the_step(tiny_env):
    from specviz.ui import playground as pg
    from specviz.ui.playground_view import OUTPUTS
    from specviz.ui.state import PlaygroundState

    st = PlaygroundState()
    frames = list(pg.on_step(st, *_raw(tiny_env)))
    assert all(set(f) <= set(OUTPUTS) for f in frames)  # the view and the lesson (specviz.ui.lesson_view), by name
    text, charts = frames[-2], frames[-1]  # the step's text and its p/q chart first, then the run plots
    assert len(st.steps) == 1 and 'data-steps="1"' in text["tokens"] and "sv-table" in text["table"]
    assert text["topk"] is not None and "topk" not in charts  # the chart title goes with the table it names
    assert "tokens" not in charts and charts["timeline"] is not None and charts["download"]["value"]
    frames = list(pg.on_step(st, *_raw(tiny_env)))
    assert len(st.steps) == 2
    # a new setting starts a new run
    list(pg.on_step(st, *_raw(tiny_env, k=2)))
    assert len(st.steps) == 1 and "Settings changed" in st.message[0]
    st.close()


def test_generators_may_resume_on_other_threads(tiny_env):
    """Gradio runs each next() of a sync generator in a worker thread, often a different one:
    no lock may be held across a yield (an RLock would fail to release)."""
    import threading

    from specviz.ui import playground as pg
    from specviz.ui.state import PlaygroundState

    st = PlaygroundState()
    for handler in (pg.on_step, pg.on_play, pg.on_baseline):
        gen = handler(st, *_raw(tiny_env, max_new_tokens=6))
        frames, errors = [], []
        while True:
            box = {}

            def pull():
                try:
                    box["frame"] = next(gen)
                except StopIteration:
                    box["stop"] = True
                except BaseException as e:  # noqa: BLE001
                    errors.append(e)
                    box["stop"] = True

            t = threading.Thread(target=pull)
            t.start()
            t.join()
            if "stop" in box:
                break
            frames.append(box["frame"])
        assert not errors and frames and st.message[1] != "error", (handler.__name__, st.message)
    st.close()


@pytest.mark.parametrize("proposer", ["cross", "early"])
def test_other_proposers_run(tiny_env, proposer):
    from specviz.ui import playground as pg
    from specviz.ui.state import PlaygroundState

    st = PlaygroundState()
    which = "xdraft" if proposer == "cross" else "early-exit"
    list(pg.on_play(st, *_raw(tiny_env, proposer=which, schedule="heuristic", max_new_tokens=10)))
    assert st.done and st.message[1] == "ok", st.message
    if which == "xdraft":
        assert "draft_tokens" in st.steps[0].info
    list(pg.on_step(st, *_raw(tiny_env, proposer="early-exit", layers=5)))  # deeper than the 2-layer target
    assert st.message[1] == "error" and "layers" in st.message[0]
    st.close()


def test_model_loading_progress_is_streamed(tiny_env, tmp_path):
    """A model that is not loaded yet: its loading stages show in the status box before the step."""
    from specviz.ui import playground as pg
    from specviz.ui.state import PlaygroundState

    target, _draft = app_server.make_tiny_models(tmp_path)  # a new path: not in the model cache
    st = PlaygroundState()
    frames = list(pg.on_step(st, *_raw(tiny_env, target=target, proposer="ngram")))
    statuses = [f["status"] for f in frames[:-2]]
    assert any("Loading" in s for s in statuses) and any(target in s for s in statuses), statuses
    assert len(st.steps) == 1
    st.close()


def test_handler_errors_are_messages_and_the_session_survives(tiny_env):
    from specviz.ui import playground as pg
    from specviz.ui.state import PlaygroundState

    st = PlaygroundState()
    list(pg.on_step(st, *_raw(tiny_env, proposer="ngram")))
    assert len(st.steps) == 1
    for bad, text in [
        (dict(target="no-such-owner/no-such-model-xyz"), "no-such-owner/no-such-model-xyz"),
        (dict(prompt="  "), "prompt is empty"),
        (dict(k=40), "from 1 to 16"),
        (dict(proposer="ngram", schedule="confidence"), "exactly as constant k"),
        (dict(draft=str(Path(tiny_env["SPECVIZ_DEFAULT_TARGET"]).parent / "missing")), "missing"),
    ]:
        frames = list(pg.on_step(st, *_raw(tiny_env, **bad)))
        assert st.message[1] == "error" and text in st.message[0], st.message
        assert "Traceback" not in frames[-1]["status"] and "sv-msg-error" in frames[-1]["status"]
    list(pg.on_step(st, *_raw(tiny_env, proposer="ngram")))
    assert len(st.steps) == 2  # the same run went on
    st.close()


def test_play_pause_reset_and_baseline_handlers(tiny_env):
    from specviz.ui import playground as pg
    from specviz.ui.state import PlaygroundState

    st = PlaygroundState()
    frames = list(pg.on_play(st, *_raw(tiny_env)))
    assert st.done and frames[-1]["download"]["value"]  # the trace download is offered at the end
    frames = list(pg.on_baseline(st, *_raw(tiny_env)))
    assert st.comparable_baseline() is not None and "×" in frames[-1]["metrics"]
    assert "speedup" in st.message[0]
    pg.on_pause(st)
    assert st.stop.is_set()
    out = pg.on_reset(st)
    assert not st.steps and st.baseline_session is None and 'data-steps="0"' in out["tokens"]
    st.close()


# -- the browser -------------------------------------------------------------------------------


@pytest.fixture
def page(browser, app_url):
    context = browser.new_context(viewport={"width": 1280, "height": 800}, accept_downloads=True)
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.set_default_timeout(TIMEOUT_MS)
    pg.goto(app_url)
    pg.wait_for_selector("#sv-step-btn")
    # these tests read each Step committed: the teacher's quick mode, one click off the page's lesson mode
    assert pg.is_checked("#sv-lesson-mode input")
    lesson_mode_off(pg)
    pg.js_errors = errors
    yield pg
    context.close()


def _steps_shown(page) -> int:
    return int(page.get_attribute("#sv-tokens .sv-tokens", "data-steps"))


def _metric(page, key: str) -> str:
    return page.inner_text(f'#sv-metrics [data-metric="{key}"] .sv-card-value').strip()


def _click_step(page, expect: int) -> None:
    page.click("#sv-step-btn")
    page.wait_for_function(f"document.querySelector('#sv-tokens .sv-tokens')?.dataset.steps === '{expect}'")


# temperature 1 on the tiny pair with this seed: step 1 rejects its second draft, step 2 keeps all
# four and takes a bonus, step 3 rejects its first (every kind of token in three steps)
EVERY_KIND_SEED = 9


def _use_seed(page, seed: int) -> None:
    box = page.locator("#sv-seed input[type=number]")
    box.fill(str(seed))
    box.press("Tab")  # blur: the value is committed before the first step reads it


def _play_to_end(page) -> None:
    page.click("#sv-play-btn")
    page.wait_for_selector("#sv-tokens .sv-end")
    page.wait_for_function("document.querySelector('#sv-status').innerText.includes('Finished')")


def _set_dropdown(page, elem_id: str, value: str) -> None:
    box = page.locator(f"#{elem_id} input")
    box.click()
    box.fill(value)
    box.press("Enter")
    page.locator("#sv-prompt textarea").click()  # blur: the custom value is committed


@pytest.mark.browser
def test_three_steps_show_their_tokens_and_markup_and_a_token_inspects_its_step(page):
    assert _metric(page, "steps") == "0"
    page.fill("#sv-prompt textarea", app_server.TINY_PROMPT)
    _use_seed(page, EVERY_KIND_SEED)
    for i in range(1, 4):
        _click_step(page, i)
        assert _metric(page, "steps") == str(i)
    for step in range(3):
        assert page.locator(f'#sv-tokens .tok[data-step="{step}"]').count() >= 1
    # EVERY_KIND_SEED: a rejection, a bonus step, another rejection
    assert page.locator("#sv-tokens .tok-accepted").count() >= 1
    assert page.locator("#sv-tokens .tok-rejected").count() == 2
    assert page.locator("#sv-tokens .tok-resampled").count() == 2
    assert page.locator("#sv-tokens .tok-bonus").count() == 1
    assert page.locator("#sv-tokens .tok-rejected").first.evaluate("e => getComputedStyle(e).textDecorationLine") == "line-through"
    assert _metric(page, "drafted") == "12"
    assert _metric(page, "acceptance").endswith("%")
    # the inspector follows the latest step
    assert "Step 3" in page.inner_text("#sv-summary")
    assert page.locator("#sv-draft-table tbody tr").count() == 5  # 4 drafts and the correction
    assert "rejected" in page.inner_text("#sv-draft-table")
    # hover a token: its numbers; click it: its step in the inspector
    tok = page.locator('#sv-tokens .tok-rejected[data-step="0"]')
    tok.hover()
    tip = page.locator("#sv-tip")
    tip.wait_for(state="visible")
    text = tip.inner_text()
    assert "rejected" in text and "p = " in text and "q = " in text and "min(1, p/q)" in text and "u = " in text
    tok.click()
    page.wait_for_function("document.querySelector('#sv-summary').innerText.includes('Step 1')")
    assert page.locator('#sv-tokens .sv-step.sel[data-step="0"]').count() == 1
    assert "position 2" in page.inner_text("#sv-topk")  # the clicked (rejected) position is charted
    assert page.locator("#sv-topk .legendtext", has_text="residual").count() == 1
    page.click('#sv-draft-table tr[data-pos="0"]')  # a table row charts its position
    page.wait_for_function("(document.querySelector('#sv-topk .gtitle')?.textContent || '').includes('position 1')")
    assert page.locator('#sv-draft-table tr.sel[data-pos="0"]').count() == 1
    assert not page.js_errors


@pytest.mark.browser
def test_an_unknown_model_an_example_prompt_and_typical_acceptance(page, tiny_env):
    """An unknown model is a message and the next Step works; an example prompt fills the prompt box;
    typical acceptance is offered, and a run on it is labelled LOSSY (each on the page the last left)."""
    _click_step(page, 1)
    _set_dropdown(page, "sv-target", "no-such-owner/no-such-model-xyz")
    page.click("#sv-step-btn")
    page.wait_for_selector("#sv-status .sv-msg-error")
    err = page.inner_text("#sv-status")
    assert "no-such-owner/no-such-model-xyz" in err and "Traceback" not in err
    assert _steps_shown(page) == 1  # the run is still there
    _set_dropdown(page, "sv-target", tiny_env["SPECVIZ_DEFAULT_TARGET"])
    _click_step(page, 2)
    assert page.locator("#sv-status .sv-msg-error").count() == 0

    page.click("#sv-examples input")
    option = page.locator("ul[role=listbox] li", has_text="extraction").first
    label = option.inner_text()
    option.click()
    page.wait_for_function("document.querySelector('#sv-prompt textarea').value.startsWith('Given the following data')")
    assert "extraction" in label

    page.fill("#sv-prompt textarea", app_server.TINY_PROMPT)  # a new prompt: the next Step starts a new run
    page.get_by_label("typical (LOSSY)").check()
    _click_step(page, 1)
    assert "LOSSY" in page.inner_text("#sv-status") and "LOSSY" in page.inner_text("#sv-summary")
    assert "p>" in page.inner_text("#sv-draft-table")  # each judged draft against its threshold
    assert not page.js_errors


@pytest.mark.browser
def test_play_to_the_end_plots_a_trace_that_replays_and_target_only_gives_the_speedup(browser, app_url, page, tmp_path):
    _play_to_end(page)
    n = _steps_shown(page)
    assert n >= 3 and _metric(page, "steps") == str(n)
    for plot in ("sv-plot-acceptance", "sv-plot-timeline", "sv-plot-tokens", "sv-topk"):
        page.wait_for_selector(f"#{plot} .main-svg")
        assert page.locator(f"#{plot} g.point").count() > 0, plot  # bars were drawn
    assert page.locator("#sv-plot-timeline g.point").count() >= 3 * n - 3  # draft/verify/other per step

    # the run's trace downloads, and loads and replays in another browser
    with page.expect_download() as dl:
        page.click("#sv-download")
    path = tmp_path / "trace.jsonl"
    dl.value.save_as(path)
    from specviz import load_trace

    assert len(load_trace(path).steps) == n
    replay = browser.new_context(viewport={"width": 1280, "height": 800}).new_page()
    replay.set_default_timeout(TIMEOUT_MS)
    replay.goto(app_url)
    replay.wait_for_selector("#sv-step-btn")
    with replay.expect_file_chooser() as chooser:
        replay.click("#sv-upload")
    chooser.value.set_files(str(path))
    replay.wait_for_function(f"document.querySelector('#sv-tokens .sv-tokens')?.dataset.steps === '{n}'")
    assert "Loaded a trace" in replay.inner_text("#sv-status")
    assert replay.inner_text("#sv-tokens .sv-out") == page.inner_text("#sv-tokens .sv-out")
    replay.click("#sv-play-btn")  # replays from the first step
    replay.wait_for_function(f"document.querySelector('#sv-tokens .sv-tokens')?.dataset.steps === '{n}' && "
                             "document.querySelector('#sv-status').innerText.includes('Finished')")
    replay.context.close()

    # target-only on the same prompt: the speedup
    assert _metric(page, "speedup") == "—"
    page.click("#sv-baseline-btn")
    page.wait_for_function(
        "document.querySelector('#sv-metrics [data-metric=\"speedup\"] .sv-card-value')?.innerText.includes('×')"
    )
    assert re.fullmatch(r"\d+\.\d\d×", _metric(page, "speedup"))
    assert page.locator("#sv-baseline .tok-target").count() >= 1
    # the status line arrives in the handler's last frame, after the metrics
    page.wait_for_function("document.querySelector('#sv-status')?.innerText.includes('speedup')")
    assert "speedup" in page.inner_text("#sv-status")
    assert not page.js_errors


@pytest.mark.browser
def test_each_browser_session_has_its_own_run(browser, app_url, page):
    other = browser.new_context(viewport={"width": 1280, "height": 800}).new_page()
    other.set_default_timeout(TIMEOUT_MS)
    other.goto(app_url)
    other.wait_for_selector("#sv-step-btn")
    _click_step(page, 1)
    _click_step(page, 2)
    _click_step(other, 1)
    assert _steps_shown(page) == 2 and _steps_shown(other) == 1
    other.click("#sv-reset-btn")
    other.wait_for_function("document.querySelector('#sv-tokens .sv-tokens')?.dataset.steps === '0'")
    _click_step(page, 3)
    other.context.close()


def _overlaps(boxes: list[dict]) -> list[tuple[int, int]]:
    bad = []
    for i, a in enumerate(boxes):
        for j, b in enumerate(boxes[:i]):
            if a["x"] < b["x"] + b["width"] - 1 and b["x"] < a["x"] + a["width"] - 1 and \
               a["y"] < b["y"] + b["height"] - 1 and b["y"] < a["y"] + a["height"] - 1:
                bad.append((j, i))
    return bad


@pytest.mark.browser
@pytest.mark.parametrize("width, height", [(1280, 800), (390, 844)])
def test_layout_has_no_overlaps(browser, app_url, width, height):
    pg = browser.new_context(viewport={"width": width, "height": height}).new_page()
    pg.set_default_timeout(TIMEOUT_MS)
    pg.goto(app_url)
    pg.wait_for_selector("#sv-step-btn")
    _play_to_end(pg)
    assert pg.evaluate("document.documentElement.scrollWidth") <= width + 1  # nothing sticks out sideways
    parts = ["#sv-settings", "#sv-prompt", "#sv-buttons", "#sv-status", "#sv-metrics", "#sv-legend", "#sv-tokens",
             "#sv-step-slider", "#sv-draft-table", "#sv-topk", "#sv-plot-acceptance", "#sv-plot-timeline",
             "#sv-plot-tokens", "#sv-download"]
    boxes = page_boxes(pg, parts)
    assert all(b and b["width"] > 0 for b in boxes), dict(zip(parts, boxes))
    assert not _overlaps(boxes), [(parts[i], parts[j]) for i, j in _overlaps(boxes)]
    for group in ("#sv-buttons button", "#sv-metrics .sv-card"):
        items = pg.evaluate("(g) => [...document.querySelectorAll(g)].map((el) => el.getBoundingClientRect())"
                            ".map((r) => ({x: r.x, y: r.y, width: r.width, height: r.height}))", group)
        assert not _overlaps(items), group
        assert all(b["x"] >= 0 and b["x"] + b["width"] <= width + 1 for b in items), group
    pg.context.close()
