"""The advisor's saved prediction in the playground: shown for the chosen configuration before a run
(the controls' change) and beside the measured speedup after target-only (specviz.app.runs.saved_advice,
specviz.viz.whatif.advice_html, specviz.ui.whatif_view)."""

from __future__ import annotations

import pytest

from specviz.app import runs
from specviz.proposers.advised import AdvisedPick, save_pick
from specviz.viz.whatif import advice_html
from tests.support import app_server


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECVIZ_CACHE_DIR", str(tmp_path))  # picks.json lives under <cache>/advisor
    return tmp_path


def test_the_saved_pick_matches_its_own_configuration_only(cache):
    assert runs.saved_advice("t", "ngram", 4) is None
    save_pick(AdvisedPick(target="t", spec="ngram", k=4, speedup=1.5, tau=2.5, machine="a test box"))
    assert runs.saved_advice("t", "ngram", 4).matches
    assert not runs.saved_advice("t", "ngram", 3).matches and not runs.saved_advice("t", "early-exit:4", 4).matches
    assert runs.saved_advice("t", "auto", 2).matches  # auto runs the pick
    assert runs.saved_advice("other", "ngram", 4) is None


def test_its_words_before_and_after_a_run(cache):
    assert 'data-advice="none"' in advice_html(None) and "specviz advise" in advice_html(None)
    save_pick(AdvisedPick(target="t", spec="ngram", k=4, speedup=1.5, tau=2.5))
    before = advice_html(runs.saved_advice("t", "ngram", 4))
    assert 'data-advice="predicted"' in before and "1.50×" in before and "τ 2.50" in before
    after = advice_html(runs.saved_advice("t", "ngram", 4), measured=1.2)
    assert 'data-advice="compared"' in after and "1.20×" in after and "-20%" in after
    other = advice_html(runs.saved_advice("t", "ngram", 2))
    assert 'data-advice="other"' in other and "ngram k = 4" in other


def test_the_playground_shows_it_before_play_and_compares_after(cache, tiny_env):
    from specviz.ui import playground as pg
    from specviz.ui.state import PlaygroundState
    from specviz.ui.whatif_view import advice_outputs, on_advice

    target, draft = tiny_env["SPECVIZ_DEFAULT_TARGET"], tiny_env["SPECVIZ_DEFAULT_DRAFT"]
    save_pick(AdvisedPick(target=target, spec=f"draft:{draft}", k=4, speedup=1.4, tau=2.0))
    assert 'data-advice="predicted"' in on_advice(target, "draft", draft, 4, 4, "")  # the controls, before Play
    assert 'data-advice="other"' in on_advice(target, "draft", draft, 3, 4, "")
    st = PlaygroundState()
    raw = (target, "draft", draft, 4, 0.0, 1.0, 0, 0, 12, app_server.TINY_PROMPT, True, "constant", 1, "exact", "")
    list(pg.on_play(st, *raw))
    assert 'data-advice="predicted"' in advice_outputs(st)["advice"]
    list(pg.on_baseline(st, *raw))
    note = advice_outputs(st)["advice"]
    assert 'data-advice="compared"' in note and "Measured here" in note
    st.close()


@pytest.mark.browser
def test_in_the_page_before_play_and_after_target_only(browser, app_url, tiny_env, cache):
    target, draft = tiny_env["SPECVIZ_DEFAULT_TARGET"], tiny_env["SPECVIZ_DEFAULT_DRAFT"]
    save_pick(AdvisedPick(target=target, spec=f"draft:{draft}", k=3, speedup=1.4, tau=2.0))
    page = browser.new_context(viewport={"width": 1280, "height": 800}).new_page()
    page.set_default_timeout(120_000)
    page.goto(app_url)
    page.wait_for_selector("#sv-step-btn")
    box = page.locator("#sv-k input[type=number]")
    box.fill("3")  # the advised configuration: its prediction shows before Play
    box.press("Enter")
    page.wait_for_selector("#sv-advice .sv-advice[data-advice='predicted']")
    assert "1.40×" in page.inner_text("#sv-advice")
    page.click("#sv-play-btn")
    page.wait_for_function("document.querySelector('#sv-status').innerText.includes('Finished')")
    page.click("#sv-baseline-btn")
    page.wait_for_selector("#sv-advice .sv-advice[data-advice='compared']")
    assert "Measured here" in page.inner_text("#sv-advice")
    page.context.close()
