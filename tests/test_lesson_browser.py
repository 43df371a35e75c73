"""The playground as a lesson, in headless Chromium on the tiny models: each guided tour reaches its
moment, the keyboard steps through a run, a loaded LOSSY trace says LOSSY, and at 390x844 nothing on
the Playground tab is wider than the screen.
"""

from __future__ import annotations

import json

import pytest

from tests.support import app_server
from tests.support.browser import ARRIVED, boxes, open_page

TIMEOUT_MS = 120_000
SHOTS = __import__("os").environ.get("SPECVIZ_TEST_SHOTS", "")  # a folder: the guess and what-if tests save their panels there

# The moment each tour must reach: a JS condition on the page.
MOMENTS = {
    "speedup": "document.querySelector('#sv-race-box')?.offsetParent !== null"
               " && !!document.querySelector('#sv-race .sv-race-spec')"
               " && !!document.querySelector('#sv-why .sv-why:not([data-verdict=\"unknown\"]):not([data-verdict=\"none\"])')"
               " && document.querySelector('#sv-status').innerText.includes('Tour done')",
    # issue 52: the step with the rejection, at its start (draft phase), lesson mode on
    "rejection": "!!document.querySelector('#sv-phase .sv-phase[data-phase=\"draft\"]')"
                 " && document.querySelector('#sv-lesson-mode input').checked"
                 " && document.querySelector('#sv-status').innerText.includes('Lesson mode is on')",
    "no-pay": "!!document.querySelector('#sv-why .sv-why[data-limit]')"
              " && document.querySelector('#sv-why').innerText.includes('not trained')"
              " && document.querySelector('#sv-status').innerText.includes('Tour done')",
    "tree": "document.querySelector('#sv-tree-row')?.offsetParent !== null"
            " && !!document.querySelector('#sv-tree .js-plotly-plot')"
            " && document.querySelector('#sv-status').innerText.includes('Tour: step')",
}


REJECTED_SHOWN = "!!document.querySelector('#sv-phase .sv-phase[data-phase=\"decide\"] .sv-phase-cell[data-kind=\"rejected\"]')"


PHASE_AT = ("(() => { const e = document.querySelector('#sv-phase .sv-phase');"
            " return e ? [e.dataset.step, e.dataset.phase, e.dataset.upto].join('|') : ''; })()")


def _walk_to_the_rejection(page, most: int = 16) -> None:
    """phase ▶ from the rejection tour's draft phase until the rejected draft is decided, a click at a
    time: each waits for the page to show the phase it moved to (clicks 300 ms apart queued up on a
    busy server and walked past the decide phase, where the rejection is shown)."""
    for _ in range(most):
        if page.evaluate(REJECTED_SHOWN):
            return
        at = page.evaluate(PHASE_AT)
        page.click("#sv-next-phase")
        page.wait_for_function(f"{PHASE_AT} !== {json.dumps(at)}")
    page.wait_for_function(REJECTED_SHOWN)


def _page(browser, url, width=1280, height=800):
    return open_page(browser, url, "#sv-step-btn", width=width, height=height, timeout_ms=TIMEOUT_MS)


# Where each element lies against the viewport: {id: [top, bottom, innerHeight]} (null when hidden).
_BOXES = """(ids) => Object.fromEntries(ids.map((id) => { const el = document.getElementById(id);
  if (!el || el.offsetParent === null) return [id, null];
  const r = el.getBoundingClientRect(); return [id, [Math.round(r.top), Math.round(r.bottom), window.innerHeight]]; }))"""


def _in_view(box) -> bool:
    """[top, bottom, viewport height]: inside the viewport, or, taller than it, starting at its top
    (a phone's why card on a busy machine says more: 889 px in 844)."""
    if box is None or box[0] < -1:
        return False
    return box[1] <= box[2] + 1 or (box[1] - box[0] > box[2] and box[0] <= 100)


