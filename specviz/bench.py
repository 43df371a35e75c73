"""Benchmark sweeps: target-only decoding and every proposer x k on the same prompts.

One API serves the CLI (``specviz bench``) and the app's Benchmark tab:

    sweep = Sweep(target, {"ngram": NGram()}, prompts, BenchConfig(ks=(1, 2, 4)))
    for event in sweep:          # a warm-up, then one event per timed run (stoppable)
        ...                      # event.done / event.total, event.row (a per-prompt row)
    report = sweep.report()      # {"schema", "meta", "rows", "prompt_rows"}

``run_sweep(...)`` wraps that loop with ``on_event`` / ``should_stop`` callbacks.

How it measures (docs/architecture.md, "Benchmarks"): batch size 1, one process, a warm-up of every
configuration first, then the prompts one at a time with every configuration run back to back on
each prompt (interleaved, so slow drift of the machine hits all configurations alike), the
order rotated by one configuration per prompt (so none always runs first on a fresh prompt, when
a new prompt length can be slower). The target-only baseline is measured in the same run. With ``compare_hf`` the same prompts (the same
token ids, the same ``max_new_tokens``, the same EOS ids) also go through ``transformers``' own
``generate()``: target-only, ``assistant_model=`` with a constant ``num_assistant_tokens=k``, and
``prompt_lookup_num_tokens=k``.

Timing: each run is timed from the start of the session (cache allocation, prefill included) to
its last token, around the whole ``generate()`` call for HF rows. Prompt encoding, row building
and everything the caller does between events are *not* timed; that is the sweep's overhead,
reported in ``meta`` as ``overhead_s`` / ``overhead_frac``.

Aggregation in a summary row (one per proposer x k x impl):
- ``tokens_per_s`` = total new tokens / total timed seconds over the prompts (a token-weighted
  mean, robust to short EOS-terminated answers); ``ms_per_token`` = 1000 / tokens_per_s;
- ``speedup`` = tokens_per_s / the same impl's target-only tokens_per_s, over the prompts both
  finished; ``speedup_median`` is the median of the per-prompt speedups; HF rows also carry
  ``speedup_vs_specviz`` (against specviz's target-only);
- acceptance counts (drafted, accepted, per-position hits/trials, steps, committed) are summed
  over prompts, so ``acceptance_rate``, ``mean_acceptance_length`` and ``per_position`` are the
  pooled rates (vLLM's definitions);
- ``c``, ``v`` and ``predicted_speedup`` follow :mod:`specviz.metrics`.
"""

from __future__ import annotations

import copy
import csv
import io
import json
import math
import platform
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import torch

from . import metrics
from .engine import MAX_K, SpeculativeDecoder, encode_prompt, eos_token_ids
from .prompts import PromptRow
from .algorithm import Acceptance
from .proposers import CrossTokenizerDraft, DraftModel, EarlyExit, NGram, NGramOrDraft, Proposer
from .schedules import make_schedule
from .records import Sampling, StepRecord

SCHEMA = "specviz.bench/1"
TARGET_ONLY = "target-only"

PROPOSER_HELP = (
    "proposer specs: 'ngram' (prompt lookup, max n-gram 3), 'ngram:N' (max n-gram N), "
    "'draft:NAME' (a draft model: a built-in such as smollm2-135m, a local directory or a hub id), "
    "'draft:NAME@int8' (that model quantized to int8), 'ngram+draft:NAME' (prompt lookup when it matches, "
    "the draft otherwise), 'early-exit:L' (the target's first L layers), "
    "'xdraft:NAME' (a draft with a different tokenizer, re-tokenized), 'none' (target-only)"
)


# ---------------------------------------------------------------------------------------------
# Parsing user input
# ---------------------------------------------------------------------------------------------


