"""The cost model anchored to the engine's own steps (specviz.analysis.runcost), on recorded numbers:
no timing here. The numbers are rounded from the advisor check of 2026-12-05 on a Zen 4
(benchmarks/results/advisor-check-zen4v-fp32-confidence.json): the cost model priced a one-token step at
21.2 ms, the sweep's target-only steps took 16.9 ms; the prompt-lookup chain's wide passes were priced
within a few percent of the sweep's (here 24.4 ms against 23.5 ms)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from specviz.analysis import advisor as A
from specviz.analysis import runcost as RC
from tests.support import loaded, make_char_tokenizer, make_llama
from tests.test_advisor import cost_model


@pytest.fixture(scope="module")
def tiny():
    tok = make_char_tokenizer()
    return loaded(make_llama(len(tok), 32, 2, seed=0, sharpen=30.0), tok, "tiny-target")


def rec(k, verify_ms, other_ms=0.5, draft_ms=0.1, tree=()):
    return SimpleNamespace(k=k, verify_ms=verify_ms, other_ms=other_ms, draft_ms=draft_ms, tree=tree)


def zen4v_cost():
    # t(1) = 20.0 ms, + 0.4 ms a width; o = 1.2 ms: t(1) + o = 21.2 ms, t(9) + o = 24.4 ms
    return cost_model(t1=0.020, slope=0.0004, overhead=0.0012, lookup=0.00002)


def zen4v_decode():
    """An n-gram decode at k = 8: eight one-token steps at 16.9 ms, six 9-wide ones at 23.5 ms, a 5-wide one."""
    return [[rec(0, 16.4) for _ in range(4)] + [rec(8, 23.0) for _ in range(3)] + [rec(4, 30.0)],
            [rec(0, 16.4) for _ in range(4)] + [rec(8, 23.0) for _ in range(3)] + [rec(0, 16.4, tree=(1,))]]


def test_samples_per_width():
    s = RC.pass_samples(zen4v_decode())
    assert sorted(s) == [1, 5, 9] and len(s[1]) == 8 and len(s[9]) == 6 and len(s[5]) == 1  # the tree step left out
    assert s[1][0] == pytest.approx(0.0169) and s[9][0] == pytest.approx(0.0235)
    assert len(RC.draft_samples(zen4v_decode())) == 16


def test_anchored_to_the_runs_passes():
    cost = zen4v_cost()
    new, ratios = RC.anchored(cost, RC.pass_samples(zen4v_decode()), RC.draft_samples(zen4v_decode()))
    assert sorted(ratios) == [1, 9]  # width 5 ran once: below MIN_STEPS, it anchors nothing
    assert ratios[1] == pytest.approx(16.9 / 21.2) and ratios[9] == pytest.approx(23.5 / 24.4)
    o = cost.step_overhead_s
    assert new.base_step_s == pytest.approx(0.0169) and new.t(9) + o == pytest.approx(0.0235)
    r5 = ratios[1] + (ratios[9] - ratios[1]) * 4 / 8  # linear in n between the anchored widths
    assert new.t(5) + o == pytest.approx(r5 * (cost.t(5) + o))
    assert new.t(17) + o == pytest.approx(ratios[9] * (cost.t(17) + o))  # beyond: the nearest anchored ratio
    assert all(new.t(n) <= new.t(n + 1) for n in range(1, 17))
    assert new.t_tree(9) - new.t(9) == pytest.approx(ratios[9] * (cost.t_tree(9) - cost.t(9)))
    assert new.lookup_s["ngram"] == pytest.approx(0.0001) and new.step_overhead_s == o
    d, d0 = new.drafts["d"], cost.drafts["d"]  # the draft keeps its measured ratio to the one-token step
    assert d.step_s / new.base_step_s == pytest.approx(d0.step_s / cost.base_step_s)
    assert d.feed(2) / new.base_step_s == pytest.approx(d0.feed(2) / cost.base_step_s)
    assert new.prefill_s == pytest.approx(ratios[9] * cost.prefill_s) and d.prefill_s == pytest.approx(ratios[9] * d0.prefill_s)



def test_a_pooled_one_token_step_keeps_the_drafts_ratio():
    """A noisy decode whose one-token steps ran slower than its 9-wide passes (a stall): the rescaled
    t(n) is pooled to stay non-decreasing, which moves t'(1) off r(1) (t(1) + o); the draft still keeps
    its timed ratio to the one-token step as priced (it was scaled by r(1) and drifted: CI under load 16)."""
    cost = zen4v_cost()
    o = cost.step_overhead_s
    samples = {1: [3.0 * (cost.t(1) + o)] * 5, 9: [1.0 * (cost.t(9) + o)] * 5}
    new, ratios = RC.anchored(cost, samples)
    assert ratios[1] == pytest.approx(3.0) and new.base_step_s < 3.0 * cost.base_step_s  # pooled
    d, d0 = new.drafts["d"], cost.drafts["d"]
    assert d.step_s / new.base_step_s == pytest.approx(d0.step_s / cost.base_step_s)
    assert d.feed(2) / new.base_step_s == pytest.approx(d0.feed(2) / cost.base_step_s)

def test_the_anchor_lowers_an_optimistic_forecast():
    """A chain that keeps 2 of every 8 drafts on average: with the baseline priced 25% high and the wide
    pass 4% high the forecast was optimistic; anchored, it is the ratio the run's own passes give."""
    cost = zen4v_cost()
    runs = [[SimpleNamespace(k=8, n_accepted=2, n_committed=3, draft_ms=0.1, committed=(), drafts=(), tree=(),
                             accepted_path=())] * 10]
    cal = A.chain_calibration("ngram", runs, 8)
    before = A.predict_chain(cal, cost, 8, "ngram")
    new, _ = RC.anchored(cost, RC.pass_samples(zen4v_decode()))
    after = A.predict_chain(cal, new, 8, "ngram")
    assert after.tau == before.tau and after.speedup < before.speedup
    lookup = cost.lookup_s["ngram"]
    assert after.speedup == pytest.approx(after.tau * 0.0169 / (0.0235 + lookup))
    assert before.speedup == pytest.approx(before.tau * 0.0212 / (0.0244 + lookup))


