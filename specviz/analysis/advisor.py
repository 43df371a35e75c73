"""Will it pay here? Acceptance from a short calibration + this machine's costs -> every
configuration's predicted speedup, with an interval, ranked.

Acceptance (counted from the calibration's step records, each share with a Wilson interval):

- chains, per position i: ``g_i`` = P(the proposer drafts token i | it drafted and the target kept
  1..i-1) (an n-gram runs out of continuation; 1 for a draft model) and ``a_i`` = P(the target
  keeps draft i | drafted, 1..i-1 kept). Then ``r_i = g_i a_i`` is the conditional rate of
  theory's per-position formula, tau(k) = 1 + sum_{i<=k} prod_{j<=i} r_j
  (``theory.expected_tokens_per_step_per_position``), and the drafted tokens per step
  k'(k) = sum_{i<=k} P(at least i drafted);
- trees, per depth d and sibling rank r: ``accept[d][r]`` = the share of kept nodes at depth d
  (the root: depth 0) whose rank-(r+1) child the target kept; tau(tree) =
  ``treeshape.expected_tokens``.

Speed: a step costs ``draft_s + E[t(j + 1)] + overhead`` seconds, j the drafts the step actually
made (the engine verifies only those: an n-gram may find fewer than k, or none; a tree: its
realised nodes, ``t_tree``), and a target-only step ``t(1) + overhead``
(:mod:`specviz.analysis.costmodel`); a draft model's ``draft_s`` holds its forwards as a step
meets them (the first after the target's pass, the rest after its own) and what its forwards
cost the target's pass that follows (``DraftCost.switch_s``: the caches they evicted), so

    speedup = tau (t(1) + overhead) / (draft_s + E[t(j + 1)] + overhead)

the brief's tau t(1) / (k' c t(1) + t(k+1) + overhead) with the engine's bookkeeping on both
sides and the pass priced at what was drafted. The interval takes every rate at its Wilson bounds at once (tau is increasing in each
rate), so it is conservative. A configuration "does not pay" when even its best k predicts a
speedup below 1.

The counting itself (rates, their intervals, a replay's tokens per step) is
:mod:`specviz.analysis.calibration`'s; its names are re-exported here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

from . import theory
from .calibration import (  # re-exported (__all__): the advisor's input, counted there
    ChainCalibration,
    RankCalibration,
    Rate,
    Replayed,
    chain_calibration,
    rank_calibration_from_chain,
    rank_calibration_from_tree,
    replayed,
    replayed_tau,
    wilson,
)
from .costmodel import CostModel
from .treeshape import (
    TreeShape,
    best_per_budget,
    best_shape,
    encode,
    expected_tokens,
    filled_at_least,
    node_reach,
    to_depth,
)

__all__ = [
    "Rate", "wilson", "ChainCalibration", "RankCalibration", "chain_calibration", "rank_calibration_from_tree",
    "rank_calibration_from_chain", "Forecast", "predict_chain", "predict_tree", "tree_step_seconds", "forecast_trees",
    "rank", "verdicts", "run_speedup", "BudgetPoint", "TreeBudget", "tree_budget", "replayed_tau", "Replayed",
    "replayed", "mean_pass_s", "with_replay", "chain_advance", "run_steps_s", "rates_from_reach",
]

def rates_from_reach(at_least: Sequence[float]) -> list[float]:
    """P(j >= d), d = 1..D -> the conditional rates r_d = P(j >= d) / P(j >= d - 1) (0 past a zero)."""
    out, before = [], 1.0
    for p in at_least:
        out.append(p / before if before > 0 else 0.0)
        before = p
    return out


def mean_pass_s(pass_s: Callable[[int], float], at_least: Sequence[float]) -> float:
    """The verify pass's expected seconds when a step drafts j tokens (or nodes) with
    P(j >= i) = at_least[i - 1]: the engine scores what was drafted (an n-gram may find fewer
    than k, or none: a plain step), so E[pass(j + 1)] = pass(1) + sum_i P(j >= i) (pass(i + 1) - pass(i))."""
    return pass_s(1) + sum(p * (pass_s(i + 2) - pass_s(i + 1)) for i, p in enumerate(at_least))


# -- forecasts ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Forecast:
    """One configuration's prediction on this machine."""

    proposer: str  # the spec as the user gave it
    spec: str  # the spec that runs it (a tree: its shape spelled out)
    k: int
    tau: float
    tau_lo: float
    tau_hi: float
    drafted_per_step: float  # k' (a tree: its nodes)
    draft_s: float  # drafting, seconds per step
    step_s: float  # a whole step, seconds
    speedup: float
    speedup_lo: float
    speedup_hi: float
    shape: str | None = None  # a tree's BFS child counts
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        schedule = self.extra.get("schedule")  # a chain run under confidence:T
        return f"{self.spec} [{schedule}] k={self.k}" if schedule else f"{self.spec} k={self.k}"

    @property
    def pays(self) -> bool:
        return self.speedup > 1.0

    def to_dict(self) -> dict[str, Any]:
        return {"proposer": self.proposer, "spec": self.spec, "k": self.k, "tau": self.tau, "tau_lo": self.tau_lo,
                "tau_hi": self.tau_hi, "drafted_per_step": self.drafted_per_step, "draft_ms": 1e3 * self.draft_s,
                "step_ms": 1e3 * self.step_s, "speedup": self.speedup, "speedup_lo": self.speedup_lo,
                "speedup_hi": self.speedup_hi, "shape": self.shape, "note": self.note, **self.extra}


