"""The Benchmark's "Why (no) speedup?" readout: the a/c/v explanation (specviz.analysis.metrics), the
per-position prediction of every configuration (specviz.analysis.prediction) with its assumptions, and the
theory's best k on this machine's measured verify curve. Text only (Markdown)."""

from __future__ import annotations

from typing import Any, Mapping

from ..analysis.metrics import why_no_speedup
from ..analysis.prediction import ASSUMPTIONS
from .bench_rows import _chain_a, report_rows

__all__ = ["why_markdown"]


def why_markdown(report: Mapping[str, Any] | None) -> str:
    """"Why (no) speedup?": the a/c/v explanation of the best and worst configuration, each with
    the per-position prediction (measured vs predicted, the gap's measured reasons), the formula's
    assumptions, and the theory's best k on this machine's verify curve when it was measured."""
    rows = report_rows(report)
    why = why_no_speedup(rows)
    md = why["markdown"]
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
    a = _chain_a(rows)
    chains = [r for r in rows if r.get("impl") == "specviz" and r.get("k") and not r.get("tree") and r.get("c") is not None]
    if curve and a is not None and chains:
        from ..analysis.theory import best_k
        from ..bench.verify_cost import best_k_with_curve, verify_curve

        c = sum(r["c"] for r in chains) / len(chains)
        vc = verify_curve(curve)
        best = best_k_with_curve(min(a, 0.999), c, vc)
        ideal = best_k(min(a, 0.999), c, 1.0, vc[-1][0] - 1)
        if best:
            md += (f"\n\n**The verify curve decides.** With a = {a:.2f} and c = {c:.3f}, this machine's v(n) "
                   f"(v(17) = {vc[-1][1]:.2f}) puts the theory's best k at {best[0]} ({best[1]:.2f}x); with the paper's "
                   f"v = 1 it would be {ideal[0]} ({ideal[1]:.2f}x). A wider tree pays only while v(n) stays flat.")
    return md
