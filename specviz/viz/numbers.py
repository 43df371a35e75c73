"""Numbers a student can check: one formatter for probabilities, ratios and draws, and the words
each acceptance rule is judged by (column headers, tooltip lines).

Rounding must never hide the rule. ``p = 0.000, q = 0.001, min(1, p/q) = 0.408`` cannot be
checked by hand; ``p = 4.08e-4, q = 1.00e-3, min(1, p/q) = 0.408`` can. So:

- values from 0.1 up print with 3 decimals (``0.408``, ``1.000``), as before;
- smaller values keep 3 significant figures (``0.0412``, ``0.00412``);
- below 0.001 they switch to scientific notation (``4.12e-4``); an exact 0 prints ``0``;
- a value just under 1 never prints as ``1.000`` (``0.99996``), and :func:`fmt_pair` adds digits
  until two different numbers (u against min(1, p/q)) print differently.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..core.records import DraftDecision, StepRecord
from .labels import token_label

__all__ = [
    "Reveal", "reveal", "fmt_prob", "fmt_pair", "rule_of", "RULE_COLUMNS", "draft_columns", "ratio_of", "ratio_note", "decision_cell",
    "decision_line",
]

SIG = 3  # significant figures for small values
DECIMALS = 3  # decimals for values >= 0.1
SCI_BELOW = 1e-3  # scientific notation below this
MAX_DIGITS = 9


def _sci(x: float, sig: int) -> str:
    mant, exp = f"{x:.{sig - 1}e}".split("e")
    return f"{mant}e{int(exp)}"


def fmt_prob(x: float | None, sig: int = SIG) -> str:
    """A probability, ratio or uniform draw as text a student can check by hand.

    >>> [fmt_prob(v) for v in (0.408, 1.0, 0.0412, 0.000412, 0.0, None)]
    ['0.408', '1.000', '0.0412', '4.12e-4', '0', '—']
    """
    if x is None:
        return "—"
    x = float(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "∞" if x > 0 else "−∞"
    if x == 0:
        return "0"
    ax = abs(x)
    if ax >= 1e4:
        return _sci(x, sig)
    if ax >= 0.1:
        s = f"{x:.{DECIMALS}f}"
        d = DECIMALS
        while abs(x) < 1 and abs(float(s)) == 1 and d < MAX_DIGITS:
            d += 1  # 0.99996 must not print as 1.000 (it would look like "always accept")
            s = f"{x:.{d}f}"
        return s
    if ax >= SCI_BELOW:
        decimals = sig - 1 - math.floor(math.log10(ax))
        s = f"{x:.{decimals}f}"
        if abs(float(s)) >= 0.1:  # 0.09996 rounded up to 0.100: print as the >= 0.1 case does
            return f"{x:.{max(DECIMALS, decimals - 1)}f}"
        return s
    return _sci(x, sig)


def fmt_pair(a: float | None, b: float | None, sig: int = SIG) -> tuple[str, str]:
    """(a, b) formatted so that different values never print the same (u against its ratio)."""
    sa, sb = fmt_prob(a, sig), fmt_prob(b, sig)
    if a is None or b is None or a == b:
        return sa, sb
    s = sig
    while sa == sb and s < MAX_DIGITS:
        s += 1
        sa, sb = _precise(a, s), _precise(b, s)
    return sa, sb


def _precise(x: float, sig: int) -> str:
    """x with ``sig`` significant figures, fixed notation from 0.001 up (used by fmt_pair)."""
    if x == 0 or abs(x) < SCI_BELOW:
        return fmt_prob(x, sig) if x == 0 else _sci(x, sig)
    decimals = max(DECIMALS, sig - 1 - math.floor(math.log10(abs(x))))
    return f"{x:.{decimals}f}"


# -- the words of each rule ------------------------------------------------------------------------


def rule_of(record: StepRecord) -> str:
    """"exact", "typical" or "greedy": what judged this step's drafts."""
    if record.rule == "typical":
        return "typical"
    judged = [d for d in record.drafts if d.verdict != "discarded"]
    return "greedy" if judged and all(d.u is None for d in judged) else "exact"


