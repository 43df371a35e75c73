"""Walk issue 52's three personas through the app in headless Chromium and check the page against its data.

    python benchmarks/persona_walk.py                  # the built-in models (gemma-3-270m), both sizes
    python benchmarks/persona_walk.py --tiny           # the tests' tiny random models (minutes less)
    python benchmarks/persona_walk.py --sizes 390x844 --json walk.json --shots /tmp/walk
    python benchmarks/persona_walk.py --tiny --personas "" --sizes 1280x800 --bench-sweep   # items 5-6 alone

Starts ``python app.py`` in a process of its own on 127.0.0.1 (GRADIO_ANALYTICS_ENABLED=False,
HF_HUB_OFFLINE=1), then, at each size, from fresh pages:

- the teacher (a 10-minute demo): what the page says before the first Step (does Step wait, and for
  what?), "Show me a speedup" (its time, the card in view at its end, the Speedup card against the
  "why" card, the what-if's best k against the card's), "Show me a rejection", the no-pay tour's
  sentences, the tree tour;
- the student (first visit): Lesson mode on and near the top of the inspector, Step opening in its
  draft phase, the rejection tour reaching a rejection and landing in draft with the p/q chart near
  the decide boxes, bars absent from a top list drawn as stubs, not zeros, Learn part 2's first
  click, Learn part 5's sentence against its title;
- the engineer (does a draft pay?): typical acceptance marked LOSSY on the cards and the why card,
  the phone's Benchmark fields stacked, nothing cut ("as fast as it runs", table tokens).

Each check is one line: the issue's item, what was seen, ok or not. ``--bench-sweep`` adds the
engineer's Benchmark sweep and Advisor (items 5 and 6; benchmarks/persona_bench.py): a small sweep
(``--bench-ks``, ``--bench-prompts``, ``--bench-max-new``), Measure verify cost, Calibrate and Run
the top N, each plot, the table and the readout checked against the sweep's own JSON (minutes on a
CPU; tests/test_bench_marks.py, test_bench_noise.py and test_advisor*.py check the same without a
browser). ``--bench`` also clicks the phone's Benchmark fields. Reproducibility across starts (item 1's first half) is tests/test_restart_browser.py.
Exits 1 when a check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import persona_bench  # noqa: E402
from tests.support import app_server  # noqa: E402
from tests.support.browser import ARRIVED, launch_chromium, open_page  # noqa: E402
from tests.test_lesson_browser import MOMENTS, REJECTED_SHOWN, _walk_to_the_rejection  # noqa: E402
from tests.test_restart_browser import DONE, Start  # noqa: E402

TIMEOUT_MS = 240_000
CHECKS: list[dict] = []


def check(size: str, persona: str, item: str, ok: bool, seen: str) -> None:
    CHECKS.append(dict(size=size, persona=persona, item=item, ok=bool(ok), seen=seen))
    print(f"[{'ok' if ok else 'FAIL'}] {size} {persona:8s} {item:10s} {seen}", flush=True)


def _page(browser, url, w, h):
    return open_page(browser, url, "#sv-step-btn", width=w, height=h, timeout_ms=TIMEOUT_MS)


def _tour(page, key: str) -> float:
    t0 = time.time()
    page.click(f"#sv-tour-{key}")
    page.wait_for_function("(words) => words.some(w => document.querySelector('#sv-status').innerText.includes(w))",
                           arg=list(ARRIVED), polling=200)
    if "finished without" not in page.inner_text("#sv-status"):
        page.wait_for_function(MOMENTS[key], polling=200)
    return time.time() - t0


def _in_view(page, sel: str) -> dict:
    return page.evaluate("""(sel) => { const el = document.querySelector(sel); if (!el || !el.offsetParent) return null;
      const r = el.getBoundingClientRect(); return {top: Math.round(r.top), bottom: Math.round(r.bottom), h: innerHeight}; }""", sel)


def _num(text: str, pattern: str) -> float | None:
    m = re.search(pattern, text)
    return float(m.group(1)) if m else None


def teacher(browser, url, size, w, h, shots):
    page = _page(browser, url, w, h)
    secs = _tour(page, "speedup")
    why = page.inner_html("#sv-why")
    box = _in_view(page, "#sv-why")
    check(size, "teacher", "also-1", box is not None and box["bottom"] > 0 and box["top"] < box["h"],
          f"speedup tour {secs:.0f} s; the why card at {box} at its end")
    shown = _num(page.inner_text("#sv-metrics [data-metric=speedup]"), r"([\d.]+)×")
    head = page.inner_text("#sv-why .sv-why-head")
    measured = _num(why, r'data-measured="([\d.]+)"')
    adjusted = _num(why, r'data-stall-adjusted="([\d.]+)"')
    same = shown is not None and head.startswith(f"Speedup {shown:.2f}x")
    check(size, "teacher", "speedups", same and (adjusted is None or f"{adjusted:.2f}x" in head),
          f"Speedup card {shown}x; why card: {head[:200]!r} (measured {measured}, stall-adjusted {adjusted})")
    star = re.search(r"best k = (\d+)", page.inner_text("#sv-whatif-plot") or "")
    said = re.search(r'data-best-k="(\d+)"', why)
    advice = page.inner_text("#sv-why .sv-why-advice") if page.query_selector("#sv-why .sv-why-advice") else ""
    agree = star is None or said is None or star.group(1) == said.group(1)
    narrow = star is not None and (("smaller k keeps the pass narrow" in advice and int(star.group(1)) >= _k(page))
                                   or (("smaller k" in advice or "Lower k" in advice) and int(star.group(1)) > _k(page)))
    check(size, "teacher", "2", agree and not narrow,
          f"what-if star k = {star and star.group(1)}, card's best k = {said and said.group(1)}; advice: {advice[:220]!r}")
    check(size, "teacher", "9", "all 1 drafts" not in page.inner_text("body"), "no 'all 1 drafts' on the page")
    if shots:
        page.screenshot(path=str(Path(shots) / f"teacher-speedup-{size}.png"), full_page=False)
    page.context.close()

    page = _page(browser, url, w, h)
    secs = _tour(page, "no-pay")
    card = page.inner_text("#sv-why")
    greedy = "T = 0" in page.inner_text("#sv-status") or page.locator("#sv-temperature input[type=number]").input_value() in ("0", "0.0")
    wrong = greedy and "lower temperature" in card
    check(size, "teacher", "9", not wrong and "all 1 drafts" not in card,
          f"no-pay tour {secs:.0f} s (T = 0: {greedy}); card: {card[:260]!r}")
    check(size, "teacher", "also-4", _fits(page, "#sv-speed"), "the Play speed choice reads whole")
    page.context.close()

    page = _page(browser, url, w, h)
    secs = _tour(page, "tree")
    check(size, "teacher", "tree", "sv-msg-error" not in page.inner_html("#sv-status"), f"tree tour {secs:.0f} s")
    page.context.close()


def _k(page) -> int:
    try:
        return int(float(page.locator("#sv-k input[type=number]").input_value()))
    except (ValueError, TypeError):
        return 0


def _fits(page, sel: str) -> bool:
    """Nothing inside ``sel`` is cut: each text-bearing element's content fits its box."""
    return page.evaluate("""(sel) => [...document.querySelectorAll(sel + ' *')].filter((e) => e.offsetParent && e.children.length === 0
      && e.textContent.trim()).every((e) => e.scrollWidth <= e.clientWidth + 1 || getComputedStyle(e).overflow === 'visible')""", sel)


