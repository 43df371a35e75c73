"""A server process specviz starts on this machine for the live remote-engine tests (llama.cpp's
``llama-server``, vLLM's API server): its build error, a free loopback port, its log, and stopping it
(its whole process group, where it leads one: vLLM's engine core is a child of its API server)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

__all__ = ["BuildError", "LocalServer", "free_port", "tail"]


class BuildError(RuntimeError):
    """The build failed; the message ends with the build log's last lines."""


def free_port() -> int:
    """A port nothing listens on at 127.0.0.1 (the servers never bind anything else)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tail(path: Path, n: int = 25) -> str:
    """The last ``n`` lines of a build or server log."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no build log)"


def _signal(process: subprocess.Popen, sig: int) -> None:
    """``sig`` to the process group ``process`` leads (started with start_new_session), else to it alone."""
    try:
        os.killpg(process.pid, sig)
    except OSError:
        process.send_signal(sig)


@dataclass
class LocalServer:
    """A running server; use as a context manager or call :meth:`stop`."""

    process: subprocess.Popen
    url: str
    args: list[str]
    log_path: Path
    spec: str
    _log: object = field(default=None, repr=False)
    grace_s: ClassVar[float] = 15.0  # how long SIGTERM may take before SIGKILL

    def stop(self) -> None:
        if self.process.poll() is None:
            _signal(self.process, signal.SIGTERM)
            try:
                self.process.wait(timeout=self.grace_s)
            except subprocess.TimeoutExpired:
                _signal(self.process, signal.SIGKILL)
                self.process.wait(timeout=15)
        if self._log is not None:
            self._log.close()
            self._log = None

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def wait_ready(self, name: str, timeout_s: float, poll_s: float = 0.5) -> "LocalServer":
        """Wait for ``/health`` to answer 200 -> self; otherwise stop the server and raise BuildError
        with its log's last lines (it exited at start, or did not answer within ``timeout_s``)."""
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            if self.process.poll() is not None:
                self.stop()
                raise BuildError(f"{name} exited with code {self.process.returncode} at start:\n{tail(self.log_path, 25)}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                pass
            time.sleep(poll_s)
        self.stop()
        raise BuildError(f"{name} did not answer /health within {timeout_s:.0f} s (log: {self.log_path}):\n"
                         f"{tail(self.log_path, 15)}")

    def serve(self) -> int:
        """Wait for the server until it ends or Ctrl-C, then stop it (a command's last step) -> 0."""
        try:
            self.process.wait()
        except KeyboardInterrupt:
            pass
        finally:
            self.stop()
        return 0

    def __enter__(self) -> "LocalServer":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
