"""``specviz bench`` on a terminal or in a log: the progress as it runs, the report's text after.

On a terminal a progress bar (tqdm) redraws one line. Without one (a log file, CI, ``nohup``) a
bar draws nothing, and a sweep of twelve minutes was silent for twelve minutes; there each prompt
says one line on stderr when its last configuration ran (and each re-run of a stalled run says
one too), so a log shows where the sweep is and how long prompts take.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Callable, TextIO

from .config import TARGET_ONLY, BenchEvent
from .report import format_table
from .verdicts import noise_lines


def progress_line(ev: BenchEvent, sweep: Any, elapsed_s: float) -> str | None:
    """The line a log gets for an event (None: this event says nothing): the warm-up, the end of
    each prompt (its runs, their seconds, target-only's tokens/s there, the sweep so far) and each
    re-run."""
    if ev.kind == "warmup":
        return "warm-up: every configuration once, untimed"
    if ev.kind == "rerun":
        return ev.label
    if ev.kind != "run" or not ev.prompt_done or ev.row is None:
        return None
    i = ev.row.prompt_index
    rows = [r for r in sweep.prompt_rows if r.prompt_index == i]
    base = next((r for r in rows if r.proposer == TARGET_ONLY and r.impl == "specviz"), None)
    rate = f", target-only {base.tokens_per_s:.1f} tok/s" if base is not None else ""
    return (f"prompt {i + 1}/{len(sweep.prompts)} ({ev.row.category} {ev.row.prompt_id}) done: {len(rows)} runs in "
            f"{sum(r.wall_s for r in rows):.1f} s{rate}; {ev.done}/{ev.total} runs, {elapsed_s / 60:.1f} min so far")


def run_with_progress(sweep: Any, say: Callable[[str], None], *, quiet: bool = False, stream: TextIO | None = None) -> None:
    """Run ``sweep`` to its end: a progress bar on a terminal, one line per prompt (``say``)
    without one, nothing with ``quiet``. Ctrl-C keeps what was measured (the report says stopped)."""
    from tqdm import tqdm

    stream = stream or sys.stderr
    tty = bool(getattr(stream, "isatty", lambda: False)())
    started = time.perf_counter()
    with tqdm(total=sweep.total, file=stream, unit="run", dynamic_ncols=True, disable=True if quiet else None) as bar:
        try:
            for ev in sweep:
                if ev.kind == "warmup":
                    bar.set_description("warm-up")
                elif ev.kind == "run":
                    bar.set_description(ev.label[:48])
                    bar.update(1)
                line = None if tty or quiet else progress_line(ev, sweep, time.perf_counter() - started)
                if line:
                    say(line)
        except KeyboardInterrupt:
            sweep.stopped = True
            say(f"interrupted after {len(sweep.prompt_rows)} of {sweep.total} runs: reporting those")


def report_text(report: dict[str, Any], rows: list[dict[str, Any]], target: Any, trace_note: str = "") -> str:
    """Everything ``specviz bench`` prints after its sweep: the table (``rows``: the report's rows
    with their per-position predictions), the times, the CPU and its kernels, what the sweep says
    about its own numbers (:mod:`specviz.bench.verdicts`), the readout and the roofline."""
    from ..analysis.hardware import roofline_lines
    from ..analysis.metrics import why_no_speedup
    from .kernel_words import describe_kernels

    m = report["meta"]
    out = [format_table(rows), ""]
    out.append(f"{m['runs_done']} runs, sweep {m['wall_s']:.1f} s: timed decoding {m['timed_s']:.1f} s, warm-up "
               f"{m['warmup_s']:.1f} s{trace_note}, overhead {m['overhead_s']:.2f} s ({100 * m['overhead_frac']:.1f}%)."
               " tokens/s = total new tokens / total time; speedup vs the same impl's target-only; median: of the "
               "per-prompt speedups, with its 90% band (* within noise); verdicts come from the median.")
    out.append(f"CPU: {m.get('cpu')}, {m['threads']} threads, torch {m['torch']}")
    out += describe_kernels(m)  # the target's kernels per width (head, projections), measured or cached
    notes = noise_lines(report)
    if notes:
        out += ["", "Reading these numbers:", *(f"- {line}" for line in notes)]
    out += ["", why_no_speedup(rows)["markdown"].replace("**", "")]  # as the HTML report and the Benchmark tab explain them
    out += ["", "\n".join(roofline_lines(report["rows"], target.model, "int8" if target.quantize == "int8" else None,
                                         m.get("bandwidth_gb_s") or ()))]
    return "\n".join(out)


__all__ = ["progress_line", "report_text", "run_with_progress"]
