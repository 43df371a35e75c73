"""The Benchmark tab's remote source (specviz/ui/bench_remote.py) against local stub servers, and
the pure verdict-strip renderer (specviz/viz/remote_steps.py)."""

from __future__ import annotations

import json
import re
import socket

import pytest

from specviz.remote.replay import NOT_EXPOSED, remote_steps
from specviz.viz.remote_steps import remote_steps_html
from tests.support.remote_stub import STEP_ACCEPTED, K, StubConfig, StubServer

bt = pytest.importorskip("specviz.ui.bench_tab")
br = pytest.importorskip("specviz.ui.bench_remote")

def _raw(endpoints, baseline="", n=3, max_new=16):
    return (endpoints, baseline, bt.CUSTOM, [], "first prompt\nsecond prompt\nthird prompt\nfourth\nfifth", n, max_new)


def _run(state, *raw):
    return list(br.on_remote_run(state, *raw))


def _text(html: str) -> str:
    return re.sub(r"<[^>]+>", " ", html)


def _counting(server: StubServer) -> list[str]:
    """Count every request the stub receives (any route), by wrapping its handler class."""
    hits: list[str] = []
    base = server.httpd.RequestHandlerClass

    class Counting(base):  # type: ignore[misc, valid-type]
        def setup(self):
            hits.append("connection")
            super().setup()

    server.httpd.RequestHandlerClass = Counting
    return hits


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- the policy ----------------------------------------------------------------------------------


def test_not_allowed_opens_no_connection(monkeypatch):
    monkeypatch.delenv("SPECVIZ_ALLOW_REMOTE", raising=False)
    state = bt.BenchState()
    with StubServer(StubConfig(engine="vllm")) as s:
        hits = _counting(s)
        outs = _run(state, *_raw(f"spec={s.url}", s.url))
    assert hits == []
    assert len(outs) == 1 and "SPECVIZ_ALLOW_REMOTE" in outs[0]["progress"] and "Traceback" not in outs[0]["progress"]
    assert state.report is None


def test_allowed_measures_and_keeps_downloads(monkeypatch):
    monkeypatch.setenv("SPECVIZ_ALLOW_REMOTE", "1")
    state = bt.BenchState()
    try:
        with StubServer(StubConfig(engine="vllm")) as spec, StubServer(StubConfig(engine="vllm", spec=False)) as base:
            hits = _counting(spec)
            outs = _run(state, *_raw(f"spec={spec.url}", base.url))
        assert hits  # (the control: the counter does see requests)
        last = outs[-1]
        assert "Done in" in last["progress"]
        rows = {r["proposer"]: r for r in state.report["rows"]}
        assert rows["spec"]["acceptance_rate"] == pytest.approx(sum(STEP_ACCEPTED) / (K * len(STEP_ACCEPTED)))
        assert rows["spec"]["speedup"] is not None and rows["target-only"]["mean_acceptance_length"] == 1.0
        table = last["table"]
        assert any("spec" in str(cell) for row in table["data"] for cell in row)
        saved = json.loads(open(last["json"]["value"], encoding="utf-8").read())
        assert len(saved["prompt_rows"]) == 6 and saved["meta"]["source"] == "remote"
        # the steps view: vLLM "detailed" rows carry per-step counts, the baseline's do not
        choice, strips = last["steps_choice"], last["steps_html"]
        assert [label for label, _ in choice["choices"]][0].endswith("spec") and len(choice["choices"]) == 3
        assert strips.count('class="sv-step"') == len(STEP_ACCEPTED) and NOT_EXPOSED in strips
        assert strips.count("tok-bonus") == 1  # the step that kept all 3 drafts
        again = br.on_remote_steps(state, choice["choices"][1][1])
        assert "prompt 2" in again and again.count("tok-accepted") == sum(STEP_ACCEPTED)
    finally:
        state.close()


@pytest.mark.parametrize("endpoints, text", [
    ("ftp://127.0.0.1/x", "only http:// and https://"),
    ("", "give at least one server"),
    ("not a url", "is not a URL"),
])
def test_bad_input_is_one_line(monkeypatch, endpoints, text):
    monkeypatch.setenv("SPECVIZ_ALLOW_REMOTE", "1")
    outs = _run(bt.BenchState(), *_raw(endpoints))
    msg = _text(outs[-1]["progress"])
    assert text in msg and "Traceback" not in msg and len(outs) == 1


