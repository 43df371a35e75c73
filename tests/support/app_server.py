"""Serve the playground for the browser tests; measure its Step overhead; take screenshots.

    python -m tests.support.app_server            # tiny random models on http://127.0.0.1:7861
    python -m tests.support.app_server --builtin  # the built-in models (gemma-3-270m + its int8 copy)
    python -m tests.support.app_server --builtin --measure 12 --screenshot assets/screenshot.png
    python -m tests.support.app_server --builtin --lesson-shots assets  # a rejection, the race, a tree, a phone
    python -m tests.support.app_server --builtin --tour-waits speedup,rejection,no-pay,tree  # each tour's wait

(from the repository root). The browser side (Chromium, Step timing, screenshots) is in
tests/support/browser.py.

``--measure N`` clicks Step N times in headless Chromium and compares, per click, the engine's
own step time (shown in the page) with the time from the click until the step's tokens, metrics,
inspector and plots are on screen. ``--screenshot`` plays a run to the end, runs target-only, and
saves the page at 1280x800 (plus a 390 px wide phone view next to it).
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
import urllib.request
from pathlib import Path

from .tiny import TINY_PROMPT, make_tiny_models


def raw_step_args(env: dict[str, str], **change) -> tuple:
    """The playground's raw control values in handler order (target, proposer, draft, k, T, top-p,
    top-k, seed, max new tokens, prompt, chat, schedule, layers) on the tiny env's models."""
    args = dict(target=env["SPECVIZ_DEFAULT_TARGET"], proposer="draft", draft=env["SPECVIZ_DEFAULT_DRAFT"], k=4,
                temperature=1.0, top_p=1.0, top_k=0, seed=0, max_new_tokens=12, prompt=TINY_PROMPT, chat=True,
                schedule="constant", layers=1)
    args.update(change)
    return tuple(args.values())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tiny_env(root: Path) -> dict[str, str]:
    target, draft = make_tiny_models(root)
    return {
        "SPECVIZ_DEFAULT_TARGET": target,
        "SPECVIZ_DEFAULT_DRAFT": draft,
        "SPECVIZ_DEFAULT_PROPOSER": "draft",
        "SPECVIZ_DEFAULT_PROMPT": TINY_PROMPT,
        "SPECVIZ_DEFAULT_MAX_NEW_TOKENS": "40",
        "SPECVIZ_DEFAULT_TEMPERATURE": "1",  # rejections to see (test_app_browser.EVERY_KIND_SEED: every kind of token)
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


def _main() -> None:
    import argparse
    import statistics
    import tempfile

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--builtin", action="store_true", help="serve the built-in models, not tiny random ones")
    ap.add_argument("--port", type=int, default=int(os.environ.get("PORT", "7861")))
    ap.add_argument("--measure", type=int, default=0, metavar="N", help="time N Step clicks, then exit")
    ap.add_argument("--screenshot", metavar="PNG", help="save a finished run's page, then exit")
    ap.add_argument("--lesson-shots", metavar="DIR", help="save the lesson pictures (each tour's moment), then exit")
    ap.add_argument("--tour-waits", metavar="KEYS", help="time each tour (comma-separated keys, in order), then exit")
    args = ap.parse_args()

    if args.builtin:
        env = {"GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1"}
        if args.measure:  # room for N steps, however many tokens each commits
            env.setdefault("SPECVIZ_DEFAULT_MAX_NEW_TOKENS", os.environ.get("SPECVIZ_DEFAULT_MAX_NEW_TOKENS", "256"))
    else:
        root = Path(tempfile.gettempdir()) / "specviz-tiny-models"
        root.mkdir(exist_ok=True)
        env = tiny_env(root)
    from .browser import measure_steps, screenshot

    demo, url = start(env, port=args.port)
    print("serving", url, flush=True)
    if args.builtin:
        from specviz.ui import warm_up

        thread = warm_up()
        if thread is not None:
            thread.join()
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
    if args.lesson_shots:
        from .browser import lesson_screenshots

        for path in lesson_screenshots(url, args.lesson_shots):
            print("saved", path, flush=True)
    if args.tour_waits:
        from .browser import tour_waits

        for r in tour_waits(url, args.tour_waits.split(",")):
            print(f"tour {r['tour']}: {r['s']:.1f} s  ({r['status']!r})", flush=True)
    if args.measure or args.screenshot or args.lesson_shots or args.tour_waits:
        demo.close()
        return
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        demo.close()


if __name__ == "__main__":
    _main()
