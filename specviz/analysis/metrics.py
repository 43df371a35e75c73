"""Acceptance metrics, their definitions and the "why no speedup?" readout.

The definitions (the same as vLLM's) are written once, in :data:`METRICS`: the reports' meta,
the CSV columns, the figures' tooltips and docs/architecture.md ("Metrics", the table
:func:`metrics_markdown` renders) all read it.

The theory (expected tokens per step, expected speedup, the measured ``c`` and ``v``, the
predicted speedup of a benchmark row) lives in :mod:`specviz.analysis.theory` and is re-exported here for
callers that read a row's metrics from one place. This module adds plain-language explanations
of what limits a measured speedup.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from .noise import ONE_RUN
from .theory import (
    expected_speedup,
    expected_tokens_per_step,
    ideal_speedups,
    limiting_factor,
    measured_c,
    measured_v,
    predicted_speedup,
)

__all__ = [
    "expected_tokens_per_step", "expected_speedup", "measured_c", "measured_v", "predicted_speedup",
    "ideal_speedups", "limiting_factor", "explain_row", "explain_remote_row", "why_no_speedup", "per_position_rates",
    "robust_speedup",
    "Metric", "METRICS", "metric", "definitions", "metrics_markdown", "ideal_gains", "limit_of",
]


# -- the definitions, written once ------------------------------------------------------------


@dataclass(frozen=True)
class Metric:
    """One number of a benchmark summary row: what the reports, the CSV, the figures' tooltips and
    docs/architecture.md call it and how it is defined."""

    name: str  # the row's key and the CSV column
    symbol: str  # how the text writes it ("a", "tau", ...; "" when it has none)
    unit: str  # "tokens/s", "x", "ms", ... ("" for a count or a plain ratio)
    definition: str  # one sentence
    vllm: str | None = None  # vLLM's name for the same number, where it has one
    remote: str | None = None  # how a remote server's row gets it, where that differs (None: the same way)
    scope: str = "row"  # "row": every summary row and a CSV column; "remote": remote rows only;
    #                     "figures": added to the rows for the figures and the readout (analysis.prediction)
    title: str = ""  # the name in words where the key's words will not do ("tokens/s")

    @property
    def csv(self) -> bool:
        """A column of the CSV summary."""
        return self.scope == "row"

    @property
    def label(self) -> str:
        """"acceptance rate a": the name in words, with its symbol."""
        words = self.title or self.name.replace("_", " ")
        return f"{words} {self.symbol}" if self.symbol and self.symbol != self.name else words


NOT_REMOTE = "not measurable remotely: engines report no draft vs verify timings"

# In the CSV's column order (after proposer, k, impl); the remote-only numbers last.
METRICS: tuple[Metric, ...] = (
    Metric("prompts", "", "", "prompts this configuration ran"),
    Metric("new_tokens", "", "tokens", "new tokens generated, summed over the prompts (EOS included)"),
    Metric("wall_s", "", "s", "timed seconds, summed: each run from the session's start (prefill included) to its last token",
           remote="the wall clock around each request (prefill and network included)", title="timed seconds"),
    Metric("tokens_per_s", "", "tokens/s", "new tokens / timed seconds over the prompts (a token-weighted mean)",
           remote="completion tokens / wall seconds around each request", title="tokens/s"),
    Metric("ms_per_token", "", "ms", "1000 / tokens_per_s", title="ms per token"),
    Metric("speedup", "S", "x", "tokens_per_s / the same impl's target-only tokens_per_s, on the prompts both ran",
           remote="tokens_per_s / the target-only server's tokens_per_s on the same prompts"),
    Metric("speedup_median", "", "x", "median over prompts (and passes) of the per-prompt speedup, flagged runs left out"),
    Metric("speedup_vs_specviz", "", "x", "tokens_per_s / specviz's target-only tokens_per_s (transformers rows against specviz)",
           remote="none: no specviz target-only run"),
    Metric("acceptance_rate", "a", "", "accepted draft tokens / drafted tokens, pooled over prompts",
           vllm="draft_acceptance_rate"),
    Metric("mean_acceptance_length", "tau", "tokens/step",
           "committed tokens / steps, pooled: the correction or bonus token included, so target-only has tau = 1",
           vllm="mean_acceptance_length (over draft steps only: equal when every step drafts)",
           remote="steps = committed tokens - accepted drafts (every target pass commits its accepted drafts + 1)"),
    Metric("per_position", "", "", "at draft position i: steps whose draft i was accepted / steps with at least i drafts, pooled",
           vllm="spec_decode_num_accepted_tokens_per_pos / spec_decode_num_drafts",
           remote="exact from per-step arrays; from counters or a histogram the denominator is every draft step"),
    Metric("steps", "", "", "target forward passes after prefill, summed (each commits 1 to k + 1 tokens)"),
    Metric("drafted", "", "tokens", "draft tokens proposed, summed (a tree counts its nodes)",
           vllm="spec_decode_num_draft_tokens"),
    Metric("accepted", "", "tokens", "draft tokens kept, summed (drafts cut off by EOS or max_new_tokens not counted)",
           vllm="spec_decode_num_accepted_tokens"),
    Metric("draft_ms", "", "ms", "time in the proposer, summed", remote=NOT_REMOTE),
    Metric("verify_ms", "", "ms", "time in the target's verify passes, summed", remote=NOT_REMOTE),
    Metric("other_ms", "", "ms", "the rest of the steps (sampling, rollback, bookkeeping), summed", remote=NOT_REMOTE),
    Metric("prefill_ms", "", "ms", "the prompts' forward passes, summed", remote="the engine's own prompt time, where it reports one"),
    Metric("step_ms", "", "ms", "(draft + verify + other) ms per step", remote=NOT_REMOTE, title="ms per step"),
    Metric("c", "c", "target steps", "one draft token's cost: (draft ms / drafted token) / target-only ms per step", remote=NOT_REMOTE),
    Metric("v", "v", "target steps",
           "one verify round's cost: ((verify + other) ms / step) / target-only ms per step", remote=NOT_REMOTE),
    Metric("expected_tokens_per_step", "E", "tokens/step", "the i.i.d. theory (1 - a^(k+1)) / (1 - a) at the measured a and k"),
    Metric("predicted_speedup", "", "x", "the i.i.d. theory E / (k c + v) at the measured a, k, c and v", remote=NOT_REMOTE),
    Metric("same_as_target", "", "", "share of prompts whose output equals target-only's (greedy only)"),
    Metric("nodes_per_step", "k'", "", "drafted / steps: positions verified per step besides the root (a chain: about k)"),
    Metric("tree", "", "", "whether the proposer drafted token trees (positions are then depths)"),
    Metric("speedup_low", "", "x", "the low end of speedup_median's 90% bootstrap interval (prompts, then their passes, resampled)"),
    Metric("speedup_high", "", "x", "the high end of speedup_median's 90% bootstrap interval"),
    Metric("verdict", "", "", "faster or slower when the whole interval is on one side of 1.0x, else within noise "
           "(from the median, never the total)"),
    Metric("flagged_runs", "", "", "runs left out of every number: still over twice the time their configuration and "
           "prompt predict after one re-run (a stalled machine)"),
    Metric("reruns", "", "", "runs flagged as stalled and re-run once; the re-run's numbers are kept"),
    Metric("draft_steps", "", "", "steps that drafted at least one token, summed", vllm="spec_decode_num_drafts", scope="remote"),
    Metric("engine_mean_acceptance_length", "", "tokens/step",
           "1 + accepted / draft steps: the engines' own tau, over the steps that drafted only",
           vllm="mean_acceptance_length", scope="remote"),
    Metric("engine_tokens_per_s", "", "tokens/s", "the engine's own decode tokens/s, averaged over requests", scope="remote",
           title="engine tokens/s"),
    Metric("predicted_tau_positional", "", "tokens/step",
           "tau predicted from the per-position rates: 1 + sum_i r_i reach_i (reach_i: steps that drafted at least i tokens)",
           scope="figures", title="tokens/step predicted from per-position acceptance"),
    Metric("predicted_speedup_positional", "", "x",
           "the decode loop's speedup predicted from the per-position rates: predicted tau / (k' c + v)", scope="figures",
           title="speedup predicted from per-position acceptance"),
)

_BY_NAME = {m.name: m for m in METRICS}


def metric(name: str) -> Metric:
    """The METRICS entry for a row key (KeyError for a key that is not a metric)."""
    return _BY_NAME[name]


def definitions(remote: bool = False) -> dict[str, str]:
    """{name: definition} for a report's meta; ``remote`` appends how a server's row gets each
    number where that differs."""
    out = {}
    for m in METRICS:
        if remote and m.scope in ("row", "remote"):
            out[m.name] = m.definition + (f" (remote: {m.remote})" if m.remote else "")
        elif m.scope == "row":
            out[m.name] = m.definition
    return out


def metrics_markdown() -> str:
    """METRICS as a Markdown table (the one in docs/architecture.md, "Metrics")."""
    lines = ["| name | symbol | unit | definition | vLLM | remote servers |", "|---|---|---|---|---|---|"]
    where = {"row": "", "remote": "remote rows only", "figures": "added for the figures and readout"}
    for m in METRICS:
        cells = [f"`{m.name}`", f"`{m.symbol}`" if m.symbol else "", m.unit, m.definition, m.vllm or "",
                 m.remote or where[m.scope]]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


# -- what limits a speedup: one source for every readout ---------------------------------------


def ideal_gains(tau: float, drafted_per_step: float, c: float, v: float, drafted_fraction: float = 1.0) -> dict[str, float]:
    """The decode loop's speedup ``now`` = tau / (k' c + v), k' = drafted / steps, and what it
    would be with each factor made ideal in turn: every draft accepted (``a``), free drafts
    (``c``), a verify pass as cheap as one decode step (``v``) and, when only a fraction f of the
    steps drafted, every step drafting like those did (``coverage``)."""
    step_cost = drafted_per_step * c + v
    gains = {
        "now": tau / step_cost,
        "a": (1 + drafted_per_step) / step_cost,
        "c": tau / v if v > 0 else float("inf"),
        "v": tau / (drafted_per_step * c + 1.0),
    }
    if 0 < drafted_fraction < 0.999:
        tau_full = 1 + (tau - 1) / drafted_fraction
        gains["coverage"] = tau_full / (drafted_per_step / drafted_fraction * c + v)
    return gains


def limit_of(gains: Mapping[str, float]) -> str:
    """The factor (a key of :func:`ideal_gains` other than "now") whose ideal value gains most;
    the first one on ties."""
    return max((f for f in gains if f != "now"), key=lambda f: gains[f])


def per_position_rates(hits: Sequence[int], trials: Sequence[int]) -> list[float]:
    """Per-position acceptance rates from summed counts (hits[i] / trials[i], 0 where no trials)."""
    return [h / t if t else 0.0 for h, t in zip(hits, trials)]


def _fmt(x: float) -> str:
    return f"{x:.2f}"


def explain_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """One sentence each on a, c and v for a benchmark summary row, and which one limits it.

    ``row`` needs ``proposer``, ``k``, ``acceptance_rate``, ``c``, ``v`` and ``speedup``. The one
    prediction the summary gives is the row's own per-position one (``predicted_speedup_positional``,
    :func:`specviz.analysis.prediction.augment_rows`) where it has it, else the i.i.d. formula at
    the row's own a, k, c, v.
    Returns ``{"label", "a", "c", "v", "speedup", "predicted", "limit", "sentences": {a, c, v},
    "summary"}``; sentences are empty when a value could not be measured.
    """
    a, k, c, v = row.get("acceptance_rate"), int(row.get("k") or 0), row.get("c"), row.get("v")
    label = f"{row.get('proposer')} k={k}"
    out: dict[str, Any] = {
        "label": label, "a": a, "c": c, "v": v, "k": k,
        "speedup": row.get("speedup"), "predicted": row.get("predicted_speedup"),
        "limit": None, "sentences": {}, "summary": "",
    }
    if a is None or c is None or v is None or k < 1:
        out["summary"] = f"{label}: a, c or v could not be measured (no drafts or no target-only baseline)."
        return out
    iid = expected_tokens_per_step(a, k)
    tau = row.get("predicted_tau_positional")
    positional = isinstance(tau, (int, float))
    # tau per step: the row's per-position prediction where it has one (acceptance comes in runs: a
    # draft that agrees once tends to agree again), else the i.i.d. case, E(a, k); k drafts every step
    e = tau if positional else iid
    gains = ideal_gains(e, k, c, v)
    strength = "a weak" if a < 0.5 else "a fair" if a < 0.8 else "a strong"
    commits = (f"a = {_fmt(a)} ({strength} draft): each step commits {_fmt(e)} of the {k + 1} tokens it could, "
               f"by its per-position acceptance (an i.i.d. draft at this a: {_fmt(iid)})" if positional
               else f"a = {_fmt(a)}: each step is expected to commit {_fmt(e)} of the {k + 1} tokens it could ({strength} draft)")
    out["sentences"] = {
        "a": f"{commits}; with every draft accepted the predicted speedup would be {_fmt(gains['a'])}x.",
        "c": (
            f"c = {_fmt(c)}: drafting {k} token{'s' if k > 1 else ''} costs {_fmt(k * c)} target steps per round"
            + (f"; a free draft would give {_fmt(gains['c'])}x." if c > 0.005 else ", next to nothing.")
        ),
        "v": (
            f"v = {_fmt(v)}: a {k + 1}-token verify round costs {_fmt(v)} target steps"
            + (f"; at the ideal v = 1 it would give {_fmt(gains['v'])}x." if v > 1.005 else ", no more than one decode step.")
        ),
    }
    limit = limit_of(gains)
    out["limit"] = limit
    why = {
        "a": "the acceptance rate limits it: too many drafts are thrown away",
        "c": "the draft's cost limits it: drafting eats the time the accepted tokens save",
        "v": "the verify pass's cost limits it: scoring k+1 tokens costs much more than one decode step",
    }[limit]
    speed_txt = _measured_words(row)
    speedup_positional = row.get("predicted_speedup_positional")
    predicted = speedup_positional if isinstance(speedup_positional, (int, float)) else gains["now"]
    how = "from its per-position acceptance" if isinstance(speedup_positional, (int, float)) else "i.i.d."
    out["predicted"] = predicted
    out["summary"] = f"{label} ({speed_txt}, predicted {_fmt(predicted)}x {how}): {why}."
    return out


def robust_speedup(row: Mapping[str, Any]) -> float | None:
    """The speedup a verdict is read from: the median of the per-prompt speedups where the row has
    it (one stalled run cannot move it far), else the total."""
    median = row.get("speedup_median")
    return median if isinstance(median, (int, float)) else row.get("speedup")


def _measured_words(row: Mapping[str, Any]) -> str:
    """ "measured 1.35x, the median over prompts (90% interval 1.21-1.50x; total 0.45x)" or
    "measured 1.35x" for a row with no median."""
    speed, total = robust_speedup(row), row.get("speedup")
    if not isinstance(speed, (int, float)):
        return "not measured"
    low, high = row.get("speedup_low"), row.get("speedup_high")
    if not isinstance(row.get("speedup_median"), (int, float)) or low is None or high is None:
        return f"measured {_fmt(speed)}x"
    noise = ", within noise of target-only" if row.get("verdict") == "within noise" else ""
    tot = f"; total {_fmt(total)}x" if isinstance(total, (int, float)) else ""
    if row.get("verdict") == ONE_RUN:  # one ratio: no interval to give
        return f"measured {_fmt(speed)}x from one run (no interval{tot})"
    return f"measured {_fmt(speed)}x, the median over prompts (90% interval {_fmt(low)}-{_fmt(high)}x{tot}){noise}"


def why_no_speedup(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Explanations for the best and the worst speculative configuration among summary rows,
    ranked by :func:`robust_speedup` (the median over prompts, not the total a stall can drag).

    Only specviz rows that drafted (have a, c and v) are considered. Returns
    ``{"best": explain_row(...) | None, "worst": ... | None, "markdown": str}``.
    """
    remote = [r for r in rows if r.get("impl") == "remote" and r.get("k") and r.get("acceptance_rate") is not None]
    if remote:
        return _why_remote(remote)
    if any(r.get("impl") == "remote" for r in rows):  # servers measured, none of them drafted
        return {"best": None, "worst": None, "markdown": "_No remote server drafted a token in this run: acceptance, "
                "tau and the speedup of speculation need drafts (more new tokens, or prompts that repeat themselves)._"}
    cand = [
        r for r in rows
        if r.get("impl") == "specviz" and r.get("k") and r.get("speedup") is not None
        and r.get("c") is not None and r.get("v") is not None and r.get("acceptance_rate") is not None
    ]
    if not cand:
        return {"best": None, "worst": None, "markdown": "_No speculative configuration has been measured yet._"}
    best = max(cand, key=robust_speedup)
    worst = min(cand, key=robust_speedup)
    eb, ew = explain_row(best), explain_row(worst)
    parts = []
    for title, e in (("Best", eb), ("Worst", ew)) if best is not worst else (("Only", eb),):
        bullets = "\n".join(f"- {e['sentences'][f]}" for f in ("a", "c", "v") if f in e["sentences"])
        parts.append(f"**{title}: {e['summary']}**\n\n{bullets}")
    return {"best": eb, "worst": ew, "markdown": "\n\n".join(parts)}


