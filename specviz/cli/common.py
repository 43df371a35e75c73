"""What the commands share: loading the target and its drafts with the command's engine options,
the warm-up before the clocks start, the prompt rows, the one-line messages."""

from __future__ import annotations

import sys

from .. import settings
from ..core.records import Sampling

DEFAULT_K = 4  # generate's k without --k (auto: the advisor's)


class CLIError(Exception):
    """A user error found by the CLI itself."""


def say(args, msg: str) -> None:
    if not getattr(args, "quiet", False):
        print(f"specviz: {msg}", file=sys.stderr, flush=True)


def options_of(args) -> settings.Options | None:
    """The engine's options :func:`specviz.cli.main` read once for this command (None: a caller
    that built ``args`` itself; the runtime then reads the environment's)."""
    return getattr(args, "options", None)


def warm_target(target, k: int, sampled: bool = False) -> float:
    """Build the target's static decode step (its runner chosen) for one token and a verify pass of
    k + 1, and for a sampled run the head's bf16 screen (its widths from the plan), before the clocks
    start -> the seconds it took (0.0 when built or not served)."""
    import time

    import torch

    from ..runtime import sampled_head
    from ..runtime.static_decode import warm

    model = getattr(target, "model", None)
    if not isinstance(model, torch.nn.Module):
        return 0.0
    built, t = warm(model, widths=(1, k + 1)), time.perf_counter()
    if sampled:
        sampled_head.screen_for(model, 1)  # the head's bf16 screen a sampled step reads: built now
    return built + (time.perf_counter() - t)


def trace_note(meta: dict) -> str:
    """A note on the warm-up's share spent building the static decode step ("" when none was built)."""
    t = meta.get("static_decode_trace_s") or 0.0
    how = f" ({meta['static_decode_runner']})" if meta.get("static_decode_runner") else ""
    return f" (of which building the static decode step{how}, once per model: {t:.1f} s)" if t > 0 else ""


def sampling_of(args) -> Sampling:
    return Sampling(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p)


def quiet_hf() -> None:
    """transformers' own progress bars and warnings would drown the CLI's output."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def set_threads(args) -> None:
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)


def load_target(args):
    from ..models import load_model

    quiet_hf()
    set_threads(args)
    return load_model(args.target, device=args.device, dtype=args.dtype, progress=lambda m: say(args, m),
                      options=options_of(args))


def loader(args):
    from ..models import load_model

    def load(name, **kw):
        return load_model(name, progress=lambda m: say(args, m), **{"options": options_of(args), **kw})

    return load


def prompt_rows(args):
    from .. import prompts as P

    rows = P.load_prompts(args.prompts, categories=args.category or None, limit=args.limit, sets=args.set)
    if not rows:
        raise CLIError(P.empty_reason(args.prompts, args.set))
    return rows


def bench_page(report) -> str:
    """The standalone HTML page of a bench report (plotly: imported only when a page is asked for)."""
    from ..viz.bench import report_html

    return report_html(report)