def parse_proposer(spec: str, target, load: Callable[..., Any] | None = None) -> Proposer | None:
    """A proposer spec -> a Proposer (None for 'none'). Raises ValueError for a bad spec.

    'ngram', 'ngram:N', 'draft:NAME', 'draft:NAME@int8', 'ngram+draft:NAME' (prompt lookup when
    it matches, the draft otherwise), 'xdraft:NAME', 'early-exit:L', 'none' / 'target-only'. ``load`` is
    ``specviz.models.load_model`` (injectable for tests); the draft is loaded on the target's
    device and dtype and checked against the target's tokenizer.
    """
    kind, arg = check_proposer_spec(spec)
    if kind == "none":
        return None
    if kind == "ngram":
        return NGram() if arg is None else NGram(max_ngram=int(arg), name=f"ngram:{arg}")
    if kind in ("draft", "ngram+draft"):
        name = arg
        if load is None:
            from .models import load_model as load
        quantized = name.lower().endswith("@int8")
        dtype = "auto" if quantized else target.dtype
        draft = load(name, device=target.device, dtype=dtype)  # @int8 beside a GPU target: a clear ValueError
        proposer = DraftModel(draft, name=f"draft:{draft.name}")
        proposer.init_state(target)  # raises ValueError when the tokenizers differ
        return proposer if kind == "draft" else NGramOrDraft(proposer, name=f"ngram+draft:{draft.name}")
    if kind == "early-exit":
        return EarlyExit(target, int(arg))
    if kind == "xdraft":
        if load is None:
            from .models import load_model as load
        draft = load(arg, device=target.device)
        return CrossTokenizerDraft(draft, name=f"xdraft:{draft.name}")
    raise AssertionError(kind)


