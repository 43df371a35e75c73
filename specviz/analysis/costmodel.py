"""What a step costs on this machine: the target's pass t(n), each draft's step, feeds, prefill.

The advisor (:mod:`specviz.analysis.advisor`) turns acceptance into tokens per step; this module
turns a configuration into seconds per step. Everything is measured through the code path the
engine runs: the target's session cache (``runtime.kv.session_cache``: the static decode step
where the model has one, so the traced body and the LM-head kernel choice are in the numbers),
``runtime.kv.forward_logits`` for chains and ``score_tree`` for trees, each ending as a step with
lean records does (greedy: the argmax alone, through the certified screened head where the model
has one; sampled: every row turned into probabilities), a
draft's one-token step on its own session cache, a draft tree's level forward on its
DynamicCache, the n-gram lookups on a context that repeats itself, and the engine's own
bookkeeping per step (a target-only step's time outside its forward, from its records).

:func:`measure` takes a stand-in ``clock`` for tests; :func:`load_or_measure` keeps the result as
JSON under a cache directory, keyed by the machine (CPU model and flags), the model, its dtype,
torch's version and thread count, the context length and whether the static step is on.
How a cost is timed (interleaved rounds, the typical round, the inputs) is :mod:`.timing`'s.
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Collection, Sequence

import torch

from ..runtime.cpu import load_average, machine_id
from .timing import interleaved as _interleaved
from .timing import lookups as _lookups
from .timing import tokens as _tokens
from .timing import typical as _typical

__all__ = ["CostModel", "DraftCost", "context_for", "cost_key", "measure", "measure_draft", "load_or_measure", "interpolate", "monotone",
           "latest_on_this_machine"]

MAX_N = 17  # t(n) for n = 1..17: k + 1 positions for k = 0..16, trees of up to 16 nodes
TREE_NS = (2, 3, 5, 9, 13, 17)  # tree passes measured (interpolated between)
LEVEL_MS = (1, 2, 3, 4)  # draft-tree level widths measured
REPEATS = 4  # rounds per cost: the first (first calls) left out, the median of the other three
DRAFT_REPEATS = 8  # a draft's feeds are cheap (a round: about 0.2 s for gemma-3-270m's int8 copy): more rounds
SCHEMA = 7  # 7: a draft's feeds timed right after a target pass and its later steps right after its own, and the target's pass slowed by the draft before it (DraftCost.switch_s); 6: a float32 target's step on the fused runner too, a prompt through its body where faster, timed on text; 5: an int8 draft's step on the fused runner (each layer one op), which a model measured before never had, and the step's overhead without its argmax (counted twice before); 4: draft-tree levels timed on the draft's static step, as it now grows them; 3: a greedy pass takes its argmax as the engine does (a screened head's without logits); 2: each cost the median of its repeats after the first (1: the fastest)


@dataclass(frozen=True)
class DraftCost:
    """A draft model's costs (seconds), each as the engine meets it: a step alternates the draft's
    forwards and the target's pass, and each evicts the other's weights from the CPU's caches, so
    the first draft forward of a step runs after a target pass (``feed_s``), the next ones after
    the draft's own (``step_s``), and the target's pass after the draft's (``switch_s``: what that
    costs it beyond the back-to-back passes t(n) is measured on)."""

    name: str
    step_s: float  # one-token step on its session cache, right after another (a chain draft's 2nd..k-th)
    feed_s: dict[int, float]  # the catch-up feed of n tokens (n = 1..3) at the start of a step, after a target pass
    level_s: dict[int, float]  # a draft tree's level of m nodes (its DynamicCache, tree mask)
    prefill_s: float  # the prompt through the draft (once per prompt)
    switch_s: float = 0.0  # the target's pass right after a draft forward, beyond one right after a target pass

    def feed(self, n: int) -> float:
        return interpolate(self.feed_s, n)

    def level(self, m: int) -> float:
        return interpolate(self.level_s, m)


@dataclass(frozen=True)
class CostModel:
    """The measured costs of one target (and its drafts) on this machine, in seconds."""

    key: str
    machine: str
    target: str
    dtype: str
    torch: str
    threads: int
    context: int  # cached positions each pass ran on top of
    static_decode: str | None  # None: the static step serves the target; else why not (a sentence)
    target_s: dict[int, float]  # t(n): a chain pass over n new positions (n = 1 is a target-only step), made monotone
    tree_s: dict[int, float]  # a tree pass over n positions (root + n - 1 nodes), probabilities included
    step_overhead_s: float  # the engine's bookkeeping per step beyond t(1)
    prefill_s: float  # the context's prefill through the target
    lookup_s: dict[str, float] = field(default_factory=dict)  # "ngram": one chain lookup, "ngram-tree": one trie
    drafts: dict[str, DraftCost] = field(default_factory=dict)
    measured_s: float = 0.0  # how long measuring took
    target_raw_s: dict[int, float] = field(default_factory=dict)  # t(n) as measured (the fastest repeat), before smoothing
    load: float | None = None  # the machine's 1-minute load average when measured (None: unknown)
    cores: int | None = None  # CPU cores the OS reports

    @property
    def busy(self) -> str | None:
        """A sentence when other work loaded the machine while measuring (load above its cores), else None."""
        if self.load is None or not self.cores or self.load <= self.cores:
            return None
        return (f"the machine was busy while measuring (load {self.load:.1f} on {self.cores} cores): the costs are "
                "noisy; measure again when it is quieter (--refresh-costs)")

    def t(self, n: int) -> float:
        """t(n), linear between measured points and beyond the last two."""
        return interpolate(self.target_s, n)

    def t_tree(self, n: int) -> float:
        """A tree pass over n positions (n = nodes + 1); t(1) for n = 1 (no tree: a plain step).
        The chain's pass t(n), measured at every n, plus the tree's extra (masks, every row's
        probabilities) interpolated between the widths where trees were measured: a jump in t(n)
        where a kernel changes with the width (an LM head from 5 to 6 rows) is a tree's too, and
        interpolating the tree's own points across it would price the widths past it too low."""
        if n <= 1:
            return self.t(1)
        extra = {m: s - self.t(m) for m, s in self.tree_s.items()}
        return self.t(n) + max(0.0, interpolate(extra, n))

    def v(self, n: int) -> float:
        """v(n) = t(n) / t(1)."""
        return self.t(n) / self.t(1)

    @property
    def base_step_s(self) -> float:
        """A target-only step: t(1) plus the engine's bookkeeping."""
        return self.t(1) + self.step_overhead_s

    def prefill(self, tokens: int) -> float:
        """The target's prefill of ``tokens`` prompt tokens (scaled from the measured context)."""
        return self.prefill_s * max(0, tokens) / max(1, self.context)

    def curves(self) -> dict[str, Any]:
        """The curves as plain lists, for a plot: n, t(n) ms, v(n), tree pass ms (None where not measured)."""
        ns = sorted(self.target_s)
        return {
            "n": ns,
            "target_ms": [1e3 * self.target_s[n] for n in ns],
            "target_raw_ms": [1e3 * self.target_raw_s[n] if n in self.target_raw_s else None for n in ns],
            "v": [self.v(n) for n in ns],
            "tree_ms": [1e3 * self.tree_s[n] if n in self.tree_s else None for n in ns],
            "drafts": {name: {"step_ms": 1e3 * d.step_s, "level_ms": {m: 1e3 * s for m, s in d.level_s.items()}}
                       for name, d in self.drafts.items()},
        }

    def table(self) -> str:
        """The cost model as a text table (the CLI prints it)."""
        lines = [f"Costs on {self.machine} ({self.threads} threads, torch {self.torch}), {self.target} {self.dtype}, "
                 f"context {self.context} tokens, measured in {self.measured_s:.1f} s:"]
        for note in (self.static_decode, self.busy):
            if note:
                lines.append(f"  note: {note}")
        lines.append(f"  {'n':>3} {'t(n) ms':>8} {'raw ms':>8} {'v(n)':>6} {'tree ms':>8}")
        for n in sorted(self.target_s):
            tree = f"{1e3 * self.tree_s[n]:8.2f}" if n in self.tree_s else f"{'':>8}"
            raw = f"{1e3 * self.target_raw_s[n]:8.2f}" if n in self.target_raw_s else f"{'':>8}"
            lines.append(f"  {n:>3} {1e3 * self.target_s[n]:8.2f} {raw} {self.v(n):6.2f} {tree}")
        lines.append(f"  engine bookkeeping per step {1e3 * self.step_overhead_s:.2f} ms; prefill of {self.context} "
                     f"tokens {1e3 * self.prefill_s:.1f} ms")
        for name, s in sorted(self.lookup_s.items()):
            lines.append(f"  {name} lookup {1e3 * s:.3f} ms per step")
        for d in self.drafts.values():
            feeds = ", ".join(f"{n}: {1e3 * s:.2f}" for n, s in sorted(d.feed_s.items()))
            levels = ", ".join(f"{m}: {1e3 * s:.2f}" for m, s in sorted(d.level_s.items()))
            lines.append(f"  draft {d.name}: step {1e3 * d.step_s:.2f} ms (c = {d.step_s / self.t(1):.2f}); feeds ms "
                         f"{{{feeds}}}; tree levels ms {{{levels}}}; prefill {1e3 * d.prefill_s:.1f} ms; the target's "
                         f"pass after it +{1e3 * d.switch_s:.2f} ms")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["schema"] = SCHEMA
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "CostModel":
        def ints(m):
            return {int(k): float(v) for k, v in (m or {}).items()}

        drafts = {name: DraftCost(x["name"], float(x["step_s"]), ints(x["feed_s"]), ints(x["level_s"]), float(x["prefill_s"]),
                                  float(x.get("switch_s") or 0.0))
                  for name, x in (d.get("drafts") or {}).items()}
        fields = {k: d[k] for k in ("key", "machine", "target", "dtype", "torch", "threads", "context", "static_decode",
                                    "step_overhead_s", "prefill_s")}
        return cls(**fields, target_s=ints(d["target_s"]), tree_s=ints(d["tree_s"]), lookup_s=dict(d.get("lookup_s") or {}),
                   drafts=drafts, measured_s=float(d.get("measured_s", 0.0)), target_raw_s=ints(d.get("target_raw_s")),
                   load=d.get("load"), cores=d.get("cores"))