def _chain_rates(cal: ChainCalibration, k: int, which: str) -> list[float]:
    """r_i = g_i a_i for i = 1..k: P(token i is drafted and kept | 1..i-1 kept)."""
    return [getattr(g, which) * getattr(a, which) for g, a in zip(cal.carry_on[:k], cal.accept[:k])]


def _chain_tau(cal: ChainCalibration, k: int, which: str) -> float:
    return theory.expected_tokens_per_step_per_position(_chain_rates(cal, k, which))


def chain_advance(rates: Sequence[float], k: int) -> list[float]:
    """P(a chain step with k drafts commits m tokens), m = 1..k+1: j drafts kept in a row (the
    conditional rates r_1..r_k), then one correction or bonus token."""
    at_least = [1.0]  # P(j >= i), i = 0..k
    for r in rates[:k]:
        at_least.append(at_least[-1] * r)
    at_least.append(0.0)
    return [at_least[j] - at_least[j + 1] for j in range(k + 1)]


def run_steps_s(step_s: Sequence[float], rates: Sequence[float], new_tokens: int) -> float:
    """Expected seconds of a run's decode steps to new_tokens tokens, the engine drafting
    k' = min(k, tokens left - 1) (never past the end): T(R) = step(k') + sum_m P_k'(m) T(R - m),
    T(0) = 0, with step_s[j] a step that drafts j (j = 0..k; 0: a target-only step)."""
    k = len(step_s) - 1
    T = [0.0] * (new_tokens + 1)
    for left in range(1, new_tokens + 1):
        kk = min(k, left - 1)
        T[left] = step_s[kk] + sum(p * T[left - m] for m, p in enumerate(chain_advance(rates, kk), start=1))
    return T[new_tokens]


def _all_kept(cal: ChainCalibration, k: int) -> float:
    """P(a step of up to k drafts keeps every draft it made): all k, or all of a chain a confidence
    stop ended at j < k (steps that drafted exactly j and kept them: reached[j] - drafted[j])."""
    full = _chain_tau(cal, k, "p") - _chain_tau(cal, k - 1, "p")  # P(drafts 1..k drafted and kept)
    if not cal.steps:
        return full
    return full + sum(cal.reached[j] - cal.drafted[j] for j in range(1, min(k, cal.k))) / cal.steps


def _chain_step_s(cal: ChainCalibration, cost: CostModel, k: int, kind: str, draft: str | None) -> tuple[float, float]:
    """(drafting, the whole step) in seconds for a chain step of up to k drafts."""
    kprime = sum(cal.reach(i) for i in range(k))
    if kind == "ngram":
        draft_s = cost.lookup_s.get("ngram", 0.0)
    elif kind == "draft" and draft in cost.drafts:
        d = cost.drafts[draft]
        all_kept = _all_kept(cal, k)  # the next step feeds the last draft and the bonus
        # the first forward after the target's pass, the rest after the draft's own, and the target's pass slowed
        # by the draft before it (costmodel.DraftCost): at k = 1 or 2 that alternation is most of the draft's price
        draft_s = (1 - all_kept) * d.feed(1) + all_kept * d.feed(2) + max(0.0, kprime - 1) * d.step_s + d.switch_s
    else:
        per_token = (cal.draft_ms / 1e3 / cal.drafted_tokens) if cal.drafted_tokens else 0.0
        draft_s = kprime * per_token
    at_least = [cal.reach(i) for i in range(k)] if cal.steps else [1.0] * k
    return draft_s, draft_s + mean_pass_s(cost.t, at_least) + cost.step_overhead_s


