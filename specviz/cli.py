"""The ``specviz`` command: generate, bench, advise, serve, models.

    specviz generate --target gemma-3-270m --proposer ngram --k 4 --prompt "Hello"
    specviz bench --target gemma-3-270m --proposer ngram --proposer draft:gemma-3-270m@int8 \\
        --k 1,2,4 --limit 8 --json out.json --html report.html
    specviz serve --port 7860
    specviz models

Errors are printed as one line, ``specviz: error: ...``, with exit status 2 (set
``SPECVIZ_DEBUG=1`` for the traceback).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict
from typing import Sequence, TextIO

from .core.records import Sampling, StepRecord

# ANSI styles for token kinds (the app uses the same meanings, see specviz.viz.theme)
RESET = "\x1b[0m"
STYLES = {
    "accepted": "\x1b[32m",  # green
    "resampled": "\x1b[33m",  # amber / yellow
    "bonus": "\x1b[35m",  # violet / magenta
    "target": "",  # plain
    "rejected": "\x1b[9m\x1b[31m",  # struck through, red
    "discarded": "\x1b[9m\x1b[2;31m",  # struck through, dim red (after the first rejection)
}


DEFAULT_K = 4  # generate's k without --k (auto: the advisor's)


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors in one line (exit 2), like every other error."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"specviz: error: {message} (see `{self.prog} --help`)\n")


class CLIError(Exception):
    """A user error found by the CLI itself."""


# ---------------------------------------------------------------------------------------------
# Rendering a run for the terminal
# ---------------------------------------------------------------------------------------------


def use_color(stream: TextIO, mode: str = "auto") -> bool:
    """ANSI colour when asked, or in auto mode on a TTY without NO_COLOR set."""
    if mode == "always":
        return True
    if mode == "never":
        return False
    if os.environ.get("NO_COLOR"):
        return False
    return bool(getattr(stream, "isatty", lambda: False)())


def _style(text: str, kind: str) -> str:
    code = STYLES.get(kind, "")
    if not code or not text:
        return text
    # keep newlines outside the style so a struck-through line break does not smear the terminal
    return "\n".join(f"{code}{part}{RESET}" if part else part for part in text.split("\n"))


def render_steps(steps: Sequence[StepRecord], color: bool = True) -> str:
    """The generated text, token by token: accepted drafts, rejected drafts (struck through),
    the resampled correction or bonus token. Without colour: just the committed tokens' text."""
    out: list[str] = []
    for s in steps:
        n_ok = min(s.n_accepted, s.n_committed)
        for i, text in enumerate(s.committed_text):
            if i < n_ok:
                kind = "accepted"
            else:
                kind = s.next_kind
            if color and i == n_ok:
                # the drafts the target threw away, shown before the token that replaced them
                out.extend(_style(d.text, d.verdict) for d in s.drafts[n_ok:] if d.verdict in ("rejected", "discarded"))
            out.append(_style(text, kind) if color else text)
    return "".join(out)


def legend(color: bool) -> str:
    if not color:
        return ""
    return "legend: " + " ".join(_style(name, kind) for kind, name in (
        ("accepted", "accepted"), ("resampled", "resampled"), ("bonus", "bonus"), ("rejected", "rejected draft"),
    ))


def format_stats(stats, header: str = "") -> str:
    per = " ".join(f"{x:.2f}" for x in stats.per_position) or "-"
    lines = [header] if header else []
    lines += [
        f"tokens {stats.new_tokens} in {stats.steps} steps (mean acceptance length {stats.mean_acceptance_length:.2f})"
        + (f", drafted {stats.drafted}, accepted {stats.accepted} (acceptance rate {stats.acceptance_rate:.2f})" if stats.drafted else ""),
        f"per-position acceptance: {per}",
        f"time {stats.wall_s:.2f} s, {stats.tokens_per_s:.1f} tokens/s (prefill {stats.prefill_ms:.0f} ms, draft "
        f"{stats.draft_ms:.0f} ms, verify {stats.verify_ms:.0f} ms, other {stats.other_ms:.0f} ms; "
        f"{stats.target_forwards} target forwards)",
    ]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Commands
# ---------------------------------------------------------------------------------------------


