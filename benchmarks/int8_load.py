"""How long ``load_model("gemma-3-270m@int8")`` takes after a start, each case in a fresh process.

Cases (``--cases``, in order):

- ``alone``: the int8 copy is the process's first model (imports done before the clock starts;
  the float model's load from the converted copy is inside the time);
- ``beside``: the float target is loaded first (as the playground's rejection tour has it) and
  only the int8 copy's load is timed.

Each case runs as the code in ``--tree`` (default: this checkout) has it, so the time before the
disk cache is the same command on an older tree:

    git archive <commit> specviz | tar -x -C /tmp/before
    PYTHONPATH=$PWD python benchmarks/int8_load.py --tree /tmp/before    # quantized at every start
    PYTHONPATH=$PWD python benchmarks/int8_load.py                       # read from the disk cache

The first run on this tree writes the cache file (``cache_dir()/int8/``) and is reported as such;
run it twice to see a later start.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

CHILD = r"""
import json, os, sys, time
import specviz, specviz.models
from specviz.models import load_model
name = sys.argv[1]
if sys.argv[2] == "beside":
    load_model(name.removesuffix("@int8"))
said = []
t0 = time.perf_counter()
lm = load_model(name, progress=lambda m: said.append([round(time.perf_counter() - t0, 2), m]))
print(json.dumps({"seconds": time.perf_counter() - t0, "said": said, "load": os.getloadavg(),
                  "specviz": specviz.__file__}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="gemma-3-270m@int8")
    ap.add_argument("--cases", default="alone,beside", help="comma-separated: alone, beside")
    ap.add_argument("--tree", default=str(Path(__file__).resolve().parents[1]),
                    help="the directory holding the specviz package to time (default: this checkout)")
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from first_run_noise import cpu_line

    print(f"{args.model}; code from {args.tree}; {cpu_line()}; load average before {os.getloadavg()[0]:.1f}")
    env = {**os.environ, "PYTHONPATH": str(Path(args.tree).resolve())}
    for case in args.cases.split(","):
        t = time.perf_counter()
        out = subprocess.run([sys.executable, "-c", CHILD, args.model, case.strip()], env=env, cwd=args.tree,
                             capture_output=True, text=True, check=True).stdout
        r = json.loads(out.strip().splitlines()[-1])
        assert Path(r["specviz"]).resolve().is_relative_to(Path(args.tree).resolve()), r["specviz"]
        how = "read from the disk cache" if any("disk cache" in m for _, m in r["said"]) else "quantized"
        print(f"{case:7s} {r['seconds']:6.2f} s  ({how}; process {time.perf_counter() - t:.1f} s; "
              f"load average {r['load'][0]:.1f}); stages: " + "; ".join(f"{s} s {m[:40]}" for s, m in r["said"]))


if __name__ == "__main__":
    main()