def test_unreachable_and_no_spec_are_one_line(monkeypatch):
    monkeypatch.setenv("SPECVIZ_ALLOW_REMOTE", "1")
    outs = _run(bt.BenchState(), *_raw(f"http://127.0.0.1:{_free_port()}"))
    assert "cannot reach" in _text(outs[-1]["progress"]) and "Traceback" not in outs[-1]["progress"]
    with StubServer(StubConfig(engine="vllm", spec=False)) as s:
        outs = _run(bt.BenchState(), *_raw(s.url))
    assert "this engine reports no speculative decoding" in _text(outs[-1]["progress"])
    with StubServer(StubConfig(openai=False)) as s:
        outs = _run(bt.BenchState(), *_raw(s.url))
    assert "not an OpenAI-compatible server" in _text(outs[-1]["progress"])


def test_timeout_is_one_line(monkeypatch):
    monkeypatch.setenv("SPECVIZ_ALLOW_REMOTE", "1")
    monkeypatch.setattr(br, "TIMEOUT_S", 0.5)
    with StubServer(StubConfig(engine="vllm", delay_s=3.0)) as s:
        outs = _run(bt.BenchState(), *_raw(s.url, n=1))
    assert "did not answer within 0.5 s" in _text(outs[-1]["progress"])


def test_server_dies_mid_run_keeps_rows(monkeypatch):
    monkeypatch.setenv("SPECVIZ_ALLOW_REMOTE", "1")
    state = bt.BenchState()
    try:
        with StubServer(StubConfig(engine="vllm", die_after=3)) as s:  # the warm-up and 2 prompts, then it stops
            outs = _run(state, *_raw(s.url, n=5))
        last = outs[-1]
        msg = _text(last["progress"])
        assert "Stopped at prompt 3/5" in msg and "2 of 5 requests kept" in msg and "Traceback" not in last["progress"]
        assert len(state.report["prompt_rows"]) == 2
        saved = json.loads(open(last["json"]["value"], encoding="utf-8").read())
        assert saved["meta"]["stopped"] and len(saved["prompt_rows"]) == 2
        assert saved["rows"][0]["drafted"] == 2 * K * len(STEP_ACCEPTED)
    finally:
        state.close()


def test_tab_greys_the_source_unless_allowed(monkeypatch):
    gr = pytest.importorskip("gradio")
    for value, allowed in (("", False), ("1", True)):
        monkeypatch.setenv("SPECVIZ_ALLOW_REMOTE", value)
        with gr.Blocks():
            rv = br.build_remote_source()
        assert rv.run_btn.interactive is allowed and rv.endpoints.interactive is allowed


# -- the pure renderer ---------------------------------------------------------------------------


def test_strips_use_the_token_view_classes():
    steps = remote_steps([3, 0, 1], [3, 3, 2])
    html = remote_steps_html(steps, NOT_EXPOSED, title="a <b>")
    kinds = re.findall(r'class="tok tok-(\w+)"', html)
    assert kinds == ["accepted"] * 3 + ["bonus"] + ["rejected", "discarded", "discarded", "resampled"] + \
        ["accepted", "rejected", "resampled"]
    assert html.count('class="sv-step"') == 3 and 'data-steps="3"' in html
    assert "3 target passes, 4 of 8 drafts accepted" in html
    assert "a &lt;b&gt;" in html and "p, q or u" in html


def test_strips_empty_and_long():
    assert "no per-step counts" in remote_steps_html([], NOT_EXPOSED)
    many = remote_steps([1] * 50, [2] * 50)
    html = remote_steps_html(many, "n", max_steps=10)
    assert html.count('class="sv-step"') == 10 and "first 10 passes shown" in html and 'data-steps="50"' in html


def test_strips_refuse_unknown_verdicts():
    from specviz.remote.replay import RemoteStep

    with pytest.raises(ValueError, match="unknown remote verdict"):
        remote_steps_html([RemoteStep(0, 1, 0, ("maybe",))], "n")
