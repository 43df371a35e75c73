"""A draft token's cost inside DraftModel.propose vs a bare KV-cached forward of the same model.

Both run on the same int8 copy of --model (specviz.quantize), from the same cached context,
interleaved in one process; the cache is rolled back after each repeat. Prints ms per token of:
- bare: model(input_ids=[[x]], cache=cache, use_cache=True, logits_to_keep=1), k times;
- propose: DraftModel.propose(k) (forward + softmax q over the vocabulary + argmax + bookkeeping);
- propose-argmax: the same loop without q (what greedy decoding needs), for the saving.
Provisional on a busy machine.

    PYTHONPATH=$PWD python benchmarks/draft_cost.py [--model gemma-3-270m] [--k 4] [--repeats 7]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch

from specviz.engine import encode_prompt
from specviz.kv import cache_length, new_cache, rollback
from specviz.models import LoadedModel, load_model
from specviz.proposers import DraftModel
from specviz.quantize import quantize_int8
from specviz.records import Sampling

PROMPT = "Write a short story about a robot who learns to paint, in five sentences."


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="gemma-3-270m")
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    fp = load_model(args.model, device="cpu", dtype="float32")
    q8 = LoadedModel(quantize_int8(copy.deepcopy(fp.model), fp.tokenizer), fp.tokenizer, f"{fp.name}@int8",
                     fp.device, fp.dtype, "int8")
    ids = encode_prompt(fp.tokenizer, PROMPT, chat=True)
    ctx = torch.tensor(ids)
    proposer = DraftModel(q8)
    state = proposer.init_state(fp)
    gen = torch.Generator().manual_seed(0)
    greedy = Sampling()
    proposer.propose(state, ctx, args.k, greedy, gen)  # prefill the draft cache, warm
    n = len(ids)
    cache = new_cache(q8.model)
    with torch.inference_mode():
        q8.model(input_ids=ctx[None, :-1], cache=cache, use_cache=True, logits_to_keep=1)

    def bare():
        with torch.inference_mode():
            x = ctx[-1:]
            for _ in range(args.k):
                out = q8.model(input_ids=x[None], cache=cache, use_cache=True, logits_to_keep=1)
                x = out.logits[0, -1].argmax()[None]
        rollback(cache, n - 1)

    def propose():
        proposer.propose(state, ctx, args.k, greedy, gen)  # rolls its cache back to n - 1 itself

    def propose_argmax():
        from specviz.kv import forward_logits

        with torch.inference_mode():
            keep = n - 1
            rollback(state.cache, keep)
            state.ids = ids[:keep]
            feed = ctx[keep:]
            for _ in range(args.k):
                logits = forward_logits(q8.model, feed, state.cache, 1)[0]
                state.ids.extend(feed.tolist())
                feed = logits.argmax()[None]

    fns = {"bare": bare, "propose": propose, "propose-argmax": propose_argmax}
    times = {name: [] for name in fns}
    for _ in range(args.repeats):
        for name, fn in fns.items():
            t = time.perf_counter()
            fn()
            times[name].append((time.perf_counter() - t) / args.k)
    assert cache_length(cache) == n - 1
    print(f"{q8.name} draft token cost, k={args.k}, context {n}, {args.threads} threads, median of {args.repeats} (provisional)")
    base = statistics.median(times["bare"])
    for name, v in times.items():
        m = statistics.median(v)
        print(f"  {name:<16} {m * 1e3:7.1f} ms/token  {m / base:5.2f}x bare")


if __name__ == "__main__":
    main()
