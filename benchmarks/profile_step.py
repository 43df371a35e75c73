"""Where a Session.step's time goes outside the model forwards, per proposer and k.

For each proposer (ngram, draft:TARGET@int8 built with specviz.models.int8, ngram+draft, early-exit)
and k, it runs a few warm steps, then profiles --steps steps with torch.profiler and prints:
the step's wall time; the time inside model forwards (the draft's and the target's, measured by
forward hooks on the top-level modules); the rest ("outside"); and the top CPU ops by self time
(softmax, topk, sort, argmax over the vocabulary...), and the engine's Python phases
(chain_record, verify, logits_to_probs, token texts) timed with record_function wrappers.

    PYTHONPATH=$PWD python benchmarks/profile_step.py [--model gemma-3-270m] [--ks 1,2,4,8]
        [--proposers ngram,draft,ngram+draft,early-exit:6] [--steps 4] [--threads 2]

Provisional on a busy machine; the op table's shares are what matters.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import statistics
import time

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from benchmarks.step_overhead import PROMPT, ForwardClock  # the same prompt and forward timer
from specviz.core import engine, lazyrec
from specviz.core.records import Sampling
from specviz.models import LoadedModel, load_model
from specviz.models.int8 import quantize_int8
from specviz.proposers import DraftModel, EarlyExit, NGram, NGramOrDraft


@contextlib.contextmanager
def labelled(obj, attr: str, label: str):
    """Wrap obj.attr in a torch.profiler record_function named ``label`` (patched back after)."""
    original = getattr(obj, attr)

    def wrapper(*a, **kw):
        with record_function(label):
            return original(*a, **kw)

    setattr(obj, attr, wrapper)
    try:
        yield
    finally:
        setattr(obj, attr, original)


def proposers(target, names):
    int8 = None
    for name in names:
        if name == "ngram":
            yield name, NGram()
        elif name in ("draft", "ngram+draft"):
            if int8 is None:
                model = quantize_int8(copy.deepcopy(target.model), target.tokenizer)
                int8 = DraftModel(LoadedModel(model, target.tokenizer, f"{target.name}@int8", target.device, target.dtype, "int8"))
            yield name, int8 if name == "draft" else NGramOrDraft(int8)
        elif name.startswith("early-exit:"):
            yield name, EarlyExit(target, int(name.split(":")[1]))
        else:
            raise SystemExit(f"unknown proposer {name!r}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="gemma-3-270m")
    ap.add_argument("--ks", default="1,2,4,8")
    ap.add_argument("--proposers", default="ngram,draft,ngram+draft,early-exit:6")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--warm", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rows", type=int, default=12, help="ops listed per configuration")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    target = load_model(args.model, device="cpu", dtype="float32")
    ks = [int(k) for k in args.ks.split(",")]
    for pname, proposer in proposers(target, args.proposers.split(",")):
        models = [target.model]
        inner = getattr(proposer, "draft", proposer)
        if hasattr(inner, "model") and hasattr(inner.model, "model"):
            models.append(inner.model.model)
        for k in ks:
            dec = engine.SpeculativeDecoder(target, proposer, k=k, sampling=Sampling())
            session = dec.start(PROMPT, max_new_tokens=args.warm + args.steps * 2 + 8, chat=True)
            for _ in range(args.warm):
                session.step()
            clock = ForwardClock(models)
            with contextlib.ExitStack() as stack:
                stack.enter_context(labelled(engine, "chain_record", "engine.chain_record"))
                stack.enter_context(labelled(engine, "verify", "algorithm.verify"))
                stack.enter_context(labelled(lazyrec, "logits_to_probs", "engine.logits_to_probs(target)"))  # LazyProbs
                stack.enter_context(labelled(dec.texts, "tops", "TokenTexts.tops"))
                import specviz.proposers.draft_model as dm

                stack.enter_context(labelled(dm, "logits_to_probs", "draft logits_to_probs"))
                prof = stack.enter_context(profile(activities=[ProfilerActivity.CPU], record_shapes=False))
                walls = []
                for _ in range(args.steps):
                    if session.done:
                        break
                    t = time.perf_counter()
                    with record_function("Session.step"):
                        session.step()
                    walls.append(time.perf_counter() - t)
            clock.close()
            n = len(walls)
            wall = statistics.mean(walls) * 1e3
            fwd = clock.seconds / max(1, n) * 1e3
            print(f"\n== {pname} k={k}: {n} steps, {wall:.1f} ms/step, model forwards {fwd:.1f} ms, "
                  f"outside {wall - fwd:.1f} ms/step (profiler on: provisional)")
            events = prof.key_averages()
            labels = [e for e in events if e.key.startswith(("engine.", "algorithm.", "TokenTexts", "draft "))]
            for e in sorted(labels, key=lambda e: -e.cpu_time_total):
                print(f"  {e.key:<36} {e.cpu_time_total / 1e3 / max(1, n):8.2f} ms/step (incl.)")
            ops = [e for e in events if e.key.startswith(("aten::", "quantized::")) and e.key not in ("aten::linear",)]
            print("  top aten ops by self CPU time (ms/step):")
            for e in sorted(ops, key=lambda e: -e.self_cpu_time_total)[: args.rows]:
                print(f"    {e.key:<34} {e.self_cpu_time_total / 1e3 / max(1, n):8.2f}  x{e.count // max(1, n)}")


if __name__ == "__main__":
    main()
