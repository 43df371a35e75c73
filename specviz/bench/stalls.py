"""Runs a stalled machine slowed: which ones, and what the sweep said about them.

On a shared machine one run in a sweep can take 10-30 s where its neighbours take 1-2 s (another
job took the cores): the machine, not the configuration. Left in, it turns a configuration's
total into a false verdict and its c or v into a false explanation. So, after the last prompt,
every run is scored (:func:`specviz.analysis.noise.stall_scores`: its time per target pass over
what its configuration on the other prompts and its prompt's other configurations predict), a
run scoring over ``BenchConfig.stall_factor`` and slower by at least ``stall_min_s`` seconds is
re-run once (the re-run's numbers replace it), and a run still far out after that is *flagged*:
left out of every summary number (:mod:`specviz.bench.summary`). The report names each re-run
(configuration, prompt, seconds before and after) in ``meta["reruns"]``.

Time per target pass = wall seconds / (steps + 1), the prefill counted as one pass: a stall in
the prefill counts too, and a configuration that commits more tokens per pass is not called slow.
Pure functions of rows; the sweep does the running.
"""

from __future__ import annotations

from typing import Any, Sequence

from ..analysis.noise import stall_scores
from .rows import PromptResult


def seconds_per_pass(row: PromptResult) -> float | None:
    """A run's wall seconds per target pass, the prefill counted as one (None: no step count)."""
    if row.steps is None or row.wall_s <= 0:
        return None
    return row.wall_s / (row.steps + 1)


def scores(rows: Sequence[PromptResult]) -> list[float | None]:
    """Each row's stall score (None: nothing to compare it with), in the rows' order. A prompt is
    one pass over it (``prompt_index``), so a run is also judged against its own repeats."""
    table = {}
    for r in rows:
        x = seconds_per_pass(r)
        if x is not None:
            table[(r.prompt_index, (r.proposer, r.k, r.impl))] = x
    got = stall_scores(table)
    return [got.get((r.prompt_index, (r.proposer, r.k, r.impl))) for r in rows]


def excess_s(row: PromptResult, score: float | None) -> float:
    """Seconds this run took beyond what its score's prediction says it should have."""
    return row.wall_s - row.wall_s / score if score and score > 0 else 0.0


def stalled(rows: Sequence[PromptResult], factor: float, min_s: float) -> list[int]:
    """Indices of the rows a stall hit: scoring over ``factor`` and at least ``min_s`` seconds slow,
    worst first."""
    got = scores(rows)
    hit = [i for i, (r, s) in enumerate(zip(rows, got)) if s is not None and s > factor and excess_s(r, s) >= min_s]
    return sorted(hit, key=lambda i: -(got[i] or 0.0))


def label(row: PromptResult | dict[str, Any]) -> str:
    """ "ngram k=2 on prompt 3 (writing 81)" """
    get = row.get if isinstance(row, dict) else lambda key: getattr(row, key)
    k, impl = get("k"), get("impl")
    name = get("proposer") if not k else f"{get('proposer')} k={k}"
    name += " (hf)" if impl == "hf" else ""
    return f"{name} on prompt {get('prompt_index') + 1} ({get('category')} {get('prompt_id')})"


def rerun_record(before: PromptResult, score: float, after: PromptResult | None,
                 why_not: str = "the sweep was stopped") -> dict[str, Any]:
    """What the report keeps of one re-run (``meta["reruns"]``): who, the seconds before and after
    (``after`` None: not re-run, ``why_not``)."""
    return {
        "label": label(before), "proposer": before.proposer, "k": before.k, "impl": before.impl,
        "prompt_index": before.prompt_index, "prompt_id": before.prompt_id, "category": before.category,
        "before_s": before.wall_s, "score_before": score,
        "after_s": after.wall_s if after is not None else None,
        "score_after": after.stall_score if after is not None else None,
        "flagged": after.flagged if after is not None else True,
        **({"not_rerun": why_not} if after is None else {}),
    }


def rerun_sentence(rec: dict[str, Any]) -> str:
    """ "ngram k=2 on prompt 3 (writing 81): 14.20 s, 9.8x what its configuration and prompt predict;
    re-run once: 1.31 s (kept)." """
    head = f"{rec['label']}: {rec['before_s']:.2f} s, {rec['score_before']:.1f}x what its configuration and prompt predict"
    if rec.get("after_s") is None:
        return head + f"; not re-run ({rec.get('not_rerun') or 'the sweep was stopped'}): left out of the summary."
    tail = ("still far out, left out of the summary" if rec.get("flagged") else "kept")
    return head + f"; re-run once: {rec['after_s']:.2f} s ({tail})."


__all__ = ["excess_s", "label", "rerun_record", "rerun_sentence", "scores", "seconds_per_pass", "stalled"]
