"""The lesson on a phone, told at one moment: the p/q chart's title names the step and phase the
table shows in every drawn frame (after a Step, in "animate"), the top-10 chart's token labels do
not overlap at 390 px, nor does its "drafted x" mark cross an axis label, the Play speed menu reads
whole, the lesson switch stays at hand, and a guess-first walk at T > 0 where nothing on the page
contradicts anything else (the score, the verdicts, u, min(1, p/q), the chart title, the status
line). The rejection tour's chart by its decide boxes is checked in tests/test_lesson_browser.py.

Handlers first (no browser), then headless Chromium on the tiny models (tests/support/app_server.py).
"""

from __future__ import annotations

import json
import re

import pytest

from tests.support import app_server
from tests.support.browser import open_page

TIMEOUT_MS = 120_000
PHONE = dict(width=390, height=844)
SHOTS = __import__("os").environ.get("SPECVIZ_TEST_SHOTS", "")  # a folder: the walk's last frame is saved there


def _raw(env, **change):
    return app_server.raw_step_args(env, **change)


def _chart_title(frame) -> str:
    return json.loads(frame["topk"].plot)["layout"]["title"]["text"]


def _table_step(frame) -> int:
    return int(re.search(r'data-step="(\d+)"', frame["table"]).group(1))


# -- 1. the chart goes with the table it names ------------------------------------------------------


def test_every_frame_that_shows_a_step_carries_its_chart(tiny_env):
    """Step, Play, a phase move, animate and a guess: a frame that redraws the draft table also
    redraws the p/q chart, whose title names the same step (sent a frame later, it named the
    previous step for about half a second)."""
    from specviz.ui import lesson
    from specviz.ui import playground as pg
    from specviz.ui.state import PlaygroundState

    st = PlaygroundState()
    frames = list(pg.on_step(st, *_raw(tiny_env)))
    frames += list(pg.on_step(st, *_raw(tiny_env)))
    frames.append(lesson.on_lesson_mode(st, True))
    frames.append(lesson.on_phase(st, +1))
    frames.append(lesson.on_guess(st, "accept"))
    frames += list(lesson.on_animate(st))
    frames += list(pg.on_play(st, *_raw(tiny_env)))
    shown = [f for f in frames if "table" in f and "data-step" in f["table"]]
    assert len(shown) >= 8
    for f in shown:
        assert "topk" in f, sorted(f)
        assert _chart_title(f).startswith(f"Step {_table_step(f) + 1} "), (_chart_title(f), _table_step(f))
    st.close()


def _page(browser, url):
    return open_page(browser, url, "#sv-step-btn", timeout_ms=TIMEOUT_MS, **PHONE)


# Runs in the page: once per drawn frame, the summary's step and phase against the chart's title;
# a frame where they disagree is kept (the chart being redrawn, with no title, is not a disagreement).
_WATCH = """() => { const m = window.__sv_watch = {frames: 0, bad: []};
  const tick = () => {
    const s = document.querySelector('#sv-summary .sv-step-summary');
    const title = document.querySelector('#sv-topk .gtitle')?.textContent || '';
    const step = /^Step (\\d+)/.exec(s?.innerText || '')?.[1], shown = /^Step (\\d+)/.exec(title)?.[1];
    const phase = s?.dataset.phase || 'commit';
    m.frames += 1;
    if (step && shown) {
      const early = title.includes('not scored yet') ? 'draft' : title.includes('not judged yet') ? 'verify' : null;
      if (step !== shown || (phase === 'draft') !== (early === 'draft') || (phase === 'commit' && early))
        m.bad.push([step, phase, title]);
    }
    if (!m.stop) requestAnimationFrame(tick);
  };
  requestAnimationFrame(tick); }"""


@pytest.mark.browser
def test_the_chart_title_never_names_another_step_or_phase_than_the_table(browser, app_url):
    page = _page(browser, app_url)
    page.click("#sv-step-btn")
    page.wait_for_function("document.querySelector('#sv-tokens .sv-tokens')?.dataset.steps === '1'")
    # as a reader would: on a phone the chart is far below the button (Gradio's Plot draws it off screen too)
    page.locator("#sv-topk").scroll_into_view_if_needed()
    page.wait_for_function("(document.querySelector('#sv-topk .gtitle')?.textContent || '').startsWith('Step 1 ')")
    page.evaluate(_WATCH)
    for i in (2, 3):
        page.click("#sv-step-btn")
        page.wait_for_function(f"document.querySelector('#sv-tokens .sv-tokens')?.dataset.steps === '{i}'")
        page.wait_for_timeout(800)  # the run plots' second frame too
    page.click("#sv-animate")  # draft, verify, each decide, commit: one frame each, with no click
    page.wait_for_function("document.querySelector('#sv-summary .sv-step-summary')?.dataset.phase === 'draft'")
    page.wait_for_function("!document.querySelector('#sv-summary .sv-step-summary')?.dataset.phase", timeout=TIMEOUT_MS)
    page.wait_for_timeout(500)
    watch = page.evaluate("(() => { window.__sv_watch.stop = true; return window.__sv_watch; })()")
    assert watch["frames"] > 10 and not watch["bad"], watch["bad"][:5]
    assert "sv-msg-error" not in page.inner_html("#sv-status") and not page.js_errors
    page.context.close()