def monotone(points: dict[int, float]) -> dict[int, float]:
    """The closest non-decreasing curve in n (pool adjacent violators, least squares): a pass over
    more positions does not get cheaper, and on a shared machine one lucky or unlucky point would
    otherwise rank configurations by chance."""
    xs = sorted(points)
    blocks: list[list[float]] = []  # [sum, count] per pooled block
    for x in xs:
        blocks.append([points[x], 1.0])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            s, c = blocks.pop()
            blocks[-1][0] += s
            blocks[-1][1] += c
    out, i = {}, 0
    for s, c in blocks:
        for _ in range(int(c)):
            out[xs[i]] = s / c
            i += 1
    return out


def interpolate(points: dict[int, float], n: int) -> float:
    """points[n], linear between the measured n and beyond the last two (never below 0)."""
    if not points:
        raise ValueError("no measured points to read a cost from")
    if n in points:
        return points[n]
    xs = sorted(points)
    if len(xs) == 1:
        return points[xs[0]]
    lo = [x for x in xs if x < n]
    hi = [x for x in xs if x > n]
    a, b = (lo[-1], hi[0]) if lo and hi else ((xs[-2], xs[-1]) if lo else (xs[0], xs[1]))
    return max(0.0, points[a] + (points[b] - points[a]) * (n - a) / (b - a))


