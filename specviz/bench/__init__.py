"""Benchmark sweeps: target-only decoding and every proposer x k on the same prompts.

One API serves the CLI (``specviz bench``) and the app's Benchmark tab:

    sweep = Sweep(target, {"ngram": NGram()}, prompts, BenchConfig(ks=(1, 2, 4)))
    for event in sweep:          # a warm-up, then one event per timed run (stoppable)
        ...                      # event.done / event.total, event.row (a per-prompt row)
    report = sweep.report()      # {"schema", "meta", "rows", "prompt_rows"}

``run_sweep(...)`` wraps that loop with ``on_event`` / ``should_stop`` callbacks.

How it measures: batch size 1, one process, a warm-up of every
configuration first, then the prompts one at a time with every configuration run back to back on
each prompt (interleaved, so slow drift of the machine hits all configurations alike), the
order rotated by one configuration per prompt (so none always runs first on a fresh prompt, when
a new prompt length can be slower). The target-only baseline is measured in the same run. With ``compare_hf`` the same prompts (the same
token ids, the same ``max_new_tokens``, the same EOS ids) also go through ``transformers``' own
``generate()``: target-only, ``assistant_model=`` with a constant ``num_assistant_tokens=k``, and
``prompt_lookup_num_tokens=k``.

Timing: each run is timed from the start of the session (cache allocation, prefill included) to
its last token, around the whole ``generate()`` call for HF rows. Prompt encoding, row building
and everything the caller does between events are *not* timed; that is the sweep's overhead,
reported in ``meta`` as ``overhead_s`` / ``overhead_frac``.

Aggregation in a summary row (one per proposer x k x impl): every number is defined once, in
:data:`specviz.analysis.metrics.METRICS` (the reports' meta, the CSV columns, the figures'
tooltips and docs/architecture.md read it). Rates are token-weighted or pooled over the prompts
(tokens/s = total tokens / total seconds; acceptance counts summed before dividing), so short
EOS-terminated answers do not skew them; ``speedup_median`` is the one median, with its interval
(``speedup_low`` .. ``speedup_high``) and the ``verdict`` read from it, never from the total (one
stalled run can drag a total across 1.0x). After the last prompt, a run a stalled machine slowed
is re-run once and named in ``meta["reruns"]`` (:mod:`specviz.bench.stalls`).

A remote server's rows (:mod:`specviz.remote.run`) are the same rows, summarised by the same
:func:`summarize`.
"""

from .config import SCHEMA, TARGET_ONLY, BenchConfig, BenchEvent, RunSpec, parse_ks
from .hf import _hf_kwargs  # noqa: F401 - tests check the transformers arguments
from .report import CSV_COLUMNS, csv_text, format_table, load_report, write_csv, write_json, write_reports
from .rows import PromptResult, RemotePromptResult, RemoteSummaryRow, SummaryRow, prompt_result, to_record
from .summary import summarize
from .sweep import Sweep, run_sweep

__all__ = [
    "write_reports",
    "CSV_COLUMNS", "SCHEMA", "TARGET_ONLY", "BenchConfig", "BenchEvent", "PromptResult", "RunSpec", "SummaryRow",
    "RemotePromptResult", "RemoteSummaryRow", "prompt_result",
    "Sweep", "csv_text", "format_table", "load_report", "parse_ks", "run_sweep", "summarize", "to_record",
    "write_csv", "write_json",
]