def _warm(target, k: int, sampled: bool = False) -> float:
    """Build the target's static decode step (its runner chosen) for one token and a verify pass of
    k + 1, and for a sampled run the head's bf16 screen (its widths from the plan), before the clocks
    start -> the seconds it took (0.0 when built or not served)."""
    import time

    import torch

    from .runtime import sampled_head
    from .runtime.static_decode import warm

    model = getattr(target, "model", None)
    if not isinstance(model, torch.nn.Module):
        return 0.0
    built, t = warm(model, widths=(1, k + 1)), time.perf_counter()
    if sampled:
        sampled_head.screen_for(model, 1)  # the head's bf16 screen a sampled step reads: built now
    return built + (time.perf_counter() - t)


def _say(args, msg: str) -> None:
    if not getattr(args, "quiet", False):
        print(f"specviz: {msg}", file=sys.stderr, flush=True)


def _trace_note(meta: dict) -> str:
    """A note on the warm-up's share spent building the static decode step ("" when none was built)."""
    t = meta.get("static_decode_trace_s") or 0.0
    how = f" ({meta['static_decode_runner']})" if meta.get("static_decode_runner") else ""
    return f" (of which building the static decode step{how}, once per model: {t:.1f} s)" if t > 0 else ""


def _sampling(args) -> Sampling:
    return Sampling(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p)


