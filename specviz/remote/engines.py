"""Per-request speculative-decoding statistics in a response body, per engine, and engine detection.

Each parser reads one completion response (a parsed JSON dict) and returns a
:class:`RequestStats` (or None when the body carries no such statistics), naming where every
number came from. Field names move between versions, so each accepts the documented aliases:

- vLLM (``--per-request-spec-decode-metrics summary|detailed``, docs "Per-Request Acceptance
  Metrics", v0.32): ``metrics.speculative_decoding`` with ``num_spec_steps``,
  ``num_draft_tokens``, ``num_accepted_draft_tokens``, ``acceptance_histogram`` (index j = steps
  that accepted exactly j drafts), ``mean_acceptance_length`` (1 + accepted / steps),
  ``draft_acceptance_rate``, ``num_spec_tokens`` (k); ``detailed`` adds ``per_step_accepted``
  and ``per_step_drafted``.
- SGLang (``python/sglang/srt/managers/tokenizer_manager.py``): ``meta_info`` with
  ``spec_verify_ct`` (verify steps), ``spec_accept_token_num`` / ``spec_num_correct_drafts`` /
  ``spec_accepted_drafts`` (accepted), ``spec_draft_token_num`` / ``spec_num_proposed_drafts`` /
  ``spec_proposed_drafts`` (drafted), ``spec_accept_histogram`` /
  ``spec_correct_drafts_histogram``, ``spec_accept_length`` (completion tokens / verify steps),
  ``spec_accept_rate``.
- llama.cpp (``tools/server/server-common.cpp``, ``server_slot_stats::to_json``): ``timings``
  with ``draft_n`` and ``draft_n_accepted`` (only when it drafted), ``predicted_n``,
  ``predicted_ms``, ``predicted_per_second``, ``prompt_n``, ``prompt_ms``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ..core.stats import position_counts

__all__ = ["RequestStats", "parse_vllm", "parse_sglang", "parse_llamacpp", "parse_request_stats",
           "engine_from_body", "positions_from_steps", "positions_from_histogram", "token_logprobs", "logprob_check",
           "ZERO_LOGPROBS"]


@dataclass(frozen=True)
class RequestStats:
    """Per-request speculative-decoding numbers an engine put in its response."""

    engine: str
    source: str  # e.g. "vllm metrics.speculative_decoding (detailed)"
    draft_steps: int | None = None  # verification steps that had a draft
    drafted: int | None = None
    accepted: int | None = None
    histogram: tuple[int, ...] = ()  # index j = steps that accepted exactly j drafts
    per_step_accepted: tuple[int, ...] = ()
    per_step_drafted: tuple[int, ...] = ()
    k: int | None = None  # the engine's configured draft length
    engine_tau: float | None = None  # the engine's own mean acceptance length
    engine_rate: float | None = None  # the engine's own acceptance rate
    completion_tokens: int | None = None
    decode_tokens_per_s: float | None = None  # the engine's own decode speed (prefill excluded)
    prefill_ms: float | None = None
    decode_ms: float | None = None
    fields: dict[str, str] = field(default_factory=dict)  # our name -> the engine's field

    @property
    def has_spec(self) -> bool:
        return self.drafted is not None or self.draft_steps is not None or bool(self.histogram)


def _first(d: Mapping[str, Any], names: Sequence[str]) -> tuple[Any, str | None]:
    for n in names:
        if n in d and d[n] is not None:
            return d[n], n
    return None, None


def _int(v: Any) -> int | None:
    try:
        return None if v is None else int(v)
    except (TypeError, ValueError):
        return None


def _float(v: Any) -> float | None:
    try:
        return None if v is None else float(v)
    except (TypeError, ValueError):
        return None


def _ints(v: Any) -> tuple[int, ...]:
    if not isinstance(v, (list, tuple)):
        return ()
    try:
        return tuple(int(x) for x in v)
    except (TypeError, ValueError):
        return ()


def _choice0(body: Mapping[str, Any]) -> Mapping[str, Any]:
    ch = body.get("choices")
    return ch[0] if isinstance(ch, list) and ch and isinstance(ch[0], Mapping) else {}


def _usage_tokens(body: Mapping[str, Any]) -> int | None:
    u = body.get("usage")
    return _int(u.get("completion_tokens")) if isinstance(u, Mapping) else None


def parse_vllm(body: Mapping[str, Any]) -> RequestStats | None:
    """vLLM's ``metrics.speculative_decoding`` (top level, or on the first choice)."""
    sd = None
    for holder in (body, _choice0(body)):
        m = holder.get("metrics")
        if isinstance(m, Mapping) and isinstance(m.get("speculative_decoding"), Mapping):
            sd = m["speculative_decoding"]
            break
    if sd is None:
        return None
    got: dict[str, str] = {}

    def pick(our: str, names: Sequence[str]):
        v, n = _first(sd, names)
        if n:
            got[our] = f"metrics.speculative_decoding.{n}"
        return v

    steps = _int(pick("draft_steps", ("num_spec_steps", "num_drafts")))
    drafted = _int(pick("drafted", ("num_draft_tokens",)))
    accepted = _int(pick("accepted", ("num_accepted_draft_tokens", "num_accepted_tokens")))
    hist = _ints(pick("histogram", ("acceptance_histogram",)))
    psa = _ints(pick("per_step_accepted", ("per_step_accepted",)))
    psd = _ints(pick("per_step_drafted", ("per_step_drafted",)))
    level = "detailed" if psa else "summary"
    timing = body.get("metrics") if isinstance(body.get("metrics"), Mapping) else {}
    tps = _float(timing.get("tokens_per_second"))
    if tps is not None:
        got["decode_tokens_per_s"] = "metrics.tokens_per_second"
    return RequestStats(
        "vllm", f"vllm metrics.speculative_decoding ({level})", steps, drafted, accepted, hist, psa, psd,
        _int(pick("k", ("num_spec_tokens",))), _float(pick("engine_tau", ("mean_acceptance_length",))),
        _float(pick("engine_rate", ("draft_acceptance_rate",))), _usage_tokens(body), tps,
        _float(timing.get("time_to_first_token_ms")), _float(timing.get("generation_time_ms")), got,
    )


