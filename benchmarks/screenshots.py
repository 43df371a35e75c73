"""Retake the README's and docs/playground.md's pictures from the app as it starts today.

    python benchmarks/screenshots.py            # the built-in models; writes assets/screenshot*.png
    python benchmarks/screenshots.py --out /tmp/shots

Serves the app on the built-in default models (gemma-3-270m, the n-gram proposer; the rejection tour's
int8 draft), lets the start-up preparation finish, then drives headless Chromium
(tests/support/browser.py): a finished run beside its target-only run at 1280x800 (assets/screenshot.png),
then each guided tour at its moment (rejection, race, tree) and the rejection tour on a 390x844 phone.
Every picture is then stored as a 256-colour PNG (the UI's flat colours survive it) so the repository
keeps them small. Several minutes on a 2-core CPU.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHOTS = ("screenshot.png", "screenshot-rejection.png", "screenshot-race.png", "screenshot-tree.png",
         "screenshot-lesson-phone.png")  # the ones README.md and docs/playground.md show


def shrink(src: Path, dst: Path, colours: int = 256) -> int:
    """``src`` saved at ``dst`` as a palette PNG of at most ``colours`` colours. -> its bytes."""
    from PIL import Image

    with Image.open(src) as im:
        im.convert("RGB").quantize(colors=colours, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE) \
            .save(dst, optimize=True)
    return dst.stat().st_size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(ROOT / "assets"), help="where the PNGs go (default: assets/)")
    ap.add_argument("--port", type=int, default=7862)
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from tests.support import app_server
    from tests.support.browser import lesson_screenshots, screenshot

    demo, url = app_server.start({"GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1"}, port=args.port)
    from specviz.ui import warm_up

    thread = warm_up()
    if thread is not None:
        thread.join()
    from specviz.app.warmup import STARTUP

    if STARTUP.later_thread is not None:  # the rejection tour's draft too
        STARTUP.later_thread.join()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp)
        screenshot(url, str(raw / "screenshot.png"))
        lesson_screenshots(url, str(raw))
        for name in SHOTS:
            size = shrink(raw / name, out / name)
            print(f"saved {out / name} ({size / 1024:.0f} KiB)", flush=True)
    demo.close()


if __name__ == "__main__":
    main()
