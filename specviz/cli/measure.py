"""``specviz bench`` and ``specviz advise``: sweeps over prompts, and the advisor's ranking."""

from __future__ import annotations

import json

from .common import CLIError, bench_page, load_target, loader, prompt_rows, sampling_of, say, trace_note


def cmd_bench(args) -> int:
    from .. import bench as B
    from ..analysis.prediction import augment_rows
    from ..proposers import check_spec, from_spec

    if args.limit is not None and args.limit < 1:
        raise CLIError("--limit must be >= 1")
    if args.repeats < 1:
        raise CLIError("--repeats must be >= 1")
    if args.remote or args.baseline_remote:  # measure remote servers instead of a local target
        if args.repeats != 1:
            raise CLIError("--repeats is for local sweeps; rerun --remote to repeat a remote measurement")
        from ..remote.cli import bench_remote

        return bench_remote(args, prompt_rows(args), say, html_renderer=bench_page)
    ks = B.parse_ks(args.k)
    sampling = sampling_of(args)
    prompts = prompt_rows(args)
    config = B.BenchConfig(
        ks=ks, max_new_tokens=args.max_new_tokens, sampling=sampling, seed=args.seed, chat=args.chat,
        compare_hf=args.compare_hf, warmup=not args.no_warmup, schedules=tuple(args.schedule or ["constant"]),
        acceptance=args.acceptance, repeats=args.repeats, probe_bandwidth=True,
    )
    from ..bench.shapes import expand_tree_shapes, parse_tree_nodes

    try:
        specs = expand_tree_shapes(args.proposer or ["ngram"], parse_tree_nodes(args.tree_nodes))
    except ValueError as e:
        raise CLIError(f"--tree-nodes: {e}") from None
    for spec in specs:
        check_spec(spec)
    target = load_target(args)
    proposers = {}
    load = loader(args)
    for spec in specs:
        p = from_spec(spec, target, load=load)
        if p is not None:
            proposers[p.name] = p
    sweep = B.Sweep(target, proposers, prompts, config, prompt_source=args.prompts or "bundled:specbench-dev")
    for skipped in sweep.schedule_skipped:
        say(args, f"skipped {skipped}")
    passes = f" x {config.repeats} passes" if config.repeats > 1 else ""
    say(args, f"{len(prompts)} prompts{passes} x {len(sweep.runs)} configurations = {sweep.total} timed runs"
               + (" after a warm-up" if config.warmup else ""))
    from ..bench.console import report_text, run_with_progress

    run_with_progress(sweep, lambda msg: say(args, msg), quiet=args.quiet)  # a bar on a terminal, a line a prompt in a log
    report = sweep.report()
    rows = augment_rows(report["rows"], report["prompt_rows"])  # each row's per-position prediction
    print(report_text(report, rows, target, trace_note(report["meta"])))
    for line in B.write_reports(report, args.json, args.csv, args.html, html_renderer=bench_page):
        say(args, line)
    return 0


def cmd_advise(args) -> int:
    from ..bench import BenchConfig
    from ..bench.advice_out import format_advice, format_runs, save_advice
    from ..bench.advise import advise, run_top
    from ..models import cache_dir
    from ..proposers import check_spec

    for spec in args.proposer or ["ngram"]:
        check_spec(spec)
    if args.k_max < 1 or args.run_top < 0 or args.heldout < 0:
        raise CLIError("--k-max must be >= 1, --run-top and --heldout >= 0")
    rows = prompt_rows(args)
    calib, held = (rows[: len(rows) - args.heldout], rows[len(rows) - args.heldout:]) if args.heldout else (rows, rows)
    if not calib:
        raise CLIError(f"--heldout {args.heldout} leaves no prompts to calibrate on ({len(rows)} selected)")
    target = load_target(args)
    sampling = sampling_of(args)
    advice = advise(target, args.proposer or ["ngram"], calib, cache_dir=cache_dir(), load=loader(args),
                    ks=range(1, args.k_max + 1), min_drafted=args.calibrate_tokens, max_new_tokens=args.max_new_tokens,
                    sampling=sampling, chat=args.chat, seed=args.seed, refresh=args.refresh_costs, say=lambda m: say(args, m),
                    run_prompts=held if args.heldout else None, schedule=args.schedule)
    print(advice.cost.table() + "\n")
    print(format_advice(advice, top=args.show))
    for line in save_advice(advice):
        say(args, f"saved {line}")
    payload = advice.to_dict()
    runs = []
    if args.run_top:
        config = BenchConfig(max_new_tokens=args.max_new_tokens, sampling=sampling, seed=args.seed, chat=args.chat,
                             repeats=args.repeats)
        runs, report = run_top(target, advice, args.run_top, held, config, load=loader(args), say=lambda m: say(args, m))
        print("\n" + format_runs(runs) + f"\n(run on {'held-out' if args.heldout else 'the calibration'} prompts: {len(held)})")
        payload.update(runs=runs, report=report)
    if args.html:
        from ..viz.advisor import advice_page_html

        with open(args.html, "w", encoding="utf-8") as fh:
            fh.write(advice_page_html(advice, runs))
        say(args, f"wrote {args.html}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(payload, fh, indent=1, default=str)
        say(args, f"wrote {args.json}")
    return 0
