"""Measure remote servers' speculative decoding with the local lab's definitions and report shape.

    sweep = RemoteSweep([parse_endpoint("ngram=http://127.0.0.1:8080"),
                         parse_endpoint("target-only=http://127.0.0.1:8081")], prompts, RemoteConfig())
    for event in sweep: ...            # bench.BenchEvent: "warmup", one "run" per request, "done"
    report = sweep.report()            # the specviz.bench/1 schema: write_json, csv, report_html

SGLang is asked through its native ``POST /generate`` (whose ``meta_info`` carries the
statistics), every other engine through ``POST /v1/completions``. Per request (batch 1, the prompts one at a time, every server back to back on each prompt, the
order rotated per prompt like the local lab): ``GET /metrics`` before and after, the completion
in between, timed by specviz (wall clock, prefill included). A row's numbers come from, in order
of preference, the response's own per-request statistics (:mod:`.engines`), then the difference
of the Prometheus counters (:mod:`.prom`); ``sources`` says which, ``unavailable`` lists the rest.

Rows: the local lab's typed rows (:class:`specviz.bench.rows.RemotePromptResult`, a
``PromptResult`` with what only a server gives), summarised by the local lab's
``bench.summarize``. Definitions: :data:`specviz.analysis.metrics.METRICS`, whose ``remote`` column
says how a server's number is got where that differs (steps = committed tokens - accepted
drafts, so a target-only server has tau = 1.0; per-position denominators from counters or a
histogram are every draft step); what a server cannot know (draft and verify times, so c and v)
is None.

The warm-up request of each speculative server also asks for logprobs and checks them
(:func:`.engines.logprob_check`): llama.cpp returns 0.0 for every token of a speculated batch
(its issue #27972), so ``meta["servers"][i]["logprobs"]`` says whether they can be the target's;
the timed requests never ask for them (llama.cpp ranks the whole vocabulary for them).

A failure after the first measured request (the server died, a timeout) stops the sweep: the rows
measured so far stay, and ``meta["stopped_reason"]`` / ``meta["stopped_at"]`` say where.
"""

from __future__ import annotations

import platform
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable, Iterator, Mapping, Sequence

from ..analysis.metrics import definitions
from ..bench.config import SCHEMA, BenchEvent
from ..bench.rows import REMOTE_IMPL, RemotePromptResult, SummaryRow, to_record
from ..bench.summary import summarize
from ..prompts import PromptRow
from .client import BASELINE, Client, Endpoint, RemoteError
from .engines import (
    RequestStats,
    engine_from_body,
    logprob_check,
    parse_request_stats,
    positions_from_histogram,
    positions_from_steps,
)
from .prom import SpecCounters, engine_from_metrics, parse_spec_counters

__all__ = ["RemoteConfig", "RemoteSweep", "IMPL", "NO_SPEC"]

IMPL = REMOTE_IMPL
NO_SPEC = "this engine reports no speculative decoding"


@dataclass(frozen=True)
class RemoteConfig:
    max_new_tokens: int = 64
    temperature: float = 0.0
    seed: int = 0
    warmup: bool = True
    timeout_s: float = 120.0
    concurrency: int = 1  # > 1: requests of one server in parallel; counters then cannot be split per request


@dataclass
class ServerInfo:
    """What the probe learnt about one endpoint."""

    endpoint: Endpoint
    engine: str | None = None
    model: str | None = None
    version: str | None = None
    k: int | None = None
    k_source: str | None = None
    speculative: bool | None = None  # llama.cpp /props
    has_counters: bool = False
    per_request: str | None = None  # the per-request source seen
    detected_by: list[str] = field(default_factory=list)
    batch_diff: SpecCounters | None = None  # --concurrency > 1: the counters diffed around all requests
    warmup: dict[str, Any] | None = None  # the warm-up request's counts (the server's counters include them)
    logprobs: dict[str, Any] | None = None  # engines.logprob_check on the warm-up: can its logprobs be the target's?


