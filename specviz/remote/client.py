"""A small OpenAI-compatible client (``httpx``) that turns every failure into one sentence.

Requests: ``POST /v1/completions`` with ``max_tokens``, ``temperature`` 0 and ``stream`` off, one
prompt at a time; ``GET /v1/models`` for the model id, ``GET /metrics`` for the Prometheus
counters, ``GET /props`` (llama.cpp), ``GET /version`` (vLLM), ``GET /get_server_info`` (SGLang)
to tell the engines apart.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx

__all__ = ["RemoteError", "Endpoint", "Client", "check_url", "parse_endpoint"]

_LABEL_URL = re.compile(r"^(?:(?P<label>.*?)=)?(?P<url>[A-Za-z][A-Za-z0-9+.\-]*://.*)$")
_K_IN_LABEL = re.compile(r"(?:^|[\s,:@])k=(\d+)$|^k=(\d+)$")
BASELINE = "target-only"


class RemoteError(ValueError):
    """A remote server failed in a way the user can act on; the message is one line."""


def check_url(url: str) -> str:
    """The URL without a trailing slash; raises RemoteError unless it is http(s)://host[:port][/path]."""
    url = url.strip()
    parts = urlsplit(url)
    if not parts.scheme:
        raise RemoteError(f"{url!r} has no scheme: write http://{url}")
    if parts.scheme not in ("http", "https"):
        raise RemoteError(f"{url!r}: only http:// and https:// servers can be measured, not {parts.scheme}://")
    if not parts.hostname:
        raise RemoteError(f"{url!r} names no host")
    try:
        parts.port
    except ValueError:
        raise RemoteError(f"{url!r} has a bad port") from None
    return url.rstrip("/").removesuffix("/v1")


@dataclass(frozen=True)
class Endpoint:
    """One server to measure: a label (the row's proposer name), its URL and its k."""

    label: str
    url: str
    k: int | None = None  # from the label ("k=3"); None: ask the engine
    baseline: bool = False  # the target-only server


def parse_endpoint(text: str, baseline: bool = False) -> Endpoint:
    """``URL``, ``LABEL=URL`` or ``NAME k=N=URL`` / ``k=N=URL`` -> Endpoint.

    The label ``target-only`` (or ``baseline=True``) marks the target-only server; ``k=N`` in a
    label sets the row's k (otherwise the engine's own draft length is used).
    """
    m = _LABEL_URL.match(text.strip())
    if not m:
        raise RemoteError(f"{text!r} is not a URL: write http://HOST:PORT or LABEL=http://HOST:PORT")
    url = check_url(m.group("url"))
    label = (m.group("label") or "").strip()
    k = None
    km = _K_IN_LABEL.search(label)
    if km:
        k = int(km.group(1) or km.group(2))
        name = label[: km.start()].strip(" ,:@")
        label = name or "remote"
    if label == BASELINE:
        baseline = True
    if baseline:
        return Endpoint(BASELINE, url, 0, True)
    return Endpoint(label or urlsplit(url).netloc, url, k, False)


