"""Check the advisor in one process: its whole-run predictions against a full sweep (issues 23, 51).

On prompts of three kinds never used to tune anything (default ``benchmarks/prompts/heldout.jsonl``:
``--per-kind`` (3) prompts of each of its kinds, code, writing and structured output, ``KINDS``;
``--heldout M`` instead holds out the last M prompts of a file, as older checks did), greedy:

1. times the advisor (``specviz.bench.advise.advise``: cost model, acceptance, prediction) and
   records its ranking and, per proposer, its predicted best k and speedup (with the interval).
   ``--calibrate-on heldout`` (the default): the advisor is given the prompts the sweep will run,
   as a user gives theirs, decodes them once (greedy) and replays every proposer on that decode;
   ``--calibrate-on calibration``: as ``specviz advise --heldout``, draft models are calibrated on
   the other prompts and only prompt lookup on the held-out ones. The models are loaded before
   the clock starts (the sweep needs the same ones; their load time is recorded apart);
2. runs the full sweep (``specviz.bench.sweep.Sweep``: every proposer x each k of ``--k``, plus
   target-only, interleaved per prompt) on the held-out prompts, timed; a tree proposer runs as
   given and with ``shape=auto`` (the shape the advisor just chose, saved where ``shape=auto``
   reads it, as ``specviz advise`` does);
3. prints, for every chain configuration at every k swept (default k = 1, 2, 4, 8), the whole-run
   prediction beside the measured median over prompts and its 90% interval (the bench's robust
   statistics, ``specviz.analysis.noise.median_interval``) and their error; the mean and the worst
   absolute error (goal: within 5% on average, 10% each); predicted against measured at each
   proposer's predicted best k, the advisor's pick against the sweep's best (gap, within 5%?) and
   the advisor's time over the sweep's (goal <= 0.1). The error summary is also written to
   ``--record`` (default ``benchmarks/results/advisor-error.json``), where ``specviz advise`` and the
   app's Advisor panel read the advisor's published error (``specviz.bench.advice_out.published_error``);
4. for each tree proposer, at the node budget of its ``shape=auto`` tree, a second sweep of
   shape=auto against fixed shapes of as many nodes (the chain, wide-first trees, the dynamic
   program's runner-up): is auto at least as fast as the best fixed one?

Every number is measured in the run; the header names the CPU and torch's threads. Markdown
goes to stdout, then the whole record as JSON (also ``--json FILE``).

    .venv/bin/python benchmarks/advisor_check.py --threads 2 --json advisor_check.json > advisor_check.md
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

import torch

from specviz.analysis import advisor as A
from specviz.analysis import treeshape as T
from specviz.analysis.costmodel import MAX_N
from specviz.bench import BenchConfig
from specviz.bench.advice_out import pick_of, save_shapes
from specviz.bench.advise import MAX_TREE_NODES, advise, compare_run, plan
from specviz.bench.config import TARGET_ONLY
from specviz.bench.sweep import Sweep
from specviz.core.engine import MAX_K
from specviz.core.records import Sampling
from specviz.models import cache_dir, load_model
from specviz.prompts import load_prompts
from specviz.proposers.ngram_tree import advised_shapes_path
from specviz.proposers.registry import check_spec, from_spec, shape_base
from specviz.runtime import static_decode

PROMPTS = Path(__file__).parent / "prompts" / "heldout.jsonl"
ADVISOR_PROMPTS = Path(__file__).parent / "prompts" / "advisor.jsonl"
DEFAULT_SET = "advisor_check"  # advisor.jsonl's set the older (--heldout) checks were written for
# heldout.jsonl's categories as three kinds of prompt (code; prose; structured output), each taken in turn
KINDS = {"code": ("code (HumanEval)",), "writing": ("dialogue", "letter", "recipe", "howto"),
         "structured": ("structured", "shell", "sql")}
RECORD = Path(__file__).parent / "results" / "advisor-error.json"  # the published error (advice_out.published_error)
DEFAULT_KS = (1, 2, 4, 8)


def _shown(path: str | Path) -> str:
    """``path`` relative to the repository when it lies inside it (a result file names no machine's paths)."""
    try:
        return str(Path(path).resolve().relative_to(Path(__file__).resolve().parents[1]))
    except ValueError:
        return str(path)
DEFAULT_PROPOSERS = ["ngram", "draft:{target}@int8,vocab=16384", "ngram+draft:{target}@int8,vocab=16384"]
ISA = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8")
SPEED_TOLERANCE = 0.10  # predicted within +-10% of measured
PICK_TOLERANCE = 0.05  # the pick within 5% of the sweep's best
MEAN_TOLERANCE = 0.05  # every chain configuration: within 5% of the measured median on average (and 10% each)
TIME_GOAL = 0.10  # the advisor's time over the sweep's


# -- the machine ----------------------------------------------------------------------------------


def cpu_info() -> dict[str, Any]:
    """``lscpu``'s model name, family/model and the ISA flags that matter here (from
    /proc/cpuinfo when lscpu is missing)."""
    fields: dict[str, str] = {}
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        for line in out.splitlines():
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
    except (OSError, subprocess.SubprocessError):
        pass
    flags = fields.get("Flags", "")
    if not flags:
        try:
            text = Path("/proc/cpuinfo").read_text()
            flags = next((ln.partition(":")[2] for ln in text.splitlines() if ln.startswith(("flags", "Features"))), "")
        except OSError:
            pass
    have = set(flags.split())
    try:
        load = os.getloadavg()
    except OSError:
        load = None
    return {
        "model_name": fields.get("Model name") or platform.processor() or platform.machine(),
        "family": fields.get("CPU family"), "model": fields.get("Model"),
        "cpus": fields.get("CPU(s)") or str(os.cpu_count()),
        "isa": [f for f in ISA if f in have], "load_average": list(load) if load else None,
        "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
    }


# -- building the configurations ---------------------------------------------------------------


def _run_name(f: A.Forecast) -> str:
    """The sweep's name for a forecast's configuration: its spec, and ``[confidence:T]`` where it
    runs under that schedule."""
    return f"{f.spec} [{f.extra['schedule']}]" if "schedule" in f.extra else f.spec


def _is_tree(spec: str) -> bool:
    return check_spec(spec)[0] in ("ngram-tree", "draft-tree")


def fill_shape(nodes: int, width: int) -> str:
    """A tree of ``nodes`` nodes filled breadth first, each node (the root too) taking up to
    ``width`` children, as BFS child counts: width 1 is the chain, a larger width is wide first."""
    counts, left, i, frontier = [], nodes, 0, 1
    while left > 0 and i < frontier:
        c = min(width, left)
        counts.append(c)
        left -= c
        frontier += c
        i += 1
    return "".join(map(str, counts)).rstrip("0") or "0"


def fixed_shapes(auto: str, runner_up: str | None) -> dict[str, str]:
    """label -> shape: fixed trees with as many nodes as ``auto`` (other than auto itself and
    those deeper than the engine's k allows)."""
    n = T.decode(auto).nodes
    out: dict[str, str] = {}
    for label, shape in (("chain", fill_shape(n, 1)), ("wide-first, 2 per node", fill_shape(n, 2)),
                         ("wide-first, 3 per node", fill_shape(n, 3)), ("the DP's runner-up", runner_up)):
        if not shape or shape == auto or T.decode(shape).depth > MAX_K:
            continue
        same = next((k for k, v in out.items() if v == shape), None)
        if same is not None:  # one shape, two names: run it once
            out[f"{same} = {label}"] = out.pop(same)
            continue
        out[label] = shape
    return out


def _tree_inputs(advice, spec: str):
    """(candidate, calibration, draft name, n-gram lookup seconds) of a tree proposer, as the advisor forecasts it."""
    cand = next(c for c in advice.candidates if c.spec == spec)
    cal = advice.calibrations[spec]
    draft = str(cand.draft.name) if cand.draft is not None else None
    lookup = (cal.draft_ms / 1e3 / cal.steps) if cand.kind == "ngram-tree" and cal.steps else None  # as advise._forecast
    return cand, cal, draft, lookup


def predicted_tree(advice, spec: str, shape: str) -> A.Forecast:
    """The advisor's forecast for ``spec`` with a fixed ``shape`` (``advisor.predict_tree``; after a
    greedy replay, with the shape's own replayed tau and tree sizes, as the advisor's ranking has it)."""
    cand, cal, draft, lookup = _tree_inputs(advice, spec)
    f = A.predict_tree(cal, advice.cost, T.decode(shape), cand.kind, f"{cand.base},shape={shape}", draft, lookup)
    if advice.tree_replay is not None:
        f = A.with_replay(f, advice.tree_replay(cand, shape, f.k), advice.cost)
    return f


def runner_up(advice, spec: str, k_max: int) -> str | None:
    """The dynamic program's second-best shape with the auto shape's node count (its candidates
    for every depth bound, timed on this machine's costs), or None."""
    cand, cal, draft, lookup = _tree_inputs(advice, spec)
    seconds = A.tree_step_seconds(advice.cost, cand.kind, draft, lookup)
    auto = advice.shapes.get(cand.base)
    _, cands = T.best_shape(cal.matrix("p"), seconds, max_nodes=MAX_TREE_NODES, max_depth=k_max)  # as the advisor
    n = T.decode(auto).nodes
    return next((c.text for c in cands if c.shape.nodes == n and c.text != auto), None)


def _rows(report: dict[str, Any]) -> dict[tuple[str, int], dict[str, Any]]:
    return {(r["proposer"], r["k"]): r for r in report["rows"] if r.get("impl") == "specviz"}


def _mean_prompt(sweep: Sweep) -> float:
    rows = sweep.prompt_rows
    return sum(r.prompt_tokens for r in rows) / len(rows) if rows else 0.0


def kinds_for(rows) -> dict[str, tuple[str, ...]]:
    """kind -> its categories: ``KINDS`` where every category of ``rows`` is one of them (heldout.jsonl),
    else each category a kind of its own."""
    cats = list(dict.fromkeys(r.category for r in rows))
    known = {c for cs in KINDS.values() for c in cs}
    if cats and set(cats) <= known:
        return {k: cs for k, cs in KINDS.items() if set(cs) & set(cats)}
    return {c: (c,) for c in cats}


def select_by_kind(rows, per_kind: int) -> tuple[list, list, dict[str, list[str]]]:
    """(measured, the rest, kind -> the measured prompts' ids): the first ``per_kind`` prompts of each
    kind in the file's order (``load_prompts`` takes a kind's categories in turn)."""
    held, by_kind = [], {}
    for kind, cats in kinds_for(rows).items():
        picked = [r for r in rows if r.category in cats][:per_kind]
        by_kind[kind] = [r.id for r in picked]
        held += picked
    chosen = {id(r) for r in held}
    return held, [r for r in rows if id(r) not in chosen], by_kind


def chain_rows(advice, measured: dict[tuple[str, int], dict[str, Any]], mean_prompt: float) -> list[dict[str, Any]]:
    """Every chain forecast the sweep ran, beside its measured row (``compare_run``) and the error
    the goal is stated in: (predicted run - measured median) / measured median, "+" too high."""
    out = []
    for f in advice.forecasts:
        row = measured.get((_run_name(f), f.k))
        if f.shape is not None or row is None:
            continue
        c = compare_run(advice, f, row, mean_prompt, _run_name(f))
        med, pred = c["measured_median"], c["predicted_speedup"]
        c["error_vs_median"] = (pred - med) / med if med and pred is not None else None
        out.append(c)
    order = {p: i for i, p in enumerate(dict.fromkeys(f.proposer for f in advice.forecasts))}
    return sorted(out, key=lambda c: (order.get(c["proposer"], 0), c["name"], c["k"]))


def error_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The mean and the worst absolute error against the measured medians, how many predictions
    were too high, and the goal: within ``MEAN_TOLERANCE`` on average and ``SPEED_TOLERANCE`` each."""
    scored = [c for c in rows if c.get("error_vs_median") is not None]
    if not scored:
        return {"configurations": 0, "mean_abs_error": None, "max_abs_error": None, "worst": None, "too_high": 0,
                "within_goal": False}
    errs = [abs(c["error_vs_median"]) for c in scored]
    worst = max(scored, key=lambda c: abs(c["error_vs_median"]))
    mean = sum(errs) / len(errs)
    return {"configurations": len(scored), "mean_abs_error": mean, "max_abs_error": max(errs),
            "mean_signed_error": sum(c["error_vs_median"] for c in scored) / len(scored),
            "worst": {"configuration": worst["name"], "k": worst["k"], "error": worst["error_vs_median"]},
            "too_high": sum(c["error_vs_median"] > 0 for c in scored),
            "within_10pct": sum(e <= SPEED_TOLERANCE for e in errs),
            "within_goal": mean <= MEAN_TOLERANCE and max(errs) <= SPEED_TOLERANCE}


def published_record(res: dict[str, Any], argv: Sequence[str]) -> dict[str, Any]:
    """What ``--record`` keeps: the machine, the prompts, the command and the error per configuration."""
    h = res["header"]
    rows = [{k: c[k] for k in ("name", "k", "predicted_speedup", "measured_median", "measured_interval",
                               "measured_speedup", "error_vs_median", "predicted_tau", "measured_tau")}
            for c in res["chains"]]
    return {"date": h["started"], "cpu": h["cpu"], "target": h["target"], "dtype": h["dtype"],
            "prompts": h["prompts"], "kinds": h.get("kinds"), "max_new_tokens": h["max_new_tokens"], "ks": h["ks"],
            "repeats": h["repeats"], "command": "benchmarks/advisor_check.py " + " ".join(argv),
            "summary": res["chain_summary"], "rows": rows}


def _run(sweep: Sweep, say) -> dict[str, Any]:
    say(f"sweep: {len(sweep.prompts)} prompt runs x {len(sweep.runs)} configurations")
    for event in sweep.events():
        if event.kind == "run" and event.prompt_done:
            say(f"  {event.done}/{event.total} runs ({time.strftime('%H:%M:%S')})")
    return sweep.report()


# -- the check ------------------------------------------------------------------------------------


def check(args, say) -> dict[str, Any]:
    if args.threads:
        torch.set_num_threads(args.threads)
    chosen = args.set or (DEFAULT_SET if Path(args.prompts) == ADVISOR_PROMPTS else None)
    rows = load_prompts(args.prompts, sets=[chosen] if chosen else None)
    source = _shown(args.prompts) + (f" --set {chosen}" if chosen else "")  # what the records name
    kinds = None
    if args.heldout:  # the older checks: the last M prompts of the file
        if args.heldout < 1 or args.heldout >= len(rows):
            raise SystemExit(f"--heldout {args.heldout}: need 1..{len(rows) - 1} of the {len(rows)} prompts")
        calib, held = rows[: len(rows) - args.heldout], rows[len(rows) - args.heldout:]
    else:
        held, calib, kinds = select_by_kind(rows, args.per_kind)
        if len(kinds) < 3 or any(len(v) < args.per_kind for v in kinds.values()):
            raise SystemExit(f"--per-kind {args.per_kind}: {_shown(args.prompts)} gives {kinds}; the check wants "
                             "prompts of at least three kinds, --per-kind of each")
    if args.limit:
        held = held[: args.limit]
    specs = [s.format(target=args.target) for s in (args.proposer or DEFAULT_PROPOSERS)]
    for s in specs:
        check_spec(s)
    target = load_model(args.target, device=args.device, dtype=args.dtype)
    load = lambda name, **kw: load_model(name, **kw)  # noqa: E731
    sampling = Sampling(temperature=0.0)
    ks = tuple(range(1, args.k_max + 1)) if args.k_max else args.ks
    header = {"started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "cpu": cpu_info(), "target": str(target.name),
              "dtype": str(target.dtype).removeprefix("torch."), "device": str(target.device), "proposers": specs,
              "prompts": source, "calibration_prompts": [r.id for r in calib],
              "heldout_prompts": [r.id for r in held], "categories": sorted({r.category for r in held}),
              "kinds": kinds, "ks": list(ks), "k_max": max(ks), "max_new_tokens": args.max_new_tokens, "repeats": args.repeats,
              "calibrate_tokens": args.calibrate_tokens, "chat": args.chat, "greedy": True}
    if args.calibrate_on == "heldout":
        header["calibration_prompts"] = []  # the advisor reads only the prompts it is asked about

    # 0. every model the advisor and the sweep use, loaded once before any clock starts, and its
    # static step built for every width either will run (once per process, like the loading: the
    # app's Benchmark tab runs the advisor and its sweeps in one process; without this, whichever
    # ran first would pay every graph build, about a second per kernel change on the Xeon)
    t0 = time.perf_counter()
    for spec in specs:
        from_spec(spec, target, load=load)  # a draft (and its int8 copy) lands in the model cache
    header["models_load_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    static_decode.warm(target.model, range(1, MAX_N + 1))
    for cand in plan(specs, target, load=load):
        if cand.draft is not None:
            static_decode.warm(cand.draft.model, range(1, 5))  # one-token steps, catch-up feeds, tree levels
    header["static_steps_s"] = time.perf_counter() - t0

    # 1. the advisor, timed
    say("advisor: cost model, acceptance, prediction")
    on_held = args.calibrate_on == "heldout"
    t0 = time.perf_counter()
    advice = advise(target, specs, held if on_held else calib, cache_dir=args.cache_dir, load=load, ks=ks,
                    min_drafted=args.calibrate_tokens, max_new_tokens=args.max_new_tokens, sampling=sampling, chat=args.chat,
                    refresh=not args.cached_costs, say=say, run_prompts=None if on_held else held,
                    schedule=args.schedule)
    advisor_s = time.perf_counter() - t0
    header["cost_model"] = "read from the cache (not in the advisor's time)" if advice.cost_cached else "measured in this run"
    header["calibrate_on"] = args.calibrate_on
    header["calibration_method"] = advice.method
    header["replay"] = advice.replay
    pick = pick_of(advice)
    best_by: dict[str, A.Forecast] = {}
    for f in advice.forecasts:  # ranked: the first of each proposer is its predicted best
        best_by.setdefault(f.proposer, f)
    if advice.shapes:  # where shape=auto reads them, as `specviz advise` saves them
        save_shapes(advised_shapes_path(), advice)

    # 2. the full sweep on the held-out prompts, timed
    proposers: dict[str, Any] = {}
    auto_names: dict[str, str] = {}
    for spec in specs:
        p = from_spec(spec, target, load=load)
        proposers[p.name] = p
        if _is_tree(spec) and advice.shapes.get(shape_base(spec), "0") != "0":
            auto = from_spec(f"{shape_base(spec)},shape=auto", target, load=load)
            proposers[auto.name] = auto
            auto_names[spec] = auto.name
    schedules = ("constant",) if advice.schedule == "constant" else ("constant", advice.schedule)
    config = BenchConfig(ks=tuple(ks), max_new_tokens=args.max_new_tokens, sampling=sampling, chat=args.chat,
                         repeats=args.repeats, schedules=schedules)
    sweep = Sweep(target, proposers, held, config, prompt_source=f"{source} (held out)")
    if advice.schedule != "constant":  # a chain that stops on q runs under the schedule only, as advised
        scheduled = {r.proposer for r in sweep.runs if r.proposer.endswith(f" [{advice.schedule}]")}
        sweep.runs = [r for r in sweep.runs if f"{r.proposer} [{advice.schedule}]" not in scheduled]
    report = _run(sweep, say)
    sweep_s = sweep.wall_s
    measured = _rows(report)
    mean_prompt = _mean_prompt(sweep)

    # 3. predicted vs measured at each proposer's predicted best k; the pick against the sweep's best
    per_proposer = []
    for spec in specs:
        f = best_by.get(spec)
        if f is None:
            per_proposer.append({"proposer": spec, "predicted": None, "note": "the advisor made no forecast"})
            continue
        c = compare_run(advice, f, measured.get((_run_name(f), f.k)) or {}, mean_prompt)
        c["within_10pct"] = c["error"] is not None and abs(c["error"]) <= SPEED_TOLERANCE
        c["error_loop"] = ((c["measured_speedup"] - f.speedup) / f.speedup
                           if c["measured_speedup"] is not None and f.speedup else None)
        per_proposer.append(c)
    chains = chain_rows(advice, measured, mean_prompt)
    configs = [r for r in measured.values() if r["speedup"] is not None]
    best = max(configs, key=lambda r: r["speedup"])
    # the advisor's first choice: auto's pick (constant k), or under a schedule the first of the ranking
    top = next((f for f in advice.forecasts if f.tau > 1.0 and f.pays), None) if advice.schedule != "constant" else None
    if top is not None:
        pick = replace(pick, spec=_run_name(top), k=top.k, speedup=top.speedup, tau=top.tau)
    pick_key = (pick.spec, pick.k) if pick.pays else (TARGET_ONLY, 0)
    pick_row = measured.get(pick_key)
    pick_meas = pick_row["speedup"] if pick_row else None
    gap = (best["speedup"] - pick_meas) / best["speedup"] if pick_meas is not None else None
    forecast_keys = {(_run_name(f), f.k) for f in advice.forecasts} | {(TARGET_ONLY, 0)}
    in_space = max((r for r in configs if (r["proposer"], r["k"]) in forecast_keys), key=lambda r: r["speedup"])
    verdict = {
        "pick": {"spec": pick.spec, "k": pick.k, "predicted_speedup": pick.speedup, "measured_speedup": pick_meas},
        "sweep_best": {"spec": best["proposer"], "k": best["k"], "measured_speedup": best["speedup"]},
        "sweep_best_predicted": {"spec": in_space["proposer"], "k": in_space["k"], "measured_speedup": in_space["speedup"]},
        "unpredicted": [f"{r['proposer']} k={r['k']}" for r in configs if (r["proposer"], r["k"]) not in forecast_keys],
        "gap": gap, "within_5pct": gap is not None and gap <= PICK_TOLERANCE,
        "advisor_s": advisor_s, "sweep_s": sweep_s, "time_ratio": advisor_s / sweep_s if sweep_s else None,
    }
    verdict["time_ratio_ok"] = verdict["time_ratio"] is not None and verdict["time_ratio"] <= TIME_GOAL

    # 4. shape=auto against fixed shapes of the same node budget
    trees = []
    for spec in specs:
        if not _is_tree(spec):
            continue
        base = shape_base(spec)
        auto = advice.shapes.get(base)
        if not auto or auto == "0":
            trees.append({"proposer": spec, "auto": auto, "note": "the advisor's best is the empty tree (no tree "
                          "pays here), so there is no node budget to compare at"})
            continue
        fixed = fixed_shapes(auto, runner_up(advice, spec, max(ks)))
        shapes = {"shape=auto": auto, **fixed}
        tree_props, wanted = {}, {}
        for label, shape in shapes.items():
            p = from_spec(f"{base},shape=auto" if label == "shape=auto" else f"{base},shape={shape}", target, load=load)
            tree_props[p.name] = p
            wanted[(p.name, T.decode(shape).depth)] = (label, shape)
        cfg = BenchConfig(ks=tuple(sorted({k for _, k in wanted})), max_new_tokens=args.max_new_tokens,
                          sampling=sampling, chat=args.chat, repeats=args.repeats)
        tsweep = Sweep(target, tree_props, held, cfg, prompt_source=f"{source} (held out), tree shapes")
        tsweep.runs = [r for r in tsweep.runs if r.proposer == TARGET_ONLY or (r.proposer, r.k) in wanted]
        trep = _rows(_run(tsweep, say))
        rows_out = []
        for (name, k), (label, shape) in wanted.items():
            r = trep.get((name, k)) or {}
            f = predicted_tree(advice, spec, shape)
            rows_out.append({"label": label, "spec": name, "shape": shape, "k": k, "nodes": T.decode(shape).nodes,
                             "predicted_speedup_loop": f.speedup, "predicted_tau": f.tau,
                             "measured_speedup": r.get("speedup"), "measured_tau": r.get("mean_acceptance_length"),
                             "same_as_target": r.get("same_as_target")})
        auto_row = rows_out[0]
        fixed_rows = [r for r in rows_out[1:] if r["measured_speedup"] is not None]
        best_fixed = max(fixed_rows, key=lambda r: r["measured_speedup"]) if fixed_rows else None
        trees.append({"proposer": spec, "auto": auto, "nodes": T.decode(auto).nodes, "rows": rows_out,
                      "best_fixed": best_fixed and best_fixed["label"],
                      "auto_at_least_as_fast": (best_fixed is not None and auto_row["measured_speedup"] is not None
                                                and auto_row["measured_speedup"] >= best_fixed["measured_speedup"]),
                      "sweep_s": tsweep.wall_s})

    return {"header": header, "advisor": {"seconds": advisor_s, "cost_cached": advice.cost_cached,
                                          "machine": advice.cost.machine, "notes": advice.notes,
                                          "ranking": [f.to_dict() for f in advice.forecasts],
                                          "shapes": advice.shapes, "verdicts": advice.verdicts},
            "chains": chains, "chain_summary": error_summary(chains),
            "per_proposer": per_proposer, "pick": verdict, "trees": trees,
            "sweep": {"seconds": sweep_s, "rows": report["rows"], "meta": report["meta"]}}


# -- output ---------------------------------------------------------------------------------------


def _x(v) -> str:
    return f"{v:.2f}x" if v is not None else "-"


def _pct(v) -> str:
    return f"{100 * v:+.1f}%" if v is not None else "-"


def _yes(v) -> str:
    return "yes" if v else "no"


def markdown(res: dict[str, Any]) -> str:
    h, cpu = res["header"], res["header"]["cpu"]
    load = ", ".join(f"{x:.2f}" for x in cpu["load_average"]) if cpu["load_average"] else "-"
    out = [f"# Advisor check: {h['target']} ({h['dtype']}, {h['device']}), {h['started']}", "",
           f"- CPU: {cpu['model_name']} (family {cpu['family']}, model {cpu['model']}), {cpu['cpus']} CPUs, "
           f"ISA: {', '.join(cpu['isa']) or 'none of ' + '/'.join(ISA)}; load average at the start {load}",
           f"- torch {cpu['torch']}, {cpu['torch_threads']} threads; greedy, {h['max_new_tokens']} new tokens, "
           f"k = {', '.join(map(str, h.get('ks') or range(1, h['k_max'] + 1)))}, {h['repeats']} pass(es); "
           f"cost model {h['cost_model']}",
           f"- calibration prompts: {', '.join(h['calibration_prompts']) or 'none'}; held out (measured): "
           f"{', '.join(h['heldout_prompts'])} ({', '.join(h['categories'])}); the advisor calibrated on the "
           f"{h.get('calibrate_on', 'calibration')} prompts ({h.get('calibration_method', 'runs')})"]
    for d in (h.get("replay") or {}).get("decodes", []):
        out.append(f"- greedy decode for the replay: {d['prompts']} prompts, {d['new_tokens']} tokens, with "
                   f"`{d['decoded_with']}` k={d['k']} in {d['seconds']:.1f} s; its replay gave back {d['replay_reproduced']} "
                   f"of {d['prompts']} decodes step for step")
    if "models_load_s" in h:
        out.append(f"- models loaded before the clocks started: {h['models_load_s']:.1f} s")
    if "static_steps_s" in h:
        out.append(f"- their static decode steps built for every width before the clocks started: {h['static_steps_s']:.1f} s")
    out.append("")
    for n in res["advisor"]["notes"]:
        out.append(f"- Note: {n}")
    if h.get("kinds"):
        out += ["", "- kinds: " + "; ".join(f"{k}: {', '.join(v)}" for k, v in h["kinds"].items())]
    out += ["", "## Every chain configuration: the whole-run prediction against the measured median", "",
            "| configuration | k | tau pred | tau meas | predicted (run) | measured median | 90% interval | measured total "
            "| error |", "|---|---|---|---|---|---|---|---|---|"]
    for c in res.get("chains", []):
        tau = f"{c['measured_tau']:.2f}" if c["measured_tau"] is not None else "-"
        lo, hi = c["measured_interval"]
        band = f"{lo:.2f}-{hi:.2f}x" if lo is not None and hi is not None else "-"
        out.append(f"| `{c['name']}` | {c['k']} | {c['predicted_tau']:.2f} | {tau} | {_x(c['predicted_speedup'])} | "
                   f"{_x(c['measured_median'])} | {band} | {_x(c['measured_speedup'])} | {_pct(c['error_vs_median'])} |")
    sm = res.get("chain_summary") or {}
    if sm.get("configurations"):
        w = sm["worst"]
        out += ["", f"- {sm['configurations']} configurations: mean absolute error {100 * sm['mean_abs_error']:.1f}% "
                f"(signed {_pct(sm['mean_signed_error'])}), worst {_pct(w['error'])} (`{w['configuration']}` k={w['k']}); "
                f"{sm['too_high']} too high; {sm['within_10pct']} within 10%. Goal (within 5% on average, 10% each): "
                f"{_yes(sm['within_goal'])}",
                "- error = (predicted run - measured median) / measured median; the median is over prompts (and "
                "passes), its interval a bootstrap over them, as `specviz bench` reports them."]
    out += ["", "## Predicted against measured, at each proposer's predicted best k", "",
            "| proposer | predicted best | tau pred | tau meas | predicted (loop) | interval (loop) | predicted (run) "
            "| measured | error | within 10% |", "|---|---|---|---|---|---|---|---|---|---|"]
    for c in res["per_proposer"]:
        if c.get("predicted_speedup") is None and "spec" not in c:
            out.append(f"| `{c['proposer']}` | - | - | - | - | - | - | - | - | {c['note']} |")
            continue
        tau = f"{c['measured_tau']:.2f}" if c["measured_tau"] is not None else "-"
        lo, hi = c["interval"]
        sched = f" [{c['schedule']}]" if c.get("schedule") else ""
        out.append(f"| `{c['proposer']}` | `{c['spec']}{sched}` k={c['k']} | {c['predicted_tau']:.2f} | {tau} | "
                   f"{_x(c['predicted_speedup_loop'])} | {lo:.2f}-{hi:.2f}x | {_x(c['predicted_speedup'])} | "
                   f"{_x(c['measured_speedup'])} | {_pct(c['error'])} | {_yes(c['within_10pct'])} |")
    out += ["", "'run': the whole-run prediction (both prefills) that the measured tokens/s ratio is compared with; "
            "error = (measured - predicted run) / predicted run.", ""]
    p = res["pick"]
    out += ["## The advisor's pick against the full sweep", "",
            "| | configuration | measured speedup |", "|---|---|---|",
            f"| advisor's pick | `{p['pick']['spec']}` k={p['pick']['k']} (predicted {_x(p['pick']['predicted_speedup'])}) "
            f"| {_x(p['pick']['measured_speedup'])} |",
            f"| sweep's best | `{p['sweep_best']['spec']}` k={p['sweep_best']['k']} | {_x(p['sweep_best']['measured_speedup'])} |",
            f"| best of what the advisor predicts | `{p['sweep_best_predicted']['spec']}` k={p['sweep_best_predicted']['k']} "
            f"| {_x(p['sweep_best_predicted']['measured_speedup'])} |",
            "", f"- gap: {_pct(p['gap'])} of the sweep's best; within 5%: {_yes(p['within_5pct'])}",
            f"- swept but not predicted by the advisor (a tree's own mode, k it did not rank): "
            f"{', '.join(f'`{u}`' for u in p['unpredicted']) or 'none'}",
            f"- time: advisor {p['advisor_s']:.1f} s, sweep {p['sweep_s']:.1f} s; ratio "
            f"{p['time_ratio']:.3f} (goal <= {TIME_GOAL}): {_yes(p['time_ratio_ok'])}", ""]
    for t in res["trees"]:
        out += [f"## `{t['proposer']}`: shape=auto against fixed shapes of the same node budget", ""]
        if "rows" not in t:
            out += [f"{t['note']}.", ""]
            continue
        out += [f"shape=auto is `{t['auto']}` ({t['nodes']} nodes).", "",
                "| shape | spec | k | tau pred | tau meas | predicted (loop) | measured speedup | same output as target-only |",
                "|---|---|---|---|---|---|---|---|"]
        for r in t["rows"]:
            tau = f"{r['measured_tau']:.2f}" if r["measured_tau"] is not None else "-"
            same = "-" if r["same_as_target"] is None else f"{100 * r['same_as_target']:.0f}%"
            out.append(f"| {r['label']} | `{r['spec']}` | {r['k']} | {r['predicted_tau']:.2f} | {tau} | "
                       f"{_x(r['predicted_speedup_loop'])} | {_x(r['measured_speedup'])} | {same} |")
        out += ["", f"- best fixed: {t['best_fixed'] or '-'}; shape=auto at least as fast: "
                f"{_yes(t['auto_at_least_as_fast'])} (this sweep {t['sweep_s']:.1f} s)", ""]
    rows = [r for r in res["sweep"]["rows"] if r.get("impl") == "specviz"]
    out += ["## The full sweep (held-out prompts)", "", "| configuration | tau | speedup | same output |", "|---|---|---|---|"]
    for r in rows:
        tau = f"{r['mean_acceptance_length']:.2f}" if r.get("mean_acceptance_length") else "-"
        same = "-" if r.get("same_as_target") is None else f"{100 * r['same_as_target']:.0f}%"
        out.append(f"| `{r['proposer']}`{' k=' + str(r['k']) if r['k'] else ''} | {tau} | {_x(r.get('speedup'))} | {same} |")
    m = res["sweep"]["meta"]
    exact = all(r.get("same_as_target") in (None, 1.0) for r in rows)
    out += ["", f"- {m['runs_done']} runs: sweep {m['wall_s']:.1f} s (timed {m['timed_s']:.1f} s, warm-up "
            f"{m['warmup_s']:.1f} s); every output equal to target-only's: {_yes(exact)}"]
    return "\n".join(out)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog="docs/advisor.md, 'How to check the advisor'")
    ap.add_argument("--target", default="gemma-3-270m", help="the target model (default gemma-3-270m)")
    ap.add_argument("--proposer", action="append", metavar="SPEC",
                    help="repeatable; {target} is replaced by the target's name (default: ngram, "
                         "draft:{target}@int8, ngram-tree:3)")
    ap.add_argument("--prompts", default=str(PROMPTS), help="JSONL prompts (default advisor.jsonl)")
    ap.add_argument("--set", default=None, help=f"only this named set of the file (default: {DEFAULT_SET} of the "
                    "default file, every line of another)")
    ap.add_argument("--per-kind", type=int, default=3, help="measure the first N prompts of each kind (heldout.jsonl: "
                    "code, writing, structured; another file: each category); the rest can calibrate (default 3)")
    ap.add_argument("--heldout", type=int, default=0, help="instead of --per-kind: the last N prompts (categories taken in "
                    "turn) are held out and measured, as the older checks on advisor.jsonl did")
    ap.add_argument("--limit", type=int, default=0, help="measure on only the first N held-out prompts (default: all)")
    ap.add_argument("--k", dest="ks", type=_ks, default=DEFAULT_KS, metavar="LIST",
                    help="the k values predicted and swept (default 1,2,4,8)")
    ap.add_argument("--k-max", type=int, default=0, help="k = 1..K instead of --k")
    ap.add_argument("--repeats", type=int, default=1, help="passes over the held-out prompts in the sweeps (default 1)")
    ap.add_argument("--max-new-tokens", type=int, default=48, help="new tokens per run (default 48)")
    ap.add_argument("--calibrate-tokens", type=int, default=300, help="the advisor's calibration budget (default 300)")
    ap.add_argument("--calibrate-on", choices=("heldout", "calibration"), default="heldout",
                    help="heldout (default): the advisor is given the held-out prompts, as a user gives the prompts "
                         "they will run; calibration: draft models calibrate on the other prompts, prompt lookup on "
                         "the held-out ones (specviz advise --heldout)")
    ap.add_argument("--schedule", default="constant", help="constant (default) or confidence:T: the draft chains "
                    "advised and swept with a confidence stop")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's own)")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--chat", action="store_true", help="wrap prompts in the chat template (default: plain text)")
    ap.add_argument("--cache-dir", default=None, help="where the cost model is cached (default: the models cache dir)")
    ap.add_argument("--cached-costs", action="store_true",
                    help="read the cost model from the cache when there (then the advisor's time leaves it out)")
    ap.add_argument("--json", metavar="OUT.json", help="also write the record here")
    ap.add_argument("--record", default=str(RECORD), metavar="FILE",
                    help="where the error summary is published (default benchmarks/results/advisor-error.json, read by "
                         "specviz advise and the app's Advisor panel); '' writes none")
    ap.add_argument("--quiet", action="store_true", help="no progress on stderr")
    return ap


def _ks(text: str) -> tuple[int, ...]:
    try:
        ks = tuple(sorted({int(x) for x in text.split(",") if x.strip()}))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--k {text!r}: a comma-separated list of integers, e.g. 1,2,4,8") from None
    if not ks or ks[0] < 1 or ks[-1] > MAX_K:
        raise argparse.ArgumentTypeError(f"--k {text!r}: each k from 1 to {MAX_K}")
    return ks


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser().parse_args(argv)
    if (args.k_max and not 1 <= args.k_max <= MAX_K) or args.repeats < 1 or args.max_new_tokens < 1 or args.limit < 0 \
            or args.per_kind < 1:
        raise SystemExit(f"--k-max must be 1..{MAX_K}; --repeats, --max-new-tokens, --per-kind >= 1; --limit >= 0")
    args.cache_dir = args.cache_dir or str(cache_dir())
    say = (lambda m: None) if args.quiet else (lambda m: print(m, file=sys.stderr, flush=True))
    res = check(args, say)
    text = json.dumps(res, indent=1, default=str)
    print(markdown(res))
    print("\n```json\n" + text + "\n```")
    if args.json:
        Path(args.json).write_text(text, encoding="utf-8")
    if args.record:
        Path(args.record).write_text(json.dumps(published_record(res, argv), indent=1, default=str), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