def student(browser, url, size, w, h, shots):
    page = _page(browser, url, w, h)
    on = page.locator("#sv-lesson-mode input").is_checked()
    ins = _in_view(page, "#sv-lesson-mode")
    check(size, "student", "7", on, f"Lesson mode on at the first visit: {on}; its box {ins}")
    page.click("#sv-step-btn")
    page.wait_for_function("document.querySelector('#sv-tokens .sv-tokens')?.dataset.steps === '1'", polling=200)
    phase = page.get_attribute("#sv-phase .sv-phase", "data-phase")
    check(size, "student", "7", phase == "draft", f"the first Step opens in phase {phase!r}")
    page.context.close()

    page = _page(browser, url, w, h)
    secs = _tour(page, "rejection")
    status = page.inner_text("#sv-status")
    found = "finished without" not in status
    draft = page.evaluate("!!document.querySelector('#sv-phase .sv-phase[data-phase=\"draft\"]')")
    check(size, "student", "1", found and draft and page.locator("#sv-lesson-mode input").is_checked(),
          f"rejection tour {secs:.0f} s; found: {found}; lands in draft with Lesson mode on: {draft}; {status[:140]!r}")
    if found:
        _walk_to_the_rejection(page)
        ok = page.evaluate(REJECTED_SHOWN)
        boxes = page.evaluate("""() => { const r = (s) => document.querySelector(s)?.getBoundingClientRect();
          const a = r('#sv-phase'), b = r('#sv-topk'); return a && b ? {phase_bottom: Math.round(a.bottom), chart_top: Math.round(b.top)} : null; }""")
        gap = boxes and boxes["chart_top"] - boxes["phase_bottom"]
        check(size, "student", "also-2", ok and gap is not None and gap < 400,
              f"rejected draft decided: {ok}; the p/q chart {gap} px under the decide boxes")
        fig = page.evaluate("""() => { const d = document.querySelector('#sv-topk .js-plotly-plot'); if (!d || !d.data) return null;
          return d.data.map((t) => ({name: t.name, type: t.type, y: t.y, x: t.x})); }""")
        _absent_bars(size, fig)
        if shots:
            page.screenshot(path=str(Path(shots) / f"student-rejection-{size}.png"), full_page=False)
    table = page.evaluate("""() => [...document.querySelectorAll('#sv-draft-table td')].filter((td) => td.textContent.trim())
      .filter((td) => { const r = document.createRange(); r.selectNodeContents(td);  // a second line: a rect a line lower
        const rs = [...r.getClientRects()].filter((q) => q.width > 0); if (!rs.length) return false;
        const tops = rs.map((q) => q.top), line = Math.min(...rs.map((q) => q.height));
        return Math.max(...tops) - Math.min(...tops) > 0.6 * line && !td.textContent.trim().includes(' '); })
      .map((td) => td.textContent.trim())""")
    check(size, "student", "also-5", not table, f"table cells wrapped inside one word: {table}")
    page.context.close()

    page = _page(browser, url, w, h)
    page.get_by_role("tab", name="Learn").click()
    page.click("#sv-learn-model-btn")
    t0 = time.time()  # the first click loads the models (a Playground run may hold the engine first)
    page.wait_for_selector("#sv-learn-model-status .sv-learn-model, #sv-learn-model-status .sv-msg-error")
    msg = page.inner_html("#sv-learn-model-status")
    text = page.inner_text("#sv-learn-model-status")
    check(size, "student", "3", "sv-msg-error" not in msg and "drafts nothing" not in text,
          f"Learn part 2 first click, {time.time() - t0:.0f} s: {text[:200]!r}")
    hw = page.locator("#sv-learn-hardware")
    title = hw.locator(".label-wrap").first.inner_text() if hw.locator(".label-wrap").count() else ""
    hw.get_by_text("Why the best k on this CPU").first.click()
    words = page.inner_text("#sv-learn-hw-words")
    contradicts = "both curves peak" in words and "differ" in title.lower()
    check(size, "student", "9", not contradicts, f"Learn part 5: title {title!r}; words {words[:200]!r}")
    check(size, "student", "sideways", page.evaluate("document.documentElement.scrollWidth") <= w + 1, "no sideways scroll")
    page.context.close()


