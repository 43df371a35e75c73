"""The Benchmark tab's Advisor panel: "will it pay here?" before a long sweep.

Layout and wiring only; the calibration, cost model and ranking are :mod:`specviz.bench.advise`
(what ``specviz advise`` runs), the tables :mod:`specviz.viz.advisor`. ``build_advisor_panel()``
creates the components inside the current Blocks context (the Benchmark tab opens an Accordion
for it). Calibrate and predict runs in a thread and streams its progress; Run the top N runs the
best predicted configurations for real and shows predicted against measured. Every error is one
line in the page.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator, Sequence

import gradio as gr

from ..app import runs
from ..app.limits import Limits
from ..bench.advice_out import error_words, next_step, published_error, runs_summary, save_advice, sweep_words
from ..bench.advise import CALIBRATION_K, Advice, advise, run_top
from ..bench.config import BenchConfig
from ..core.records import Sampling
from ..viz import advisor as VA
from ..viz.bench import progress_html
from . import zerogpu
from .bench_view import BUNDLED, CUSTOM, MAX_PROMPTS, prompt_rows, target_and_specs
from .handlers import by_name, friendly_error
from .threads import loading

log = logging.getLogger("specviz.ui.advisor")

__all__ = ["AdvisorRequest", "AdvisorState", "AdvisorView", "build_advisor_panel", "on_calibrate", "on_run_top",
           "parse_request", "OUTPUTS"]

OUTPUTS = ("advisor_msg", "advisor_ranking", "advisor_verdicts", "advisor_costs", "advisor_runs", "advisor_run_btn",
           "advisor_budget")


@dataclass(frozen=True)
class AdvisorRequest:
    target: str
    proposers: tuple[str, ...]
    prompts: tuple[Any, ...]  # PromptRows
    source: str
    max_new_tokens: int
    calibrate_tokens: int
    sampling: Sampling
    ks: tuple[int, ...] = ()  # the k the user will run (the Benchmark sweep's k list): the pick is among them


class AdvisorState:
    """One browser session's last advice, and what it was calibrated with (run-top reuses them);
    a plain class, not a dataclass (gr.State would serialize a dataclass as its value)."""

    def __init__(self) -> None:
        self.advice: Advice | None = None
        self.request: AdvisorRequest | None = None
        self.target: Any = None  # the loaded target (LoadedModel)
        self.models: dict[str, Any] = {}  # name and options -> LoadedModel loaded for it
        self.sweep_said = ""  # the pick beside the Benchmark sweep's measurement (sweep_words), said again at the end


def parse_request(target, proposers, source, categories, custom, n_prompts, max_new_tokens,
                  calibrate_tokens=300, temperature=0.0, ks=None) -> AdvisorRequest:
    """The panel's raw control values -> an AdvisorRequest; ValueError with a message for the user.
    ``ks``: the Benchmark sweep's k list (the advice picks among them; none: any k)."""
    target, specs = target_and_specs(target, proposers,
                                     "choose at least one proposer to advise on (e.g. ngram or draft:MODEL)")
    try:
        n, max_new, calib, temp = int(n_prompts), int(max_new_tokens), int(calibrate_tokens), float(temperature)
        wanted = tuple(sorted({int(k) for k in ks or ()}))
    except (TypeError, ValueError):
        raise ValueError("prompts, max new tokens, calibration tokens, temperature and k must be numbers") from None
    if not 1 <= n <= MAX_PROMPTS:
        raise ValueError(f"number of prompts must be between 1 and {MAX_PROMPTS}")
    if calib < 1:
        raise ValueError("calibration tokens must be at least 1")
    rows, src = prompt_rows(source, categories, custom, n)
    from ..app.limits import check_bench_request  # hosting limits (SPECVIZ_MAX_*, SPECVIZ_ALLOW_LOCAL_PATHS)

    check_bench_request(target, specs, tuple(range(1, CALIBRATION_K + 1)), max_new, [r.prompt for r in rows])
    return AdvisorRequest(target, tuple(specs), tuple(rows), src, max_new, calib, Sampling(temperature=temp), wanted)