def click_tour(page, tour: str) -> None:
    """Click a tour and wait for its moment, whatever an earlier tour on the page left on screen: the
    status must change and say the tour arrived (ARRIVED) first, the page's arrival mark cleared; a
    tour that found nothing, showed an error or never reached its moment fails naming itself."""
    page.evaluate("() => { delete document.body.dataset.svArrived;"
                  " const s = document.querySelector('#sv-status'); s.dataset.before = s.innerText; }")
    page.click(f"#sv-tour-{tour}")
    page.wait_for_function("(words) => { const s = document.querySelector('#sv-status');"
                           " return s.innerText !== s.dataset.before && words.some(w => s.innerText.includes(w)); }",
                           arg=list(ARRIVED), polling=100)
    status = page.inner_text("#sv-status")
    assert "finished without" not in status and "sv-msg-error" not in page.inner_html("#sv-status"), (tour, status)
    try:
        page.wait_for_function(MOMENTS[tour])
    except Exception as e:  # what the page showed instead of the tour's moment
        raise AssertionError(f"{tour}: {page.inner_text('#sv-status')}\nwhy: {page.inner_text('#sv-why')[:600]}") from e


def _chart_by_the_decide_boxes(page, width: int) -> None:
    """Issue 52: on a phone the rejection tour's decide boxes had their p/q chart about 750 px below
    them (after the guess, the summary and the draft table). Now the chart comes right under the
    phase boxes on a phone and beside them on a wide screen; the inspector's order is otherwise kept."""
    box = {k: b for k, b in zip(("phase", "chart", "guess", "table", "nav"),
                                boxes(page, ["#sv-phase", "#sv-topk", "#sv-guess-row", "#sv-draft-table", "#sv-nav"]))}
    phase, chart = box["phase"], box["chart"]
    if width < 640:
        gap = chart["y"] - (phase["y"] + phase["height"])
        assert 0 <= gap <= 40, box  # just under the boxes
        assert box["nav"]["y"] < phase["y"] < chart["y"] < box["guess"]["y"] < box["table"]["y"], box
        assert page.evaluate("document.documentElement.scrollWidth") <= width + 1
        mode, animate = boxes(page, ["#sv-lesson-mode", "#sv-animate"])  # one short bar: the switch, "animate" beside it
        assert mode["height"] <= 60 and abs(animate["y"] + animate["height"] / 2 - mode["y"] - mode["height"] / 2) <= 8, (mode, animate)
        assert animate["x"] >= mode["x"] + mode["width"] - 1 and animate["x"] + animate["width"] <= width, (mode, animate)
    else:
        assert chart["x"] >= phase["x"] + phase["width"] - 1 and chart["y"] < phase["y"] + phase["height"], box  # beside


@pytest.mark.browser
@pytest.mark.parametrize("size", [(1280, 800), (390, 844)], ids=["desktop", "phone"])
def test_each_tour_arrives_at_its_moment_in_view(browser, app_url, size):
    """Every tour, one after another on one page (as a reader takes them): when the status says the
    tour has arrived, its moment lies inside the viewport and has the focus, and the controls its text
    names (the rejection's ◀ phase / phase ▶) are in view with it; it stays there once the charts have
    been drawn. The rejection, walked to its rejected draft, has its p/q chart by the decide boxes."""
    from specviz.ui.lesson import ARRIVALS

    page = _page(browser, app_url, *size)
    for tour in MOMENTS:
        click_tour(page, tour)
        assert "sv-msg-error" not in page.inner_html("#sv-status"), tour
        moment, *extras = ARRIVALS[tour]
        # the page's script scrolls as the message appears (it looks every 100 ms)
        page.wait_for_function("(m) => document.body.dataset.svArrived === m", arg=moment, timeout=60_000)
        for when in ("on arrival", "after the charts"):
            boxes = page.evaluate(_BOXES, [moment, *extras])
            assert _in_view(boxes[moment]), (tour, when, boxes)
            assert page.evaluate("document.activeElement?.id") == moment, (tour, when)
            if tour == "rejection":  # the text names ◀ phase / phase ▶ and rejection ▶: they are in view
                assert _in_view(boxes["sv-nav"]), (when, boxes)
                assert "just above" in page.inner_text("#sv-status")
            page.wait_for_timeout(1600)
        if tour == "rejection":  # nothing told yet; phase ▶ walks it to the rejected draft
            assert "rejected" not in page.inner_text("#sv-draft-table")
            _walk_to_the_rejection(page)
            assert "rejected" in page.inner_text("#sv-draft-table")
            page.wait_for_timeout(1000)
            _chart_by_the_decide_boxes(page, size[0])
        if SHOTS:
            page.screenshot(path=f"{SHOTS}/tour-{tour}-{size[0]}.png")
    assert not page.js_errors
    page.context.close()


