"""The Benchmark tab's view and per-browser state: its components, the values they show for a
report (:func:`render`), the prompt choice, and the frames a sweep's events stream
(:func:`sweep_frames`), shared by the local sweep (:mod:`specviz.ui.bench_tab`) and the remote
source (:mod:`specviz.ui.bench_remote`).

Frames are ``{output name: value}`` (names: :meth:`BenchView.named`; a plot is ``plot:NAME``);
a name left out keeps its component as it is (:func:`specviz.ui.handlers.by_name` wires them).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

import gradio as gr

from .. import bench as B
from .. import prompts as P
from ..app import runs
from ..viz import bench as V
from ..viz.bench import progress_html
from .threads import Every

BUNDLED = "Spec-Bench dev prompts"
CUSTOM = "My prompts (one per line)"
MAX_PROMPTS = 160
RENDER_EVERY_S = 2.0  # redraw plots at most this often (and after every prompt)
PLOT_ORDER = list(V.FIGURES)


class BenchState:
    """One browser session's benchmark: the stop flag, the last report and its files."""

    def __init__(self):
        self.stop = threading.Event()
        self.report: dict[str, Any] | None = None
        self.verify_cost: list[tuple[int, float]] | None = None  # this machine's t(n), when measured
        self.verify_floor: list[tuple[int, float, float]] | None = None  # the least v(n), overlapped and not (fp32 CPU)
        self.verify_target: str | None = None  # the target it was measured on
        self._dir: str | None = None

    def files(self, report: dict[str, Any]) -> tuple[str, str, str]:
        """Write the CSV, JSON and HTML downloads of ``report``; returns their paths."""
        if self._dir is None or not os.path.isdir(self._dir):
            self._dir = tempfile.mkdtemp(prefix="specviz-bench-")
        d = Path(self._dir)
        csv_path = B.write_csv(report["rows"], d / "specviz-bench.csv")
        json_path = B.write_json(report, d / "specviz-bench.json")
        html_path = d / "specviz-bench.html"
        html_path.write_text(V.report_html(report), encoding="utf-8")
        return str(csv_path), str(json_path), str(html_path)

    def __deepcopy__(self, memo) -> "BenchState":
        # gr.State copies its value; this handle owns an Event and files, so it is shared, not
        # copied. The tab passes the class itself, so every browser session gets a fresh one.
        return self

    def close(self) -> None:
        """Delete the download files (gr.State's delete_callback)."""
        self.stop.set()
        if self._dir:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None


@dataclass
class BenchView:
    """The tab's components (for handlers, tests and the app shell)."""

    state: gr.State
    controls: list[gr.components.Component]
    run_btn: gr.Button
    stop_btn: gr.Button
    progress: gr.HTML
    why: gr.Markdown
    plots: dict[str, gr.Plot]
    table: gr.Dataframe
    csv: gr.DownloadButton
    json: gr.DownloadButton
    html: gr.DownloadButton
    verify_btn: gr.Button | None = None
    verify_msg: gr.HTML | None = None

    def named(self) -> dict[str, Any]:
        """{output name: component}: the run's outputs, then the verify message (when there is one)."""
        out: dict[str, Any] = {"progress": self.progress, "why": self.why,
                               **{plot_name(name): p for name, p in self.plots.items()},
                               "table": self.table, "csv": self.csv, "json": self.json, "html": self.html}
        if self.verify_msg is not None:
            out["verify_msg"] = self.verify_msg
        return out

    @property
    def outputs(self) -> list[gr.components.Component]:
        """The components a run updates (an event's outputs)."""
        return [c for name, c in self.named().items() if name != "verify_msg"]


def plot_name(figure: str) -> str:
    """The output name of a figure's plot ("plot:latency")."""
    return f"plot:{figure}"


# -- prompts and rendering -------------------------------------------------------------------


