"""How close is an int8 self-draft to its float32 target, and what does a draft token cost?

For each candidate quantization of a built-in model, on held-out prompts written for this script
(not the bundled Spec-Bench dev prompts, which calibrate the smoothing), it prints the next-token
overlap sum_x min(p(x), q(x)) with the float32 model at every position of a greedy float32
continuation, two ways:
- batched: the prompt prefilled in one forward, then the continuation fed token by token (what a
  draft model's cache sees);
- token: every token fed one at a time;
and the ms per decode token of the candidate beside a float32 decode step, interleaved in one
process (median; provisional on a busy machine).

    PYTHONPATH=$PWD python benchmarks/int8_quality.py [--model gemma-3-270m] [--candidates a,b]
        [--prompts 36] [--token-prompts 12] [--new 6] [--threads 2]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch

from specviz.core.engine import encode_prompt
from specviz.models import load_model
from specviz.models.int8 import Int8Options, quantize_int8
from specviz.runtime.kv import forward_logits, new_cache

HELD_OUT = [
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "import numpy as np\n\ndef normalize(v):\n    return",
    "SELECT name, COUNT(*) FROM orders WHERE",
    "for i in range(10):\n    if i % 2 == 0:\n        print(",
    "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, item):",
    "<html>\n  <head>\n    <title>My page</title>\n  </head>\n  <body>\n",
    "git commit -m \"Fix the off-by-one error in",
    "Shopping list:\n1. Eggs\n2. Milk\n3.",
    "The three primary colors are red, blue and",
    "Days of the week: Monday, Tuesday, Wednesday,",
    "Steps to bake bread:\n- Mix flour and water\n- Add yeast\n-",
    "Alice: Hi Bob, how was your weekend?\nBob:",
    "Customer: My order hasn't arrived yet.\nAgent: I'm sorry to hear that.",
    "Q: What is the capital of France?\nA:",
    "Teacher: Who wrote Romeo and Juliet?\nStudent:",
    "12 + 15 = 27\n8 * 7 =",
    "If x + 3 = 10, then x =",
    "The derivative of x^2 is",
    "Let f(n) = 2n + 1. Then f(4) =",
    "The square root of 144 is",
    "La capitale de l'Italie est",
    "Der Hund läuft schnell über die",
    "El sol sale por el este y se pone por el",
    "東京は日本の",
    "Il était une fois une petite fille qui",
    "Once upon a time, in a small village by the sea,",
    "The quick brown fox jumps over the",
    "Water boils at 100 degrees",
    "In 1969, Neil Armstrong became the first person to",
    "Photosynthesis is the process by which plants",
    "To be or not to be, that is the",
    "Dear Sir or Madam,\n\nI am writing to",
    "Breaking news: scientists have discovered",
    "The mitochondria is the powerhouse of the",
    "My favourite recipe for pancakes uses flour, eggs,",
    "Roses are red, violets are blue,",
]
CHAT = {"Q: What is the capital of France?\nA:", "Alice: Hi Bob, how was your weekend?\nBob:"}

CANDIDATES = {  # the options quantize_int8 still has; the ones it dropped are compared in docs/results-log.md
    "unsmoothed": Int8Options(smooth_alpha=None),
    "smooth0.8": Int8Options(smooth_alpha=0.8),
    "default Int8Options() (chosen)": Int8Options(),
    "kernel blocked (specviz's own)": Int8Options(kernel="blocked"),
}


def sequences(fp, prompts, new_tokens):
    """Per prompt: (prompt ids, greedy float32 continuation, reference probabilities [new+1, V])."""
    out = []
    with torch.inference_mode():
        for text in prompts:
            ids = encode_prompt(fp.tokenizer, text, chat=text in CHAT)
            cache = new_cache(fp.model)
            logits = forward_logits(fp.model, torch.tensor(ids), cache, 1)[0]
            cont = []
            for _ in range(new_tokens):
                cont.append(int(logits.argmax()))
                logits = forward_logits(fp.model, torch.tensor(cont[-1:]), cache, 1)[0]
            full = torch.tensor(ids + cont)
            ref = fp.model(input_ids=full[None]).logits[0, len(ids) - 1 :].float().softmax(-1)  # [new+1, V]
            out.append((ids, cont, ref))
    return out


@torch.inference_mode()
def candidate_probs(model, ids, cont, batched: bool) -> torch.Tensor:
    """The candidate's next-token probabilities at the same positions as the reference."""
    cache = new_cache(model)
    rows = []
    if batched:
        rows.append(forward_logits(model, torch.tensor(ids), cache, 1)[0])
    else:
        for t in ids:
            logits = forward_logits(model, torch.tensor([t]), cache, 1)[0]
        rows.append(logits)
    for t in cont:
        rows.append(forward_logits(model, torch.tensor([t]), cache, 1)[0])
    return torch.stack(rows).float().softmax(-1)  # [new+1, V]


