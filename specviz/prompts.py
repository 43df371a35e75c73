"""Prompt sets: the bundled Spec-Bench dev prompts, JSONL files, or plain lines of text."""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

BUNDLED = "specbench-dev.jsonl"


@dataclass(frozen=True)
class PromptRow:
    prompt: str
    category: str = "custom"
    id: str = ""
    set_name: str = ""  # the named set a line belongs to in a file that holds several (benchmarks/prompts/)


def bundled_path() -> Path:
    return Path(str(resources.files("specviz") / "data" / "prompts" / BUNDLED))


def read_jsonl(path: str | Path) -> list[PromptRow]:
    """Rows with ``turns[0]`` (Spec-Bench) or ``prompt``; ``category``, an id and ``set`` are optional."""
    rows = []
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as exc:
            raise ValueError(f"{path}: line {n} is not JSON ({exc})") from exc
        text = obj.get("prompt") if isinstance(obj.get("prompt"), str) else (obj.get("turns") or [None])[0]
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"{path}: line {n} has neither a 'prompt' string nor 'turns'[0]")
        rows.append(PromptRow(text, str(obj.get("category", "custom")), str(obj.get("question_id", obj.get("id", n))),
                              str(obj.get("set", ""))))
    return rows


def from_lines(text: str) -> list[PromptRow]:
    """One prompt per non-empty line (the app's "your own prompts" box)."""
    return [PromptRow(line.strip(), "custom", str(i)) for i, line in enumerate(text.splitlines(), 1) if line.strip()]


def load_prompts(path: str | Path | None = None, categories: list[str] | None = None, limit: int | None = None,
                 sets: list[str] | None = None) -> list[PromptRow]:
    """Prompts from ``path`` (default: the bundled Spec-Bench dev set), optionally filtered by
    set and category, taking every category in turn (round robin) so a small ``limit`` still mixes
    them. A set is filtered first, so one set of a merged file comes out in the order (and the
    round robin) it had as a file of its own: a past command stays reproducible."""
    rows = read_jsonl(path or bundled_path())
    if sets:
        rows = [r for r in rows if r.set_name in set(sets)]
    if categories:
        rows = [r for r in rows if r.category in set(categories)]
    by_cat: dict[str, list[PromptRow]] = {}
    for r in rows:
        by_cat.setdefault(r.category, []).append(r)
    mixed: list[PromptRow] = []
    queues = list(by_cat.values())
    while any(queues):
        for q in queues:
            if q:
                mixed.append(q.pop(0))
    return mixed[:limit] if limit else mixed


def categories(path: str | Path | None = None) -> list[str]:
    seen: dict[str, None] = {}
    for r in read_jsonl(path or bundled_path()):
        seen.setdefault(r.category, None)
    return list(seen)


def set_names(path: str | Path | None = None) -> list[str]:
    """The named sets of a prompt file, in file order (empty when its lines carry none)."""
    seen: dict[str, None] = {}
    for r in read_jsonl(path or bundled_path()):
        if r.set_name:
            seen.setdefault(r.set_name, None)
    return list(seen)


def empty_reason(path: str | Path | None, sets: list[str] | None) -> str:
    """Why a selection came out empty, as one line: a set the file does not hold, else its categories."""
    names = set_names(path)
    missing = [s for s in sets or () if s not in names]
    if missing:
        return f"no prompt set {', '.join(missing)} in {path or 'the bundled prompts'} (sets: {', '.join(names) or 'none'})"
    return f"no prompts selected (categories available: {', '.join(categories(path))})"
