"""The benchmark's rows: one typed record per timed run and one per summary, and their one
conversion to the report's JSON/CSV records.

The report file (``specviz.bench/1``) stores these as plain JSON objects with a ``kind`` key
("prompt" or "summary"); :func:`to_record` writes that object and ``from_record`` reads it back,
so reports written before the rows were typed still load.

A remote server's rows (``impl == "remote"``, :mod:`specviz.remote.run`) are the same rows with
what only a server has added (:class:`RemotePromptResult`, :class:`RemoteSummaryRow`); what a
server cannot know (draft and verify times, so c and v) is None. :func:`prompt_result` reads a
record of either kind. What each number means: :data:`specviz.analysis.metrics.METRICS`.
"""

from __future__ import annotations

from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import Any, ClassVar, Mapping, TypeVar, Union

R = TypeVar("R", bound="_Row")

REMOTE_IMPL = "remote"  # the impl of a remote server's rows


class _Row:
    KIND: ClassVar[str]

    @classmethod
    def from_record(cls: type[R], record: Mapping[str, Any] | R) -> R:
        """A JSON record (or a row already typed) -> a row; keys it does not know are ignored,
        keys it lacks (older reports) take their defaults."""
        if isinstance(record, cls):
            return record
        kw = {}
        for f in fields(cls):  # type: ignore[arg-type]
            if f.name in record:
                kw[f.name] = record[f.name]
            elif f.default is MISSING and f.default_factory is MISSING:  # type: ignore[misc]
                raise ValueError(f"a {cls.KIND} row needs {f.name!r}; got keys {sorted(record)}")
        return cls(**kw)


@dataclass(frozen=True)
class PromptResult(_Row):
    """One timed run: one configuration (proposer x k x impl) on one prompt."""

    KIND: ClassVar[str] = "prompt"
    proposer: str  # display name: "target-only", "ngram", "draft:smollm2-135m", "ngram [heuristic]", ...
    k: int  # tokens drafted per step (0 for target-only); a dynamic schedule's starting k
    impl: str  # "specviz" or "hf" (transformers' generate())
    prompt_index: int  # position of the prompt in the sweep (0-based)
    prompt_id: str  # the prompt's id (a Spec-Bench question id, or its 1-based number)
    category: str  # the prompt's category ("custom" for typed prompts)
    prompt_tokens: int | None  # prompt length in target tokens (chat template included); None: a server that did not say
    new_tokens: int  # tokens generated (EOS included)
    wall_s: float  # timed seconds, session start (prefill included) to the last token
    steps: int | None  # target forward passes after prefill (HF: generate()'s steps); None: a server that reports no accepted count
    drafted: int | None = None  # draft tokens proposed (None for HF rows)
    accepted: int | None = None  # draft tokens kept (None for HF rows)
    per_position_hits: list[int] = ()  # type: ignore[assignment]  # steps whose draft i was accepted
    per_position_trials: list[int] = ()  # type: ignore[assignment]  # steps that drafted >= i+1 tokens
    tree_steps: int | None = None  # steps that drafted a token tree (drafted counts its nodes; positions are depths)
    draft_ms: float | None = None  # time in the proposer (None for HF rows)
    verify_ms: float | None = None  # time in the target's verify passes
    other_ms: float | None = None  # the rest of the steps (sampling, rollback, bookkeeping)
    prefill_ms: float | None = None  # the prompt's forward pass
    finished: str | None = "length"  # "eos" or "length" (a server's finish_reason; None when it gave none)
    tokens_per_s: float = 0.0  # new_tokens / wall_s
    ms_per_token: float | None = None  # 1000 wall_s / new_tokens
    speedup: float | None = None  # tokens_per_s / the same impl's target-only run on this prompt
    speedup_vs_specviz: float | None = None  # tokens_per_s / specviz's target-only run on this prompt
    same_as_target: bool | None = None  # greedy: output identical to specviz target-only (None: not checked)
    acceptance_rate: float | None = None  # accepted / drafted
    mean_acceptance_length: float | None = None  # new_tokens / steps (tau)
    # a stalled machine (specviz.bench.stalls): this run's time per target pass over what its configuration
    # on the other prompts and its prompt's other configurations predict (analysis.noise.stall_scores)
    stall_score: float | None = None
    rerun_from_s: float | None = None  # this run is a re-run: the wall_s of the first one, which was flagged
    flagged: bool = False  # far outside its prompt's other runs even so (or not re-run): left out of the summary


