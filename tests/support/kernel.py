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
