"""Per-prompt rows -> one summary row per configuration (see :mod:`specviz.bench` for the aggregation)."""

from __future__ import annotations

import statistics
from typing import Any, Mapping, Sequence

from ..analysis import metrics
from .config import TARGET_ONLY, RunSpec
from .rows import PromptResult, SummaryRow


def _sum(rows: Sequence[PromptResult], key: str) -> float | None:
    vals = [getattr(r, key) for r in rows]
    return None if any(v is None for v in vals) else sum(vals)


def summarize(prompt_rows: Sequence[PromptResult | Mapping[str, Any]], order: Sequence[RunSpec] | None = None) -> list[SummaryRow]:
    """Per-prompt rows (typed, or records read from a report) -> one summary row per
    (proposer, k, impl), in ``order`` when given (see :mod:`specviz.bench` for the aggregation)."""
    groups: dict[tuple[str, int, str], list[PromptResult]] = {}
    for record in prompt_rows:
        r = PromptResult.from_record(record)
        groups.setdefault((r.proposer, r.k, r.impl), []).append(r)
    keys = [(s.proposer, s.k, s.impl) for s in order if (s.proposer, s.k, s.impl) in groups] if order else list(groups)
    keys += [k for k in groups if k not in keys]
    bases = {impl: groups.get((TARGET_ONLY, 0, impl), []) for impl in ("specviz", "hf")}
    base_step_ms = None
    sv = bases["specviz"]
    if sv:
        steps = sum(r.steps for r in sv)
        base_step_ms = (sum(r.draft_ms + r.verify_ms + r.other_ms for r in sv) / steps) if steps else None
    return [_summary(groups[key], *key, bases, base_step_ms) for key in keys]


def _summary(rows: list[PromptResult], proposer: str, k: int, impl: str, bases: dict[str, list[PromptResult]],
             base_step_ms: float | None) -> SummaryRow:
    n = sum(r.new_tokens for r in rows)
    wall = sum(r.wall_s for r in rows)
    per = [r.speedup for r in rows if r.speedup is not None]
    steps = sum(r.steps for r in rows)
    drafted, accepted = _sum(rows, "drafted"), _sum(rows, "accepted")
    width = max((len(r.per_position_hits or []) for r in rows), default=0)
    hits, trials = [0] * width, [0] * width
    for r in rows:
        for i, (h, t) in enumerate(zip(r.per_position_hits or [], r.per_position_trials or [])):
            hits[i] += h
            trials[i] += t
    ms = {name: _sum(rows, name) for name in ("draft_ms", "verify_ms", "other_ms", "prefill_ms")}
    step_ms = (ms["draft_ms"] + ms["verify_ms"] + ms["other_ms"]) / steps if impl == "specviz" and steps else None
    a = (accepted / drafted) if drafted else None
    c = v = expected = predicted = None
    if impl == "specviz" and k > 0 and base_step_ms:
        c = metrics.measured_c(ms["draft_ms"], drafted or 0, base_step_ms)
        v = metrics.measured_v(ms["verify_ms"], ms["other_ms"], steps, base_step_ms)
        if a is not None and not any(r.tree_steps for r in rows):  # the i.i.d. chain formula; trees: see prediction.py
            expected = metrics.expected_tokens_per_step(a, k)
            predicted = metrics.predicted_speedup(a, k, c, v)
    same = [r.same_as_target for r in rows if r.same_as_target is not None]
    return SummaryRow(
        proposer=proposer, k=k, impl=impl, prompts=len(rows), new_tokens=n, wall_s=wall,
        tokens_per_s=n / wall if wall > 0 else 0.0, ms_per_token=1e3 * wall / n if n else None,
        speedup=_ratio(rows, bases[impl]), speedup_vs_specviz=_ratio(rows, bases["specviz"]),
        speedup_median=statistics.median(per) if per else None,
        steps=steps, drafted=drafted, accepted=accepted, acceptance_rate=a,
        mean_acceptance_length=n / steps if steps else None,
        per_position=metrics.per_position_rates(hits, trials),
        nodes_per_step=(drafted / steps) if drafted is not None and steps else None,
        tree=any(r.tree_steps for r in rows), **ms, step_ms=step_ms,
        c=c, v=v, expected_tokens_per_step=expected, predicted_speedup=predicted,
        same_as_target=(sum(same) / len(same)) if same else None,
    )


def _ratio(rows: Sequence[PromptResult], base: Sequence[PromptResult]) -> float | None:
    """tokens/s of ``rows`` over tokens/s of ``base``, both on the prompts they share."""
    if not base:
        return None
    shared = {r.prompt_index for r in rows} & {b.prompt_index for b in base}
    if not shared:
        return None
    num_n = sum(r.new_tokens for r in rows if r.prompt_index in shared)
    num_t = sum(r.wall_s for r in rows if r.prompt_index in shared)
    den_n = sum(b.new_tokens for b in base if b.prompt_index in shared)
    den_t = sum(b.wall_s for b in base if b.prompt_index in shared)
    if num_t <= 0 or den_t <= 0 or den_n <= 0:
        return None
    return (num_n / num_t) / (den_n / den_t)
