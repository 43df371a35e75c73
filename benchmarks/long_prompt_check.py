"""Exactness on a real model past its sliding window: greedy output on one long prompt.

The tests check the static decode step against the ``transformers`` forward on tiny random
models; this checks it on a real one, where it matters most: gemma-3-270m's local layers attend
over a 512-token sliding window, and a long prompt grows the static buffers several times. One
prompt (all of ``benchmarks/prompts/heldout.jsonl`` joined, about 1,850 tokens with the chat
template) is decoded greedily by ``transformers``' ``generate``, by specviz's target-only
decoding and by each proposer; every output must be ``generate``'s, token for token.

    PYTHONPATH=$PWD python benchmarks/long_prompt_check.py [--target gemma-3-270m] [--max-new-tokens 40]
        [--proposer ngram --proposer ngram-tree --proposer draft:gemma-3-270m@int8,vocab=16384]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from specviz import SpeculativeDecoder, autoregressive
from specviz.core.engine import encode_prompt
from specviz.models import load_model
from specviz.proposers.registry import from_spec

PROMPTS = Path(__file__).parent / "prompts" / "heldout.jsonl"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="gemma-3-270m")
    ap.add_argument("--proposer", action="append", help="a proposer spec; repeat for several")
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=40)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    target = load_model(args.target)
    text = " ".join(json.loads(line)["prompt"] for line in PROMPTS.read_text().splitlines() if line.strip())
    ids = encode_prompt(target.tokenizer, text, chat=True)
    with torch.inference_mode():
        want = target.model.generate(torch.tensor([ids]), max_new_tokens=args.max_new_tokens, do_sample=False)[0, len(ids):].tolist()
    print(f"{args.target}: a {len(ids)}-token prompt, {args.max_new_tokens} greedy tokens; equal to generate's?")
    runs = {"target-only": lambda: autoregressive(target, ids, max_new_tokens=args.max_new_tokens)}
    for spec in args.proposer or ["ngram", "ngram-tree", f"draft:{args.target}@int8,vocab=16384"]:
        runs[spec] = lambda spec=spec: SpeculativeDecoder(target, from_spec(spec, target), k=args.k).generate(
            ids, max_new_tokens=args.max_new_tokens)
    ok = True
    for name, run in runs.items():
        same = list(run().token_ids) == want
        ok &= same
        print(f"  {name:<44} {'yes' if same else 'NO'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
