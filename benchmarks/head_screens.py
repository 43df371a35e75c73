"""The certified argmax head's two screens side by side on a model's own hidden states, per width.

    PYTHONPATH=$PWD python benchmarks/head_screens.py [--model gemma-3-270m]
        [--prompts benchmarks/prompts/code.jsonl --set fresh-zen4n] [--widths 1,2,3,5,9] [--repeats 8] [--threads 2]

The hidden states are the model's own on the prompts' last 20 positions each (text, as a decode
step sees it). Per width, interleaved in each round: the full float32 head's argmax (on its
measured kernel, specviz.runtime.cpu), the bf16
screen's certified argmax and the int8 screen's (specviz.runtime.argmax_head), medians after the
first round; then the int8 screen's survivors per row and whether every argmax equals the full
head's. Provisional on a busy machine: compare the columns, not runs.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from specviz.models import load_model
from specviz.prompts import load_prompts
from specviz.runtime import argmax_head


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="gemma-3-270m")
    ap.add_argument("--prompts", default="benchmarks/prompts/code.jsonl")
    ap.add_argument("--set", default=None, help="only this named set of the file (default: fresh-zen4n of code.jsonl)")
    ap.add_argument("--widths", default="1,2,3,5,9")
    ap.add_argument("--repeats", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    sets = [args.set] if args.set else (["fresh-zen4n"] if args.prompts == ap.get_default("prompts") else None)
    torch.set_num_threads(args.threads)
    lm = load_model(args.model)
    weight = lm.model.get_output_embeddings().weight.detach()  # [V, d]
    screens = {"bf16": argmax_head.build(weight), "int8": argmax_head.build_int8(weight)}
    with torch.inference_mode():
        rows = [lm.model.model(input_ids=lm.tokenizer(r.prompt, return_tensors="pt").input_ids).last_hidden_state[0, -20:]
                for r in load_prompts(args.prompts, limit=2, sets=sets)]
        hidden = torch.cat(rows).float().contiguous()  # [40, d]
        full = (hidden @ weight.T).max(dim=-1).indices  # [40]
        same = all(torch.equal(s.argmax(hidden[i : i + 5]), full[i : i + 5])
                   for s in screens.values() for i in range(0, len(hidden), 5))
        kept = [len(torch.ops.specviz_int8.screen8_top(hidden[i : i + 1], screens["int8"].blocked, screens["int8"].scale,
                                                       screens["int8"].wsum, screens["int8"].err, screens["int8"].wn,
                                                       weight.shape[0], 1 << 30)[1]) for i in range(len(hidden))]
        print(f"{args.model}: {len(hidden)} positions of {args.prompts}; every screened argmax the full head's: {same}")
        print(f"int8 screen survivors per row: median {statistics.median(kept):.0f}, range {min(kept)}-{max(kept)}")
        head = lm.model.get_output_embeddings()  # on the kernel measured fastest per width where it loaded
        ways = {"full head": lambda h: head(h).max(dim=-1).indices,
                **{f"{k} screen": (lambda h, s=s: s.argmax(h)) for k, s in screens.items()}}
        print("rows  " + "  ".join(f"{name:>12}" for name in ways))
        for n in (int(w) for w in args.widths.split(",")):
            h = hidden[:n].contiguous()
            times: dict[str, list[float]] = {name: [] for name in ways}
            for i in range(args.repeats + 1):
                for name, way in (ways.items() if i % 2 else reversed(ways.items())):
                    t = time.perf_counter()
                    way(h)
                    if i:
                        times[name].append((time.perf_counter() - t) * 1e3)
            print(f"{n:>4}  " + "  ".join(f"{statistics.median(v):>9.2f} ms" for v in times.values()))


if __name__ == "__main__":
    main()
