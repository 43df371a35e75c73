"""A sixth CPU kernel for a large fp32 LM head: Inductor's C++ GEMM on a frozen copy of the weight.

``torch.compile`` with ``freezing`` and ``max_autotune`` (C++ GEMM backend) treats a module's
weight as a constant, lays it out in cache-sized blocks once, and runs ``F.linear`` on it as a
generated C++ micro-GEMM (``CppMicroGemmFP32Vec``), the path PyTorch's x86 Inductor builds for LLM
decoding on CPUs. Few rows is where it pays: every row's products are made from one read of each
block. gemma-3-270m's 262,144 x 640 head on a Zen 4 EPYC, 2 threads (a one-off script, min of 3
rounds of 7): 15 ms at 1 row, 14-17 at 2, 22 at 3, 20 at 5, 52-54 at 8-9; the other kernels' best
there took 17-23, 32, 35 ms at 1-3 rows. :mod:`specviz.runtime.cpu` times it beside them and keeps
it only at the widths where it is clearly the fastest.

Its costs, paid once per process when a plan uses it: a compile (about 18 s the first time on a
machine, 6-10 s once Inductor's on-disk cache holds it; one graph for one row, one for any wider
width) and the blocked copy of the weight. It needs a C++ compiler; :func:`frozen_gemm` returns
None where building it fails or ``SPECVIZ_INDUCTOR_GEMM=0``, and the head then runs its other kernels.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref

import torch
import torch.nn.functional as F

from .. import settings

log = logging.getLogger(__name__)

# Inductor's settings for these graphs only (patched around each call: never left on for others)
CONFIG = {"freezing": True, "max_autotune": True, "max_autotune_gemm_backends": "CPP,ATEN"}
_LOCK = threading.Lock()  # config.patch sets process-global settings: one call at a time


class _Frozen(torch.nn.Module):
    def __init__(self, weight: torch.Tensor):
        super().__init__()
        self.weight = torch.nn.Parameter(weight.detach(), requires_grad=False)  # the same storage: no copy

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [rows, in] -> [rows, out]
        return F.linear(x, self.weight)


class FrozenGemm:
    """``F.linear(x, weight)`` for x [rows, in] through Inductor's C++ GEMM on a frozen ``weight``
    [out, in] (fp32, no bias). Compiled on its first call of each kind (one row; wider: one graph
    of dynamic width); :meth:`warm` compiles both now."""

    def __init__(self, weight: torch.Tensor):
        self.shape = tuple(weight.shape)
        self._compiled = torch.compile(_Frozen(weight), dynamic=True)
        self.compile_s = 0.0

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        outside = not torch.is_inference_mode_enabled()
        # always an inference tensor in: a graph is guarded on its input's dispatch keys, and an
        # ordinary tensor (under no_grad, as transformers' generate runs) would compile two more
        # every head is a graph or two of the same code object: Dynamo's recompile limit raised for
        # these calls only, as Inductor's config is patched for them only
        with _LOCK, torch._inductor.config.patch(CONFIG), torch._dynamo.config.patch(recompile_limit=64), torch.inference_mode():
            y = self._compiled(x if x.is_inference() else x.clone())  # [rows, out]
        return y.clone() if outside else y  # an ordinary tensor back for a caller outside inference mode

    def warm(self) -> float:
        """Compile for one row and for wider inputs now; -> seconds spent."""
        t = time.perf_counter()
        with torch.inference_mode():
            for rows in (1, 2):
                self(torch.zeros(rows, self.shape[1]))
        spent = time.perf_counter() - t
        self.compile_s += spent
        return spent


def disabled() -> bool:
    """``SPECVIZ_INDUCTOR_GEMM=0`` (or false/no/off): never build it (a plan that chose it runs its next best kernels)."""
    return settings.turned_off("SPECVIZ_INDUCTOR_GEMM")


_built: dict[int, tuple[weakref.ref, FrozenGemm | None]] = {}  # by id(weight), dropped when the weight is freed


def frozen_gemm(weight: torch.Tensor) -> FrozenGemm | None:
    """The compiled kernel of an fp32 ``weight`` (built and warmed once per weight in this process),
    or None for another dtype or where it cannot be built here (no C++ compiler, an Inductor error:
    said once in the log)."""
    if weight.dtype != torch.float32 or disabled():
        return None
    found = _built.get(id(weight))
    if found is not None and found[0]() is weight:
        return found[1]
    try:
        gemm: FrozenGemm | None = FrozenGemm(weight)
        spent = gemm.warm()
        log.info("specviz: compiled Inductor's C++ GEMM for the %dx%d head in %.1f s", *gemm.shape, spent)
    except Exception as e:  # noqa: BLE001 -- Inductor raises many kinds (a compiler missing, a lowering error)
        log.warning("specviz: no Inductor GEMM for the %dx%d head (%s: %s)", *weight.shape, type(e).__name__, e)
        gemm = None
    _built[id(weight)] = (weakref.ref(weight), gemm)
    weakref.finalize(weight, _built.pop, id(weight), None)
    return gemm


__all__ = ["CONFIG", "FrozenGemm", "disabled", "frozen_gemm"]