@pytest.mark.browser
def test_after_a_run_and_its_baseline_the_card_explains_itself_and_what_if_moves_with_a_slider(browser, app_url):
    page = _page(browser, app_url)
    page.click("#sv-play-btn")
    page.wait_for_function("document.querySelector('#sv-status').innerText.includes('Finished')")
    assert "Run target-only" in page.inner_text("#sv-why")  # no baseline yet: it says what to do
    page.click("#sv-baseline-btn")
    page.wait_for_function("document.querySelector('#sv-why .sv-why[data-verdict]')?.dataset.verdict !== 'unknown'"
                           " && !!document.querySelector('#sv-race .sv-race-base')")
    text = page.inner_text("#sv-why")
    assert "accepted" in text and "target step" in text and "x" in text
    # what-if starts from the run: its note says measured
    page.wait_for_function("document.querySelector('#sv-whatif-note').innerText.includes('measured')")
    # the baseline handler's last frame (its status line) re-sends the panel: move the slider after it,
    # or that frame, in flight on a busy machine, puts the run's own a back over the 0.95
    page.wait_for_function("document.querySelector('#sv-status').innerText.includes('speedup')")
    box = page.locator("#sv-whatif-a input[type=number]")
    box.fill("0.95")
    box.press("Enter")
    page.wait_for_function("document.querySelector('#sv-whatif-note').innerText.includes('At a = 0.95')")
    assert page.locator("#sv-whatif-plot .js-plotly-plot").count() == 1
    if SHOTS:
        page.locator("#sv-whatif-box").screenshot(path=SHOTS + "/whatif.png")
    assert "sv-msg-error" not in page.inner_html("#sv-status") and not page.js_errors
    page.context.close()


def _guess_first(page) -> None:
    """A first visit's Step opens the draft phase: no bet yet; at verify, a bet; the draw and the score."""
    assert page.is_checked("#sv-lesson-mode input")  # a first visit is in lesson mode (issue 52)
    page.click("#sv-step-btn")
    page.wait_for_function("document.querySelector('#sv-phase .sv-phase')?.dataset.phase === 'draft'")
    assert page.is_disabled("#sv-guess-accept")  # no p yet: nothing to bet on
    page.click("#sv-next-phase")  # verify: p is known, u is not
    page.wait_for_selector("#sv-guess .sv-guess[data-open='1']")
    assert "p/q" in page.inner_text("#sv-guess") and "u =" not in page.inner_text("#sv-guess")
    page.click("#sv-guess-accept")
    page.wait_for_selector("#sv-guess .sv-guess[data-total='1']")
    assert page.evaluate("document.querySelector('#sv-phase .sv-phase').dataset.phase") == "decide"
    text = page.inner_text("#sv-guess")
    assert "You said accept" in text and "u =" in text and "of 1 right" in text
    assert "Score" in page.inner_text("#sv-status")
    if SHOTS:
        page.locator("#sv-guess-row").screenshot(path=SHOTS + "/guess.png")
    page.click("#sv-reset-btn")
    page.wait_for_selector("#sv-guess .sv-guess[data-total='0']")


def _keys_and_buttons(page) -> None:
    """Three Steps, then the keys and the nav buttons walk back through steps, phases and rejections."""
    for i in (1, 2, 3):
        page.click("#sv-step-btn")
        page.wait_for_function(f"document.querySelector('#sv-tokens .sv-tokens')?.dataset.steps === '{i}'")
    page.locator("#sv-status").click()  # focus off any field: keys are ignored while typing
    page.keyboard.press("ArrowLeft")
    page.wait_for_function("document.querySelector('#sv-phase .sv-phase')?.dataset.step === '1'")
    page.keyboard.press(",")  # previous phase
    page.wait_for_function("document.querySelector('#sv-phase .sv-phase')?.dataset.phase !== 'commit'")
    page.click("#sv-prev-rejection")  # the tiny pair rejects at step 1 (seed 0, T = 1)
    page.wait_for_function("document.querySelector('#sv-phase .sv-phase')?.dataset.step === '0'"
                           " && document.querySelector('#sv-phase .sv-phase')?.dataset.phase === 'decide'")


