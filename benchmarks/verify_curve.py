"""The verify pass's cost curve v(n) = t(n) / t(1) on this CPU, and the LM-head kernel per n.

t(n): one forward of n new positions (logits of all n, as verification keeps) on top of a KV
cache of --context positions, rolled back after each; n interleaved, median of --repeats
(specviz.analysis.hardware.verify_costs). Then, for models whose head specviz.runtime.cpu wraps, the head alone
through F.linear and through oneDNN at each n, and the kernel its plan picks (PlannedLinear).
``--dtype bfloat16`` loads the models in bf16 (the static step serves bf16 too, its weights read
by oneDNN from packed copies) and times the bf16 head alone through F.linear and oneDNN beside the
float32 head's two kernels; ``--dtype float32,bfloat16`` times both models' t(n) interleaved in one
rotation, each as specviz runs it. Provisional on a busy machine.

    PYTHONPATH=$PWD python benchmarks/verify_curve.py [--models gemma-3-270m,smollm2-135m]
        [--context 256] [--max-n 17] [--repeats 5] [--threads 2] [--dtype float32|bfloat16]
"""

from __future__ import annotations

import argparse

import torch

from specviz.analysis.hardware import verify_costs
from specviz.models import load_model
from specviz.runtime import kernels


def head_times(weight: torch.Tensor, rows: int, repeats: int, stat: str) -> tuple[float, float]:
    """(F.linear, oneDNN) seconds for ``rows`` random rows through ``weight``, interleaved."""
    import statistics
    import time

    x = torch.randn(rows, weight.shape[1], dtype=weight.dtype)
    packed = kernels.pack(weight)  # oneDNN's own layout (as a plan runs it)
    fns = (lambda: torch.nn.functional.linear(x, weight), lambda: kernels._onednn(x, packed, None))
    times: list[list[float]] = [[], []]
    with torch.inference_mode():
        for fn in fns:
            fn()
        for _ in range(repeats):
            for i, fn in enumerate(fns):
                t = time.perf_counter()
                fn()
                times[i].append(time.perf_counter() - t)
    pick = statistics.median if stat == "median" else min
    return pick(times[0]), pick(times[1])


def interleaved_costs(models: dict, context: int, max_n: int, repeats: int) -> dict[str, dict[int, float]]:
    """t(n) medians for several models, every (model, n) in one rotation per repeat."""
    import statistics
    import time

    from specviz.runtime.kv import forward_logits, rollback, session_cache

    gen = torch.Generator().manual_seed(0)
    prompt, new = torch.randint(3, 32_000, (context,), generator=gen), torch.randint(3, 32_000, (max_n,), generator=gen)
    caches = {}
    with torch.inference_mode():
        for name, model in models.items():
            caches[name] = session_cache(model)
            forward_logits(model, prompt, caches[name], 1)
            for n in range(max_n, 0, -1):  # warm every width
                forward_logits(model, new[:n], caches[name], n)
                rollback(caches[name], context)
        times = {name: {n: [] for n in range(1, max_n + 1)} for name in models}
        for _ in range(repeats):
            for n in range(1, max_n + 1):
                for name, model in models.items():
                    t = time.perf_counter()
                    forward_logits(model, new[:n], caches[name], n)
                    times[name][n].append(time.perf_counter() - t)
                    rollback(caches[name], context)
    return {name: {n: statistics.median(v) for n, v in by_n.items()} for name, by_n in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="gemma-3-270m,smollm2-135m")
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--max-n", type=int, default=17)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--stat", choices=("median", "min"), default="median",
                    help="min estimates the quiet cost on a busy machine")
    ap.add_argument("--no-head", action="store_true", help="skip the LM-head kernel table")
    ap.add_argument("--dtype", default="float32", help="float32, bfloat16, or float32,bfloat16 (interleaved)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if "," in args.dtype:
        for name in [m.strip() for m in args.models.split(",") if m.strip()]:
            models = {dt: load_model(name, device="cpu", dtype=dt).model for dt in args.dtype.split(",")}
            costs = interleaved_costs(models, args.context, args.max_n, args.repeats)
            print(f"\n{name}: t(n) ms and v(n), {', '.join(models)} interleaved, {args.context}-position cache, "
                  f"{args.threads} threads, median of {args.repeats}")
            for n in range(1, args.max_n + 1):
                print(f"{n:>3} " + "   ".join(f"{dt} {c[n] * 1e3:7.1f} {c[n] / c[1]:5.2f}" for dt, c in costs.items()))
        return
    for name in [m.strip() for m in args.models.split(",") if m.strip()]:
        lm = load_model(name, device="cpu", dtype=args.dtype)
        costs = verify_costs(lm.model, context=args.context, max_n=args.max_n, repeats=args.repeats, stat=args.stat)
        head = lm.model.get_output_embeddings()
        print(f"\n{name}: forward of n new tokens on a {args.context}-position cache, {args.threads} threads, "
              f"{args.stat} of {args.repeats} (head: {type(head).__name__})")
        print("  n   t(n) ms   v(n)")
        for n, t in costs.seconds.items():
            print(f"{n:>3} {t * 1e3:>9.1f} {costs.v[n]:>6.2f}")
        if not args.no_head and args.dtype == "bfloat16":
            print(f"{name} LM head {tuple(head.weight.shape)} alone (ms): rows, bf16 F.linear, bf16 oneDNN, fp32 F.linear, fp32 oneDNN")
            fp32 = head.weight.detach().float()
            for rows in range(1, args.max_n + 1):
                bf = head_times(head.weight, rows, args.repeats, args.stat)
                fp = head_times(fp32, rows, args.repeats, args.stat)
                print(f"{rows:>3} {bf[0] * 1e3:>9.1f} {bf[1] * 1e3:>7.1f} {fp[0] * 1e3:>9.1f} {fp[1] * 1e3:>7.1f}")
        if args.no_head or not isinstance(head, kernels.PlannedLinear):
            continue
        print(f"{name} LM head {tuple(head.weight.shape)} alone (ms): rows, F.linear, oneDNN, picked")
        for rows in range(1, args.max_n + 1):
            plain, onednn = head_times(head.weight, rows, args.repeats, args.stat)
            picked = head.kernel(rows)
            best = "F.linear" if plain <= onednn else "oneDNN"
            # only these two are timed here: a third kernel picked (packed, K-major, weight-first) is not judged
            flag = "" if picked == best or picked not in ("F.linear", "oneDNN") else "  <- slower kernel picked"
            print(f"{rows:>3} {plain * 1e3:>9.1f} {onednn * 1e3:>7.1f}  {picked}{flag}")


if __name__ == "__main__":
    main()
