"""What ``specviz advise`` leaves behind: the ranking and the runs in words, the pick the proposer
``auto`` reads and the tree shapes ``shape=auto`` reads (saved in this machine's cache
directory). The advice itself: :mod:`specviz.bench.advise`."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from ..analysis.noise import ONE_RUN, is_wide
from ..proposers.advised import AdvisedPick, save_pick

if TYPE_CHECKING:
    from .advise import Advice

__all__ = ["format_advice", "format_runs", "next_step", "pick_of", "runs_summary", "save_advice", "save_shapes", "sweep_words"]


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


def _auto_runs(f: Any, ks: Sequence[int] = ()) -> bool:
    """A forecast ``auto`` can run (constant k, drafts kept, predicted to pay), at one of ``ks`` when given."""
    return f.tau > 1.0 and f.pays and "schedule" not in f.extra and (not ks or f.k in ks)


def _within(advice: Advice, ks: Sequence[int]) -> tuple[int, ...]:
    """``ks`` where the ranking predicts at least one of them, else () (any k: :func:`next_step` says why)."""
    return tuple(ks) if set(ks) & {f.k for f in advice.forecasts} else ()


def pick_of(advice: Advice, ks: Sequence[int] = ()) -> AdvisedPick:
    """The first of the ranking run at constant k as the pick ``auto`` runs ("none" when nothing
    is predicted to pay; ``auto`` runs constant k, so a confidence schedule's forecasts are left out).
    ``ks``: the k the user will run (the Benchmark sweep's k list): the pick is among them, so
    the advice names a configuration the sweep measures (:func:`next_step` says what was passed over)."""
    top = next((f for f in advice.forecasts if _auto_runs(f, _within(advice, ks))), None)
    if top is None:
        return AdvisedPick(advice.target, "none", 1, 1.0, 1.0, advice.cost.machine)
    return AdvisedPick(advice.target, top.spec, top.k, top.speedup, top.tau, advice.cost.machine)


def save_advice(advice: Advice, ks: Sequence[int] = ()) -> list[str]:
    """Save what ``auto`` and ``shape=auto`` read back (the pick among ``ks`` when given, the tree
    shapes) in this machine's cache directory; -> what was saved, in words."""
    from ..proposers.ngram_tree import advised_shapes_path

    said = []
    if advice.shapes:
        save_shapes(advised_shapes_path(), advice)
        said.append("tree shapes for shape=auto: " + ", ".join(f"{b} -> {s}" for b, s in advice.shapes.items()))
    pick = pick_of(advice, ks)
    save_pick(pick)
    said.append(f"the pick for the proposer auto: {pick.spec}" + (f" k={pick.k}" if pick.pays else " (target-only)"))
    return said


def _ks_words(ks: Sequence[int]) -> str:
    return ", ".join(str(k) for k in sorted(ks))


def next_step(advice: Advice, ks: Sequence[int] = ()) -> str:
    """What to do now, in two or three sentences: the configuration to use (the pick among ``ks``,
    the k the user will run), that ``specviz generate --proposer auto`` now picks it, what the next
    smaller k would cost, and, when the ranking's top lies outside ``ks``, why it was not picked."""
    pick, free = pick_of(advice, ks), pick_of(advice)
    out = ""
    if ks and not _within(advice, ks):
        out = (f"The advisor predicts k = {_ks_words({f.k for f in advice.forecasts})}, none of the k you will run "
               f"({_ks_words(ks)}): it picks among all of them. ")
        ks = ()
    among = f" among the k you will run ({_ks_words(ks)})" if ks else ""
    if not pick.pays:
        out += (f"Next step: nothing is predicted to pay{among}: keep target-only decoding "
               "(`specviz generate --proposer auto` now runs the target alone).")
    else:
        out += (f"Next step: use {pick.spec} at k = {pick.k} (predicted {pick.speedup:.2f}x): "
               "`specviz generate --proposer auto` now picks it.")
        smaller = [f for f in advice.forecasts if f.spec == pick.spec and "schedule" not in f.extra and f.k < pick.k]
        if smaller:
            f = max(smaller, key=lambda f: f.k)
            out += (f" A smaller k = {f.k} would give {f.speedup:.2f}x, "
                    f"{100 * (pick.speedup - f.speedup) / pick.speedup:.0f}% less.")
        else:
            out += " No smaller k was predicted for it (k = 1 is the least a chain drafts)."
    if ks and free.pays and free.k not in ks:
        out += (f" The ranking's top, {free.spec} at k = {free.k} ({free.speedup:.2f}x), is not among the k you will run: "
                f"add k = {free.k} to the sweep to measure it.")
    return out


def _band_words(r: dict[str, Any]) -> str:
    low, high = r.get("speedup_low"), r.get("speedup_high")
    band = f", 90% interval {low:.2f}-{high:.2f}x" if low is not None and high is not None and low < high else ", one run"
    return f"{r['speedup_median']:.2f}x{band}"


def sweep_words(advice: Advice, report: dict[str, Any] | None, ks: Sequence[int] = ()) -> str:
    """The pick beside what the Benchmark sweep on the page measured for the same target: the pick's
    own measurement, and a configuration the sweep measured above the pick's interval: faster, the
    one to use, when its whole interval is clear of the pick's; else higher, with what would settle
    it (more prompts). The walk's built-in
    sweep measured ngram k=2 at 1.98x (1.67-2.29x) while the advice said "use the draft at k = 4"
    (measured 1.54x, 1.27-1.81x) and nothing on the page set the two side by side. "" without a sweep."""
    if not report or (report.get("meta") or {}).get("target") != advice.target:
        return ""
    rows = [r for r in report.get("rows") or [] if r.get("impl") == "specviz" and r.get("k")
            and isinstance(r.get("speedup_median"), (int, float))]
    pick = pick_of(advice, ks)
    mine = next((r for r in rows if r["proposer"] == pick.spec and r["k"] == pick.k), None)
    if not rows or not pick.pays:
        return ""
    best = max(rows, key=lambda r: r["speedup_median"])
    if mine is None:
        return (f"The sweep above did not run {pick.spec} at k = {pick.k}; its fastest was {best['proposer']} at "
                f"k = {best['k']} ({_band_words(best)}).")
    said = f"The sweep above measured the pick at {_band_words(mine)}."
    top = mine.get("speedup_high") or mine["speedup_median"]
    if best is mine or best["speedup_median"] <= top:
        return said
    clear = best.get("verdict") != ONE_RUN and best.get("speedup_low") is not None  # one run: no interval to be clear
    if clear and best["speedup_low"] > top:  # the whole interval above the pick's
        return said + (f" It measured {best['proposer']} at k = {best['k']} faster ({_band_words(best)}): on this machine "
                       f"the measurement decides, so use that (`--proposer {best['proposer']} --k {best['k']}`) and read "
                       "the pick as the advisor's estimate.")
    return said + (f" It measured {best['proposer']} at k = {best['k']} higher ({_band_words(best)}), above the pick's "
                   "interval but not clear of it: more prompts would tell which is faster here.")


def _mean_abs(vals: Sequence[float]) -> str:
    return f"{100 * sum(abs(v) for v in vals) / len(vals):.0f}%"


def runs_summary(runs: Sequence[dict[str, Any]], prompts: int) -> str:
    """After Run the top N: the mean absolute error of the speedup and of tau (tokens per step, the
    acceptance half of the prediction, scored on its own), and one sentence per configuration whose
    measured interval is wide, saying why: the median over few prompts whose speedups differ."""
    errors = [r["error"] for r in runs if r.get("error") is not None]
    taus = [(r["measured_tau"] - r["predicted_tau"]) / r["predicted_tau"] for r in runs
            if r.get("measured_tau") is not None and r.get("predicted_tau")]
    parts = [f"Ran {len(runs)} configurations beside target-only."]
    if errors or taus:
        scored = [f"speedup {_mean_abs(errors)}" if errors else "", f"tau {_mean_abs(taus)}" if taus else ""]
        parts.append("Mean absolute error: " + ", ".join(p for p in scored if p) + ".")
    parts += _predicted_wide(runs)
    for r in runs:
        low, high = (r.get("measured_interval") or [None, None])[:2]
        med = r.get("measured_median")
        if low is None or high is None or not med or not is_wide(low, high, med):
            continue
        parts.append(f"{r['spec']} k={r['k']}'s interval {low:.2f}-{high:.2f}x around {med:.2f}x is wide because it is "
                     f"the median of only {prompts} prompt{'s' if prompts != 1 else ''} whose speedups differ: "
                     "more prompts (or repeats) narrow it.")
    return " ".join(parts)


def _predicted_wide(runs: Sequence[dict[str, Any]]) -> list[str]:
    """A sentence per configuration whose predicted 95% interval (the runs table's "loop 95%") is
    wide, then one on why: the page showed 1.03-2.06x around 1.29x and said nothing of it (issue 52)."""
    out = []
    for r in runs:
        low, high = (r.get("interval") or [None, None])[:2]
        point = r.get("predicted_speedup_loop")
        if low is None or high is None or not point or not is_wide(low, high, point):
            continue
        out.append(f"{r['spec']} k={r['k']}'s predicted interval {low:.2f}-{high:.2f}x around {point:.2f}x is wide"
                   + (" and reaches 1.0x." if low <= 1.0 else "."))
    if out:
        out.append("A predicted interval takes every position's acceptance rate at the 95% bound its calibration counts "
                   "allow, all at once; the deeper positions are drafted less often, so it widens with k: more drafted "
                   "tokens to calibrate on (or more prompts) narrow it.")
    return out


# where benchmarks/advisor_check.py publishes the advisor's own error (--record); absent from an installed package
ERROR_RECORD = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "advisor-error.json"


def published_error(path: str | Path | None = None) -> dict[str, Any] | None:
    """The last held-out check's record (``benchmarks/advisor_check.py --record``), or None where
    there is none or it cannot be read: the advisor's error is shown only as measured, never assumed."""
    try:
        rec = json.loads(Path(path or ERROR_RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    sm = rec.get("summary") if isinstance(rec, dict) else None
    return rec if isinstance(sm, dict) and sm.get("configurations") and sm.get("mean_abs_error") is not None else None


def error_words(rec: dict[str, Any] | None) -> str:
    """One sentence: the advisor's error in its last held-out check, where and how it ran, and its
    command; or that no check is recorded here."""
    if rec is None:
        return ("The advisor's own error: no held-out check is recorded here (run benchmarks/advisor_check.py; "
                "docs/advisor.md, 'How to check the advisor').")
    sm, cpu = rec["summary"], rec.get("cpu") or {}
    worst = sm.get("worst") or {}
    where = f"{cpu.get('model_name', 'unknown CPU')} (family {cpu.get('family')}, model {cpu.get('model')}), " \
            f"{cpu.get('torch_threads')} threads"
    kinds = rec.get("kinds") or {}
    prompts = sum(len(v) for v in kinds.values())
    on = f"{prompts} held-out prompts of {len(kinds)} kinds" if kinds else f"the prompts of {rec.get('prompts')}"
    return (f"The advisor's own error, from its last held-out check ({str(rec.get('date', ''))[:10]}, {where}; "
            f"{sm['configurations']} chain configurations at k = {', '.join(map(str, rec.get('ks') or []))} on {on}, "
            f"{rec.get('max_new_tokens')} tokens): its whole-run speedups were {100 * sm['mean_abs_error']:.1f}% from the "
            f"measured medians on average, at worst {100 * sm['max_abs_error']:.1f}% ({worst.get('configuration')} "
            f"k={worst.get('k')}), {sm['too_high']} of {sm['configurations']} too high. Rerun: "
            f"`python {rec.get('command', 'benchmarks/advisor_check.py')}`.")


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
    lines += [""] + advice.verdicts + [error_words(published_error())]
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