def _animate(page) -> None:
    """A Step, then "animate this step" walks its every phase with no click."""
    n = int(page.get_attribute("#sv-tokens .sv-tokens", "data-steps") or 0) + 1
    page.click("#sv-step-btn")
    page.wait_for_function(f"document.querySelector('#sv-tokens .sv-tokens')?.dataset.steps === '{n}'")
    page.evaluate("""() => { window.__phases = [];
      window.__poll = setInterval(() => { const p = document.querySelector('#sv-phase .sv-phase')?.dataset.phase;
        if (p && window.__phases[window.__phases.length - 1] !== p) window.__phases.push(p); }, 25); }""")
    page.click("#sv-animate")
    page.wait_for_function("(() => { const s = window.__phases, i = s.lastIndexOf('draft');"
                           " return i >= 0 && s.slice(i).join(' ').startsWith('draft verify decide') && s[s.length - 1] === 'commit'; })()")
    seen = page.evaluate("window.__phases")
    last = len(seen) - 1 - seen[::-1].index("draft")
    assert seen[last:] == ["draft", "verify", "decide", "commit"], seen


@pytest.mark.browser
def test_guess_first_then_keys_and_buttons_walk_the_run_and_animate_plays_a_step(browser, app_url):
    """One page, as a reader goes: a guess on the first step, Reset, three Steps walked back with the
    keys and buttons, then a Step animated."""
    page = _page(browser, app_url)
    _guess_first(page)
    _keys_and_buttons(page)
    _animate(page)
    assert "sv-msg-error" not in page.inner_html("#sv-status") and not page.js_errors
    page.context.close()


@pytest.mark.browser
def test_a_loaded_lossy_trace_says_lossy(browser, app_url, tiny_env, tmp_path):
    from specviz.ui import playground as pg
    from specviz.ui.state import PlaygroundState

    st = PlaygroundState()
    raw = (tiny_env["SPECVIZ_DEFAULT_TARGET"], "draft", tiny_env["SPECVIZ_DEFAULT_DRAFT"], 4, 0.7, 1.0, 0, 0, 12,
           app_server.TINY_PROMPT, True, "constant", 1, "typical (LOSSY)", "")
    list(pg.on_play(st, *raw))
    page = _page(browser, app_url)
    with page.expect_file_chooser() as chooser:
        page.click("#sv-upload")
    chooser.value.set_files(st.trace_path)
    page.wait_for_function("document.querySelector('#sv-status').innerText.includes('Loaded a trace')")
    assert "LOSSY" in page.inner_text("#sv-status")
    page.wait_for_function("document.querySelector('#sv-acceptance input[type=radio]:checked')?.value?.includes('LOSSY')"
                           " || [...document.querySelectorAll('#sv-acceptance input:checked')].some(e => "
                           "(e.closest('label')?.innerText || '').includes('LOSSY'))")
    page.context.close()
    st.close()


_TOO_WIDE = """(w) => {
  const out = [];
  for (const el of document.querySelectorAll('#sv-main-row *, .sv-section-title, #sv-tours *')) {
    if (el.offsetParent === null) continue;
    const r = el.getBoundingClientRect();
    if (r.width === 0 || r.height === 0) continue;
    // inside a box made to scroll sideways (a table, the race text): that box is what must fit
    const box = el.parentElement?.closest('.sv-table-wrap, .sv-scroll-x, .table-wrap, .sv-race-text, .sv-out, .sv-prompt');
    const scrolls = !!box && box.getBoundingClientRect().right <= w + 1;
    if (!scrolls && r.right > w + 1) out.push((el.id || el.className || el.tagName) + ' right=' + Math.round(r.right));
  }
  return out.slice(0, 10);
}"""


