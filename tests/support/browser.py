"""Headless Chromium for the browser tests and the app's measurements (Debian's, never downloaded).

``missing_browser()`` says why the browser tests cannot run here; ``launch_chromium(p)`` starts it
through Playwright; ``measure_steps`` and ``screenshot`` drive a served app
(``python -m tests.support.app_server --measure N --screenshot PNG``).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

# Debian's headless shell when it is there (the browser without its windowing parts, as Playwright's
# own headless mode runs: the browser tests 15% faster on 2 cores), else the full chromium.
_HEADLESS_SHELL = "/usr/bin/chromium-headless-shell"
CHROMIUM = os.environ.get("SPECVIZ_CHROMIUM") or (_HEADLESS_SHELL if Path(_HEADLESS_SHELL).exists() else "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--disable-dev-shm-usage"]


def missing_browser() -> str | None:
    """Why the browser tests cannot run here (no Chromium, no Playwright), or None when they can."""
    if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
        return f"{CHROMIUM} is missing (apt-get install chromium-headless-shell, or set SPECVIZ_CHROMIUM)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install playwright)"
    return None


def boxes(page, selectors: list[str]) -> list[dict | None]:
    """The boxes of ``selectors`` (each its first match, or None) as Playwright's ``bounding_box`` gives
    them, read in one frame: reads one by one would straddle a scroll the page is still making."""
    return page.evaluate("""(sels) => sels.map((sel) => {
      const el = document.querySelector(sel); if (!el) return null;
      const r = el.getBoundingClientRect(); return {x: r.x, y: r.y, width: r.width, height: r.height}; })""", selectors)


def launch_chromium(playwright):
    """Debian's headless Chromium (never a downloaded browser) through a started Playwright."""
    return playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)

def lesson_mode_off(page) -> None:
    """Turn the page's Lesson mode off (a Step then runs one whole step, not its first phase)."""
    page.click("#sv-lesson-mode input")
    page.wait_for_function("!document.querySelector('#sv-lesson-mode input').checked")


# Runs in the page: click Step, then note (once per frame) when the new step's tokens are shown
# and when every plot has been redrawn with it.
_CLICK_AND_WATCH = """
(i) => {
  const m = window.__sv_m = {t0: performance.now()};
  const title = (sel) => document.querySelector(sel + ' .gtitle')?.textContent || '';
  const check = () => {
    const now = performance.now();
    if (!m.shown && document.querySelector('#sv-tokens .sv-tokens')?.dataset.steps === String(i)) m.shown = now;
    const bars = document.querySelectorAll('#sv-plot-timeline g.trace.bars')[1];
    if (!m.drawn && bars && bars.querySelectorAll('g.point').length === i && title('#sv-topk').startsWith('Step ' + i + ' ')
        && title('#sv-plot-tokens').includes('τ')) m.drawn = now;
    if (!(m.shown && m.drawn)) requestAnimationFrame(check);
  };
  requestAnimationFrame(check);
  document.querySelector('#sv-step-btn').click();
}
"""


def open_page(browser, url: str, ready: str, *, width: int = 1280, height: int = 800, timeout_ms: int = 120_000,
              downloads: bool = False):
    """A new page at ``url`` in its own context (``width`` x ``height``), waited for until ``ready``
    (a selector) is there; the page's JavaScript errors are collected in ``page.js_errors``."""
    page = browser.new_context(viewport={"width": width, "height": height}, accept_downloads=downloads).new_page()
    page.set_default_timeout(timeout_ms)
    page.js_errors = errors = []  # set before the load: a page that never became ready reports its errors too
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.console_errors = console = []  # what the page logged as an error (a failed plot draw, say)
    page.on("console", lambda m: console.append(m.text) if m.type == "error" else None)
    OPENED[:] = [*(p for p in OPENED if not p.is_closed()), page]
    page.goto(url)
    page.wait_for_selector(ready)
    return page


OPENED: list = []  # the pages open_page opened (a failed test's report describes those still open)

# Runs in the page: what a reader sees of it, for a failed test's report.
_SEEN = """() => ({
  width: innerWidth, height: innerHeight, plotly: !!window.Plotly,
  status: document.querySelector('#sv-status')?.innerText.trim().slice(0, 300) ?? null,
  summary: document.querySelector('#sv-summary')?.innerText.trim().slice(0, 300) ?? null,
  plots: [...document.querySelectorAll('[data-testid="plotly"]')].map((el) => {
    const r = el.getBoundingClientRect(), host = el.closest('[id]');
    return {id: host?.id ?? null, drawn: !!el.querySelector('.js-plotly-plot svg'),
            box: [Math.round(r.x), Math.round(r.y), Math.round(r.width), Math.round(r.height)],
            title: el.querySelector('.gtitle')?.textContent ?? null}; }) })"""


