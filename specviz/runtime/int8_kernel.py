"""specviz's native kernels, built for this CPU: ``int8_kernel.cpp`` (the int8 product a decode step
needs on a few rows: rows quantized to uint8 per token, the weight blocked for it by :func:`block`,
exact int32 sums; and ``dense``, :mod:`specviz.runtime.dense_kernel`), ``screen_kernel.cpp`` (the
argmax head's screens) and ``layer_kernel.cpp`` (:mod:`specviz.runtime.layer_op`), one library
compiled as one unit (``all_kernels.cpp``: PyTorch's headers parsed once); ``kernel_parts.h`` holds
what they share.

:func:`load` compiles it with ``torch.utils.cpp_extension`` (``-march=native``, capped at torch's
ISA level) once per CPU, torch version and source text, into
``<cache home>/kernels/specviz_kernels_<digest>.so``, through :mod:`specviz.native` (a build that
cannot hang on a killed one's leftovers). Where nothing can be built, :func:`load` says why once
and PyTorch's kernels serve.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import threading
from pathlib import Path

import torch

from .. import native, settings

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("int8_kernel.cpp")
SOURCES = tuple(SOURCE.with_name(f) for f in ("int8_kernel.cpp", "screen_kernel.cpp", "layer_kernel.cpp"))  # one library
HEADERS = tuple(SOURCE.with_name(f) for f in ("int8_kernel.h", "kernel_parts.h"))  # what the sources share
UNIT = SOURCE.with_name("all_kernels.cpp")  # what is compiled: the sources, included in one translation unit
BLOCK = 64  # outputs a block: the weight is [N/64, K/4, 64, 4] int8 (int8_kernel.cpp)
PREFIX = "specviz_kernels_"  # the library: every op the sources define, not only the int8 product
WAIT_S = 600.0  # the longest a process waits for another's build (15-200 s on a busy 2-core box): then PyTorch's kernels

_state: dict[str, str | None] = {}
_lock = threading.Lock()


@functools.cache
def _name() -> str:
    """The library's name: a digest of the source, the flags, torch's version and this CPU."""
    from .cpu import machine_id

    text = "".join(f.read_text() for f in (UNIT, *SOURCES, *HEADERS))
    ident = f"{text}|{native.flags()}|{torch.__version__}|{machine_id()}"
    return f"{PREFIX}{hashlib.sha256(ident.encode()).hexdigest()[:12]}"


def _library(options: settings.Options | None = None) -> Path:
    """Where this machine's build of the ops lives: ``<cache home>/kernels/<name>.so``, present only whole."""
    from .state import cache_home

    name = _name()
    return cache_home(options) / "kernels" / f"{name}.so"


def needs_build(options: settings.Options | None = None) -> bool:
    """Whether :func:`load` would compile the op now (about 13 s: a caller may say so first)."""
    options = options or settings.options()  # the native build has no model: the environment's without
    if "why" in _state or options.int8_kernel in ("0", "int_mm"):
        return False
    return not _library(options).is_file() and native.toolchain() is None  # no compiler: nothing will be built


def load(options: settings.Options | None = None) -> str | None:
    """Build (first time on this machine) and load the ops -> None when ready, else why not (said
    once in the log). ``SPECVIZ_INT8_KERNEL=0`` turns it off."""
    with _lock:
        if "why" in _state:
            return _state["why"]
        why = None
        options = options or settings.options()  # the native build has no model: the environment's without
        if options.int8_kernel == "0":
            why = "turned off (SPECVIZ_INT8_KERNEL=0)"
        elif not hasattr(torch.ops.specviz_int8, "linear"):  # not loaded in this process yet
            built = _library(options)
            try:
                built.parent.mkdir(parents=True, exist_ok=True)
                why = native.load_or_build(built, (UNIT,), WAIT_S)
            except Exception as e:  # noqa: BLE001 - a failed build, an unwritable cache: PyTorch's kernels
                text = str(e).strip()
                why = f"could not build them here ({type(e).__name__}: {text.splitlines()[-1][:160] if text else ''})"
        if why is not None:
            log.warning("specviz: no native kernels, PyTorch's kernels serve: %s", why)
        _state["why"] = why
        return why


def block(ints: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """An int8 weight [N, K] -> (its blocked copy [ceil(N/64), ceil(K/4), 64, 4], zero-padded, and
    its row sums [N] int32, which the zero points multiply)."""
    n, k = ints.shape
    np_, kp = -(-n // BLOCK) * BLOCK, -(-k // 4) * 4
    padded = torch.zeros(np_, kp, dtype=torch.int8)
    padded[:n, :k] = ints
    blocked = padded.view(np_ // BLOCK, BLOCK, kp // 4, 4).permute(0, 2, 1, 3).contiguous()  # [N/64, K/4, 64, 4]
    return blocked, ints.sum(dim=1, dtype=torch.int32).contiguous()


def linear(x: torch.Tensor, blocked: torch.Tensor, scale: torch.Tensor, wsum: torch.Tensor,
           bias: torch.Tensor | None, inv_smooth: torch.Tensor | None, out_features: int) -> torch.Tensor:
    """x [rows, in] float32 -> [rows, out] float32 (the op; :func:`load` first)."""
    return torch.ops.specviz_int8.linear(x, blocked, scale, wsum, bias, inv_smooth, out_features)