# -- 3. the top-10 chart's labels on a phone -------------------------------------------------------


def _chart_div(probe: str) -> str:
    """The start of a page function of figure f: ``div`` is f drawn with the page's own Plotly at the
    p/q chart's width into the element ``probe``, or the live p/q chart itself when f is null."""
    return """(f) => {
  let div = document.querySelector('#sv-topk .js-plotly-plot');
  if (f) {
    div = document.getElementById('PROBE') || document.createElement('div');
    div.id = 'PROBE';
    div.style.width = document.querySelector('#sv-topk').getBoundingClientRect().width + 'px';
    document.body.appendChild(div);
    window.Plotly.newPlot(div, f.data, f.layout, {responsive: false});
  }
""".replace("PROBE", probe)


# Runs in the page: draws figure f with the page's own Plotly at the width of the p/q chart (or
# measures that chart itself when f is null), then tests every two tick labels' rotated boxes for
# overlap (separating axes: along the text and across it). -> {n, overlaps, angle}
_LABELS = _chart_div("sv-labels-probe") + """  const boxes = [...div.querySelectorAll('g.xtick text')].filter((t) => t.textContent).map((t) => {
    const bb = t.getBBox(), r = t.getBoundingClientRect();
    const a = +(/rotate\\(([-\\d.e]+)/.exec(t.getAttribute('transform') || '')?.[1] || 0);
    return {x: r.left + r.width / 2, y: r.top + r.height / 2, w: bb.width, h: bb.height, a, text: t.textContent}; });
  const overlaps = [];
  boxes.forEach((A, i) => boxes.slice(i + 1).forEach((B) => {
    const th = A.a * Math.PI / 180, dx = B.x - A.x, dy = B.y - A.y;
    const along = Math.abs(dx * Math.cos(th) + dy * Math.sin(th)), across = Math.abs(-dx * Math.sin(th) + dy * Math.cos(th));
    if (along < (A.w + B.w) / 2 - 0.5 && across < (A.h + B.h) / 2 - 0.5) overlaps.push([A.text, B.text]);
  }));
  return {n: boxes.length, overlaps, angle: boxes[0]?.a ?? null, texts: boxes.map((b) => b.text)};
}"""

# Code tokens as a real model's top 10 has them: a wide label each.
CODE_TOKENS = [" function", " return", "    ", " self", "def", " the", " import", "print", " value", " result",
               " None", " class"]


def _code_tops() -> tuple[tuple, tuple]:
    """A code prompt's wide tokens as top-10 lists of p and q."""
    return (tuple((100 + i, t, 0.3 / (i + 1)) for i, t in enumerate(CODE_TOKENS)),
            tuple((100 + i, t, 0.25 / (12 - i)) for i, t in enumerate(CODE_TOKENS)))


def _figure(rec) -> dict:
    from specviz import viz

    return json.loads(viz.figure_json(viz.topk_figure.spec(rec, 0)))


def _code_figure() -> dict:
    from tests.test_lesson_viz import _d, _step

    top_p, top_q = _code_tops()
    return _figure(_step(0, [_d(0, 100, " function", 0.2, 0.3, 0.5, "rejected", top_p=top_p, top_q=top_q)], 0,
                         next_text=" return", top_residual=tuple((100 + i, t, 0.2 / (i + 1)) for i, t in enumerate(CODE_TOKENS))))


def _top10_labels_apart(page) -> None:
    """The top-10 chart's token labels do not overlap at 390 px: the live chart and a code prompt's."""
    live = page.evaluate(_LABELS, None)  # the app's own chart (the tiny models' one-letter tokens)
    assert live["n"] >= 2 and not live["overlaps"], live
    code = page.evaluate(_LABELS, _code_figure())  # a code prompt's wide tokens, in the app's Plotly at its width
    assert code["n"] >= 10 and not code["overlaps"], code
    assert "␣function" in code["texts"]  # every label is drawn (none dropped to make room)