@dataclass(frozen=True)
class SummaryRow(_Row):
    """One configuration (proposer x k x impl) over every prompt it ran (see specviz.bench)."""

    KIND: ClassVar[str] = "summary"
    proposer: str  # display name, as in PromptResult
    k: int  # tokens drafted per step (0 for target-only)
    impl: str  # "specviz" or "hf"
    prompts: int  # prompts this configuration ran
    new_tokens: int  # total new tokens
    wall_s: float  # total timed seconds
    tokens_per_s: float  # new_tokens / wall_s (token-weighted mean)
    ms_per_token: float | None = None  # 1000 / tokens_per_s
    speedup: float | None = None  # tokens_per_s / the same impl's target-only, on the prompts both ran
    speedup_vs_specviz: float | None = None  # tokens_per_s / specviz's target-only, on the shared prompts
    speedup_median: float | None = None  # median of the per-prompt speedups
    steps: int | None = 0  # target forward passes after prefill, summed (None: a server that reports no accepted count)
    drafted: int | None = None  # draft tokens proposed, summed (None for HF rows)
    accepted: int | None = None  # draft tokens kept, summed
    acceptance_rate: float | None = None  # pooled: accepted / drafted
    mean_acceptance_length: float | None = None  # pooled: new_tokens / steps (tau)
    per_position: list[float] = ()  # type: ignore[assignment]  # pooled acceptance rate at draft position i
    nodes_per_step: float | None = None  # drafted / steps: positions verified per step besides the root (chain: ~k; tree: its nodes)
    tree: bool = False  # the proposer drafted token trees (no transformers counterpart)
    draft_ms: float | None = None  # summed proposer time
    verify_ms: float | None = None  # summed verify time
    other_ms: float | None = None  # summed rest of the steps
    prefill_ms: float | None = None  # summed prefill time
    step_ms: float | None = None  # (draft + verify + other) ms per step (specviz rows)
    c: float | None = None  # (draft ms / drafted token) / target-only ms per step
    v: float | None = None  # ((verify + other) ms / step) / target-only ms per step
    expected_tokens_per_step: float | None = None  # theory at the measured a and k
    predicted_speedup: float | None = None  # theory at the measured a, k, c and v
    same_as_target: float | None = None  # share of prompts whose output matched target-only (greedy)
    speedup_low: float | None = None  # speedup_median's bootstrap interval over prompts and passes (analysis.noise)
    speedup_high: float | None = None
    verdict: str | None = None  # "faster", "slower" or "within noise": from the median's interval, never the total
    flagged_runs: int = 0  # runs left out: still far outside their prompt's other runs after a re-run
    reruns: int = 0  # runs flagged and re-run once (the re-run's numbers kept)


@dataclass(frozen=True)
class RemotePromptResult(PromptResult):
    """One request to a remote server: a PromptResult (``impl`` "remote"; draft_ms, verify_ms and
    other_ms are None: engines report no such timings) plus what only a server gives."""

    engine: str | None = None  # "vllm", "sglang", "llama.cpp" (None: not recognised)
    url: str | None = None  # the server
    draft_steps: int | None = None  # steps that drafted (the engines' num_drafts)
    engine_mean_acceptance_length: float | None = None  # 1 + accepted / draft_steps: the engines' own tau
    engine_tokens_per_s: float | None = None  # the engine's own decode tokens/s
    engine_reported: dict | None = None  # the engine's own tau and acceptance rate, and where they came from
    counters_diff: dict | None = None  # the spec-decode Prometheus counters' difference around the request
    per_step_accepted: list[int] = ()  # type: ignore[assignment]  # vLLM "detailed": accepted drafts per step
    per_step_drafted: list[int] = ()  # type: ignore[assignment]  # vLLM "detailed": drafts per step
    text: str = ""  # the completion (for same_as_target)
    sources: dict = field(default_factory=dict)  # field -> the response field or counter it came from
    unavailable: list[str] = ()  # type: ignore[assignment]  # fields this engine did not give


@dataclass(frozen=True)
class RemoteSummaryRow(SummaryRow):
    """One remote server over every prompt: a SummaryRow (c, v, step_ms, predicted_speedup None:
    not measurable remotely) plus what only a server gives."""

    draft_steps: int | None = None  # steps that drafted, summed
    engine_mean_acceptance_length: float | None = None  # pooled 1 + accepted / draft_steps
    per_position_hits: list[int] = ()  # type: ignore[assignment]  # summed per-position hits
    per_position_trials: list[int] = ()  # type: ignore[assignment]  # summed per-position trials
    engine_tokens_per_s: float | None = None  # mean of the requests' engine tokens/s
    engine: str | None = None  # as in the prompt rows (the first one's)
    url: str | None = None
    sources: dict = field(default_factory=dict)  # every field's first source over the prompts
    unavailable: list[str] = ()  # type: ignore[assignment]  # fields some request did not give


Row = Union[PromptResult, SummaryRow]


def prompt_result(record: Mapping[str, Any] | PromptResult) -> PromptResult:
    """A per-prompt record of a report (local or remote) -> its typed row."""
    if isinstance(record, PromptResult):
        return record
    cls = RemotePromptResult if record.get("impl") == REMOTE_IMPL else PromptResult
    return cls.from_record(record)


def to_record(row: Row | Mapping[str, Any]) -> dict[str, Any]:
    """The one conversion to the report's JSON object / CSV row: ``{"kind": ..., **fields}``.
    A mapping (a row read from a report) is passed through as a dict."""
    if isinstance(row, _Row):
        return {"kind": row.KIND, **{k: list(v) if isinstance(v, tuple) else v for k, v in asdict(row).items()}}
    return dict(row)


__all__ = ["PromptResult", "REMOTE_IMPL", "RemotePromptResult", "RemoteSummaryRow", "Row", "SummaryRow", "prompt_result",
           "to_record"]