# Text cut off inside its own box: a visible element that hides its overflow (or ends it with an
# ellipsis) while its content is wider or taller than the box. A phone has no hover to read the rest.
_CUT_TEXT = """() => [...document.querySelectorAll('#sv-main-row *')].filter((el) => {
  if (el.offsetParent === null || !el.innerText?.trim()) return false;
  const cs = getComputedStyle(el);
  const hidesX = ['hidden', 'clip'].includes(cs.overflowX) || cs.textOverflow === 'ellipsis';
  const hidesY = ['hidden', 'clip'].includes(cs.overflowY);
  return (hidesX && el.scrollWidth > el.clientWidth + 1) || (hidesY && el.scrollHeight > el.clientHeight + 1);
}).map((el) => (el.id || el.className) + ': ' + el.innerText.slice(0, 40)).slice(0, 10)"""


@pytest.mark.browser
def test_phone_width_nothing_wider_than_the_screen(browser, app_url):
    page = _page(browser, app_url, 390, 844)
    page.click("#sv-tour-speedup")
    page.wait_for_function(MOMENTS["speedup"])
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    assert page.evaluate(_TOO_WIDE, 390) == []
    assert page.evaluate(_CUT_TEXT) == []  # the cards' labels and notes wrap (they ended in "…" on a phone)
    guess, bets = boxes(page, ["#sv-guess", "#sv-guess-buttons"])  # one frame: the tour may still scroll
    assert guess["width"] >= 300 and bets["y"] >= guess["y"] + guess["height"] - 1  # the question full width, the bets under it
    page.wait_for_timeout(1500)  # the charts' second frame
    assert [c for c in page.evaluate(_TITLE_OVER_LEGEND) if c[1]] == []  # the race, what-if, run plots
    page.click("#sv-tour-tree")
    page.wait_for_function(MOMENTS["tree"])
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    assert page.evaluate(_TOO_WIDE, 390) == []
    page.wait_for_timeout(1500)
    assert [c for c in page.evaluate(_TITLE_OVER_LEGEND) if c[1]] == []  # the tree and its mask too
    # the check can fail: a 600 px element in the status line is reported
    page.evaluate("document.querySelector('#sv-status').insertAdjacentHTML('beforeend', "
                  "'<div id=\"sv-probe\" style=\"width:600px;height:4px\"></div>')")
    assert page.evaluate(_TOO_WIDE, 390)  # (it and the boxes it widens)
    page.context.close()


@pytest.mark.browser
def test_a_typed_model_id_is_kept_and_a_clamped_value_says_so(browser, app_url):
    page = _page(browser, app_url)
    page.click("#sv-proposer label:has-text('draft model') >> nth=0")
    box = page.locator("#sv-draft input")
    box.click()
    box.fill("gemma-3-270m")  # a prefix of another menu item (gemma-3-270m@int8)
    box.press("Enter")
    page.wait_for_timeout(500)
    assert box.input_value() == "gemma-3-270m"
    page.locator("#sv-prompt textarea").click()
    page.wait_for_timeout(500)
    assert box.input_value() == "gemma-3-270m"
    for elem, value, words in [("sv-k", "0", "k"), ("sv-temperature", "-1", "Temperature")]:
        box = page.locator(f"#{elem} input[type=number]")
        box.fill(value)
        box.press("Tab")
        page.wait_for_selector(f"#{elem} .sv-clamp-note")
        note = page.inner_text(f"#{elem} .sv-clamp-note")
        assert words in note and value in note, (elem, note)
    page.context.close()


# The draft table: per row, the verdict cell's box against the table's box, and whether the box scrolls sideways.
_VERDICTS = """() => { const wrap = document.querySelector('#sv-draft-table .sv-table-wrap'); if (!wrap) return null;
  const w = wrap.getBoundingClientRect();
  const cells = [...wrap.querySelectorAll('tbody tr')].map((tr) => { const r = tr.lastElementChild.getBoundingClientRect();
    const td = tr.lastElementChild;  // its text overflowing the cell counts as out of its box
    return [Math.round(r.left), Math.round(r.right + Math.max(0, td.scrollWidth - td.clientWidth)), td.innerText]; });
  return {left: Math.round(w.left), right: Math.round(w.right), hidden: wrap.scrollWidth - wrap.clientWidth, cells}; }"""

