"""Benchmark configuration: what a sweep runs (k values, tokens, sampling) and what it reports as it goes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from ..core.algorithm import Acceptance
from ..core.engine import MAX_K
from ..core.records import Sampling
from ..core.schedules import make_schedule
from .rows import PromptResult

SCHEMA = "specviz.bench/1"
TARGET_ONLY = "target-only"

# ---------------------------------------------------------------------------------------------
# Parsing user input (proposer specs: specviz.proposers.from_spec / check_spec)
# ---------------------------------------------------------------------------------------------


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
    repeats: int = 1  # passes over the prompts (each pass rotates the order again): noisy machines need more
    # read the memory bandwidth (a 256 MB read) before and after each of specviz's target-only runs on a
    # CPU, so a roofline compares decoding with the bandwidth of the same minutes (it varies on a shared host)
    probe_bandwidth: bool = False
    # a stalled machine (specviz.bench.stalls): a run over stall_factor times what its configuration and prompt
    # predict, and at least stall_min_s seconds slower, is re-run once after the last prompt (rerun_stalls);
    # one still far out is left out of the summary and named in the report
    rerun_stalls: bool = True
    stall_factor: float = 2.0
    stall_min_s: float = 0.25

    def __post_init__(self) -> None:
        object.__setattr__(self, "ks", parse_ks(self.ks))
        object.__setattr__(self, "schedules", tuple(self.schedules) or ("constant",))
        for spec in self.schedules:
            make_schedule(spec)  # raises ValueError for an unknown schedule
        Acceptance(self.acceptance)  # raises ValueError for an unknown rule
        if isinstance(self.max_new_tokens, bool) or not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be a whole number >= 1, got {self.max_new_tokens!r}")
        if isinstance(self.repeats, bool) or not isinstance(self.repeats, int) or self.repeats < 1:
            raise ValueError(f"repeats must be a whole number >= 1, got {self.repeats!r}")
        if not self.stall_factor > 1 or not self.stall_min_s >= 0:
            raise ValueError(f"stall_factor must be > 1 and stall_min_s >= 0, got {self.stall_factor!r} and {self.stall_min_s!r}")
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

    kind: str  # "warmup" | "run" | "rerun" (a run a stall hit, timed again) | "stopped" | "done"
    done: int  # timed runs finished
    total: int  # timed runs planned
    label: str  # what just ran (or is about to)
    row: PromptResult | None = None  # the per-prompt row of a "run" event (as linked so far)
    prompt_done: bool = False  # True on the last run of a prompt (summaries changed meaningfully)
