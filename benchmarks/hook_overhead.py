"""What hooks cost: the same greedy runs with no hooks, with a no-op Hook, and with a
TraceRecorder writing JSONL, interleaved in one process. Prints tokens/s and the ratios.

    python benchmarks/hook_overhead.py --target gemma-3-270m --proposer ngram --k 4 --limit 8
"""

from __future__ import annotations

import argparse
import io
import time

import torch

from specviz import Hook, SpeculativeDecoder, TraceRecorder, load_model
from specviz.prompts import load_prompts
from specviz.proposers import from_spec


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="gemma-3-270m")
    ap.add_argument("--proposer", default="ngram")
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--limit", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    target = load_model(args.target)
    decoder = SpeculativeDecoder(target, from_spec(args.proposer, target), k=args.k)
    prompts = [r.prompt for r in load_prompts(limit=args.limit)]
    variants = {"no hooks": lambda: [], "no-op Hook": lambda: [Hook()], "TraceRecorder": lambda: [TraceRecorder(io.StringIO())]}
    decoder.generate(prompts[0], max_new_tokens=8, chat=True)  # warm-up
    tokens = {v: 0 for v in variants}
    seconds = {v: 0.0 for v in variants}
    for r in range(args.rounds):
        for i, prompt in enumerate(prompts):
            names = list(variants)
            names = names[(i + r) % len(names):] + names[: (i + r) % len(names)]  # rotate the order
            for name in names:
                t0 = time.perf_counter()
                res = decoder.generate(prompt, max_new_tokens=args.max_new_tokens, hooks=variants[name](), chat=True)
                seconds[name] += time.perf_counter() - t0
                tokens[name] += len(res.token_ids)
    base = tokens["no hooks"] / seconds["no hooks"]
    print(f"{target.name} + {decoder.label}, {len(prompts)} prompts x {args.rounds} rounds, {args.max_new_tokens} new tokens, torch threads {torch.get_num_threads()}")
    for name in variants:
        tps = tokens[name] / seconds[name]
        print(f"  {name:14s} {tps:7.2f} tok/s   {tps / base:6.3f} x no hooks")


if __name__ == "__main__":
    main()
