"""The Benchmark tab's Advisor panel (specviz/ui/advisor_tab.py) called directly on tiny local
models, with the cost model from numbers; and its HTML tables (specviz/viz/advisor.py)."""

from __future__ import annotations

import re

import pytest
import torch

from specviz.analysis import costmodel as C

at = pytest.importorskip("specviz.ui.advisor_tab")
from specviz.viz import advisor as VA  # noqa: E402


def _cost(draft_step: float) -> C.CostModel:
    ts = {n: 0.010 + 0.0005 * (n - 1) for n in range(1, 18)}
    draft = C.DraftCost("d", draft_step, {1: draft_step, 2: draft_step * 1.2, 3: draft_step * 1.4},
                        {m: draft_step * (1 + 0.1 * (m - 1)) for m in (1, 2, 3, 4)}, 0.01)
    return C.CostModel("key", "test machine", "t", "float32", torch.__version__, 1, 64, None, ts,
                       {n: ts[n] for n in (2, 5, 9, 17)}, 0.001, 0.05, {"ngram": 0.0, "ngram-tree": 0.0}, {"d": draft})


@pytest.fixture()
def fast_costs(monkeypatch, tmp_path):
    """The cost model from numbers (no timing), the caches under tmp_path."""
    monkeypatch.setenv("SPECVIZ_CACHE_DIR", str(tmp_path))
    state = {"draft_step": 0.002}

    def fake_measure(target, *, context=256, drafts=(), **kw):
        cost = _cost(state["draft_step"])
        d = cost.drafts["d"]
        return C.CostModel(**{**cost.__dict__, "key": C.cost_key(target, context), "target": str(target.name),
                              "drafts": {str(m.name): C.DraftCost(str(m.name), d.step_s, d.feed_s, d.level_s, d.prefill_s)
                                         for m in drafts}})

    monkeypatch.setattr(C, "measure", fake_measure)
    return state


PROMPTS = "the cat sat on the mat. the cat sat on the\nabc abc abc abc abc\nhello there. hello there. hello"


def _raw(target, proposers, custom=PROMPTS, n=3, max_new=16, calib=40):
    return (target, proposers, at.CUSTOM, [], custom, n, max_new, calib, 0.0)


def _text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html or ""))


def _last(outs, name):
    return next((o[name] for o in reversed(outs) if name in o), None)


def test_calibrate_ranks_then_runs_the_top(models_dir, allow_local, fast_costs):
    state = at.AdvisorState()
    outs = list(at.on_calibrate(state, *_raw(models_dir["target"], ["ngram", f"draft:{models_dir['draft']}"])))
    msgs = [_text(o["advisor_msg"]) for o in outs if "advisor_msg" in o]
    assert any("Calibrating" in m for m in msgs), msgs
    assert "Calibrated on 3 prompts" in msgs[-1], msgs[-1]
    ranking = _text(_last(outs, "advisor_ranking"))
    assert "k=1" in ranking and "target-only" in ranking and "speedup" in ranking
    assert "t(n) ms" in _text(_last(outs, "advisor_costs"))
    assert state.advice is not None and set(at.OUTPUTS) >= set(outs[-1])
    runs = list(at.on_run_top(state, 2))
    assert "Ran " in _text(runs[-1]["advisor_msg"]), runs[-1]
    table = _text(runs[-1]["advisor_runs"])
    assert "measured" in table and "error" in table and "%" in table


def test_a_draft_too_slow_to_pay_is_said(models_dir, allow_local, fast_costs):
    fast_costs["draft_step"] = 0.05  # five target steps per draft step
    state = at.AdvisorState()
    outs = list(at.on_calibrate(state, *_raw(models_dir["target"], [f"draft:{models_dir['draft']}"])))
    verdicts = _text(_last(outs, "advisor_verdicts"))
    assert "too slow to pay" in verdicts and "does not pay" in verdicts
    assert "does not pay" in _text(_last(outs, "advisor_ranking"))