def check_proposer_spec(spec: str) -> tuple[str, str | None]:
    """Syntax check of a proposer spec, loading nothing: -> (kind, argument).

    kind is "none", "ngram", "draft", "ngram+draft", "xdraft" or "early-exit"; the argument is the n-gram size (or None) or the draft
    model's name. Raises ValueError with the accepted forms for anything else.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"empty proposer spec; {PROPOSER_HELP}")
    kind, sep, arg = spec.strip().partition(":")
    kind, arg = kind.strip().lower(), arg.strip()
    if kind in ("none", "target-only") and not sep:
        return "none", None
    if kind == "ngram":
        if not sep:
            return "ngram", None
        if not arg.isdigit() or int(arg) < 1:
            raise ValueError(f"bad proposer {spec!r}: 'ngram:N' needs a whole number N >= 1, got {arg!r}")
        return "ngram", str(int(arg))
    if kind in ("draft", "xdraft", "ngram+draft"):
        if not arg:
            raise ValueError(f"bad proposer {spec!r}: '{kind}:NAME' needs a model name, e.g. {kind}:smollm2-135m")
        return kind, arg
    if kind == "early-exit":
        if not arg.isdigit() or int(arg) < 1:
            raise ValueError(f"bad proposer {spec!r}: 'early-exit:L' needs a whole number of layers L >= 1, got {arg!r}")
        return "early-exit", str(int(arg))
    raise ValueError(f"unknown proposer {spec!r}; {PROPOSER_HELP}")


def parse_ks(text: str | Iterable[int]) -> tuple[int, ...]:
    """'1,2,4,8' (or an iterable of ints) -> (1, 2, 4, 8), sorted, unique, each in 1..MAX_K."""
    if isinstance(text, str):
        parts = [p.strip() for p in text.replace(" ", ",").split(",") if p.strip()]
        try:
            ks = [int(p) for p in parts]
        except ValueError:
            raise ValueError(f"k must be a comma-separated list of whole numbers like 1,2,4,8, got {text!r}") from None
    else:
        ks = []
        for k in text:
            if isinstance(k, bool) or int(k) != k:
                raise ValueError(f"k values must be whole numbers, got {k!r}")
            ks.append(int(k))
    if not ks:
        raise ValueError("give at least one k (tokens drafted per step), e.g. 1,2,4,8")
    bad = [k for k in ks if not 1 <= k <= MAX_K]
    if bad:
        raise ValueError(f"k must be between 1 and {MAX_K}, got {bad[0]}")
    return tuple(sorted(set(ks)))


# ---------------------------------------------------------------------------------------------
# Configuration and events
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BenchConfig:
    ks: tuple[int, ...] = (1, 2, 4, 8)  # draft lengths to sweep
    max_new_tokens: int = 64  # per prompt and run
    sampling: Sampling = Sampling()  # temperature 0 = greedy
    seed: int = 0  # every run of a prompt uses this seed
    chat: bool = True  # wrap prompts in the target's chat template when it has one
    compare_hf: bool = False  # also time transformers' generate() on the same work
    warmup: bool = True  # run every configuration once, untimed, before measuring
    warmup_tokens: int | None = None  # max_new_tokens of the warm-up runs (None: max(ks) + 2, one full step)
    schedules: tuple[str, ...] = ("constant",)  # k schedules to sweep beside each k: constant, heuristic, confidence:T
    acceptance: str = "exact"  # "exact" or "typical" (LOSSY)

    def __post_init__(self) -> None:
        object.__setattr__(self, "ks", parse_ks(self.ks))
        object.__setattr__(self, "schedules", tuple(self.schedules) or ("constant",))
        for spec in self.schedules:
            make_schedule(spec)  # raises ValueError for an unknown schedule
        Acceptance(self.acceptance)  # raises ValueError for an unknown rule
        if isinstance(self.max_new_tokens, bool) or not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be a whole number >= 1, got {self.max_new_tokens!r}")
        if not isinstance(self.sampling, Sampling):
            raise ValueError("sampling must be a specviz.Sampling")


@dataclass(frozen=True)
class RunSpec:
    """One configuration of the sweep."""

    proposer: str  # display name: "target-only", "ngram", "draft:smollm2-135m", ...
    k: int  # tokens drafted per step (0 for target-only); the starting k of a dynamic schedule
    impl: str  # "specviz" or "hf"

    @property
    def label(self) -> str:
        base = self.proposer if self.k == 0 else f"{self.proposer} k={self.k}"
        return base if self.impl == "specviz" else f"{base} (hf)"


@dataclass
class BenchEvent:
    """What the sweep reports as it goes (the UI streams these)."""

    kind: str  # "warmup" | "run" | "stopped" | "done"
    done: int  # timed runs finished
    total: int  # timed runs planned
    label: str  # what just ran (or is about to)
    row: dict[str, Any] | None = None  # the per-prompt row of a "run" event
    prompt_done: bool = False  # True on the last run of a prompt (summaries changed meaningfully)


# ---------------------------------------------------------------------------------------------
# The sweep
# ---------------------------------------------------------------------------------------------


class Sweep:
    """A benchmark sweep; iterate it to run, then call ``report()``."""

    def __init__(
        self,
        target,
        proposers: Mapping[str, Proposer | None],
        prompts: Sequence[PromptRow | str],
        config: BenchConfig = BenchConfig(),
        *,
        prompt_source: str = "",
    ):
        if not prompts:
            raise ValueError("no prompts to benchmark: pick a category with prompts or type some prompts")
        self.target = target
        self.config = config
        self.prompt_source = prompt_source
        self.prompts = [p if isinstance(p, PromptRow) else PromptRow(str(p), "custom", str(i)) for i, p in enumerate(prompts, 1)]
        self.proposers = {name: p for name, p in proposers.items() if p is not None}
        sampling = config.sampling
        # Decoders are built once: building one checks the proposer can draft for this target.
        self._decoders: dict[RunSpec, SpeculativeDecoder] = {RunSpec(TARGET_ONLY, 0, "specviz"): SpeculativeDecoder(target, None, sampling=sampling)}
        acceptance = Acceptance(config.acceptance)
        for name, prop in self.proposers.items():
            for k in config.ks:
                for schedule in config.schedules:
                    self._decoders[RunSpec(_run_name(name, schedule, acceptance), k, "specviz")] = SpeculativeDecoder(
                        target, prop, k=k, sampling=sampling, schedule=schedule, acceptance=acceptance
                    )
        self._hf: dict[RunSpec, dict[str, Any]] = {}
        self.hf_skipped: list[str] = []
        if config.compare_hf:
            self._hf[RunSpec(TARGET_ONLY, 0, "hf")] = {}
            for name, prop in self.proposers.items():
                for k in config.ks:
                    kw = _hf_kwargs(prop, k)
                    if kw is None:
                        if name not in self.hf_skipped:
                            self.hf_skipped.append(name)
                        continue
                    self._hf[RunSpec(name, k, "hf")] = kw
        self.runs: list[RunSpec] = list(self._decoders) + list(self._hf)
        self.eos = eos_token_ids(target)
        self.prompt_rows: list[dict[str, Any]] = []
        self.stopped = False
        self.finished = False
        self.wall_s = self.timed_s = self.warmup_s = 0.0
        self._started: float | None = None
        self._ids: list[list[int]] | None = None
        self._out_ids: dict[RunSpec, list[int]] = {}  # the current prompt's outputs, for same_as_target
        self.started_at = time.strftime("%Y-%m-%dT%H:%M:%S")

    @property
    def total(self) -> int:
        return len(self.runs) * len(self.prompts)

    # -- running ----------------------------------------------------------------------------
    def __iter__(self) -> Iterator[BenchEvent]:
        return self.events()

    def events(self, should_stop: Callable[[], bool] | None = None) -> Iterator[BenchEvent]:
        """Run the sweep, yielding a "warmup" event, then one "run" event per timed run."""
        stop = should_stop or (lambda: False)
        self._started = time.perf_counter()
        try:
            cfg = self.config
            self._ids = [encode_prompt(self.target.tokenizer, p.prompt, chat=cfg.chat) for p in self.prompts]
            if cfg.warmup:
                warm_tokens = min(cfg.warmup_tokens or max(cfg.ks) + 2, cfg.max_new_tokens)
                yield BenchEvent("warmup", 0, self.total, "warm-up")
                t0 = time.perf_counter()
                for spec in self.runs:
                    if stop():
                        self.stopped = True
                        break
                    self._run(spec, self._ids[0], warm_tokens)
                self.warmup_s = time.perf_counter() - t0
            done = 0
            for i, (prompt, ids) in enumerate(zip(self.prompts, self._ids)):
                order = self.order(i)
                for j, spec in enumerate(order):
                    if self.stopped or stop():
                        self.stopped = True
                        yield BenchEvent("stopped", done, self.total, "stopped")
                        return
                    out = self._run(spec, ids, cfg.max_new_tokens)
                    self.timed_s += out["wall_s"]
                    self._out_ids[spec] = out.pop("token_ids")
                    row = self._prompt_row(spec, i, prompt, ids, out)
                    self.prompt_rows.append(row)
                    self._link(i)
                    done += 1
                    yield BenchEvent("run", done, self.total, f"prompt {i + 1}/{len(self.prompts)}: {spec.label}", row, j == len(order) - 1)
                self._out_ids.clear()
            self.finished = True
            yield BenchEvent("done", done, self.total, "done")
        finally:
            self.wall_s = time.perf_counter() - self._started

    def _run(self, spec: RunSpec, ids: list[int], max_new_tokens: int) -> dict[str, Any]:
        if spec.impl == "specviz":
            return _run_specviz(self._decoders[spec], ids, max_new_tokens, self.config.seed)
        return _run_hf(self.target, ids, max_new_tokens, self.config.sampling, self.config.seed, self._hf[spec], self.eos)

    def order(self, i: int) -> list[RunSpec]:
        """The configurations in the order prompt ``i`` runs them: all back to back, rotated by
        one per prompt so that no configuration always goes first (or last) on a prompt."""
        r = i % len(self.runs)
        return self.runs[r:] + self.runs[:r]

    def _prompt_row(self, spec: RunSpec, i: int, prompt: PromptRow, ids: list[int], out: dict[str, Any]) -> dict[str, Any]:
        n, wall = out["new_tokens"], out["wall_s"]
        row = {
            "kind": "prompt", "proposer": spec.proposer, "k": spec.k, "impl": spec.impl,
            "prompt_index": i, "prompt_id": prompt.id, "category": prompt.category, "prompt_tokens": len(ids),
            **out,
            "tokens_per_s": n / wall if wall > 0 else 0.0,
            "ms_per_token": 1e3 * wall / n if n else None,
            "speedup": None, "speedup_vs_specviz": None, "same_as_target": None,
        }
        row["acceptance_rate"] = row["accepted"] / row["drafted"] if row.get("drafted") else None
        row["mean_acceptance_length"] = n / row["steps"] if row.get("steps") else None
        return row

    def _link(self, i: int) -> None:
        """(Re)compute prompt ``i``'s per-prompt speedups and output checks against its
        target-only runs, as soon as those have run (they need not run first)."""
        rows = []
        for r in reversed(self.prompt_rows):
            if r["prompt_index"] != i:
                break
            rows.append(r)
        bases = {r["impl"]: r for r in rows if r["k"] == 0}
        base_ids = self._out_ids.get(RunSpec(TARGET_ONLY, 0, "specviz"))
        greedy = self.config.sampling.greedy
        for r in rows:
            for key, impl in (("speedup", r["impl"]), ("speedup_vs_specviz", "specviz")):
                b = bases.get(impl)
                r[key] = r["tokens_per_s"] / b["tokens_per_s"] if b and b["tokens_per_s"] > 0 and r["new_tokens"] else None
            is_base = r["impl"] == "specviz" and r["k"] == 0
            if greedy and base_ids is not None and not is_base:
                r["same_as_target"] = self._out_ids.get(RunSpec(r["proposer"], r["k"], r["impl"])) == base_ids

    # -- results ----------------------------------------------------------------------------
    def rows(self) -> list[dict[str, Any]]:
        return summarize(self.prompt_rows, order=self.runs)

    def report(self) -> dict[str, Any]:
        """The sweep's results as a JSON-ready dict (the schema ``specviz bench --json`` writes)."""
        wall = self.wall_s if self._started is not None else 0.0
        overhead = max(0.0, wall - self.timed_s - self.warmup_s)
        cfg = self.config
        t = self.target
        meta = {
            "target": t.name,
            "device": str(t.device),
            "dtype": str(t.dtype).removeprefix("torch."),
            "quantize": getattr(t, "quantize", None),
            "proposers": list(self.proposers),
            "ks": list(cfg.ks),
            "max_new_tokens": cfg.max_new_tokens,
            "sampling": asdict(cfg.sampling),
            "seed": cfg.seed,
            "chat": cfg.chat,
            "compare_hf": cfg.compare_hf,
            "hf_skipped": self.hf_skipped,
            "prompts": len(self.prompts),
            "prompt_source": self.prompt_source,
            "categories": sorted({p.category for p in self.prompts}),
            "runs_planned": self.total,
            "runs_done": len(self.prompt_rows),
            "stopped": self.stopped,
            "started": self.started_at,
            "wall_s": wall,
            "timed_s": self.timed_s,
            "warmup_s": self.warmup_s,
            "overhead_s": overhead,
            "overhead_frac": overhead / wall if wall > 0 else 0.0,
            "torch": torch.__version__,
            "transformers": _version("transformers"),
            "python": platform.python_version(),
            "machine": platform.machine(),
            "threads": torch.get_num_threads(),
            "definitions": {
                "tokens_per_s": "total new tokens / total timed seconds over the prompts (prefill included)",
                "speedup": "tokens_per_s / the same impl's target-only tokens_per_s on the same prompts",
                "speedup_median": "median over prompts of the per-prompt speedup",
                "speedup_vs_specviz": "tokens_per_s / specviz target-only tokens_per_s (the same for specviz rows)",
                "acceptance_rate": "accepted draft tokens / drafted tokens, pooled over prompts",
                "mean_acceptance_length": "committed tokens / steps (target forward passes after prefill), pooled",
                "per_position": "steps whose draft i was accepted / steps with >= i+1 drafts, pooled",
                "c": "(draft ms / drafted token) / target-only ms per step",
                "v": "((verify + other) ms / step) / target-only ms per step",
                "predicted_speedup": "(1 - a^(k+1)) / ((1 - a)(k c + v)) with the measured a, c, v",
                "overhead_s": "sweep wall time - timed runs - warm-up (prompt encoding, rows, the caller's work between runs)",
            },
        }
        return {"schema": SCHEMA, "meta": meta, "rows": self.rows(), "prompt_rows": list(self.prompt_rows)}