def page_report(page) -> str:
    """A page's state in words: its size, status and summary lines, each Plotly chart (drawn or not,
    its box, its title), and its JavaScript and console errors."""
    import json

    try:
        state = page.evaluate(_SEEN)
        plots = state.pop("plots")
        seen = "\n".join([json.dumps(state, ensure_ascii=False), *(json.dumps(p, ensure_ascii=False) for p in plots)])
    except Exception as exc:  # a closed or hung page says so
        seen = f"(not readable: {exc})"
    return f"{page.url}\n{seen}\njs errors: {page.js_errors}\nconsole errors: {page.console_errors[-10:]}"


def measure_steps(url: str, n: int = 10, width: int = 1280, height: int = 800) -> list[dict]:
    """Click Step n + 1 times (the first loads the models and is not counted); per click: the
    engine's step time, and click -> shown / click -> everything redrawn, in ms."""
    from playwright.sync_api import sync_playwright

    rows = []
    with sync_playwright() as p:
        browser = launch_chromium(p)
        page = browser.new_page(viewport={"width": width, "height": height})
        page.set_default_timeout(600_000)
        page.goto(url)
        page.wait_for_selector("#sv-step-btn")
        if page.is_checked("#sv-lesson-mode input"):  # a Step is one whole step, not its first phase
            lesson_mode_off(page)
        page.click("#sv-step-btn")
        page.wait_for_function("document.querySelector('#sv-tokens .sv-tokens')?.dataset.steps === '1'")
        page.wait_for_timeout(1000)
        for i in range(2, n + 2):
            if "Finished" in page.inner_text("#sv-status"):
                break  # the run ended (max new tokens): fewer steps than asked
            page.evaluate(_CLICK_AND_WATCH, i)
            page.wait_for_function("window.__sv_m.shown && window.__sv_m.drawn", polling=50)
            m = page.evaluate("window.__sv_m")
            engine = float(page.get_attribute("#sv-metrics .sv-metrics", "data-engine-ms"))
            rows.append({"engine_ms": engine, "shown_ms": m["shown"] - m["t0"], "drawn_ms": m["drawn"] - m["t0"]})
            page.wait_for_timeout(300)
        browser.close()
    return rows


