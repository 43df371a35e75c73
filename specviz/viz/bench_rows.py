"""Benchmark summary rows as the figures and the readout read them (no plotting)."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from ..analysis.prediction import augment_rows

Row = Mapping[str, Any]

__all__ = ["report_rows"]


def report_rows(report: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The report's summary rows with the per-position prediction added (prediction.augment_rows)."""
    rows = list((report or {}).get("rows") or [])
    prompt_rows = list((report or {}).get("prompt_rows") or [])
    return augment_rows(rows, prompt_rows) if rows else []


def _chain_a(rows: Sequence[Row]) -> float | None:
    """The pooled acceptance rate of the chain rows (accepted / drafted), for the theory line."""
    acc = sum(r.get("accepted") or 0 for r in rows if r.get("impl") == "specviz" and r.get("k") and not r.get("tree"))
    dra = sum(r.get("drafted") or 0 for r in rows if r.get("impl") == "specviz" and r.get("k") and not r.get("tree"))
    return acc / dra if dra else None
