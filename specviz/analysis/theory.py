"""The speculative-decoding theory: expected tokens per step, expected speedup, and a/c/v.

Everything here is a pure function of numbers (no torch, no models), so the engine's metrics,
the benchmark's predictions and the Learn tab's calculator all compute the same thing.

Notation (Leviathan, Kalman & Matias 2023; docs/architecture.md, "Metrics"):

- ``a``: acceptance rate, the probability that a drafted token is accepted. The closed forms
  below assume it is **i.i.d.**: the same at every draft position and independent of what came
  before. Real drafts are usually better at position 1 than at position 5; the per-position
  functions drop that assumption.
- ``a_i`` (conditional, per position): P(draft i accepted | drafts 1..i-1 accepted).
- ``r_i`` (per-position rate as specviz and vLLM report it, ``Stats.per_position``): steps whose
  draft i was accepted / steps with at least i drafts. Acceptance is a prefix, so
  ``r_i = a_1 a_2 ... a_i`` when every step drafts the same number of tokens.
- ``k``: tokens drafted per step; a step commits the accepted drafts plus one token from the
  target (the correction after a rejection, or the bonus token when all k were accepted).
- ``c``: the cost of drafting one token, in target decode steps.
- ``v``: the cost of one verify round (a (k+1)-token target pass plus bookkeeping), in target
  decode steps; 1 in the paper's idealisation.

Measured c and v (all per step, prefill excluded, so they describe the decode loop):

- ``T`` (target step cost): target-only ms per step = its (draft + verify + other) ms / steps.
- ``c`` = (draft ms / drafted tokens) / T.
- ``v`` = ((verify ms + other ms) / steps) / T.

With these, a run's time per step is ``(k' c + v) T`` exactly (k' = drafted / steps), so the
predicted speedup ``E(a, k) / (k c + v)`` differs from the measured one only through the
acceptance model, drafts shorter than k, and prefill.
"""

from __future__ import annotations

import math
from typing import Sequence

from ..core.bounds import LEARN_CURVE_MAX_K

__all__ = [
    "expected_tokens_per_step", "expected_speedup", "expected_tokens_per_step_per_position",
    "conditional_rates", "expected_tokens_per_step_drafting", "expected_speedup_drafting",
    "measured_c", "measured_v", "predicted_speedup", "ideal_speedups", "limiting_factor",
    "speedup_curve", "best_k", "check_calculator_inputs",
]


# -- expected tokens per step -----------------------------------------------------------------


def expected_tokens_per_step(a: float, k: int) -> float:
    """E[tokens per step] = (1 - a^(k+1)) / (1 - a) (the paper's eq. 1); k + 1 when a = 1.

    Assumes i.i.d. acceptance: every one of the k drafts is accepted with the same probability
    ``a``, independently of the others, and every step drafts exactly k tokens. It equals
    ``1 + a + a^2 + ... + a^k``.
    """
    if a >= 1.0:
        return float(k + 1)
    return (1.0 - a ** (k + 1)) / (1.0 - a)


def expected_tokens_per_step_per_position(rates: Sequence[float]) -> float:
    """E[tokens per step] = 1 + sum_i prod_{j<=i} a_j for a chain of k = len(rates) drafts.

    ``rates[i]`` is the CONDITIONAL acceptance rate of draft i+1: P(accepted | drafts 1..i
    accepted). No i.i.d. assumption; it does assume every step drafts the full chain of
    len(rates) tokens (for steps that draft nothing see :func:`expected_tokens_per_step_drafting`).
    With all rates equal to a it is :func:`expected_tokens_per_step` (a, k).

    The per-position rates specviz reports (``Stats.per_position``, a bench row's
    ``per_position``) are already the products ``prod_{j<=i} a_j``: turn them into conditional
    rates with :func:`conditional_rates` first, or sum them directly (``1 + sum(per_position)``).
    """
    total, reach = 1.0, 1.0
    for i, a in enumerate(rates):
        if not 0.0 <= a <= 1.0 or math.isnan(a):
            raise ValueError(f"acceptance rate at position {i + 1} must be from 0 to 1, got {a!r}")
        reach *= a  # P(drafts 1..i+1 all accepted)
        total += reach
    return total


def conditional_rates(per_position: Sequence[float]) -> list[float]:
    """Conditional rates a_i = r_i / r_{i-1} from reported per-position rates r_i (r_0 = 1).

    ``per_position[i]`` is the fraction of steps whose draft i+1 was accepted (so drafts 1..i
    were too), as in ``Stats.per_position``. Where r_{i-1} is 0 nothing past it was ever
    accepted; the conditional rate is reported as 0. Exact when every step drafted the same
    number of tokens; with shorter chains on some steps the denominators differ per position and
    this is an estimate.
    """
    out, prev = [], 1.0
    for i, r in enumerate(per_position):
        if not 0.0 <= r <= 1.0 or math.isnan(r):
            raise ValueError(f"per-position rate {i + 1} must be from 0 to 1, got {r!r}")
        out.append(min(1.0, r / prev) if prev > 0 else 0.0)
        prev = r
    return out


def expected_tokens_per_step_drafting(tokens_when_drafting: float, drafted_fraction: float) -> float:
    """E[tokens per step] when only a fraction of the steps draft anything.

    An n-gram proposer drafts only when the context has a match; a step without drafts is a
    plain target step and commits exactly one token. So
    ``E = f * E_drafting + (1 - f) * 1`` with ``f = drafted_fraction`` (steps that drafted /
    all steps) and ``E_drafting`` the expectation on drafting steps (from
    :func:`expected_tokens_per_step` or :func:`expected_tokens_per_step_per_position`).
    Assumes whether a step drafts is independent of how well its drafts are accepted.
    """
    _check_fraction(drafted_fraction)
    if tokens_when_drafting < 1.0:
        raise ValueError(f"tokens per drafting step must be >= 1 (the target's own token), got {tokens_when_drafting!r}")
    return drafted_fraction * tokens_when_drafting + (1.0 - drafted_fraction)