# Every drawn chart: does a title line overlap its legend? [[chart id, overlaps], ...]
_TITLE_OVER_LEGEND = """() => [...document.querySelectorAll('.js-plotly-plot')].filter((p) => p.offsetParent !== null)
  .map((plot) => { const legend = plot.querySelector('g.legend'); if (!legend) return [plot.closest('[id]')?.id, false];
    const l = legend.getBoundingClientRect();
    const over = [...plot.querySelectorAll('.gtitle')].some((t) => { const r = t.getBoundingClientRect();
      return r.width > 0 && !(r.right <= l.left || l.right <= r.left || r.bottom <= l.top || l.bottom <= r.top); });
    return [plot.closest('[id]')?.id, over]; })"""


def _verdicts_fit(page) -> None:
    table = page.evaluate(_VERDICTS)
    assert table and table["cells"], table
    assert table["hidden"] <= 1, table  # no hidden sideways scroll
    for left, right, text in table["cells"]:
        assert left >= table["left"] - 1 and right <= table["right"] + 1 and text.strip(), table


@pytest.mark.browser
@pytest.mark.parametrize("size", [(1280, 800), (390, 844)], ids=["desktop", "phone"])
def test_verdicts_and_legends_fit_and_a_tap_shows_a_tokens_numbers(browser, app_url, size):
    """Greedy (the widest table: "no: argmax is '…'") and sampled steps: every verdict cell lies
    inside the table's box with nothing scrolled out of sight; no chart's title overlaps its legend;
    a tap on a token (a touch screen) shows its numbers."""
    page = browser.new_context(viewport={"width": size[0], "height": size[1]}, has_touch=True).new_page()
    page.set_default_timeout(TIMEOUT_MS)
    page.goto(app_url)
    page.wait_for_selector("#sv-step-btn")
    box = page.locator("#sv-temperature input[type=number]")
    box.fill("0")
    box.press("Enter")
    page.click("#sv-play-btn")
    page.wait_for_function("document.querySelector('#sv-status').innerText.includes('Finished')")
    page.click("#sv-baseline-btn")
    page.wait_for_function("document.querySelector('#sv-whatif-note').innerText.includes('measured')")
    page.wait_for_timeout(1500)  # the charts' second frame
    if SHOTS:
        page.locator("#sv-draft-table").screenshot(path=f"{SHOTS}/table-greedy-{size[0]}.png")
        page.locator("#sv-plot-timeline").screenshot(path=f"{SHOTS}/timeline-{size[0]}.png")
    assert "argmax" in page.inner_text("#sv-draft-table")  # greedy
    _verdicts_fit(page)
    assert [c for c in page.evaluate(_TITLE_OVER_LEGEND) if c[1]] == []
    tok = page.locator("#sv-tokens .tok[data-step='1']").first
    tok.scroll_into_view_if_needed()
    tok.tap()
    page.wait_for_timeout(1200)  # the pick redraws the text: the numbers stay
    tip = page.locator("#sv-tip")
    assert tip.is_visible() and "p" in tip.inner_text() and "q" in tip.inner_text()
    page.click("#sv-tour-rejection")  # sampled: u against min(1, p/q)
    page.wait_for_function(MOMENTS["rejection"])
    _walk_to_the_rejection(page)
    page.wait_for_timeout(1500)
    _verdicts_fit(page)
    assert [c for c in page.evaluate(_TITLE_OVER_LEGEND) if c[1]] == []
    if SHOTS:
        page.locator("#sv-draft-table").screenshot(path=f"{SHOTS}/table-sampled-{size[0]}.png")
    page.context.close()


# -- a table token never wraps inside itself ---------------------------------------------------------

# Token texts a real tokenizer makes, up to 12 characters ("␣" is how the table shows a space).
WORDY = [" everything", " information", "Hereinafter", " understand", "Here", " function", " Please", " between",
         " describing", "ness", " yourselves", " Her"]


