"""Per-step engine time outside the model forwards, per proposer and k (no profiler attached).

For each proposer spec and k it runs --steps greedy steps on one prompt and reports, per step,
the median wall time, the median time inside the model forwards (forward hooks on every
nn.Module the proposer and the target own at top level, and their static decode steps) and their difference, "outside": the
engine's own cost. ``--records`` picks what a run pays for its records: "lean" (nobody reads
them), "full" (the default: fields nobody read are computed when the next step starts) or
"read" (a hook reads every field of every record, as the UI or a trace does). Works with older
engines without the records= option (it then says "eager").

    PYTHONPATH=$PWD python benchmarks/step_overhead.py [--model gemma-3-270m] [--ks 1,2,4,8]
        [--proposers target,ngram,draft:gemma-3-270m@int8,ngram+draft:gemma-3-270m@int8,early-exit:6,ngram-tree]
        [--records lean] [--steps 12] [--threads 2]

Provisional on a busy machine: interleave runs of the versions you compare, repeat.
"""

from __future__ import annotations

import argparse
import inspect
import statistics
import time

import torch

from specviz import Hook
from specviz.core import engine
from specviz.core.records import Sampling
from specviz.models import load_model
from specviz.proposers.registry import from_spec
from specviz.runtime.static_decode import StaticDecoder

PROMPT = ("Write a Python function that parses a CSV file of orders (id, customer, amount, date), "
          "groups the orders by customer and returns the total amount per customer, sorted from the "
          "largest total to the smallest. Then explain how it works.")


class ForwardClock:
    """Wall time spent inside the given models' forwards: their top-level forward (hooks: the
    ``transformers`` forward, a prefill) and their static decode step (``StaticDecoder.run`` and
    ``run_tree``, wrapped while the clock runs: a static step never calls the module's forward, so
    the hooks alone counted 0 ms for it). Nested calls count once."""

    def __init__(self, models):
        self.seconds, self._t, self._depth, self.handles = 0.0, None, 0, []
        for m in models:
            self.handles += [m.register_forward_pre_hook(self._pre), m.register_forward_hook(self._post)]
        ours = {id(m) for m in models}
        self._wrapped = {name: getattr(StaticDecoder, name) for name in ("run", "run_tree")}
        for name, original in self._wrapped.items():
            def timed(decoder, *args, _original=original, **kwargs):
                if id(decoder.model) not in ours:
                    return _original(decoder, *args, **kwargs)
                self._pre()
                try:
                    return _original(decoder, *args, **kwargs)
                finally:
                    self._post()
            setattr(StaticDecoder, name, timed)

    def _pre(self, *_):
        if self._depth == 0:
            self._t = time.perf_counter()
        self._depth += 1

    def _post(self, *_):
        self._depth -= 1
        if self._depth == 0:
            self.seconds += time.perf_counter() - self._t

    def close(self):
        for h in self.handles:
            h.remove()
        for name, original in self._wrapped.items():
            setattr(StaticDecoder, name, original)


class ReadAll(Hook):
    def on_step(self, session, record):
        record.to_dict()


def models_of(target, proposer) -> list:
    found = [target.model]
    for obj in (proposer, getattr(proposer, "draft", None), getattr(proposer, "model", None)):
        m = getattr(obj, "model", None)
        if isinstance(m, torch.nn.Module) and all(m is not x for x in found):
            found.append(m)
    return found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="gemma-3-270m")
    ap.add_argument("--ks", default="1,2,4,8")
    ap.add_argument("--proposers", default="target,ngram,draft:gemma-3-270m@int8,ngram+draft:gemma-3-270m@int8,early-exit:6,ngram-tree")
    ap.add_argument("--records", default="lean", choices=("lean", "full", "read"))
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    target = load_model(args.model, device="cpu", dtype="float32")
    has_records = "records" in inspect.signature(engine.SpeculativeDecoder.start).parameters
    mode = args.records if has_records else "eager"
    built = {}
    for spec in args.proposers.split(","):
        proposer = None if spec == "target" else built.setdefault(spec, from_spec(spec, target))
        models = models_of(target, proposer)
        for k in ([1] if proposer is None else [int(k) for k in args.ks.split(",")]):
            dec = engine.SpeculativeDecoder(target, proposer, k=k, sampling=Sampling())
            opts = {"records": "full" if args.records == "read" else args.records} if has_records else {}
            hooks = [ReadAll()] if args.records == "read" else []
            session = dec.start(PROMPT, max_new_tokens=args.steps * (k + 1) + 16, chat=True, hooks=hooks, **opts)
            session.step()  # warm
            walls, fwds = [], []
            clock = ForwardClock(models)
            for _ in range(args.steps):
                if session.done:
                    break
                f0, t = clock.seconds, time.perf_counter()
                session.step()
                walls.append(time.perf_counter() - t)
                fwds.append(clock.seconds - f0)
            clock.close()
            outside = statistics.median(w - f for w, f in zip(walls, fwds)) * 1e3
            print(f"{spec:<34} k={k} records={mode:<5} step {statistics.median(walls) * 1e3:7.1f} ms  "
                  f"forwards {statistics.median(fwds) * 1e3:7.1f} ms  outside {outside:6.2f} ms  "
                  f"(min outside {min(w - f for w, f in zip(walls, fwds)) * 1e3:5.2f}; {len(walls)} steps)", flush=True)


if __name__ == "__main__":
    main()