def parse_sglang(body: Mapping[str, Any]) -> RequestStats | None:
    """SGLang's ``meta_info`` spec fields (top level, or on the first choice)."""
    meta = None
    for holder in (body, _choice0(body)):
        if isinstance(holder.get("meta_info"), Mapping):
            meta = holder["meta_info"]
            break
    if meta is None:
        return None
    got: dict[str, str] = {}

    def pick(our: str, names: Sequence[str]):
        v, n = _first(meta, names)
        if n:
            got[our] = f"meta_info.{n}"
        return v

    steps = _int(pick("draft_steps", ("spec_verify_ct",)))
    accepted = _int(pick("accepted", ("spec_accept_token_num", "spec_num_correct_drafts", "spec_accepted_drafts")))
    drafted = _int(pick("drafted", ("spec_draft_token_num", "spec_num_proposed_drafts", "spec_proposed_drafts")))
    hist = _ints(pick("histogram", ("spec_accept_histogram", "spec_correct_drafts_histogram")))
    if steps is None and accepted is None and drafted is None and not hist:
        return None
    tau = _float(pick("engine_tau", ("spec_accept_length",)))
    rate = _float(pick("engine_rate", ("spec_accept_rate",)))
    k = drafted // steps if drafted is not None and steps else None  # SGLang drafts a fixed number per step
    tps = _float(meta.get("decode_throughput"))
    if tps is not None:
        got["decode_tokens_per_s"] = "meta_info.decode_throughput"
    return RequestStats(
        "sglang", "sglang meta_info", steps, drafted, accepted, hist, (), (), k, tau, rate,
        _int(meta.get("completion_tokens")) or _usage_tokens(body), tps, None, None, got,
    )


def parse_llamacpp(body: Mapping[str, Any]) -> RequestStats | None:
    """llama.cpp's ``timings`` (draft counts only appear when the request drafted)."""
    t = body.get("timings")
    if not isinstance(t, Mapping):
        t = _choice0(body).get("timings")
    if not isinstance(t, Mapping):
        return None
    got = {name: f"timings.{key}" for name, key in (
        ("drafted", "draft_n"), ("accepted", "draft_n_accepted"), ("decode_tokens_per_s", "predicted_per_second"),
        ("prefill_ms", "prompt_ms"), ("decode_ms", "predicted_ms"), ("completion_tokens", "predicted_n"),
    ) if key in t}
    drafted = _int(t.get("draft_n"))
    accepted = _int(t.get("draft_n_accepted"))
    if drafted is None:  # the server omits both when nothing was drafted
        drafted = accepted = 0
        got["drafted"] = got["accepted"] = "timings (draft_n absent: nothing drafted)"
    return RequestStats(
        "llama.cpp", "llama.cpp timings", None, drafted, accepted, (), (), (), None, None,
        accepted / drafted if drafted else None, _int(t.get("predicted_n")) or _usage_tokens(body),
        _float(t.get("predicted_per_second")), _float(t.get("prompt_ms")), _float(t.get("predicted_ms")), got,
    )