def predict_chain(cal: ChainCalibration, cost: CostModel, k: int, kind: str, draft: str | None = None,
                  spec: str | None = None) -> Forecast:
    """A chain at k drafts per step. kind: "ngram" (the lookup's cost), "draft" (``draft``'s
    measured step and catch-up feeds) or anything else (the calibration's own draft ms per token)."""
    if not 1 <= k <= cal.k:
        raise ValueError(f"k must be from 1 to the calibrated {cal.k}, got {k}")
    tau = _chain_tau(cal, k, "p")
    kprime = sum(cal.reach(i) for i in range(k))
    draft_s, step = _chain_step_s(cal, cost, k, kind, draft)
    base = cost.base_step_s
    lo, hi = _chain_tau(cal, k, "lo"), _chain_tau(cal, k, "hi")
    note = "" if cal.drafted_tokens else "the calibration drafted nothing"
    # what a whole run needs (run_speedup): the rates, and a step's price at every k' <= k (the
    # engine drafts fewer than k when the run's end is nearer than k + 1 tokens)
    shorter = [base] + [_chain_step_s(cal, cost, j, kind, draft)[1] for j in range(1, k)] + [step]
    extra = {"continue_rates": _chain_rates(cal, k, "p"), "step_ms_by_k": [1e3 * x for x in shorter]}
    return Forecast(cal.proposer, spec or cal.proposer, k, tau, lo, hi, kprime, draft_s, step, tau * base / step,
                    lo * base / step, hi * base / step, note=note, extra=extra)


def tree_pass_s(cost: CostModel, shape: TreeShape, fill: Sequence[Sequence[float]] | None = None) -> float:
    """The tree pass's expected seconds: over the nodes a step drafts (``fill``: how often each of
    the shape's nodes is drafted, RankCalibration.fill; None: always all of them), as a chain's
    pass is over the tokens it drafts (mean_pass_s)."""
    return mean_pass_s(cost.t_tree, filled_at_least(shape, fill))


def tree_step_seconds(cost: CostModel, kind: str, draft: str | None = None, lookup_s: float | None = None,
                      fill: Sequence[Sequence[float]] | None = None):
    """shape -> predicted seconds per step: the draft's cost (ngram-tree: one trie; draft-tree: the
    root's feed and one level forward per depth that grows) + the tree pass over the nodes drafted
    (:func:`tree_pass_s`) + the bookkeeping; the empty shape is a target-only step."""

    def seconds(shape: TreeShape) -> float:
        if not shape.nodes:
            return cost.base_step_s
        if kind == "draft-tree" and draft in cost.drafts:
            d = cost.drafts[draft]
            draft_s = d.level(1) + sum(d.level(w) for w in shape.level_widths()) + d.switch_s
        else:
            draft_s = cost.lookup_s.get("ngram-tree", 0.0) if lookup_s is None else lookup_s
        return draft_s + tree_pass_s(cost, shape, fill) + cost.step_overhead_s

    return seconds


def predict_tree(cal: RankCalibration, cost: CostModel, shape: TreeShape, kind: str, spec: str,
                 draft: str | None = None, lookup_s: float | None = None) -> Forecast:
    """A static tree of this shape (its depth is the run's k)."""
    fill = cal.fill()
    seconds = tree_step_seconds(cost, kind, draft, lookup_s, fill)
    step = seconds(shape)
    filled = filled_at_least(shape, fill)  # P(at least i nodes drafted)
    draft_s = step - mean_pass_s(cost.t_tree, filled) - cost.step_overhead_s
    tau = expected_tokens(shape, cal.matrix("p"))
    lo, hi = expected_tokens(shape, cal.matrix("lo")), expected_tokens(shape, cal.matrix("hi"))
    base = cost.base_step_s
    # a whole run (run_speedup): the engine cuts the tree to depth k' = min(k, tokens left - 1);
    # at most one node per depth is on the kept path, so P(j >= d) sums the depth-d nodes' reach
    reach = node_reach(shape, cal.matrix("p"))
    at_least = [sum(r for r, d in zip(reach, shape.depths) if d == depth) for depth in range(1, shape.depth + 1)]
    by_k = [1e3 * seconds(to_depth(shape, d)) for d in range(shape.depth + 1)]
    return Forecast(cal.proposer, spec, max(1, shape.depth), tau, lo, hi, sum(filled), draft_s, step,  # E[nodes drafted]
                    tau * base / step, lo * base / step, hi * base / step, shape=encode(shape),
                    extra={"tree": shape.describe(), "continue_rates": rates_from_reach(at_least), "step_ms_by_k": by_k})


