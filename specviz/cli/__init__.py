"""The ``specviz`` command: generate, bench, advise, serve, models.

    specviz generate --target gemma-3-270m --proposer ngram --k 4 --prompt "Hello"
    specviz bench --target gemma-3-270m --proposer ngram --proposer draft:gemma-3-270m@int8 \\
        --k 1,2,4 --limit 8 --json out.json --html report.html
    specviz serve --port 7860
    specviz models

Errors are printed as one line, ``specviz: error: ...``, with exit status 2 (set
``SPECVIZ_DEBUG=1`` for the traceback).

This module parses the command line and reads the engine's options once (``settings.options()``,
passed to every load); the commands live by concern: :mod:`.generate`, :mod:`.measure` (bench,
advise), :mod:`.service` (serve, tune, models); :mod:`.terminal` renders a run, :mod:`.common`
holds what they share.
"""


from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

from .. import settings
from .common import DEFAULT_K, CLIError
from .common import trace_note as _trace_note
from .generate import cmd_generate
from .measure import cmd_advise, cmd_bench
from .service import cmd_models, cmd_serve, cmd_tune
from .terminal import RESET, STYLES, format_stats, legend, render_steps, use_color

__all__ = ["CLIError", "DEFAULT_K", "RESET", "STYLES", "build_parser", "format_stats", "legend", "main", "render_steps",
           "use_color", "_trace_note"]


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors in one line (exit 2), like every other error."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"specviz: error: {message} (see `{self.prog} --help`)\n")


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
    from ..proposers.registry import syntax_list

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
    from ..remote.cli import add_remote_args

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
    args.options = settings.options()  # the engine's settings, read once and passed to every load
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