def run_sweep(
    target,
    proposers: Mapping[str, Proposer | None],
    prompts: Sequence[PromptRow | str],
    config: BenchConfig = BenchConfig(),
    *,
    on_event: Callable[[BenchEvent], None] | None = None,
    on_row: Callable[[dict[str, Any]], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    prompt_source: str = "",
) -> dict[str, Any]:
    """Run a whole sweep and return its report (see ``Sweep.report``).

    ``on_event`` gets every BenchEvent, ``on_row`` every per-prompt row as it is measured;
    ``should_stop`` is polled before each run (the sweep then ends with a "stopped" event).
    """
    sweep = Sweep(target, proposers, prompts, config, prompt_source=prompt_source)
    for event in sweep.events(should_stop):
        if on_event is not None:
            on_event(event)
        if on_row is not None and event.row is not None:
            on_row(event.row)
    return sweep.report()


# ---------------------------------------------------------------------------------------------
# One timed run
# ---------------------------------------------------------------------------------------------


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _run_specviz(decoder: SpeculativeDecoder, ids: list[int], max_new_tokens: int, seed: int) -> dict[str, Any]:
    _sync(decoder.target.device)
    t0 = time.perf_counter()
    session = decoder.start(ids, max_new_tokens=max_new_tokens, seed=seed)
    while not session.done:
        session.step()
    wall = time.perf_counter() - t0
    steps = session.steps
    hits, trials = _position_counts(steps)
    return {
        "token_ids": session.new_token_ids,
        "new_tokens": session.n_new,
        "wall_s": wall,
        "steps": len(steps),
        "drafted": sum(s.k for s in steps),
        "accepted": sum(min(s.n_accepted, s.n_committed) for s in steps),
        "per_position_hits": hits,
        "per_position_trials": trials,
        "draft_ms": sum(s.draft_ms for s in steps),
        "verify_ms": sum(s.verify_ms for s in steps),
        "other_ms": sum(s.other_ms for s in steps),
        "prefill_ms": session.prefill_ms,
        "finished": session.finished,
    }


def _position_counts(steps: Sequence[StepRecord]) -> tuple[list[int], list[int]]:
    """Per-position (accepted, drafted) step counts, as in compute_stats."""
    max_k = max((s.k for s in steps), default=0)
    hits, trials = [0] * max_k, [0] * max_k
    for s in steps:
        n = min(s.n_accepted, s.n_committed)
        for i in range(s.k):
            trials[i] += 1
            if i < n:
                hits[i] += 1
    return hits, trials


def _run_name(proposer: str, schedule: str, acceptance: Acceptance) -> str:
    """The row name of a proposer run: "ngram", "ngram [heuristic]", "ngram (typical, LOSSY)"."""
    name = proposer if schedule == "constant" else f"{proposer} [{schedule}]"
    return f"{name} ({acceptance.rule}, LOSSY)" if acceptance.lossy else name


def _hf_kwargs(proposer: Proposer, k: int) -> dict[str, Any] | None:
    """transformers generate() arguments that do the same work as ``proposer`` at ``k``."""
    if isinstance(proposer, NGram):
        return {"prompt_lookup_num_tokens": k, "max_matching_ngram_size": proposer.max_ngram}
    if isinstance(proposer, DraftModel):
        # The assistant's own generation_config decides its draft length (transformers 5 reads
        # num_assistant_tokens from there, not from generate()'s kwargs). A shallow copy of the
        # module with its own config keeps the shared model untouched: constant k, no
        # confidence-based early stop (threshold 0 disables ConfidenceCriteria).
        assistant = copy.copy(proposer.model.model)
        gen = copy.deepcopy(assistant.generation_config)
        gen.num_assistant_tokens = k
        gen.num_assistant_tokens_schedule = "constant"
        gen.assistant_confidence_threshold = 0.0
        assistant.generation_config = gen
        return {"assistant_model": assistant}
    return None


class _StepCounter:
    """A transformers streamer that counts generate()'s steps (every put after the prompt's)."""

    def __init__(self):
        self.puts = 0

    def put(self, value) -> None:
        self.puts += 1

    def end(self) -> None:
        pass

    @property
    def steps(self) -> int:
        return max(0, self.puts - 1)


def _run_hf(target, ids: list[int], max_new_tokens: int, sampling: Sampling, seed: int, extra: dict[str, Any], eos) -> dict[str, Any]:
    from transformers.utils import logging as hf_logging

    model = target.model
    device = target.device
    input_ids = torch.tensor([ids], dtype=torch.long, device=device)
    kwargs: dict[str, Any] = dict(
        input_ids=input_ids, attention_mask=torch.ones_like(input_ids), max_new_tokens=max_new_tokens,
        do_sample=not sampling.greedy, pad_token_id=model.generation_config.pad_token_id,
    )
    if not sampling.greedy:
        kwargs.update(temperature=sampling.temperature, top_k=sampling.top_k or 0, top_p=sampling.top_p or 1.0)
    kwargs.update(extra)
    counter = _StepCounter()
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []), torch.inference_mode():
            torch.manual_seed(seed)  # generate() samples from the global RNG; fork_rng restores it after
            _sync(device)
            t0 = time.perf_counter()
            out = model.generate(streamer=counter, **kwargs)
            _sync(device)
            wall = time.perf_counter() - t0
    finally:
        hf_logging.set_verbosity(verbosity)
    new = out[0, len(ids):].tolist()
    finished = "length"
    for j, t in enumerate(new):  # same EOS rule as the engine: stop at (and keep) the first EOS
        if t in eos:
            new, finished = new[: j + 1], "eos"
            break
    return {
        "token_ids": new,
        "new_tokens": len(new),
        "wall_s": wall,
        "steps": counter.steps,
        "drafted": None,
        "accepted": None,
        "per_position_hits": [],
        "per_position_trials": [],
        "draft_ms": None,
        "verify_ms": None,
        "other_ms": None,
        "prefill_ms": None,
        "finished": finished,
    }