def _friendly(e: BaseException) -> str:
    return friendly_error(e, "the advisor panel", expected=(ValueError, OSError), first_line=True)


def _msg(text: str, kind: str = "info") -> dict[str, Any]:
    return {"advisor_msg": progress_html(0, 0, text, kind)}


def _loader(state: AdvisorState, report: Callable[[str], None]):
    from ..app.limits import load_checked

    def load(name, **kw):
        key = f"{name}|{sorted(kw.items())}"
        if key not in state.models:
            state.models[key] = load_checked(name, progress=report, **kw)
        return state.models[key]

    return load


def _calibrate(state: AdvisorState, req: AdvisorRequest, report: Callable[[str], None]) -> Advice:
    from ..app.limits import check_prompts_fit
    from ..models import cache_dir

    if zerogpu.active():  # the GPU is lent per call, in a forked worker: calibrate and rank there, in one call
        return zerogpu.on_gpu(advise_report, req)
    load = _loader(state, report)
    target = load(req.target)
    check_prompts_fit(target.tokenizer, [r.prompt for r in req.prompts], chat=True)
    how = ("greedy: one decode of the prompts, every proposer replayed on it" if req.sampling.greedy else
           f"about {req.calibrate_tokens} drafted tokens per proposer, k = {CALIBRATION_K}")
    report(f"Calibrating {', '.join(req.proposers)} on {len(req.prompts)} prompts ({how})…")
    advice = advise(target, list(req.proposers), list(req.prompts), cache_dir=cache_dir(), load=load,
                    min_drafted=req.calibrate_tokens, max_new_tokens=req.max_new_tokens, sampling=req.sampling,
                    chat=True, say=report)
    state.target = target
    return advice


def _run_top(state: AdvisorState, advice: Advice, n: int, req: AdvisorRequest, config: BenchConfig,
             report: Callable[[str], None]):
    if zerogpu.active():  # the target lives in the GPU worker: the runs go there, in one call
        return zerogpu.on_gpu(top_report, req, advice, n, config)
    return run_top(state.target, advice, n, list(req.prompts), config, load=_loader(state, report), say=report)


def advise_report(req: AdvisorRequest) -> Advice:
    """The calibration and ranking in one call, pure (a request in, the Advice out): what ZeroGPU
    runs in its GPU worker; without the replay closure the ranking used, which cannot cross back."""
    return replace(_calibrate(AdvisorState(), req, lambda msg: log.info("%s", msg)), tree_replay=None)


def top_report(req: AdvisorRequest, advice: Advice, n: int, config: BenchConfig):
    """``run_top`` with the target loaded here, pure: the ZeroGPU worker's half of Run the top N."""
    state, say = AdvisorState(), lambda msg: log.info("%s", msg)
    state.target = _loader(state, say)(req.target)
    return _run_top(state, advice, n, req, config, say)


def _saved(advice: Advice, ks: Sequence[int] = ()) -> str:
    """Save the pick among ``ks`` (the proposer menu's auto) and the tree shapes (shape=auto); -> a
    sentence saying so."""
    try:
        return "Saved " + "; ".join(save_advice(advice, ks)) + "."
    except OSError as e:  # a read-only cache directory: the advice still shows
        return f"Could not save the pick for auto ({e.strerror or e})."


def advice_outputs(advice: Advice, top: int = 20) -> dict[str, Any]:
    """The ranking, verdicts and cost table of ``advice``, by name."""
    return {"advisor_ranking": VA.ranking_html(advice.forecasts, advice.cost.base_step_s, top),
            "advisor_verdicts": VA.notes_html(advice.notes, advice.verdicts),
            "advisor_costs": VA.costs_html(advice.cost.curves(), advice.cost.machine),
            "advisor_budget": VA.tree_budget_figure(list(advice.budgets.values()))}


