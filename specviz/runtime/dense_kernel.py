"""specviz's own float32 product for a few rows, ``torch.ops.specviz_int8.dense`` (in
``int8_kernel.cpp``, built and loaded by :mod:`specviz.runtime.int8_kernel`), the batch-invariant
kernel of :mod:`specviz.runtime.kernels`' table.

The weight is blocked [ceil(out/16), in, 16]: 16 outputs a 64-byte step over every input, streamed
once for up to 12 rows (AVX-512 where the compiler targets it, plain loops elsewhere). Each output
sums its inputs in order in one chain whatever the width, so a row gets the same bits in a one-row
decode step and in a nine-row verify pass.
"""

from __future__ import annotations

import torch

__all__ = ["available", "block", "dense"]


def available() -> bool:
    """Whether specviz's own float32 product (``torch.ops.specviz_int8.dense``) is built and loaded here."""
    from . import int8_kernel

    return int8_kernel.load() is None


def block(weight: torch.Tensor) -> torch.Tensor | None:
    """An fp32 weight [out, in] blocked for specviz's own product, [ceil(out/16), in, 16] (zero-padded:
    16 outputs a 64-byte step over every input), or None where the op cannot be built here."""
    if weight.dtype != torch.float32 or not available():
        return None
    out, k = weight.shape
    padded = torch.zeros(-(-out // 16) * 16, k)
    padded[:out] = weight.detach()
    return padded.view(-1, 16, k).permute(0, 2, 1).contiguous()


def dense(x: torch.Tensor, blocked: torch.Tensor, bias: torch.Tensor | None, out: int) -> torch.Tensor:
    """x [n, in] @ W^T (+ bias) -> [n, out] through specviz's own float32 product on W's blocked copy:
    each output summed over k in order in one chain, so a row gets the same bits at every width."""
    return torch.ops.specviz_int8.dense(x, blocked, bias, out)
