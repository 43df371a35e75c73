"""Benchmark summary rows as the figures and the readout read them (no plotting)."""

from __future__ import annotations

from typing import Any, Mapping

from ..analysis.prediction import augment_rows
from .bench_marks import with_marks

Row = Mapping[str, Any]

__all__ = ["report_rows"]


def report_rows(report: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The report's summary rows with the per-position prediction added (prediction.augment_rows)
    and what the plots mark (bench_marks.with_marks: prefill-dominated runs)."""
    rows = list((report or {}).get("rows") or [])
    prompt_rows = list((report or {}).get("prompt_rows") or [])
    return with_marks(augment_rows(rows, prompt_rows), prompt_rows) if rows else []

