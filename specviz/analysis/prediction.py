"""The benchmark's prediction from per-position acceptance, what it assumes, and how far off it is.

The paper's closed form E = (1 - a^(k+1)) / (1 - a) assumes one i.i.d. acceptance rate ``a`` and
a proposer that drafts k tokens on every step. Real drafts break both: position 1 is accepted
more often than position 4 (and acceptances cluster: a step that accepts draft 1 often accepts
draft 2), and an n-gram lookup drafts only on the steps whose context repeats. Fed one pooled
``a``, the closed form misses its own run (tau 1.99 predicted vs 2.91 measured, int8 k = 4;
1.64x vs 1.29x for ngram k = 1).

This module predicts from what was measured per position instead:

    tau = 1 + sum_i r_i * reach_i

with ``r_i`` the reported per-position rate (steps whose draft i was accepted / steps with at
least i drafts: already the product of the conditional rates) and ``reach_i`` the fraction of
steps that drafted at least i tokens (= the drafted fraction f for every i when each drafting
step drafts the full k). The speedup of the decode loop is then ``tau / (k' c + v)`` with
``k'`` = drafted tokens per step and c, v the measured costs (specviz.analysis.metrics).

The closed forms come from :mod:`specviz.analysis.theory` (expected_tokens_per_step_per_position,
conditional_rates, expected_tokens_per_step_drafting, expected_tokens_per_step); this module adds
the exact form with per-position reach, the bench-row plumbing and the measured-vs-predicted text.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from . import theory

__all__ = [
    "ASSUMPTIONS", "Prediction", "Agreement", "TOLERANCE", "expected_tokens_per_step_positional",
    "predict_from_positions", "drafted_fraction_of_row", "predict_row", "compare", "speedup_gap_reasons",
    "row_agreement", "augment_rows", "tau_words",
]

TOLERANCE = 0.10  # measured and predicted "agree" within 10%

ASSUMPTIONS = (
    "Predicted from the measured per-position acceptance (not one i.i.d. rate): tau = 1 + sum_i r_i x reach_i, "
    "where r_i is the share of steps that kept draft i and reach_i the share of steps that drafted at least i "
    "tokens (an n-gram drafts only when the context repeats). The speedup tau / (k' c + v) counts the decode "
    "loop only: it assumes every step costs k' c + v target steps (k' drafted tokens per step) and leaves out "
    "the prefill (a draft model reads the prompt too), the time between steps, and tokens cut off at the end."
)


# -- tokens per step -----------------------------------------------------------------------------


def _check_rates(rates: Sequence[float], what: str) -> None:
    for i, r in enumerate(rates):
        if not isinstance(r, (int, float)) or math.isnan(r) or not 0.0 <= r <= 1.0:
            raise ValueError(f"{what} at position {i + 1} must be from 0 to 1, got {r!r}")


def expected_tokens_per_step_positional(per_position: Sequence[float], drafted_fraction: float = 1.0,
                                        reach: Sequence[float] | None = None) -> float:
    """Expected tokens per step from the reported per-position rates r_i (``Stats.per_position``,
    a bench row's ``per_position``).

    With ``reach`` (reach[i] = share of steps that drafted at least i+1 tokens) this is
    ``1 + sum_i r_i reach_i`` exactly; without it every drafting step is taken to draft the full
    chain: ``f (1 + sum_i r_i) + (1 - f)`` with f = ``drafted_fraction``.
    """
    _check_rates(per_position, "per-position rate")
    if not 0.0 <= drafted_fraction <= 1.0 or math.isnan(drafted_fraction):
        raise ValueError(f"drafted_fraction (steps that drafted / steps) must be from 0 to 1, got {drafted_fraction!r}")
    if reach is not None:
        if len(reach) != len(per_position):
            raise ValueError(f"reach needs one share per position ({len(per_position)}), got {len(reach)}")
        _check_rates(reach, "reach")
        return 1.0 + sum(r * s for r, s in zip(per_position, reach))
    drafting = theory.expected_tokens_per_step_per_position(theory.conditional_rates(per_position))
    return theory.expected_tokens_per_step_drafting(drafting, drafted_fraction)


# -- predictions ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Prediction:
    """What the per-position model predicts for one configuration."""

    tau: float  # tokens per step
    speedup: float | None  # tau / (k' c + v); None without c and v
    tau_iid: float | None  # the i.i.d. closed form from one pooled a (for contrast)
    drafted_fraction: float  # steps that drafted / steps
    drafted_per_step: float  # k': drafted tokens / steps
    assumptions: str = ASSUMPTIONS


def predict_from_positions(per_position: Sequence[float], k: int, *, drafted_fraction: float = 1.0,
                           drafted_per_step: float | None = None, reach: Sequence[float] | None = None,
                           c: float | None = None, v: float | None = None, a: float | None = None) -> Prediction:
    """Predicted tau (and speedup when c and v are known) from per-position acceptance.

    drafted_per_step defaults to ``sum(reach)`` or k x drafted_fraction; ``a`` (pooled) adds the
    i.i.d. prediction for comparison.
    """
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k!r}")
    tau = expected_tokens_per_step_positional(per_position, drafted_fraction, reach)
    if drafted_per_step is None:
        drafted_per_step = float(sum(reach)) if reach is not None else k * drafted_fraction
    speed = None
    if c is not None and v is not None and drafted_per_step * c + v > 0:
        speed = tau / (drafted_per_step * c + v)
    tau_iid = theory.expected_tokens_per_step(a, k) if a is not None and k > 0 else None
    return Prediction(tau, speed, tau_iid, drafted_fraction, drafted_per_step)


def drafted_fraction_of_row(row: Mapping[str, Any], prompt_rows: Sequence[Mapping[str, Any]] = ()) -> tuple[float, list[float] | None]:
    """(drafted fraction, reach per position or None) for a bench summary row.

    Exact from the per-prompt rows' ``per_position_trials`` (steps with at least i+1 drafts) when
    given; otherwise estimated as drafted / (k x steps), which assumes full chains. A run flagged
    as stalled is left out as the summary leaves it out (its steps are not in the row's): counting
    its trials over the row's steps gave a fraction over 1 (issue 52's walk).
    """
    steps, k = row.get("steps") or 0, int(row.get("k") or 0)
    mine = [r for r in prompt_rows if (r.get("proposer"), r.get("k"), r.get("impl")) ==
            (row.get("proposer"), row.get("k"), row.get("impl"))]
    mine = [r for r in mine if not r.get("flagged")] or mine  # every run flagged: the summary keeps them all
    if mine and steps:
        width = max(len(r.get("per_position_trials") or []) for r in mine)
        trials = [0] * width
        for r in mine:
            for i, t in enumerate(r.get("per_position_trials") or []):
                trials[i] += t
        if width:
            reach = [t / steps for t in trials]
            return reach[0], reach
    if not steps or not k or row.get("drafted") is None:
        return (0.0 if k == 0 else 1.0), None
    return min(1.0, row["drafted"] / (k * steps)), None


def predict_row(row: Mapping[str, Any], prompt_rows: Sequence[Mapping[str, Any]] = ()) -> Prediction | None:
    """The per-position prediction for a bench summary row (None for target-only or no drafts)."""
    k = int(row.get("k") or 0)
    per = list(row.get("per_position") or [])
    if k == 0 or not per or not row.get("steps"):
        return None
    f, reach = drafted_fraction_of_row(row, prompt_rows)
    if reach is not None and len(reach) != len(per):
        reach = (list(reach) + [0.0] * len(per))[: len(per)]
    kp = (row["drafted"] / row["steps"]) if row.get("drafted") is not None else None
    return predict_from_positions(per, k, drafted_fraction=f, drafted_per_step=kp, reach=reach,
                                  c=row.get("c"), v=row.get("v"), a=row.get("acceptance_rate"))


# -- measured vs predicted ----------------------------------------------------------------------


@dataclass(frozen=True)
class Agreement:
    what: str  # "tau" | "speedup"
    measured: float | None
    predicted: float | None
    gap: float | None  # (measured - predicted) / predicted
    ok: bool  # within TOLERANCE
    text: str  # one sentence for the page


def compare(what: str, measured: float | None, predicted: float | None, reasons: Sequence[str] = (),
            tol: float = TOLERANCE) -> Agreement:
    """Measured against predicted: agree within ``tol``, or say by how much and why (``reasons``)."""
    if measured is None or predicted is None or predicted <= 0:
        return Agreement(what, measured, predicted, None, False, f"{what}: not enough measurements to compare.")
    gap = (measured - predicted) / predicted
    ok = abs(gap) <= tol
    head = f"{what}: measured {measured:.2f}, predicted {predicted:.2f} ({gap:+.0%})"
    if ok:
        return Agreement(what, measured, predicted, gap, True, f"{head}: within {tol:.0%}.")
    why = "; ".join(reasons) if reasons else "the formula's assumptions do not hold for this run"
    return Agreement(what, measured, predicted, gap, False, f"{head}: off by more than {tol:.0%} because {why}.")


def _decode_s(row: Mapping[str, Any]) -> float | None:
    parts = [row.get(n) for n in ("draft_ms", "verify_ms", "other_ms")]
    return None if any(p is None for p in parts) else sum(parts) / 1e3


def speedup_gap_reasons(row: Mapping[str, Any], base: Mapping[str, Any] | None) -> list[str]:
    """Measured reasons a wall-clock speedup differs from the decode-loop prediction: the share of
    each run's time spent in prefill and outside the timed steps."""
    out = []
    if base is None:
        return out
    for name, r in (("this run", row), ("target-only", base)):
        wall, dec, pre = r.get("wall_s"), _decode_s(r), r.get("prefill_ms")
        if not wall or dec is None:
            continue
        pre_s = (pre or 0.0) / 1e3
        rest = max(0.0, wall - dec - pre_s)
        if pre_s / wall >= 0.02 or rest / wall >= 0.02:
            out.append(f"{name} spent {pre_s / wall:.0%} of its time in prefill and {rest / wall:.0%} between steps")
    n, nb = row.get("new_tokens"), base.get("new_tokens")
    dec, decb = _decode_s(row), _decode_s(base)
    if n and nb and dec and decb:
        loop = (n / dec) / (nb / decb)
        out.append(f"the decode loops alone compare at {loop:.2f}x")
    return out


def row_agreement(row: Mapping[str, Any], prompt_rows: Sequence[Mapping[str, Any]] = (),
                  base: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Predicted vs measured tau and speedup for one bench summary row, with the caveat text.

    base: the same impl's target-only summary row (for the prefill / between-steps shares).
    Returns {"prediction", "tau": Agreement, "speedup": Agreement, "assumptions", "text"}.
    """
    pred = predict_row(row, prompt_rows)
    if pred is None:
        return {"prediction": None, "tau": None, "speedup": None, "assumptions": ASSUMPTIONS,
                "text": f"{row.get('proposer')} k={row.get('k')}: nothing drafted, nothing to predict."}
    f, reach = drafted_fraction_of_row(row, prompt_rows)
    tau_reasons = ["the last step of each prompt is cut at max new tokens or EOS"]
    if reach is None and f < 0.999:
        tau_reasons.append("without per-prompt counts every drafting step is taken to draft the full k")
    tau = compare("tau", row.get("mean_acceptance_length"), pred.tau, tau_reasons)
    speed = compare("speedup", row.get("speedup"), pred.speedup, speedup_gap_reasons(row, base))
    label = f"{row.get('proposer')} k={row.get('k')}"
    return {"prediction": pred, "tau": tau, "speedup": speed, "assumptions": ASSUMPTIONS,
            "text": f"{label}: {tau_words(row.get('mean_acceptance_length'), pred)} {speed.text}"}


def tau_words(measured: float | None, pred: Prediction) -> str:
    """tau as the page says it: the per-position rebuild comes from the same counts as the measured
    tau, so it checks the bookkeeping and is not called a prediction; the i.i.d. formula from the
    pooled a (a model: one rate, every position alike) is the one tau prediction, with its gap."""
    if measured is None:
        return "tau: not measured."
    same = f"tau: measured {measured:.2f} (rebuilt from its own per-position counts: {pred.tau:.2f}, a check, not a prediction)"
    if pred.tau_iid is None or pred.tau_iid <= 0:
        return same + "."
    gap = (measured - pred.tau_iid) / pred.tau_iid
    return f"{same}; the i.i.d. formula from its pooled a predicts {pred.tau_iid:.2f} ({gap:+.0%})."


def augment_rows(rows: Sequence[Mapping[str, Any]], prompt_rows: Sequence[Mapping[str, Any]] = ()) -> list[dict[str, Any]]:
    """Summary rows with the per-position prediction added (copies; the report is not changed):
    ``predicted_tau_positional``, ``predicted_speedup_positional``, ``drafted_fraction`` and
    ``prediction_note`` (measured vs predicted in one sentence, the gap's measured reasons included)."""
    bases = {r.get("impl"): r for r in rows if not r.get("k") and r.get("kind", "summary") == "summary"}
    out = []
    for r in rows:
        row = dict(r)
        if r.get("impl") == "specviz" and r.get("k"):
            ag = row_agreement(r, prompt_rows, bases.get(r.get("impl")))
            pred = ag["prediction"]
            if pred is not None:
                row.update(predicted_tau_positional=pred.tau, predicted_speedup_positional=pred.speedup,
                           drafted_fraction=pred.drafted_fraction, prediction_note=ag["text"])
        out.append(row)
    return out