def test_nothing_to_anchor_leaves_the_model_alone():
    cost = zen4v_cost()
    assert RC.anchored(cost, {1: [0.01] * 4}) == (cost, {})  # four steps: fewer than MIN_STEPS
    assert RC.anchored(cost, {}) == (cost, {})
    new, ratios = RC.anchored(cost, {9: [0.0235] * 5}, lookups=[0.001] * 3)
    assert new.lookup_s == cost.lookup_s  # three lookups: kept as measured
    assert new.base_step_s == pytest.approx(ratios[9] * cost.base_step_s)  # one width: the same ratio everywhere
    assert "t(9) x 0.96" in RC.words(ratios, 5)


@pytest.mark.parametrize("timed", [True, False])
def test_advise_anchors_a_measured_cost_model_to_its_decode(tiny, monkeypatch, timed):
    """advise() under greedy decoding prices the target's passes from its replay decode when the cost
    model was timed here (measured_s > 0), and says so; a cost model of given numbers stays as given."""
    from dataclasses import replace

    from specviz.bench import advise as adv
    from specviz.core.records import Sampling
    from specviz.prompts import PromptRow

    target = tiny
    given = replace(cost_model(slope=0.0005, overhead=0.001), measured_s=1.0 if timed else 0.0)
    monkeypatch.setattr(adv, "load_or_measure", lambda *a, **kw: (given, False))
    prompts = [PromptRow("the cat sat on the mat. the cat sat on the mat. the", "code", "p0"),
               PromptRow("abc abc abc abc abc abc abc", "dialogue", "p1")]
    advice = adv.advise(target, ["ngram"], prompts, ks=(1, 2), max_new_tokens=24, sampling=Sampling(temperature=0.0),
                        chat=False)
    told = [n for n in advice.notes if "priced as the advisor's own decode ran them" in n]
    if timed:
        assert len(told) == 1 and "t(1) x " in told[0] and advice.cost.target_s != given.target_s
        c = advice.cost.drafts["d"].step_s / advice.cost.base_step_s  # the draft's ratio to the step, as measured
        assert c == pytest.approx(given.drafts["d"].step_s / given.base_step_s)
    else:
        assert not told and advice.cost == given
