"""``specviz bench --remote URL``: the remote path of the bench command (called from specviz.cli)."""

from __future__ import annotations

import sys
from typing import Any, Callable, Mapping, Sequence

__all__ = ["add_remote_args", "bench_remote", "format_remote_table"]


def add_remote_args(b) -> None:
    """The bench subcommand's remote flags."""
    b.add_argument("--remote", action="append", metavar="[LABEL=]URL",
                   help="repeatable: measure an OpenAI-compatible server (vLLM, SGLang, llama.cpp) instead of a local "
                        "target; LABEL may carry k, e.g. 'ngram k=3=http://127.0.0.1:8080'; 'target-only=URL' is the baseline")
    b.add_argument("--baseline-remote", metavar="URL", help="the target-only server (same model, no speculation): measures the speedup")
    b.add_argument("--concurrency", type=int, default=1, help="remote requests in flight at once (default 1, like the local lab)")
    b.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for one remote answer (default 120)")


def _f(v: Any, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def format_remote_table(rows: Sequence[dict[str, Any]]) -> str:
    head = ["server", "k", "engine", "prompts", "tokens", "tok/s", "speedup", "accept", "tau", "engine tau", "per position"]
    body = [[
        str(r["proposer"]), str(r["k"]), str(r.get("engine") or "?"), str(r["prompts"]), str(r["new_tokens"]),
        _f(r["tokens_per_s"], ".2f"), _f(r["speedup"], ".2f") + ("x" if r["speedup"] is not None else ""),
        _f(r["acceptance_rate"], ".3f"), _f(r["mean_acceptance_length"], ".2f"), _f(r.get("engine_mean_acceptance_length"), ".2f"),
        " ".join(f"{x:.2f}" for x in r.get("per_position") or []) or "-",
    ] for r in rows]
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(head)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths)), "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(b, widths)) for b in body]
    return "\n".join(lines)


def bench_remote(args, prompts, say: Callable[[Any, str], None],
                 html_renderer: Callable[[Mapping[str, Any]], str] | None = None) -> int:
    """Run the remote benchmark for parsed ``specviz bench`` arguments; write what was measured
    (the HTML page, ``--html``, through the caller's ``html_renderer``)."""
    from tqdm import tqdm

    from ..analysis.metrics import why_no_speedup
    from ..bench.report import write_reports
    from .client import RemoteError, parse_endpoint
    from .run import RemoteConfig, RemoteSweep

    if args.html and html_renderer is None:  # before anything is measured
        raise RemoteError("--html needs the caller's HTML renderer (specviz.cli passes specviz.viz.bench.report_html)")
    endpoints = [parse_endpoint(u) for u in args.remote or []]
    if args.baseline_remote:
        endpoints.append(parse_endpoint(args.baseline_remote, baseline=True))
    if not any(not e.baseline for e in endpoints):
        raise RemoteError("give at least one speculative server with --remote URL (the baseline alone measures nothing)")
    config = RemoteConfig(max_new_tokens=args.max_new_tokens, temperature=args.temperature, seed=args.seed,
                          warmup=not args.no_warmup, timeout_s=args.timeout, concurrency=args.concurrency)
    sweep = RemoteSweep(endpoints, prompts, config, prompt_source=args.prompts or "bundled:specbench-dev")
    say(args, f"{len(sweep.prompts)} prompts x {len(endpoints)} servers = {sweep.total} requests after a warm-up")
    with tqdm(total=sweep.total, file=sys.stderr, unit="req", dynamic_ncols=True, disable=args.quiet or None) as bar:
        for ev in sweep:
            if ev.kind == "run":
                bar.set_description(ev.label[:48])
                bar.update(1)
    report = sweep.report()
    m = report["meta"]
    for s in m["servers"]:
        say(args, f"{s['label']}: {s['url']} is {s['engine'] or 'an unknown engine'}"
                  f"{' (' + ', '.join(s['detected_by']) + ')' if s['detected_by'] else ''}, model {s['model'] or '?'}, "
                  f"k={s['k'] if s['k'] is not None else '?'}{' from ' + s['k_source'] if s['k_source'] else ''}; "
                  f"per-request stats: {s['per_request_stats'] or 'none'}; spec counters in /metrics: {'yes' if s['spec_counters'] else 'no'}")
    print(format_remote_table(report["rows"]))
    for s in m["servers"]:
        lp = s.get("logprobs") or {}
        if lp.get("status") == "zero while speculating":
            print(f"  {s['label']}: logprobs not the target's: {lp['note']}")
    for r in report["rows"]:
        if r.get("unavailable") and r["k"]:
            print(f"  {r['proposer']}: not available from this engine: {', '.join(r['unavailable'])}")
    print("\n" + why_no_speedup(report["rows"])["markdown"].replace("**", ""))
    for line in write_reports(report, args.json, args.csv, args.html, html_renderer=html_renderer):
        say(args, line)
    if m["stopped"]:
        kept = f"{m['runs_done']} of {m['runs_planned']} requests kept" + (" and written" if args.json or args.csv or args.html else "")
        print(f"specviz: error: stopped at {m['stopped_at']}: {m['stopped_reason']} ({kept})", file=sys.stderr)
        return 1
    return 0