# -- keys ---------------------------------------------------------------------------------------


def context_for(prompt_lengths: Sequence[int], max_new_tokens: int) -> int:
    """The context a cost model is measured at for runs of these prompts (token counts): the mean
    prompt plus half the new tokens, to the nearest 64 (at least 64), so one model serves nearby runs."""
    return max(64, int(round((statistics.mean(prompt_lengths) + max_new_tokens / 2) / 64.0)) * 64)


def cost_key(target, context: int) -> str:
    """What a cost model depends on: machine, model, dtype, torch and threads, context, static step,
    and whether the model's greedy argmax is screened (runtime.argmax_head)."""
    from ..runtime.argmax_head import screen_of
    from ..runtime.state import options_of
    from ..runtime.static_decode import enabled

    static = enabled(options_of(getattr(target, "model", None)))  # the options the target runs with
    return "|".join([machine_id(), str(target.name), str(target.dtype).removeprefix("torch."), torch.__version__,
                     f"threads={torch.get_num_threads()}", f"context={context}", f"static={int(static)}",
                     f"screened argmax={int(screen_of(target.model) is not None)}"])


# -- measuring ----------------------------------------------------------------------------------


def _why_not_static(model) -> str | None:
    from ..runtime.static_decode import enabled, supports

    if not enabled():
        return "the static decode step is off (SPECVIZ_STATIC_DECODE=0): these are the transformers forward's costs"
    why = supports(model)
    if why is None:
        return None
    return (f"the static decode step cannot serve this model ({why}); the engine uses the transformers forward, "
            "and these costs are that forward's")