def on_calibrate(state: AdvisorState, *raw) -> Iterator[dict[str, Any]]:
    """Calibrate every proposer, measure (or read) the cost model, rank every configuration:
    streams "Calibrating ..." messages, then the ranking, verdicts and t(n), by name. A last input
    with a ``report`` (the Benchmark tab's state) sets the pick beside what its sweep measured."""
    sweep = raw[-1] if raw and hasattr(raw[-1], "report") else None
    raw = raw[:-1] if sweep is not None else raw
    try:
        try:
            req = parse_request(*raw)
        except ValueError as e:
            yield _msg(str(e), "error")
            return
        state.advice, state.request = None, None
        yield {**_msg(f"Loading {req.target}…"), "advisor_run_btn": gr.update(interactive=False), "advisor_runs": ""}
        advice = yield from loading(lambda report: _calibrate(state, req, report), lambda m: _msg(m),
                                    name="specviz-advisor")
        state.advice, state.request = advice, req
        summary = _saved(advice, req.ks) + " " + next_step(advice, req.ks)
        measured = sweep_words(advice, getattr(sweep, "report", None), req.ks)
        summary += f" {measured}" if measured else ""
        state.sweep_said = measured
        runnable = any(f.tau > 1.0 for f in advice.forecasts)
        yield {**_msg(f"Calibrated on {advice.prompts} prompts; cost model "
                      f"{'read from the cache' if advice.cost_cached else 'measured'}. {summary}", "ok"),
               **advice_outputs(advice), "advisor_run_btn": gr.update(interactive=runnable)}
    except Exception as e:  # noqa: BLE001 - shown as a message, never a traceback
        yield _msg(_friendly(e), "error")


def on_run_top(state: AdvisorState, n: Any, repeats: Any = 1) -> Iterator[dict[str, Any]]:
    """Run the ``n`` best predicted configurations for real beside target-only on the calibration
    prompts; -> predicted vs measured with the error, by name."""
    try:
        if state.advice is None or state.request is None:
            yield _msg("press Calibrate and predict first", "error")
            return
        try:
            n, repeats = int(n), int(repeats)
        except (TypeError, ValueError):
            yield _msg("the number of configurations to run must be a number", "error")
            return
        if n < 1:
            yield _msg("run at least one configuration", "error")
            return
        req, advice = state.request, state.advice
        config = BenchConfig(max_new_tokens=req.max_new_tokens, sampling=req.sampling, chat=True, repeats=max(1, repeats))
        yield {**_msg(f"Running the top {n} for real on {len(req.prompts)} prompts…"), "advisor_runs": ""}
        result = yield from loading(
            lambda report: _run_top(state, advice, n, req, config, report), lambda m: _msg(m), name="specviz-advisor-run")
        out, _report = result
        said = runs_summary(out, len(req.prompts)) + " " + next_step(advice, req.ks)
        said += f" {state.sweep_said}" if state.sweep_said else ""
        yield {**_msg(said, "ok"), "advisor_runs": VA.runs_html(out),
               "advisor_budget": VA.tree_budget_figure(list(advice.budgets.values()), out)}
    except Exception as e:  # noqa: BLE001 - shown as a message, never a traceback
        yield _msg(_friendly(e), "error")


# -- layout -------------------------------------------------------------------------------------


@dataclass
class AdvisorView:
    state: Any
    controls: list[Any]
    components: dict[str, Any]  # output name -> component
    calibrate_btn: Any
    top_n: Any