# -- expected speedup -------------------------------------------------------------------------


def expected_speedup(a: float, k: int, c: float, v: float = 1.0) -> float:
    """Walltime gain over target-only decoding: (1 - a^(k+1)) / ((1 - a)(k c + v)).

    Assumes i.i.d. acceptance (see :func:`expected_tokens_per_step`), every step drafting k
    tokens at c target steps each, and a verify round costing v target steps (1 in the paper's
    idealisation). Prefill is not counted.
    """
    return expected_tokens_per_step(a, k) / (k * c + v)


def expected_speedup_drafting(tokens_when_drafting: float, drafted_fraction: float, k: int, c: float,
                              v: float = 1.0, plain_step_cost: float = 1.0) -> float:
    """Speedup when only a fraction f of the steps draft (n-gram proposers).

    ``E / (f (k c + v) + (1 - f) plain_step_cost)`` with E from
    :func:`expected_tokens_per_step_drafting`: a drafting step costs k c + v target steps, a
    step that found nothing to draft costs ``plain_step_cost`` (1: one target decode step; add
    the proposer's look-up cost if it is not negligible). With f = 1 this is
    ``tokens_when_drafting / (k c + v)``.
    """
    _check_fraction(drafted_fraction)
    e = expected_tokens_per_step_drafting(tokens_when_drafting, drafted_fraction)
    cost = drafted_fraction * (k * c + v) + (1.0 - drafted_fraction) * plain_step_cost
    if cost <= 0:
        raise ValueError(f"the cost per step must be > 0, got {cost!r} (check c, v and plain_step_cost)")
    return e / cost


def _check_fraction(f: float) -> None:
    if not 0.0 <= f <= 1.0 or math.isnan(f):
        raise ValueError(f"drafted_fraction (steps that drafted / all steps) must be from 0 to 1, got {f!r}")


# -- the a/c/v decomposition of a measured run ------------------------------------------------


def measured_c(draft_ms: float, drafted: int, target_step_ms: float) -> float | None:
    """c = (draft ms per drafted token) / (target-only ms per step); None if not measurable."""
    if drafted <= 0 or target_step_ms <= 0:
        return None
    return (draft_ms / drafted) / target_step_ms


def measured_v(verify_ms: float, other_ms: float, steps: int, target_step_ms: float) -> float | None:
    """v = ((verify + other) ms per step) / (target-only ms per step); None if not measurable."""
    if steps <= 0 or target_step_ms <= 0:
        return None
    return ((verify_ms + other_ms) / steps) / target_step_ms


def predicted_speedup(a: float | None, k: int, c: float | None, v: float | None) -> float | None:
    """:func:`expected_speedup` (a, k, c, v), or None when a, c or v is unknown."""
    if a is None or c is None or v is None or k < 1 or k * c + v <= 0:
        return None
    return expected_speedup(a, k, c, v)


def ideal_speedups(a: float, k: int, c: float, v: float) -> dict[str, float]:
    """The speedup now and with each factor made ideal in turn (a = 1, c = 0, v = 1).

    The factor whose ideal value gains the most is the one limiting the speedup.
    """
    return {
        "now": expected_speedup(a, k, c, v),
        "a": expected_tokens_per_step(1.0, k) / (k * c + v),
        "c": expected_tokens_per_step(a, k) / v if v > 0 else float("inf"),
        "v": expected_tokens_per_step(a, k) / (k * c + 1.0),
    }


def limiting_factor(a: float, k: int, c: float, v: float) -> str:
    """'a', 'c' or 'v': the factor whose ideal value would raise the predicted speedup most."""
    gains = ideal_speedups(a, k, c, v)
    return max(("a", "c", "v"), key=lambda f: gains[f])


# -- the calculator: speedup against k --------------------------------------------------------


def check_calculator_inputs(a: float, c: float, v: float) -> None:
    """ValueError unless 0 <= a <= 1, c >= 0 and v > 0."""
    if not 0 <= a <= 1:
        raise ValueError(f"a (acceptance rate) must be from 0 to 1, got {a:g}")
    if c < 0:
        raise ValueError(f"c (draft step cost / target step cost) must be >= 0, got {c:g}")
    if v <= 0:
        raise ValueError(f"v (verify pass cost / target step cost) must be > 0, got {v:g}")


def speedup_curve(a: float, c: float, v: float = 1.0, k_max: int = LEARN_CURVE_MAX_K) -> list[tuple[int, float, float]]:
    """[(k, E[tokens/step], expected speedup)] for k = 1..k_max (i.i.d. acceptance)."""
    check_calculator_inputs(a, c, v)
    return [(k, expected_tokens_per_step(a, k), expected_speedup(a, k, c, v)) for k in range(1, int(k_max) + 1)]


def best_k(a: float, c: float, v: float = 1.0, k_max: int = LEARN_CURVE_MAX_K) -> tuple[int, float]:
    """(k, speedup) with the highest expected speedup for k in 1..k_max (the smallest k on ties)."""
    curve = speedup_curve(a, c, v, k_max)
    k, _, s = max(curve, key=lambda t: (t[2], -t[0]))
    return k, s
