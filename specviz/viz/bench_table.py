"""The Benchmark's table of summary rows: its columns, their tooltips (METRICS' definitions) and
display values; the cells made of several keys (the median's interval, the stalled runs, the
prefill-dominated runs) are built
here. No plotting."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from ..analysis.metrics import METRICS
from ..analysis.noise import ONE_RUN
from .bench_marks import PREFILL_RULE

Row = Mapping[str, Any]
_METRICS = {m.name: m for m in METRICS}

__all__ = ["TABLE_COLUMNS", "table_help", "table_rows"]

TABLE_COLUMNS = [
    ("proposer", "proposer", None), ("k", "k", None), ("impl", "impl", None), ("prompts", "prompts", None),
    ("new_tokens", "tokens", None), ("tokens_per_s", "tok/s", ".2f"), ("ms_per_token", "ms/token", ".1f"),
    ("speedup", "speedup", ".2f"), ("speedup_median", "median speedup", ".2f"), ("speedup_band", "90% interval", None),
    ("verdict", "verdict", None), ("stalls", "stalled runs", None), ("prefill", "prefill-dominated runs", None),
    ("speedup_vs_specviz", "vs specviz target-only", ".2f"), ("acceptance_rate", "acceptance a", ".3f"),
    ("mean_acceptance_length", "tokens/step", ".2f"), ("c", "c", ".3f"), ("v", "v", ".2f"),
    ("predicted_speedup", "predicted (i.i.d.)", ".2f"), ("nodes_per_step", "nodes/step", ".2f"),
    ("predicted_tau_positional", "tokens/step predicted", ".2f"),
    ("predicted_speedup_positional", "speedup predicted", ".2f"), ("same_as_target", "same text", ".2f"),
]


def table_help() -> list[str]:
    """Each TABLE_COLUMNS column's definition (METRICS; "" for the configuration's own columns),
    for header tooltips."""
    derived = {"speedup_band": _METRICS["speedup_low"].definition.replace("the low end of ", ""),
               "stalls": f"{_METRICS['reruns'].definition}; {_METRICS['flagged_runs'].definition}",
               "prefill": f"runs with {PREFILL_RULE} (they measure the prompt's forward pass, not speculation)"}
    return [_METRICS[key].definition if key in _METRICS else derived.get(key, "") for key, _, _ in TABLE_COLUMNS]


def _derived_cells(r: Row) -> dict[str, Any]:
    """The table's cells made of several keys: the median's interval, the stalled runs (re-run /
    left out, "" when none), the prefill-dominated runs ("1 of 4", "" when none)."""
    low, high = r.get("speedup_low"), r.get("speedup_high")
    band = f"{low:.2f}–{high:.2f}" if low is not None and high is not None and r.get("k") else None
    if band and r.get("verdict") == ONE_RUN:  # a median of one ratio: no interval
        band = "none: one run"
    reruns, flagged = r.get("reruns") or 0, r.get("flagged_runs") or 0
    stalls = " ".join(p for p in (f"{reruns} re-run" if reruns else "", f"{flagged} left out" if flagged else "") if p)
    prefill = f"{r['prefill_runs']} of {r['timed_runs']}" if r.get("prefill_runs") else None
    return {"speedup_band": band, "stalls": stalls or None, "prefill": prefill}


def table_rows(rows: Sequence[Row]) -> tuple[list[str], list[list[Any]]]:
    """(headers, rows of display values) for a table of summary rows."""
    headers = [h for _, h, _ in TABLE_COLUMNS]
    body = []
    for r in rows:
        line = []
        derived = _derived_cells(r)
        for key, _, fmt in TABLE_COLUMNS:
            v = derived[key] if key in derived else r.get(key)
            if v is None:
                line.append("")
            elif fmt and isinstance(v, (int, float)):
                line.append(format(v, fmt))
            else:
                line.append(v)
        body.append(line)
    return headers, body
