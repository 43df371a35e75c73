"""Measure llama.cpp's speculative decoding on gemma-3-270m with ``specviz bench --remote``.

Builds llama-server once (cached), starts three servers on 127.0.0.1 (n-gram speculation, the
same GGUF as its own draft model, and no speculation as the baseline), runs the remote benchmark
over the bundled prompts and stops them:

    python benchmarks/remote_llama.py --limit 8 --max-new-tokens 64 --json benchmarks/results/remote-llama.json
    python benchmarks/remote_llama.py --prompts benchmarks/prompts/heldout.jsonl --limit 6 --max-new-tokens 64
"""

from __future__ import annotations

import argparse
import sys

from specviz import cli
from specviz.remote import llama_server as L


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--limit", default="8")
    p.add_argument("--prompts", default=None, help="a JSONL prompt file (default: the bundled Spec-Bench dev prompts)")
    p.add_argument("--max-new-tokens", default="64")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", default=None)
    p.add_argument("--csv", default=None)
    p.add_argument("--html", default=None)
    args = p.parse_args()
    servers = []
    try:
        for spec in ("ngram", "draft", "none"):
            servers.append(L.start(spec, threads=args.threads))
        argv = ["bench", "--remote", f"ngram={servers[0].url}", "--remote", f"draft={servers[1].url}",
                "--baseline-remote", servers[2].url, "--limit", args.limit, "--max-new-tokens", args.max_new_tokens]
        if args.prompts:
            argv += ["--prompts", args.prompts]
        for flag in ("json", "csv", "html"):
            if getattr(args, flag):
                argv += [f"--{flag}", getattr(args, flag)]
        print("$ specviz " + " ".join(argv), file=sys.stderr)
        for s in servers:
            print(f"  {s.spec}: {' '.join(s.args[1:])}", file=sys.stderr)
        return cli.main(argv)
    finally:
        for s in servers:
            s.stop()


if __name__ == "__main__":
    sys.exit(main())
