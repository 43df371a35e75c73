"""specviz's C++ ops as an AVX2-only CPU builds them: torch capped at AVX2 (``ATEN_CPU_CAPABILITY``)
caps the ops' build too (``specviz.native.flags``), so an AVX-512 machine also builds and tests the AVX2
paths (the int8 product's int16 pair sums, the screen's and the dense product's 8-lane halves, the
layer op on them)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from specviz import native
from tests.support.kernel import NEEDS_OP

pytestmark = NEEDS_OP
ROOT = Path(__file__).resolve().parents[1]


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return next((set(line.split(":", 1)[1].split()) for line in f if line.startswith("flags")), set())
    except OSError:
        return set()


def test_a_capped_torch_caps_the_ops_build(monkeypatch):
    """The compiler's flags follow torch's level: no AVX-512 code under an AVX2 torch."""
    monkeypatch.setattr(native.torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")
    assert "-mno-avx512f" in native.flags()
    monkeypatch.setattr(native.torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    assert native.flags() == native.FLAGS


@pytest.mark.slow
@pytest.mark.skipif("avx2" not in _cpu_flags() or "fma" not in _cpu_flags(), reason="this CPU has no AVX2")
@pytest.mark.skipif("avx512f" not in _cpu_flags(), reason="this CPU has no AVX-512: torch and oneDNN already run at "
                    "AVX2 here, so this run's own kernel tests are the AVX2 build's (the capped run would repeat them)")
def test_the_ops_are_exact_on_their_avx2_paths(tmp_path):
    """The ops' own tests (exact int8 sums, the same float32 bits at every width, the screen's
    certified argmax on both row kinds) pass against the AVX2 build. Only where the CPU has more than
    AVX2: on an AVX2-only CPU the cap changes no flag of the build nor oneDNN's choice, and the files
    below already ran in this run against the same code."""
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2",
           "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1"}
    tests = ["tests/test_int8_kernel.py", "tests/test_dense_kernel.py", "tests/test_argmax_head.py", "tests/test_layer_op.py"]
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-p", "no:xdist",
                          "-m", "not browser and not remote", *tests],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert "passed" in run.stdout and "skipped" not in run.stdout.splitlines()[-1], run.stdout[-500:]
