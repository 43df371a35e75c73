"""Load test: N concurrent sessions against the served app, each pressing Step then Play to the end.

    python -m benchmarks.load_test                      # built-in models, 8 sessions, new server
    python -m benchmarks.load_test --tiny -n 8          # tiny random models (seconds)
    python -m benchmarks.load_test --url http://127.0.0.1:7860/ -n 16

(from the repository root: it serves the app with tests/support/app_server.py).

Every session is a ``gradio_client.Client`` (its own Gradio session, hence its own playground
state) calling the playground's ``/on_step`` and ``/on_play`` endpoints. Sessions with the same
seed must produce the same tokens as a run of that seed alone; the script checks this and prints
timings (per session: first Step, Play to the end, total; overall wall time).
"""

from __future__ import annotations

import argparse
import html
import re
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Result:
    seed: int
    text: str  # the generated tokens, as shown (tags stripped)
    status: str
    step_s: float
    play_s: float

    @property
    def finished(self) -> bool:
        return "Finished" in self.status


def controls(target: str, draft: str, *, seed: int, max_new_tokens: int, prompt: str, temperature: float = 1.0,
             k: int = 4) -> list:
    """The playground's 14 control values, in PlaygroundView.controls order."""
    return [target, "draft", draft, k, temperature, 1.0, 0, seed, max_new_tokens, prompt, True, "constant", 4, "exact"]


_TAG = re.compile(r"<[^>]+>")


def visible_output(tokens_html: str) -> str:
    """The run's output text as the page shows it (the prompt block dropped, tags stripped)."""
    out = tokens_html.split('<div class="sv-out">', 1)[-1]
    return html.unescape(_TAG.sub("", out))


def one_session(url: str, args: list) -> Result:
    from gradio_client import Client

    client = Client(url, verbose=False, httpx_kwargs={"timeout": 120})  # httpx's 5 s: 8 sessions at once on a busy box
    t0 = time.perf_counter()
    client.predict(*args, api_name="/on_step")
    t1 = time.perf_counter()
    out = client.predict(*args, api_name="/on_play")
    t2 = time.perf_counter()
    client.close() if hasattr(client, "close") else None
    status, tokens = _text(out[0]), _text(out[1])
    return Result(seed=args[7], text=visible_output(tokens), status=html.unescape(_TAG.sub("", status)),
                  step_s=t1 - t0, play_s=t2 - t1)


def _text(value) -> str:
    if isinstance(value, dict):  # an update dict
        value = value.get("value", "")
    return str(value or "")


def run_load(url: str, target: str, draft: str, *, sessions: int = 8, seeds: int = 1, max_new_tokens: int = 40,
             prompt: str = "Explain speculative decoding in one paragraph.", temperature: float = 1.0) -> dict:
    """References (one session per seed, alone), then ``sessions`` at once; returns everything."""
    refs = {s: one_session(url, controls(target, draft, seed=s, max_new_tokens=max_new_tokens, prompt=prompt,
                                         temperature=temperature)) for s in range(seeds)}
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=sessions) as pool:
        futures = [pool.submit(one_session, url, controls(target, draft, seed=i % seeds, max_new_tokens=max_new_tokens,
                                                          prompt=prompt, temperature=temperature))
                   for i in range(sessions)]
        results = [f.result() for f in futures]
    wall = time.perf_counter() - t0
    return {"refs": refs, "results": results, "wall_s": wall,
            "mismatches": [i for i, r in enumerate(results) if r.text != refs[r.seed].text],
            "unfinished": [i for i, r in enumerate(results) if not r.finished]}


def report(out: dict) -> str:
    rs: list[Result] = out["results"]
    ref_play = statistics.mean(r.play_s for r in out["refs"].values())
    lines = [
        f"{len(rs)} sessions in {out['wall_s']:.1f} s wall; alone, Play took {ref_play:.2f} s",
        f"first Step: median {statistics.median(r.step_s for r in rs):.2f} s, max {max(r.step_s for r in rs):.2f} s",
        f"Play to the end: median {statistics.median(r.play_s for r in rs):.2f} s, max {max(r.play_s for r in rs):.2f} s",
        f"finished: {len(rs) - len(out['unfinished'])}/{len(rs)}; equal to the single run of the same seed: "
        f"{len(rs) - len(out['mismatches'])}/{len(rs)}",
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", "--sessions", type=int, default=8)
    ap.add_argument("--seeds", type=int, default=2, help="distinct seeds among the sessions")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--tiny", action="store_true", help="serve tiny random models instead of the built-ins")
    ap.add_argument("--url", help="an already running app (default: start one in this process)")
    ap.add_argument("--target", default="gemma-3-270m")
    ap.add_argument("--draft", default="gemma-3-270m@int8")
    args = ap.parse_args()

    from tests.support import app_server

    target, draft, prompt = args.target, args.draft, "Explain speculative decoding in one paragraph."
    demo = None
    url = args.url
    if not url:
        if args.tiny:
            root = Path(tempfile.gettempdir()) / "specviz-tiny-models"
            root.mkdir(exist_ok=True)
            env = app_server.tiny_env(root)
            target, draft, prompt = env["SPECVIZ_DEFAULT_TARGET"], env["SPECVIZ_DEFAULT_DRAFT"], app_server.TINY_PROMPT
        else:
            env = {"GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1"}
        demo, url = app_server.start(env)
        print("serving", url, flush=True)
    out = run_load(url, target, draft, sessions=args.sessions, seeds=args.seeds, max_new_tokens=args.max_new_tokens,
                   prompt=prompt)
    print(report(out), flush=True)
    if demo is not None:
        demo.close()
    sys.exit(1 if out["mismatches"] or out["unfinished"] else 0)


if __name__ == "__main__":
    threading.current_thread().name = "load-test"
    main()
