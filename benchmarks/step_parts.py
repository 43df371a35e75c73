"""The static decode step's two parts timed alone, per width: the body (every decoder layer) and the
certified argmax head, for one model after a 64-token context.

    python benchmarks/step_parts.py --model gemma-3-270m --repeats 30 --threads 2

Prints one line: the runner, then per width n the least milliseconds of the body and the head
over ``--repeats`` calls (after two untimed). Run it from two checkouts in turn, several processes
each, to compare their kernels at one row (target-only) and at k + 1 rows (a verify pass); the
2026-12-06 Zen 3 section of docs/results-log.md is such a comparison.

``--pad-gib G`` first allocates and writes G GiB (kept to the end), so the model's weights land in
memory the process takes later: on a virtual machine where the first memory a process takes reads
slower (``benchmarks/memory_placement.py``), two versions that allocate different amounts before
their weights compare fairly only with the same pad (docs/results-log.md, 2026-12-07, Zen 4).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path.cwd()))  # the checkout it is run from, not the installed package

import torch  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="gemma-3-270m")
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--widths", default="1,2,3,5,9")
    ap.add_argument("--pad-gib", type=float, default=0.0, help="GiB to allocate and write before the model loads")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    _pad = torch.ones(int(args.pad_gib * 2**30) // 4)  # written once, held until the end
    from specviz import load_model
    from specviz.runtime import static_decode

    cache = static_decode.static_cache(load_model(args.model).model)
    dec = cache.decoder
    with torch.inference_mode():
        cache.run(torch.arange(100, 164), keep=1, lazy=True).argmax()  # a 64-token context
    base, out = cache.length, {}
    for n in (int(w) for w in args.widths.split(",")):
        ids = torch.arange(1000, 1000 + n)  # [n]
        body, head = [], []
        with torch.inference_mode():
            for r in range(args.repeats + 2):
                cache.length = base
                cache.reserve(base + n)
                inputs = dec._inputs(cache, ids, base)
                t0 = time.perf_counter()
                hidden = dec._call(inputs)  # [n, hidden]
                t1 = time.perf_counter()
                cache.length = base + n
                dec._head(hidden, True).argmax()
                t2 = time.perf_counter()
                if r >= 2:
                    body.append((t1 - t0) * 1e3)
                    head.append((t2 - t1) * 1e3)
        out[n] = (statistics.median(body), statistics.median(head))
    print(dec.runner, " ".join(f"n={n}: body {b:.2f} head {h:.2f}" for n, (b, h) in out.items()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