class RemoteSweep:
    """A remote benchmark; iterate it to run, then call :meth:`report`."""

    def __init__(self, endpoints: Sequence[Endpoint], prompts: Sequence[PromptRow | str],
                 config: RemoteConfig = RemoteConfig(), *, prompt_source: str = "",
                 client_factory: Callable[[str, float], Client] | None = None):
        if not endpoints:
            raise ValueError("no servers to measure: give --remote URL")
        if not prompts:
            raise ValueError("no prompts to benchmark")
        if sum(e.baseline for e in endpoints) > 1:
            raise ValueError("give at most one target-only (baseline) server")
        labels = [(e.label, e.k) for e in endpoints]
        if len(set(labels)) != len(labels):
            raise ValueError("two servers have the same label and k: name them LABEL=URL")
        if config.concurrency < 1:
            raise ValueError("--concurrency must be >= 1")
        self.endpoints = list(endpoints)
        self.config = config
        self.prompt_source = prompt_source
        self.prompts = [p if isinstance(p, PromptRow) else PromptRow(str(p), "custom", str(i)) for i, p in enumerate(prompts, 1)]
        factory = client_factory or (lambda url, t: Client(url, timeout_s=t))
        self.clients = {e.url: factory(e.url, config.timeout_s) for e in self.endpoints}
        self.info: dict[Endpoint, ServerInfo] = {}
        self.prompt_rows: list[RemotePromptResult] = []
        self.texts: dict[tuple[int, Endpoint], str] = {}
        self.stopped = False
        self.stopped_reason: str | None = None
        self.stopped_at: str | None = None
        self.finished = False
        self.wall_s = self.timed_s = self.warmup_s = 0.0
        self.started_at = time.strftime("%Y-%m-%dT%H:%M:%S")
        self._t0: float | None = None

    @property
    def total(self) -> int:
        return len(self.endpoints) * len(self.prompts)

    # -- probing ----------------------------------------------------------------------------
    def probe(self, ep: Endpoint) -> ServerInfo:
        """Ask one server what it is; raises RemoteError when it is unreachable or not OpenAI-like."""
        c = self.clients[ep.url]
        info = ServerInfo(ep)
        info.model = c.model_id()  # also the reachability check (connection errors raise)
        text = c.get_text("/metrics")
        if text is not None:
            try:
                counters = parse_spec_counters(text)
            except ValueError:
                counters = SpecCounters()
            info.engine = engine_from_metrics(text)
            if info.engine:
                info.detected_by.append("/metrics names")
            info.has_counters = counters.present
            if counters.per_pos and info.engine == "llama.cpp":
                info.k, info.k_source = len(counters.per_pos), "/metrics per-position width (llama.cpp n_max)"
        props = c.get_json("/props")
        if props and ("default_generation_settings" in props or "build_info" in props):
            info.engine = info.engine or "llama.cpp"
            info.detected_by.append("/props")
            info.version = str(props.get("build_info") or "") or None
            slots = c.get_any("/slots")  # llama.cpp: each slot says whether it can speculate
            if isinstance(slots, list) and slots and all(isinstance(x, Mapping) and "speculative" in x for x in slots):
                info.speculative = any(bool(x["speculative"]) for x in slots)
        if info.engine in (None, "sglang"):
            si = c.get_json("/get_server_info") or c.get_json("/server_info")
            if si and ("speculative_algorithm" in si or "tp_size" in si or "model_path" in si):
                info.engine = "sglang"
                info.detected_by.append("/get_server_info")
                info.version = str(si.get("version") or "") or info.version
                n = si.get("speculative_num_draft_tokens")
                if isinstance(n, int) and n > 1:
                    info.k, info.k_source = n - 1, "/get_server_info speculative_num_draft_tokens - 1"
                if "speculative_algorithm" in si and not si.get("speculative_algorithm"):
                    info.speculative = False
        if info.engine in (None, "vllm"):
            v = c.get_json("/version")
            if v and "version" in v:
                info.engine = info.engine or "vllm"
                info.detected_by.append("/version")
                info.version = str(v["version"])
        return info

    def _check_spec(self, info: ServerInfo, stats: RequestStats | None) -> None:
        if info.endpoint.baseline:
            return
        if info.speculative is False:
            why = "its /slots say speculative: false" if info.engine == "llama.cpp" else "its server info names no speculative algorithm"
        elif not info.has_counters and (stats is None or not stats.has_spec):
            why = "no spec-decode counters in /metrics and no per-request statistics"
        else:
            return
        raise RemoteError(f"{info.endpoint.url}: {NO_SPEC} ({why}); start it with speculative decoding on, "
                          "or label it target-only=URL")

    # -- running ----------------------------------------------------------------------------
    def __iter__(self) -> Iterator[BenchEvent]:
        return self.events()

    def order(self, i: int) -> list[Endpoint]:
        r = i % len(self.endpoints)
        return self.endpoints[r:] + self.endpoints[:r]

    def _scrape(self, ep: Endpoint) -> SpecCounters | None:
        if not self.info[ep].has_counters:
            return None
        text = self.clients[ep.url].get_text("/metrics")
        if text is None:
            return None
        try:
            return parse_spec_counters(text)
        except ValueError:
            return None

    def _measure(self, ep: Endpoint, prompt: str, max_tokens: int, scrape: bool = True, logprobs: int | None = None) -> dict[str, Any]:
        c, info = self.clients[ep.url], self.info[ep]
        before = self._scrape(ep) if scrape else None
        if info.engine == "sglang":  # its OpenAI routes may leave meta_info out; the native route has it
            body, wall = c.generate_sglang(prompt, max_tokens, temperature=self.config.temperature)
        else:
            body, wall = c.complete(prompt, max_tokens, model=info.model, temperature=self.config.temperature, seed=self.config.seed,
                                    logprobs=logprobs)
        after = self._scrape(ep) if scrape else None
        diff = after.minus(before) if before is not None and after is not None else None
        stats = parse_request_stats(body, info.engine)
        if info.engine is None:
            info.engine = engine_from_body(body)
            if info.engine:
                info.detected_by.append("response fields")
        return {"body": body, "wall_s": wall, "diff": diff, "stats": stats}

    def events(self, should_stop: Callable[[], bool] | None = None) -> Iterator[BenchEvent]:
        """Probe, warm up, then one "run" event per request; errors end the sweep (rows kept)."""
        stop = should_stop or (lambda: False)
        self._t0 = time.perf_counter()
        cfg = self.config
        done = 0
        where = "probing"
        try:
            for ep in self.endpoints:
                where = f"probing {ep.url}"
                self.info[ep] = self.probe(ep)
            yield BenchEvent("warmup", 0, self.total, "warm-up")
            t0 = time.perf_counter()
            for ep in self.endpoints:
                where = f"warm-up of {ep.label} ({ep.url})"
                tokens = min(cfg.max_new_tokens, 16) if cfg.warmup else 1
                # the warm-up also asks for logprobs, to catch an engine whose logprobs are not the target's
                out = self._measure(ep, self.prompts[0].prompt, tokens, logprobs=None if ep.baseline else 1)
                info = self.info[ep]
                if out["stats"] is not None and out["stats"].has_spec:
                    info.per_request = out["stats"].source
                self._check_spec(info, out["stats"])
                self._set_k(info, out)
                w = self._row(ep, -1, self.prompts[0], out)
                info.warmup = {key: getattr(w, key) for key in ("new_tokens", "drafted", "accepted", "draft_steps", "per_position_hits", "counters_diff")}
                if not ep.baseline and info.engine != "sglang":
                    info.logprobs = logprob_check(out["body"], w.accepted)
            self.warmup_s = time.perf_counter() - t0
            for i, prompt in enumerate(self.prompts if cfg.concurrency == 1 else ()):
                order = self.order(i)
                for j, ep in enumerate(order):
                    if stop():
                        self.stopped, self.stopped_reason = True, "stopped by the user"
                        self.stopped_at = f"before prompt {i + 1}/{len(self.prompts)} on {ep.label}"
                        yield BenchEvent("stopped", done, self.total, "stopped")
                        return
                    where = f"prompt {i + 1}/{len(self.prompts)} ({prompt.id}) on {ep.label} ({ep.url})"
                    out = self._measure(ep, prompt.prompt, cfg.max_new_tokens)
                    self._learn_k(ep, out)
                    self.prompt_rows.append(self._row(ep, i, prompt, out))
                    self._link(i)
                    done += 1
                    yield BenchEvent("run", done, self.total, f"prompt {i + 1}/{len(self.prompts)}: {ep.label}",
                                     self.prompt_rows[-1], j == len(order) - 1)
            if cfg.concurrency > 1:
                for ep in self.endpoints:
                    where = f"the concurrent requests on {ep.label} ({ep.url})"
                    for row in self._run_concurrent(ep):
                        done += 1
                        yield BenchEvent("run", done, self.total, f"{ep.label}: prompt {row.prompt_index + 1}", row, False)
                for i in range(len(self.prompts)):
                    self._link(i)
            self.finished = True
            yield BenchEvent("done", done, self.total, "done")
        except RemoteError as exc:
            if not self.prompt_rows:  # nothing measured yet: nothing to keep, just the error
                raise
            self.stopped, self.stopped_reason, self.stopped_at = True, str(exc), where
            yield BenchEvent("stopped", done, self.total, f"stopped: {exc}")
        finally:
            self.wall_s = time.perf_counter() - self._t0

    def _run_concurrent(self, ep: Endpoint) -> list[RemotePromptResult]:
        """All prompts on one server, ``concurrency`` at a time: counters diffed around the batch only."""
        before = self._scrape(ep)
        with ThreadPoolExecutor(self.config.concurrency) as pool:
            outs = list(pool.map(lambda p: self._measure(ep, p.prompt, self.config.max_new_tokens, scrape=False), self.prompts))
        after = self._scrape(ep)
        self.info[ep].batch_diff = after.minus(before) if before is not None and after is not None else None
        self._learn_k(ep, {"stats": None, "diff": self.info[ep].batch_diff})
        rows = []
        for i, (prompt, out) in enumerate(zip(self.prompts, outs)):
            row = self._row(ep, i, prompt, out)
            self.prompt_rows.append(row)
            rows.append(row)
        return rows

    def _set_k(self, info: ServerInfo, out: Mapping[str, Any]) -> None:
        ep = info.endpoint
        if ep.baseline:
            info.k, info.k_source = 0, "target-only"
            return
        if ep.k is not None:
            info.k, info.k_source = ep.k, "label"
            return
        st: RequestStats | None = out["stats"]
        if st is not None and st.k:
            info.k, info.k_source = st.k, f"{st.source}: draft length"
        elif out["diff"] is not None and out["diff"].per_pos and not info.k:
            info.k, info.k_source = len(out["diff"].per_pos), "/metrics per-position width"
        elif st is not None and st.per_step_drafted:
            info.k, info.k_source = max(st.per_step_drafted), "per_step_drafted max"

    def _learn_k(self, ep: Endpoint, out: Mapping[str, Any]) -> None:
        """A k the warm-up could not tell, learnt from a later request, stamped on the rows so far.

        llama.cpp exports its per-position counters (whose width is its n_max) only once a step
        has drafted, and a short warm-up may draft nothing: its rows would keep k = 0 and read as
        target-only (the readout then found no speculative configuration at all)."""
        info = self.info[ep]
        if info.k is not None:
            return
        self._set_k(info, out)
        if info.k is not None:
            self.prompt_rows = [replace(r, k=info.k) if r.url == ep.url and r.proposer == ep.label else r
                                for r in self.prompt_rows]

    # -- rows -------------------------------------------------------------------------------
    def _row(self, ep: Endpoint, i: int, prompt: PromptRow, out: Mapping[str, Any]) -> RemotePromptResult:
        """One request -> its typed row; ``sources`` names where each number came from."""
        info = self.info[ep]
        body, wall = out["body"], out["wall_s"]
        st: RequestStats | None = out["stats"]
        usage = body.get("usage") if isinstance(body.get("usage"), Mapping) else {}
        choice = body["choices"][0]
        sources: dict[str, str] = {"wall_s": "specviz (wall clock around POST /v1/completions)"}
        n = _new_tokens(usage, st, sources)
        sc = _spec_counts(st, out["diff"], ep.baseline, sources)
        steps = n - sc.accepted if n is not None and sc.accepted is not None else None
        if steps is not None:
            sources["steps"] = "new_tokens - accepted (every target pass commits its accepted drafts + 1)"
        engine_tps = st.decode_tokens_per_s if st is not None else None
        if engine_tps is not None:
            sources["engine_tokens_per_s"] = st.fields.get("decode_tokens_per_s", st.source)
        return RemotePromptResult(
            proposer=ep.label, k=info.k if info.k is not None else 0, impl=IMPL,
            prompt_index=i, prompt_id=prompt.id, category=prompt.category,
            prompt_tokens=usage.get("prompt_tokens"), new_tokens=n if n is not None else 0,
            wall_s=wall, steps=steps, drafted=sc.drafted, accepted=sc.accepted,
            per_position_hits=sc.hits, per_position_trials=sc.trials,
            prefill_ms=st.prefill_ms if st is not None else None,  # draft, verify and other ms: no engine reports them
            finished=choice.get("finish_reason"),
            tokens_per_s=n / wall if n is not None and wall > 0 else 0.0,
            ms_per_token=1e3 * wall / n if n else None,
            acceptance_rate=sc.accepted / sc.drafted if sc.drafted and sc.accepted is not None else None,
            mean_acceptance_length=n / steps if n is not None and steps else None,
            engine=info.engine, url=ep.url, draft_steps=sc.draft_steps,
            engine_mean_acceptance_length=(1 + sc.accepted / sc.draft_steps
                                           if sc.draft_steps and sc.accepted is not None else None),
            engine_tokens_per_s=engine_tps,
            engine_reported=({"tau": st.engine_tau, "acceptance_rate": st.engine_rate, "source": st.source}
                             if st is not None else None),
            counters_diff=sc.counters_diff,
            per_step_accepted=list(st.per_step_accepted) if st is not None else [],
            per_step_drafted=list(st.per_step_drafted) if st is not None else [],
            text=str(choice.get("text", "")), sources=sources,
            unavailable=[k for k in REPORTED if k not in sources],
        )

    def _link(self, i: int) -> None:
        """Prompt ``i``'s per-request speedups and output checks against the target-only server."""
        idx = [j for j, r in enumerate(self.prompt_rows) if r.prompt_index == i]
        jb = next((j for j in idx if self.prompt_rows[j].proposer == BASELINE), None)
        base = self.prompt_rows[jb] if jb is not None else None
        for j in idx:
            r = self.prompt_rows[j]
            change: dict[str, Any] = {
                "speedup": r.tokens_per_s / base.tokens_per_s if base and base.tokens_per_s > 0 and r.new_tokens else None}
            if base is not None and j != jb and self.config.temperature == 0:
                change["same_as_target"] = r.text == base.text
            self.prompt_rows[j] = replace(r, **change)

    # -- results ----------------------------------------------------------------------------
    def rows(self) -> list[SummaryRow]:
        """One summary row per server (``bench.summarize``, the local lab's aggregation)."""
        order = [(e.label, self.info[e].k if self.info[e].k is not None else 0, IMPL) for e in self.endpoints if e in self.info]
        return summarize(self.prompt_rows, order=order)

    def report(self) -> dict[str, Any]:
        wall = self.wall_s if self._t0 is not None else 0.0
        self.timed_s = sum(r.wall_s for r in self.prompt_rows)
        overhead = max(0.0, wall - self.timed_s - self.warmup_s)
        servers = []
        for e in self.endpoints:
            info = self.info.get(e)
            servers.append({
                "label": e.label, "url": e.url, "baseline": e.baseline,
                "engine": info.engine if info else None, "detected_by": info.detected_by if info else [],
                "model": info.model if info else None, "version": info.version if info else None,
                "k": info.k if info else e.k, "k_source": info.k_source if info else None,
                "spec_counters": info.has_counters if info else None, "per_request_stats": info.per_request if info else None,
                "counters_diff_all_requests": asdict(info.batch_diff) if info and info.batch_diff else None,
                "warmup": info.warmup if info else None,
                "logprobs": info.logprobs if info else None,
            })
        models = sorted({s["model"] for s in servers if s["model"]})
        meta = {
            "source": "remote",
            "target": ", ".join(models) or "remote server",
            "device": "remote", "dtype": "(server's)", "quantize": None,
            "proposers": [e.label for e in self.endpoints if not e.baseline],
            "ks": sorted({s["k"] for s in servers if s["k"]}),
            "max_new_tokens": self.config.max_new_tokens,
            "sampling": {"temperature": self.config.temperature, "top_k": None, "top_p": None},
            "seed": self.config.seed, "chat": False, "compare_hf": False, "hf_skipped": [],
            "concurrency": self.config.concurrency,
            "servers": servers,
            "prompts": len(self.prompts), "prompt_source": self.prompt_source,
            "categories": sorted({p.category for p in self.prompts}),
            "runs_planned": self.total, "runs_done": len(self.prompt_rows),
            "stopped": self.stopped, "stopped_reason": self.stopped_reason, "stopped_at": self.stopped_at,
            "started": self.started_at, "wall_s": wall, "timed_s": self.timed_s, "warmup_s": self.warmup_s,
            "overhead_s": overhead, "overhead_frac": overhead / wall if wall > 0 else 0.0,
            "torch": "n/a (remote)", "transformers": "n/a (remote)", "python": platform.python_version(),
            "machine": platform.machine(), "threads": None,
            "definitions": {
                **definitions(remote=True),
                "sources": "each prompt row's 'sources' names the field or counter each number came from; 'unavailable' lists the rest",
            },
        }
        return {"schema": SCHEMA, "meta": meta, "rows": [to_record(r) for r in self.rows()],
                "prompt_rows": [to_record(r) for r in self.prompt_rows]}