@torch.inference_mode()
def measure(target, *, context: int = 256, max_n: int = MAX_N, repeats: int = REPEATS, budget_s: float = 30.0,
            sampling=None, clock: Callable[[], float] = time.perf_counter, drafts: Sequence[Any] = (),
            levels: Collection[str] | None = None) -> CostModel:
    """Measure the cost model of ``target`` (a LoadedModel) and of each draft in ``drafts``
    (LoadedModels) on this machine; the passes are interleaved within each repeat and repeats
    stop early once ``budget_s`` is spent (at least two always run, the first doubling as the
    warm-up). ``levels``: the drafts (by name) whose draft-tree levels to measure (None: all)."""
    from ..core.algorithm import logits_to_probs
    from ..core.certified import bounded_rows, bounded_sampling, plain_temperature, top_k_probs
    from ..core.engine import greedy_argmax
    from ..core.logits import materialize
    from ..core.records import Sampling
    from ..runtime.argmax_head import HeadLogits
    from ..runtime.kv import forward_logits, rollback, score_tree, session_cache
    from ..runtime.sampled_head import SAMPLE

    sampling = sampling or Sampling()
    model, device = target.model, target.device
    start = clock()
    text = getattr(target, "tokenizer", None)
    prompt = _tokens(model, context, 0, text).to(device)  # [context]
    new = _tokens(model, max_n, 1, text).to(device)  # [max_n]
    cache = session_cache(model)
    forward_logits(model, prompt[:-1], cache, 1)  # once untimed: a first call may trace the static step
    rollback(cache, 0)
    t0 = clock()
    forward_logits(model, prompt[:-1], cache, 1)  # the prefill, as Session._prefill runs it
    prefill = clock() - t0
    rollback(cache, context - 1)
    forward_logits(model, prompt[-1:], cache, 1)
    rollback(cache, context)
    tree_ns = [n for n in TREE_NS if n <= max_n]
    chain_par = torch.arange(-1, max_n - 1, dtype=torch.long, device=device)  # [max_n] a chain's parents

    greedy = sampling.greedy
    lazy = True if greedy else SAMPLE if bounded_sampling(sampling) else False  # as the engine's lean chain steps

    def decide(logits) -> None:  # as a step with lean records (a benchmark) ends its pass
        # greedy: the argmax alone, a screened head's without its logits (runtime.argmax_head); sampled: each
        # row's bounds (core.certified; the engine makes them up to the first rejection), else every row's p
        if greedy:
            greedy_argmax(logits)
        elif isinstance(logits, HeadLogits) and plain_temperature(sampling):
            row = bounded_rows(logits, sampling.temperature, lambda: logits_to_probs(materialize(logits), sampling))
            for r in range(logits.shape[0]):
                row(r)
        elif not isinstance(logits, HeadLogits) or top_k_probs(logits, sampling) is None:  # (a top-k p: a few logits a row)
            logits_to_probs(materialize(logits), sampling)

    def chain_pass(n: int) -> None:
        decide(forward_logits(model, new[:n], cache, n, lazy=lazy))  # [n, V]
        rollback(cache, context)

    def tree_pass(n: int) -> None:
        decide(score_tree(model, cache, new[:1], new[1:n], chain_par[: n - 1], lazy=greedy))  # [n, V]
        rollback(cache, context)

    # No warm-up round: each point is the median of the rounds after the first (at least two run),
    # so a first call's extra cost (a width's first pass) never survives into it.
    chain, tree = _interleaved([(chain_pass, range(1, max_n + 1)), (tree_pass, tree_ns)], repeats, clock,
                               stop=lambda: clock() - start > budget_s * 0.6, min_rounds=2)
    raw = {n: _typical(v) for n, v in chain.items()}
    target_s = monotone(raw)
    overhead = _step_overhead(target, context, lambda: chain_pass(1))
    model_cost = CostModel(
        key=cost_key(target, context), machine=machine_id(), target=str(target.name),
        dtype=str(target.dtype).removeprefix("torch."), torch=torch.__version__, threads=torch.get_num_threads(),
        context=context, static_decode=_why_not_static(model), target_s=target_s,
        tree_s=monotone({n: _typical(v) for n, v in tree.items()}), step_overhead_s=overhead, prefill_s=prefill,
        lookup_s=_lookups(context, clock), target_raw_s=raw, load=load_average(), cores=os.cpu_count(),
    )
    for d in drafts:  # each against the target's one-token pass, round by round (measure_draft)
        model_cost = with_draft(model_cost, measure_draft(d, context=context, clock=clock, repeats=max(repeats, DRAFT_REPEATS),
                                                          levels=levels is None or str(d.name) in levels,
                                                          reference=lambda: chain_pass(1), reference_s=target_s[1]))
    return replace(model_cost, measured_s=clock() - start)


