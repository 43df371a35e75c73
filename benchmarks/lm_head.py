"""Time an LM head with F.linear and oneDNN at every width 1..9 rows, side by side, on this CPU.

    python benchmarks/lm_head.py             # gemma-3-270m's own head, SPECVIZ_THREADS=2 by default
    python benchmarks/lm_head.py --random    # a random 262,144 x 640 fp32 weight (the same kernels)

Per width: the two kernels interleaved (alternating which goes first), median of --repeats. Then
what :mod:`specviz.runtime.cpu`'s chooser picks when a model loads (its shorter measuring, timed)
and the kernel each width would use.
"""

from __future__ import annotations

import argparse
import os

import torch

from specviz.runtime import cpu, kernel_words


def head_weight(random: bool) -> tuple[str, torch.Tensor]:
    if random:
        return "random", torch.randn(262_144, 640)
    from specviz.models import load_model

    os.environ["SPECVIZ_CPU_HEAD"] = "0"  # the plain head, unwrapped
    return "gemma-3-270m", load_model("gemma-3-270m").model.get_output_embeddings().weight.detach()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--random", action="store_true", help="a random 262,144 x 640 weight instead of gemma's head")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--max-rows", type=int, default=cpu.MEASURED_ROWS)
    ap.add_argument("--threads", type=int, default=int(os.environ.get("SPECVIZ_THREADS", "2")))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    name, weight = head_weight(args.random)
    print(f"CPU: {cpu.machine_id()}; torch {torch.__version__}")
    print(f"{name} LM head {tuple(weight.shape)} {str(weight.dtype).removeprefix('torch.')}, "
          f"{torch.get_num_threads()} threads, interleaved, median of {args.repeats} (ms)")
    cpu.measure_head(weight, 1)  # warm both kernels
    print("rows  F.linear  oneDNN  F.linear/oneDNN  faster")
    for rows in range(1, args.max_rows + 1):
        plain, onednn = cpu.time_head(weight, rows, args.repeats, early=False)
        print(f"{rows:>4}  {plain * 1e3:8.1f}  {onednn * 1e3:6.1f}  {plain / onednn:15.2f}  {cpu.choose_kernel(plain, onednn)}")
    plan = cpu.plan_head(weight, None, max_rows=args.max_rows)  # as a load measures it (no cache)
    print(f"\nthe chooser on load: {kernel_words.describe_head_kernels(cpu.plan_report(plan, any(plan.onednn_at)))}")


if __name__ == "__main__":
    main()