def _quiet_hf() -> None:
    """transformers' own progress bars and warnings would drown the CLI's output."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def _threads(args) -> None:
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)


def _load_target(args):
    from .models import load_model

    _quiet_hf()
    _threads(args)
    return load_model(args.target, device=args.device, dtype=args.dtype, progress=lambda m: _say(args, m))


def _loader(args):
    from .models import load_model

    def load(name, **kw):
        return load_model(name, progress=lambda m: _say(args, m), **kw)

    return load


def cmd_generate(args) -> int:
    from .core.algorithm import Acceptance
    from .core.engine import SpeculativeDecoder
    from .core.hooks import Hook, TraceRecorder
    from .core.schedules import make_schedule
    from .proposers import check_spec, from_spec
    from .proposers.registry import auto_pick

    make_schedule(args.schedule)  # a bad schedule fails before any model loads

    from .core.engine import MAX_K

    sampling = _sampling(args)
    kind, _ = check_spec(args.proposer)
    if kind != "none" and (args.k or 0) > MAX_K:
        raise CLIError(f"k (tokens drafted per step) must be a whole number from 1 to {MAX_K}, got {args.k}")
    prompt = sys.stdin.read() if args.prompt == "-" else args.prompt
    if not prompt or not prompt.strip():
        raise CLIError("the prompt is empty: pass --prompt TEXT (or --prompt - to read standard input)")
    target = _load_target(args)
    pick = auto_pick(args.proposer, target)  # auto: the advisor's pick saved for this target (a ValueError when none)
    proposer = from_spec(pick.spec if pick else args.proposer, target, load=_loader(args))
    k = args.k or (pick.k if pick else DEFAULT_K)  # auto: the advisor's k unless --k was given
    decoder = SpeculativeDecoder(
        target, proposer, k=k, sampling=sampling, schedule=args.schedule, acceptance=Acceptance(args.acceptance)
    )
    if pick:
        _say(args, pick.describe())
    # a plain run prints the tokens, their verdicts and the stats: lean records (no step's p or q is
    # kept, so greedy steps take the head's certified argmax), the coloured text rendered as each
    # step ends (while its texts are still there)
    lean = not (args.trace or args.json)
    color = use_color(sys.stdout, args.color)
    shown: list[str] = []

    class Shown(Hook):
        def on_step(self, session, record):
            shown.append(render_steps([record], color=True))

    hooks = [TraceRecorder(args.trace)] if args.trace else [Shown()] if color and lean else []
    built = _warm(target, k, sampled=not sampling.greedy)
    if built > 0.05:
        _say(args, f"built the target's static decode step in {built:.1f} s (once per process; not in the times below)")
    result = decoder.generate(prompt, max_new_tokens=args.max_new_tokens, seed=args.seed, hooks=hooks, chat=args.chat,
                              records="lean" if lean else "full")
    if args.trace:
        _say(args, f"trace written to {args.trace}")
    if args.json:
        payload = {
            "target": target.name,
            "proposer": decoder.name,
            "k": decoder.k,
            "auto": asdict(pick) if pick else None,
            "sampling": {"temperature": sampling.temperature, "top_k": sampling.top_k, "top_p": sampling.top_p},
            "seed": args.seed,
            "prompt": prompt,
            "text": result.text,
            "token_ids": list(result.token_ids),
            "finished": result.finished,
            "stats": result.stats.to_dict(),
            "steps": [s.to_dict() for s in result.steps],
        }
        json.dump(payload, sys.stdout, ensure_ascii=False)
        sys.stdout.write("\n")
        return 0
    text = ("".join(shown) if lean else render_steps(result.steps, color=True)) if color else result.text
    sys.stdout.write(text + ("\n" if not text.endswith("\n") else ""))
    header = f"--- {target.name} + {decoder.label}" + (
        f", temperature {sampling.temperature:g}" if sampling.temperature else ", greedy") + f", finished: {result.finished}"
    if pick:
        header += f"\n--- {pick.describe()}"
    print(format_stats(result.stats, header))
    if color:
        print(legend(True))
    return 0


def _prompt_rows(args):
    from . import prompts as P

    rows = P.load_prompts(args.prompts, categories=args.category or None, limit=args.limit, sets=args.set)
    if not rows:
        raise CLIError(P.empty_reason(args.prompts, args.set))
    return rows


def _report_html(report) -> str:
    """The standalone HTML page of a bench report (plotly: imported only when a page is asked for)."""
    from .viz.bench import report_html

    return report_html(report)


def cmd_bench(args) -> int:
    from . import bench as B
    from .analysis.prediction import augment_rows
    from .proposers import check_spec, from_spec

    if args.limit is not None and args.limit < 1:
        raise CLIError("--limit must be >= 1")
    if args.repeats < 1:
        raise CLIError("--repeats must be >= 1")
    if args.remote or args.baseline_remote:  # measure remote servers instead of a local target
        if args.repeats != 1:
            raise CLIError("--repeats is for local sweeps; rerun --remote to repeat a remote measurement")
        from .remote.cli import bench_remote

        return bench_remote(args, _prompt_rows(args), _say, html_renderer=_report_html)
    ks = B.parse_ks(args.k)
    sampling = _sampling(args)
    prompts = _prompt_rows(args)
    config = B.BenchConfig(
        ks=ks, max_new_tokens=args.max_new_tokens, sampling=sampling, seed=args.seed, chat=args.chat,
        compare_hf=args.compare_hf, warmup=not args.no_warmup, schedules=tuple(args.schedule or ["constant"]),
        acceptance=args.acceptance, repeats=args.repeats, probe_bandwidth=True,
    )
    from .bench.shapes import expand_tree_shapes, parse_tree_nodes

    try:
        specs = expand_tree_shapes(args.proposer or ["ngram"], parse_tree_nodes(args.tree_nodes))
    except ValueError as e:
        raise CLIError(f"--tree-nodes: {e}") from None
    for spec in specs:
        check_spec(spec)
    target = _load_target(args)
    proposers = {}
    load = _loader(args)
    for spec in specs:
        p = from_spec(spec, target, load=load)
        if p is not None:
            proposers[p.name] = p
    sweep = B.Sweep(target, proposers, prompts, config, prompt_source=args.prompts or "bundled:specbench-dev")
    for skipped in sweep.schedule_skipped:
        _say(args, f"skipped {skipped}")
    passes = f" x {config.repeats} passes" if config.repeats > 1 else ""
    _say(args, f"{len(prompts)} prompts{passes} x {len(sweep.runs)} configurations = {sweep.total} timed runs"
               + (" after a warm-up" if config.warmup else ""))
    from .bench.console import report_text, run_with_progress

    run_with_progress(sweep, lambda msg: _say(args, msg), quiet=args.quiet)  # a bar on a terminal, a line a prompt in a log
    report = sweep.report()
    rows = augment_rows(report["rows"], report["prompt_rows"])  # each row's per-position prediction
    print(report_text(report, rows, target, _trace_note(report["meta"])))
    for line in B.write_reports(report, args.json, args.csv, args.html, html_renderer=_report_html):
        _say(args, line)
    return 0


def cmd_advise(args) -> int:
    from .bench import BenchConfig
    from .bench.advice_out import format_advice, format_runs, save_advice
    from .bench.advise import advise, run_top
    from .models import cache_dir
    from .proposers import check_spec

    for spec in args.proposer or ["ngram"]:
        check_spec(spec)
    if args.k_max < 1 or args.run_top < 0 or args.heldout < 0:
        raise CLIError("--k-max must be >= 1, --run-top and --heldout >= 0")
    rows = _prompt_rows(args)
    calib, held = (rows[: len(rows) - args.heldout], rows[len(rows) - args.heldout:]) if args.heldout else (rows, rows)
    if not calib:
        raise CLIError(f"--heldout {args.heldout} leaves no prompts to calibrate on ({len(rows)} selected)")
    target = _load_target(args)
    sampling = _sampling(args)
    advice = advise(target, args.proposer or ["ngram"], calib, cache_dir=cache_dir(), load=_loader(args),
                    ks=range(1, args.k_max + 1), min_drafted=args.calibrate_tokens, max_new_tokens=args.max_new_tokens,
                    sampling=sampling, chat=args.chat, seed=args.seed, refresh=args.refresh_costs, say=lambda m: _say(args, m),
                    run_prompts=held if args.heldout else None, schedule=args.schedule)
    print(advice.cost.table() + "\n")
    print(format_advice(advice, top=args.show))
    for line in save_advice(advice):
        _say(args, f"saved {line}")
    payload = advice.to_dict()
    runs = []
    if args.run_top:
        config = BenchConfig(max_new_tokens=args.max_new_tokens, sampling=sampling, seed=args.seed, chat=args.chat,
                             repeats=args.repeats)
        runs, report = run_top(target, advice, args.run_top, held, config, load=_loader(args), say=lambda m: _say(args, m))
        print("\n" + format_runs(runs) + f"\n(run on {'held-out' if args.heldout else 'the calibration'} prompts: {len(held)})")
        payload.update(runs=runs, report=report)
    if args.html:
        from .viz.advisor import advice_page_html

        with open(args.html, "w", encoding="utf-8") as fh:
            fh.write(advice_page_html(advice, runs))
        _say(args, f"wrote {args.html}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(payload, fh, indent=1, default=str)
        _say(args, f"wrote {args.json}")
    return 0


def cmd_serve(args) -> int:
    try:
        from . import ui
    except ImportError as exc:
        raise CLIError(f"the app is not available ({exc})") from exc
    build = getattr(ui, "build_demo", None)
    if build is None:
        raise CLIError("the app is not available (specviz.ui has no build_demo)")
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    demo = build()
    launch = getattr(ui, "launch", None)  # queues and applies the app's theme and CSS (Gradio 6: at launch)
    if launch is not None:
        launch(demo, server_name=args.host, server_port=args.port)
    else:
        demo.queue().launch(server_name=args.host, server_port=args.port)
    return 0


def cmd_tune(args) -> int:
    """Measure each target's kernel plan on this machine once and write its file (read at every load)."""
    from .app.warmup import tune_targets

    _threads(args)
    print("\n".join(tune_targets(args.target or ["gemma-3-270m"], args.dtype, args.again, lambda m: _say(args, m))))
    return 0