def screenshot(url: str, path: str, narrow_path: str | None = None) -> None:
    """A finished run with its target-only baseline, at 1280x800 (full page) and 390 px wide."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = launch_chromium(p)
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.set_default_timeout(900_000)
        page.goto(url)
        page.wait_for_selector("#sv-step-btn")
        page.click("#sv-play-btn")
        page.wait_for_function("document.querySelector('#sv-status').innerText.includes('Finished')")
        page.click("#sv-baseline-btn")
        page.wait_for_function(
            "document.querySelector('#sv-metrics [data-metric=\"speedup\"] .sv-card-value')?.innerText.includes('×')")
        page.wait_for_function("document.querySelector('#sv-status').innerText.includes('speedup')")
        rejected = page.locator("#sv-tokens .tok-rejected")
        if rejected.count():  # inspect a step with a rejection, and show its tooltip
            target = rejected.nth(min(2, rejected.count() - 1))
            target.click()
            page.wait_for_timeout(1500)
            target.hover()
            page.wait_for_timeout(300)
        page.screenshot(path=path, full_page=True)
        if narrow_path:
            phone = browser.new_page(viewport={"width": 390, "height": 844})
            phone.set_default_timeout(900_000)
            phone.goto(url)
            phone.wait_for_selector("#sv-step-btn")
            for i in range(1, 4):
                phone.click("#sv-step-btn")
                phone.wait_for_function(f"document.querySelector('#sv-tokens .sv-tokens')?.dataset.steps === '{i}'")
            phone.wait_for_timeout(1000)
            phone.screenshot(path=narrow_path, full_page=True)
        browser.close()


ARRIVED = ("Tour done", "Tour: step", "finished without")  # the status words of a tour that has arrived


def tour_waits(url: str, keys: list[str], width: int = 1280, height: int = 800) -> list[dict]:
    """Click each guided tour in turn (a fresh page each, one server, in this order) and time the
    click -> the status saying it has arrived; per tour: its key, seconds, and whether its moment
    was inside the viewport then (``data-arrived`` on the status message, see specviz.viz.scripts)."""
    import time

    from playwright.sync_api import sync_playwright

    rows = []
    with sync_playwright() as p:
        browser = launch_chromium(p)
        for key in keys:
            page = browser.new_page(viewport={"width": width, "height": height})
            page.set_default_timeout(900_000)
            page.goto(url)
            page.wait_for_selector("#sv-step-btn")
            t0 = time.perf_counter()
            page.click(f"#sv-tour-{key}")
            page.wait_for_function("(words) => words.some(w => document.querySelector('#sv-status').innerText.includes(w))",
                                   arg=list(ARRIVED), polling=100)
            rows.append({"tour": key, "s": time.perf_counter() - t0, "status": page.inner_text("#sv-status")[:120]})
            page.close()
        browser.close()
    return rows


def _union(page, selectors: list[str]) -> dict:
    """The page-coordinate box around the elements (for a full-page clip)."""
    sy = page.evaluate("window.scrollY")
    boxes = [dict(b, y=b["y"] + sy) for b in (page.locator(s).first.bounding_box() for s in selectors) if b]
    x0, y0 = min(b["x"] for b in boxes), min(b["y"] for b in boxes)
    x1, y1 = max(b["x"] + b["width"] for b in boxes), max(b["y"] + b["height"] for b in boxes)
    return {"x": max(0, x0 - 8), "y": max(0, y0 - 8), "width": x1 - x0 + 16, "height": y1 - y0 + 16}


REJECTED_SHOWN = "!!document.querySelector('#sv-phase .sv-phase[data-phase=\"decide\"] .sv-phase-cell[data-kind=\"rejected\"]')"


def to_the_rejection(page, most: int = 16) -> None:
    """phase ▶ from the rejection tour's draft phase until its rejected draft is decided (then the charts' frame)."""
    for _ in range(most):
        if page.evaluate(REJECTED_SHOWN):
            break
        page.click("#sv-next-phase")
        page.wait_for_timeout(400)
    page.wait_for_function(REJECTED_SHOWN)
    page.wait_for_timeout(1500)


def lesson_screenshots(url: str, out_dir: str) -> list[str]:
    """The README's lesson pictures, each reached by its guided tour: a rejection mid-step (the
    decide phase and the inspector), the race with the speedup card, a tree step, a phone view."""
    from playwright.sync_api import sync_playwright

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    saved = []
    with sync_playwright() as p:
        browser = launch_chromium(p)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.set_default_timeout(900_000)
        page.goto(url)
        page.wait_for_selector("#sv-step-btn")

        def tour(key: str, done: str) -> None:
            page.click(f"#sv-tour-{key}")
            page.wait_for_function(f"document.querySelector('#sv-status').innerText.includes('{done}')")
            page.wait_for_timeout(2500)  # the charts' second frame

        tour("rejection", "Tour: step")
        to_the_rejection(page)  # the tour opens the step in its draft phase: phase ▶ to the rejected draft
        page.locator("#sv-phase").scroll_into_view_if_needed()
        page.screenshot(path=str(out / "screenshot-rejection.png"),
                        clip=_union(page, ["#sv-step-slider", "#sv-phase", "#sv-summary", "#sv-draft-table", "#sv-topk"]),
                        full_page=True)
        saved.append(str(out / "screenshot-rejection.png"))
        tour("speedup", "Tour done")
        page.screenshot(path=str(out / "screenshot-race.png"), clip=_union(page, ["#sv-status", "#sv-metrics", "#sv-why", "#sv-race-box"]),
                        full_page=True)
        saved.append(str(out / "screenshot-race.png"))
        tour("tree", "Tour: step")
        page.screenshot(path=str(out / "screenshot-tree.png"), clip=_union(page, ["#sv-tree-row"]), full_page=True)
        saved.append(str(out / "screenshot-tree.png"))
        phone = browser.new_page(viewport={"width": 390, "height": 844}, device_scale_factor=2)
        phone.set_default_timeout(900_000)
        phone.goto(url)
        phone.wait_for_selector("#sv-step-btn")
        phone.click("#sv-tour-rejection")
        phone.wait_for_function("document.querySelector('#sv-status').innerText.includes('Tour: step')")
        phone.wait_for_timeout(2500)
        to_the_rejection(phone)
        phone.locator("#sv-phase").scroll_into_view_if_needed()
        phone.screenshot(path=str(out / "screenshot-lesson-phone.png"))
        saved.append(str(out / "screenshot-lesson-phone.png"))
        browser.close()
    return saved