def forecast_trees(cal: RankCalibration, cost: CostModel, kind: str, spec_for, ks: Sequence[int], max_nodes: int = 16,
                   draft: str | None = None, lookup_s: float | None = None) -> tuple[list[Forecast], TreeShape]:
    """(the DP's best shape per depth bound k, as forecasts; the best shape overall, which may be
    the empty tree: no speculation). ``spec_for(shape_text)`` spells the spec that runs a shape."""
    seconds = tree_step_seconds(cost, kind, draft, lookup_s, cal.fill())
    accept = cal.matrix("p")
    out: dict[str, Forecast] = {}
    overall = None
    for k in sorted(set(ks)):
        choice, _ = best_shape(accept, seconds, max_nodes=max_nodes, max_depth=k)
        if overall is None or choice.tokens_per_s > overall.tokens_per_s + 1e-12:
            overall = choice
        if choice.shape.nodes and choice.text not in out:
            out[choice.text] = predict_tree(cal, cost, choice.shape, kind, spec_for(choice.text), draft, lookup_s)
    return list(out.values()), (overall.shape if overall is not None else TreeShape())


@dataclass(frozen=True)
class BudgetPoint:
    """The best static tree with a budget of ``nodes`` nodes (its shape may use fewer)."""

    nodes: int  # the budget
    shape: str  # BFS child counts ("0": no speculation)
    tau: float
    tau_lo: float
    tau_hi: float
    step_s: float
    speedup: float  # predicted, the decode loop (as the ranking)

    def to_dict(self) -> dict[str, Any]:
        return {"nodes": self.nodes, "shape": self.shape, "tau": self.tau, "tau_lo": self.tau_lo, "tau_hi": self.tau_hi,
                "step_ms": 1e3 * self.step_s, "speedup": self.speedup}


@dataclass(frozen=True)
class TreeBudget:
    """A tree proposer's tree-budget curve: per node budget, the predicted tokens per step (rising)
    and speedup (peaking); ``best`` is the budget the advisor's shape has."""

    proposer: str
    points: tuple[BudgetPoint, ...]  # budgets 0..max_nodes

    @property
    def best(self) -> BudgetPoint:
        return max(self.points, key=lambda p: (p.speedup, -p.nodes))

    def to_dict(self) -> dict[str, Any]:
        return {"proposer": self.proposer, "best_nodes": self.best.nodes, "points": [p.to_dict() for p in self.points]}


def tree_budget(cal: RankCalibration, cost: CostModel, kind: str, proposer: str, max_nodes: int = 16, max_depth: int = 8,
                draft: str | None = None, lookup_s: float | None = None) -> TreeBudget:
    """The tree-budget curve of a tree proposer (``treeshape.best_per_budget`` with this machine's
    step times): budget n -> the fastest DP tree of at most n nodes, its tau with the interval and
    its predicted speedup."""
    seconds = tree_step_seconds(cost, kind, draft, lookup_s, cal.fill())
    accept, lo, hi = cal.matrix("p"), cal.matrix("lo"), cal.matrix("hi")
    base = cost.base_step_s
    points = tuple(BudgetPoint(n, c.text, c.tau, expected_tokens(c.shape, lo), expected_tokens(c.shape, hi), c.step_s,
                               c.tau * base / c.step_s)
                   for n, c in enumerate(best_per_budget(accept, seconds, max_nodes, max_depth)))
    return TreeBudget(proposer, points)


