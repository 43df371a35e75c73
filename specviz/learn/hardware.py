"""The Learn tab's part 5: why the best k on this CPU is not the best k on a GPU.

The same drafts (acceptance ``a``, draft cost ``c`` target steps per token) on two verify-cost
curves ``v(n)``, the cost of one target pass over n = k + 1 positions in target steps:

- **this CPU**: the cost model ``specviz advise`` measured on this machine when one is cached
  (``analysis.costmodel.latest_on_this_machine``; v(n) = (t(n) + o) / (t(1) + o) with o the engine's
  bookkeeping, the advisor's own speedup formula in theory's terms), else :data:`DOCUMENTED_CPU`,
  the curve docs/advisor.md records for gemma-3-270m on an AMD EPYC (Zen 5);
- **a GPU** (:data:`GPU_LIKE`): an illustration, not a measurement: v(n) = 1 for every n up to 17,
  the idealisation of Leviathan et al. (2023), where a decode step is bound by reading the weights
  and a few more positions ride along for free.

Speedup against k on each is ``theory.expected_speedup(a, k, c, v(k + 1))``: the calculator's
formula (i.i.d. acceptance), with v taken from the curve at k + 1 instead of one number. The
best k is where the next draft's expected gain, a^(k+1), stops paying for the extra c and the
extra v; a rising v(n) stops it early.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ..analysis import theory
from ..analysis.costmodel import CostModel, interpolate, latest_on_this_machine
from ..core.bounds import LEARN_CURVE_MAX_K

__all__ = ["VerifyCurve", "KCurve", "HardwareLesson", "DOCUMENTED_CPU", "GPU_LIKE", "machine_curve", "cpu_curve",
           "speedup_vs_k", "hardware_lesson", "K_MAX", "measured_curve", "default_point", "START_POINTS",
           "fitted_curve"]

K_MAX = LEARN_CURVE_MAX_K  # k = 1..16: passes of up to 17 positions, the cost model's range


@dataclass(frozen=True)
class VerifyCurve:
    """v(n): one target pass over n new positions, in target steps (v(1) = 1)."""

    name: str  # the legend's words
    points: Mapping[int, float]  # n -> v(n); linear between, and beyond the last two
    source: str  # where the numbers come from, one sentence
    measured: bool  # measured on this machine (else documented or illustrative)

    def v(self, n: int) -> float:
        return interpolate(dict(self.points), n)


DOCUMENTED_CPU = VerifyCurve(
    "a CPU (documented)", {1: 1.0, 5: 316 / 202, 17: 354 / 202},
    "a CPU, as recorded in docs/advisor.md: specviz advise's t(n) for gemma-3-270m (fp32, 1 thread) on an AMD EPYC "
    "(Zen 5), t(1) = 202 ms, t(5) = 316 ms, t(17) = 354 ms, linear between (run specviz advise to see this "
    "machine's own curve here)", False)

GPU_LIKE = VerifyCurve(
    "a GPU (illustration)", {1: 1.0, 17: 1.0},
    "an illustration, not a measurement: v(n) = 1 up to 17 positions, the idealisation of Leviathan et al. (2023) "
    "for an accelerator with compute to spare, where a decode step is bound by reading the weights once", False)


def machine_curve(cost: CostModel) -> VerifyCurve:
    """This machine's v(n) from a measured cost model: (t(n) + o) / (t(1) + o), n = 1..17."""
    base = cost.base_step_s
    points = {n: (cost.t(n) + cost.step_overhead_s) / base for n in range(1, K_MAX + 2)}
    return VerifyCurve(
        "this machine (measured)", points,
        f"this machine, measured by specviz advise: {cost.machine}, {cost.target} ({cost.dtype}, {cost.threads} "
        f"threads, a {cost.context}-token context), t(1) = {1e3 * cost.t(1):.0f} ms", True)


def measured_curve(cache_dir: Any = None, target: str | None = None) -> VerifyCurve | None:
    """This machine's measured v(n) (the cost model ``specviz advise`` cached) when there is one, and
    for ``target`` when given (a cost model of another target says nothing of this one's passes);
    None otherwise. The playground's what-if, its card and this part read v(n) from here, so on one
    machine they tell one story (issue 52)."""
    cost = latest_on_this_machine(cache_dir, target)  # the latest of this target: another's, written since, says nothing
    return machine_curve(cost) if cost is not None else None


def cpu_curve(cache_dir: Any = None) -> VerifyCurve:
    """This machine's measured curve when a cost model is cached under ``cache_dir``, else the documented CPU's."""
    cost = latest_on_this_machine(cache_dir)
    return machine_curve(cost) if cost is not None else DOCUMENTED_CPU


@dataclass(frozen=True)
class KCurve:
    """Speedup against k on one verify curve."""

    curve: VerifyCurve
    ks: tuple[int, ...]
    tokens: tuple[float, ...]  # E[tokens per step] (the same on every curve)
    speedup: tuple[float, ...]
    best_k: int
    best_speedup: float


