"""Serve the playground for the browser tests; measure its Step overhead; take screenshots.

    python tests/app_server.py                 # tiny random models on http://127.0.0.1:7861
    python tests/app_server.py --builtin       # the built-in models (gemma-3-270m + its int8 copy)
    python tests/app_server.py --builtin --measure 12 --screenshot assets/screenshot.png

``--measure N`` clicks Step N times in headless Chromium and compares, per click, the engine's
own step time (shown in the page) with the time from the click until the step's tokens, metrics,
inspector and plots are on screen. ``--screenshot`` plays a run to the end, runs target-only, and
saves the page at 1280x800 (plus a 390 px wide phone view next to it).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

TINY_PROMPT = "the cat sat on the mat. the cat sat on the mat. the dog sat on the"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def make_tiny_models(root: Path) -> tuple[str, str]:
    """A tiny target and a noisy copy of it (same char tokenizer), saved as local checkpoints."""
    from conftest import make_char_tokenizer, make_llama, perturbed

    target_dir, draft_dir = root / "tiny-target", root / "tiny-draft"
    if not (target_dir / "config.json").is_file() or not (draft_dir / "config.json").is_file():
        tok = make_char_tokenizer()
        target = make_llama(len(tok), 64, 2, seed=0, sharpen=30.0)
        draft = perturbed(target, 0.1, seed=2)
        for model, d in ((target, target_dir), (draft, draft_dir)):
            model.save_pretrained(str(d))
            tok.save_pretrained(str(d))
    return str(target_dir), str(draft_dir)


def tiny_env(root: Path) -> dict[str, str]:
    target, draft = make_tiny_models(root)
    return {
        "SPECVIZ_DEFAULT_TARGET": target,
        "SPECVIZ_DEFAULT_DRAFT": draft,
        "SPECVIZ_DEFAULT_PROPOSER": "draft",
        "SPECVIZ_DEFAULT_PROMPT": TINY_PROMPT,
        "SPECVIZ_DEFAULT_MAX_NEW_TOKENS": "40",
        "SPECVIZ_DEFAULT_TEMPERATURE": "1",  # seed 0: step 1 rejects, step 2 takes a bonus, step 3 rejects
        "GRADIO_ANALYTICS_ENABLED": "False",
        "HF_HUB_OFFLINE": "1",
        "SPECVIZ_ALLOW_LOCAL_PATHS": "1",  # the tiny models are local directories
    }


@contextlib.contextmanager
def patched_environ(env: dict[str, str]):
    """Set ``env`` in os.environ for the block, then put back what was there before."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield env
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def wait_until_up(url: str, seconds: float = 60) -> str:
    """Poll ``url`` until it answers 200 (at most ``seconds``); returns it."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            time.sleep(0.2)
    return url


def start(env: dict[str, str], port: int | None = None):
    """Build and launch the demo in this process (background threads); returns (demo, url)."""
    os.environ.update(env)
    from specviz.ui import build_demo, launch

    port = port or free_port()
    demo = build_demo()
    launch(demo, server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    return demo, wait_until_up(f"http://127.0.0.1:{port}/")


CHROMIUM = os.environ.get("SPECVIZ_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--disable-dev-shm-usage"]


def missing_browser() -> str | None:
    """Why the browser tests cannot run here (no Chromium, no Playwright), or None when they can."""
    if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
        return f"{CHROMIUM} is missing (apt-get install chromium, or set SPECVIZ_CHROMIUM)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install playwright)"
    return None


def launch_chromium(playwright):
    """Debian's headless Chromium (never a downloaded browser) through a started Playwright."""
    return playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)

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


def _main() -> None:
    import argparse
    import statistics
    import tempfile

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--builtin", action="store_true", help="serve the built-in models, not tiny random ones")
    ap.add_argument("--port", type=int, default=int(os.environ.get("PORT", "7861")))
    ap.add_argument("--measure", type=int, default=0, metavar="N", help="time N Step clicks, then exit")
    ap.add_argument("--screenshot", metavar="PNG", help="save a finished run's page, then exit")
    args = ap.parse_args()

    if args.builtin:
        env = {"GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1"}
        if args.measure:  # room for N steps, however many tokens each commits
            env.setdefault("SPECVIZ_DEFAULT_MAX_NEW_TOKENS", os.environ.get("SPECVIZ_DEFAULT_MAX_NEW_TOKENS", "256"))
    else:
        root = Path(tempfile.gettempdir()) / "specviz-tiny-models"
        root.mkdir(exist_ok=True)
        env = tiny_env(root)
    demo, url = start(env, port=args.port)
    print("serving", url, flush=True)
    if args.builtin:
        from specviz.ui import warm_up

        warm_up().join()
    if args.measure:
        rows = measure_steps(url, args.measure)
        for r in rows:
            print({k: round(v) for k, v in r.items()})
        med = lambda key: statistics.median(key(r) for r in rows)  # noqa: E731
        print(f"median over {len(rows)} steps: engine {med(lambda r: r['engine_ms']):.0f} ms; click -> shown "
              f"{med(lambda r: r['shown_ms']):.0f} ms (UI overhead {med(lambda r: r['shown_ms'] - r['engine_ms']):.0f} ms); "
              f"click -> all plots redrawn {med(lambda r: r['drawn_ms']):.0f} ms "
              f"(UI overhead {med(lambda r: r['drawn_ms'] - r['engine_ms']):.0f} ms)", flush=True)
    if args.screenshot:
        stem = args.screenshot.removesuffix(".png")
        screenshot(url, args.screenshot, narrow_path=f"{stem}-phone.png")
        print("saved", args.screenshot, flush=True)
    if args.measure or args.screenshot:
        demo.close()
        return
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        demo.close()


if __name__ == "__main__":
    _main()
