"""specviz's native kernels, built for this CPU: ``int8_kernel.cpp`` (the int8 product a decode step
needs on a few rows: rows quantized to uint8 per token, the weight blocked for it by :func:`block`,
exact int32 sums; and ``dense``, :mod:`specviz.runtime.dense_kernel`), ``screen_kernel.cpp`` (the
argmax head's screens) and ``layer_kernel.cpp`` (:mod:`specviz.runtime.layer_op`), one library;
``kernel_parts.h`` holds what they share.

:func:`load` compiles it with ``torch.utils.cpp_extension`` (``-march=native``, capped at torch's
ISA level) once per CPU, torch version and source text, into
``<cache home>/kernels/specviz_kernels_<digest>.so``. cpp_extension waits forever on the ``lock`` a
killed build leaves, so each build runs in a fresh ``<name>.build-*`` directory and ``os.replace``s
the library into place (whole or absent); another process waits for it at most :data:`WAIT_S`, and
a build directory whose process is gone or idle for :data:`STALE_S` is removed. Where nothing can
be built, :func:`load` says why once and PyTorch's kernels serve.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import shutil
import socket
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from .. import settings

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("int8_kernel.cpp")
SOURCES = tuple(SOURCE.with_name(f) for f in ("int8_kernel.cpp", "screen_kernel.cpp", "layer_kernel.cpp"))  # one library
HEADERS = tuple(SOURCE.with_name(f) for f in ("int8_kernel.h", "kernel_parts.h"))  # what the sources share
BLOCK = 64  # outputs a block: the weight is [N/64, K/4, 64, 4] int8 (int8_kernel.cpp)
FLAGS = ("-O3", "-march=native", "-fopenmp")  # this CPU's ISA; OpenMP: at::parallel_for's threads
# torch's ISA level caps the build's (ATEN_CPU_CAPABILITY=avx2 emulates an AVX2-only CPU)
CAPS = {"AVX2": ("-mno-avx512f",), "DEFAULT": ("-mno-avx",)}
PREFIX = "specviz_kernels_"  # the library: every op the sources define, not only the int8 product
WAIT_S = 600.0  # the longest a process waits for another's build (15-200 s on a busy 2-core box): then PyTorch's kernels
STALE_S = 900.0  # a build directory nothing was written to for this long was left by a killed build
POLL_S = 0.5

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
    return f"{PREFIX}{hashlib.sha256(ident.encode()).hexdigest()[:12]}"


def _ninja_on_path() -> None:
    """Put a ninja on PATH for cpp_extension: the ``ninja`` package's (a dependency), else the system's."""
    if shutil.which("ninja"):
        return
    try:
        import ninja  # noqa: PLC0415 - the PyPI package ships the binary

        settings.put_on_path(ninja.BIN_DIR)
    except ImportError:
        bindir = os.path.dirname(sys.executable)  # a venv's bin holds the package's script
        settings.put_on_path(bindir)


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
    return not _library(options).is_file() and toolchain() is None  # no compiler: nothing will be built


def toolchain() -> str | None:
    """Why nothing can be built here (no C++ compiler, no ninja on PATH), or None. Asked before a
    build: cpp_extension would otherwise fail later and in many words."""
    cxx = settings.foreign("CXX") or "c++"  # what cpp_extension runs
    if shutil.which(cxx) is None:
        return f"no C++ compiler on PATH ({cxx})"
    _ninja_on_path()
    return None if shutil.which("ninja") else "no ninja on PATH (pip install ninja)"


# -- build directories: one per build, beside the library -----------------------------------------


@dataclass(frozen=True)
class BuildDir:
    """A build directory under kernels/ (``<name>.build-*``, or an older layout's with a ``lock``):
    its maker's host and pid (where it says) and seconds since anything in it changed."""

    path: Path
    host: str | None
    pid: int | None
    idle_s: float


def _idle_s(path: Path, now: float) -> float:
    """Seconds since the directory or anything in it last changed (a compiler writing its objects counts)."""
    try:
        stamps = [path.stat().st_mtime, *(p.stat().st_mtime for p in path.iterdir())]
    except OSError:  # removed meanwhile
        return 0.0
    return max(0.0, now - max(stamps))


def build_dirs(kernels: Path, now: float | None = None) -> list[BuildDir]:
    """Every build directory under ``kernels`` (finished or not, live or not)."""
    now = time.time() if now is None else now
    found = []
    for path in sorted(kernels.iterdir()) if kernels.is_dir() else ():
        if not path.is_dir() or not (".build-" in path.name or (path / "lock").exists()):
            continue
        try:
            owner = json.loads((path / "owner.json").read_text())
        except (OSError, ValueError):
            owner = {}
        pid = owner.get("pid")
        found.append(BuildDir(path, owner.get("host"), pid if isinstance(pid, int) else None, _idle_s(path, now)))
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # someone else's process: alive
        return True
    return True


def stale(build: BuildDir, host: str | None = None, stale_s: float | None = None) -> str | None:
    """Why ``build`` is a killed build's leftover (its process is gone from this host; nothing
    written for ``stale_s`` seconds), or None while it may still be running."""
    host = socket.gethostname() if host is None else host
    if build.pid is not None and build.host == host and not _alive(build.pid):
        return f"its process {build.pid} is gone"
    limit = STALE_S if stale_s is None else stale_s
    return f"nothing written for {build.idle_s:.0f} s" if build.idle_s > limit else None


def clear_stale(kernels: Path) -> list[BuildDir]:
    """Remove the stale build directories under ``kernels`` (each said in the log); -> the live ones."""
    live = []
    for build in build_dirs(kernels):
        why = stale(build)
        if why is None:
            live.append(build)
            continue
        log.warning("specviz: removing %s, a native build that did not finish (%s)", build.path, why)
        shutil.rmtree(build.path, ignore_errors=True)
    return live


def _build(built: Path) -> None:
    """Compile the ops in a fresh directory beside ``built``, load them, move the library into place."""
    from torch.utils import cpp_extension

    name = built.stem
    work = Path(tempfile.mkdtemp(prefix=f"{name}.build-", dir=built.parent))
    try:
        (work / "owner.json").write_text(json.dumps({"host": socket.gethostname(), "pid": os.getpid()}))
        log.info("specviz: building specviz's native kernels for this CPU (once, in %s)", work)
        t = time.perf_counter()
        cpp_extension.load(name=name, sources=[str(f) for f in SOURCES], extra_cflags=list(flags()),
                           extra_ldflags=["-fopenmp"], build_directory=str(work), is_python_module=False,
                           verbose=False)  # loads it too
        os.replace(work / built.name, built)  # whole or not at all, for every other process
        log.info("specviz: built %s in %.0f s", built, time.perf_counter() - t)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _load_or_build(built: Path, wait_s: float) -> str | None:
    """Load the library at ``built``, building it first where no other process is; -> None, or why not."""
    deadline = time.monotonic() + wait_s
    said = False
    while True:
        if built.is_file():
            torch.ops.load_library(str(built))
            log.info("specviz: native kernels loaded from %s", built)
            return None
        live = clear_stale(built.parent)
        mine = [b for b in live if b.path.name.startswith(built.stem)]
        if not mine:
            why = toolchain()
            if why is None:
                _build(built)
            return why
        if time.monotonic() >= deadline:
            return (f"another process is still building them in {mine[0].path} ({wait_s:.0f} s waited); this "
                    "process runs PyTorch's kernels, a later one loads the finished library")
        if not said:
            log.info("specviz: waiting up to %.0f s for the native build under way in %s", wait_s, mine[0].path)
            said = True
        time.sleep(POLL_S)


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
                why = _load_or_build(built, WAIT_S)
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