def with_replay(f: Forecast, rep: Replayed | None, cost: CostModel) -> Forecast:
    """A tree forecast ``f`` with its shape's own replay: its tau (the per-rank model's kept as
    ``extra["tau_model"]``, the interval widened to hold it) and its pass priced at the trees the
    steps actually offered (an n-gram trie often has fewer continuations than the shape; the
    whole shape's price kept as ``extra["step_model_s"]``); None: unchanged."""
    if rep is None:
        return f
    tau = rep.tau
    lo, hi = min(f.tau_lo, tau), max(f.tau_hi, tau)
    step = f.step_s
    if rep.drafted:
        n = len(rep.drafted)
        at_least = [sum(d >= i for d in rep.drafted) / n for i in range(1, max(rep.drafted) + 1)]
        step = f.draft_s + mean_pass_s(cost.t_tree, at_least) + cost.step_overhead_s
    per = cost.base_step_s / step
    extra = {**f.extra, "tau_model": f.tau, "step_model_s": f.step_s}
    if rep.kept and "step_ms_by_k" in f.extra:  # the run's end: the replay's own path lengths, the cut steps priced alike
        depth = len(f.extra["step_ms_by_k"]) - 1
        extra["continue_rates"] = rates_from_reach([sum(j >= d for j in rep.kept) / len(rep.kept) for d in range(1, depth + 1)])
        extra["step_ms_by_k"] = [ms * (step / f.step_s if i else 1.0) for i, ms in enumerate(f.extra["step_ms_by_k"])]
    return replace(f, tau=tau, tau_lo=lo, tau_hi=hi, step_s=step, speedup=tau * per, speedup_lo=lo * per,
                   speedup_hi=hi * per, extra=extra)


def rank(forecasts: Sequence[Forecast]) -> list[Forecast]:
    """Best predicted speedup first: over whole runs where a forecast has it (``extra["run_speedup"]``:
    prefills included, a draft's too), else per decode step (ties: the lower bound, then fewer
    drafted tokens)."""
    return sorted(forecasts, key=lambda f: (-f.extra.get("run_speedup", f.speedup), -f.speedup_lo, f.drafted_per_step))


def verdicts(forecasts: Sequence[Forecast]) -> list[str]:
    """One sentence per proposer (its best configuration, or that it does not pay), then the overall answer."""
    by: dict[str, list[Forecast]] = {}
    for f in forecasts:
        by.setdefault(f.proposer, []).append(f)
    lines = []
    for name, fs in by.items():
        best = rank(fs)[0]
        band = f"{best.speedup_lo:.2f}-{best.speedup_hi:.2f}x"
        if best.note and not best.tau > 1.0:
            lines.append(f"{name} does not pay here: {best.note}, so it predicts no tokens beyond the target's own.")
        elif best.speedup < 1.0:
            lines.append(f"{name} does not pay on this machine: its best predicted speedup is {best.speedup:.2f}x "
                         f"({best.label}, interval {band}), below target-only decoding at every k.")
        else:
            lines.append(f"{name}: best {best.speedup:.2f}x at {best.label} (interval {band}, tau {best.tau:.2f}).")
    ranked = rank(forecasts)
    if not ranked or ranked[0].speedup < 1.0:
        lines.append("Does not pay: no configuration is predicted to beat target-only decoding here; decode with the target alone.")
    else:
        top = ranked[0]
        sure = "" if top.speedup_lo >= 1.0 else " (its interval reaches below 1x: the calibration is too short to be sure)"
        run = f", {top.extra['run_speedup']:.2f}x over whole runs (prefills included)" if "run_speedup" in top.extra else ""
        lines.append(f"Pick {top.label}: predicted {top.speedup:.2f}x per decode step{run}{sure}.")
    return lines


def run_speedup(f: Forecast, cost: CostModel, prompt_tokens: float, new_tokens: float, draft_prefill_s: float = 0.0) -> float:
    """The wall-clock speedup of whole runs (what a sweep measures): prefill included (the draft's
    too), against new_tokens target-only steps. The decode steps follow ``run_steps_s``
    (the steps near the end draft fewer, at their own price; a fractional mean run length is
    interpolated; a tree is cut to depth k' alike); without the rates, ceil(new_tokens / tau) whole steps."""
    pre = cost.prefill(int(prompt_tokens))
    base = pre + new_tokens * cost.base_step_s
    if "continue_rates" in f.extra and new_tokens >= 1:
        steps = [ms / 1e3 for ms in f.extra["step_ms_by_k"]]
        lo = math.floor(new_tokens)
        t_lo = run_steps_s(steps, f.extra["continue_rates"], lo)
        t_hi = run_steps_s(steps, f.extra["continue_rates"], lo + 1) if new_tokens > lo else t_lo
        decode = t_lo + (new_tokens - lo) * (t_hi - t_lo)
    else:
        decode = math.ceil(new_tokens / max(1.0, f.tau)) * f.step_s
    spec = pre + draft_prefill_s + decode
    return base / spec if spec > 0 else float("nan")
