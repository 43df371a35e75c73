"""The native float32 product (``torch.ops.specviz_int8.dense``) alone, at each number of rows.

A decoder body's products read their weights once per pass of up to 12 rows: 1 row is a decode
step, 2-9 a verify pass, more a prompt (taken in balanced passes, the later ones from cache). This
times ``--layers`` blocked weights of ``--out`` x ``--in`` (gemma-3-270m's gate/up by default; a
product per layer, as a pass reads them) at every width in ``--rows``, every width once a round
(``specviz.analysis.timing.interleaved``), and prints each width's least ms.

    PYTHONPATH=$PWD python benchmarks/dense_rows.py --threads 2
    PYTHONPATH=$PWD python benchmarks/dense_rows.py --library OLD.so   # another build of the library

``--library`` loads a library file instead of building this checkout's, to compare two builds
process by process (one process can hold one). A width whose time jumps from its neighbours'
points at its row count's loop (2026-12-07, Zen 4: the loops from 5 rows up spent an instruction a
multiply-add moving a row's pointer back from a vector register, which showed from 13 rows, two
passes; docs/results-log.md).
"""

from __future__ import annotations

import argparse
import time

import torch

from specviz.analysis.timing import interleaved


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="1,2,5,9,10,12,13,16,24,30,48", help="widths, comma-separated")
    ap.add_argument("--in", dest="k", type=int, default=640)
    ap.add_argument("--out", type=int, default=4096)
    ap.add_argument("--layers", type=int, default=18)
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--library", help="a built library file to load instead of this checkout's")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.library:
        torch.ops.load_library(args.library)
    else:
        from specviz.runtime import int8_kernel  # noqa: PLC0415 - builds or loads this checkout's

        why = int8_kernel.load()
        if why:
            raise SystemExit(f"specviz's native library is not available here: {why}")
    weights = [torch.randn(-(-args.out // 16), args.k, 16) for _ in range(args.layers)]  # blocked [N/16, K, 16]
    widths = [int(r) for r in args.rows.split(",")]
    rows = {m: torch.randn(m, args.k) for m in widths}

    def a_pass(m: int) -> None:
        for w in weights:
            torch.ops.specviz_int8.dense(rows[m], w, None, args.out)

    (seconds,) = interleaved([(a_pass, widths)], args.repeats, time.perf_counter)
    print(f"{args.layers} products of {args.out} x {args.k}, {args.threads} threads, least ms over {args.repeats} rounds")
    print("  ".join(f"{m}: {1e3 * min(seconds[m]):.1f}" for m in widths))


if __name__ == "__main__":
    main()