# ---------------------------------------------------------------------------------------------
# Summaries
# ---------------------------------------------------------------------------------------------


def _sum(rows: Sequence[Mapping[str, Any]], key: str) -> float | None:
    vals = [r.get(key) for r in rows]
    return None if any(v is None for v in vals) else sum(vals)


def summarize(prompt_rows: Sequence[Mapping[str, Any]], order: Sequence[RunSpec] | None = None) -> list[dict[str, Any]]:
    """Per-prompt rows -> one summary row per (proposer, k, impl) (see the module docstring)."""
    groups: dict[tuple[str, int, str], list[Mapping[str, Any]]] = {}
    for r in prompt_rows:
        groups.setdefault((r["proposer"], r["k"], r["impl"]), []).append(r)
    keys = [(s.proposer, s.k, s.impl) for s in order if (s.proposer, s.k, s.impl) in groups] if order else list(groups)
    keys += [k for k in groups if k not in keys]
    bases = {impl: groups.get((TARGET_ONLY, 0, impl), []) for impl in ("specviz", "hf")}
    base_step_ms = None
    sv = bases["specviz"]
    if sv:
        steps = sum(r["steps"] for r in sv)
        base_step_ms = (sum(r["draft_ms"] + r["verify_ms"] + r["other_ms"] for r in sv) / steps) if steps else None

    out = []
    for key in keys:
        proposer, k, impl = key
        rows = groups[key]
        n = sum(r["new_tokens"] for r in rows)
        wall = sum(r["wall_s"] for r in rows)
        tps = n / wall if wall > 0 else 0.0
        row: dict[str, Any] = {
            "kind": "summary", "proposer": proposer, "k": k, "impl": impl, "prompts": len(rows),
            "new_tokens": n, "wall_s": wall, "tokens_per_s": tps, "ms_per_token": 1e3 * wall / n if n else None,
        }
        row["speedup"] = _ratio(rows, bases[impl])
        row["speedup_vs_specviz"] = _ratio(rows, bases["specviz"])
        per = [r["speedup"] for r in rows if r.get("speedup") is not None]
        row["speedup_median"] = statistics.median(per) if per else None
        steps = sum(r["steps"] for r in rows)
        drafted, accepted = _sum(rows, "drafted"), _sum(rows, "accepted")
        row.update(
            steps=steps, drafted=drafted, accepted=accepted,
            acceptance_rate=(accepted / drafted) if drafted else None,
            mean_acceptance_length=n / steps if steps else None,
        )
        width = max((len(r.get("per_position_hits") or []) for r in rows), default=0)
        hits, trials = [0] * width, [0] * width
        for r in rows:
            for i, (h, t) in enumerate(zip(r.get("per_position_hits") or [], r.get("per_position_trials") or [])):
                hits[i] += h
                trials[i] += t
        row["per_position"] = metrics.per_position_rates(hits, trials)
        for name in ("draft_ms", "verify_ms", "other_ms", "prefill_ms"):
            row[name] = _sum(rows, name)
        row["step_ms"] = (row["draft_ms"] + row["verify_ms"] + row["other_ms"]) / steps if impl == "specviz" and steps else None
        row["c"] = row["v"] = row["expected_tokens_per_step"] = row["predicted_speedup"] = None
        if impl == "specviz" and k > 0 and base_step_ms:
            row["c"] = metrics.measured_c(row["draft_ms"], drafted or 0, base_step_ms)
            row["v"] = metrics.measured_v(row["verify_ms"], row["other_ms"], steps, base_step_ms)
            a = row["acceptance_rate"]
            if a is not None:
                row["expected_tokens_per_step"] = metrics.expected_tokens_per_step(a, k)
                row["predicted_speedup"] = metrics.predicted_speedup(a, k, row["c"], row["v"])
        same = [r["same_as_target"] for r in rows if r.get("same_as_target") is not None]
        row["same_as_target"] = (sum(same) / len(same)) if same else None
        out.append(row)
    return out


