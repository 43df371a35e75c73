"""A draft token's cost against a target step: c = t(draft token) / t(target step), side by side.

For each draft spec, two copies of the same proposer draft k tokens (greedy) from the same cached
context, interleaved in one process, each rolled back after every repeat:
- transformers: the model's own forward on a DynamicCache (``SPECVIZ_STATIC_DECODE=0``);
- static: specviz.runtime.static_decode's traced one-token step on static KV buffers (the default);
and the target's own one-token decode step and its verify pass over k + 1 tokens (float32, both
ways: the transformers forward and the static step that specviz runs) are timed in the same
rotation, so each c is measured against the same machine state. Provisional on a busy machine.

    PYTHONPATH=$PWD python benchmarks/draft_cost.py [--target gemma-3-270m]
        [--draft draft:gemma-3-270m@int8 --draft draft:gemma-3-270m@int8,vocab=16384] [--k 4] [--repeats 9]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from specviz.core.engine import encode_prompt
from specviz.core.records import Sampling
from specviz.models import load_model
from specviz.proposers.registry import from_spec
from specviz.runtime.kv import forward_logits, new_cache, rollback
from specviz.runtime.static_decode import static_cache

PROMPT = "Write a short story about a robot who learns to paint, in five sentences."


def proposer_state(proposer, target, static: bool):
    old = os.environ.get("SPECVIZ_STATIC_DECODE")
    os.environ["SPECVIZ_STATIC_DECODE"] = "1" if static else "0"
    try:
        return proposer.init_state(target)
    finally:
        if old is None:
            del os.environ["SPECVIZ_STATIC_DECODE"]
        else:
            os.environ["SPECVIZ_STATIC_DECODE"] = old


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="gemma-3-270m")
    ap.add_argument("--draft", action="append", help="a draft spec (draft:NAME...); repeat for several")
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    target = load_model(args.target)
    ids = encode_prompt(target.tokenizer, PROMPT, chat=True)
    ctx = torch.tensor(ids)
    n = len(ids)
    greedy, gen = Sampling(), torch.Generator().manual_seed(0)
    specs = args.draft or [f"draft:{args.target}@int8", f"draft:{args.target}@int8,vocab=16384"]

    def target_fns(static: bool):
        """One token of target-only decoding (k times) and one verify pass over k + 1 tokens."""
        cache = static_cache(target.model) if static else new_cache(target.model)
        with torch.inference_mode():
            forward_logits(target.model, ctx[:-1], cache, 1)

        def step():
            with torch.inference_mode():
                x = ctx[-1:]
                for _ in range(args.k):
                    x = forward_logits(target.model, x, cache, 1)[0].argmax()[None]
                rollback(cache, n - 1)

        def verify():
            with torch.inference_mode():
                forward_logits(target.model, ctx[-1:].repeat(args.k + 1), cache, args.k + 1)
                rollback(cache, n - 1)

        return step, verify

    fns = {}
    for static in (False, True):
        how = "static" if static else "transformers"
        fns[f"target step [{how}]"], fns[f"target verify of {args.k + 1} [{how}] (whole pass)"] = target_fns(static)
    for spec in specs:
        proposer = from_spec(spec, target)
        for static in (False, True):
            state = proposer_state(proposer, target, static)
            proposer.propose(state, ctx, args.k, greedy, gen)  # prefill the draft's cache (and trace), warm
            fns[f"{spec} [{'static' if static else 'transformers'}]"] = (
                lambda p=proposer, s=state: p.propose(s, ctx, args.k, greedy, gen))  # rolls back to n - 1 itself
    times = {name: [] for name in fns}
    for _ in range(args.repeats):
        for name, fn in fns.items():
            t = time.perf_counter()
            fn()
            times[name].append((time.perf_counter() - t) / (1 if name.endswith("(whole pass)") else args.k))
    print(f"{args.target}: ms per token (the verify: per pass; k={args.k}, context {n}, {args.threads} threads, "
          f"median of {args.repeats}) and c = that / the target's one-token step (provisional)")
    base = {how: statistics.median(times[f"target step [{how}]"]) for how in ("transformers", "static")}
    print(f"  {'':<58} {'':>10}   c vs the target step on: static | transformers")
    for name, v in times.items():
        m = statistics.median(v)
        print(f"  {name:<58} {m * 1e3:7.1f} ms   c = {m / base['static']:4.2f} | {m / base['transformers']:4.2f}")


if __name__ == "__main__":
    main()