def target_and_specs(target: Any, proposers: Any, missing: str) -> tuple[str, list[str]]:
    """A form's target and proposer specs, stripped and deduplicated, target-only left out (it is
    always measured); ValueError with a message for the user (``missing``: no proposer chosen)."""
    target = (target or "").strip()
    if not target:
        raise ValueError("choose a target model")
    specs = [s.strip() for s in (proposers or []) if s and s.strip()]
    specs = [s for s in dict.fromkeys(specs) if not runs.is_target_only(s)]
    if not specs:
        raise ValueError(missing)
    return target, specs


def prompt_rows(source: str, categories: Any, custom: str | None, n: int) -> tuple[list, str]:
    """The tab's prompt choice -> (at most n PromptRows, their source label); ValueError if empty."""
    if source == CUSTOM:
        rows = P.from_lines(custom or "")[:n]
        if not rows:
            raise ValueError("type at least one prompt (one per line) or pick the Spec-Bench prompts")
        return rows, "custom"
    if not categories:
        raise ValueError("pick at least one prompt category")
    return P.load_prompts(categories=list(categories), limit=n), "bundled:specbench-dev"


def table_value(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    headers, body = V.table_rows(rows)  # rows with the per-position prediction (V.report_rows)
    return {"headers": headers, "data": body or [[""] * len(headers)]}


def render(state: BenchState, report: dict[str, Any] | None, progress: str, *, plots: bool = True,
            files: bool = False) -> dict[str, Any]:
    """The progress line, and for a report its readout, plots and table (``plots``) and downloads
    (``files``), by name; what is left out stays as it is."""
    out: dict[str, Any] = {"progress": progress}
    if report is None:
        return out
    report = with_verify_cost(state, report)
    if plots:
        figs = V.build_figures(report)
        out["why"] = V.why_markdown(report)
        out.update({plot_name(name): figs[name] for name in PLOT_ORDER})
        out["table"] = table_value(V.report_rows(report))
    if files:
        paths = state.files(report)  # (report already carries the verify curve)
        out.update({name: gr.update(value=p, interactive=True) for name, p in zip(("csv", "json", "html"), paths)})
    return out


def with_verify_cost(state: BenchState, report: dict[str, Any]) -> dict[str, Any]:
    """The report with this session's measured verify-cost curve attached (when it was measured
    on the report's target), so the figures, the readout and the downloads show it."""
    target = (report.get("meta") or {}).get("target")
    if state.verify_cost and (target is None or target == state.verify_target) and not report.get("verify_cost"):
        floor = {"verify_floor": [list(p) for p in state.verify_floor]} if state.verify_floor else {}
        return {**report, "verify_cost": [list(p) for p in state.verify_cost], "verify_cost_target": state.verify_target, **floor}
    return report


def sweep_frames(state: BenchState, events: Iterable[Any], live_report: Callable[[], dict[str, Any]],
                 warm_up: str) -> Iterator[dict[str, Any]]:
    """The tab's frames for a sweep's events (local or remote): the warm-up line, then each run's
    progress, with the report so far (``live_report()``) redrawn after every prompt and at most
    every RENDER_EVERY_S seconds."""
    redraw = Every(RENDER_EVERY_S)
    for ev in events:
        if ev.kind == "warmup":
            yield render(state, None, progress_html(0, ev.total, warm_up))
            continue
        if ev.kind not in ("run", "rerun"):  # a rerun: a run a stall hit, timed again after the last prompt
            continue
        msg = progress_html(ev.done, ev.total, f"Ran {ev.label}" if ev.kind == "run" else ev.label[0].upper() + ev.label[1:])
        yield render(state, live_report() if redraw.due(force=ev.prompt_done) else None, msg)


__all__ = ["BUNDLED", "CUSTOM", "MAX_PROMPTS", "PLOT_ORDER", "RENDER_EVERY_S", "BenchState", "BenchView", "plot_name",
           "prompt_rows", "render", "sweep_frames", "table_value", "with_verify_cost"]
