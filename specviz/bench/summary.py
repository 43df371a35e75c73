"""Per-prompt rows -> one summary row per configuration (see :mod:`specviz.bench` for the aggregation),
local and remote alike (a remote server's rows add what only a server gives, :class:`RemoteSummaryRow`).

A run flagged as stalled (``PromptResult.flagged``: still far outside its prompt's other runs after
its re-run, :mod:`specviz.bench.stalls`) is left out of every number of its configuration, and a
prompt whose target-only run is flagged gives no ratio; the verdict comes from the median of the
per-prompt ratios and its interval (:func:`specviz.analysis.noise.median_interval`), never from
the total, which one stalled run can drag across 1.0x."""

from __future__ import annotations

import statistics
from typing import Any, Mapping, Sequence

from ..analysis import metrics
from ..analysis.noise import ONE_RUN, median_interval
from .config import TARGET_ONLY, RunSpec
from .rows import PromptResult, RemotePromptResult, RemoteSummaryRow, SummaryRow, prompt_result


def _sum(rows: Sequence[PromptResult], key: str) -> float | None:
    vals = [getattr(r, key) for r in rows]
    return None if any(v is None for v in vals) else sum(vals)


def summarize(prompt_rows: Sequence[PromptResult | Mapping[str, Any]],
              order: Sequence[RunSpec | tuple[str, int, str]] | None = None) -> list[SummaryRow]:
    """Per-prompt rows (typed, or records read from a report; local or remote) -> one summary row
    per (proposer, k, impl), in ``order`` (RunSpecs or (proposer, k, impl) tuples) when given
    (see :mod:`specviz.bench` for the aggregation)."""
    groups: dict[tuple[str, int, str], list[PromptResult]] = {}
    flagged: dict[tuple[str, int, str], int] = {}
    typed = [prompt_result(record) for record in prompt_rows]
    stalled_bases = {(r.impl, r.prompt_index) for r in typed if r.k == 0 and r.proposer == TARGET_ONLY and r.flagged}
    for r in typed:
        key = (r.proposer, r.k, r.impl)
        groups.setdefault(key, [])
        if r.flagged:
            flagged[key] = flagged.get(key, 0) + 1
        else:
            groups[key].append(r)
    for key in groups:  # every run flagged: keep them rather than drop the configuration (its counts still say so)
        if not groups[key]:
            groups[key] = [r for r in typed if (r.proposer, r.k, r.impl) == key]
    wanted = [tuple(s) if not isinstance(s, RunSpec) else (s.proposer, s.k, s.impl) for s in order or ()]
    keys = [key for key in wanted if key in groups]
    keys += [k for k in groups if k not in keys]
    bases = {impl: groups.get((TARGET_ONLY, 0, impl), []) for impl in ("specviz", "hf", *{k[2] for k in groups})}
    base_step_ms = None
    sv = bases["specviz"]
    if sv:
        steps = sum(r.steps for r in sv)
        base_step_ms = (sum(r.draft_ms + r.verify_ms + r.other_ms for r in sv) / steps) if steps else None
    return [_summary(groups[key], *key, bases, base_step_ms, flagged.get(key, 0), stalled_bases) for key in keys]


def _robust(rows: Sequence[PromptResult], impl: str, stalled_bases: set[tuple[str, int]]) -> dict[str, Any]:
    """The median of the per-prompt speedups, its interval over prompts and passes and the verdict
    they give (a prompt whose target-only run is flagged gives no ratio)."""
    by_prompt: dict[tuple[str, str], list[float]] = {}
    for r in rows:
        if r.speedup is not None and (impl, r.prompt_index) not in stalled_bases:
            by_prompt.setdefault((r.category, r.prompt_id), []).append(r.speedup)
    if not by_prompt:
        return {"speedup_median": None}
    band = median_interval(list(by_prompt.values()))
    # one ratio (one prompt, one pass, the rest left out as stalled) is no interval: its verdict says so,
    # never "faster" or "slower" from a band of zero width (issue 52's walk: 27.69x [27.69-27.69], "faster")
    verdict = band.verdict if band.n > 1 else ONE_RUN
    return {"speedup_median": band.median, "speedup_low": band.low, "speedup_high": band.high, "verdict": verdict}


