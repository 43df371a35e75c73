"""Report output: the JSON file (schema ``specviz.bench/1``), the CSV of summary rows, a text table.

No HTML here: the lab sits below the figures, so a caller that wants the standalone page passes
its renderer (``write_reports(..., html_renderer=specviz.viz.bench.report_html)``)."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ..analysis.metrics import METRICS
from .config import SCHEMA
from .rows import Row, to_record

# The configuration, then every metric of the summary rows (their definitions: METRICS).
CSV_COLUMNS = ["proposer", "k", "impl", *(m.name for m in METRICS if m.csv)]


def _cell(v: Any) -> Any:
    if isinstance(v, float):
        return round(v, 6)
    if isinstance(v, (list, tuple)):
        return ";".join(f"{x:.4f}" if isinstance(x, float) else str(x) for x in v)
    return "" if v is None else v


def csv_text(rows: Sequence[Row | Mapping[str, Any]]) -> str:
    """Summary rows (typed or records) as CSV text, one line per row, columns ``CSV_COLUMNS``."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for row in rows:
        r = to_record(row)
        w.writerow({c: _cell(r.get(c)) for c in CSV_COLUMNS})
    return buf.getvalue()


def write_csv(rows: Sequence[Row | Mapping[str, Any]], path: str | Path) -> Path:
    p = Path(path)
    p.write_text(csv_text(rows), encoding="utf-8")
    return p


def _json_safe(obj: Any) -> Any:
    if hasattr(obj, "KIND"):  # a typed row
        obj = to_record(obj)
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    return obj


def write_json(report: Mapping[str, Any], path: str | Path) -> Path:
    """The report as JSON (typed rows written through ``to_record``; NaN and inf as null)."""
    p = Path(path)
    p.write_text(json.dumps(_json_safe(report), indent=1, ensure_ascii=False), encoding="utf-8")
    return p


def load_report(path: str | Path) -> dict[str, Any]:
    """Read a report written by ``write_json`` (checks the schema)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ValueError(f"{path} is not JSON ({exc})") from exc
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise ValueError(f"{path} is not a specviz bench report (schema {SCHEMA!r})")
    return data


def write_reports(report: Mapping[str, Any], json_path: str | None = None, csv_path: str | None = None,
                  html_path: str | None = None, *,
                  html_renderer: Callable[[Mapping[str, Any]], str] | None = None) -> list[str]:
    """Write whichever of the JSON report, the CSV summary and the standalone HTML page were asked
    for (the local and the remote lab alike) -> one "X written to PATH" line per file. The page
    is ``html_renderer(report)`` (the caller's, e.g. ``specviz.viz.bench.report_html``)."""
    if html_path and html_renderer is None:
        raise ValueError("an HTML report needs html_renderer (e.g. specviz.viz.bench.report_html)")
    done = []
    if json_path:
        write_json(report, json_path)
        done.append(f"JSON written to {json_path}")
    if csv_path:
        write_csv(report["rows"], csv_path)
        done.append(f"CSV written to {csv_path}")
    if html_path:
        Path(html_path).write_text(html_renderer(report), encoding="utf-8")
        done.append(f"HTML report written to {html_path}")
    return done


def _f(v: Any, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def _band(r: Mapping[str, Any]) -> str:
    """ "1.21-1.50" (speedup_median's interval), "*" after it for a verdict within noise; "-" without one."""
    low, high = r.get("speedup_low"), r.get("speedup_high")
    if low is None or high is None or not r.get("k"):
        return "-"
    return f"{low:.2f}-{high:.2f}" + ("*" if r.get("verdict") == "within noise" else "")


def format_table(rows: Sequence[Row | Mapping[str, Any]]) -> str:
    """A plain-text table of summary rows (typed or records): "speedup" is the total (tokens over
    seconds), "median" the median of the per-prompt speedups and "90% band" its interval (a "*":
    within noise of 1.0x), "reruns" the runs a stall hit (re-run / still flagged); "predicted" is a
    row's per-position prediction where it has one (``analysis.prediction.augment_rows``), "iid"
    the i.i.d. formula's."""
    rows = [to_record(r) for r in rows]
    head = ["proposer", "k", "impl", "prompts", "tokens", "tok/s", "ms/tok", "speedup", "median", "90% band", "reruns",
            "vs specviz", "accept", "tau", "c", "v", "predicted", "iid"]
    body = [
        [
            str(r["proposer"]), str(r["k"]), r["impl"], str(r["prompts"]), str(r["new_tokens"]),
            _f(r["tokens_per_s"], ".2f"), _f(r["ms_per_token"], ".1f"), _f(r["speedup"], ".2f") + ("x" if r["speedup"] is not None else ""),
            _f(r.get("speedup_median"), ".2f") + ("x" if r.get("speedup_median") is not None else ""), _band(r),
            f"{r.get('reruns') or 0}/{r.get('flagged_runs') or 0}" if r.get("reruns") or r.get("flagged_runs") else "",
            _f(r["speedup_vs_specviz"], ".2f") if r["impl"] == "hf" else "",
            _f(r["acceptance_rate"], ".2f"), _f(r["mean_acceptance_length"], ".2f"),
            _f(r["c"], ".3f"), _f(r["v"], ".2f"), _f(r.get("predicted_speedup_positional"), ".2f"),
            _f(r["predicted_speedup"], ".2f"),
        ]
        for r in rows
    ]
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(head)]
    lines = ["  ".join(h.ljust(w) if i < 3 else h.rjust(w) for i, (h, w) in enumerate(zip(head, widths)))]
    lines.append("  ".join("-" * w for w in widths))
    for b in body:
        lines.append("  ".join(c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(zip(b, widths))))
    return "\n".join(lines)


def _version(package: str) -> str:
    try:
        from importlib.metadata import version

        return version(package)
    except Exception:  # noqa: BLE001
        return "unknown"