# Runs in the page: draws figure f (or measures the live p/q chart when f is null) as _LABELS does, then
# tests the chart's marker words ("drafted x") against every axis tick label, the axis titles, the
# chart title and the legend. -> {marks, overlaps}
_MARK_WORDS = _chart_div("sv-marks-probe") + """  const box = (el) => { const r = el.getBoundingClientRect(); return {l: r.left, r: r.right, t: r.top, b: r.bottom, text: el.textContent}; };
  const marks = [...div.querySelectorAll('g.textpoint text')].filter((t) => t.textContent).map(box);
  const labels = [...div.querySelectorAll('g.xtick text, g.ytick text, .gtitle, .g-xtitle text, .g-ytitle text, g.legend text')]
    .filter((t) => t.textContent).map(box);
  const hit = (A, B) => A.l < B.r - 0.5 && B.l < A.r - 0.5 && A.t < B.b - 0.5 && B.t < A.b - 0.5;
  const overlaps = [];
  marks.forEach((m) => labels.forEach((l) => { if (hit(m, l)) overlaps.push([m.text, l.text]); }));
  return {marks: marks.map((m) => m.text), overlaps};
}"""


def _drafted_figure(where: str) -> dict:
    """The p/q chart of an accepted draft drawn as the ``first`` bar (the likeliest token, beside the y axis)
    or the ``last`` (outside both top lists, appended after them)."""
    from tests.test_lesson_viz import _d, _step

    top_p, top_q = _code_tops()
    d = (_d(0, 100, " function", 0.9, 0.95, 0.5, "accepted", top_p=top_p, top_q=top_q) if where == "first"
         else _d(0, 500, " lambda", 0.001, 0.0005, 0.2, "accepted", top_p=top_p, top_q=top_q))
    return _figure(_step(0, [d], 1, next_text=" return"))


def _drafted_mark_clear(page) -> None:
    """Issue 52: "drafted x", centred over the first bar, lay across the y axis's "100%" at 390 px."""
    for f in (None, _drafted_figure("first"), _drafted_figure("last")):
        seen = page.evaluate(_MARK_WORDS, f)
        assert not seen["overlaps"], seen
        assert f is None or seen["marks"] == ["drafted x"], seen  # the mark is drawn, with its words


def _play_speed_reads_whole(page) -> None:
    """The Play speed menu takes its own row on a phone, so its longest choice is not cut off."""
    box = page.locator("#sv-speed input").first
    width, shown = box.evaluate("e => [e.scrollWidth, e.clientWidth]")
    assert width <= shown, (width, shown)
    assert box.input_value() == "as fast as it runs"


# -- 4. guess first at T > 0 on a phone -------------------------------------------------------------


_READ = """() => {
  const cell = (tr, label) => tr?.querySelector(`td[data-label="${label}"]`)?.innerText.trim() ?? null;
  const rows = [...document.querySelectorAll('#sv-draft-table tbody tr')].map((tr) => ({
    pos: +tr.dataset.pos, kind: [...tr.classList].find((c) => c.startsWith('sv-row-'))?.slice(7),
    q: cell(tr, 'q(x)'), p: cell(tr, 'p(x)'), ratio: cell(tr, 'min(1, p/q)'), u: cell(tr, 'u'), verdict: cell(tr, 'verdict')}));
  const g = document.querySelector('#sv-guess .sv-guess');
  return {rows, open: g?.dataset.open, right: +g?.dataset.right, total: +g?.dataset.total,
          guess: document.querySelector('#sv-guess').innerText, status: document.querySelector('#sv-status').innerText,
          phase: document.querySelector('#sv-phase .sv-phase')?.dataset.phase,
          title: document.querySelector('#sv-topk .gtitle')?.textContent || '',
          summary: document.querySelector('#sv-summary').innerText};
}"""


def _num(text: str) -> float:
    return float(text.replace("−", "-"))


