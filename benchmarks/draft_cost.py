"""A draft token's cost against a target step: c = t(draft token) / t(target step), side by side;
and the static step's runners (eager, fused) side by side.

For each draft spec, two copies of the same proposer draft k tokens (greedy) from the same cached
context, interleaved in one process, each rolled back after every repeat:
- transformers: the model's own forward on a DynamicCache (``SPECVIZ_STATIC_DECODE=0``);
- static: specviz.runtime.static_decode's one-token step on static KV buffers (its default runner:
  fused where it serves, else eager);
and the target's own one-token decode step and its verify pass over k + 1 tokens (float32, both
ways: the transformers forward and the static step that specviz runs) are timed in the same
rotation, so each c is measured against the same machine state. Provisional on a busy machine.

``--runners eager,fused`` also times, in the same rotation, the target's one-token
step and verify pass and the int8 draft's one-token step (``--int8``, default TARGET@int8), whole
(head included) and the body alone (one call of the runner, no head), through each runner of the
static step (specviz.runtime.static_decode.RUNNERS; each on its own decoder, built once, its
build and first calls' seconds printed). ``--widths 1-9`` times the int8 draft's body
at each of those widths (per call; divide by the width for per token), and ``--int8-kernels
int_mm,blocked`` builds the int8 draft once per ``Int8Options.kernel`` and times each in the same
rotation (the kernels side by side, one process, interleaved).

    PYTHONPATH=$PWD python benchmarks/draft_cost.py [--target gemma-3-270m]
        [--draft draft:gemma-3-270m@int8 --draft draft:gemma-3-270m@int8,vocab=16384 | --draft none]
        [--runners eager,fused] [--widths 1-9] [--int8-kernels int_mm,blocked] [--k 4] [--repeats 9]
"""

from __future__ import annotations

import argparse
import copy
import logging
import os
import statistics
import time
from contextlib import contextmanager

import torch

from specviz.core.engine import encode_prompt
from specviz.core.records import Sampling
from specviz.models import load_model
from specviz.proposers.registry import from_spec
from specviz.runtime.kv import forward_logits, new_cache, rollback
from specviz.runtime.static_decode import StaticDecoder, static_cache

PROMPT = "Write a short story about a robot who learns to paint, in five sentences."


@contextmanager
def static_mode(value: str):
    """``SPECVIZ_STATIC_DECODE=value`` for the block."""
    old = os.environ.get("SPECVIZ_STATIC_DECODE")
    os.environ["SPECVIZ_STATIC_DECODE"] = value
    try:
        yield
    finally:
        if old is None:
            del os.environ["SPECVIZ_STATIC_DECODE"]
        else:
            os.environ["SPECVIZ_STATIC_DECODE"] = old


def proposer_state(proposer, target, static: bool):
    with static_mode("1" if static else "0"):
        return proposer.init_state(target)


def step_fns(model, cache, ctx: torch.Tensor, k: int):
    """One token of decoding (k times, argmax fed back) and one pass over k + 1 tokens, each rolled back."""
    n = int(ctx.shape[0])
    with torch.inference_mode():
        forward_logits(model, ctx[:-1], cache, 1)

    def step():
        with torch.inference_mode():
            x = ctx[-1:]
            for _ in range(k):
                x = forward_logits(model, x, cache, 1)[0].argmax()[None]
            rollback(cache, n - 1)

    def verify():
        with torch.inference_mode():
            forward_logits(model, ctx[-1:].repeat(k + 1), cache, k + 1)
            rollback(cache, n - 1)

    return step, verify


def body_fn(decoder: StaticDecoder, cache, ctx: torch.Tensor, width: int):
    """One call of the decoder's kept runner on ``width`` tokens after the context (no head, no
    bookkeeping: the runner's own cost; each call writes the same slots past the cache's length)."""
    with torch.inference_mode():
        cache.reserve(cache.length + width)
        example = decoder._inputs(cache, ctx[-1:].repeat(width), cache.length)
        decoder._call(example)  # a runner that builds per width builds here, untimed

    def call():
        with torch.inference_mode():
            decoder._call(example)

    return call


