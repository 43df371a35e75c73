"""Time every kernel of specviz's table at every width 1..9 on an LM head (and the body's projection
kinds), side by side, on this CPU: the table ``specviz tune`` chooses from.

    python benchmarks/lm_head.py             # gemma-3-270m's own head, SPECVIZ_THREADS=2 by default
    python benchmarks/lm_head.py --body      # and its four projection kinds, all 18 layers a pass
    python benchmarks/lm_head.py --random    # a random 262,144 x 640 fp32 weight (the same kernels)

Per width: the kernels interleaved (the order reversed every other round), min of --repeats
(:func:`specviz.runtime.plan.time_kernels`), and the kernel a plan would choose there.
"""

from __future__ import annotations

import argparse
import os

import torch

from specviz import tuning
from specviz.runtime import cpu


def weights(random: bool, body: bool) -> tuple[str, dict[str, list[torch.Tensor]]]:
    if random:
        return "random", {"head": [torch.randn(262_144, 640)]}
    from specviz.models import load_model

    os.environ["SPECVIZ_CPU_HEAD"] = "0"  # the plain head, unwrapped
    model = load_model("gemma-3-270m").model
    kinds = {"head": [model.get_output_embeddings().weight.detach()]}
    return "gemma-3-270m", kinds | (tuning.body_kinds(model) if body else {})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--random", action="store_true", help="a random 262,144 x 640 weight instead of gemma's head")
    ap.add_argument("--body", action="store_true", help="the body's projection kinds too")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--max-rows", type=int, default=cpu.MEASURED_ROWS)
    ap.add_argument("--threads", type=int, default=int(os.environ.get("SPECVIZ_THREADS", "2")))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    name, kinds = weights(args.random, args.body)
    print(f"CPU: {cpu.machine_id()}; torch {torch.__version__}; {torch.get_num_threads()} threads; "
          f"load {cpu.load_average() or 0.0:.1f}; min of {args.repeats}, interleaved (ms)")
    for kind, ws in kinds.items():
        print(f"\n{name} {kind}: {len(ws)} x {tuple(ws[0].shape)} {str(ws[0].dtype).removeprefix('torch.')}")
        names = None
        for rows in range(1, args.max_rows + 1):
            ms = {n: t * 1e3 for n, t in tuning.time_kernels(ws, rows, args.repeats).items()}
            if names is None:
                names = list(ms)
                print("rows  " + "  ".join(f"{n:>16}" for n in names) + "  chosen")
            print(f"{rows:>4}  " + "  ".join(f"{ms[n]:16.2f}" for n in names) + f"  {tuning.choose(ms)}")


if __name__ == "__main__":
    main()