def cmd_models(args) -> int:
    from .models import cache_dir, list_models

    models = list_models()
    if args.json:
        json.dump(models, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    width = max(len(m["name"]) for m in models)
    for m in models:
        state = ("available" + (", converted" if m.get("cached") else ", converted on first use")) if m["available"] else (
            f"not installed: {m['how_to_install']}")
        print(f"{m['name'].ljust(width)}  {state}\n{' ' * width}  {m['description']}")
    print(f"\nconverted copies live in {cache_dir()}; any local model directory or hub id (owner/name) works too, "
          "and NAME@int8 quantizes a model to int8")
    return 0


# ---------------------------------------------------------------------------------------------
# Argument parsing
# ---------------------------------------------------------------------------------------------


def _positive_int(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a number >= 1, got {n}")
    return n


def _add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", default="gemma-3-270m",
                   help="target model: a built-in (see `specviz models`), a local directory or a hub id; NAME@int8 quantizes")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N or mps (default: auto)")
    p.add_argument("--dtype", default="auto", help="auto, float32, bfloat16 or float16 (default: auto)")
    p.add_argument("--threads", type=_positive_int, default=None, help="torch CPU threads")


def _add_sampling_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    p.add_argument("--top-k", type=int, default=None, help="keep the k most likely tokens")
    p.add_argument("--top-p", type=float, default=None, help="nucleus sampling mass")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--max-new-tokens", type=_positive_int, default=64, help="tokens to generate (default 64)")
    p.add_argument("--chat", action=argparse.BooleanOptionalAction, default=True,
                   help="wrap prompts in the target's chat template when it has one (default: on)")
    p.add_argument("--acceptance", choices=("exact", "typical"), default="exact",
                   help="acceptance rule: exact (default) or typical (LOSSY: output no longer follows the target)")


def build_parser() -> argparse.ArgumentParser:
    from .proposers.registry import syntax_list

    parser = _Parser(prog="specviz", description="Watch, test and measure speculative decoding.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    g = sub.add_parser("generate", help="generate text with a target and a proposer, showing every draft",
                       description="Generate with speculative decoding. Accepted drafts are green, resampled tokens "
                                   "amber, bonus tokens violet, rejected drafts red and struck through.")
    _add_model_args(g)
    g.add_argument("--proposer", default="ngram",
                   help=f"{syntax_list()} (default: ngram)")
    g.add_argument("--k", type=_positive_int, default=None,
                   help=f"tokens drafted per step (default {DEFAULT_K}; with --proposer auto, the advisor's k)")
    g.add_argument("--schedule", default="constant",
                   help="k schedule: constant (default), heuristic (k+2 after a full accept, k-1 otherwise), "
                        "confidence:T (stop drafting below draft probability T)")
    _add_sampling_args(g)
    g.add_argument("--prompt", required=True, help="the prompt text ('-' reads standard input)")
    g.add_argument("--json", action="store_true", help="print the result as JSON (text, token_ids, stats, steps)")
    g.add_argument("--trace", metavar="FILE.jsonl", help="also write a JSONL trace of every step")
    g.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                   help="colour the tokens (auto: on a terminal without NO_COLOR)")
    g.add_argument("--quiet", action="store_true", help="no progress messages on stderr")
    g.set_defaults(func=cmd_generate)

    b = sub.add_parser("bench", help="sweep proposers x k over prompts and compare with target-only decoding",
                       description="Benchmark: a warm-up, then target-only decoding and every proposer x k on each "
                                   "prompt in turn, optionally also transformers' generate().")
    _add_model_args(b)
    b.add_argument("--proposer", action="append", metavar="SPEC",
                   help=f"repeatable: {syntax_list(include_none=False)} (default: ngram)")
    b.add_argument("--k", default="1,2,4,8", help="comma-separated draft lengths (default 1,2,4,8)")
    b.add_argument("--tree-nodes", default=None, metavar="N,N,...",
                   help="sweep every tree proposer (ngram-tree, draft-tree:...) at each node budget, e.g. 4,8,16 "
                        "(depth = k); chains are swept as given")
    b.add_argument("--schedule", action="append", metavar="NAME",
                   help="repeatable k schedule swept beside each k: constant (default), heuristic, confidence:T")
    b.add_argument("--prompts", metavar="FILE.jsonl", default=None,
                   help="JSONL prompts with 'prompt' or 'turns'[0] (default: the bundled Spec-Bench dev set)")
    b.add_argument("--category", action="append", metavar="NAME", help="repeatable: only these prompt categories")
    b.add_argument("--set", action="append", metavar="NAME", help="repeatable: only these named sets (each line's 'set')")
    b.add_argument("--limit", type=int, default=None, help="at most N prompts, taking the categories in turn (default: all)")
    _add_sampling_args(b)
    b.add_argument("--compare-hf", action="store_true",
                   help="also time transformers' generate(): target-only, assistant_model=, prompt_lookup_num_tokens=")
    b.add_argument("--no-warmup", action="store_true", help="skip the warm-up runs")
    b.add_argument("--repeats", type=int, default=1, help="passes over the prompts, each in a new rotation (default 1; "
                   "use 2-3 where other work shares the CPU: totals and medians then cover every pass)")
    b.add_argument("--json", metavar="OUT.json", help="write the report (settings, summary and per-prompt rows)")
    b.add_argument("--csv", metavar="OUT.csv", help="write the summary rows as CSV")
    b.add_argument("--html", metavar="REPORT.html", help="write a standalone page with every plot")
    b.add_argument("--quiet", action="store_true", help="no progress bar or messages on stderr")
    from .remote.cli import add_remote_args

    add_remote_args(b)
    b.set_defaults(func=cmd_bench)

    a = sub.add_parser("advise", help="predict every proposer x k x tree shape's speedup on this machine, rank them",
                       description="Measure this machine's costs (cached), calibrate each proposer's acceptance on a few "
                                   "prompts, predict the speedup of every configuration with an interval, rank them; "
                                   "--run-top N then runs the best N for real (docs/advisor.md).")
    _add_model_args(a)
    a.add_argument("--proposer", action="append", metavar="SPEC", help=f"repeatable: {syntax_list(include_none=False)} (default: ngram)")
    a.add_argument("--prompts", metavar="FILE.jsonl", default=None, help="JSONL prompts (default: the bundled set)")
    a.add_argument("--category", action="append", metavar="NAME", help="repeatable: only these prompt categories")
    a.add_argument("--set", action="append", metavar="NAME", help="repeatable: only these named sets (each line's 'set')")
    a.add_argument("--limit", type=int, default=4, help="prompts to use (default 4)")
    a.add_argument("--heldout", type=int, default=0, help="keep the last N prompts out of calibration and run on them "
                   "(prompt lookup, whose acceptance belongs to the prompt, is calibrated on those)")
    a.add_argument("--calibrate-tokens", type=_positive_int, default=300, help="drafted tokens to calibrate on (default 300)")
    a.add_argument("--k-max", type=int, default=8, help="predict k = 1..K (default 8; the calibration drafts K per step)")
    a.add_argument("--schedule", default="constant", metavar="NAME", help="constant (default) or confidence:T: the draft "
                   "chains (draft:, ngram+draft:) advised with a confidence stop, drafting until q's top probability "
                   "falls below T")
    a.add_argument("--run-top", type=int, default=0, metavar="N", help="run the N best for real and compare (default 0)")
    a.add_argument("--repeats", type=_positive_int, default=1, help="passes over the prompts in --run-top (default 1)")
    a.add_argument("--show", type=int, default=20, help="rows of the ranking to print (default 20)")
    a.add_argument("--refresh-costs", action="store_true", help="measure the costs again instead of reading the cache")
    _add_sampling_args(a)
    a.add_argument("--json", metavar="OUT.json", help="write costs, calibration, forecasts (and runs)")
    a.add_argument("--html", metavar="REPORT.html", help="write a standalone page: verdicts, ranking, the tree-budget "
                   "plot, predicted vs measured, costs")
    a.add_argument("--quiet", action="store_true", help="no progress messages on stderr")
    a.set_defaults(func=cmd_advise)

    s = sub.add_parser("serve", help="launch the Gradio app")
    s.add_argument("--host", default="127.0.0.1", help="interface to listen on (default 127.0.0.1)")
    s.add_argument("--port", type=int, default=7860, help="port (default 7860)")
    s.set_defaults(func=cmd_serve)

    t = sub.add_parser("tune", help="measure this machine's kernel plan for each target once (loading reads it)",
                       description="Time every kernel of specviz's table at widths 1-9 on each target's LM head, projections "
                                   "and head screens; write one plan file per machine, model and torch version.")
    t.add_argument("--target", action="append", help="a model (repeat for several; default gemma-3-270m; NAME@int8 too)")
    t.add_argument("--dtype", default="auto", help="auto, float32 or bfloat16 (default: auto)")
    t.add_argument("--threads", type=_positive_int, default=None, help="torch CPU threads (a plan is per thread count)")
    t.add_argument("--again", action="store_true", help="measure again where a plan file is there")
    t.add_argument("--quiet", action="store_true", help="no progress messages on stderr")
    t.set_defaults(func=cmd_tune)

    m = sub.add_parser("models", help="list the built-in offline models")
    m.add_argument("--json", action="store_true", help="print JSON")
    m.set_defaults(func=cmd_models)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error, already printed in one line (2)
        return int(exc.code or 0)
    if getattr(args, "func", None) is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("specviz: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:  # noqa: BLE001 - one line for the user, never a traceback
        if os.environ.get("SPECVIZ_DEBUG"):
            raise
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if not isinstance(exc, (ValueError, CLIError, OSError)):
            msg = f"{type(exc).__name__}: {msg}"
        print(f"specviz: error: {msg}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