def _step_overhead(target, context: int, one_pass: Callable[[], None]) -> float:
    """Seconds per target-only engine step beyond its pass: a lean step's own time (the engine's
    clock: forward, argmax, commit, records) less ``one_pass`` (the forward and the argmax, as t(1)
    is measured) timed right after each step on the same real clock. The step's ``other_ms`` alone
    holds a screened head's argmax too, which t(1) already counts: taken as the overhead it priced
    every step about a head too high (gemma-3-270m, Zen 4: 7.4 ms against 0.3)."""
    from ..core.engine import SpeculativeDecoder

    steps = 8
    ids = _tokens(target.model, context, 2, getattr(target, "tokenizer", None)).tolist()
    session = SpeculativeDecoder(target, None).start(ids, max_new_tokens=steps + 1, records="lean")
    passes = []
    while not session.done:
        session.step()
        t0 = time.perf_counter()
        one_pass()
        passes.append(time.perf_counter() - t0)
    step_s = _typical([(s.draft_ms + s.verify_ms + s.other_ms) / 1e3 for s in session.steps[1:]])
    return max(0.0, step_s - _typical(passes[1:]))


@torch.inference_mode()
def one_token_pass(target, context: int) -> Callable[[], None]:
    """The target's one-token pass after ``context`` tokens, as a callable (a draft's reference)."""
    from ..runtime.kv import forward_logits, rollback, session_cache

    model = target.model
    cache = session_cache(model)
    text = getattr(target, "tokenizer", None)
    forward_logits(model, _tokens(model, context, 0, text).to(target.device), cache, 1)  # [context] prefilled
    new = _tokens(model, 1, 1, text).to(target.device)  # [1]

    @torch.inference_mode()
    def run() -> None:
        forward_logits(model, new, cache, 1)
        rollback(cache, context)

    run()
    return run


