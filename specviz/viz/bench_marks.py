"""What the Benchmark plots mark on a point, and the theory lines they draw, from the rows' own
numbers (no plotting library here: plain trace dicts).

- **Prefill-dominated**: a run whose prompt's prefill took more than half of its timed
  milliseconds (prefill / (prefill + draft + verify + other) > PREFILL_SHARE). Such a run measures
  the prompt's forward pass, not speculation: a configuration's dip at one k can be a prefill
  outlier, so the point says so instead of reading as the curve's shape.
- **Stalled**: a configuration with runs a stalled machine slowed (re-run once, or left out after
  it: :mod:`specviz.bench.stalls`).
- **Theory per proposer**: each chain proposer's theory from its own pooled a and mean c (the
  n-gram and a draft model never pooled into a configuration that does not exist).
"""

from __future__ import annotations

import html
from typing import Any, Callable, Mapping, Sequence

Row = Mapping[str, Any]

__all__ = ["PREFILL_SHARE", "PREFILL_RULE", "chain_fits", "mark_traces", "prefill_share", "with_marks"]

PREFILL_SHARE = 0.5
PREFILL_RULE = "prefill over half of the run's timed ms"


def prefill_share(r: Row) -> float | None:
    """prefill_ms / (prefill + draft + verify + other) ms of a row (a run or a configuration's sums);
    None when the row has no prefill timing or no step timings (transformers' rows, servers)."""
    parts = [r.get(key) for key in ("prefill_ms", "draft_ms", "verify_ms", "other_ms")]
    if any(not isinstance(p, (int, float)) for p in parts) or sum(parts) <= 0:
        return None
    return parts[0] / sum(parts)


def _dominated(r: Row) -> bool:
    share = prefill_share(r)
    return share is not None and share > PREFILL_SHARE


def with_marks(rows: Sequence[Row], prompt_rows: Sequence[Row] = ()) -> list[dict[str, Any]]:
    """Summary rows with ``prefill_runs`` (its runs that are prefill-dominated), ``timed_runs``
    (its runs with timings) and ``prefill_share`` (its summed prefill over its summed timed ms).
    Without per-prompt rows a configuration counts as one run, judged on its sums."""
    runs: dict[tuple, list[Row]] = {}
    for p in prompt_rows:
        if not p.get("flagged"):  # a flagged run is left out of the summary: its own mark is the stall
            runs.setdefault((p.get("proposer"), p.get("k"), p.get("impl")), []).append(p)
    out = []
    for r in rows:
        mine = [p for p in runs.get((r.get("proposer"), r.get("k"), r.get("impl")), []) if prefill_share(p) is not None]
        if not mine and prefill_share(r) is not None:
            mine = [r]
        out.append({**r, "prefill_share": prefill_share(r), "timed_runs": len(mine),
                    "prefill_runs": sum(1 for p in mine if _dominated(p))})
    return out


def _point_words(r: Row) -> str:
    words = []
    if r.get("prefill_runs"):
        words.append(f"{r['prefill_runs']} of {r['timed_runs']} runs prefill-dominated ({PREFILL_RULE})")
    if r.get("reruns") or r.get("flagged_runs"):
        words.append(f"stalled runs: {r.get('reruns') or 0} re-run, {r.get('flagged_runs') or 0} left out")
    return "<br>".join(html.escape(w, quote=False) for w in words)


def mark_traces(series: Sequence[tuple[str, str, Sequence[Row]]], key: str | Callable[[Sequence[Row]], str]) -> list[dict]:
    """Overlay markers on the k plots: an open square round each point with a prefill-dominated
    run, a cross on each point with stalled runs; legend entries that state the rule (none when
    no point is marked). ``series``: (proposer, impl, rows) as the figures group them; ``key``:
    the y value the plot shows, or a function of a series' rows that names it."""
    marks: dict[str, list[tuple[Row, float]]] = {"prefill": [], "stall": []}
    for _, _, rs in series:
        name = key(rs) if callable(key) else key
        for r in rs:
            if not isinstance(r.get(name), (int, float)):
                continue
            if r.get("prefill_runs"):
                marks["prefill"].append((r, r[name]))
            if r.get("reruns") or r.get("flagged_runs"):
                marks["stall"].append((r, r[name]))
    style = {"prefill": (f"prefill-dominated ({PREFILL_RULE})", dict(symbol="square-open", size=16, color="#64748b",
                                                                   line=dict(width=2))),
             "stall": ("stalled runs (re-run or left out)", dict(symbol="x-thin-open", size=16, color="#dc2626",
                                                                 line=dict(width=2)))}
    out = []
    for kind, pts in marks.items():
        if not pts:
            continue
        name, marker = style[kind]
        out.append(dict(type="scatter", mode="markers", name=name, x=[r["k"] for r, _ in pts], y=[y for _, y in pts],
                        marker=marker, legendgroup=f"mark-{kind}", meta=kind,
                        hovertext=[f"{html.escape(str(r['proposer']))} k={r['k']}<br>{_point_words(r)}" for r, _ in pts],
                        hoverinfo="text"))
    return out


def chain_fits(rows: Sequence[Row]) -> list[tuple[str, float, float, float | None]]:
    """(proposer, a, c, v) per chain proposer from its own rows: a pooled over its k (accepted /
    drafted), c and v the means of its rows; proposers without drafts or c are left out. Never
    pooled across proposers: an n-gram and a draft model have different a and c."""
    groups: dict[str, list[Row]] = {}
    for r in rows:
        if r.get("impl") == "specviz" and r.get("k") and not r.get("tree") and r.get("c") is not None and r.get("drafted"):
            groups.setdefault(str(r["proposer"]), []).append(r)
    out = []
    for name, rs in groups.items():
        a = sum(r.get("accepted") or 0 for r in rs) / sum(r["drafted"] for r in rs)
        vs = [r["v"] for r in rs if r.get("v") is not None]
        out.append((name, a, sum(r["c"] for r in rs) / len(rs), sum(vs) / len(vs) if vs else None))
    return out
