"""The Benchmark's "Why (no) speedup?" readout: the a/c/v explanation (specviz.analysis.metrics), the
per-position prediction of every configuration (specviz.analysis.prediction) with its assumptions, and
each proposer's best k on this machine's measured verify curve. Every number about a configuration comes
from that configuration's own a, c and v: one prediction each, nothing pooled across proposers. Text
only (Markdown)."""

from __future__ import annotations

from typing import Any, Mapping

from ..analysis.metrics import why_no_speedup
from ..analysis.prediction import ASSUMPTIONS
from ..bench.verdicts import noise_markdown
from .bench_rows import report_rows

__all__ = ["TAB_REPEATS_HINT", "best_k_markdown", "why_markdown"]

# what narrows a wide interval, said where the lab runs (the tab has no passes control; the CLI has)
TAB_REPEATS_HINT = "more prompts narrow it, or `specviz bench --repeats {n}` (each pass adds a ratio per prompt)"


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
        md += best_k_markdown(rows, curve)
    return md


def best_k_markdown(rows: list[dict[str, Any]], curve: Any) -> str:
    """"The verify curve decides": each chain proposer's best k on this machine's verify curve v(n)
    and with the paper's v = 1, from that proposer's own a and c (its fastest measured configuration;
    never pooled across proposers). "" when no chain configuration has a, c and a speedup."""
    from ..analysis.theory import best_k
    from ..bench.verify_cost import best_k_with_curve, verify_curve

    chains = [r for r in rows if r.get("impl") == "specviz" and r.get("k") and not r.get("tree")
              and r.get("c") is not None and r.get("acceptance_rate") is not None]
    own: dict[str, dict[str, Any]] = {}
    for r in chains:  # per proposer, its fastest configuration
        name = str(r.get("proposer"))
        if name not in own or (r.get("speedup") or 0.0) > (own[name].get("speedup") or 0.0):
            own[name] = r
    try:
        vc = verify_curve(curve)
    except (TypeError, ValueError):
        return ""
    lines = []
    for name, r in own.items():
        a, c = min(float(r["acceptance_rate"]), 0.999), float(r["c"])
        best = best_k_with_curve(a, c, vc)
        if not best:
            continue
        ideal = best_k(a, c, 1.0, vc[-1][0] - 1)
        lines.append(f"- {name} (a = {a:.2f}, c = {c:.3f}, measured at k = {r['k']}): best k {best[0]} "
                     f"({best[1]:.2f}x) on this machine; with the paper's v = 1, k {ideal[0]} ({ideal[1]:.2f}x).")
    if not lines:
        return ""
    return ("\n\n**The verify curve decides.** Each proposer's best k from its own a and c, on this machine's "
            f"v(n) (v({vc[-1][0]}) = {vc[-1][1]:.2f}) and with the paper's v = 1; a wider pass pays only while v(n) "
            "stays flat.\n\n" + "\n".join(lines))