@torch.inference_mode()
def measure_draft(draft, *, context: int = 256, repeats: int = REPEATS, clock: Callable[[], float] = time.perf_counter,
                  levels: bool = True, reference: Callable[[], None] | None = None,
                  reference_s: float | None = None) -> DraftCost:
    """A draft model's one-token step and catch-up feeds on its session cache, its tree levels
    of m nodes on a second session cache (as ``draft-tree`` grows them; ``levels=False``: not measured,
    ``level_s`` left empty) and its prefill.

    ``reference`` (the target's one-token pass) and ``reference_s`` (its cost, t(1)): the draft
    and the target alternate as in a step (:func:`_alternating`), and every cost is its typical
    ratio to the round's warm reference times ``reference_s``. Before, the feeds ran back to back
    (warm) and the reference after the draft (cold), so the draft's ratio read low on both sides,
    and nothing priced the target's pass after a draft: the advisor erred high, most at small k
    (issue 51: the int8 draft at k = 2, +17%). What a forecast uses is that ratio (c = draft / t(1)), and
    a host that drifts by tens of percent over seconds moves both sides of it alike (a 2-core
    Xeon: the int8 draft's step read 38 ms in one cost model and 26-30 ms in the next minutes,
    and the draft's forecast erred by 26%)."""
    from ..runtime.kv import forward_logits, rollback, session_cache, tree_forward_logits

    model, device = draft.model, draft.device
    prompt = _tokens(model, context, 0).to(device)  # [context]
    new = _tokens(model, 4, 1).to(device)  # [4]
    cache = session_cache(model)
    forward_logits(model, prompt, cache, 1)  # once untimed: a first call may trace the static step
    rollback(cache, 0)
    t0 = clock()
    forward_logits(model, prompt, cache, 1)
    prefill = clock() - t0
    rollback(cache, context)
    tree_cache = session_cache(model) if levels else None  # as draft-tree grows its levels: the static step where there is one
    if levels:
        forward_logits(model, prompt, tree_cache, 1)
        rollback(tree_cache, context)

    def feed(n: int) -> None:
        forward_logits(model, new[:n], cache, 1)
        rollback(cache, context)

    def level(m: int) -> None:
        pos = torch.full((m,), context, dtype=torch.long, device=device)  # [m] siblings at one depth
        tree_forward_logits(model, tree_cache, new[:m], pos, torch.eye(m, dtype=torch.bool, device=device), pos)
        rollback(tree_cache, context)

    for n in (3, 2, 1):
        feed(n)
    for m in LEVEL_MS if levels else ():
        level(m)
    if reference is None or not reference_s:
        feeds, level_times = _interleaved([(feed, (1, 2, 3)), (level, LEVEL_MS if levels else ())], repeats, clock)
        feed_s = {n: _typical(v) for n, v in feeds.items()}
        return DraftCost(str(draft.name), feed_s[1], feed_s, {m: _typical(v) for m, v in level_times.items()}, prefill)
    t = _alternating(feed, level if levels else None, reference, repeats, clock)

    def cost(xs: list[float]) -> float:  # each round's time over the same round's warm target pass, times t(1)
        return _typical([x / max(r, 1e-12) for x, r in zip(xs, t["target"])]) * reference_s

    switch = cost([after - warm for after, warm in zip(t["target after draft"], t["target"])])
    return DraftCost(str(draft.name), cost(t["step"]), {n: cost(t[f"feed {n}"]) for n in (1, 2, 3)},
                     {m: cost(t[f"level {m}"]) for m in (LEVEL_MS if levels else ())}, prefill, max(0.0, switch))