def parse_widths(text: str) -> list[int]:
    """"1-9" or "1,3,5" -> the widths."""
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def int8_copy(target, kernel: str) -> torch.nn.Module:
    """The target's int8 copy with ``Int8Options(kernel=kernel)`` (its head's kernels from the plan
    ``specviz tune --target NAME@int8`` wrote, as ``NAME@int8`` loads it)."""
    from specviz.models.device import cache_dir
    from specviz.models.int8 import Int8Options, quantize_int8
    from specviz.runtime import plan, projections

    model = quantize_int8(copy.deepcopy(target.model), target.tokenizer, Int8Options(kernel=kernel))
    projections.load(model, plan.key_of(f"{target.name}@int8", torch.float32, "int8"), cache_dir())
    return model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="gemma-3-270m")
    ap.add_argument("--draft", action="append", help="a draft spec (draft:NAME...); repeat for several; none: no proposers")
    ap.add_argument("--runners", default="", help="comma-separated static-step runners to time side by side")
    ap.add_argument("--int8", default=None, help="the int8 draft model the runners are timed on (default TARGET@int8)")
    ap.add_argument("--widths", default="1", help="the int8 draft body's widths timed with --runners (e.g. 1-9)")
    ap.add_argument("--int8-kernels", default="",
                    help="comma-separated Int8Options kernels (int_mm, blocked): one int8 draft each, timed side by side")
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    logging.basicConfig(format="%(message)s")
    logging.getLogger("specviz.runtime").setLevel(logging.INFO)  # each runner's build, once
    torch.set_num_threads(args.threads)
    target = load_model(args.target)
    ids = encode_prompt(target.tokenizer, PROMPT, chat=True)
    ctx = torch.tensor(ids)
    n = len(ids)
    greedy, gen = Sampling(), torch.Generator().manual_seed(0)
    specs = [] if args.draft == ["none"] else args.draft or [f"draft:{args.target}@int8", f"draft:{args.target}@int8,vocab=16384"]
    per_pass = set()  # names timed per pass (not per token)

    fns = {}
    for static in (False, True):
        how = "static" if static else "transformers"
        cache = static_cache(target.model) if static else new_cache(target.model)
        verify = f"target verify of {args.k + 1} [{how}] (whole pass)"
        fns[f"target step [{how}]"], fns[verify] = step_fns(target.model, cache, ctx, args.k)
        per_pass.add(verify)
    for spec in specs:
        proposer = from_spec(spec, target)
        for static in (False, True):
            state = proposer_state(proposer, target, static)
            proposer.propose(state, ctx, args.k, greedy, gen)  # prefill the draft's cache (and build), warm
            fns[f"{spec} [{'static' if static else 'transformers'}]"] = (
                lambda p=proposer, s=state: p.propose(s, ctx, args.k, greedy, gen))  # rolls back to n - 1 itself
    runners = [r for r in args.runners.split(",") if r]
    built = {}  # (model, runner) -> (build s, first calls s, runner kept)
    if runners:
        models = {"target": target.model}
        kernels = [k for k in args.int8_kernels.split(",") if k]
        if kernels:
            models.update({f"int8 draft [{k}]": int8_copy(target, k) for k in kernels})
        else:
            models["int8 draft"] = load_model(args.int8 or f"{args.target}@int8").model
        for label, model in models.items():
            fns[f"{label} step [transformers]"] = step_fns(model, new_cache(model), ctx, args.k)[0]
            for runner in runners:
                with static_mode(runner):
                    decoder = StaticDecoder(model)
                cache = decoder.new_cache()
                step, verify = step_fns(model, cache, ctx, args.k)
                t = time.perf_counter()
                step()  # builds on the first call
                if label == "target":
                    verify()  # a second width
                first = time.perf_counter() - t
                built[label, runner] = (decoder.build_s, first, decoder.runner)
                fns[f"{label} step [{runner}]"] = step
                for width in (1, args.k + 1) if label == "target" else parse_widths(args.widths):
                    name = f"{label} body alone, {width} token(s) [{runner}] (per call)"
                    fns[name] = body_fn(decoder, cache, ctx, width)
                    per_pass.add(name)
                if label == "target":
                    fns[f"target verify of {args.k + 1} [{runner}] (whole pass)"] = verify
                    per_pass.add(f"target verify of {args.k + 1} [{runner}] (whole pass)")
    times = {name: [] for name in fns}
    for _ in range(args.repeats):
        for name, fn in fns.items():
            t = time.perf_counter()
            fn()
            times[name].append((time.perf_counter() - t) / (1 if name in per_pass else args.k))
    print(f"{args.target}: ms per token (the verify: per pass; k={args.k}, context {n}, {args.threads} threads, "
          f"median of {args.repeats}) and c = that / the target's one-token step (provisional)")
    base = {how: statistics.median(times[f"target step [{how}]"]) for how in ("transformers", "static")}
    print(f"  {'':<58} {'':>10}   c vs the target step on: static | transformers")
    for name, v in times.items():
        m = statistics.median(v)
        print(f"  {name:<58} {m * 1e3:7.1f} ms   c = {m / base['static']:4.2f} | {m / base['transformers']:4.2f}")
    if built:
        print("  runner builds (seconds: building the step; its first step and verify calls, builds included; kept):")
        for (label, runner), (b, first, kept) in built.items():
            print(f"    {label:<11} {runner:<8} build {b:7.1f} s   first calls {first:7.1f} s   kept: {kept}")


if __name__ == "__main__":
    main()
