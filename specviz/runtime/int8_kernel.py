"""specviz's own int8 product for a few rows: ``torch.ops.specviz_int8.linear``, built for this CPU.

The int8 draft spends its decode step in 72 one-row products (gemma-3-270m's body, 100 MB of int8
weights). PyTorch's int8 kernels read those weights at 13-20 GB/s on a Zen 4 EPYC, well under what
the float products reach on the same memory: ``quantized::linear_dynamic`` (deprecated upstream) and
``torch._int_mm`` convert or reorder around a product they were not built for at one row
(docs/benchmarks.md). ``int8_kernel.cpp`` is the product a decode step needs: the rows quantized to
uint8 per token (asymmetric, as the packed kernel's), the int8 weight stored blocked for it
(:func:`block`), exact int32 sums on AVX-512 VNNI (plain loops where the compiler cannot target it),
the scales and bias applied in the same pass, the output rows split across torch's threads.

:func:`load` compiles it with ``torch.utils.cpp_extension`` (the C++ toolchain Inductor also uses)
for this machine (``-march=native``), once per CPU, torch version and source text, into
``<cache home>/kernels``; later processes load the built library. Where it cannot be built (no
compiler, no ninja) it returns why, once, and the int8 copies keep PyTorch's kernels. Which kernel
an ``@int8`` model runs is measured on this machine (:func:`specviz.runtime.int8_speed.choose_kernel`).
The same library holds ``torch.ops.specviz_int8.dense``, a float32 product for a few rows that the
body's projections time beside PyTorch's (:mod:`specviz.runtime.projections`); (``screen_kernel.cpp``)
the certified argmax head's screens, bf16 and int8 (:mod:`specviz.runtime.argmax_head`); and
(``layer_kernel.cpp``) ``torch.ops.specviz_int8.layer``: a whole decoder layer of an int8 or planned
float32 body in one call, the static step's ``fused`` runner (:mod:`specviz.runtime.layer_op`). What
the sources share (block shapes, the per-token quantization, the int8 block sums) is ``kernel_parts.h``.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import shutil
import sys
import threading
from pathlib import Path

import torch

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("int8_kernel.cpp")
SOURCES = tuple(SOURCE.with_name(f) for f in ("int8_kernel.cpp", "screen_kernel.cpp", "layer_kernel.cpp"))  # one library
HEADERS = tuple(SOURCE.with_name(f) for f in ("int8_kernel.h", "kernel_parts.h"))  # what the sources share
BLOCK = 64  # outputs a block: the weight is [N/64, K/4, 64, 4] int8 (int8_kernel.cpp)
FLAGS = ("-O3", "-march=native", "-fopenmp")  # this CPU's ISA; OpenMP: at::parallel_for's threads
# torch's own ISA level caps the build's (ATEN_CPU_CAPABILITY=avx2 on an AVX-512 machine emulates an
# AVX2-only CPU: torch's kernels, oneDNN's with ONEDNN_MAX_CPU_ISA=AVX2, and these)
CAPS = {"AVX2": ("-mno-avx512f",), "DEFAULT": ("-mno-avx",)}

_state: dict[str, str | None] = {}
_lock = threading.Lock()


def flags() -> tuple[str, ...]:
    """The compiler's flags: this CPU's ISA (``-march=native``), capped at the level torch runs at."""
    capability = getattr(torch.backends.cpu, "get_cpu_capability", lambda: "?")()
    return FLAGS + CAPS.get(capability, ())


@functools.cache
def _name() -> str:
    """The library's name: a digest of the source, the flags, torch's version and this CPU."""
    from .cpu import machine_id

    text = "".join(f.read_text() for f in (*SOURCES, *HEADERS))
    ident = f"{text}|{flags()}|{torch.__version__}|{machine_id()}"
    return f"specviz_int8_{hashlib.sha256(ident.encode()).hexdigest()[:12]}"


def _ninja_on_path() -> None:
    """Put a ninja on PATH for cpp_extension: the ``ninja`` package's (a dependency), else the system's."""
    if shutil.which("ninja"):
        return
    try:
        import ninja  # noqa: PLC0415 - the PyPI package ships the binary

        os.environ["PATH"] = f"{ninja.BIN_DIR}{os.pathsep}{os.environ.get('PATH', '')}"
    except ImportError:
        bindir = os.path.dirname(sys.executable)  # a venv's bin holds the package's script
        os.environ["PATH"] = f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}"


def _library() -> Path:
    """Where this machine's build of the op lives."""
    from .runners import cache_home

    name = _name()
    return cache_home() / "kernels" / name / f"{name}.so"


def needs_build() -> bool:
    """Whether :func:`load` would compile the op now (about 13 s: a caller may say so first)."""
    if "why" in _state or os.environ.get("SPECVIZ_INT8_KERNEL", "1") in ("0", "packed", "int_mm"):
        return False
    return not _library().is_file()


def load() -> str | None:
    """Build (first time on this machine) and load the op. -> None when ``torch.ops.specviz_int8.linear``
    is ready, else why not (said once in the log; the int8 copies then keep PyTorch's kernels).
    ``SPECVIZ_INT8_KERNEL=0`` turns it off."""
    with _lock:
        if "why" in _state:
            return _state["why"]
        why = None
        if os.environ.get("SPECVIZ_INT8_KERNEL", "1") == "0":
            why = "turned off (SPECVIZ_INT8_KERNEL=0)"
        elif not hasattr(torch.ops.specviz_int8, "linear"):  # not loaded in this process yet
            from torch.utils import cpp_extension

            built = _library()
            name, directory = built.stem, built.parent
            try:
                directory.mkdir(parents=True, exist_ok=True)
                if built.is_file() and not (directory / "lock").exists():  # built, and no build under way
                    torch.ops.load_library(str(built))
                else:
                    _ninja_on_path()
                    log.info("specviz: building the int8 kernel for this CPU (once, into %s)", directory)
                    cpp_extension.load(name=name, sources=[str(f) for f in SOURCES], extra_cflags=list(flags()),
                                       extra_ldflags=["-fopenmp"], build_directory=str(directory),
                                       is_python_module=False, verbose=False)
            except Exception as e:  # noqa: BLE001 - no compiler, no ninja, a failed build: PyTorch's kernels
                why = f"could not build it here ({type(e).__name__}: {str(e).strip().splitlines()[-1][:160] if str(e).strip() else ''})"
        if why is None:
            _register_fake()
        else:
            log.warning("specviz: specviz's int8 kernel is not used: %s", why)
        _state["why"] = why
        return why


def _register_fake() -> None:
    """The ops' shape functions, for torch.compile and torch.export (the ``compile`` runner)."""
    try:
        @torch.library.register_fake("specviz_int8::linear")
        def _(x, w, scale, wsum, bias, inv_smooth, n):  # noqa: ANN001 - the op's schema
            return x.new_empty(x.shape[0], n)

        @torch.library.register_fake("specviz_int8::dense")
        def _(x, w, bias, n):  # noqa: ANN001 - the op's schema
            return x.new_empty(x.shape[0], n)
    except RuntimeError:  # registered already (a second load in this process)
        pass


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
