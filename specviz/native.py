"""Building a C++ library for this CPU once per machine, without ever hanging.

``torch.utils.cpp_extension`` waits forever on the ``lock`` a killed build leaves (a known PyTorch
behaviour), so each build runs in a fresh ``<name>.build-*`` directory beside the library and
``os.replace``s the library into place (whole or absent); another process waits for it at most
``wait_s``, and a build directory whose process is gone or idle for :data:`STALE_S` is removed,
said in the log. :mod:`specviz.runtime.int8_kernel` names the library and its sources.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from . import settings

log = logging.getLogger(__name__)

FLAGS = ("-O3", "-march=native", "-fopenmp")  # this CPU's ISA; OpenMP: at::parallel_for's threads
# torch's ISA level caps the build's (ATEN_CPU_CAPABILITY=avx2 emulates an AVX2-only CPU)
CAPS = {"AVX2": ("-mno-avx512f",), "DEFAULT": ("-mno-avx",)}
STALE_S = 900.0  # a build directory nothing was written to for this long was left by a killed build
POLL_S = 0.5


def flags() -> tuple[str, ...]:
    """The compiler's flags: this CPU's ISA (``-march=native``), capped at the level torch runs at."""
    capability = getattr(torch.backends.cpu, "get_cpu_capability", lambda: "?")()
    return FLAGS + CAPS.get(capability, ())


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


def _build(built: Path, sources: Sequence[Path]) -> None:
    """Compile the ops in a fresh directory beside ``built``, load them, move the library into place."""
    from torch.utils import cpp_extension

    name = built.stem
    work = Path(tempfile.mkdtemp(prefix=f"{name}.build-", dir=built.parent))
    try:
        (work / "owner.json").write_text(json.dumps({"host": socket.gethostname(), "pid": os.getpid()}))
        log.info("specviz: building specviz's native kernels for this CPU (once, in %s)", work)
        t = time.perf_counter()
        cpp_extension.load(name=name, sources=[str(f) for f in sources], extra_cflags=list(flags()),
                           extra_ldflags=["-fopenmp"], build_directory=str(work), is_python_module=False,
                           verbose=False)  # loads it too
        os.replace(work / built.name, built)  # whole or not at all, for every other process
        log.info("specviz: built %s in %.0f s", built, time.perf_counter() - t)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def load_or_build(built: Path, sources: Sequence[Path], wait_s: float) -> str | None:
    """Load the library at ``built``, building it from ``sources`` first where no other process is;
    -> None, or why not."""
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
                _build(built, sources)
            return why
        if time.monotonic() >= deadline:
            return (f"another process is still building them in {mine[0].path} ({wait_s:.0f} s waited); this "
                    "process runs PyTorch's kernels, a later one loads the finished library")
        if not said:
            log.info("specviz: waiting up to %.0f s for the native build under way in %s", wait_s, mine[0].path)
            said = True
        time.sleep(POLL_S)
