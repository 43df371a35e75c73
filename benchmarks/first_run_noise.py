"""The playground's first default run after a start against the runs that follow: does the page
give them the same verdict within the noise band it shows?

Drives the playground's own handlers (``ui.playground.on_play`` then ``on_baseline``, as the Play
and "Run target-only" buttons do) in one fresh process with the app's default settings
(``app.runs.Defaults.from_env``: the built-in target, the default proposer, k and prompt), then
Reset and the same again, ``--runs`` times, and prints each run's speedup, the card's 90% interval
and its verdict ("faster", "even", "slower"; "even" when the interval holds 1.0x). The first run
pays whatever a fresh process pays (model load and the static step's build happen while the page
says it is loading; they are outside the timed steps).

    PYTHONPATH=$PWD python benchmarks/first_run_noise.py --runs 3 [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import time

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")


def cpu_line() -> str:
    """The CPU as advisor_check.cpu_info reads it (lscpu: model name, family/model, ISA flags)."""
    from advisor_check import cpu_info  # this folder is on sys.path when the script runs

    c = cpu_info()
    return f"{c['model_name']} (family {c['family']}, model {c['model']}), {c['cpus']} CPUs, {', '.join(c['isa'])}"


def card_numbers(card: str) -> dict:
    """The speedup card's verdict and interval, read from its data attributes."""
    attr = lambda name: re.search(rf'data-{name}="([^"]*)"', card)  # noqa: E731
    out = {"verdict": attr("verdict").group(1) if attr("verdict") else None}
    for name in ("low", "high"):
        m = attr(name)
        out[name] = float(m.group(1)) if m else None
    out["noise"] = attr("noise").group(1) if attr("noise") else None
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3, help="runs in the one process (the first is the one after a start)")
    ap.add_argument("--json", metavar="OUT.json", help="write the runs as JSON")
    args = ap.parse_args()
    if args.runs < 2:
        ap.error("--runs must be at least 2: the first run is compared with the ones after it")

    import torch

    from specviz.app import runs
    from specviz.ui import playground as pg
    from specviz.ui.lesson_view import why_html
    from specviz.ui.state import PlaygroundState

    d = runs.Defaults.from_env()
    raw = dict(target=d.target, proposer=d.proposer, draft=d.draft, k=d.k, temperature=d.temperature, top_p=d.top_p,
               top_k=d.top_k, seed=d.seed, max_new_tokens=d.max_new_tokens, prompt=d.prompt, chat=True,
               schedule="constant", layers=1, rule="exact", options="")
    print(f"CPU: {cpu_line()}; torch {torch.__version__}, {torch.get_num_threads()} threads; "
          f"load average {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(f"defaults: target {d.target}, proposer {d.proposer}, k = {d.k}, T = {d.temperature}, "
          f"{d.max_new_tokens} new tokens")
    st = PlaygroundState()
    rows = []
    for i in range(args.runs):
        t0 = time.perf_counter()
        list(pg.on_play(st, *raw.values()))
        list(pg.on_baseline(st, *raw.values()))
        wall = time.perf_counter() - t0
        card = card_numbers(why_html(st))
        speedup = st.stats().tokens_per_s / st.comparable_baseline().tokens_per_s
        rows.append(dict(run=i + 1, speedup=speedup, wall_s=wall, **card))
        print(f"run {i + 1}: speedup {speedup:.2f}x, interval {card['low']:.2f}-{card['high']:.2f}x, "
              f"verdict {card['verdict']} ({card['noise']}), {wall:.1f} s with its target-only run")
        pg.on_reset(st)
    st.close()
    first, rest = rows[0], rows[1:]
    same = all(r["verdict"] == first["verdict"] for r in rest)
    inside = all(first["low"] <= r["speedup"] <= first["high"] for r in rest)
    print(f"first run's verdict equal to every later run's: {'yes' if same else 'no'}; "
          f"every later speedup inside the first run's interval: {'yes' if inside else 'no'}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(dict(cpu=cpu_line(), torch=torch.__version__, load=os.getloadavg(), runs=rows,
                           same_verdict=same, inside_first_interval=inside), f, indent=1)


if __name__ == "__main__":
    main()