def parse_request_stats(body: Mapping[str, Any], engine: str | None = None) -> RequestStats | None:
    """The per-request statistics of whichever engine answered (``engine`` tried first)."""
    parsers = {"vllm": parse_vllm, "sglang": parse_sglang, "llama.cpp": parse_llamacpp}
    order = ([engine] if engine in parsers else []) + [e for e in parsers if e != engine]
    for e in order:
        stats = parsers[e](body)
        if stats is not None:
            return stats
    return None


def engine_from_body(body: Mapping[str, Any]) -> str | None:
    """Guess the engine from a completion response's own fields."""
    if "timings" in body or "timings" in _choice0(body):
        return "llama.cpp"
    if "meta_info" in body or "meta_info" in _choice0(body):
        return "sglang"
    m = body.get("metrics")
    if isinstance(m, Mapping) and "speculative_decoding" in m:
        return "vllm"
    return None


def positions_from_steps(per_step_accepted: Sequence[int], per_step_drafted: Sequence[int]) -> tuple[list[int], list[int]]:
    """Exact per-position (hits, trials) from per-step arrays: position i was tried in a step that
    drafted more than i tokens and accepted when more than i were accepted (the engine's own
    definition, :func:`specviz.core.stats.position_counts`)."""
    return position_counts(per_step_accepted, per_step_drafted)


def positions_from_histogram(histogram: Sequence[int], k: int | None = None) -> tuple[list[int], list[int]]:
    """Per-position (hits, trials) from an acceptance histogram (index j = steps that accepted
    exactly j drafts): hits_i = steps that accepted more than i; trials_i = all steps, which
    assumes every step drafted k tokens (exact for a fixed draft length)."""
    width = k if k is not None else max(len(histogram) - 1, 0)
    steps = sum(histogram)
    hits = [sum(histogram[j] for j in range(i + 1, len(histogram))) for i in range(width)]
    return hits, [steps] * width


ZERO_LOGPROBS = ("the engine returns logprob 0.0 (probability 1) for the tokens it accepted from a draft, not the "
                 "target's probabilities (llama.cpp issue #27972): specviz reports none of them")


def token_logprobs(body: Mapping[str, Any]) -> list[float]:
    """The completion's per-token logprobs, [] without them: OpenAI's completions shape
    (``choices[0].logprobs.token_logprobs``, vLLM) or the chat shape that llama.cpp's
    ``/v1/completions`` answers with (``choices[0].logprobs.content[i].logprob``)."""
    lp = _choice0(body).get("logprobs")
    if not isinstance(lp, Mapping):
        return []
    values = lp.get("token_logprobs")
    if not isinstance(values, list) and isinstance(lp.get("content"), list):
        values = [c.get("logprob") for c in lp["content"] if isinstance(c, Mapping)]
    if not isinstance(values, list):
        return []
    return [float(v) for v in values if isinstance(v, (int, float))]


def logprob_check(body: Mapping[str, Any], accepted: int | None) -> dict[str, Any]:
    """Whether a response's logprobs can be the target's: a request that accepted drafted tokens
    and returned at least as many logprobs of exactly 0.0 is llama.cpp's bug #27972 (every token
    of a speculated batch gets probability 1), since a real model rarely puts probability 1.0 in
    float32 on a token. Returns ``{"tokens", "zeros", "accepted", "status", "note"}``; status:
    "not returned", "not checked" (no accepted drafts: the bug cannot show), "plausible",
    "zero while speculating" (do not present them)."""
    values = token_logprobs(body)
    zeros = sum(1 for v in values if v == 0.0)
    out: dict[str, Any] = {"tokens": len(values), "zeros": zeros, "accepted": accepted}
    if not values:
        return {**out, "status": "not returned", "note": "the engine returned no logprobs"}
    if not accepted:
        return {**out, "status": "not checked", "note": "the checked request accepted no drafts, so a wrong logprob could not show"}
    if zeros >= accepted:
        return {**out, "status": "zero while speculating",
                "note": f"{zeros} of {len(values)} token logprobs are exactly 0.0 in a request that accepted {accepted} drafts: {ZERO_LOGPROBS}"}
    return {**out, "status": "plausible", "note": f"{zeros} of {len(values)} token logprobs are exactly 0.0 with {accepted} drafts accepted"}
