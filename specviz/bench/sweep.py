"""The sweep: every configuration on every prompt, interleaved and rotated (see :mod:`specviz.bench`)."""

from __future__ import annotations

import platform
import time
from dataclasses import asdict, replace
from typing import Any, Callable, Iterator, Mapping, Sequence

import torch

from ..analysis.hardware import bandwidth
from ..analysis.metrics import definitions
from ..core.algorithm import Acceptance
from ..core.bounds import ENGINE_MAX_K as MAX_K
from ..core.engine import SpeculativeDecoder, encode_prompt, eos_token_ids
from ..core.schedules import changes_nothing, make_schedule
from ..core.stats import step_position_counts
from ..models.int8 import kernel_choice as int8_kernel_choice
from ..prompts import PromptRow
from ..proposers import Proposer
from ..runtime import static_decode
from ..runtime.cpu import machine_id
from ..runtime.static_decode import build_seconds, runners_kept
from ..runtime.static_decode import enabled as static_decode_enabled
from . import stalls
from .config import SCHEMA, TARGET_ONLY, BenchConfig, BenchEvent, RunSpec
from .hf import _hf_kwargs, _run_hf, _sync
from .kernel_words import head_report, projection_report, sampled_report, screen_report
from .prompt_notes import at_once_record, chat_note
from .report import _version
from .rows import PromptResult, SummaryRow, to_record
from .summary import summarize

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
        clock: Callable[[], float] = time.perf_counter,
    ):
        """``clock``: what times each run (seconds); a test passes a stand-in to put a stall in one."""
        if not prompts:
            raise ValueError("no prompts to benchmark: pick a category with prompts or type some prompts")
        self.target = target
        self.config = config
        self.prompt_source = prompt_source
        rows = [p if isinstance(p, PromptRow) else PromptRow(str(p), "custom", str(i)) for i, p in enumerate(prompts, 1)]
        self.prompts = rows * config.repeats  # every pass runs each prompt's configurations in a new rotation
        self.proposers = {name: p for name, p in proposers.items() if p is not None}
        sampling = config.sampling
        # Decoders are built once: building one checks the proposer can draft for this target.
        self._decoders: dict[RunSpec, SpeculativeDecoder] = {RunSpec(TARGET_ONLY, 0, "specviz"): SpeculativeDecoder(target, None, sampling=sampling)}
        acceptance = Acceptance(config.acceptance)
        self.schedule_skipped: list[str] = []  # "proposer [schedule]: why" for pairs that would rerun constant k
        for name, prop in self.proposers.items():
            schedules = []
            for schedule in config.schedules:
                why = changes_nothing(make_schedule(schedule), prop)
                if why is None:
                    schedules.append(schedule)
                else:
                    self.schedule_skipped.append(f"{name} [{schedule}]: {why}")
            for k in config.ks:
                for schedule in schedules:
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
        self.prompt_rows: list[PromptResult] = []  # every timed run so far, linked to its prompt's baselines
        self.stopped = False
        self.finished = False
        self.wall_s = self.timed_s = self.warmup_s = 0.0
        self._traced_before = build_seconds()  # static decode steps built before this sweep
        self._started: float | None = None
        self._ids: list[list[int]] | None = None
        self._out_ids: dict[RunSpec, list[int]] = {}  # the current prompt's outputs, for same_as_target
        self.bandwidth_probes: list[float] = []  # GB/s read beside target-only's runs (config.probe_bandwidth)
        self.started_at = time.strftime("%Y-%m-%dT%H:%M:%S")
        self.clock = clock
        self.reruns: list[dict[str, Any]] = []  # the runs a stall hit, re-run once (specviz.bench.stalls)
        self.ended_at_once: list[dict[str, Any]] = []  # prompts whose target-only run ended at once, and why
        self.chat_note = chat_note(target, config.chat)  # the chat template on a base model, or none to apply

    @property
    def total(self) -> int:
        return len(self.runs) * len(self.prompts)

    # -- running ----------------------------------------------------------------------------
    def verify_widths(self) -> range:
        """Every width a verify pass of this sweep can have: 1 (target-only, a last step with no
        room to draft) to the widest chain (k + 1; a heuristic schedule may climb to the engine's
        largest k) or tree (its nodes + 1)."""
        most = 1
        for decoder in self._decoders.values():
            if decoder.proposer is None:
                continue
            k = MAX_K if decoder.schedule.name == "heuristic" else decoder.k
            nodes = getattr(decoder.proposer, "max_nodes", None)
            most = max(most, k + 1, (nodes or 0) + 1)
        return range(1, most + 1)

    def _warm_widths(self) -> None:
        """Build the static step of every width the timed runs can use, now: the warm-up's short
        runs need not meet them all (a last step's shorter draft, a draft's two-token catch-up), and
        a graph built inside a timed run costs about a second there."""
        static_decode.warm(self.target.model, self.verify_widths())
        for prop in self.proposers.values():
            draft = getattr(getattr(prop, "draft", prop), "model", None)  # a draft model's LoadedModel, if any
            if isinstance(getattr(draft, "model", None), torch.nn.Module):
                static_decode.warm(draft.model, (1, 2))

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
                if not self.stopped:
                    self._warm_widths()
                self.warmup_s = time.perf_counter() - t0
            done = 0
            for i, (prompt, ids) in enumerate(zip(self.prompts, self._ids)):
                order = self.order(i)
                for j, spec in enumerate(order):
                    if self.stopped or stop():
                        self.stopped = True
                        for _ in self._rerun_stalls(lambda: True, done):  # stopped: the stalled runs flagged, none re-run
                            pass
                        yield BenchEvent("stopped", done, self.total, "stopped")
                        return
                    probe = self._probes(spec)
                    out = self._run(spec, ids, cfg.max_new_tokens)
                    probe()
                    self.timed_s += out["wall_s"]
                    self._out_ids[spec] = out.pop("token_ids")
                    row = self._prompt_row(spec, i, prompt, ids, out)
                    self._note_at_once(spec, row, self._out_ids[spec])
                    self.prompt_rows.append(row)
                    self._link(i)
                    done += 1
                    yield BenchEvent("run", done, self.total, f"prompt {i + 1}/{len(self.prompts)}: {spec.label}",
                                     self.prompt_rows[-1], j == len(order) - 1)
                self._out_ids.clear()
            yield from self._rerun_stalls(stop, done)
            self.finished = True
            yield BenchEvent("done", done, self.total, "done")
        finally:
            self.wall_s = time.perf_counter() - self._started

    def _rerun_stalls(self, stop: Callable[[], bool], done: int) -> Iterator[BenchEvent]:
        """Re-run once every run a stall hit (:mod:`specviz.bench.stalls`), worst first, each
        replacing its row; then score every run again and flag those still far out (left out of
        the summary). A "rerun" event per re-run. Nothing is re-run with ``config.rerun_stalls``
        off or once Stop was pressed (the runs found are then flagged as they are)."""
        cfg = self.config
        hit = stalls.stalled(self.prompt_rows, cfg.stall_factor, cfg.stall_min_s)
        first = stalls.scores(self.prompt_rows)
        before = {j: (self.prompt_rows[j], first[j]) for j in hit}
        redone: set[int] = set()
        why_not = "re-runs are off" if not cfg.rerun_stalls else "the sweep was stopped"
        for j in hit if cfg.rerun_stalls else ():
            if stop():
                break
            old = self.prompt_rows[j]
            spec, ids = RunSpec(old.proposer, old.k, old.impl), self._ids[old.prompt_index]
            out = self._run(spec, ids, cfg.max_new_tokens)
            out.pop("token_ids")
            self.timed_s += out["wall_s"]
            row = self._prompt_row(spec, old.prompt_index, self.prompts[old.prompt_index], ids, out)
            self.prompt_rows[j] = replace(row, rerun_from_s=old.wall_s, same_as_target=old.same_as_target)
            self._link(old.prompt_index)
            redone.add(j)
            yield BenchEvent("rerun", done, self.total, f"re-ran {stalls.label(old)} ({old.wall_s:.2f} s -> "
                             f"{row.wall_s:.2f} s)", self.prompt_rows[j], True)
        scores = stalls.scores(self.prompt_rows)
        for j, (r, s) in enumerate(zip(self.prompt_rows, scores)):
            out_still = s is not None and s > cfg.stall_factor and stalls.excess_s(r, s) >= cfg.stall_min_s
            self.prompt_rows[j] = replace(r, stall_score=s, flagged=out_still)
            if out_still and j not in before:  # far out only against the re-runs' numbers: flagged, said, not re-run
                before[j] = (r, s)
        self.reruns = [stalls.rerun_record(old, s, self.prompt_rows[j] if j in redone else None,
                                           why_not if j in hit else "found after the re-runs")
                       for j, (old, s) in before.items()]

    def _note_at_once(self, spec: RunSpec, row: PromptResult, token_ids: list[int]) -> None:
        """Keep specviz's target-only run of a prompt that ended at once (first pass only)."""
        if spec == RunSpec(TARGET_ONLY, 0, "specviz") and row.prompt_index < len(self.prompts) // self.config.repeats:
            rec = at_once_record(row, token_ids, self.target.tokenizer, self.chat_note)
            if rec is not None:
                self.ended_at_once.append(rec)

    def _probes(self, spec: RunSpec) -> Callable[[], None]:
        """With ``config.probe_bandwidth``, before specviz's target-only run on a CPU: one read of
        the memory bandwidth now, and the function that reads it again after the run."""
        if not (self.config.probe_bandwidth and spec == RunSpec(TARGET_ONLY, 0, "specviz")
                and torch.device(self.target.device).type == "cpu"):
            return lambda: None

        def probe() -> None:
            self.bandwidth_probes.append(bandwidth(1 << 28, repeats=2, refresh=True).gb_per_s)

        probe()
        return probe

    def _run(self, spec: RunSpec, ids: list[int], max_new_tokens: int) -> dict[str, Any]:
        if spec.impl == "specviz":
            return _run_specviz(self._decoders[spec], ids, max_new_tokens, self.config.seed, self.clock)
        return _run_hf(self.target, ids, max_new_tokens, self.config.sampling, self.config.seed, self._hf[spec], self.eos,
                       self.clock)

    def order(self, i: int) -> list[RunSpec]:
        """The configurations in the order prompt ``i`` runs them: all back to back, rotated by
        one per prompt so that no configuration always goes first (or last) on a prompt."""
        r = i % len(self.runs)
        return self.runs[r:] + self.runs[:r]

    def _prompt_row(self, spec: RunSpec, i: int, prompt: PromptRow, ids: list[int], out: dict[str, Any]) -> PromptResult:
        n, wall, drafted, steps = out["new_tokens"], out["wall_s"], out["drafted"], out["steps"]
        return PromptResult(
            proposer=spec.proposer, k=spec.k, impl=spec.impl, prompt_index=i, prompt_id=prompt.id,
            category=prompt.category, prompt_tokens=len(ids), **out,
            tokens_per_s=n / wall if wall > 0 else 0.0,
            ms_per_token=1e3 * wall / n if n else None,
            acceptance_rate=out["accepted"] / drafted if drafted else None,
            mean_acceptance_length=n / steps if steps else None,
        )

    def _link(self, i: int) -> None:
        """(Re)compute prompt ``i``'s per-prompt speedups and output checks against its
        target-only runs, as soon as those have run (they need not run first), and again after a
        re-run (the outputs are then not checked again: a re-run keeps its first run's check)."""
        at = [j for j, r in enumerate(self.prompt_rows) if r.prompt_index == i]
        rows = [self.prompt_rows[j] for j in at]
        bases = {r.impl: r for r in rows if r.k == 0}
        base_ids = self._out_ids.get(RunSpec(TARGET_ONLY, 0, "specviz"))
        greedy = self.config.sampling.greedy
        for j, r in zip(at, rows):
            change: dict[str, Any] = {}
            for key, impl in (("speedup", r.impl), ("speedup_vs_specviz", "specviz")):
                b = bases.get(impl)
                change[key] = r.tokens_per_s / b.tokens_per_s if b and b.tokens_per_s > 0 and r.new_tokens else None
            is_base = r.impl == "specviz" and r.k == 0
            if greedy and base_ids is not None and not is_base:
                change["same_as_target"] = self._out_ids.get(RunSpec(r.proposer, r.k, r.impl)) == base_ids
            self.prompt_rows[j] = replace(r, **change)

    # -- results ----------------------------------------------------------------------------
    def rows(self) -> list[SummaryRow]:
        """One summary row per configuration, over the prompts run so far."""
        return summarize(self.prompt_rows, order=self.runs)

    def live_report(self) -> dict[str, Any]:
        """The rows so far as report records (``{"rows", "prompt_rows"}``), for plots mid-sweep."""
        return {"rows": [to_record(r) for r in self.rows()], "prompt_rows": [to_record(r) for r in self.prompt_rows]}

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
            "schedule_skipped": self.schedule_skipped,
            "prompts": len(self.prompts) // cfg.repeats,
            "repeats": cfg.repeats,
            "prompt_source": self.prompt_source,
            "reruns": self.reruns,  # runs a stall hit: configuration, prompt, seconds before and after (bench.stalls)
            "flagged_runs": sum(1 for r in self.prompt_rows if r.flagged),  # still far out: left out of the summary
            "ended_at_once": self.ended_at_once,  # prompts whose target-only run ended at once, with the reason
            "chat_note": self.chat_note,  # a warning when the chat template wraps a base model's prompts
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
            "cpu": machine_id(),  # vendor, model, family/model, torch's ISA level (and any cap), a digest of the flags
            "threads": torch.get_num_threads(),
            "bandwidth_gb_s": [round(b, 2) for b in self.bandwidth_probes],  # read beside target-only's runs
            "static_decode": static_decode_enabled(),  # chain steps (drafts and the target) on the traced step (specviz.runtime.static_decode)
            "static_decode_trace_s": build_seconds() - self._traced_before,  # building it, once per model
            "static_decode_runner": runners_kept(),  # the runner(s) it kept: fused, eager (runtime.static_decode)
            "lm_head": head_report(getattr(self.target, "model", None)),  # its plan's kernel per width (kernel_words)
            # greedy lean steps: the certified argmax's bf16 screen, per width (specviz.runtime.argmax_head)
            "argmax_head": screen_report(self.target.model) if getattr(self.target, "model", None) is not None else None,
            # sampled lean steps: every logit bounded through a bf16 screen, per width (specviz.runtime.sampled_head)
            "sampled_head": sampled_report(self.target.model) if getattr(self.target, "model", None) is not None else None,
            "projections": projection_report(getattr(self.target, "model", None)),  # the body's, per kind
            # an @int8 model's products: the kernel chosen here and its timings (only a sweep that runs one)
            "int8_kernel": int8_kernel_choice() if self._runs_int8() else None,
            "definitions": {  # the one table (METRICS), plus the sweep's own overhead
                **definitions(),
                "overhead_s": "sweep wall time - timed runs - warm-up (prompt encoding, rows, the caller's work between runs)",
            },
        }
        return {"schema": SCHEMA, "meta": meta, **self.live_report()}

    def _runs_int8(self) -> bool:
        """Whether the target or a proposer is an ``@int8`` model (by its spec or its quantization)."""
        return getattr(self.target, "quantize", None) == "int8" or any("@int8" in name for name in self.proposers)


