"""The Benchmark tab: sweep proposers x k over a prompt set, with plots beside the theory.

Layout and wiring only; the sweep is :mod:`specviz.bench`, the figures :mod:`specviz.viz.bench`
and the explanations :mod:`specviz.analysis.metrics`. ``build_bench_tab()`` creates its components inside
the current Blocks context (the caller opens the ``gr.Tab``). Each browser session keeps its own
:class:`BenchState` in a ``gr.State``; Run is a generator handler that streams progress and rows;
Stop sets the session's stop flag, and the sweep ends after the run in progress.

Defaults come from ``SPECVIZ_DEFAULT_TARGET`` / ``SPECVIZ_DEFAULT_DRAFT`` (as in the playground).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import gradio as gr

from .. import bench as B
from .. import prompts as P
from .. import settings
from ..analysis.prediction import ASSUMPTIONS
from ..app import runs
from ..app.limits import Limits
from ..bench.shapes import expand_tree_shapes, parse_tree_nodes
from ..bench.verify_cost import DEFAULT_NS, measure_verify_cost, verify_floor_curve
from ..core.records import Sampling
from ..viz import bench as V
from ..viz.bench import progress_html
from ..viz.bench_readout import MAX_REPEATS
from . import zerogpu
from .advisor_tab import build_advisor_panel
from .bench_remote import build_remote_source, wire_remote
from .bench_view import (
    BUNDLED,
    CUSTOM,
    MAX_PROMPTS,
    PLOT_ORDER,
    BenchState,
    BenchView,
    plot_name,
    prompt_rows,
    render,
    sweep_frames,
    table_value,
    target_and_specs,
    with_verify_cost,
)
from .handlers import by_name, friendly_error
from .threads import STOPPED, loading

log = logging.getLogger("specviz.ui.bench")

K_CHOICES = [1, 2, 3, 4, 5, 6, 8, 10, 12, 16]
# the lab's k schedules (not the heuristic's, whose k climbs past this server's SPECVIZ_MAX_K)
SCHEDULE_CHOICES = ["constant", "confidence:0.3", "confidence:0.5", "confidence:0.7"]


@dataclass
class BenchDefaults:
    target: str
    proposers: list[str]
    ks: list[int] = field(default_factory=lambda: [1, 2, 4])
    n_prompts: int = 4
    max_new_tokens: int = 32
    temperature: float = 0.0
    compare_hf: bool = False
    tree_nodes: str = ""
    schedules: list[str] = field(default_factory=lambda: ["constant"])
    repeats: int = 1
    prompt_source: str = BUNDLED
    custom_prompts: str = ""

    @classmethod
    def from_env(cls) -> "BenchDefaults":
        target = settings.value("SPECVIZ_DEFAULT_TARGET").strip() or "gemma-3-270m"
        draft = settings.value("SPECVIZ_DEFAULT_DRAFT").strip() or runs.default_draft(target)
        return cls(target=target, proposers=["ngram", f"draft:{draft}"])


# -- input parsing ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    target: str
    proposers: tuple[str, ...]
    ks: tuple[int, ...]
    prompts: tuple[P.PromptRow, ...]
    source: str
    max_new_tokens: int
    sampling: Sampling
    compare_hf: bool
    tree_nodes: tuple[int, ...] = ()
    schedules: tuple[str, ...] = ("constant",)
    repeats: int = 1  # passes over the prompts


def parse_request(target, proposers, ks, source, categories, custom, n_prompts, max_new_tokens, temperature, compare_hf,
                  tree_nodes: str = "", schedules: Sequence[str] | None = ("constant",), repeats: Any = 1) -> Request:
    """The tab's raw control values -> a Request; ValueError with a message for the user.
    ``tree_nodes`` ("4,8,16"): every tree proposer is swept at each node budget (depth = k);
    ``schedules``: the k schedules swept beside each k (a proposer a schedule changes nothing for
    runs it once, said in the report); ``repeats``: passes over the prompts, each in a new order
    (each adds a ratio per prompt to every configuration's interval)."""
    target, specs = target_and_specs(
        target, proposers, "choose at least one proposer (e.g. ngram or draft:MODEL); target-only is always measured")
    nodes = parse_tree_nodes(tree_nodes or "")
    specs = expand_tree_shapes(specs, nodes)
    if not ks:
        raise ValueError("choose at least one k (tokens drafted per step)")
    if not schedules:
        raise ValueError("choose at least one k schedule (constant: the same k every step)")
    for name in schedules:
        if name not in SCHEDULE_CHOICES:
            raise ValueError(f"unknown k schedule {name!r} for the lab; choose from {', '.join(SCHEDULE_CHOICES)}")
    kt = B.parse_ks([int(k) for k in ks])
    try:
        n = int(n_prompts)
        max_new = int(max_new_tokens)
        temp = float(temperature)
        passes = int(repeats)
    except (TypeError, ValueError):
        raise ValueError("number of prompts, max new tokens, temperature and passes must be numbers") from None
    if not 1 <= n <= MAX_PROMPTS:
        raise ValueError(f"number of prompts must be between 1 and {MAX_PROMPTS}")
    if not 1 <= passes <= MAX_REPEATS:
        raise ValueError(f"passes over the prompts must be between 1 and {MAX_REPEATS}")
    rows, src = prompt_rows(source, categories, custom, n)
    from ..app.limits import check_bench_request  # hosting limits (SPECVIZ_MAX_*, SPECVIZ_ALLOW_LOCAL_PATHS)

    check_bench_request(target, specs, kt, max_new, [r.prompt for r in rows])
    return Request(target, tuple(specs), kt, tuple(rows), src, max_new, Sampling(temperature=temp), bool(compare_hf), nodes,
                   tuple(dict.fromkeys(schedules)), passes)


# -- rendering ----------------------------------------------------------------------------------


def _friendly(e: BaseException) -> str:
    return friendly_error(e, "the benchmark tab", expected=(ValueError, OSError), first_line=True)


def _load(req: Request, report: Callable[[str], None]):
    from ..app.limits import check_prompts_fit  # hosting limits (names, prompt tokens)
    from ..app.limits import load_checked as load_model

    target = load_model(req.target, progress=report)
    check_prompts_fit(target.tokenizer, [r.prompt for r in req.prompts], chat=True)  # the sweep's chat default
    proposers = runs.build_proposers(req.proposers, target, load=lambda name, **kw: load_model(name, progress=report, **kw))
    return target, proposers


# -- handlers -----------------------------------------------------------------------------------


def _config(req: Request) -> B.BenchConfig:
    return B.BenchConfig(ks=req.ks, max_new_tokens=req.max_new_tokens, sampling=req.sampling, compare_hf=req.compare_hf,
                         schedules=req.schedules, repeats=req.repeats)


def sweep_report(req: Request) -> dict[str, Any]:
    """The whole sweep in one call, pure (a request in, the report out): what ZeroGPU runs in its
    GPU worker, where nothing streams back until it ends."""
    target, proposers = _load(req, lambda msg: log.info("%s", msg))
    return B.run_sweep(target, proposers, list(req.prompts), _config(req), prompt_source=req.source)


sweep_report.gpu_seconds = zerogpu.SWEEP_SECONDS  # type: ignore[attr-defined]


def _done_message(report: dict[str, Any]) -> str:
    m = report["meta"]
    if m["stopped"]:
        text, kind = f"Stopped after {m['runs_done']} of {m['runs_planned']} runs; the results so far are below.", "info"
    else:
        kernels = V.kernel_summary(m)  # measured on this CPU when the target loaded (timings: the HTML report)
        text, kind = (
            f"Done in {m['wall_s']:.1f} s: decoding {m['timed_s']:.1f} s, warm-up {m['warmup_s']:.1f} s, "
            f"overhead {100 * m['overhead_frac']:.1f}%." + (f" Kernels measured on this CPU: {kernels}." if kernels else "")
            + _stalls_said(m), "ok")
    return progress_html(m["runs_done"], m["runs_planned"], text, kind)


def _stalls_said(meta: dict[str, Any]) -> str:
    """ " 2 runs a stalled machine slowed were re-run (named under the readout)." or "" """
    n, out = len(meta.get("reruns") or []), meta.get("flagged_runs") or 0
    if not n:
        return ""
    left = f", {out} still slow and left out" if out else ""
    return f" {n} run{'s' if n > 1 else ''} a stalled machine slowed {'were' if n > 1 else 'was'} re-run{left} (named under the readout)."


def on_run(state: BenchState, *raw) -> Iterator[dict[str, Any]]:
    """Load the models, run the sweep, stream progress, rows and plots; Stop ends it early."""
    state.stop.clear()
    try:
        try:
            req = parse_request(*raw)
        except ValueError as e:
            yield render(state, None, progress_html(0, 0, str(e), "error"))
            return
        if zerogpu.active():  # the GPU is lent per call, in a forked worker: one call, no streaming
            yield render(state, None, progress_html(0, 0, f"Running the sweep on a ZeroGPU GPU ({req.target}); "
                                                          "the results appear when it ends. Stop cannot reach it."))
            report = zerogpu.on_gpu(sweep_report, req)
            state.report = report
            yield render(state, report, _done_message(report), files=True)
            return
        yield render(state, None, progress_html(0, 0, f"Loading {req.target}…"))
        loaded = yield from loading(lambda report: _load(req, report), lambda msg: render(state, None, progress_html(0, 0, msg)),
                                    should_stop=state.stop.is_set, name="specviz-bench-load")
        if loaded is STOPPED or state.stop.is_set():
            yield render(state, None, progress_html(0, 0, "Stopped before the sweep started.", "info"))
            return
        target, proposers = loaded
        sweep = B.Sweep(target, proposers, list(req.prompts), _config(req), prompt_source=req.source)
        yield from sweep_frames(state, sweep.events(should_stop=state.stop.is_set), sweep.live_report,
                                "Warming up every configuration (untimed)…")
        report = sweep.report()
        state.report = report
        yield render(state, report, _done_message(report), files=True)
    except Exception as e:  # noqa: BLE001 - shown as a message, never a traceback
        yield render(state, None, progress_html(0, 0, _friendly(e), "error"))


def verify_cost_points(target_name: str) -> tuple[list[tuple[int, float]], list[tuple[int, float, float]] | None]:
    """Load the target and time one forward of n = 1..17 new tokens on a 256-token cached context
    (median of 5 after a warm-up): this machine's t(n), and the floor of v(n) for a float32 target
    on the CPU (else None); pure (runs in the ZeroGPU worker too)."""
    from ..app.limits import load_checked

    target = load_checked(target_name)
    return measure_verify_cost(target, DEFAULT_NS, context_len=256, reps=5), verify_floor_curve(target, DEFAULT_NS)


verify_cost_points.gpu_seconds = 120  # type: ignore[attr-defined]


def on_verify(state: BenchState, target: str) -> Iterator[dict[str, Any]]:
    """Measure t(n) for the chosen target -> its message, the verify and tree speedup plots and
    the readout, by name (verify_msg, plot:verify_cost, plot:tree_speedup, why)."""
    target = (target or "").strip()
    if not target:
        yield {"verify_msg": progress_html(0, 0, "choose a target model first", "error")}
        return
    try:
        from ..app.limits import check_model_name

        check_model_name(target)
        yield {"verify_msg": progress_html(0, 0, f"Timing {target}: one forward of n = 1..17 new tokens on a 256-token "
                                                 "context…")}
        points, floor = zerogpu.on_gpu(verify_cost_points, target)
        state.verify_cost, state.verify_floor, state.verify_target = points, floor, target
        report = state.report if state.report and (state.report.get("meta") or {}).get("target") == target else {"rows": []}
        report = with_verify_cost(state, {**report, "meta": {**(report.get("meta") or {}), "target": target}})
        t1 = dict(points)[1]
        v17 = dict(points)[max(dict(points))] / t1
        msg = progress_html(0, 0, f"t(1) = {t1:.1f} ms, v(17) = t(17)/t(1) = {v17:.2f} on this machine (provisional: "
                                  "timings move with the machine's load).", "ok")
        figs = V.build_figures(report)
        yield {"verify_msg": msg, plot_name("verify_cost"): figs["verify_cost"],
               plot_name("tree_speedup"): figs["tree_speedup"], "why": V.why_markdown(report)}
    except Exception as e:  # noqa: BLE001 - shown as a message
        yield {"verify_msg": progress_html(0, 0, _friendly(e), "error")}


def on_stop(state: BenchState) -> None:
    state.stop.set()


def on_source(source: str):
    return gr.update(visible=source == BUNDLED), gr.update(visible=source == CUSTOM)


# -- layout -------------------------------------------------------------------------------------


def _target_choices(defaults: BenchDefaults) -> list[str]:
    try:
        return runs.target_choices(defaults.target)  # hub targets when the hub answers
    except Exception:  # noqa: BLE001 - the box also takes any name
        return [defaults.target]


def _proposer_choices(defaults: BenchDefaults, targets: Sequence[str]) -> list[str]:
    return runs.bench_proposer_choices(defaults.proposers, targets)


def build_bench_tab(defaults: BenchDefaults | None = None) -> BenchView:
    """The Benchmark tab's components and wiring, inside the current Blocks context."""
    d = defaults or BenchDefaults.from_env()
    state = gr.State(BenchState, delete_callback=lambda s: s.close() if isinstance(s, BenchState) else None)
    targets = _target_choices(d)
    try:
        cats = P.categories()
    except (OSError, ValueError):
        cats = []
    gr.Markdown(
        "Measure whether speculative decoding pays off for a target, its proposers and your prompts. "
        "Every prompt runs target-only and every proposer × k back to back, after an untimed warm-up; "
        "the dashed lines are the theory (Leviathan et al. 2023) evaluated at the measured acceptance rate *a*, "
        "draft cost *c* and verify cost *v*."
    )
    with gr.Row():
        target = gr.Dropdown(targets, value=d.target, label="Target model", allow_custom_value=True, scale=2,
                             elem_id="sv-bench-target", info="a built-in, a local directory or a hub id")
        menu = _proposer_choices(d, targets)  # every target's; the target's own tokenizer rule filters it
        proposers = gr.Dropdown(runs.specs_for_target(d.target, menu), value=d.proposers, multiselect=True,
                                allow_custom_value=True,
                                label="Proposers", scale=3, elem_id="sv-bench-proposers",
                                info=runs.proposer_hint())
        ks = gr.CheckboxGroup(K_CHOICES, value=d.ks, label="k (tokens drafted per step)", scale=3, elem_id="sv-bench-ks")
    with gr.Row():
        source = gr.Radio([BUNDLED, CUSTOM], value=d.prompt_source, label="Prompts", scale=2, elem_id="sv-bench-source")
        categories = gr.CheckboxGroup(cats, value=cats, label="Categories", scale=4, visible=d.prompt_source == BUNDLED,
                                      elem_id="sv-bench-categories")
        custom = gr.Textbox(value=d.custom_prompts, lines=4, label="Your prompts, one per line", scale=4,
                            visible=d.prompt_source == CUSTOM, elem_id="sv-bench-custom")
    with gr.Row():
        n_prompts = gr.Slider(1, MAX_PROMPTS, value=d.n_prompts, step=1, label="Prompts to run", elem_id="sv-bench-n")
        repeats = gr.Slider(1, MAX_REPEATS, value=d.repeats, step=1, label="Passes over the prompts", elem_id="sv-bench-repeats",
                            info="each reruns every configuration: narrower intervals")
        most_new = Limits.from_env().max_new_tokens
        max_new = gr.Slider(1, most_new, value=min(d.max_new_tokens, most_new), step=1, label="Max new tokens", elem_id="sv-bench-max-new")
        temperature = gr.Slider(0, 2, value=d.temperature, step=0.05, label="Temperature (0 = greedy)", elem_id="sv-bench-temperature")
        compare_hf = gr.Checkbox(value=d.compare_hf, label="Also time transformers' generate()", elem_id="sv-bench-hf")
        tree_nodes = gr.Textbox(d.tree_nodes, label="Tree node budgets", placeholder="e.g. 4,8,16", max_lines=1,
                                elem_id="sv-bench-tree-nodes",
                                info="sweeps every ngram-tree / draft-tree proposer at each budget (depth = k)")
        schedules = gr.CheckboxGroup(SCHEDULE_CHOICES, value=d.schedules, label="k schedules", elem_id="sv-bench-schedules",
                                     info="each swept beside each k; confidence:T stops a draft model's chain after "
                                          "a draft whose top probability is under T")
    with gr.Row():
        run_btn = gr.Button("▶ Run", variant="primary", elem_id="sv-bench-run", scale=1)
        stop_btn = gr.Button("■ Stop", variant="stop", elem_id="sv-bench-stop", scale=1)
        verify_btn = gr.Button("⏱ Measure verify cost t(n)", elem_id="sv-bench-verify", scale=1)
    remote = build_remote_source()
    progress = gr.HTML(progress_html(0, 0, "Choose the settings and press Run."), elem_id="sv-bench-progress")
    verify_msg = gr.HTML("", elem_id="sv-bench-verify-msg")
    why = gr.Markdown("", elem_id="sv-bench-why")
    with gr.Accordion("What the predictions assume", open=False, elem_id="sv-bench-assumptions"):
        gr.Markdown(ASSUMPTIONS + " Trees: positions are depths, k' counts the nodes verified per step; the dashed "
                    "chain theory on the node plots is E(a, n) / (n c + v(n + 1)), one line per chain proposer from its own a and c.")
    with gr.Accordion("Advisor: will it pay here?", open=False, elem_id="sv-bench-advisor"):
        build_advisor_panel(d.target, d.proposers, targets, _proposer_choices(d, targets), cats, sweep_ks=ks, sweep_state=state)
    empty = V.build_figures(None)
    plots: dict[str, gr.Plot] = {}
    names = PLOT_ORDER
    for i in range(0, len(names), 2):
        with gr.Row():
            for name in names[i : i + 2]:
                plots[name] = gr.Plot(empty[name], show_label=False, elem_id=f"sv-bench-plot-{name}")
    table = gr.Dataframe(value=table_value([]), label="Every configuration", interactive=False, wrap=True,
                         elem_id="sv-bench-table")
    with gr.Row():
        csv_btn = gr.DownloadButton("⤓ CSV", value=None, interactive=False, elem_id="sv-bench-csv", size="md")
        json_btn = gr.DownloadButton("⤓ JSON", value=None, interactive=False, elem_id="sv-bench-json", size="md")
        html_btn = gr.DownloadButton("⤓ HTML report", value=None, interactive=False, elem_id="sv-bench-html", size="md")

    controls = [target, proposers, ks, source, categories, custom, n_prompts, max_new, temperature, compare_hf, tree_nodes,
                schedules, repeats]
    view = BenchView(state, controls, run_btn, stop_btn, progress, why, plots, table, csv_btn, json_btn, html_btn,
                     verify_btn, verify_msg)
    source.change(on_source, [source], [categories, custom], queue=False)
    # the menu offers the drafts that can serve the chosen target (what is already chosen stays)
    target.change(lambda t, chosen: gr.update(choices=list(dict.fromkeys([*runs.specs_for_target(t, menu), *(chosen or [])]))),
                  [target, proposers], [proposers], queue=False)
    named = view.named()
    run_btn.click(by_name(on_run, named), [state, *controls], view.outputs, concurrency_id="specviz-bench",
                  concurrency_limit=1, show_progress="hidden")
    stop_btn.click(on_stop, [state], None, queue=False)
    wire_remote(remote, view, [source, categories, custom, n_prompts, max_new])
    verify_btn.click(by_name(on_verify, named), [state, target], [verify_msg, plots["verify_cost"], plots["tree_speedup"], why],
                     concurrency_id="specviz-bench", concurrency_limit=1, show_progress="hidden")
    return view
