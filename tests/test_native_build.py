"""specviz's native build cannot hang a process, and its plain-loop variant is tested like the AVX2 one.

A build killed halfway leaves its directory behind, with the ``lock`` that cpp_extension would wait on
forever. specviz never builds where a later process looks (each build has its own fresh directory and
the library moves into place whole), removes a dead build's directory (said in the log, with its
path), and waits for a live one only under a time budget. The subprocess test starts a process after a
killed build, with the build's leftovers where it left them, and requires it to build, load and decode
within a bounded time. That process builds the plain-loop variant (``ATEN_CPU_CAPABILITY=default``: the
``-mno-avx`` build an ARM or pre-AVX2 machine makes), so the same build is then checked against this
process's own (AVX2 on an AVX2 CPU) on the same small products.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from specviz import native
from specviz.runtime import int8_kernel

ROOT = Path(__file__).resolve().parents[1]
CHILD_SECONDS = 900  # a cold build took 15-200 s on a busy 2-core box; a hang never ends


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPECVIZ_", "ATEN_", "ONEDNN_"))}
    return {**env, "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1", "SPECVIZ_ALLOW_LOCAL_PATHS": "1",
            "PYTHONPATH": str(ROOT), **extra}


def _dead_pid() -> int:
    """The id of a process that has exited (what a killed build's owner file names)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _killed_build(kernels: Path, name: str, pid: int | None, idle_s: float = 0.0) -> Path:
    """A build directory as a build killed halfway leaves it: its owner, cpp_extension's lock, the
    ninja file and a half-written object."""
    work = kernels / (f"{name}.build-killed{pid}" if pid is not None else name)
    work.mkdir(parents=True)
    if pid is not None:
        (work / "owner.json").write_text(json.dumps({"host": socket.gethostname(), "pid": pid}))
    (work / "lock").touch()
    (work / "build.ninja").write_text("ninja_required_version = 1.3\n")
    (work / "int8_kernel.o").write_bytes(b"\x7fELF" + bytes(100))
    if idle_s:
        old = time.time() - idle_s
        for p in (*work.iterdir(), work):
            os.utime(p, (old, old))
    return work


# -- products both builds run --------------------------------------------------------------------


def products() -> dict[str, torch.Tensor]:
    """Small products on fixed inputs through the loaded ops: the int8 product and the float32 one
    at one row and at five (an exact int32 sum each; the float sums in the ops' own order)."""
    from specviz.runtime import dense_kernel

    g = torch.Generator().manual_seed(48)
    ints = torch.randint(-127, 128, (100, 70), dtype=torch.int8, generator=g)
    scale, bias = torch.rand(100, generator=g) / 100, torch.randn(100, generator=g)
    weight = torch.randn(40, 70, generator=g)
    blocked, wsum = int8_kernel.block(ints)
    out = {}
    for rows in (1, 5):
        x = torch.randn(rows, 70, generator=g) * 3
        out[f"int8 x{rows}"] = int8_kernel.linear(x, blocked, scale, wsum, bias, None, 100)
        out[f"dense x{rows}"] = dense_kernel.dense(x, dense_kernel.block(weight), bias[:40], 40)
        out[f"dense ref x{rows}"] = (x.double() @ weight.double().t() + bias[:40].double()).float()
    return out


def child(out: str, models: str) -> None:
    """What the started process runs: load (build) the ops, run the products, decode with the app's
    engine (speculative and target-only, greedy); everything it found into ``out``."""
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s: %(message)s")
    from specviz.app import runs
    from specviz.ui.state import parse_settings
    from tests.support.tiny import TINY_PROMPT, make_tiny_models

    why = int8_kernel.load()
    found = {"why": why, "capability": torch.backends.cpu.get_cpu_capability(), "flags": list(native.flags()),
             "library": str(int8_kernel._library()), "products": products() if why is None else None}
    target, draft = make_tiny_models(Path(models))
    settings = parse_settings(target, "draft", draft, 3, 0.0, 1.0, 0, 0, 16, TINY_PROMPT, True)
    tokens = []
    for target_only in (False, True):
        decoder = runs.build_decoder(settings, lambda _msg: None, target_only=target_only)
        tokens.append(list(decoder.generate(settings.prompt, max_new_tokens=16, seed=0, chat=True).token_ids))
    found["tokens"] = tokens
    torch.save(found, out)


def run_child(tmp: Path, env: dict[str, str]) -> tuple[dict, str, float]:
    out = tmp / "found.pt"
    t = time.monotonic()
    run = subprocess.run([sys.executable, "-c", f"from tests.test_native_build import child; child({str(out)!r}, "
                          f"{str(tmp / 'models')!r})"], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=CHILD_SECONDS)
    seconds = time.monotonic() - t
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
    return torch.load(out, weights_only=False), run.stderr, seconds


def _name_under(env: dict[str, str]) -> str:
    """The library's name as a process with ``env`` computes it (the flags are in its digest)."""
    return subprocess.run([sys.executable, "-c", "from specviz.runtime import int8_kernel; print(int8_kernel._name())"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=True).stdout.strip()


@pytest.fixture(scope="module")
def after_a_killed_build(tmp_path_factory):
    """A plain-loop process started in a cache home where builds were killed halfway: a dead
    process's build directory, one of an older layout untouched for an hour, and an older
    library's; -> (what it found, its log, seconds, the leftovers)."""
    tmp = tmp_path_factory.mktemp("native-build")
    env = _env(SPECVIZ_CACHE_DIR=str(tmp / "cache"), ATEN_CPU_CAPABILITY="default")
    name = _name_under(env)
    kernels = tmp / "cache" / "kernels"
    leftovers = [_killed_build(kernels, name, _dead_pid()), _killed_build(kernels, name, None, idle_s=3600),
                 _killed_build(kernels, "specviz_int8_0123456789ab", None, idle_s=3600)]
    found, log, seconds = run_child(tmp, env)
    return found, log, seconds, leftovers


# -- the build directories' rules, in this process -------------------------------------------------


def test_a_dead_or_idle_build_is_stale_and_a_live_one_is_not(tmp_path, caplog):
    kernels = tmp_path / "kernels"
    dead = _killed_build(kernels, "specviz_kernels_x", _dead_pid())
    idle = _killed_build(kernels, "specviz_kernels_y", None, idle_s=native.STALE_S + 60)
    live = _killed_build(kernels, "specviz_kernels_z", os.getpid())
    (kernels / "specviz_kernels_w.so").write_bytes(b"")  # a library, not a build
    found = {b.path: b for b in native.build_dirs(kernels)}
    assert set(found) == {dead, idle, live}
    assert "gone" in native.stale(found[dead]) and "nothing written" in native.stale(found[idle])
    assert native.stale(found[live]) is None
    assert native.stale(found[dead], host="another-host") is None  # a pid means nothing on another host
    with caplog.at_level(logging.WARNING, logger="specviz.native"):
        assert [b.path for b in native.clear_stale(kernels)] == [live]
    assert live.is_dir() and not dead.exists() and not idle.exists()
    assert str(dead) in caplog.text and str(idle) in caplog.text and str(live) not in caplog.text


def test_a_build_under_way_elsewhere_is_waited_for_only_under_the_budget(tmp_path, caplog):
    """Another live process's build of the same library: waited for ``wait_s`` seconds, then PyTorch's
    kernels, and why says where that build is; nothing is built or removed meanwhile."""
    built = tmp_path / "kernels" / "specviz_kernels_abc.so"
    live = _killed_build(built.parent, built.stem, os.getpid())
    t = time.monotonic()
    with caplog.at_level(logging.INFO, logger="specviz.native"):
        why = native.load_or_build(built, (int8_kernel.UNIT,), wait_s=1.0)
    assert 1.0 <= time.monotonic() - t < 30
    assert str(live) in why and "PyTorch's kernels" in why and str(live) in caplog.text
    assert live.is_dir() and not built.exists()


def test_no_compiler_is_said_before_any_build(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing on it
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.delenv("SPECVIZ_INT8_KERNEL", raising=False)
    monkeypatch.setenv("SPECVIZ_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(int8_kernel, "_state", {})  # nothing asked in this process yet
    assert "no C++ compiler" in native.toolchain()
    assert not int8_kernel.needs_build()  # nothing to announce: no build will run
    built = tmp_path / "kernels" / "specviz_kernels_abc.so"
    built.parent.mkdir()
    assert "no C++ compiler" in native.load_or_build(built, (int8_kernel.UNIT,), wait_s=1.0)
    assert list(built.parent.iterdir()) == []  # no build directory left behind


def test_the_library_is_named_for_what_it_holds():
    assert int8_kernel._name().startswith("specviz_kernels_") and int8_kernel._library().name.endswith(".so")
    assert int8_kernel._library().parent.name == "kernels"  # the library itself, never a build directory


# -- a process after a killed build; the plain-loop build ----------------------------------------


@pytest.mark.slow
@pytest.mark.skipif(native.toolchain() is not None, reason="no C++ compiler: nothing to build here")
def test_a_process_started_after_a_killed_build_builds_loads_and_decodes(after_a_killed_build):
    found, log, seconds, leftovers = after_a_killed_build
    assert found["why"] is None, found["why"]  # built and loaded, not waited on
    assert seconds < CHILD_SECONDS
    for left in leftovers:
        assert not left.exists() and str(left) in log, (left, log[-3000:])
    library = Path(found["library"])
    assert library.is_file() and [p.name for p in library.parent.iterdir()] == [library.name]  # no build dir left
    assert log.count("native kernels") == 1 and "built " + str(library) in log, log[-3000:]
    spec, target_only = found["tokens"]
    assert spec == target_only and len(spec) == 16


@pytest.mark.slow
@pytest.mark.skipif(native.toolchain() is not None, reason="no C++ compiler: nothing to build here")
@pytest.mark.usefixtures("specviz_op")
def test_the_plain_loop_build_gives_the_native_builds_results(after_a_killed_build):
    """The ``-mno-avx`` build (torch at DEFAULT) against this process's: the int8 product's integer
    sums are exact in both, so the results agree to float32 rounding of the scales; the float32
    product sums in another order, so it agrees to its own rounding, and both with float64."""
    found = after_a_killed_build[0]
    assert found["capability"] == "DEFAULT" and "-mno-avx" in found["flags"], found["flags"]
    here = products()
    assert torch.backends.cpu.get_cpu_capability() != "DEFAULT"
    for key, want in here.items():
        got = found["products"][key]
        assert got.shape == want.shape, key
        tol = 1e-6 if key.startswith("int8") else 1e-5
        torch.testing.assert_close(got, want, rtol=tol, atol=tol * float(want.abs().max()), msg=key)
    for rows in (1, 5):
        for build in (found["products"], here):
            ref = build[f"dense ref x{rows}"]
            torch.testing.assert_close(build[f"dense x{rows}"], ref, rtol=1e-5, atol=1e-5 * float(ref.abs().max()))