def _ratio(rows: Sequence[Mapping[str, Any]], base: Sequence[Mapping[str, Any]]) -> float | None:
    """tokens/s of ``rows`` over tokens/s of ``base``, both on the prompts they share."""
    if not base:
        return None
    shared = {r["prompt_index"] for r in rows} & {b["prompt_index"] for b in base}
    if not shared:
        return None
    num_n = sum(r["new_tokens"] for r in rows if r["prompt_index"] in shared)
    num_t = sum(r["wall_s"] for r in rows if r["prompt_index"] in shared)
    den_n = sum(b["new_tokens"] for b in base if b["prompt_index"] in shared)
    den_t = sum(b["wall_s"] for b in base if b["prompt_index"] in shared)
    if num_t <= 0 or den_t <= 0 or den_n <= 0:
        return None
    return (num_n / num_t) / (den_n / den_t)


# ---------------------------------------------------------------------------------------------
# Output: table, JSON, CSV
# ---------------------------------------------------------------------------------------------

CSV_COLUMNS = [
    "proposer", "k", "impl", "prompts", "new_tokens", "wall_s", "tokens_per_s", "ms_per_token", "speedup",
    "speedup_median", "speedup_vs_specviz", "acceptance_rate", "mean_acceptance_length", "per_position",
    "steps", "drafted", "accepted", "draft_ms", "verify_ms", "other_ms", "prefill_ms", "step_ms", "c", "v",
    "expected_tokens_per_step", "predicted_speedup", "same_as_target",
]


