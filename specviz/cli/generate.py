"""``specviz generate``: one run with every draft shown, as coloured text, a trace or JSON."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict

from .common import DEFAULT_K, CLIError, load_target, loader, sampling_of, say, warm_target
from .terminal import format_stats, legend, render_steps, use_color


def cmd_generate(args) -> int:
    from ..core.algorithm import Acceptance
    from ..core.engine import SpeculativeDecoder
    from ..core.hooks import Hook, TraceRecorder
    from ..core.schedules import make_schedule
    from ..proposers import check_spec, from_spec
    from ..proposers.registry import auto_pick

    make_schedule(args.schedule)  # a bad schedule fails before any model loads

    from ..core.engine import MAX_K

    sampling = sampling_of(args)
    kind, _ = check_spec(args.proposer)
    if kind != "none" and (args.k or 0) > MAX_K:
        raise CLIError(f"k (tokens drafted per step) must be a whole number from 1 to {MAX_K}, got {args.k}")
    prompt = sys.stdin.read() if args.prompt == "-" else args.prompt
    if not prompt or not prompt.strip():
        raise CLIError("the prompt is empty: pass --prompt TEXT (or --prompt - to read standard input)")
    target = load_target(args)
    pick = auto_pick(args.proposer, target)  # auto: the advisor's pick saved for this target (a ValueError when none)
    proposer = from_spec(pick.spec if pick else args.proposer, target, load=loader(args))
    k = args.k or (pick.k if pick else DEFAULT_K)  # auto: the advisor's k unless --k was given
    decoder = SpeculativeDecoder(
        target, proposer, k=k, sampling=sampling, schedule=args.schedule, acceptance=Acceptance(args.acceptance)
    )
    if pick:
        say(args, pick.describe())
    # a plain run prints the tokens, their verdicts and the stats: lean records (no step's p or q is
    # kept, so greedy steps take the head's certified argmax), the coloured text rendered as each
    # step ends (while its texts are still there)
    lean = not (args.trace or args.json)
    color = use_color(sys.stdout, args.color)
    shown: list[str] = []

    class Shown(Hook):
        def on_step(self, session, record):
            shown.append(render_steps([record], color=True))

    hooks = [TraceRecorder(args.trace)] if args.trace else [Shown()] if color and lean else []
    built = warm_target(target, k, sampled=not sampling.greedy)
    if built > 0.05:
        say(args, f"built the target's static decode step in {built:.1f} s (once per process; not in the times below)")
    result = decoder.generate(prompt, max_new_tokens=args.max_new_tokens, seed=args.seed, hooks=hooks, chat=args.chat,
                              records="lean" if lean else "full")
    if args.trace:
        say(args, f"trace written to {args.trace}")
    if args.json:
        payload = {
            "target": target.name,
            "proposer": decoder.name,
            "k": decoder.k,
            "auto": asdict(pick) if pick else None,
            "sampling": {"temperature": sampling.temperature, "top_k": sampling.top_k, "top_p": sampling.top_p},
            "seed": args.seed,
            "prompt": prompt,
            "text": result.text,
            "token_ids": list(result.token_ids),
            "finished": result.finished,
            "stats": result.stats.to_dict(),
            "steps": [s.to_dict() for s in result.steps],
        }
        json.dump(payload, sys.stdout, ensure_ascii=False)
        sys.stdout.write("\n")
        return 0
    text = ("".join(shown) if lean else render_steps(result.steps, color=True)) if color else result.text
    sys.stdout.write(text + ("\n" if not text.endswith("\n") else ""))
    header = f"--- {target.name} + {decoder.label}" + (
        f", temperature {sampling.temperature:g}" if sampling.temperature else ", greedy") + f", finished: {result.finished}"
    if pick:
        header += f"\n--- {pick.describe()}"
    print(format_stats(result.stats, header))
    if color:
        print(legend(True))
    return 0