def _absent_bars(size: str, fig: list[dict] | None) -> None:
    """Item 10: every series' missing value is drawn as a stub (its own 'not in this top list' trace), never as an empty slot."""
    if not fig:
        check(size, "student", "10", False, "no p/q chart data")
        return
    bars = [t for t in fig if t["type"] == "bar" and "not in" not in (t["name"] or "")]
    stubs = [t for t in fig if t["type"] == "bar" and "not in" in (t["name"] or "")]
    holes = sum(1 for t in bars for y in t["y"] if y is None)
    stubbed = sum(1 for t in stubs for y in t["y"] if y is not None)
    check(size, "student", "10", holes == stubbed, f"{holes} values missing from a top list, {stubbed} drawn as stubs "
          f"({', '.join(t['name'] for t in stubs) or 'no stub trace'})")


def engineer(browser, url, size, w, h, shots, bench: bool):
    page = _page(browser, url, w, h)
    page.locator("#sv-temperature input[type=number]").fill("0.8")
    page.locator("#sv-temperature input[type=number]").press("Enter")
    page.get_by_role("radio", name=re.compile("typical", re.I)).first.click()
    page.locator("#sv-max-new input[type=number]").fill("16")
    page.locator("#sv-max-new input[type=number]").press("Enter")
    page.click("#sv-play-btn")
    page.wait_for_function("document.querySelector('#sv-status').innerText.includes('Finished')", polling=500)
    page.click("#sv-baseline-btn")
    page.wait_for_function("!!document.querySelector('#sv-metrics [data-metric=speedup] .sv-card-value')"
                           " && !document.querySelector('#sv-metrics [data-metric=speedup]').innerText.includes('—')", polling=500)
    page.wait_for_function("!!document.querySelector('#sv-why .sv-why[data-lossy]') || "
                           "!!document.querySelector('#sv-why .sv-why[data-verdict]:not([data-verdict=\"none\"])')", polling=500)
    cards = page.inner_html("#sv-metrics")
    why = page.inner_html("#sv-why")
    lossy_tags = cards.count("sv-lossy-tag")
    check(size, "engineer", "8", 'data-lossy="true"' in cards and 'data-lossy="true"' in why and "LOSSY" in page.inner_text("#sv-why"),
          f"typical acceptance: {lossy_tags} metric cards tagged LOSSY; why card says LOSSY: {'LOSSY' in page.inner_text('#sv-why')}")
    whatif = page.inner_text("#sv-whatif-box")
    check(size, "engineer", "8", "LOSSY" in whatif or "typical" in whatif.lower(), f"what-if box: {whatif[:160]!r}")
    if shots:
        page.screenshot(path=str(Path(shots) / f"engineer-lossy-{size}.png"), full_page=False)
    page.context.close()
    if bench:
        page = _page(browser, url, w, h)
        page.get_by_role("tab", name="Benchmark").click()
        t, p = (page.locator(s).bounding_box() for s in ("#sv-bench-target", "#sv-bench-proposers"))
        side = t and p and abs(t["y"] - p["y"]) < 5
        check(size, "engineer", "also-3", not (w < 500 and side), f"Benchmark target {t} / proposers {p}")
        page.context.close()