def overlaps(model, seqs, batched: bool) -> list[float]:
    vals = []
    for ids, cont, ref in seqs:
        q = candidate_probs(model, ids, cont, batched)
        vals.extend(torch.minimum(ref, q).sum(-1).tolist())
    return vals


@torch.inference_mode()
def decode_ms(models: dict, ids: list[int], reps: int = 9, stat=statistics.median) -> dict[str, float]:
    """Median (or ``stat``) ms of one decode-token forward on a cache of len(ids) positions, models interleaved."""
    caches = {}
    for name, m in models.items():
        caches[name] = new_cache(m)
        forward_logits(m, torch.tensor(ids), caches[name], 1)
    times = {name: [] for name in models}
    from specviz.runtime.kv import rollback

    for _ in range(reps):
        for name, m in models.items():
            t = time.perf_counter()
            forward_logits(m, torch.tensor([ids[-1]]), caches[name], 1)
            times[name].append(time.perf_counter() - t)
            rollback(caches[name], len(ids))
    return {name: stat(v) * 1e3 for name, v in times.items()}


def build(fp, options):
    return quantize_int8(copy.deepcopy(fp.model), fp.tokenizer, options)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="gemma-3-270m")
    ap.add_argument("--candidates", default="", help="comma-separated names (default: all)")
    ap.add_argument("--prompts", type=int, default=len(HELD_OUT))
    ap.add_argument("--token-prompts", type=int, default=12, help="prompts also fed one token at a time")
    ap.add_argument("--new", type=int, default=6, help="continuation tokens (positions = new + 1 per prompt)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-time", action="store_true", help="overlap only (skip the ms/token columns)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    import warnings

    warnings.simplefilter("ignore")
    fp = load_model(args.model, device="cpu", dtype="float32")
    names = [n.strip() for n in args.candidates.split(",") if n.strip()] or list(CANDIDATES)
    seqs = sequences(fp, HELD_OUT[: args.prompts], args.new)
    print(f"{args.model}: {len(seqs)} held-out prompts x {args.new + 1} positions (batched), "
          f"{min(args.token_prompts, len(seqs))} prompts token by token; {args.threads} threads")
    print(f"{'candidate':<40} {'batched mean':>12} {'min':>6} {'token mean':>10} {'min':>6} {'ms/token':>9} {'fp32 ms':>8} {'ratio':>6}")
    for name in names:
        if name not in CANDIDATES:
            raise SystemExit(f"unknown candidate {name!r}; choose from {', '.join(CANDIDATES)}")
        t0 = time.perf_counter()
        model = build(fp, CANDIDATES[name])
        build_s = time.perf_counter() - t0
        b = overlaps(model, seqs, batched=True)
        t = overlaps(model, seqs[: args.token_prompts], batched=False) if args.token_prompts else [float("nan")]
        ms = {"fp32": float("nan"), "cand": float("nan")}
        if not args.no_time:
            ms = decode_ms({"fp32": fp.model, "cand": model}, seqs[0][0] + seqs[0][1])
        print(f"{name:<40} {statistics.mean(b):>12.3f} {min(b):>6.3f} {statistics.mean(t):>10.3f} {min(t):>6.3f} "
              f"{ms['cand']:>9.1f} {ms['fp32']:>8.1f} {ms['cand'] / ms['fp32']:>6.2f}   (built in {build_s:.0f} s)", flush=True)
        del model


if __name__ == "__main__":
    main()
