"""specviz's own C++ ops (specviz.runtime.int8_kernel): a module of tests that runs them marks
itself with :data:`NEEDS_OP` (skipped without a C++ compiler, the op built and loaded first)."""

from __future__ import annotations

import shutil

import pytest

NEEDS_OP = [
    pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                       reason="no C++ compiler: specviz's ops cannot be built here"),
    pytest.mark.usefixtures("specviz_op"),
]


def share_built_ops(cache) -> None:
    """Point a fresh cache directory's ``kernels/`` at this process's build of the ops (the
    ``specviz_op`` fixture built or found it), so an app or subprocess started on that cache loads
    them instead of compiling them again (a minute or two on 2 cores)."""
    from pathlib import Path

    from specviz.runtime import int8_kernel

    kernels = int8_kernel._library().parent
    cache = Path(cache)
    cache.mkdir(parents=True, exist_ok=True)
    if kernels.is_dir() and not (cache / "kernels").exists():
        (cache / "kernels").symlink_to(kernels, target_is_directory=True)
