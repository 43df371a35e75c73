"""A tiny local HTTP server (http.server in a thread, 127.0.0.1) that mimics a serving engine's
OpenAI-compatible API, its ``/metrics`` counters and its per-request statistics, for the remote
benchmark's tests. Each completion "drafts" a fixed pattern of steps so the expected numbers are
known exactly.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# Each request: 4 draft steps of k=3 accepting 3, 1, 0, 2 drafts (6 of 12), then plain steps
# up to max_tokens. Tokens committed by the draft steps: 4 + 6 = 10.
STEP_ACCEPTED = (3, 1, 0, 2)
K = 3


@dataclass
class StubConfig:
    engine: str = "vllm"  # "vllm" (metrics + per-request detailed), "vllm-summary", "sglang", "llamacpp", "plain"
    spec: bool = True  # False: a server without speculative decoding
    openai: bool = True  # False: 404 on every OpenAI route
    die_after: int | None = None  # completions answered before the server stops
    delay_s: float = 0.0  # sleep before answering a completion
    draft_above: int = 0  # requests of at most this many tokens draft nothing (llama.cpp's short warm-up)
    logprobs: str = "real"  # "real": negative logprobs; "zero-when-spec": 0.0 for every token (llama.cpp #27972)
    counts: dict = field(default_factory=lambda: {"drafts": 0, "draft_tokens": 0, "accepted": 0, "per_pos": [0] * K, "requests": 0})


def _metrics_text(cfg: StubConfig) -> str:
    c = cfg.counts
    if cfg.engine.startswith("vllm"):
        lines = ["# HELP vllm:num_requests_running Number of requests in model execution batches.",
                 "# TYPE vllm:num_requests_running gauge", 'vllm:num_requests_running{engine="0",model_name="stub"} 0.0']
        if cfg.spec:
            for name, key in (("drafts", "drafts"), ("draft_tokens", "draft_tokens"), ("accepted_tokens", "accepted")):
                lines += [f"# HELP vllm:spec_decode_num_{name}_total Number.", f"# TYPE vllm:spec_decode_num_{name}_total counter",
                          f'vllm:spec_decode_num_{name}_total{{engine="0",model_name="stub"}} {float(c[key])}']
            lines += ["# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position.",
                      "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter"]
            lines += [f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="stub",position="{i}"}} {float(v)}'
                      for i, v in enumerate(c["per_pos"])]
        return "\n".join(lines) + "\n"
    if cfg.engine == "llamacpp":
        lines = []
        for name, key in (("draft_tokens", "draft_tokens"), ("accepted_tokens", "accepted"), ("drafts", "drafts")):
            lines += [f"# HELP llamacpp:spec_decode_num_{name}_total x", f"# TYPE llamacpp:spec_decode_num_{name}_total counter",
                      f"llamacpp:spec_decode_num_{name}_total {c[key] if cfg.spec else 0}"]
        if cfg.spec and c["drafts"]:  # the server exports per-position counts once a step has drafted
            lines += ["# HELP llamacpp:spec_decode_num_accepted_tokens_per_pos_total x",
                      "# TYPE llamacpp:spec_decode_num_accepted_tokens_per_pos_total counter"]
            lines += [f'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{{position="{i}"}} {v}' for i, v in enumerate(c["per_pos"])]
        return "\n".join(lines) + "\n"
    if cfg.engine == "sglang":
        return "# HELP sglang:spec_accept_length x\n# TYPE sglang:spec_accept_length gauge\nsglang:spec_accept_length 2.5\n"
    return "# HELP process_cpu_seconds_total x\n# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 1.0\n"


def _completion(cfg: StubConfig, max_tokens: int, logprobs: int | None = None) -> dict:
    drafts = cfg.spec and max_tokens > cfg.draft_above
    steps = STEP_ACCEPTED if drafts else ()
    n = max(max_tokens, sum(a + 1 for a in steps)) if steps else max_tokens
    accepted = sum(steps)
    if cfg.spec:
        c = cfg.counts
        c["drafts"] += len(steps)
        c["draft_tokens"] += K * len(steps)
        c["accepted"] += accepted
        for a in steps:
            for i in range(a):
                c["per_pos"][i] += 1
    cfg.counts["requests"] += 1
    body = {"id": "cmpl-1", "object": "text_completion", "model": "stub",
            "choices": [{"index": 0, "text": " tok" * n, "finish_reason": "length"}],
            "usage": {"prompt_tokens": 5, "completion_tokens": n, "total_tokens": 5 + n}}
    if logprobs is not None:  # the OpenAI completions shape: one logprob per generated token
        lp = 0.0 if cfg.spec and cfg.logprobs == "zero-when-spec" else -0.25
        if cfg.engine == "llamacpp":  # llama.cpp answers /v1/completions in the chat shape
            body["choices"][0]["logprobs"] = {"content": [{"id": 1, "token": " tok", "logprob": lp, "top_logprobs": []}] * n}
        else:
            body["choices"][0]["logprobs"] = {"tokens": [" tok"] * n, "token_logprobs": [lp] * n, "text_offset": list(range(n))}
    if not cfg.spec:
        return body
    hist = [list(steps).count(j) for j in range(K + 1)]
    n_steps = max(len(steps), 1)
    if cfg.engine.startswith("vllm"):
        sd = {"mean_acceptance_length": 1 + accepted / n_steps, "draft_acceptance_rate": accepted / (K * n_steps),
              "acceptance_histogram": hist, "num_spec_steps": len(steps), "num_accepted_draft_tokens": accepted,
              "num_draft_tokens": K * len(steps), "num_spec_tokens": K}
        if cfg.engine == "vllm" and steps:
            sd["per_step_accepted"] = list(steps)
            sd["per_step_drafted"] = [K] * len(steps)
        body["metrics"] = {"speculative_decoding": sd}
    elif cfg.engine == "sglang":
        body["meta_info"] = {"spec_verify_ct": len(steps), "spec_accept_token_num": accepted, "spec_draft_token_num": K * len(steps),
                             "spec_accept_histogram": hist, "spec_accept_length": n / n_steps, "completion_tokens": n}
    elif cfg.engine == "llamacpp":
        body["timings"] = {"prompt_n": 5, "prompt_ms": 1.0, "predicted_n": n, "predicted_ms": 10.0, "predicted_per_second": 100.0 * n}
        if steps:  # the server leaves both out when the request drafted nothing
            body["timings"].update({"draft_n": K * len(steps), "draft_n_accepted": accepted})
    return body


class StubServer:
    """``with StubServer(StubConfig(engine="vllm")) as s: s.url``"""

    def __init__(self, cfg: StubConfig | None = None):
        self.cfg = cfg or StubConfig()
        cfg = self.cfg
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):  # quiet
                pass

            def _send(self, code: int, body: str | bytes, ctype: str = "application/json"):
                data = body.encode() if isinstance(body, str) else body
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if self.path == "/metrics" and cfg.openai:
                    return self._send(200, _metrics_text(cfg), "text/plain; version=0.0.4")
                if self.path == "/v1/models" and cfg.openai:
                    return self._send(200, json.dumps({"object": "list", "data": [{"id": "stub-model", "object": "model"}]}))
                if self.path == "/version" and cfg.engine.startswith("vllm") and cfg.openai:
                    return self._send(200, json.dumps({"version": "0.32.0"}))
                if self.path == "/props" and cfg.engine == "llamacpp":
                    return self._send(200, json.dumps({"default_generation_settings": {"n_ctx": 4096}, "build_info": "b0-stub"}))
                if self.path == "/slots" and cfg.engine == "llamacpp":
                    return self._send(200, json.dumps([{"id": 0, "speculative": cfg.spec}]))
                if self.path == "/get_server_info" and cfg.engine == "sglang":
                    return self._send(200, json.dumps({"model_path": "stub", "speculative_algorithm": "EAGLE" if cfg.spec else None,
                                                       "speculative_num_draft_tokens": K + 1, "version": "0.5.0"}))
                return self._send(404, "<html>not found</html>", "text/html")

            def do_POST(self):
                length = int(self.headers.get("Content-Length", 0))
                payload = json.loads(self.rfile.read(length) or b"{}")
                if self.path == "/generate" and cfg.engine == "sglang":  # SGLang's native route
                    if cfg.delay_s:
                        time.sleep(cfg.delay_s)
                    out = _completion(cfg, int(payload.get("sampling_params", {}).get("max_new_tokens", 16)))
                    meta = dict(out.get("meta_info") or {}, prompt_tokens=5, completion_tokens=out["usage"]["completion_tokens"],
                                finish_reason={"type": "length", "length": out["usage"]["completion_tokens"]})
                    return self._send(200, json.dumps({"text": out["choices"][0]["text"], "meta_info": meta}))
                if self.path != "/v1/completions" or not cfg.openai:
                    return self._send(404, "<html>not found</html>", "text/html")
                if cfg.die_after is not None and cfg.counts["requests"] >= cfg.die_after:
                    # the server goes away mid-run: drop this connection and stop listening
                    self.close_connection = True
                    self.connection.close()
                    threading.Thread(target=outer.stop, daemon=True).start()
                    return None
                if cfg.delay_s:
                    time.sleep(cfg.delay_s)
                return self._send(200, json.dumps(_completion(cfg, int(payload.get("max_tokens", 16)), payload.get("logprobs"))))

        class Quiet(ThreadingHTTPServer):
            def handle_error(self, request, client_address):  # the "dying" server drops connections on purpose
                pass

        self.httpd = Quiet(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._stopped = False

    def start(self) -> "StubServer":
        self._thread.start()
        return self

    def stop(self) -> None:
        if not self._stopped:
            self._stopped = True
            self.httpd.shutdown()
            self.httpd.server_close()

    def __enter__(self) -> "StubServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
