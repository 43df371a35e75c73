"""What ``specviz advise`` leaves behind: the ranking and the runs in words, the pick the proposer
``auto`` reads and the tree shapes ``shape=auto`` reads (saved in this machine's cache
directory). The advice itself: :mod:`specviz.bench.advise`."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any, Sequence

from ..proposers.advised import AdvisedPick, save_pick

if TYPE_CHECKING:
    from .advise import Advice

__all__ = ["format_advice", "format_runs", "pick_of", "save_advice", "save_shapes"]


def save_shapes(path, advice: Advice) -> None:
    """Record the advised tree shapes where ``shape=auto`` reads them (merged with earlier ones)."""
    from pathlib import Path

    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        data = {}
    for base, shape in advice.shapes.items():
        data[f"{advice.target}|{base}"] = {"shape": shape, "machine": advice.cost.machine,
                                          "saved": time.strftime("%Y-%m-%dT%H:%M:%S")}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1), encoding="utf-8")


def pick_of(advice: Advice) -> AdvisedPick:
    """The first of the ranking run at constant k as the pick ``auto`` runs ("none" when nothing
    is predicted to pay; ``auto`` runs constant k, so a confidence schedule's forecasts are left out)."""
    top = next((f for f in advice.forecasts if f.tau > 1.0 and f.pays and "schedule" not in f.extra), None)
    if top is None:
        return AdvisedPick(advice.target, "none", 1, 1.0, 1.0, advice.cost.machine)
    return AdvisedPick(advice.target, top.spec, top.k, top.speedup, top.tau, advice.cost.machine)


def save_advice(advice: Advice) -> list[str]:
    """Save what ``auto`` and ``shape=auto`` read back (the pick, the tree shapes) in this machine's
    cache directory; -> what was saved, in words."""
    from ..proposers.ngram_tree import advised_shapes_path

    said = []
    if advice.shapes:
        save_shapes(advised_shapes_path(), advice)
        said.append("tree shapes for shape=auto: " + ", ".join(f"{b} -> {s}" for b, s in advice.shapes.items()))
    pick = pick_of(advice)
    save_pick(pick)
    said.append(f"the pick for the proposer auto: {pick.spec}" + (f" k={pick.k}" if pick.pays else " (target-only)"))
    return said


def format_advice(advice: Advice, top: int | None = None) -> str:
    """The ranking as a table, then the notes and the verdicts."""
    lines = [f"Predicted on {advice.cost.machine} for {advice.target} (calibrated on {advice.prompts} prompts, "
             f"{advice.max_new_tokens} new tokens each; 95% intervals from the acceptance counts; ranked by 'run': "
             "whole runs, prefills included; 'speedup': the decode steps alone):",
             f"  {'#':>3} {'configuration':<44} {'tau':>5} {'tau interval':>13} {'step ms':>8} {'speedup':>8} {'interval':>13}"
             f" {'run':>7}"]
    for i, f in enumerate(advice.forecasts[:top] if top else advice.forecasts, 1):
        tree = f"  {f.extra['tree']}" if f.extra.get("tree") else ""
        run = f"{f.extra['run_speedup']:6.2f}x" if "run_speedup" in f.extra else "      -"
        lines.append(f"  {i:>3} {f.label:<44} {f.tau:5.2f} {f.tau_lo:6.2f}-{f.tau_hi:<6.2f} {1e3 * f.step_s:8.2f} "
                     f"{f.speedup:7.2f}x {f.speedup_lo:6.2f}-{f.speedup_hi:.2f}x {run}{tree}")
    lines.append(f"  (target-only: {1e3 * advice.cost.base_step_s:.2f} ms per step, 1.00x)")
    for n in advice.notes:
        lines.append(f"Note: {n}")
    lines += [""] + advice.verdicts
    return "\n".join(lines)


def format_runs(runs: Sequence[dict[str, Any]]) -> str:
    """Predicted vs measured, one line per configuration that ran."""
    lines = ["Predicted vs measured (speedup = tokens/s over target-only on the same prompts, prefill included; "
             "'loop': the decode loop's prediction the ranking uses, 'run': with both prefills, compared; 'median': "
             "the median over prompts, which a stalled run cannot drag):",
             f"  {'configuration':<44} {'tau pred':>8} {'tau meas':>8} {'loop':>7} {'run':>7} {'meas':>7} {'error':>7} "
             f"{'median':>7} {'error':>7}"]
    for r in runs:
        meas = f"{r['measured_speedup']:6.2f}x" if r["measured_speedup"] is not None else "      -"
        med = f"{r['measured_median']:6.2f}x" if r.get("measured_median") is not None else "      -"
        err_med = f"{100 * r['error_median']:+6.0f}%" if r.get("error_median") is not None else "      -"
        tau = f"{r['measured_tau']:8.2f}" if r["measured_tau"] is not None else "       -"
        err = f"{100 * r['error']:+6.0f}%" if r["error"] is not None else "      -"
        label = r["spec"] + (f" [{r['schedule']}]" if r.get("schedule") else "")
        lines.append(f"  {label + ' k=' + str(r['k']):<44} {r['predicted_tau']:8.2f} {tau} "
                     f"{r['predicted_speedup_loop']:6.2f}x {r['predicted_speedup']:6.2f}x {meas} {err} {med} {err_med}")
    return "\n".join(lines)
