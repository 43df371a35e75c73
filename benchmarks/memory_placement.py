"""Does this machine give a process faster or slower memory depending on when it allocates?

A decode step streams the weights once per token, so its speed is the read bandwidth of the pages
the weights happen to sit in. On a virtual machine those pages are not all alike. This allocates
``--blocks`` tensors of ``--gib`` GiB one after another, writes each once, then reads them
(a sum each) in ``--repeats`` rounds, every block once a round so drift hits them alike
(``specviz.analysis.timing.interleaved``), twice over, and prints each block's median GB/s. A block
slower on both passes is slow because of where it sits, not because of when it was read.

    PYTHONPATH=$PWD python benchmarks/memory_placement.py --blocks 6 --gib 1 --threads 2

A first block well below the rest means that what a process allocates first (here, a model's
weights) streams slower than what it allocates later. A before/after timing of two versions that
allocate different amounts at load then measures where their weights landed as much as their code.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from specviz.analysis.timing import interleaved


def read_gb_per_s(blocks: list[torch.Tensor], repeats: int) -> list[float]:
    """Each block's median read bandwidth (a sum over it) in GB/s, the blocks read in turn each round."""
    (seconds,) = interleaved([(lambda i: blocks[i].sum(), range(len(blocks)))], repeats, time.perf_counter)
    return [b.numel() * b.element_size() / statistics.median(seconds[i]) / 1e9 for i, b in enumerate(blocks)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--blocks", type=int, default=6)
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    blocks = [torch.ones(int(args.gib * 2**30) // 4) for _ in range(args.blocks)]  # each written once: its pages are placed
    for label in ("first pass", "second pass"):
        rates = read_gb_per_s(blocks, args.repeats)
        print(f"{label}: " + "  ".join(f"block {i} {r:.1f}" for i, r in enumerate(rates)) + " GB/s"
              f"  (block 0 / the others' median: {rates[0] / statistics.median(rates[1:]):.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
