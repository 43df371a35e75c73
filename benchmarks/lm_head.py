"""Time the built-in gemma-3-270m's LM head with F.linear and oneDNN at 1..17 rows.

    python benchmarks/lm_head.py          # SPECVIZ_THREADS=2 by default

The numbers behind :mod:`specviz.runtime.cpu`'s docstring (which kernel verifying k drafts should use).
"""

from __future__ import annotations

import os

import torch

from specviz.models import load_model
from specviz.runtime.cpu import time_head


def main() -> None:
    torch.set_num_threads(int(os.environ.get("SPECVIZ_THREADS", "2")))
    os.environ["SPECVIZ_CPU_HEAD"] = "0"
    weight = load_model("gemma-3-270m").model.get_output_embeddings().weight
    print(f"gemma-3-270m LM head {tuple(weight.shape)}, {torch.get_num_threads()} threads (median of 5, ms)")
    print("rows  F.linear  oneDNN")
    for rows in (1, 2, 3, 4, 5, 9, 17):
        plain, onednn = time_head(weight, rows, repeats=5)
        print(f"{rows:>4}  {plain * 1e3:8.1f}  {onednn * 1e3:6.1f}")


if __name__ == "__main__":
    main()