def test_a_calibration_that_drafts_nothing_is_said(models_dir, allow_local, fast_costs):
    state = at.AdvisorState()
    outs = list(at.on_calibrate(state, *_raw(models_dir["target"], ["ngram"], custom="qwertyuiop", n=1, max_new=4)))
    assert "drafted nothing" in _text(_last(outs, "advisor_verdicts"))
    assert "does not pay" in _text(_last(outs, "advisor_ranking"))
    run = list(at.on_run_top(state, 1))
    assert "nothing to run" in _text(run[-1]["advisor_msg"])


@pytest.mark.parametrize("raw, words", [
    (lambda m: _raw(m["target"], ["nonsense"]), "nonsense"),
    (lambda m: _raw(m["target"], []), "at least one proposer"),
    (lambda m: _raw("", ["ngram"]), "choose a target"),
    (lambda m: _raw(m["target"], ["ngram"], custom=""), "at least one prompt"),
    (lambda m: _raw(m["target"], ["ngram"], max_new=100000), "new tokens"),
])
def test_errors_are_one_line(models_dir, allow_local, fast_costs, raw, words):
    outs = list(at.on_calibrate(at.AdvisorState(), *raw(models_dir)))
    msg = _text(outs[-1]["advisor_msg"]).strip()
    assert words in msg.lower() or words in msg, msg
    assert "Traceback" not in msg and "\n" not in msg


def test_local_paths_are_refused_when_hosting(models_dir, monkeypatch, fast_costs):
    monkeypatch.delenv("SPECVIZ_ALLOW_LOCAL_PATHS", raising=False)
    outs = list(at.on_calibrate(at.AdvisorState(), *_raw(models_dir["target"], ["ngram"])))
    assert len(outs) == 1
    assert "local" in _text(outs[-1]["advisor_msg"]).lower()


def test_run_top_before_calibrating_says_so():
    out = list(at.on_run_top(at.AdvisorState(), 3))
    assert "Calibrate and predict first" in _text(out[-1]["advisor_msg"])


def test_viz_tables_escape_and_say_does_not_pay():
    from types import SimpleNamespace

    f = SimpleNamespace(label="<b>x</b> k=2", tau=1.0, tau_lo=1.0, tau_hi=1.0, step_s=0.01, speedup=0.9, speedup_lo=0.8,
                        speedup_hi=1.0, extra={}, pays=False)
    html = VA.ranking_html([f], 0.01)
    assert "&lt;b&gt;" in html and "does not pay" in html
    assert "nothing" in VA.runs_html([]).lower()


def test_the_panel_builds_inside_blocks(models_dir):
    import gradio as gr

    with gr.Blocks(analytics_enabled=False) as demo:
        view = at.build_advisor_panel(models_dir["target"], ["ngram"], [models_dir["target"]], ["ngram"], ["coding"])
    assert set(view.components) == set(at.OUTPUTS) and len(view.controls) == 9
    demo.get_config_file()  # the config serializes (the session state is a plain class)


def test_on_zerogpu_the_calibration_is_one_gpu_call_and_a_refusal_is_one_line(monkeypatch, models_dir, allow_local):
    """(The forked worker itself: tests/test_zerogpu.py.)"""
    calls = []

    def refused(fn, *args):
        calls.append(fn.__name__)
        raise ValueError("ZeroGPU: You have exceeded your GPU quota (60s requested vs. 10s left).")

    monkeypatch.setattr(at.zerogpu, "active", lambda: True)
    monkeypatch.setattr(at.zerogpu, "on_gpu", refused)
    outs = list(at.on_calibrate(at.AdvisorState(), *_raw(models_dir["target"], ["ngram"])))
    assert calls == ["advise_report"] and "exceeded your GPU quota" in _text(outs[-1]["advisor_msg"])


# -- issue 52: the pick among the sweep's k, a next step, the tau error, a wide interval explained ----------------------