# Seven columns for every rule, so the table keeps its shape: (header, header tooltip).
RULE_COLUMNS: dict[str, list[tuple[str, str]]] = {
    "exact": [
        ("#", "draft position i"), ("token", "the drafted token x_i"), ("q(x)", "the draft's probability of x_i"),
        ("p(x)", "the target's probability of x_i"),
        ("min(1, p/q)", "the chance x_i is kept: accept while u ≤ min(1, p/q)"),
        ("u", "the uniform draw u_i ~ U(0, 1) compared with min(1, p/q)"),
        ("verdict", "accepted iff u ≤ min(1, p/q); the first rejection ends the step"),
    ],
    "typical": [
        ("#", "draft position i"), ("token", "the drafted token x_i"), ("q(x)", "the draft's probability of x_i"),
        ("p(x)", "the target's probability of x_i"),
        ("threshold", "typical acceptance (LOSSY): thr = min(ε, δ·e^(−H(p))); min(1, p/q) and u are not used"),
        ("p > thr?", "accepted iff p(x) > thr"),
        ("verdict", "accepted iff p > thr; after a rejection the correction is argmax p"),
    ],
    "greedy": [
        ("#", "draft position i"), ("token", "the drafted token x_i"), ("q(x)", "the draft's probability of x_i"),
        ("p(x)", "the target's probability of x_i"),
        ("min(1, p/q) (unused)", "shown for comparison only: at temperature 0 the ratio is not used"),
        ("argmax p?", "greedy (temperature 0): accept while x_i = argmax p; no u is drawn"),
        ("verdict", "accepted iff x = argmax p; the correction is argmax p"),
    ],
}


def draft_columns(record: StepRecord | None) -> list[tuple[str, str]]:
    """The inspector table's (header, tooltip) pairs for the rule that judged ``record``."""
    return RULE_COLUMNS["exact" if record is None else rule_of(record)]


def ratio_of(d: DraftDecision) -> float:
    """min(1, p(x)/q(x)) from the draft's own p and q (the engine stores 0/1 at greedy)."""
    return min(1.0, d.p / d.q) if d.q > 0 else 1.0


def ratio_note(rule: str) -> str:
    """What min(1, p/q) means under ``rule``, for a tooltip line."""
    return {
        "exact": "",
        "typical": "  (not used by typical acceptance)",
        "greedy": "  (not used at greedy: the verdict is x = argmax p)",
    }[rule]


def decision_cell(record: StepRecord, d: DraftDecision) -> str:
    """The table cell under "u" / "p > thr?" / "argmax p?" for one draft."""
    rule = rule_of(record)
    if d.verdict == "discarded":
        return "—"
    if rule == "typical":
        if d.threshold is None:
            return "—"
        return "p>thr: yes" if d.accepted else "p>thr: no"
    if rule == "greedy":
        if d.accepted:
            return "yes"
        best = d.top_p[0][1] if d.top_p else None
        return "no" if best is None else f"no: argmax is {token_label(best)!r}"
    return fmt_prob(d.u)


def decision_line(record: StepRecord, d: DraftDecision) -> str:
    """One tooltip line: the check that decided a judged draft, in numbers."""
    rule = rule_of(record)
    if d.verdict == "discarded":
        return "never judged: an earlier draft of this step was rejected"
    if rule == "greedy":
        return "greedy: " + ("x = argmax p, so accepted" if d.accepted else "x ≠ argmax p, so rejected")
    if rule == "typical":
        if d.threshold is None:
            return f"typical (LOSSY): {d.verdict}"
        sp, st = fmt_pair(d.p, d.threshold)
        sign = ">" if d.accepted else "≤"
        return f"typical (LOSSY): p = {sp} {sign} min(ε, δ·e^(−H(p))) = {st}  →  {d.verdict}"
    if d.u is None:
        return d.verdict
    su, sr = fmt_pair(d.u, d.ratio)
    sign = "≤" if d.accepted else ">"
    return f"u = {su} {sign} {sr}  →  {d.verdict}"


# -- what is known at a phase of a step ----------------------------------------------------------


@dataclass(frozen=True)
class Reveal:
    """What a step's readouts may show at one phase (specviz.viz.phases): q always; p once the
    target has verified (``p``); the verdicts of the first ``judged`` drafts; the correction or
    bonus token and the step's outcome only at commit (``done``)."""

    p: bool
    judged: int
    done: bool
    phase: str = "commit"


def reveal(record: StepRecord | None, phase: str | None = "commit", upto: int | None = None) -> Reveal | None:
    """The :class:`Reveal` of ``record`` at ``phase`` (None or "commit": None, everything is shown);
    ``upto``: in "decide", the last position judged so far (0-based)."""
    if record is None or phase in (None, "commit") or record.k == 0:
        return None
    judged = sum(1 for d in record.drafts if d.verdict != "discarded")
    if phase == "draft":
        return Reveal(False, 0, False, phase)
    if phase == "verify":
        return Reveal(True, 0, False, phase)
    shown = judged if upto is None else max(0, min(int(upto) + 1, judged))
    return Reveal(True, shown, False, "decide")
