"""What a sweep says about its own numbers, in sentences: the CLI prints them under its table, the
Benchmark tab and the HTML report put them beside the "why (no) speedup" readout.

- a configuration whose total and whose median over prompts disagree on the side of 1.0x (the
  verdict is the median's: :mod:`specviz.bench.summary`);
- each run a stall hit, re-run once, with its seconds before and after (:mod:`specviz.bench.stalls`);
- a target-only slowed below its own verify passes (v under V_FLOOR: every speedup overstated);
- the configurations whose median rests on one run (no interval), and those whose interval is wide, and
  what would narrow it (more passes);
- the prompts that ended at once, with the reason, and the chat template on a base model
  (:mod:`specviz.bench.prompt_notes`);
- the (proposer, schedule) pairs the sweep skipped, and why.

Pure functions of a report (``{"meta", "rows"}``: records or typed rows).
"""

from __future__ import annotations

from typing import Any, Mapping

from ..analysis.noise import ONE_RUN, is_wide
from .prompt_notes import at_once_sentence
from .rows import to_record
from .stalls import rerun_sentence

REPEATS_HINT = "run again with --repeats {n} (each pass adds a ratio per prompt)"  # the CLI's; the tab passes its own


def _label(r: Mapping[str, Any]) -> str:
    return f"{r['proposer']} k={r['k']}" + (" (hf)" if r.get("impl") == "hf" else "")


def _side(x: float | None) -> str | None:
    return None if x is None else "faster" if x > 1.0 else "slower" if x < 1.0 else None


def disagreements(rows: list[Mapping[str, Any]]) -> list[str]:
    """One sentence per configuration whose total is on the other side of 1.0x from its median."""
    out = []
    for r in rows:
        med, total = r.get("speedup_median"), r.get("speedup")
        if not r.get("k") or med is None or total is None or _side(med) is None or _side(total) in (None, _side(med)):
            continue
        band = (f" (90% interval {r['speedup_low']:.2f}-{r['speedup_high']:.2f}x)"
                if r.get("speedup_low") is not None and r.get("speedup_high") is not None else "")
        out.append(f"{_label(r)}: the total says {total:.2f}x, the median over prompts {med:.2f}x{band}; the verdict is "
                   f"the median's ({r.get('verdict') or _side(med)}): a few slow or fast prompts moved the total.")
    return out


def wide_intervals(rows: list[Mapping[str, Any]]) -> list[str]:
    """Labels of the configurations whose interval is wide (:func:`specviz.analysis.noise.is_wide`)."""
    out = []
    for r in rows:
        low, high, med = r.get("speedup_low"), r.get("speedup_high"), r.get("speedup_median")
        if not r.get("k") or low is None or high is None or not med or low == high:
            continue
        if is_wide(low, high, med):
            out.append(_label(r))
    return out


V_FLOOR = 0.5  # a verify pass of k + 1 positions timed under half a target-only step: the baseline was slowed


def slow_baseline(rows: list[Mapping[str, Any]]) -> list[str]:
    """One sentence when some configuration's v (its verify pass over target-only's step) is under
    V_FLOOR: a pass that scores k + 1 positions cannot cost half a one-token step, so target-only's
    steps were slowed (a loaded machine) and every speedup over it is overstated. The walk's tiny
    sweep read v = 0.10 and 27.69x, and nothing on the page doubted them."""
    low = [r for r in rows if r.get("k") and r.get("impl") == "specviz" and isinstance(r.get("v"), (int, float))
           and r["v"] < V_FLOOR]
    if not low:
        return []
    names = ", ".join(f"{_label(r)} (v = {r['v']:.2f})" for r in low[:4]) + (f" and {len(low) - 4} more" if len(low) > 4 else "")
    return [f"target-only's steps were slower than the verify passes of {names}: a pass over k + 1 positions cannot cost "
            f"under half a one-token step, so target-only was slowed (a loaded machine?) and these speedups overstate; "
            "run the sweep again on a quieter machine."]


def noise_lines(report: Mapping[str, Any], repeats_hint: str = REPEATS_HINT) -> list[str]:
    """Every sentence (module docstring), plain text, in that order; [] when there is nothing to say.
    ``repeats_hint`` is what narrows a wide interval, with ``{n}`` for the passes to suggest."""
    meta = report.get("meta") or {}
    rows = [to_record(r) for r in report.get("rows") or []]
    lines = disagreements(rows)
    lines += [f"re-run: {rerun_sentence(rec)}" for rec in meta.get("reruns") or []]
    lines += slow_baseline(rows)
    one = [_label(r) for r in rows if r.get("k") and r.get("verdict") == ONE_RUN]
    if one:
        lines.append(f"one run each for {', '.join(one[:4])}{f' and {len(one) - 4} more' if len(one) > 4 else ''} "
                     "(one prompt's ratio, the others left out or not run): no interval and no verdict; "
                     + repeats_hint.format(n=max(3, 2 * int(meta.get("repeats") or 1))) + ".")
    wide = wide_intervals(rows)
    if wide:
        names = ", ".join(wide[:4]) + (f" and {len(wide) - 4} more" if len(wide) > 4 else "")
        n = max(3, 2 * int(meta.get("repeats") or 1))
        lines.append(f"the interval is wide or spans 1.0x for {names}: " + repeats_hint.format(n=n) + ".")
    lines += [at_once_sentence(rec) for rec in meta.get("ended_at_once") or []]
    note = meta.get("chat_note")
    if note and ("base model" in note or meta.get("ended_at_once")):
        lines.append(f"chat template: {note}")
    lines += [f"skipped {s}" for s in meta.get("schedule_skipped") or []]
    return lines


def noise_markdown(report: Mapping[str, Any], repeats_hint: str = REPEATS_HINT) -> str:
    """:func:`noise_lines` as a Markdown block under a bold title; "" when there is nothing to say."""
    lines = noise_lines(report, repeats_hint)
    if not lines:
        return ""
    return "**Reading these numbers**\n\n" + "\n".join(f"- {line[0].upper()}{line[1:]}" for line in lines)


__all__ = ["REPEATS_HINT", "disagreements", "noise_lines", "noise_markdown", "wide_intervals"]
