"""``specviz tune``: the step that measures a model's kernel plan on this machine, once.

It times every kernel of :mod:`specviz.runtime.kernels` on the model's LM head and each projection
kind of its body at widths 1..9, and the head's certified screens (greedy argmax, sampled bounds),
and writes the plan file that :mod:`specviz.runtime.plan` reads when a model loads. The runtime
never imports this module: a load, a decoder and its steps cannot time anything (tests/test_cpu.py).
Called by ``specviz tune``, the app's start-up preparation and ``make bench``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from .runtime import argmax_head, cpu, int8_kernel, projections, sampled_head, state
from .runtime import plan as plans
from .runtime.body import projections_of
from .runtime.kernels import DEFAULT, TABLE, PlannedLinear, fusable, fused_of
from .runtime.plan import WIDTHS, KindPlan

log = logging.getLogger(__name__)

HEAD_REPEATS, BODY_REPEATS = 3, 5  # rounds per width (the min of them: a busy moment only adds time)
SCREEN_REPEATS = 5
FASTER = 0.9  # without a batch-invariant kernel, a later one replaces the one chosen only under 90% of its time


def time_kernels(weights: Sequence[torch.Tensor], rows: int, repeats: int,
                 clock: Callable[[], float] = time.perf_counter) -> dict[str, float]:
    """Seconds per pass of every kernel that runs here over ``weights`` (one kind's, read one after
    another as a forward reads them, each out of the cache when read again) at ``rows`` rows:
    the min of ``repeats`` rounds, the kernels interleaved (the order reversed every other round)."""
    dtype = weights[0].dtype
    x = torch.randn(rows, weights[0].shape[1], dtype=dtype)  # [rows, in]
    passes = {}
    for k in TABLE.values():
        copies = [k.prepare(w) if k.prepare else None for w in weights] if k.runs(dtype) else [None]
        if k.runs(dtype) and (k.copy is None or None not in copies):
            passes[k.name] = lambda k=k, copies=copies: [k.run(x, w, c, None, w.shape[0]) for w, c in zip(weights, copies)]
    return time_passes(passes, repeats, clock)


def time_passes(passes: dict[str, Callable[[], object]], repeats: int,
                clock: Callable[[], float] = time.perf_counter) -> dict[str, float]:
    """Seconds per call of each pass: one call to warm, then the min of ``repeats`` rounds, the
    passes interleaved (the order reversed every other round; kernels and the head screens alike)."""
    times: dict[str, list[float]] = {n: [] for n in passes}
    with torch.inference_mode():
        for p in passes.values():
            p()  # warm: oneDNN builds a primitive per shape
        for r in range(repeats):
            for name in (list(passes) if r % 2 == 0 else list(passes)[::-1]):
                t = clock()
                passes[name]()
                times[name].append(clock() - t)
    return {n: min(ts) for n, ts in times.items()}


def choose(seconds: dict[str, float], order: Sequence[str] = tuple(TABLE)) -> str:
    """The kernel a width runs. A batch-invariant kernel timed here runs every width, however the
    others time: a verify pass's rows are then the one-token step's, bit for bit, which is what
    "speculative greedy = target-only greedy" rests on (the others' times stay in the plan, for the
    report). Without one, each kernel in ``order`` replaces the one chosen so far only where it takes
    under :data:`FASTER` of every earlier one's time."""
    invariant = [n for n in order if n in seconds and TABLE[n].batch_invariant]
    if invariant:
        return invariant[0]
    chosen, best = None, float("inf")
    for name in order:
        t = seconds.get(name)
        if t is not None and (chosen is None or t < best * FASTER):
            chosen = name
        best = min(best, t) if t is not None else best
    return chosen or DEFAULT


def measure_kind(weights: Sequence[torch.Tensor], repeats: int, widths: Sequence[int] = WIDTHS) -> KindPlan:
    """One kind's plan, every kernel timed at every width."""
    ms = {r: {n: round(s * 1e3, 3) for n, s in time_kernels(weights, r, repeats).items()} for r in widths}
    return KindPlan({r: choose(m) for r, m in ms.items()}, ms)


def screen_kind(times: dict[int, dict[str, float]], kinds: Sequence[str]) -> KindPlan | None:
    """A screen's plan from {width: {"full": ms, kind: ms, ...}}: at each width the fastest of
    ``kinds`` where it takes under :data:`FASTER` of the full head's time ("full" elsewhere); None
    where none wins a width. Every screen's argmax is certified, so the choice moves only time: the
    int8 screen (a quarter of the bytes) wins the one-row steps of a memory-bound head, the bf16 one
    the wide verify passes, and a model keeps both where each wins somewhere."""
    def best(m: dict[str, float]) -> str:
        fastest = min((k for k in kinds if k in m), key=m.__getitem__, default="full")
        return fastest if fastest != "full" and m[fastest] < m["full"] * FASTER else "full"

    chosen = {w: best(m) for w, m in times.items()}
    return KindPlan(chosen, times) if any(k != "full" for k in chosen.values()) else None


def time_widths(head: Callable[[torch.Tensor], torch.Tensor], screen: argmax_head.Screen,
                widths=argmax_head.WIDTHS, repeats: int = SCREEN_REPEATS, fast: Callable[[torch.Tensor], object] | None = None) -> dict[int, tuple[float, float]]:
    """{rows: (full head ms, screened argmax ms)} on random rows with logits of order 20, the two
    interleaved (``fast``: what is timed against the full head instead of the screen's argmax)."""
    g, out = torch.Generator().manual_seed(0), {}
    for rows in widths:
        h = torch.randn(rows, screen.weight.shape[1], generator=g) * (20.0 / max(screen.norm_max, 1e-6))  # [rows, d]
        s = time_passes({"full": lambda: head(h), "fast": lambda: (fast or screen.argmax)(h)}, repeats)
        out[rows] = (s["full"] * 1e3, s["fast"] * 1e3)
    return out


