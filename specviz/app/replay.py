"""Replay a recorded run (a trace file) step by step, as if it were a live ``engine.Session``.

One mechanism for every recorded run: a trace the user uploads to the playground, and a run
recorded in one go on a ZeroGPU worker and stepped through in the app. :class:`Replay` has the
parts of ``Session`` the app reads: ``steps`` (grows by one record per :meth:`step`), ``done``,
``prefill_ms``, ``target_forwards`` and ``stats()``; plus the trace's ``header`` and ``records``.
"""

from __future__ import annotations

from typing import Any

from ..core.engine import compute_stats
from ..core.hooks import load_trace
from ..core.records import Stats, StepRecord


class Replay:
    """A recorded run. ``shown="all"`` starts with every step shown (an uploaded trace: inspect
    it at once, :meth:`rewind` to replay it); ``shown="none"`` starts empty (a fresh recording)."""

    def __init__(self, path: str, *, shown: str = "none", empty_message: str = "the recorded run has no steps",
                 end_message: str = "the recorded run has no more steps"):
        if shown not in ("all", "none"):
            raise ValueError(f"shown must be 'all' or 'none', got {shown!r}")
        trace = load_trace(path)
        if not trace.steps:
            raise ValueError(empty_message)
        self.path = path
        self.header: dict[str, Any] = trace.header
        self.records: tuple[StepRecord, ...] = trace.steps  # the whole run
        self._final: Stats | None = trace.stats
        self.prefill_ms = trace.stats.prefill_ms if trace.stats else 0.0
        self.end_message = end_message
        self.steps: list[StepRecord] = list(self.records) if shown == "all" else []

    @property
    def done(self) -> bool:
        return len(self.steps) >= len(self.records)

    @property
    def target_forwards(self) -> int:
        """The prefill and one verify per step, as ``engine.Session`` counts; the recorded total at the end."""
        if self.done and self._final is not None:
            return self._final.target_forwards
        return len(self.steps) + 1 if self.steps else 0

    def step(self) -> StepRecord:
        """The next recorded step; ValueError (``end_message``) after the last one."""
        if self.done:
            raise ValueError(self.end_message)
        record = self.records[len(self.steps)]
        self.steps.append(record)
        return record

    def rewind(self) -> None:
        """Back to before the first step (the same list object, emptied)."""
        self.steps.clear()

    def stats(self) -> Stats:
        return compute_stats(self.steps, self.prefill_ms, self.target_forwards)


__all__ = ["Replay"]
