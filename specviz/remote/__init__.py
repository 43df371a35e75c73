"""Measure a real serving engine's speculative decoding (vLLM, SGLang, llama.cpp's server) with
the local lab's definitions, reports and figures: ``specviz bench --remote URL``.

- :mod:`.client`: an OpenAI-compatible client whose failures are one-line :class:`RemoteError` s
- :mod:`.prom`: the spec-decode Prometheus counters (``prometheus_client``'s parser), diffed
- :mod:`.engines`: per-request statistics in vLLM / SGLang / llama.cpp responses
- :mod:`.run`: :class:`RemoteSweep`, rows and reports in the ``specviz.bench/1`` schema
- :mod:`.llama_server`: build (cached) and start llama.cpp's ``llama-server`` to test against
- :mod:`.vllm_server`: install (cached, a venv of its own) and start vLLM's CPU build to test against
- :func:`remote_allowed`: the hosted app's policy (``SPECVIZ_ALLOW_REMOTE``, default off)
"""

from __future__ import annotations

from .. import settings

__all__ = ["remote_allowed", "check_remote_allowed", "REMOTE_ENV"]

REMOTE_ENV = "SPECVIZ_ALLOW_REMOTE"


def remote_allowed() -> bool:
    """True when the operator lets app visitors name remote servers (``SPECVIZ_ALLOW_REMOTE=1``).

    Off by default: a public Space must not become a proxy to arbitrary addresses. The command
    line does not ask (it runs on the user's own machine).
    """
    return settings.word(REMOTE_ENV) in {"1", "true", "yes", "on"}


def check_remote_allowed() -> None:
    """Raise ValueError (a message for the visitor) unless remote servers are allowed."""
    if not remote_allowed():
        raise ValueError(f"measuring remote servers is turned off on this server (the operator can set {REMOTE_ENV}=1)")
