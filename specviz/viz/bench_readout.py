"""The Benchmark's "Why (no) speedup?" readout: the a/c/v explanation (specviz.analysis.metrics), the
per-position prediction of every configuration (specviz.analysis.prediction) with its assumptions, and
each proposer's fastest measured k beside the theory's best k on this machine's measured verify curve,
checked against the measurement at that k. Every number about a configuration comes
from that configuration's own a, c and v: one prediction each, nothing pooled across proposers. Text
only (Markdown)."""

from __future__ import annotations

from typing import Any, Mapping

from ..analysis.metrics import robust_speedup, why_no_speedup
from ..analysis.noise import ONE_RUN
from ..analysis.prediction import ASSUMPTIONS
from ..bench.verdicts import noise_markdown
from .bench_rows import report_rows

__all__ = ["MAX_REPEATS", "TAB_REPEATS_HINT", "best_k_markdown", "why_markdown"]

# what narrows a wide interval, said where the lab runs (the tab has no passes control; the CLI has)
MAX_REPEATS = 5  # passes over the prompts the Benchmark tab offers (the CLI's --repeats takes any)
TAB_REPEATS_HINT = ("more prompts narrow it, or more passes over the prompts (each adds a ratio per prompt; the tab runs up "
                    f"to {MAX_REPEATS}, `specviz bench --repeats {{n}}` more)")


def why_markdown(report: Mapping[str, Any] | None) -> str:
    """"Why (no) speedup?": the a/c/v explanation of the best and worst configuration (ranked by the
    median over prompts), what the sweep says about its own numbers (specviz.bench.verdicts), each with
    the per-position prediction (measured vs predicted, the gap's measured reasons), the formula's
    assumptions, and the theory's best k on this machine's verify curve when it was measured."""
    rows = report_rows(report)
    why = why_no_speedup(rows)
    md = why["markdown"]
    noise = noise_markdown(report or {}, TAB_REPEATS_HINT)  # verdicts vs totals, re-runs, wide intervals, at-once prompts
    if noise:
        md += "\n\n" + noise
    notes = []
    for e in (why.get("best"), why.get("worst")):
        if not e:
            continue
        row = next((r for r in rows if f"{r.get('proposer')} k={r.get('k')}" == e["label"] and r.get("impl") == "specviz"), None)
        if row and row.get("prediction_note") and row["prediction_note"] not in notes:
            notes.append(row["prediction_note"])
    trees = [r for r in rows if r.get("tree") and r.get("prediction_note")]
    if trees:
        best_tree = max(trees, key=lambda r: r.get("speedup") or 0.0)
        if best_tree["prediction_note"] not in notes:
            notes.append(best_tree["prediction_note"])
    rest = [r["prediction_note"] for r in rows if r.get("prediction_note") and r["prediction_note"] not in notes]
    if notes:
        md += "\n\n**Measured vs predicted from per-position acceptance**\n\n" + "\n".join(f"- {n}" for n in notes)
    if rest:
        md += "\n\n**Every other configuration**\n\n" + "\n".join(f"- {n}" for n in rest)
    if notes or rest:
        md += f"\n\n_{ASSUMPTIONS}_"
    curve = (report or {}).get("verify_cost")
    if curve:
        worst = (why.get("worst") or {}).get("label")
        worst = worst if worst != (why.get("best") or {}).get("label") else None
        md += best_k_markdown(rows, curve, worst)
    return md


def _median_words(r: Mapping[str, Any]) -> str:
    """ "1.16x (median over prompts, 90% interval 1.02-1.31x)" or "1.16x" for a row with no median."""
    speed = robust_speedup(r)
    if not isinstance(r.get("speedup_median"), (int, float)):
        return f"{speed:.2f}x"
    if r.get("verdict") == ONE_RUN:  # one ratio: no interval
        return f"{speed:.2f}x (one run: no interval)"
    band = (f", 90% interval {r['speedup_low']:.2f}-{r['speedup_high']:.2f}x"
            if r.get("speedup_low") is not None and r.get("speedup_high") is not None else "")
    return f"{speed:.2f}x (median over prompts{band})"


def _theory_check(name: str, best_k: int, at: Mapping[str, Any], measured: Mapping[int, Mapping[str, Any]],
                  worst: str | None) -> str:
    """What the sweep measured at the theory's best k, when it ran it: a theory from one k's a that
    the measurement at another k contradicts is said to be so, never left beside it unanswered."""
    if best_k == at["k"]:
        return " The theory agrees with the measurement."
    there = measured.get(best_k)
    if there is None or not isinstance(robust_speedup(there), (int, float)):
        return f" k = {best_k} was not measured: add it to the sweep to check the theory."
    label = f"{name} k={best_k}"
    ranked = ", ranked worst above," if label == worst else ","
    return (f" But k = {best_k} measured {_median_words(there)}{ranked} no faster than k = {at['k']}: the a measured at "
            f"k = {at['k']} does not hold at k = {best_k}; the measurement decides, keep k = {at['k']}.")


def best_k_markdown(rows: list[dict[str, Any]], curve: Any, worst: str | None = None) -> str:
    """"The verify curve decides": each chain proposer's best k on this machine's verify curve v(n)
    and with the paper's v = 1, from that proposer's own a and c at its fastest configuration by the
    median over prompts (the statistic and the configuration the ranking above names; never pooled
    across proposers), then what the sweep measured at that k when it ran it. ``worst``: the
    ranking's worst label ("ngram k=4"), named where the theory picks it. "" when no chain
    configuration has a, c and a speedup."""
    from ..analysis.theory import best_k
    from ..bench.verify_cost import best_k_with_curve, verify_curve

    chains = [r for r in rows if r.get("impl") == "specviz" and r.get("k") and not r.get("tree")
              and r.get("c") is not None and r.get("acceptance_rate") is not None
              and isinstance(robust_speedup(r), (int, float))]
    by_k: dict[str, dict[int, dict[str, Any]]] = {}
    for r in chains:
        by_k.setdefault(str(r.get("proposer")), {})[int(r["k"])] = r
    try:
        vc = verify_curve(curve)
    except (TypeError, ValueError):
        return ""
    lines = []
    for name, measured in by_k.items():
        r = max(measured.values(), key=robust_speedup)  # the ranking's statistic
        a, c = min(float(r["acceptance_rate"]), 0.999), float(r["c"])
        best = best_k_with_curve(a, c, vc)
        if not best:
            continue
        ideal = best_k(a, c, 1.0, vc[-1][0] - 1)
        lines.append(f"- {name}: fastest measured k = {r['k']}, {_median_words(r)}. From its a = {a:.2f}, c = {c:.3f}, "
                     f"measured at k = {r['k']}, the theory's best k {best[0]} ({best[1]:.2f}x) on this machine; with the "
                     f"paper's v = 1, k {ideal[0]} ({ideal[1]:.2f}x)." + _theory_check(name, best[0], r, measured, worst))
    if not lines:
        return ""
    return ("\n\n**The verify curve decides.** Each proposer's fastest measured k (the median over prompts, as ranked "
            f"above), and the theory's best k from its a and c there, on this machine's v(n) (v({vc[-1][0]}) = "
            f"{vc[-1][1]:.2f}) and with the paper's v = 1; a wider pass pays only while v(n) stays flat.\n\n"
            + "\n".join(lines))
