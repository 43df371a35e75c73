"""The cost model anchored to the engine's own steps: what a target pass costs inside a run.

Why. :mod:`specviz.analysis.costmodel` times each pass alone, in rounds, rolled back after each;
a run steps back to back, on its own contexts and in the caches its previous step left. Term by
term against the sweeps of the four advisor checks on one Zen 4 with the current engine
(``benchmarks/results/advisor-check-zen4{n,q,t,v}-fp32*.json``, each cost over the same run's
target-only step, so a uniformly slow host cancels): tau was within 4% (median per proposer and
k), the int8 draft's own cost within 16% either way, but the one-token step (the baseline every
speedup divides) was priced 13-25% above target-only's steps in the sweep while the 9-wide
passes were priced from 4% below to 13% above (about 2% above at the median), so v(n) came out
too flat and the speedups too high, the more so the narrower the pass (issue 51: 8 of 10
predictions too high). The n-gram lookup was priced at a tenth of what a step's drafting takes.

The greedy advisor decodes its prompts once through the engine anyway (the replay's decode,
:func:`specviz.bench.advise.calibrate_by_replay`), so the passes a run makes are measured there:
per width n (drafts + 1), the median of the steps' verify + other time. :func:`anchored` rescales
the cost model to them: at each width the decode ran at least ``MIN_STEPS`` times, the ratio of
that median to the model's t(n) + o; between such widths the ratio is linear in n, outside them
the nearest one's. The shape across n stays the cost model's (every n is measured there), the
level is the run's. A draft's costs were timed as ratios to the target's one-token pass, and keep
them (scaled by the one-token step's ratio), and the prefills take the widest anchored width's
ratio, so a host that changes speed between the cost model and the decode moves every term alike
(a smoke run on a host at load 13 on 2 cores read the one-token step at 0.44 of its cost model's:
with the draft left as timed, every draft forecast fell 30% low). The n-gram lookup becomes the
decode's own median drafting time where the decode drafted with n-grams. Pure functions of numbers.
"""

from __future__ import annotations

import statistics
from dataclasses import replace
from typing import Any, Iterable, Mapping, Sequence

from .costmodel import CostModel, interpolate, monotone

__all__ = ["MIN_STEPS", "pass_samples", "draft_samples", "run_ratios", "anchored", "words"]

MIN_STEPS = 5  # a width anchors the model only where the decode ran at least this many steps of it


def pass_samples(runs: Iterable[Sequence[Any]]) -> dict[int, list[float]]:
    """width n -> seconds (verify + other: everything but drafting) of each chain step in ``runs``
    (step records per prompt) that scored n positions (k drafts + 1)."""
    out: dict[int, list[float]] = {}
    for steps in runs:
        for s in steps:
            if getattr(s, "tree", ()):
                continue  # a tree's pass is priced by t_tree, which keeps its own extra over t(n)
            out.setdefault(int(s.k) + 1, []).append((s.verify_ms + s.other_ms) / 1e3)
    return out


def draft_samples(runs: Iterable[Sequence[Any]]) -> list[float]:
    """Seconds spent drafting in each step of ``runs`` (an n-gram decode: one lookup a step)."""
    return [s.draft_ms / 1e3 for steps in runs for s in steps]


def run_ratios(cost: CostModel, samples: Mapping[int, Sequence[float]], min_steps: int = MIN_STEPS) -> dict[int, float]:
    """width -> (the run's median pass at that width) / (the model's t(n) + o), where the run has
    at least ``min_steps`` steps of that width."""
    out = {}
    for n, xs in samples.items():
        priced = cost.t(n) + cost.step_overhead_s
        if len(xs) >= min_steps and priced > 0:
            out[n] = statistics.median(xs) / priced
    return out


def _ratio_at(ratios: Mapping[int, float], n: int) -> float:
    """Linear between anchored widths, the nearest anchored width's ratio outside them."""
    lo, hi = min(ratios), max(ratios)
    return ratios[lo] if n <= lo else ratios[hi] if n >= hi else interpolate(dict(ratios), n)


def anchored(cost: CostModel, samples: Mapping[int, Sequence[float]], lookups: Sequence[float] = (),
             min_steps: int = MIN_STEPS) -> tuple[CostModel, dict[int, float]]:
    """(``cost`` with t(n) and the tree passes rescaled to the run's passes, the ratios used):
    t'(n) + o = r(n) (t(n) + o), and the n-gram lookup the median of ``lookups`` when there are
    at least ``min_steps`` of them. No width with enough steps: ``cost`` unchanged, no ratios."""
    ratios = run_ratios(cost, samples, min_steps)
    if not ratios:
        return cost, {}
    o = cost.step_overhead_s

    def scaled(points: Mapping[int, float]) -> dict[int, float]:
        return monotone({n: max(0.0, _ratio_at(ratios, n) * (s + o) - o) for n, s in points.items()})

    lookup = dict(cost.lookup_s)
    if len(lookups) >= min_steps:
        lookup["ngram"] = statistics.median(lookups)
    target = scaled(cost.target_s)
    # the one-token step's ratio as priced after pooling (on a noisy decode t'(1) may be pooled with
    # t'(2)), so a draft keeps its timed ratio to the step exactly; the prefill takes the widest one
    one, wide = (interpolate(target, 1) + o) / (cost.t(1) + o), ratios[max(ratios)]

    def times(points: Mapping[int, float]) -> dict[int, float]:
        return {n: one * x for n, x in points.items()}

    drafts = {name: replace(d, step_s=one * d.step_s, feed_s=times(d.feed_s), level_s=times(d.level_s),
                            prefill_s=wide * d.prefill_s, switch_s=one * d.switch_s) for name, d in cost.drafts.items()}
    return replace(cost, target_s=target, tree_s=scaled(cost.tree_s), lookup_s=lookup, drafts=drafts,
                   prefill_s=wide * cost.prefill_s), ratios


def words(ratios: Mapping[int, float], steps: int) -> str:
    """The note the advice carries: which widths anchored the cost model, by how much."""
    told = ", ".join(f"t({n}) x {r:.2f}" for n, r in sorted(ratios.items()))
    return (f"the target's passes are priced as the advisor's own decode ran them ({steps} steps, back to back, on "
            f"these prompts): {told} against the passes timed alone; between those widths the ratio is linear")