def build_advisor_panel(target: str, proposers: Sequence[str], target_choices: Sequence[str],
                        proposer_choices: Sequence[str], categories: Sequence[str], sweep_ks: Any = None,
                        sweep_state: Any = None) -> AdvisorView:
    """The Advisor panel's components and wiring, inside the current Blocks context. ``sweep_ks``:
    the Benchmark tab's k control, read at Calibrate (the pick is among the k the sweep will run);
    ``sweep_state``: its state, whose last sweep the pick is set beside."""
    state = gr.State(AdvisorState)
    gr.Markdown("Predict, before a long sweep, every proposer × k × tree shape's speedup **on this machine**: a short "
                "calibration measures each proposer's acceptance, the cost model times the target's t(n), and the "
                "ranking carries a 95% interval (docs/advisor.md)."
                + (" The pick (what `auto` then runs) is among the k ticked above for the sweep." if sweep_ks is not None else ""))
    gr.Markdown(error_words(published_error()), elem_id="sv-advisor-error")  # the last held-out check's record
    with gr.Row():
        tgt = gr.Dropdown(list(target_choices), value=target, label="Target model", allow_custom_value=True, scale=2,
                          elem_id="sv-advisor-target")
        props = gr.Dropdown([c for c in proposer_choices if c != "auto"], value=list(proposers), multiselect=True, allow_custom_value=True,
                            label="Proposers", scale=3, elem_id="sv-advisor-proposers", info=runs.proposer_hint())
    with gr.Row():
        source = gr.Radio([BUNDLED, CUSTOM], value=BUNDLED, label="Prompts", scale=2, elem_id="sv-advisor-source")
        cats = gr.CheckboxGroup(list(categories), value=list(categories), label="Categories", scale=4,
                                elem_id="sv-advisor-categories")
        custom = gr.Textbox("", lines=3, label="Your prompts, one per line", scale=4, visible=False,
                            elem_id="sv-advisor-custom")
    with gr.Row():
        n_prompts = gr.Slider(1, MAX_PROMPTS, value=4, step=1, label="Prompts to calibrate on", elem_id="sv-advisor-n")
        most_new = Limits.from_env().max_new_tokens
        max_new = gr.Slider(1, most_new, value=min(64, most_new), step=1, label="Max new tokens",
                            elem_id="sv-advisor-max-new")
        calib = gr.Slider(20, 1000, value=300, step=10, label="Drafted tokens to calibrate on",
                          elem_id="sv-advisor-calibrate-tokens")
        temperature = gr.Slider(0, 2, value=0.0, step=0.05, label="Temperature (0 = greedy)",
                                elem_id="sv-advisor-temperature")
    with gr.Row():
        calibrate_btn = gr.Button("Calibrate and predict", variant="primary", elem_id="sv-advisor-calibrate", scale=2)
        top_n = gr.Number(3, precision=0, minimum=1, maximum=10, label="N", elem_id="sv-advisor-top-n", scale=1)
        run_btn = gr.Button("Run the top N for real", interactive=False, elem_id="sv-advisor-run", scale=2)
    msg = gr.HTML(progress_html(0, 0, "Choose the proposers and press Calibrate and predict."), elem_id="sv-advisor-msg")
    verdicts = gr.HTML("", elem_id="sv-advisor-verdicts")
    ranking = gr.HTML("", elem_id="sv-advisor-ranking")
    runs_out = gr.HTML("", elem_id="sv-advisor-runs")
    with gr.Accordion("Tree budget: tokens per step and speedup against the node budget", open=True,
                      elem_id="sv-advisor-budget-box"):
        budget = gr.Plot(VA.tree_budget_figure([]), show_label=False, elem_id="sv-advisor-budget")
    with gr.Accordion("The cost model: t(n) on this machine", open=False, elem_id="sv-advisor-costs-box"):
        costs = gr.HTML("", elem_id="sv-advisor-costs")
    components = dict(zip(OUTPUTS, (msg, ranking, verdicts, costs, runs_out, run_btn, budget)))
    controls = [tgt, props, source, cats, custom, n_prompts, max_new, calib, temperature]
    source.change(lambda s: (gr.update(visible=s == BUNDLED), gr.update(visible=s == CUSTOM)), [source], [cats, custom],
                  queue=False)
    outputs = list(components.values())
    inputs = [state, *controls, *([sweep_ks] if sweep_ks is not None else []), *([sweep_state] if sweep_state is not None else [])]
    calibrate_btn.click(by_name(on_calibrate, components), inputs, outputs, concurrency_id="specviz-bench",
                        concurrency_limit=1, show_progress="hidden")
    run_btn.click(by_name(on_run_top, components), [state, top_n], outputs, concurrency_id="specviz-bench",
                  concurrency_limit=1, show_progress="hidden")
    return AdvisorView(state, controls, components, calibrate_btn, top_n)