# What a row says it could not get when no source gave it.
REPORTED = ("drafted", "accepted", "steps", "per_position", "draft_steps", "engine_tokens_per_s")


def _new_tokens(usage: Mapping[str, Any], st: RequestStats | None, sources: dict[str, str]) -> int | None:
    """The completion's tokens: the usage block, else the engine's own statistics."""
    n = usage.get("completion_tokens")
    if isinstance(n, int):
        sources["new_tokens"] = "usage.completion_tokens"
        return n
    if st is not None and st.completion_tokens is not None:
        sources["new_tokens"] = st.fields.get("completion_tokens", st.source)
        return st.completion_tokens if isinstance(st.completion_tokens, int) else None
    return None


@dataclass(frozen=True)
class _SpecCounts:
    drafted: int | None = None
    accepted: int | None = None
    draft_steps: int | None = None
    hits: list[int] = field(default_factory=list)
    trials: list[int] = field(default_factory=list)
    counters_diff: dict[str, Any] | None = None


def _spec_counts(st: RequestStats | None, diff: SpecCounters | None, baseline: bool, sources: dict[str, str]) -> _SpecCounts:
    """Drafted, accepted, draft steps and per-position counts of one request: the response's own
    statistics first, then the Prometheus counters' difference; a target-only server drafts 0."""
    drafted = accepted = draft_steps = None
    hits: list[int] = []
    trials: list[int] = []
    if st is not None and st.has_spec:
        drafted, accepted, draft_steps = st.drafted, st.accepted, st.draft_steps
        for key in ("drafted", "accepted", "draft_steps"):
            if key in st.fields:
                sources[key] = st.fields[key]
        if st.per_step_accepted and st.per_step_drafted:
            hits, trials = positions_from_steps(st.per_step_accepted, st.per_step_drafted)
            sources["per_position"] = "metrics.speculative_decoding.per_step_accepted/per_step_drafted (exact)"
        elif st.histogram:
            hits, trials = positions_from_histogram(st.histogram, st.k)
            sources["per_position"] = f"{st.fields.get('histogram', 'histogram')} (denominator: every draft step)"
    cd = None
    if diff is not None and diff.present:
        cd = {"drafts": diff.drafts, "draft_tokens": diff.draft_tokens, "accepted": diff.accepted}
        if drafted is None and diff.draft_tokens is not None:
            drafted = int(diff.draft_tokens)
            sources["drafted"] = f"/metrics {diff.prefix}:spec_decode_num_draft_tokens diff"
        if accepted is None and diff.accepted is not None:
            accepted = int(diff.accepted)
            sources["accepted"] = f"/metrics {diff.prefix}:spec_decode_num_accepted_tokens diff"
        if draft_steps is None and diff.drafts is not None:
            draft_steps = int(diff.drafts)
            sources["draft_steps"] = f"/metrics {diff.prefix}:spec_decode_num_drafts diff"
        if not hits and diff.per_pos and diff.drafts is not None:
            hits = [int(x) for x in diff.per_pos]
            trials = [int(diff.drafts)] * len(hits)
            sources["per_position"] = f"/metrics {diff.prefix}:spec_decode_num_accepted_tokens_per_pos diff (denominator: drafts)"
    if baseline and drafted is None:
        drafted, accepted, draft_steps = 0, 0, 0
        sources["drafted"] = sources["accepted"] = "target-only server (no drafts)"
    return _SpecCounts(drafted, accepted, draft_steps, list(hits), list(trials), cd)
