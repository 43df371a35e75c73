"""The playground's Step, server side, against a bare engine step on the same run.

Two copies of the same greedy run advance side by side, one step each in turn:
- bare: ``SpeculativeDecoder.start(records="lean").step()``, what ``generate`` and the benchmark do;
- playground: what a Step click runs on the server (``specviz.ui.playground.on_step`` once its
  session is live): ``PlaygroundState.step()`` (full records, the TraceRecorder writing a JSONL
  line), the first frame (text, metrics, inspector, lesson) and the second (the p/q chart, the
  three run plots and the trace download), every HTML string and Plotly figure built and
  serialized as Gradio sends it.

Both runs take the same steps (greedy), so step i costs the same model work in each; the ratio
of the medians is the Step's overhead on the server. (What the browser then spends drawing is
measured in Chromium by ``python -m tests.support.app_server --builtin --measure 15``.)

    PYTHONPATH=$PWD python benchmarks/playground_step.py [--target gemma-3-270m]
        [--proposer draft:gemma-3-270m@int8 --proposer ngram] [--k 4] [--steps 16] [--threads 2]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import plotly.graph_objects as go
import torch

from specviz.app.runs import default_prompt
from specviz.core.engine import SpeculativeDecoder
from specviz.models import load_model
from specviz.proposers.registry import from_spec

PLAYGROUND_MAX_NEW_TOKENS = 256


def settings_for(target: str, spec: str, k: int, prompt: str):
    """The playground Settings of a spec (a run carries its proposer spec as it is)."""
    from specviz.ui.state import Settings

    return Settings(target=target, proposer=spec, k=k, temperature=0.0, top_p=None, top_k=None, seed=0,
                    max_new_tokens=PLAYGROUND_MAX_NEW_TOKENS, prompt=prompt)


def measure(target, spec: str, k: int, steps: int, prompt: str) -> tuple[list[float], list[float]]:
    from specviz.ui import playground
    from specviz.ui.playground_view import render
    from specviz.ui.state import PlaygroundState

    proposer = from_spec(spec, target)
    bare = SpeculativeDecoder(target, proposer, k=k).start(prompt, max_new_tokens=PLAYGROUND_MAX_NEW_TOKENS, chat=True,
                                                           records="lean")
    state = PlaygroundState()
    state._dir = tempfile.mkdtemp(prefix="specviz-step-")
    state.start(settings_for(target.name, spec, k, prompt), SpeculativeDecoder(target, from_spec(spec, target), k=k))
    t_bare, t_play = [], []
    for i in range(steps + 1):
        if bare.done or state.done:
            break
        t0 = time.perf_counter()
        bare.step()
        t1 = time.perf_counter()
        with state.lock:  # what on_step does for a live session, both frames
            record = state.step()
            state.message = playground._step_message(state, record)
            serialized(render(state, chart=False, plots=False))
        serialized(playground.on_charts(state))
        t2 = time.perf_counter()
        if i:  # the first step includes the prefill
            t_bare.append(t1 - t0)
            t_play.append(t2 - t1)
    assert [s.committed for s in bare.steps] == [s.committed for s in state.steps], "the two runs diverged"
    return t_bare, t_play


def serialized(outputs: dict) -> None:
    """What Gradio then does with a frame's figures: gr.Plot sends ``Figure.to_json()`` (a payload
    the app built as JSON already is sent as it is)."""
    for value in outputs.values():
        if isinstance(value, go.Figure):
            value.to_json()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="gemma-3-270m")
    ap.add_argument("--proposer", action="append", help="a proposer spec; repeat for several "
                    "(default: draft:gemma-3-270m@int8 and ngram)")
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    target = load_model(args.target)
    prompt = default_prompt()
    print(f"{args.target}, k={args.k}, greedy, {args.steps} steps after the first, {args.threads} threads; median ms per step")
    for spec in args.proposer or ["draft:gemma-3-270m@int8", "ngram"]:
        t_bare, t_play = measure(target, spec, args.k, args.steps, prompt)
        b, p = statistics.median(t_bare) * 1e3, statistics.median(t_play) * 1e3
        print(f"  {spec:<28} bare {b:7.1f}   playground Step {p:7.1f}   overhead {p - b:+6.1f} ms ({p / b - 1:+.1%})")


if __name__ == "__main__":
    main()