def speedup_vs_k(a: float, c: float, curve: VerifyCurve, k_max: int = K_MAX, f: float = 1.0) -> KCurve:
    """theory.expected_speedup(a, k, c, v(k + 1)) for k = 1..k_max; the best k (the smallest on ties).
    ``f`` < 1: only that share of the steps drafts (an n-gram finds nothing on the others), as the
    playground's what-if counts it (theory.expected_speedup_drafting), so a run's a, c and f give
    the what-if's curve here."""
    theory.check_calculator_inputs(a, c, 1.0)
    if not 0.0 < f <= 1.0:
        raise ValueError(f"f (the share of steps that draft) must be in (0, 1], got {f!r}")
    ks = tuple(range(1, int(k_max) + 1))
    tokens = tuple(theory.expected_tokens_per_step(a, k) for k in ks)
    speedup = tuple(theory.expected_speedup(a, k, c, curve.v(k + 1)) if f >= 1.0 else
                    theory.expected_speedup_drafting(tokens[k - 1], f, k, c, curve.v(k + 1)) for k in ks)
    best = max(ks, key=lambda k: (speedup[k - 1], -k))
    return KCurve(curve, ks, tokens, speedup, best, speedup[best - 1])


@dataclass(frozen=True)
class HardwareLesson:
    a: float
    c: float
    cpu: KCurve
    gpu: KCurve
    f: float = 1.0  # the share of steps that draft

    @property
    def sentence(self) -> str:
        """What the two curves say, in words."""
        cpu, gpu = self.cpu, self.gpu
        here, there = cpu.curve.name.split(" (")[0], gpu.curve.name.split(" (")[0]
        start = f"With a = {self.a:.2f} and c = {self.c:.2f}" + (f", drafting on {self.f:.0%} of steps," if self.f < 1 else "")
        gpu_part = f"on {there} the best k is {gpu.best_k} ({gpu.best_speedup:.2f}x)"
        if cpu.best_speedup <= 1.0:
            return (f"{start} no k pays on {here}: its best, k = {cpu.best_k}, predicts {cpu.best_speedup:.2f}x, "
                    f"slower than the target alone, since a pass over only 2 positions already costs "
                    f"v(2) = {cpu.curve.v(2):.2f} target steps; {gpu_part}.")
        if cpu.best_k == gpu.best_k:
            return (f"{start} both curves peak at k = {cpu.best_k} ({cpu.best_speedup:.2f}x against "
                    f"{gpu.best_speedup:.2f}x): at that k the next draft's own cost c, not the verify pass's growth, "
                    "stops k on both, though the verify pass still lowers every speedup here. Try a lower a or a "
                    "higher c, where the first few positions' cost decides.")
        if cpu.best_k < gpu.best_k:
            n = cpu.best_k + 2
            return (f"{start} the best k on {here} is {cpu.best_k} ({cpu.best_speedup:.2f}x), {gpu_part}: the same "
                    f"drafts, a different verify cost; one more draft would need a pass over {n} positions, which "
                    f"costs v({n}) = {cpu.curve.v(n):.2f} target steps on {here}, against {gpu.curve.v(n):.2f} on "
                    f"{there}.")
        return (f"{start} the best k on {here} is {cpu.best_k} ({cpu.best_speedup:.2f}x), {gpu_part}: {here}'s "
                f"verify cost rises early (v(2) = {cpu.curve.v(2):.2f}) and then flattens "
                f"(v({cpu.best_k + 1}) = {cpu.curve.v(cpu.best_k + 1):.2f}), so once the pass is paid for, more drafts "
                "ride along almost free.")


def hardware_lesson(a: float, c: float, cache_dir: Any = None, k_max: int = K_MAX, f: float = 1.0,
                    curve: VerifyCurve | None = None) -> HardwareLesson:
    """The lesson's numbers: speedup against k for the same a, c (and f) on this CPU's curve (``curve``
    when given: a playground run's) and on the GPU-like one."""
    here = curve or cpu_curve(cache_dir)
    return HardwareLesson(a, c, speedup_vs_k(a, c, here, k_max, f), speedup_vs_k(a, c, GPU_LIKE, k_max, f), f)


def fitted_curve(v: float) -> VerifyCurve:
    """A run's own v at every width (no measured v(n) for its target): the what-if's flat curve, so
    that Learn part 5 given that run draws what the what-if draws."""
    return VerifyCurve("this run (fitted)", {1: v, 17: v}, f"this run's own v = {v:.2f} at every k, fitted from its "
                       "target-only run (specviz advise measures how v grows with k on this machine)", False)


# Part 5's opening a and c, in order of preference: the first at which the two curves' best k differ on
# this machine is the one the page opens on, so the default text never says "both curves peak at k = 4"
# under a title that says they differ (issue 52: a measured curve made the first pair agree).
START_POINTS: tuple[tuple[float, float], ...] = ((0.7, 0.1), (0.6, 0.1), (0.7, 0.2), (0.5, 0.05), (0.8, 0.2),
                                                  (0.6, 0.05), (0.5, 0.1), (0.8, 0.1))


def default_point(cache_dir: Any = None, points: tuple[tuple[float, float], ...] = START_POINTS) -> tuple[float, float]:
    """(a, c) to open part 5 on: the first of ``points`` where this machine's curve (measured when
    cached, else the documented CPU's) and the GPU-like one have different best k; the first point
    when none does (the sentence then says the curves agree, and why)."""
    curve = cpu_curve(cache_dir)
    for a, c in points:
        if speedup_vs_k(a, c, curve).best_k != speedup_vs_k(a, c, GPU_LIKE).best_k:
            return a, c
    return points[0]