def _check_reveal(page, said: str, expected_total: int, book: list) -> dict:
    """After a guess: the reveal agrees with itself everywhere on the page."""
    s = page.evaluate(_READ)
    m = re.search(r"You said (accept|reject): (right|wrong)[^.]*\. u = ([\d.e-]+) ([≤>]) ([\d.e-]+)\s+→\s+(accepted|rejected)",
                  s["guess"])
    assert m, s["guess"]
    _said, right, u, sign, ratio, verdict = m.groups()
    assert _said == said and (sign == "≤") == (verdict == "accepted") and (_num(u) <= _num(ratio)) == (sign == "≤")
    assert (right == "right") == ((said == "accept") == (verdict == "accepted"))
    book.append((said, verdict, _num(ratio)))
    row = next(r for r in s["rows"] if r["kind"] in ("accepted", "rejected") and r["u"] == u)  # the table prints u as the panel
    assert row["ratio"] == ratio and verdict[:4] in row["verdict"]  # ... and min(1, p/q) and the verdict
    assert (_num(row["u"]) <= _num(row["ratio"])) == (verdict == "accepted")  # the table's own numbers decide it
    assert _num(row["ratio"]) == pytest.approx(min(1.0, _num(row["p"]) / _num(row["q"])), rel=0.01, abs=2e-3)
    assert f"position {row['pos'] + 1}" in s["title"] and verdict in s["title"], s["title"]
    assert f"u {u} {sign} min(1, p/q) {ratio}" in s["title"], s["title"]
    assert s["phase"] == "decide" and s["total"] == expected_total == len(book)
    rights = sum((a == "accept") == (v == "accepted") for a, v, _r in book)
    goods = sum((a == "accept") == (r >= 0.5) for a, _v, r in book)
    assert s["right"] == rights and f"Score {rights} of {len(book)}" in s["status"]
    assert f"score {rights} of {len(book)} right · {goods} of {len(book)} good bets" in s["guess"]
    return s


@pytest.mark.browser
def test_a_guess_first_walk_at_t_above_0_on_a_phone_never_contradicts_itself(browser, app_url):
    page = _page(browser, app_url)  # the tiny defaults: the draft proposer at T = 1, k = 4
    assert page.is_checked("#sv-lesson-mode input")  # a first visit is in lesson mode
    book: list = []
    for step in (1, 2):
        if step == 1:
            page.click("#sv-step-btn")
        else:
            page.click("#sv-next-phase")  # lesson mode: phase ▶ at commit opens the next step in draft
        page.wait_for_function(f"document.querySelector('#sv-summary').innerText.startsWith('Step {step}')"
                               " && document.querySelector('#sv-phase .sv-phase')?.dataset.phase === 'draft'")
        # the chart is redrawn in a frame of its own (no title while Plotly draws it)
        page.wait_for_function(f"(document.querySelector('#sv-topk .gtitle')?.textContent || '').startsWith('Step {step} ')")
        s = page.evaluate(_READ)
        assert all(not r["p"] and not r["u"] for r in s["rows"]), s["rows"]  # draft: q only
        assert "not scored yet" in s["title"] and page.is_disabled("#sv-guess-accept")
        page.click("#sv-next-phase")  # verify: p is known, no u, no verdict
        page.wait_for_selector("#sv-guess .sv-guess[data-open='1']")
        while page.evaluate(_READ)["open"] == "1":
            s = page.evaluate(_READ)
            q = re.search(r"q = ([\d.e-]+), p = ([\d.e-]+), p/q = ([\d.e-]+|∞)", s["guess"])
            assert q, s["guess"]
            pending = [r for r in s["rows"] if r["kind"] == "pending"]
            assert pending and pending[0]["q"] == q.group(1) and pending[0]["p"] == q.group(2)
            assert all(not r["u"] for r in pending)  # no u before the bet, in the table or in a chart of that draft
            assert f"position {pending[0]['pos'] + 1}" not in s["title"] or "not judged yet" in s["title"], s["title"]
            said = "accept" if len(book) % 2 == 0 else "reject"
            page.click(f"#sv-guess-{said}")
            page.wait_for_selector(f"#sv-guess .sv-guess[data-total='{len(book) + 1}']")
            page.wait_for_function("(document.querySelector('#sv-topk .gtitle')?.textContent || '').includes('u ')")
            _check_reveal(page, said, len(book) + 1, book)
        page.click("#sv-next-phase")  # commit: every verdict and the step's outcome
        page.wait_for_function("document.querySelector('#sv-phase .sv-phase')?.dataset.phase === 'commit'")
        s = page.evaluate(_READ)
        judged = [r for r in s["rows"] if r["kind"] in ("accepted", "rejected")]
        assert [r["kind"] for r in judged] == [v for _a, v, _r in book[-len(judged):]]
        assert f"score {s['right']} of {len(book)} right" in s["guess"]
        assert "turn on lesson mode" not in s["guess"] and page.is_checked("#sv-lesson-mode input")  # it is on
        assert not re.search(r"\bnot (scored|judged) yet\b", s["title"])
    assert any(v == "rejected" for _a, v, _r in book)  # the walk met a rejection (seed 0: step 1)
    wide = page.evaluate("document.documentElement.scrollWidth")
    assert wide <= PHONE["width"] + 1, wide
    if SHOTS:
        page.screenshot(path=SHOTS + "/guess-phone.png", full_page=True)
    assert "sv-msg-error" not in page.inner_html("#sv-status") and not page.js_errors
    page.context.close()


