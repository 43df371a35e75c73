"""Acceptance metrics and the "why no speedup?" readout.

Definitions (the same as vLLM's; docs/architecture.md, "Metrics"): acceptance rate ``a`` =
accepted / drafted, mean acceptance length ``tau`` = committed tokens / steps, per-position rate
i = steps whose draft i was accepted / steps with at least i+1 drafts.

The theory (expected tokens per step, expected speedup, the measured ``c`` and ``v``, the
predicted speedup of a benchmark row) lives in :mod:`specviz.analysis.theory` and is re-exported here for
callers that read a row's metrics from one place. This module adds plain-language explanations
of what limits a measured speedup.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

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
]


def per_position_rates(hits: Sequence[int], trials: Sequence[int]) -> list[float]:
    """Per-position acceptance rates from summed counts (hits[i] / trials[i], 0 where no trials)."""
    return [h / t if t else 0.0 for h, t in zip(hits, trials)]


def _fmt(x: float) -> str:
    return f"{x:.2f}"


def explain_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """One sentence each on a, c and v for a benchmark summary row, and which one limits it.

    ``row`` needs ``proposer``, ``k``, ``acceptance_rate``, ``c``, ``v`` and ``speedup``.
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
    gains = ideal_speedups(a, k, c, v)
    e = expected_tokens_per_step(a, k)
    out["sentences"] = {
        "a": (
            f"a = {_fmt(a)}: each step is expected to commit {_fmt(e)} of the {k + 1} tokens it could "
            f"({'a weak' if a < 0.5 else 'a fair' if a < 0.8 else 'a strong'} draft); "
            f"with every draft accepted the predicted speedup would be {_fmt(gains['a'])}x."
        ),
        "c": (
            f"c = {_fmt(c)}: drafting {k} token{'s' if k > 1 else ''} costs {_fmt(k * c)} target steps per round"
            + (f"; a free draft would give {_fmt(gains['c'])}x." if c > 0.005 else ", next to nothing.")
        ),
        "v": (
            f"v = {_fmt(v)}: a {k + 1}-token verify round costs {_fmt(v)} target steps"
            + (f"; at the ideal v = 1 it would give {_fmt(gains['v'])}x." if v > 1.005 else ", no more than one decode step.")
        ),
    }
    limit = limiting_factor(a, k, c, v)
    out["limit"] = limit
    why = {
        "a": "the acceptance rate limits it: too many drafts are thrown away",
        "c": "the draft's cost limits it: drafting eats the time the accepted tokens save",
        "v": "the verify pass's cost limits it: scoring k+1 tokens costs much more than one decode step",
    }[limit]
    speed = row.get("speedup")
    speed_txt = f"measured {_fmt(speed)}x" if isinstance(speed, (int, float)) else "not measured"
    out["summary"] = f"{label} ({speed_txt}, predicted {_fmt(gains['now'])}x): {why}."
    return out


def why_no_speedup(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Explanations for the best and the worst speculative configuration among summary rows.

    Only specviz rows that drafted (have a, c and v) are considered. Returns
    ``{"best": explain_row(...) | None, "worst": ... | None, "markdown": str}``.
    """
    remote = [r for r in rows if r.get("impl") == "remote" and r.get("k") and r.get("acceptance_rate") is not None]
    if remote:
        return _why_remote(remote)
    cand = [
        r for r in rows
        if r.get("impl") == "specviz" and r.get("k") and r.get("speedup") is not None
        and r.get("c") is not None and r.get("v") is not None and r.get("acceptance_rate") is not None
    ]
    if not cand:
        return {"best": None, "worst": None, "markdown": "_No speculative configuration has been measured yet._"}
    best = max(cand, key=lambda r: r["speedup"])
    worst = min(cand, key=lambda r: r["speedup"])
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
