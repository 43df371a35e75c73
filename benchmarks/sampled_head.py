"""Sampled steps on the full float32 head against the bounded ones (specviz.core.certified), in one
process: for each round, each configuration runs every prompt with ``SPECVIZ_SAMPLED_HEAD=0`` and
with ``auto``, the order alternating by round, the same seeds in both; the first round only warms.
Prints tok/s per mode (median over the timed rounds) and how many outputs were identical (a top-k
p is exact from the bounds, so a seed draws the same tokens; a plain temperature draws other ones).

    PYTHONPATH=$PWD python benchmarks/sampled_head.py --prompts benchmarks/prompts/code.jsonl --set fresh-zen4x \\
        [--temperature 0.7] [--top-k 64] [--top-p 0.95] [--proposer draft:gemma-3-270m@int8,vocab=16384] [--k 4]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from specviz import Sampling, SpeculativeDecoder, load_model
from specviz.prompts import load_prompts
from specviz.proposers import from_spec


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="gemma-3-270m")
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--set", action="append", help="only these named sets of the file (repeatable)")
    ap.add_argument("--proposer", action="append", default=[], help="besides target-only; repeatable")
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--top-k", type=int, default=None)
    ap.add_argument("--top-p", type=float, default=None)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--rounds", type=int, default=3, help="the first one warms")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    target = load_model(args.target)
    prompts = [row.prompt for row in load_prompts(args.prompts, sets=args.set)]
    sampling = Sampling(args.temperature, top_k=args.top_k, top_p=args.top_p)
    rates: dict[tuple[str, str], list[float]] = {}
    same = total = 0
    for rnd in range(args.rounds):
        for spec in [None, *args.proposer]:
            decoder = SpeculativeDecoder(target, from_spec(spec, target) if spec else None, k=args.k, sampling=sampling)
            outputs = {}
            for mode in ("0", "auto") if rnd % 2 else ("auto", "0"):
                os.environ["SPECVIZ_SAMPLED_HEAD"] = mode
                tokens, seconds, outputs[mode] = 0, 0.0, []
                for i, prompt in enumerate(prompts):
                    t = time.perf_counter()
                    result = decoder.generate(prompt, max_new_tokens=args.max_new_tokens, seed=i + 100 * rnd, records="lean")
                    seconds += time.perf_counter() - t
                    tokens += result.stats.new_tokens
                    outputs[mode].append(result.token_ids)
                if rnd:
                    rates.setdefault((spec or "target-only", mode), []).append(tokens / seconds)
            if rnd:
                same += sum(a == b for a, b in zip(outputs["0"], outputs["auto"]))
                total += len(prompts)
    print(f"{args.target}, {sampling}, {len(prompts)} prompts x {args.max_new_tokens} tokens, {args.rounds - 1} timed rounds")
    for spec in dict.fromkeys(s for s, _ in rates):
        full, bounded = (statistics.median(rates[(spec, m)]) for m in ("0", "auto"))
        print(f"  {spec}: full head {full:.2f} tok/s, bounded {bounded:.2f} tok/s ({bounded / full:.2f}x)")
    print(f"  identical outputs: {same} of {total}")


if __name__ == "__main__":
    main()