def _worded(obj, word):
    """A trace line with each token's text swapped for ``word(token id)`` (drafts, the token after
    them, the committed tokens and every top list): the tiny models' vocabulary is one character a
    token, too short for a token to wrap."""
    if isinstance(obj, list):
        if len(obj) == 3 and isinstance(obj[0], int) and isinstance(obj[1], str):
            return [obj[0], word(obj[0]), obj[2]]  # a top list's (id, text, probability)
        return [_worded(v, word) for v in obj]
    if not isinstance(obj, dict):
        return obj
    out = {k: _worded(v, word) for k, v in obj.items()}
    if "token_id" in obj and "text" in obj:
        out["text"] = word(obj["token_id"])
    if "next_token_id" in obj:
        out["next_token_text"] = word(obj["next_token_id"])
    if "committed" in obj and "committed_text" in obj:
        out["committed_text"] = [word(i) for i in obj["committed"]]
    return out


# Runs in the page: the tokens (elements matching the selector) whose visible characters lie on more
# than one line ("Her" on one, "e" on the next), with the cell's width: each character's own box.
_SPLIT_TOKENS = """(sel) => [...document.querySelectorAll(sel)].filter((e) => e.offsetParent && e.textContent.trim()).map((e) => {
  const boxes = [], walker = document.createTreeWalker(e, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) for (let i = 0; i < n.data.length; i++) {
    if (!n.data[i].trim()) continue;
    const r = document.createRange(); r.setStart(n, i); r.setEnd(n, i + 1);
    const q = r.getBoundingClientRect(); if (q.width > 0) boxes.push(q); }
  const line = Math.min(...boxes.map((q) => q.height)), tops = boxes.map((q) => q.top);
  return {text: e.textContent, split: Math.max(...tops) - Math.min(...tops) > 0.6 * line,
          cell: Math.round((e.closest('td') || e.parentElement).getBoundingClientRect().width)}; })
  .filter((t) => t.split).map((t) => [t.text, t.cell])"""


@pytest.mark.browser
@pytest.mark.parametrize("size", [(1280, 800), (390, 844)], ids=["desktop", "phone"])
def test_no_table_token_of_up_to_12_characters_wraps_inside_itself(browser, app_url, tiny_env, tmp_path, size):
    """Issue 52 ("Her/e" wraps in the table): a greedy run (its table the widest: "no: argmax is '…'")
    whose tokens are words of 4 to 12 characters, loaded as a trace; on every step shown, each
    token in the draft table lies on one line. At 1280 px the token column was squeezed to 7 of the
    table font's characters ("␣everyth/ing"); on a phone its grid cell was a quarter of the row."""
    import json
    from pathlib import Path

    from specviz.ui import playground as pg
    from specviz.ui.state import PlaygroundState

    st = PlaygroundState()
    list(pg.on_play(st, *app_server.raw_step_args(tiny_env, temperature=0.0, max_new_tokens=24)))
    lines = [json.loads(line) for line in Path(st.trace_path).read_text(encoding="utf-8").splitlines()]
    st.close()
    trace = tmp_path / "wordy.jsonl"
    trace.write_text("".join(json.dumps(_worded(o, lambda i: WORDY[i % len(WORDY)]) if o["type"] == "step" else o,
                                        ensure_ascii=False) + "\n" for o in lines), encoding="utf-8")
    page = _page(browser, app_url, *size)
    with page.expect_file_chooser() as chooser:
        page.click("#sv-upload")
    chooser.value.set_files(str(trace))
    page.wait_for_function("document.querySelector('#sv-status').innerText.includes('Loaded a trace')"
                           " && !!document.querySelector('#sv-draft-table table')")
    seen, split = set(), []
    for _ in range(4):  # the last steps, each a table of its own
        step = page.get_attribute("#sv-draft-table table", "data-step")
        page.wait_for_timeout(300)  # (a frame's layout)
        seen |= {t.strip() for t in page.locator("#sv-draft-table code.tok").all_inner_texts()}
        split += page.evaluate(_SPLIT_TOKENS, "#sv-draft-table code.tok")
        if step == "0":
            break
        page.click("#sv-prev-step")
        page.wait_for_function("(s) => document.querySelector('#sv-draft-table table')?.dataset.step !== s", arg=step)
    assert max(len(t) for t in seen) >= 11, seen  # long tokens were shown (else the check proves nothing)
    assert split == [], split
    assert not page.js_errors
    page.context.close()
