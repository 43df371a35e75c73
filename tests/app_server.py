"""Serve the playground on tiny local models for the browser tests (and screenshots).

``python tests/app_server.py`` serves it on http://127.0.0.1:7861 with tiny random models, which
is handy for working on the UI without waiting for the real ones.
"""

from __future__ import annotations

import os
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
        "GRADIO_ANALYTICS_ENABLED": "False",
        "HF_HUB_OFFLINE": "1",
    }


def start(env: dict[str, str], port: int | None = None):
    """Build and launch the demo in this process (background threads); returns (demo, url)."""
    os.environ.update(env)
    from specviz.ui import build_demo, launch

    port = port or free_port()
    demo = build_demo()
    launch(demo, server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            time.sleep(0.2)
    return demo, url


if __name__ == "__main__":
    import tempfile

    root = Path(tempfile.gettempdir()) / "specviz-tiny-models"
    root.mkdir(exist_ok=True)
    demo, url = start(tiny_env(root), port=int(os.environ.get("PORT", "7861")))
    print("serving", url, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        demo.close()