def _alternating(feed: Callable[[int], None], level: Callable[[int], None] | None, reference: Callable[[], None],
                 repeats: int, clock: Callable[[], float]) -> dict[str, list[float]]:
    """Rounds that run the draft and the target in the orders a step does, each pass timed in the
    order it runs (what precedes a pass decides which weights the CPU's caches still hold):
    a target pass after a target pass ("target", the warm t(1) the rest is scaled by); each feed
    of n tokens after a target pass ("feed n"); a one-token step after a feed ("step"); the target
    after that step ("target after draft"); tree levels one after another ("level m").
    -> {what: [seconds per round]}."""
    out: dict[str, list[float]] = {}

    def timed(what: str, run: Callable[[], None]) -> None:
        t0 = clock()
        run()
        out.setdefault(what, []).append(clock() - t0)

    for _ in range(max(2, repeats)):
        for n in (1, 2, 3):
            reference()
            timed(f"feed {n}", lambda n=n: feed(n))
        timed("step", lambda: feed(1))
        timed("target after draft", reference)
        timed("target", reference)
        for m in LEVEL_MS if level is not None else ():
            timed(f"level {m}", lambda m=m: level(m))
    return out


def with_draft(model: CostModel, draft: DraftCost) -> CostModel:
    return replace(model, drafts={**model.drafts, draft.name: draft})


# -- the cache ----------------------------------------------------------------------------------


def cache_path(cache_dir: str | Path, key: str) -> Path:
    return Path(cache_dir) / "advisor" / f"costs-{hashlib.sha1(key.encode()).hexdigest()[:16]}.json"


def load_or_measure(target, cache_dir: str | Path | None, *, context: int = 256, drafts: Sequence[Any] = (),
                    refresh: bool = False, levels: Collection[str] | None = None, **options: Any) -> tuple[CostModel, bool]:
    """(the cost model, whether it came from the cache): read from ``cache_dir`` when a model
    with this key and every draft is there (with its draft-tree levels when ``levels`` names it;
    None: every draft's), else measure what is missing and write it back."""
    key = cost_key(target, context)
    path = cache_path(cache_dir, key) if cache_dir is not None else None
    cached: CostModel | None = None
    if path is not None and path.is_file() and not refresh:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            cached = CostModel.from_dict(data) if data.get("key") == key and data.get("schema") == SCHEMA else None
        except (ValueError, KeyError, TypeError):
            cached = None  # a damaged cache file: measure again
    def wants_levels(d) -> bool:
        return levels is None or str(d.name) in levels

    missing = [d for d in drafts if cached is None or str(d.name) not in cached.drafts
               or (wants_levels(d) and not cached.drafts[str(d.name)].level_s)]
    if cached is not None and not missing:
        return cached, True
    if cached is None:
        cost = measure(target, context=context, drafts=drafts, levels=levels, **options)
    else:
        cost = cached
        clock = options.get("clock", time.perf_counter)
        reference = one_token_pass(target, context)
        for d in missing:
            cost = with_draft(cost, measure_draft(d, context=context, clock=clock,
                                                  repeats=max(options.get("repeats", REPEATS), DRAFT_REPEATS),
                                                  levels=wants_levels(d), reference=reference, reference_s=cost.t(1)))
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(cost.to_dict(), indent=1), encoding="utf-8")
    return cost, False


def latest_on_this_machine(cache_dir: str | Path | None, target: str | None = None) -> CostModel | None:
    """The most recently written cost model under ``cache_dir`` measured on this machine (of
    ``target`` when given, else of any target), or None: what the Learn tab shows as "this
    machine's" verify curve."""
    if cache_dir is None:
        return None
    here = machine_id()  # as every kernel choice keys this machine: the CPU, torch's ISA level, any cap
    files = sorted(Path(cache_dir, "advisor").glob("costs-*.json"), key=lambda f: f.stat().st_mtime, reverse=True)
    for path in files:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if data.get("schema") == SCHEMA and data.get("machine") == here and target in (None, data.get("target")):
                return CostModel.from_dict(data)
        except (OSError, ValueError, KeyError, TypeError):
            continue  # a damaged or foreign file: the next one
    return None