def explain_remote_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """"Why (no) speedup?" for a remote server's summary row, with what a server lets one know.

    Known: a, k, tau (tokens per target pass) and, with a target-only server, the measured
    speedup S. Since S = tau / (cost of one pass in target-only token times), the round cost
    ``k c + v = tau / S`` follows; c and v cannot be told apart remotely (no draft/verify timings).
    """
    a, k, tau, speed = row.get("acceptance_rate"), int(row.get("k") or 0), row.get("mean_acceptance_length"), row.get("speedup")
    label = f"{row.get('proposer')} k={k}"
    out: dict[str, Any] = {"label": label, "a": a, "k": k, "tau": tau, "speedup": speed, "round_cost": None,
                           "limit": None, "sentences": {}, "summary": ""}
    sent = out["sentences"]
    if a is not None and k >= 1:
        e = expected_tokens_per_step(a, k)
        sent["a"] = (f"a = {_fmt(a)}: an i.i.d. draft would commit {_fmt(e)} tokens per step at k = {k}"
                     + (f"; measured tau = {_fmt(tau)} tokens per target pass (passes without a draft count 1)." if tau else "."))
    if isinstance(speed, (int, float)) and speed > 0 and tau:
        cost = tau / speed
        out["round_cost"] = cost
        sent["cost"] = (f"each target pass with its drafting costs {_fmt(cost)} target-only token times "
                        f"(k c + v = tau / speedup); the server reports no draft vs verify timings, so c and v cannot be split.")
        gains = {"a": (k + 1) / cost, "cost": tau}  # every draft accepted (tau = k + 1) / a pass as cheap as one token
        out["limit"] = max(gains, key=gains.get)
        sent["gains"] = (f"with every draft accepted it would give {_fmt(gains['a'])}x; with passes as cheap as a "
                         f"target-only token, {_fmt(gains['cost'])}x.")
        why = ("the cost of drafting and verifying limits it" + (": it exceeds what the accepted drafts save" if speed < 1 else "")
               if out["limit"] == "cost" else "the acceptance rate limits it: too many drafts are thrown away")
        out["summary"] = f"{label} (measured {_fmt(speed)}x, tau {_fmt(tau)}): {why}."
    else:
        out["summary"] = (f"{label}: a = {_fmt(a) if a is not None else '?'}, tau = {_fmt(tau) if tau else '?'}; "
                          "no target-only server was measured, so the speedup is unknown (give --baseline-remote URL).")
    return out


def _why_remote(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    with_speed = [r for r in rows if r.get("speedup") is not None]
    pool = with_speed or list(rows)
    key = (lambda r: r["speedup"]) if with_speed else (lambda r: r.get("mean_acceptance_length") or 0.0)
    best, worst = max(pool, key=key), min(pool, key=key)
    eb, ew = explain_remote_row(best), explain_remote_row(worst)
    parts = []
    for title, e in (("Best", eb), ("Worst", ew)) if best is not worst else (("Only", eb),):
        bullets = "\n".join(f"- {s}" for s in e["sentences"].values())
        parts.append(f"**{title}: {e['summary']}**\n\n{bullets}")
    parts.append("_Remote servers: a, tau and tokens/s are measured; c and v are not reported by the engines._")
    return {"best": eb, "worst": ew, "markdown": "\n\n".join(parts)}