def _cell(v: Any) -> Any:
    if isinstance(v, float):
        return round(v, 6)
    if isinstance(v, (list, tuple)):
        return ";".join(f"{x:.4f}" if isinstance(x, float) else str(x) for x in v)
    return "" if v is None else v


def csv_text(rows: Sequence[Mapping[str, Any]]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({c: _cell(r.get(c)) for c in CSV_COLUMNS})
    return buf.getvalue()


def write_csv(rows: Sequence[Mapping[str, Any]], path: str | Path) -> Path:
    p = Path(path)
    p.write_text(csv_text(rows), encoding="utf-8")
    return p


def _json_safe(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    return obj


def write_json(report: Mapping[str, Any], path: str | Path) -> Path:
    p = Path(path)
    p.write_text(json.dumps(_json_safe(report), indent=1, ensure_ascii=False), encoding="utf-8")
    return p


def load_report(path: str | Path) -> dict[str, Any]:
    """Read a report written by ``write_json`` (checks the schema)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ValueError(f"{path} is not JSON ({exc})") from exc
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise ValueError(f"{path} is not a specviz bench report (schema {SCHEMA!r})")
    return data


def _f(v: Any, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def format_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """A plain-text table of summary rows."""
    head = ["proposer", "k", "impl", "prompts", "tokens", "tok/s", "ms/tok", "speedup", "vs specviz", "accept", "tau", "c", "v", "predicted"]
    body = [
        [
            str(r["proposer"]), str(r["k"]), r["impl"], str(r["prompts"]), str(r["new_tokens"]),
            _f(r["tokens_per_s"], ".2f"), _f(r["ms_per_token"], ".1f"), _f(r["speedup"], ".2f") + ("x" if r["speedup"] is not None else ""),
            _f(r["speedup_vs_specviz"], ".2f") if r["impl"] == "hf" else "",
            _f(r["acceptance_rate"], ".2f"), _f(r["mean_acceptance_length"], ".2f"),
            _f(r["c"], ".3f"), _f(r["v"], ".2f"), _f(r["predicted_speedup"], ".2f"),
        ]
        for r in rows
    ]
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(head)]
    lines = ["  ".join(h.ljust(w) if i < 3 else h.rjust(w) for i, (h, w) in enumerate(zip(head, widths)))]
    lines.append("  ".join("-" * w for w in widths))
    for b in body:
        lines.append("  ".join(c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(zip(b, widths))))
    return "\n".join(lines)


def _version(package: str) -> str:
    try:
        from importlib.metadata import version

        return version(package)
    except Exception:  # noqa: BLE001
        return "unknown"
