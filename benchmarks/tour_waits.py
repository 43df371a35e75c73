"""How long each guided tour makes the playground wait: click to "arrived", without a browser.

Calls the handlers a tour button calls (``ui.lesson.tour_setup`` then ``ui.lesson.tour_run``, as
``lesson.wire`` chains them) on the app's defaults (``SPECVIZ_DEFAULT_*``: gemma-3-270m and its
@int8 draft unless set), one fresh playground state per tour (a fresh page) in one process (one
server), in the order given: the first tour after a start also pays the model loads and the
static step's build, which the tours after it share. Each tour's time runs from the setup call to
the run's last frame (the one that says it has arrived); the page's own drawing is not in it.
Beside it, the CPU seconds the process spent meanwhile (every thread): on a shared machine the wall
time grows with the other work, the CPU time much less. The
stages under it: the first time each kind of message appeared (loading, stepping, the target-only
run), and for the no-pay tour the card's verdict and the factor it names.

With ``--start``, the process first does what the app does when it starts (``ui.warm_up``: the
default configuration's models loaded and their static decode steps built, in the background, then
the rejection tour's int8 draft) and waits for both, timed on its own line: the tours then wait as they do for someone who opens the page
once the app is up. Without it, the first tour pays that preparation itself.

    PYTHONPATH=$PWD python benchmarks/tour_waits.py [--start] [--tours no-pay,speedup,rejection,tree] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

CONTROLS = ("target", "proposer", "draft", "k", "temperature", "top_p", "top_k", "seed", "max_new_tokens", "prompt", "chat",
            "schedule", "layers", "rule", "options")  # parse_settings' order, as the page passes them


def _stage(message: str) -> str:
    """A message's kind: its first words up to a number or a colon ("Loading gemma-3-270m…", "Step")."""
    return re.split(r"[0-9:…(]", message, maxsplit=1)[0].strip()[:48] or message[:48]


def run_tour(key: str, defaults) -> dict:
    from specviz.ui import lesson
    from specviz.ui.lesson_view import why_html
    from specviz.ui.state import PlaygroundState

    raw = dict(target=defaults.target, proposer=defaults.proposer, draft=defaults.draft, k=defaults.k,
               temperature=defaults.temperature, top_p=defaults.top_p, top_k=defaults.top_k, seed=defaults.seed,
               max_new_tokens=defaults.max_new_tokens, prompt=defaults.prompt, chat=True, schedule="constant",
               layers=4, rule=lesson.RULE_LABELS.get("exact", "exact"), options="")
    st = PlaygroundState()
    stages: list[tuple[float, str]] = []
    t0, cpu0 = time.perf_counter(), time.process_time()
    frame = lesson.tour_setup(key)(st)  # the click: reset, the tour's controls
    for name, update in frame.items():
        if name in raw and isinstance(update, dict) and "value" in update:
            raw[name] = update["value"]
    for _ in lesson.tour_run(key)(st, *(raw[n] for n in CONTROLS)):
        kind = _stage(st.message[0])
        if not stages or stages[-1][1] != kind:
            stages.append((time.perf_counter() - t0, kind))
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    card = why_html(st) if key in ("speedup", "no-pay") else ""
    verdict = re.search(r'data-verdict="([^"]*)"', card)
    limit = re.search(r'data-limit="([^"]*)"', card)
    row = {"tour": key, "s": wall, "cpu_s": cpu, "status": st.message[0][:160], "kind": st.message[1], "steps": len(st.steps),
           "settings": {n: raw[n] for n in ("proposer", "k", "temperature", "max_new_tokens", "layers", "options")},
           "stages": [[round(t, 2), s] for t, s in stages], "verdict": verdict.group(1) if verdict else None,
           "limit": limit.group(1) if limit else None,
           "card": re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", card)).strip()[:1500]}
    st.close()
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tours", default="speedup,rejection,no-pay,tree", help="comma-separated tour keys, in order")
    ap.add_argument("--json", metavar="OUT.json", help="write the rows as JSON")
    ap.add_argument("--start", action="store_true", help="first run the app's start-up preparation (ui.warm_up) and wait for it")
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import torch
    from first_run_noise import cpu_line

    from specviz.app import runs

    keys = [k.strip() for k in args.tours.split(",") if k.strip()]
    unknown = [k for k in keys if k not in {t.key for t in runs.TOURS}]
    if unknown:
        ap.error(f"unknown tour(s) {unknown}; choose from {', '.join(t.key for t in runs.TOURS)}")
    d = runs.Defaults.from_env()
    print(f"CPU: {cpu_line()}; torch {torch.__version__}, {torch.get_num_threads()} threads; load average "
          f"{', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(f"defaults: target {d.target}, draft {d.draft}, proposer {d.proposer}, k = {d.k}, {d.max_new_tokens} new tokens")
    rows = []
    if args.start:
        from specviz.app.warmup import STARTUP
        from specviz.ui import warm_up

        t0, cpu0 = time.perf_counter(), time.process_time()
        thread = warm_up()
        if thread is not None:
            thread.join()
        if STARTUP.later_thread is not None:  # the rejection tour's draft, prepared after the defaults
            STARTUP.later_thread.join()
        start = {"s": time.perf_counter() - t0, "cpu_s": time.process_time() - cpu0, "stages": dict(STARTUP.seconds)}
        print(f"start-up  {start['s']:6.1f} s (CPU {start['cpu_s']:.1f} s)  "
              + ", ".join(f"{k} {v:.1f} s" for k, v in start["stages"].items()))
        rows.append({"tour": "start-up preparation", **start})
    for key in keys:
        row = run_tour(key, d)
        rows.append(row)
        s = row["settings"]
        print(f"{key:9s} {row['s']:6.1f} s (CPU {row['cpu_s']:.1f} s)  {row['steps']} steps, {s['proposer']} k={s['k']} T={s['temperature']} "
              f"{s['max_new_tokens']} tokens; {row['kind']}: {row['status'][:90]}")
        print("          stages: " + "; ".join(f"{t} s {m}" for t, m in row["stages"]))
        if row["verdict"]:
            print(f"          card: verdict {row['verdict']}, limited by {row['limit']}: {row['card'][:300]}")
    print(f"load average after: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(dict(cpu=cpu_line(), torch=torch.__version__, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
