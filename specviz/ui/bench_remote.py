"""The Benchmark tab's "remote engine" source: measure serving engines by URL (:mod:`specviz.remote`).

The visitor gives endpoint lines (``[LABEL[ k=N]]=URL``) and an optional target-only URL; Run
drives :class:`~specviz.remote.run.RemoteSweep` over the tab's prompts and max new tokens and
shows the local sweep's table, figures, readout and downloads. Off unless the operator sets
``SPECVIZ_ALLOW_REMOTE`` (a hosted Space must not become a proxy): the controls are greyed with a
sentence saying why, and the handler checks again before it builds a client, so no URL is fetched
unless allowed. Every failure is one line; what was measured before it stays, with its downloads.

After a run, "remote steps" shows a chosen prompt's verification steps as verdict strips where the
engine gave per-step counts (vLLM ``--per-request-spec-decode-metrics detailed``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

import gradio as gr

from .. import prompts as P
from ..remote import REMOTE_ENV, check_remote_allowed, remote_allowed
from ..remote.client import RemoteError, parse_endpoint
from ..remote.replay import NOT_EXPOSED, steps_of_row
from ..remote.run import RemoteConfig, RemoteSweep
from ..viz.bench import progress_html
from ..viz.remote_steps import remote_steps_html
from .bench_view import MAX_PROMPTS, BenchState, BenchView, prompt_rows, render, sweep_frames
from .handlers import by_name, friendly_error

__all__ = ["RemoteView", "build_remote_source", "parse_remote_request", "on_remote_run", "on_remote_steps",
           "wire_remote", "MAX_ENDPOINTS", "TIMEOUT_S", "OFF_SENTENCE"]

MAX_ENDPOINTS = 8
TIMEOUT_S = 120.0  # per request
OFF_SENTENCE = (f"Measuring remote servers is turned off on this server: a public app must not fetch arbitrary "
                f"addresses. The operator can allow it with {REMOTE_ENV}=1; the command line always may "
                "(specviz bench --remote URL).")
STEPS_NOTE = NOT_EXPOSED + " (shown here in the Benchmark tab)"


@dataclass
class RemoteView:
    endpoints: gr.Textbox
    baseline: gr.Textbox
    run_btn: gr.Button
    steps_choice: gr.Dropdown
    steps_html: gr.HTML


def parse_remote_request(endpoints: str, baseline: str, source: str, categories, custom: str, n_prompts,
                         max_new_tokens) -> tuple[list, list[P.PromptRow], str, RemoteConfig]:
    """The remote controls -> (endpoints, prompts, prompt source, config); ValueError (one line)
    when anything needs changing. Fetches nothing."""
    lines = [ln.strip() for ln in (endpoints or "").splitlines() if ln.strip() and not ln.strip().startswith("#")]
    if not lines:
        raise ValueError("give at least one server, one per line: LABEL=http://HOST:PORT (k=N in the label sets k)")
    if len(lines) > MAX_ENDPOINTS:
        raise ValueError(f"at most {MAX_ENDPOINTS} servers per run")
    eps = [parse_endpoint(ln) for ln in lines]
    if (baseline or "").strip():
        eps.append(parse_endpoint(baseline.strip(), baseline=True))
    try:
        n, max_new = int(n_prompts), int(max_new_tokens)
    except (TypeError, ValueError):
        raise ValueError("number of prompts and max new tokens must be numbers") from None
    if not 1 <= n <= MAX_PROMPTS:
        raise ValueError(f"number of prompts must be between 1 and {MAX_PROMPTS}")
    if max_new < 1:
        raise ValueError("max new tokens must be at least 1")
    rows, src = prompt_rows(source, categories, custom, n)
    return eps, rows, src, RemoteConfig(max_new_tokens=max_new, timeout_s=TIMEOUT_S)


def _step_choices(report: dict[str, Any] | None) -> list[tuple[str, int]]:
    """(label, index into prompt_rows) of the rows that carry per-step counts."""
    out = []
    for i, r in enumerate((report or {}).get("prompt_rows") or []):
        if r.get("per_step_accepted") and r.get("per_step_drafted"):
            out.append((f"prompt {r['prompt_index'] + 1} ({r['prompt_id']}) · {r['proposer']}", i))
    return out


def on_remote_steps(state: BenchState, choice) -> str:
    """The verdict strips of the chosen prompt row of the last remote run."""
    rows = (state.report or {}).get("prompt_rows") or []
    if choice is None or not isinstance(choice, int) or not 0 <= choice < len(rows):
        return remote_steps_html([], STEPS_NOTE)
    row = rows[choice]
    try:
        steps = steps_of_row(row)
    except ValueError as e:
        return remote_steps_html([], f"{e}. {STEPS_NOTE}")
    return remote_steps_html(steps, STEPS_NOTE, title=f"{row['proposer']} on prompt {row['prompt_index'] + 1} ({row['prompt_id']})")


def _steps_outputs(state: BenchState, report: dict[str, Any] | None) -> dict[str, Any]:
    """The steps view's menu and strips, by name (steps_choice, steps_html)."""
    choices = _step_choices(report)
    if not choices:
        note = "" if report is None else remote_steps_html([], STEPS_NOTE)
        return {"steps_choice": gr.update(choices=[], value=None), "steps_html": note}
    return {"steps_choice": gr.update(choices=choices, value=choices[0][1]), "steps_html": on_remote_steps(state, choices[0][1])}


