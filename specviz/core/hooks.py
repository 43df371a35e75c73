"""Observers of a decoding run, in the style of transformers' TrainerCallback.

A hook never changes the run: it is told what happened. Debug output, traces, UI updates and
metrics all go through hooks, never through ``if verbose:`` inside the decoding loop.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Iterable

from .records import Stats, StepRecord

if TYPE_CHECKING:  # pragma: no cover
    from .algorithm import Verification
    from .engine import Session
    from .records import GenerationResult, Proposal

TRACE_VERSION = 1  # the header's "version"; load_trace reads this one and every older one


class Hook:
    """Base class: every method is a no-op; override the ones you need."""

    def on_start(self, session: "Session") -> None: ...

    def on_draft(self, session: "Session", proposal: "Proposal") -> None: ...

    def on_verify(self, session: "Session", verification: "Verification") -> None: ...

    def on_step(self, session: "Session", record: StepRecord) -> None: ...

    def on_finish(self, session: "Session", result: "GenerationResult") -> None: ...


class HookList(Hook):
    """Calls each hook in order."""

    def __init__(self, hooks: Iterable[Hook] = ()):
        self.hooks = list(hooks)

    def on_start(self, session):
        for h in self.hooks:
            h.on_start(session)

    def on_draft(self, session, proposal):
        for h in self.hooks:
            h.on_draft(session, proposal)

    def on_verify(self, session, verification):
        for h in self.hooks:
            h.on_verify(session, verification)

    def on_step(self, session, record):
        for h in self.hooks:
            h.on_step(session, record)

    def on_finish(self, session, result):
        for h in self.hooks:
            h.on_finish(session, result)


class TraceRecorder(Hook):
    """Writes a JSONL trace: a header (models, settings, seed), one line per step, a footer.

    ``TraceRecorder(path)`` writes a file; ``TraceRecorder(stream)`` writes to an open text
    stream. ``load_trace`` reads it back into StepRecords.
    """

    def __init__(self, dest: str | Path | IO[str]):
        self._dest = dest
        self._fh: IO[str] | None = None

    def _write(self, obj: dict[str, Any]) -> None:
        assert self._fh is not None
        self._fh.write(json.dumps(obj, ensure_ascii=False) + "\n")

    def on_start(self, session):
        if isinstance(self._dest, (str, Path)):
            self._fh = open(self._dest, "w", encoding="utf-8")
        else:
            self._fh = self._dest
        self._write({"type": "header", "version": TRACE_VERSION, **session.describe()})

    def on_step(self, session, record):
        self._write({"type": "step", **record.to_dict()})

    def on_finish(self, session, result):
        self._write({"type": "finish", "text": result.text, "finished": result.finished, "stats": result.stats.to_dict()})
        if isinstance(self._dest, (str, Path)) and self._fh is not None:
            self._fh.close()
        else:
            self._fh.flush()  # type: ignore[union-attr]


@dataclass(frozen=True)
class Trace:
    header: dict[str, Any]
    steps: tuple[StepRecord, ...]
    stats: Stats | None
    text: str | None


def load_trace(source: str | Path | IO[str] | Iterable[str]) -> Trace:
    """Read a JSONL trace written by TraceRecorder back into StepRecords.

    A damaged file (a line that is not JSON, no header first, a step line missing fields) raises
    a ValueError naming the file and the line, and so does a header of a newer (or unknown) trace
    version than ``TRACE_VERSION``; older versions load.
    """
    where = _source_name(source)
    if isinstance(source, (str, Path)):
        try:
            with open(source, encoding="utf-8") as fh:
                lines = fh.read().splitlines()
        except UnicodeDecodeError:
            raise ValueError(f"{where} is not a specviz trace: it is not UTF-8 text") from None
    else:
        lines = list(source)
    header: dict[str, Any] | None = None
    steps: list[StepRecord] = []
    stats = text = None
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        at = f"{where}, line {n}"
        try:
            obj = json.loads(line)
        except ValueError as exc:
            raise ValueError(f"{at}: not JSON ({exc}); the file is damaged or not a specviz trace "
                             "(write traces with specviz.TraceRecorder)") from None
        if not isinstance(obj, dict) or not isinstance(obj.get("type"), str):
            raise ValueError(f"{at}: not a trace line (a JSON object with a \"type\"); the file is damaged "
                             "or not a specviz trace")
        kind = obj.pop("type")
        if kind == "header":
            _check_version(obj.get("version", 1), at)  # a header without one: the first version
        if header is None and kind != "header":
            raise ValueError(f"{at}: a {kind!r} line before the header; a specviz trace starts with its header "
                             "line (models, settings, seed): the file is cut or not a trace")
        try:
            if kind == "header":
                header = obj
            elif kind == "step":
                steps.append(StepRecord.from_dict(obj))
            elif kind == "finish":
                stats = Stats(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in obj["stats"].items()})
                text = obj.get("text")
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"{at}: a {kind} line with missing or bad fields ({exc}); the file is damaged "
                             "or from another version of specviz") from None
    if header is None:
        raise ValueError(f"{where} is not a specviz trace: it has no header line (write traces with specviz.TraceRecorder)")
    return Trace(header, tuple(steps), stats, text)


def _check_version(version: Any, at: str) -> None:
    """ValueError unless ``version`` is a trace version this specviz reads (1..TRACE_VERSION)."""
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ValueError(f"{at}: the header's trace version {version!r} is not one specviz knows "
                         f"(versions 1 to {TRACE_VERSION}); the file is damaged or not a specviz trace")
    if version > TRACE_VERSION:
        raise ValueError(f"{at}: a trace of version {version}, newer than this specviz reads (versions 1 to "
                         f"{TRACE_VERSION}); upgrade specviz to load it")


def _source_name(source: Any) -> str:
    """How error messages name a trace: the file's name, else the stream's, else "the trace"."""
    if isinstance(source, (str, Path)):
        return Path(source).name
    name = getattr(source, "name", None)
    return Path(name).name if isinstance(name, str) else "the trace"