def argmax_kind(model: torch.nn.Module) -> plans.KindPlan | None:
    """``specviz tune``'s "argmax" kind: each screen's argmax timed against the full head at
    ``argmax_head.WIDTHS`` (:func:`screen_kind` picks); None where no screen can run."""
    if argmax_head.setting(model) == "0" or not argmax_head.eligible(model) or int8_kernel.load() is not None:
        return None
    head = model.get_output_embeddings()
    times: dict[int, dict[str, float]] = {}
    for kind in argmax_head.KINDS:
        for rows, (full, fast) in time_widths(head, argmax_head.MAKERS[kind](head.weight)).items():
            times.setdefault(rows, {"full": round(full, 3)})[kind] = round(fast, 3)
    return screen_kind(times, argmax_head.KINDS)


def sampled_kind(model: torch.nn.Module) -> plans.KindPlan | None:
    """``specviz tune``'s "sampled" kind: the full head against the bf16 screen's values and bound
    plus one exponential over the row (what a bounded row costs before its few exact logits)."""
    if sampled_head.setting(model) == "0" or argmax_head.setting(model) == "0" or not argmax_head.eligible(model) or int8_kernel.load() is not None:
        return None
    head = model.get_output_embeddings()
    screen = argmax_head.build(head.weight)
    timed = time_widths(head, screen, fast=lambda h: sampled_head.bounded(screen, h))
    return screen_kind({w: {"full": round(a, 3), "bf16": round(b, 3)} for w, (a, b) in timed.items()}, ("bf16",))


def body_kinds(model: torch.nn.Module) -> dict[str, list[torch.Tensor]]:
    """Each projection kind of ``model``'s decoder layers as one weight per layer (q/k/v, gate/up
    fused), where the body could plan it (plain fp32 or bf16 Linears, large enough)."""
    layers = getattr(getattr(model, "model", None), "layers", None)
    if layers is None:
        return {}
    try:
        per_layer = [projections_of(layer) for layer in layers]
    except AttributeError:  # not a llama-like family
        return {}
    out = {}
    for j, kind in enumerate(("qkv", "o", "gate_up", "down")):
        groups = [layer[j] for layer in per_layer]
        fused = [fused_of(*g) for g in groups]
        weights = [f.weight.detach() if isinstance(f, PlannedLinear) else
                   torch.cat([m.weight.detach() for m in g]) if fusable(g) else None for f, g in zip(fused, groups)]
        if None not in weights and len({tuple(w.shape) for w in weights}) == 1 \
                and sum(w.numel() for w in weights) >= projections.MIN_BODY_ELEMENTS:
            out[kind] = weights
    return out


def tune(model: torch.nn.Module, cache_dir: str | Path | None = None, *, again: bool = False,
         progress: Callable[[str], None] | None = None) -> tuple[plans.Plan, bool]:
    """Measure ``model``'s plan here once and write its file (:func:`specviz.runtime.projections.load` read its key); with a
    plan file there already, read it instead unless ``again``. -> (the plan, whether measured).
    The fresh plan is given to the model (its decoder, if built already, keeps the old one)."""
    held = state.of(model)
    key = held.plan.key if held.plan is not None else plans.key_of(type(model).__name__, torch.float32)
    cache_dir = Path(cache_dir).expanduser() if cache_dir is not None else held.cache_dir
    found = plans.read(key, cache_dir) if cache_dir is not None and not again else None
    if found is not None:  # measured before: the model's load read it (a model loaded otherwise gets it now)
        if held.plan is None or held.plan.path != found.path:
            projections.apply(model, found, cache_dir)
        return found, False
    say = progress or (lambda s: None)
    if cpu.busy():  # two jobs on 2 cores double every kernel's time: the plan is written, and says the load
        log.warning("specviz: tuning on a busy machine (load %.1f): the timings are noisy", cpu.load_average() or 0.0)
    kinds: dict[str, plans.KindPlan] = {}
    head = projections.float_head(model)
    if head is not None:
        say(f"timing the LM head's kernels ({len(TABLE)} kernels, widths 1-{plans.WIDTHS[-1]})")
        kinds["head"] = measure_kind([head.weight.detach()], HEAD_REPEATS)
    for kind, weights in body_kinds(model).items():
        say(f"timing the {kind} projections' kernels")
        kinds[kind] = measure_kind(weights, BODY_REPEATS)
    projections.plan_head(model, plans.Plan(key, dict(kinds)))  # the screens are timed against the head as it will run
    for kind, measure in (("argmax", argmax_kind), ("sampled", sampled_kind)):
        found_kind = measure(model)
        if found_kind is not None:
            say(f"timed {kind}")
            kinds[kind] = found_kind
    plan = plans.Plan(key, kinds)
    if cache_dir is not None:
        plan = plans.Plan(key, kinds, plans.write(plan, cache_dir))
    if held.decoder is None:
        projections.apply(model, plan, cache_dir)
    else:
        log.info("specviz: %s's decoder was built before tuning: the new plan applies from its next load", key)
        held.plan = plan
    return plan, True