def run_sweep(
    target,
    proposers: Mapping[str, Proposer | None],
    prompts: Sequence[PromptRow | str],
    config: BenchConfig = BenchConfig(),
    *,
    on_event: Callable[[BenchEvent], None] | None = None,
    on_row: Callable[[PromptResult], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    prompt_source: str = "",
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, Any]:
    """Run a whole sweep and return its report (see ``Sweep.report``).

    ``on_event`` gets every BenchEvent, ``on_row`` every per-prompt row as it is measured;
    ``should_stop`` is polled before each run (the sweep then ends with a "stopped" event);
    ``clock`` times the runs (a stand-in in tests).
    """
    sweep = Sweep(target, proposers, prompts, config, prompt_source=prompt_source, clock=clock)
    for event in sweep.events(should_stop):
        if on_event is not None:
            on_event(event)
        if on_row is not None and event.row is not None:
            on_row(event.row)
    return sweep.report()


# ---------------------------------------------------------------------------------------------
# One timed run
# ---------------------------------------------------------------------------------------------


def _run_specviz(decoder: SpeculativeDecoder, ids: list[int], max_new_tokens: int, seed: int,
                 clock: Callable[[], float] = time.perf_counter) -> dict[str, Any]:
    _sync(decoder.target.device)
    t0 = clock()
    session = decoder.start(ids, max_new_tokens=max_new_tokens, seed=seed, records="lean")  # nobody reads top-10s or texts here
    while not session.done:
        session.step()
    wall = clock() - t0
    steps = session.steps
    hits, trials = step_position_counts(steps)  # as the engine's Stats count them
    return {
        "token_ids": session.new_token_ids,
        "new_tokens": session.n_new,
        "wall_s": wall,
        "steps": len(steps),
        "drafted": sum(s.k for s in steps),
        "accepted": sum(min(s.n_accepted, s.n_committed) for s in steps),
        "per_position_hits": hits,
        "per_position_trials": trials,
        "tree_steps": sum(1 for s in steps if s.tree),
        "draft_ms": sum(s.draft_ms for s in steps),
        "verify_ms": sum(s.verify_ms for s in steps),
        "other_ms": sum(s.other_ms for s in steps),
        "prefill_ms": session.prefill_ms,
        "finished": session.finished,
    }


def _run_name(proposer: str, schedule: str, acceptance: Acceptance) -> str:
    """The row name of a proposer run: "ngram", "ngram [heuristic]", "ngram (typical, LOSSY)"."""
    name = proposer if schedule == "constant" else f"{proposer} [{schedule}]"
    return f"{name} ({acceptance.rule}, LOSSY)" if acceptance.lossy else name