def _end_message(report: dict[str, Any], error: str | None = None) -> str:
    m = report["meta"]
    done, planned = m["runs_done"], m["runs_planned"]
    if error or m.get("stopped_reason") not in (None, "stopped by the user"):
        why = error or m.get("stopped_reason")
        where = f" at {m['stopped_at']}" if m.get("stopped_at") else ""
        return progress_html(done, planned, f"Stopped{where}: {why}. {done} of {planned} requests kept below and in the downloads.", "error")
    if m["stopped"]:
        return progress_html(done, planned, f"Stopped after {done} of {planned} requests; the results so far are below.", "info")
    return progress_html(done, planned, f"Done in {m['wall_s']:.1f} s: {done} requests, requests {m['timed_s']:.1f} s, "
                                        f"warm-up {m['warmup_s']:.1f} s.", "ok")


def _one_line(e: BaseException) -> str:
    return friendly_error(e, "the benchmark tab's remote source", expected=(ValueError, OSError), first_line=True)


def on_remote_run(state: BenchState, *raw) -> Iterator[dict[str, Any]]:
    """Check the policy, measure the servers, stream progress, rows and plots, then the steps view.
    Yields the tab's outputs by name (BenchView.named), then the steps view's (steps_choice, steps_html)."""
    state.stop.clear()
    sweep: RemoteSweep | None = None
    try:
        try:
            check_remote_allowed()  # before anything parses or fetches a URL
            eps, rows, src, cfg = parse_remote_request(*raw)
            sweep = RemoteSweep(eps, rows, cfg, prompt_source=src)
        except ValueError as e:
            yield render(state, None, progress_html(0, 0, _one_line(e), "error"))
            return
        yield render(state, None, progress_html(0, sweep.total, f"Asking {len(eps)} server(s) what they are…"))
        yield from sweep_frames(state, sweep.events(should_stop=state.stop.is_set), sweep.report,
                                "Warming up every server (untimed)…")
        report = sweep.report()
        state.report = report
        yield {**render(state, report, _end_message(report), files=True), **_steps_outputs(state, report)}
    except Exception as e:  # noqa: BLE001 - one line, never a traceback; the rows measured stay
        line = _one_line(e) if not isinstance(e, RemoteError) else str(e).splitlines()[0]
        if sweep is not None and sweep.prompt_rows:
            report = sweep.report()
            state.report = report
            yield {**render(state, report, _end_message(report, line), files=True), **_steps_outputs(state, report)}
        else:
            yield render(state, None, progress_html(0, 0, line, "error"))


def build_remote_source() -> RemoteView:
    """The remote source's controls and its steps view, inside the current Blocks context (wire
    them with :func:`wire_remote` once the tab's outputs exist)."""
    allowed = remote_allowed()
    with gr.Accordion("Remote engine (measure a vLLM / SGLang / llama.cpp server by URL)", open=False,
                      elem_id="sv-bench-remote"):
        gr.Markdown(
            "Measure a serving engine's own speculative decoding with the same definitions, figures and readout, "
            "on the prompts and max new tokens chosen above (one request at a time, temperature 0). "
            "One server per line as `LABEL=URL` (`k=N` in the label sets the row's k, e.g. `eagle k=5=http://host:8001`); "
            "the target-only URL is the same model without speculation, so the speedup is measured, not assumed."
            if allowed else OFF_SENTENCE, elem_id="sv-bench-remote-note")
        with gr.Row():
            endpoints = gr.Textbox("", lines=3, label="Servers, one per line", scale=3, interactive=allowed,
                                   placeholder="ngram=http://127.0.0.1:8000\neagle k=5=http://127.0.0.1:8001",
                                   elem_id="sv-bench-remote-urls")
            baseline = gr.Textbox("", lines=1, max_lines=1, label="Target-only server (optional baseline)", scale=2,
                                  interactive=allowed, placeholder="http://127.0.0.1:8002", elem_id="sv-bench-remote-base")
        run_btn = gr.Button("▶ Run remote", variant="primary", interactive=allowed, elem_id="sv-bench-remote-run")
        with gr.Accordion("Remote steps (vLLM detailed per-step counts)", open=True, elem_id="sv-bench-remote-steps"):
            steps_choice = gr.Dropdown([], value=None, label="Prompt and server", elem_id="sv-bench-remote-step-choice",
                                       info="rows whose engine gave per-step accepted / drafted counts")
            steps_html = gr.HTML("", elem_id="sv-bench-remote-step-strips")
    return RemoteView(endpoints, baseline, run_btn, steps_choice, steps_html)


def wire_remote(rv: RemoteView, view: BenchView, prompt_controls: list[gr.components.Component]) -> None:
    """Run drives :func:`on_remote_run` into the tab's outputs; ``prompt_controls``: the tab's
    [source, categories, custom, n_prompts, max_new]."""
    endpoints, baseline, run_btn, steps_choice, steps_html = rv.endpoints, rv.baseline, rv.run_btn, rv.steps_choice, rv.steps_html
    named = {**view.named(), "steps_choice": steps_choice, "steps_html": steps_html}
    run_btn.click(by_name(on_remote_run, named), [view.state, endpoints, baseline, *prompt_controls],
                  [*view.outputs, steps_choice, steps_html], concurrency_id="specviz-bench", concurrency_limit=1,
                  show_progress="hidden")
    steps_choice.change(on_remote_steps, [view.state, steps_choice], [steps_html], queue=False)