def _summary(rows: list[PromptResult], proposer: str, k: int, impl: str, bases: dict[str, list[PromptResult]],
             base_step_ms: float | None, flagged: int = 0, stalled_bases: set[tuple[str, int]] = frozenset()) -> SummaryRow:
    n = sum(r.new_tokens for r in rows)
    wall = sum(r.wall_s for r in rows)
    robust = _robust(rows, impl, stalled_bases)
    if k == 0:
        robust["verdict"] = None  # target-only: the baseline itself
    steps = _sum(rows, "steps")  # None: a server that reports no accepted count
    drafted, accepted = _sum(rows, "drafted"), _sum(rows, "accepted")
    width = max((len(r.per_position_hits or []) for r in rows), default=0)
    hits, trials = [0] * width, [0] * width
    for r in rows:
        for i, (h, t) in enumerate(zip(r.per_position_hits or [], r.per_position_trials or [])):
            hits[i] += h
            trials[i] += t
    ms = {name: _sum(rows, name) for name in ("draft_ms", "verify_ms", "other_ms", "prefill_ms")}
    step_ms = (ms["draft_ms"] + ms["verify_ms"] + ms["other_ms"]) / steps if impl == "specviz" and steps else None
    a = (accepted / drafted) if drafted and accepted is not None else None
    tree = any(r.tree_steps for r in rows)
    c = v = expected = predicted = None
    if impl == "specviz" and k > 0 and base_step_ms:
        c = metrics.measured_c(ms["draft_ms"], drafted or 0, base_step_ms)
        v = metrics.measured_v(ms["verify_ms"], ms["other_ms"], steps, base_step_ms)
        if a is not None and not tree:  # the i.i.d. chain formula; trees: see prediction.py
            expected = metrics.expected_tokens_per_step(a, k)
            predicted = metrics.predicted_speedup(a, k, c, v)
    elif impl not in ("specviz", "hf") and a is not None and k > 0 and not tree:  # a server: a and k, no timings
        expected = metrics.expected_tokens_per_step(a, k)
    same = [r.same_as_target for r in rows if r.same_as_target is not None]
    remote = all(isinstance(r, RemotePromptResult) for r in rows)
    return (RemoteSummaryRow if remote else SummaryRow)(
        proposer=proposer, k=k, impl=impl, prompts=len(rows), new_tokens=n, wall_s=wall,
        tokens_per_s=n / wall if wall > 0 else 0.0, ms_per_token=1e3 * wall / n if n else None,
        speedup=_ratio(rows, bases[impl]), speedup_vs_specviz=_ratio(rows, bases["specviz"]),
        **robust, flagged_runs=flagged, reruns=sum(1 for r in rows if r.rerun_from_s is not None),
        steps=steps, drafted=drafted, accepted=accepted, acceptance_rate=a,
        mean_acceptance_length=n / steps if steps else None,
        per_position=metrics.per_position_rates(hits, trials),
        nodes_per_step=(drafted / steps) if drafted is not None and steps else None,
        tree=tree, **ms, step_ms=step_ms,
        c=c, v=v, expected_tokens_per_step=expected, predicted_speedup=predicted,
        same_as_target=(sum(same) / len(same)) if same else None,
        **(_remote_fields(rows, accepted, hits, trials) if remote else {}),
    )


def _remote_fields(rows: Sequence[RemotePromptResult], accepted: int | None, hits: list[int], trials: list[int]) -> dict[str, Any]:
    """What only a server gives, pooled: draft steps and the engines' own tau, the engines'
    tokens/s (a mean over requests), where each number came from and what was missing."""
    draft_steps = _sum(rows, "draft_steps")
    eng = [r.engine_tokens_per_s for r in rows if r.engine_tokens_per_s]
    sources: dict[str, str] = {}
    for r in rows:
        for f, src in (r.sources or {}).items():
            sources.setdefault(f, src)
    return dict(
        draft_steps=draft_steps,
        engine_mean_acceptance_length=1 + accepted / draft_steps if draft_steps and accepted is not None else None,
        per_position_hits=hits, per_position_trials=trials,
        engine_tokens_per_s=statistics.mean(eng) if eng else None,
        engine=rows[0].engine, url=rows[0].url, sources=sources,
        unavailable=sorted({u for r in rows for u in (r.unavailable or [])}),
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