def _forecast(spec, k, speedup, tau=2.0, **extra):
    from specviz.analysis.advisor import Forecast

    return Forecast(proposer=spec, spec=spec, k=k, tau=tau, tau_lo=tau - 0.2, tau_hi=tau + 0.2, drafted_per_step=float(k),
                    draft_s=0.001, step_s=0.01, speedup=speedup, speedup_lo=speedup - 0.1, speedup_hi=speedup + 0.1,
                    extra=dict(extra))


def _advice(forecasts):
    from types import SimpleNamespace

    return SimpleNamespace(target="t", forecasts=forecasts, cost=SimpleNamespace(machine="a test box"), shapes={})


def test_the_pick_is_among_the_k_the_sweep_runs_and_the_next_step_says_what_was_passed_over():
    from specviz.bench.advice_out import next_step, pick_of

    ranked = [_forecast("draft:d", 8, 1.62), _forecast("draft:d", 4, 1.40), _forecast("ngram", 2, 1.30),
              _forecast("draft:d", 2, 1.25), _forecast("draft:d", 1, 1.05)]
    advice = _advice(ranked)
    assert pick_of(advice).k == 8  # free to choose: the ranking's top
    pick = pick_of(advice, (1, 2, 4))
    assert (pick.spec, pick.k) == ("draft:d", 4)  # the sweep ran 1, 2, 4: never k = 8
    said = next_step(advice, (1, 2, 4))
    assert "use draft:d at k = 4 (predicted 1.40x)" in said and "`specviz generate --proposer auto` now picks it" in said
    assert "smaller k = 2 would give 1.25x, 11% less" in said  # what a smaller k costs, the same proposer
    assert "draft:d at k = 8 (1.62x), is not among the k you will run" in said and "add k = 8 to the sweep" in said
    assert "not among" not in next_step(advice, (4, 8))
    outside = next_step(advice, (12, 16))  # k the advisor does not predict: it says so and picks among all
    assert "none of the k you will run (12, 16)" in outside and "at k = 8" in outside
    none = next_step(_advice([_forecast("ngram", 1, 0.9)]), (1, 2))
    assert "nothing is predicted to pay among the k you will run (1, 2)" in none and "target alone" in none


def test_after_the_runs_the_tau_error_is_scored_and_a_wide_interval_is_explained():
    from specviz.bench.advice_out import runs_summary

    runs = [{"spec": "draft:d", "k": 4, "error": 0.03, "predicted_tau": 2.5, "measured_tau": 2.3,
             "measured_median": 1.62, "measured_interval": [0.48, 1.67]},
            {"spec": "ngram", "k": 2, "error": -0.05, "predicted_tau": 2.0, "measured_tau": 2.2,
             "measured_median": 1.30, "measured_interval": [1.25, 1.36]}]
    said = runs_summary(runs, 4)
    assert "Mean absolute error: speedup 4%, tau 9%." in said  # (8% + 10%) / 2 for tau
    assert "draft:d k=4's interval 0.48-1.67x around 1.62x is wide because it is the median of only 4 prompts" in said
    assert "ngram k=2's interval" not in said  # a narrow one needs no sentence


def test_the_panel_picks_among_the_sweep_k_and_ends_with_a_next_step(models_dir, allow_local, fast_costs):
    from specviz.proposers.advised import advised_pick

    state = at.AdvisorState()
    outs = list(at.on_calibrate(state, *_raw(models_dir["target"], ["ngram"]), [1, 2]))
    msg = _text(outs[-1]["advisor_msg"])
    assert state.request.ks == (1, 2)
    pick = advised_pick(models_dir["target"])
    if pick.pays:
        assert pick.k in (1, 2) and f"use ngram at k = {pick.k}" in msg and "now picks it" in msg, msg
    else:
        assert "nothing is predicted to pay among the k you will run (1, 2)" in msg, msg
    runs = list(at.on_run_top(state, 1))
    done = _text(runs[-1]["advisor_msg"])
    assert "Mean absolute error: speedup" in done and ", tau " in done and "Next step:" in done, done