def _where(browser) -> str:
    """What the last open page showed when a wait gave up: its status line and the why card's head."""
    pages = [p for c in browser.contexts for p in c.pages]
    if not pages:
        return ""
    page = pages[-1]
    try:
        said = page.evaluate("""() => ({status: document.querySelector('#sv-status')?.innerText.slice(0, 200),
          why: document.querySelector('#sv-why')?.innerText.slice(0, 120),
          race: !!document.querySelector('#sv-race-box')?.offsetParent})""")
    finally:
        page.context.close()
    return json.dumps(said)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tiny", action="store_true", help="the tests' tiny random models, not the built-in ones")
    ap.add_argument("--sizes", default="1280x800,390x844")
    ap.add_argument("--personas", default="teacher,student,engineer")
    ap.add_argument("--bench", action="store_true", help="also open the Benchmark tab (its fields on a phone)")
    ap.add_argument("--bench-sweep", action="store_true", help="the engineer's Benchmark sweep and Advisor (items 5-6)")
    ap.add_argument("--bench-ks", default="1,2,4", help="the sweep's k (--bench-sweep)")
    ap.add_argument("--bench-prompts", type=int, default=2, help="prompts in the sweep and the calibration")
    ap.add_argument("--bench-max-new", type=int, default=32, help="new tokens per prompt in the sweep")
    ap.add_argument("--json", help="write the checks here")
    ap.add_argument("--shots", help="a folder for a screenshot at each persona's moment")
    ap.add_argument("--no-wait", action="store_true", help="walk while the start-up preparation may still run")
    args = ap.parse_args()
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1",
           "SPECVIZ_PORT": str(app_server.free_port())}
    tmp = Path(tempfile.mkdtemp(prefix="specviz-walk-"))
    if args.tiny:
        env.update(app_server.tiny_env(tmp))
        env["SPECVIZ_DEFAULT_DRAFT"] += "@int8"
    if args.shots:
        Path(args.shots).mkdir(parents=True, exist_ok=True)
    from playwright.sync_api import sync_playwright

    start = Start(env, tmp / "app.log")
    t0 = time.time()
    try:
        url = start.up(600)
        print(f"app up in {time.time() - t0:.0f} s at {url}", flush=True)
        with sync_playwright() as pw:
            browser = launch_chromium(pw)
            page = _page(browser, url, 1280, 800)  # item 4: what a Step pressed now would wait for, said before the click
            page.wait_for_timeout(1500)  # the note's first tick
            note = page.evaluate("document.querySelector('#sv-startup')?.innerText.trim() || ''")
            check("1280x800", "teacher", "4", bool(note) or DONE in start.text(),
                  f"{time.time() - t0:.0f} s after the start the page says before any Step: {note[:200]!r}")
            page.context.close()
            if not args.no_wait:
                start.prepared(900)
                print(f"{DONE} {time.time() - t0:.0f} s after the start", flush=True)
            for size in args.sizes.split(","):
                w, h = (int(x) for x in size.split("x"))
                for persona in filter(None, args.personas.split(",")):
                    try:
                        if persona == "engineer":
                            engineer(browser, url, size, w, h, args.shots, args.bench)
                        else:
                            {"teacher": teacher, "student": student}[persona](browser, url, size, w, h, args.shots)
                    except Exception as e:  # noqa: BLE001 - one persona's failure is a finding; walk on
                        check(size, persona, "walk", False, f"{type(e).__name__}: {str(e)[:300]}; {_where(browser)}")
                if args.bench_sweep:
                    plan = persona_bench.SweepPlan(tuple(int(k) for k in args.bench_ks.split(",")), args.bench_prompts,
                                                   args.bench_max_new, persona_bench.TINY_PROMPTS if args.tiny else "")
                    try:
                        persona_bench.walk(browser, url, size, w, h, args.shots, plan, check)
                    except Exception as e:  # noqa: BLE001 - a finding; the checks so far stand
                        check(size, "engineer", "5-walk", False, f"{type(e).__name__}: {str(e)[:400]}")
            browser.close()
    finally:
        start.stop()
    if args.json:
        Path(args.json).write_text(json.dumps(CHECKS, indent=1))
    bad = [c for c in CHECKS if not c["ok"]]
    print(f"{len(CHECKS) - len(bad)} of {len(CHECKS)} checks hold; {time.time() - t0:.0f} s in all")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