class Client:
    """HTTP calls to one server; every error becomes a one-line :class:`RemoteError`."""

    def __init__(self, url: str, timeout_s: float = 120.0, transport: httpx.BaseTransport | None = None):
        self.url = check_url(url)
        self.timeout_s = timeout_s
        self._http = httpx.Client(timeout=httpx.Timeout(timeout_s, connect=min(10.0, timeout_s)), transport=transport,
                                  follow_redirects=False, trust_env=False)

    def close(self) -> None:
        self._http.close()

    def _call(self, method: str, path: str, **kw) -> httpx.Response:
        where = f"{self.url}{path}"
        try:
            return self._http.request(method, where, **kw)
        except httpx.ConnectError as exc:
            reason = str(exc).split("] ")[-1] or "connection refused"
            raise RemoteError(f"cannot reach {self.url} ({reason}): is the server running?") from None
        except httpx.TimeoutException:
            raise RemoteError(f"{where} did not answer within {self.timeout_s:g} s (a timeout)") from None
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError):
            raise RemoteError(f"{self.url} closed the connection during {method} {path}: did the server stop?") from None
        except httpx.HTTPError as exc:
            raise RemoteError(f"{method} {where} failed: {type(exc).__name__}: {exc}") from None

    def get_text(self, path: str) -> str | None:
        """GET path -> body text, or None on an HTTP error status (404 for an engine without it)."""
        r = self._call("GET", path)
        return r.text if r.status_code == 200 else None

    def get_any(self, path: str) -> Any:
        """GET path -> parsed JSON (any type), or None on an error status or a non-JSON body."""
        text = self.get_text(path)
        if text is None:
            return None
        try:
            return json.loads(text)
        except ValueError:
            return None

    def get_json(self, path: str) -> dict[str, Any] | None:
        data = self.get_any(path)
        return data if isinstance(data, dict) else None

    def model_id(self) -> str | None:
        """The first model ``GET /v1/models`` lists (None when the server has no such route)."""
        data = self.get_json("/v1/models")
        items = (data or {}).get("data")
        if isinstance(items, list) and items and isinstance(items[0], dict):
            return str(items[0].get("id")) if items[0].get("id") is not None else None
        return None

    def complete(self, prompt: str, max_tokens: int, model: str | None = None, temperature: float = 0.0,
                 seed: int | None = 0, logprobs: int | None = None) -> tuple[dict[str, Any], float]:
        """POST /v1/completions -> (the JSON body, wall seconds). Raises RemoteError on failure.

        ``logprobs``: ask for the top-n logprobs of each token (the warm-up only: llama.cpp ranks
        the whole vocabulary for them, which would slow a timed request)."""
        payload: dict[str, Any] = {"prompt": prompt, "max_tokens": max_tokens, "temperature": temperature, "stream": False, "n": 1}
        if model:
            payload["model"] = model
        if seed is not None:
            payload["seed"] = seed
        if logprobs is not None:
            payload["logprobs"] = logprobs
        t0 = time.perf_counter()
        r = self._call("POST", "/v1/completions", json=payload)
        wall = time.perf_counter() - t0
        if r.status_code == 404:
            raise RemoteError(f"{self.url} is not an OpenAI-compatible server (POST /v1/completions answered 404)")
        if r.status_code != 200:
            detail = " ".join(r.text.split())[:160]
            raise RemoteError(f"{self.url}: POST /v1/completions answered HTTP {r.status_code}: {detail}")
        try:
            body = r.json()
        except ValueError:
            raise RemoteError(f"{self.url} is not an OpenAI-compatible server (/v1/completions did not answer JSON)") from None
        choices = body.get("choices") if isinstance(body, dict) else None
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict) or "text" not in choices[0]:
            raise RemoteError(f"{self.url} is not an OpenAI-compatible server (its /v1/completions answer has no choices[0].text)")
        return body, wall

    def generate_sglang(self, prompt: str, max_tokens: int, temperature: float = 0.0) -> tuple[dict[str, Any], float]:
        """SGLang's native ``POST /generate`` (its ``meta_info`` carries the per-request spec
        statistics), reshaped like a completion: ``choices[0].text``, ``usage``, ``meta_info``."""
        payload = {"text": prompt, "sampling_params": {"max_new_tokens": max_tokens, "temperature": temperature}, "stream": False}
        t0 = time.perf_counter()
        r = self._call("POST", "/generate", json=payload)
        wall = time.perf_counter() - t0
        try:
            body = r.json() if r.status_code == 200 else None
        except ValueError:
            body = None
        if isinstance(body, list) and body:
            body = body[0]
        if not isinstance(body, dict) or not isinstance(body.get("meta_info"), dict) or "text" not in body:
            raise RemoteError(f"{self.url}: SGLang's POST /generate answered HTTP {r.status_code} without text and meta_info")
        meta = body["meta_info"]
        finish = meta.get("finish_reason")
        return {
            "choices": [{"index": 0, "text": body["text"], "finish_reason": finish.get("type") if isinstance(finish, dict) else finish}],
            "usage": {"prompt_tokens": meta.get("prompt_tokens"), "completion_tokens": meta.get("completion_tokens")},
            "meta_info": meta,
        }, wall