def test_the_table_prints_u_and_its_ratio_apart_as_the_chart_title_does():
    """u = 0.40812 against min(1, p/q) = 0.40809, rejected: the table printed both as 0.408 beside
    "✗ rejected" while the chart title and the guess said "u = 0.40812 > 0.40809"."""
    from specviz import viz
    from tests.test_lesson_viz import _d, _step

    rec = _step(0, [_d(0, 10, " the", 0.5, 0.5 * 0.40809, 0.40812, "rejected")], 0)
    row = viz.draft_table_rows(rec)[0]
    assert row[4:6] == ["0.40809", "0.40812"]  # min(1, p/q), u
    assert "u 0.40812 > min(1, p/q) 0.40809" in viz.topk_figure.spec(rec, 0)["layout"]["title"]["text"]


# -- 5. the p/q chart under the phase boxes it explains ----------------------------------------------


# -- 6. the lesson switch at hand on a phone ---------------------------------------------------------

# Runs in the page: the lesson switch's box against the viewport and the inspector's, and whether a
# tap at the centre of its tick box lands on the switch (not on something drawn over it).
_SWITCH = """() => { const r = (s) => document.querySelector(s).getBoundingClientRect();
  const box = r('#sv-lesson-mode input'), bar = r('#sv-lesson-row'), ins = r('#sv-inspector');
  const hit = document.elementFromPoint(box.x + box.width / 2, box.y + box.height / 2);
  return {top: bar.top, bottom: bar.bottom, height: bar.height, inspector_top: ins.top, h: innerHeight,
          tappable: !!hit?.closest('#sv-lesson-mode')}; }"""


def _lesson_switch_at_hand(page) -> None:
    """Issue 52 item 7 (the teacher's quick mode one click away, a visible control at the top of the
    inspector): on a phone the settings come before the step inspector, so its switch sat ~3,700 px
    down the page and out of sight from anywhere a student reads a step (the phases, the p/q chart,
    the table). Now it is one short bar at the inspector's top that stays on screen, tappable, while
    any part of the inspector is in view, and a tap from the table's end switches to the quick mode."""
    title = page.evaluate(_SWITCH)
    assert title["top"] - title["inspector_top"] <= 80 and title["height"] <= 60, title  # at the top, one short bar
    for sel, where in ((".sv-section-title", "center"), ("#sv-phase", "end"), ("#sv-topk", "end"), ("#sv-guess-row", "end"),
                       ("#sv-draft-table", "end")):  # the inspector coming into view, then each of its parts at the bottom
        page.evaluate("([s, w]) => document.querySelector(s).scrollIntoView({block: w, behavior: 'instant'})", [sel, where])
        page.wait_for_function("(s) => { const r = document.querySelector(s).getBoundingClientRect();"
                               " return r.top >= -1 && r.bottom <= innerHeight + 1; }", arg=sel)
        at = page.evaluate(_SWITCH)
        assert 0 <= at["top"] and at["bottom"] <= at["h"] and at["tappable"], (sel, at)
    box = page.locator("#sv-lesson-mode input").bounding_box()  # from the table's end: a tap, no scroll
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.wait_for_function("!document.querySelector('#sv-lesson-mode input').checked"
                           " && document.querySelector('#sv-phase .sv-phase')?.dataset.phase === 'commit'")
    assert page.evaluate(_SWITCH)["bottom"] <= PHONE["height"]


@pytest.mark.browser
def test_on_a_phone_the_speed_menu_the_lesson_switch_and_the_top10_charts_words_fit(browser, app_url):
    """One phone page: the Play speed menu reads whole; after a Step (lesson mode: its draft phase)
    the lesson switch stays at hand anywhere in the inspector, the top-10 chart's labels do not
    overlap and its "drafted x" mark crosses no axis label."""
    page = _page(browser, app_url)
    _play_speed_reads_whole(page)
    page.click("#sv-step-btn")
    page.wait_for_function("document.querySelector('#sv-phase .sv-phase')?.dataset.phase === 'draft'")
    page.wait_for_function("!!window.Plotly && !!document.querySelector('#sv-topk .js-plotly-plot g.xtick text')")
    _lesson_switch_at_hand(page)
    _top10_labels_apart(page)
    _drafted_mark_clear(page)
    assert "sv-msg-error" not in page.inner_html("#sv-status") and not page.js_errors
    page.context.close()
