"""The lesson pieces (issue 13): pure renderers and numbers, tested without a server.

The marker on digit tokens, a formatter that never hides a probability, the "why this speedup?"
card, the per-position prediction, the race, a step in phases, and the CSS they need.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest

from specviz import viz
from specviz.analysis.prediction import (
    ASSUMPTIONS,
    compare,
    drafted_fraction_of_row,
    expected_tokens_per_step_positional,
    predict_from_positions,
    predict_row,
    row_agreement,
)
from specviz.core.records import DraftDecision, Stats, StepRecord
from specviz.viz import explain, numbers, phases, race
from specviz.viz.numbers import fmt_pair, fmt_prob
from specviz.viz.styles import PLOT_CONFIG, lesson_css

ROOT = Path(__file__).resolve().parents[1]


# -- records -------------------------------------------------------------------------------------


def _d(i, tid, text, q, p, u, verdict, top_p=None, top_q=None, threshold=None):
    return DraftDecision(
        position=i, token_id=tid, text=text, q=q, p=p, ratio=min(1.0, p / q) if q else 1.0, u=u, verdict=verdict,
        top_p=top_p if top_p is not None else ((tid, text, p), (99, "zz", max(0.0, 1 - p))),
        top_q=top_q if top_q is not None else ((tid, text, q), (98, "yy", 1 - q)), threshold=threshold,
    )


def _step(index, drafts, n, next_text="X", next_kind="resampled", ms=(5.0, 20.0, 1.0), committed_text=None, rule="exact",
          top_residual=((13, "X", 0.8),)):
    committed_text = committed_text or tuple(d.text for d in drafts[:n]) + (next_text,)
    return StepRecord(
        index=index, k=len(drafts), drafts=tuple(drafts), n_accepted=n, next_token_id=13, next_token_text=next_text,
        next_kind=next_kind, next_p=0.5, top_next=((13, next_text, 0.5),), top_residual=top_residual if n < len(drafts) else (),
        committed=tuple(range(len(committed_text))), committed_text=tuple(committed_text), draft_ms=ms[0], verify_ms=ms[1],
        other_ms=ms[2], rule=rule,
    )


def rejected_step(index=0):
    """k=3: accepted, rejected, discarded; correction 'X'."""
    return _step(index, [_d(0, 10, " the", 0.8, 0.9, 0.2, "accepted"), _d(1, 11, " cat", 0.7, 0.1, 0.6, "rejected"),
                         _d(2, 12, " sat", 0.5, 0.3, None, "discarded")], 1)


def bonus_step(index=1):
    return _step(index, [_d(0, 20, "a", 0.9, 0.95, 0.5, "accepted"), _d(1, 21, "b", 0.8, 0.9, 0.1, "accepted")], 2,
                 next_text="c", next_kind="bonus")


def greedy_step(index=0):
    return _step(index, [_d(0, 30, "x", 0.9, 0.6, None, "accepted"), _d(1, 31, "y", 0.8, 0.2, None, "rejected",
                                                                          top_p=((32, "z", 0.7), (31, "y", 0.2)))], 1,
                 next_text="z")


def typical_step(index=0):
    return _step(index, [_d(0, 40, "m", 0.9, 0.4, None, "accepted", threshold=0.09),
                         _d(1, 41, "n", 0.8, 0.05, None, "rejected", threshold=0.09)], 1, rule="typical")


def target_only_step(index, text, ms=100.0):
    return StepRecord(index=index, k=0, drafts=(), n_accepted=0, next_token_id=1, next_token_text=text, next_kind="target",
                      next_p=0.9, top_next=(), top_residual=(), committed=(1,), committed_text=(text,),
                      draft_ms=0.0, verify_ms=ms, other_ms=0.0)


def digit_step(drafted="9"):
    """A rejected draft of a digit among digit tokens: Plotly reads "9" as a number if allowed to."""
    top_p = tuple((100 + i, str(i), 0.3 - 0.02 * i) for i in range(10))
    top_q = ((100 + int(drafted), drafted, 0.6),) + tuple((100 + i, str(i), 0.04) for i in range(10) if str(i) != drafted)
    d = DraftDecision(position=0, token_id=100 + int(drafted), text=drafted, q=0.6, p=0.3 - 0.02 * int(drafted), ratio=0.2,
                      u=0.7, verdict="rejected", top_p=top_p, top_q=top_q)
    return StepRecord(index=0, k=1, drafts=(d,), n_accepted=0, next_token_id=100, next_token_text="0", next_kind="resampled",
                      next_p=0.3, top_next=(), top_residual=tuple((100 + i, str(i), 0.1) for i in range(10) if str(i) != drafted),
                      committed=(100,), committed_text=("0",), draft_ms=1, verify_ms=1, other_ms=1)


def _trace(fig, name):
    return [t for t in fig.data if t.name == name]


# -- 1. the drafted-x marker on number-like tokens ----------------------------------------------


@pytest.mark.parametrize("drafted", ["9", "7", "0", "3"])
def test_drafted_marker_sits_on_its_own_bar_for_digit_tokens(drafted):
    fig = viz.topk_figure(digit_step(drafted), 0)
    (p,) = _trace(fig, "p (target)")
    (mark,) = _trace(fig, "drafted x")
    assert fig.layout.xaxis.type == "category"
    assert list(fig.layout.xaxis.categoryarray) == list(p.x)  # the bars' own order
    assert list(mark.x) == [drafted]  # the marker's x IS the bar's category (a trace: looked up by label)
    i = list(p.x).index(drafted)
    assert p.y[i] == pytest.approx(0.3 - 0.02 * int(drafted))
    # no annotation may carry a number-like x on the category axis: Plotly reads it as an index
    for a in fig.layout.annotations or ():
        if a.xref in (None, "x"):
            assert not re.fullmatch(r"\s*[-+]?\d+(\.\d*)?\s*", str(a.x)), a


@pytest.mark.browser
def test_drafted_marker_lands_on_the_right_bar_in_plotly_js(browser):
    """In Plotly.js itself: the pixel of the marker equals the pixel of the drafted token's bar."""
    import plotly

    js = (Path(plotly.__file__).parent / "package_data" / "plotly.min.js").read_text()
    page = browser.new_page()
    page.set_content(f"<div id=g style='width:700px'></div><script>{js}</script>")
    fig = json.loads(viz.topk_figure(digit_step("9"), 0).to_json())
    got = page.evaluate("""(f) => { Plotly.newPlot('g', f.data, f.layout); const gd = document.getElementById('g');
        const xa = gd._fullLayout.xaxis, i = gd._fullData.findIndex(t => t.name === 'drafted x');
        return {cats: xa._categories, mark: xa._categories[Math.round(gd.calcdata[i][0].x)]}; }""", fig)
    page.close()
    assert got["mark"] == "9" and got["cats"][0] == "9"


# -- 2. numbers a student can check ----------------------------------------------------------------


def test_fmt_prob_significant_figures_and_scientific_notation():
    assert fmt_prob(0.000412) == "4.12e-4"
    assert fmt_prob(0.408) == "0.408" and fmt_prob(1.0) == "1.000" and fmt_prob(0.8) == "0.800"
    assert fmt_prob(0.0412) == "0.0412" and fmt_prob(0.00412) == "0.00412"
    assert fmt_prob(0.0) == "0" and fmt_prob(None) == "—" and fmt_prob(1e-12) == "1.00e-12"
    assert fmt_prob(0.99996) == "0.99996"  # never "1.000" for a value below 1
    assert fmt_prob(0.099996) in ("0.100", "0.1000")


def test_fmt_prob_never_rounds_a_positive_value_away():
    rng = random.Random(0)
    for _ in range(2000):
        x = 10 ** rng.uniform(-9, 0)
        s = fmt_prob(x)
        assert not re.fullmatch(r"0\.0*", s), (x, s)
        assert float(s) == pytest.approx(x, rel=5e-3), (x, s)
        assert not (x < 1 and float(s) >= 1), (x, s)


def test_fmt_pair_separates_different_values():
    su, sr = fmt_pair(0.40812, 0.40809)
    assert su != sr and float(su) > float(sr)
    assert fmt_pair(0.5, 0.5) == ("0.500", "0.500")
    assert fmt_pair(None, 0.3) == ("—", "0.300")


def test_tooltips_and_table_show_small_probabilities():
    s = _step(0, [_d(0, 10, "q", 0.00101, 0.000412, 0.7, "rejected", top_p=((5, "w", 0.9),))], 0)
    tips = viz.tokens_html("", [s])
    assert "p = 4.12e-4" in tips and "q = 0.00101" in tips and "0.000 " not in tips
    assert "u = 0.700 &gt; 0.408" in tips
    row = viz.draft_table_rows(s)[0]
    assert row[2:6] == ["0.00101", "4.12e-4", "0.408", "0.700"]


def test_chart_hovers_and_title_use_the_formatter():
    s = _step(0, [_d(0, 10, "q", 0.00101, 0.000412, 0.7, "rejected", top_p=((5, "w", 0.9), (10, "q", 0.000412)))], 0)
    fig = viz.topk_figure(s, 0)
    (p,) = _trace(fig, "p (target)")
    assert "4.12e-4" in list(p.customdata) and "%{customdata}" in p.hovertemplate
    assert "u 0.700 > min(1, p/q) 0.408" in fig.layout.title.text


def test_learn_charts_read_digit_tokens_as_categories_and_format_hovers():
    import torch

    from specviz.viz import learn as vl

    p = torch.tensor([0.6, 0.399588, 0.000412])
    q = torch.tensor([0.2, 0.3, 0.5])
    fig = vl.rule_figure(["1", "2", "3"], p, q)
    assert fig.layout.xaxis.type == "category"
    (pt,) = _trace(fig, "p (target)")
    assert list(pt.customdata)[2] == "4.12e-4" and "%{customdata}" in pt.hovertemplate
    keep = [t for t in fig.data if t.yaxis == "y2"][0]
    assert "0.00" not in keep.text  # min(1, p/q) = 8.2e-4 is not rounded to nothing


def test_column_headers_fit_each_rule():
    heads = lambda rec: [h for h, _tip in numbers.draft_columns(rec)]
    assert heads(rejected_step())[4:6] == ["min(1, p/q)", "u"]
    assert heads(typical_step())[4:6] == ["threshold", "p > thr?"]
    g = heads(greedy_step())
    assert "argmax p?" in g and any("unused" in h for h in g)
    assert all(len(numbers.draft_columns(r)) == 7 for r in (rejected_step(), typical_step(), greedy_step()))
    html_t = viz.draft_table_html(typical_step())
    assert "<th title=" in html_t and "p &gt; thr?" in html_t and "not used" in html_t
    html_g = viz.draft_table_html(greedy_step())
    assert "argmax p?" in html_g and "ratio is not used" in html_g


def test_rule_cells_and_tooltips():
    t = viz.draft_table_rows(typical_step())
    assert t[0][4] == "0.0900" and t[0][5] == "p>thr: yes" and t[1][5] == "p>thr: no"
    g = viz.draft_table_rows(greedy_step())
    assert g[0][5] == "yes" and g[1][5] == "no: argmax is 'z'"
    tips = viz.tokens_html("", [greedy_step()])
    assert "not used at greedy" in tips and "x = argmax p" in tips
    tips = viz.tokens_html("", [typical_step()])
    assert "not used by typical acceptance" in tips and "p = 0.0500 ≤ min(ε, δ·e^(−H(p))) = 0.0900" in tips


def test_tau_label_keeps_its_case():
    h = viz.metrics_html(None)
    assert '<span class="sv-sym" style="text-transform:none">τ</span>' in h  # works before lesson.css is wired
    assert re.search(r"\.sv-sym[^{]*\{[^}]*text-transform:\s*none", lesson_css())


# -- 3. why this speedup? ---------------------------------------------------------------------------


def test_card_explains_a_slow_draft():
    s = explain.explain_speedup(a=0.96, k=4, tau=4.6, tokens=65, target_forwards=15, c=0.5, v=1.7, proposer="int8 draft")
    assert s.verdict == "faster" and s.limit == "c" and s.predicted == pytest.approx(4.6 / 3.7)
    assert "accepted 96% of the time" in s.text and "4.6 tokens instead of 1" in s.text
    assert "4 x 0.50 + 1.70 = 3.70 target steps" in s.text and "1.24x" in s.text
    assert "draft's cost" in s.text and "ngram" in s.advice
    assert 'data-verdict="faster"' in s.html() and 'data-limit="c"' in s.html()


def test_card_is_honest_about_a_measured_slowdown():
    s = explain.explain_speedup(a=0.96, k=4, tau=4.6, tokens=65, target_forwards=15, c=0.9, v=1.7, speedup=0.92)
    assert s.verdict == "slower" and "0.92x" in s.headline and "slower" in s.headline
    assert s.limit == "c" and "Lower k" in s.advice
    # the decode loop pays but the wall clock does not: say where the time went
    o = explain.explain_speedup(a=0.96, k=4, tau=4.6, tokens=65, target_forwards=15, c=0.5, v=1.7, speedup=0.92)
    assert o.verdict == "slower" and o.limit == "overhead" and "prefill" in o.advice


def test_card_names_each_limiting_factor():
    v = explain.explain_speedup(a=0.9, k=4, tau=4.0, tokens=60, target_forwards=16, c=0.01, v=3.0, speedup=1.2)
    assert v.limit == "v" and "verify pass" in v.advice
    a = explain.explain_speedup(a=0.2, k=4, tau=1.25, tokens=60, target_forwards=49, c=0.05, v=1.1, speedup=0.9)
    assert a.limit == "a" and "80% of the drafts are thrown away" in a.advice
    n = explain.explain_speedup(a=0.7, k=2, tau=1.35, tokens=60, target_forwards=45, c=0.01, v=1.05, speedup=1.2,
                                drafted_fraction=0.3, proposer="ngram")
    assert "drafted on only 30% of the steps" in n.text and n.limit == "coverage" and "70% of the steps" in n.advice
    assert "0.6 drafted tokens per step x 0.01" in n.text


def test_card_counts_one_token_in_the_singular():
    """After one step that committed 1 token (a phone walk-through's first Step): "1 token", not "1 tokens"."""
    s = explain.explain_speedup(a=0.0, k=4, tau=1.0, tokens=1, target_forwards=2)
    assert "(2 target passes for 1 token, where" in s.text and "1 tokens" not in s.text
    cards = viz.metrics_html(Stats(steps=1, drafted=4, accepted=0, new_tokens=1, acceptance_rate=0.0, mean_acceptance_length=1.0,
                                   per_position=(0.0,), wall_s=0.42, tokens_per_s=2.4, target_forwards=2, draft_ms=0.0,
                                   verify_ms=85.0, other_ms=2.0, prefill_ms=300.0), steps=[])
    assert "1 token · engine time" in cards and "1 tokens" not in cards


def test_card_without_a_baseline_or_without_drafts():
    u = explain.explain_speedup(a=0.96, k=4, tau=4.6, tokens=65, target_forwards=15)
    assert u.verdict == "unknown" and u.predicted is None and "target-only" in u.advice
    z = explain.explain_speedup(a=None, k=0, tau=1.0, tokens=30, target_forwards=31)
    assert z.verdict == "nothing drafted" and "exactly 1 token" in z.headline
    with pytest.raises(ValueError, match="drafted_fraction"):
        explain.explain_speedup(a=0.5, k=2, tau=1.5, tokens=10, target_forwards=8, drafted_fraction=1.5)


def _stats(steps, drafted, accepted, tokens, wall, draft_ms, verify_ms, other_ms, per=()):
    return Stats(steps=steps, drafted=drafted, accepted=accepted, new_tokens=tokens,
                 acceptance_rate=accepted / drafted if drafted else 0.0, mean_acceptance_length=tokens / steps,
                 per_position=per, wall_s=wall, tokens_per_s=tokens / wall, target_forwards=steps + 1,
                 draft_ms=draft_ms, verify_ms=verify_ms, other_ms=other_ms, prefill_ms=50.0)


def test_card_from_a_run_and_its_baseline():
    base = _stats(60, 0, 0, 60, 6.2, 0.0, 5900.0, 100.0)  # T = 100 ms a step
    run = _stats(15, 60, 50, 65, 5.0, 1500.0, 2500.0, 50.0)
    c, v = explain.run_costs(run, base)
    assert c == pytest.approx(1500 / 60 / 100) and v == pytest.approx(2550 / 15 / 100)
    s = explain.explain_run([rejected_step()] * 15, run, base, k=4)
    assert s.measured == pytest.approx((65 / 5.0) / (60 / 6.2))
    assert s.numbers["c"] == pytest.approx(0.25) and "Speedup" in s.headline
    assert explain.run_costs(run, None) == (None, None)
    assert explain.drafted_fraction([rejected_step(), target_only_step(1, "a")]) == 0.5


# -- 4. the prediction from per-position acceptance --------------------------------------------------


def _simulate(n_steps, k, cond, f, seed=0):
    """Steps whose draft i is accepted with conditional probability cond[i] (clustered acceptance);
    a fraction f of the steps drafts at all. Returns (per_position, tau, pooled a)."""
    rng = random.Random(seed)
    hits, trials, committed, drafted, accepted = [0] * k, [0] * k, 0, 0, 0
    for _ in range(n_steps):
        if rng.random() >= f:
            committed += 1
            continue
        n = 0
        while n < k and rng.random() < cond[n]:
            n += 1
        for i in range(k):
            trials[i] += 1
            hits[i] += i < n
        drafted, accepted, committed = drafted + k, accepted + n, committed + n + 1
    return [h / t for h, t in zip(hits, trials)], committed / n_steps, accepted / drafted


def test_positional_prediction_matches_a_clustered_run_where_iid_does_not():
    per, tau, a = _simulate(20000, 4, [0.6, 0.95, 0.95, 0.95], f=1.0)
    pred = predict_from_positions(per, 4, a=a)
    assert pred.tau == pytest.approx(tau, rel=0.02)
    assert abs(pred.tau_iid - tau) / tau > 0.10  # the i.i.d. formula misses this run (the test can fail)
    per, tau, a = _simulate(20000, 2, [0.8, 0.7], f=0.4, seed=1)  # an n-gram that drafts on 40% of steps
    assert predict_from_positions(per, 2, drafted_fraction=0.4).tau == pytest.approx(tau, rel=0.02)
    assert predict_from_positions(per, 2).tau > tau * 1.2  # ignoring the fraction overshoots


def test_positional_formula_and_speedup():
    assert expected_tokens_per_step_positional([0.9, 0.8, 0.5]) == pytest.approx(3.2)
    assert expected_tokens_per_step_positional([0.9, 0.8], drafted_fraction=0.5) == pytest.approx(1 + 0.5 * 1.7)
    assert expected_tokens_per_step_positional([0.9, 0.8], reach=[0.5, 0.25]) == pytest.approx(1 + 0.45 + 0.2)
    p = predict_from_positions([0.9, 0.8], 2, c=0.1, v=1.2)
    assert p.speedup == pytest.approx(2.7 / (2 * 0.1 + 1.2))
    with pytest.raises(ValueError, match="position 2"):
        expected_tokens_per_step_positional([0.5, 1.5])
    with pytest.raises(ValueError, match="drafted_fraction"):
        expected_tokens_per_step_positional([0.5], drafted_fraction=-0.1)
    assert "per-position" in ASSUMPTIONS and "prefill" in ASSUMPTIONS


def test_full_chains_equal_one_plus_the_sum_of_reported_rates():
    """Through theory's conditional rates and back: 1 + sum_i r_i when each step drafts the full chain."""
    for rates in ([0.9, 0.7, 0.5], [0.5, 0.0, 0.0], [1.0, 1.0]):
        assert expected_tokens_per_step_positional(rates) == pytest.approx(1 + sum(rates))
        assert expected_tokens_per_step_positional(rates, reach=[1.0] * len(rates)) == pytest.approx(1 + sum(rates))


def test_compare_agrees_or_explains():
    ok = compare("tau", 2.0, 1.95)
    assert ok.ok and "within 10%" in ok.text
    bad = compare("speedup", 1.29, 1.64, ["the prefill"])
    assert not bad.ok and bad.gap == pytest.approx(1.29 / 1.64 - 1) and "because the prefill" in bad.text
    assert not compare("tau", None, 2.0).ok


def test_bench_rows_use_per_prompt_counts():
    row = {"proposer": "ngram", "k": 2, "impl": "specviz", "steps": 100, "drafted": 80, "per_position": [0.5, 0.25],
           "mean_acceptance_length": 1.32, "c": 0.01, "v": 1.05, "acceptance_rate": 0.375, "speedup": 1.0,
           "new_tokens": 150, "wall_s": 2.0, "draft_ms": 10.0, "verify_ms": 1500.0, "other_ms": 20.0, "prefill_ms": 300.0}
    prompts = [{"proposer": "ngram", "k": 2, "impl": "specviz", "per_position_trials": [30, 20]},
               {"proposer": "ngram", "k": 2, "impl": "specviz", "per_position_trials": [10, 20]},
               {"proposer": "draft", "k": 2, "impl": "specviz", "per_position_trials": [99, 99]}]
    f, reach = drafted_fraction_of_row(row, prompts)
    assert f == pytest.approx(0.4) and reach == pytest.approx([0.4, 0.4])
    assert drafted_fraction_of_row(row) == (pytest.approx(0.4), None)  # 80 / (2 x 100)
    pred = predict_row(row, prompts)
    assert pred.tau == pytest.approx(1 + 0.5 * 0.4 + 0.25 * 0.4) and pred.drafted_per_step == pytest.approx(0.8)
    base = {"new_tokens": 150, "wall_s": 2.4, "draft_ms": 0.0, "verify_ms": 2300.0, "other_ms": 0.0, "prefill_ms": 100.0}
    ag = row_agreement(row, prompts, base)
    assert ag["tau"].ok and "prefill" in ag["speedup"].text and ag["assumptions"] == ASSUMPTIONS
    assert predict_row({"k": 0, "steps": 10}) is None


def test_readme_sweep_agrees_within_10_percent_or_says_why():
    """Every specviz row of the README's benchmark: tau within 10%; the speedup within 10% or a
    measured reason (prefill, time between steps, the decode loops' own ratio) on the page."""
    for name in ("bench-gemma-cpu.json", "bench-gemma-cpu-schedules.json"):
        path = ROOT / "benchmarks" / "results" / name
        if not path.exists():
            pytest.skip(f"{name} is not in benchmarks/results/")
        rep = json.loads(path.read_text())
        base = next(r for r in rep["rows"] if r["k"] == 0 and r["impl"] == "specviz")
        for r in rep["rows"]:
            if r["impl"] != "specviz" or r["k"] == 0:
                continue
            ag = row_agreement(r, rep.get("prompt_rows", []), base)
            assert ag["tau"].ok, ag["text"]
            assert ag["speedup"].ok or "prefill" in ag["speedup"].text, ag["text"]


# -- 5. the race --------------------------------------------------------------------------------------


def _runs():
    base = [target_only_step(i, t) for i, t in enumerate(["The", " cat", " sat", " on", " the", " mat"])]
    spec = [_step(0, [_d(0, 1, "The", 0.9, 0.9, 0.1, "accepted"), _d(1, 2, " cat", 0.9, 0.9, 0.1, "accepted")], 2,
                  next_text=" sat", next_kind="bonus", ms=(40.0, 110.0, 0.0)),
            _step(1, [_d(0, 3, " on", 0.9, 0.9, 0.1, "accepted"), _d(1, 4, " a", 0.9, 0.1, 0.9, "rejected")], 1,
                  next_text=" the", ms=(40.0, 110.0, 0.0)),
            _step(2, [_d(0, 5, " mat", 0.9, 0.9, 0.1, "accepted"), _d(1, 6, ".", 0.9, 0.1, 0.9, "rejected")], 1,
                  next_text="!", ms=(40.0, 110.0, 0.0))]
    return spec, base


def test_race_timeline_and_text_at_time():
    spec, base = _runs()
    tl = race.race_timeline(spec, start_ms=50.0)
    assert [p.t_ms for p in tl] == [200.0, 350.0, 500.0] and [p.tokens for p in tl] == [3, 5, 7]
    assert tl[1].kinds == ("accepted", "resampled") and tl[0].kinds == ("accepted", "accepted", "bonus")
    assert race.race_text_at(spec, 199.0, 50.0) == ("", 0, False)
    assert race.race_text_at(spec, 350.0, 50.0) == ("The cat sat on the", 5, False)
    assert race.race_text_at(base, 1000.0) == ("The cat sat on the mat", 6, True)
    assert race.race_duration_ms(tl, race.race_timeline(base)) == 600.0
    with pytest.raises(ValueError, match="start_ms"):
        race.race_timeline(spec, -1.0)


def test_race_figure_puts_both_runs_on_one_clock():
    spec, base = _runs()
    fig = race.race_figure(spec, base, spec_start_ms=50.0, base_start_ms=50.0)
    (s,) = _trace(fig, "speculative")
    (b,) = _trace(fig, "target-only")
    assert list(s.x) == pytest.approx([0.05, 0.2, 0.35, 0.5]) and list(s.y) == [0, 3, 5, 7]
    assert list(b.y) == [0, 1, 2, 3, 4, 5, 6] and b.x[-1] == pytest.approx(0.65)
    assert s.line.shape == "hv" and "␣cat" in s.hovertext[1]
    assert "6 tokens" in fig.layout.title.text and "1.30x" in fig.layout.title.text  # 650 ms / 500 ms
    assert not fig.layout.annotations
    st = race.race_figure(spec, base, static=True)  # a screenshot needs no hover
    texts = " ".join(a.text for a in st.layout.annotations)
    assert "7 tokens at 0.45 s" in texts and "6 tokens at 0.60 s" in texts and "mat" in texts
    assert race.race_figure([], []).layout.annotations  # placeholder


def test_race_html_is_static_and_animatable():
    spec, base = _runs()
    h = race.race_html(spec, base, 360.0)
    assert "<script" not in h and 'data-t-ms="360"' in h and 'data-total-ms="600"' in h
    lanes = re.findall(r'class="sv-race-lane (\S+)" data-tokens="(\d+)" data-done="(\w+)"', h)
    assert lanes == [("sv-race-spec", "5", "false"), ("sv-race-base", "3", "false")]
    assert 'tok tok-bonus' in h and 'tok tok-resampled' in h
    end = race.race_html(spec, base, 10_000)
    assert 'data-t-ms="600"' in end and end.count('data-done="true"') == 2
    # animated by CSS alone: every token is there, each shown at its own commit time / speed
    anim = race.race_html(spec, base, speed=2.0)
    assert "<script" not in anim and "sv-race-animated" in anim
    delays = [float(x) for x in re.findall(r'class="tok tok-\w+ sv-race-tok" style="animation-delay:([\d.]+)s"', anim)]
    assert delays[:3] == [0.075] * 3 and delays[-1] == pytest.approx(0.3)  # 150 ms / 2, ..., 600 ms / 2
    assert len(delays) == 7 + 6 and "animation-duration:0.225s" in anim  # spec ends at 450 ms
    with pytest.raises(ValueError, match="speed"):
        race.race_html(spec, base, speed=0)


# -- 6. a step in phases ---------------------------------------------------------------------------


def test_phase_frames_and_stepping():
    r = rejected_step()
    assert phases.phase_frames(r) == [("draft", -1), ("verify", -1), ("decide", 0), ("decide", 1), ("commit", -1)]
    assert phases.next_frame(r, "verify") == ("decide", 0) and phases.next_frame(r, "decide", 1) == ("commit", -1)
    assert phases.next_frame(r, "commit") is None and phases.previous_frame(r, "draft") is None
    assert phases.previous_frame(r, "decide", 0) == ("verify", -1)
    assert phases.phase_frames(target_only_step(0, "a")) == [("commit", -1)]
    with pytest.raises(ValueError, match="phase must be one of"):
        phases.step_phase_html(r, "judge")


def _kinds(h):
    return re.findall(r'class="sv-phase-cell[^"]*" data-pos="\d+" data-kind="(\w+)"', h)


def test_step_in_phases_reveals_q_then_p_then_each_check():
    r = rejected_step()
    d = phases.step_phase_html(r, "draft")
    assert _kinds(d) == ["pending"] * 3 and "q 0.800" in d and "p 0.900" not in d and "tok tok-pending" in d
    v = phases.step_phase_html(r, "verify")
    assert "p 0.900" in v and "p 0.100" in v and "u " not in re.sub(r"<[^>]+>", " ", v).split("verify")[-1][:0]
    assert "sv-phase-check" not in v
    d0 = phases.step_phase_html(r, "decide", 0)
    assert _kinds(d0) == ["accepted", "pending", "pending"] and "u 0.200 ≤ 1.000 ✓" in d0
    d1 = phases.step_phase_html(r, "decide", 1)
    assert _kinds(d1) == ["accepted", "rejected", "pending"] and "u 0.600 &gt; 0.143 ✗" in d1 and "stops here" in d1
    c = phases.step_phase_html(r, "commit")
    assert _kinds(c) == ["accepted", "rejected", "discarded", "resampled"] and "residual" in c
    assert 'data-tip="' in c  # the inspector's own tooltips
    b = phases.step_phase_html(bonus_step(), "commit")
    assert _kinds(b)[-1] == "bonus" and "bonus" in b
    g = phases.step_phase_html(greedy_step(), "decide")
    assert "x = argmax p ✓" in g and "x ≠ argmax p ✗" in g and "ratio is not used" in g
    t = phases.step_phase_html(typical_step(), "decide")
    assert "p 0.400 &gt; thr 0.0900 ✓" in t and "LOSSY" in t
    assert "Run a step" in phases.step_phase_html(None)


def test_rejection_and_step_navigation():
    steps = [bonus_step(0), rejected_step(1), bonus_step(2), bonus_step(3), rejected_step(4)]
    assert phases.rejection_steps(steps) == [1, 4]
    assert phases.next_rejection(steps, None) == 1 and phases.next_rejection(steps, 1) == 4
    assert phases.next_rejection(steps, 4) is None
    assert phases.previous_rejection(steps, 4) == 1 and phases.previous_rejection(steps, 1) is None
    assert phases.previous_rejection(steps, None) == 4
    assert phases.neighbour_step(steps, 2, +1) == 3 and phases.neighbour_step(steps, 0, -1) == 0
    assert phases.neighbour_step(steps, 4, +1) == 4 and phases.neighbour_step(steps, None, +1) == 0
    assert phases.neighbour_step([], 0, 1) is None


# -- 7. CSS ---------------------------------------------------------------------------------------


def test_lesson_css_covers_phone_width_and_every_new_class():
    css = lesson_css()
    assert re.search(r"\.sv-table-wrap[^{]*\{[^}]*overflow-x:\s*auto", css)
    assert re.search(r"#sv-bench-table th[^{]*\{[^}]*white-space:\s*nowrap", css)
    assert "@media (max-width: 640px)" in css and ".modebar-container" in css
    base = (ROOT / "specviz" / "assets" / "style.css").read_text()
    spec, b = _runs()
    rendered = " ".join([
        explain.explain_speedup(a=0.9, k=2, tau=2.5, tokens=20, target_forwards=9, c=0.1, v=1.2).html(),
        phases.step_phase_html(rejected_step(), "decide", 0), phases.step_phase_html(rejected_step(), "commit"),
        race.race_html(spec, b, 300.0), race.race_html(spec, b), viz.metrics_html(None),
    ])
    classes = {c for attr in re.findall(r'class="([^"]+)"', rendered) for c in attr.split()}
    missing = [c for c in classes if f".{c}" not in css and f".{c}" not in base]
    assert not missing, missing
    assert PLOT_CONFIG["displayModeBar"] == "hover"
    assert (ROOT / "specviz" / "viz" / "assets" / "lesson.css").exists()


def test_augmented_rows_feed_the_benchmark_charts():
    from specviz.analysis.prediction import augment_rows
    from specviz.viz import bench as vb

    path = ROOT / "benchmarks" / "results" / "bench-gemma-cpu.json"
    if not path.exists():
        pytest.skip("no bench report in benchmarks/results/")
    rep = json.loads(path.read_text())
    rows = augment_rows(rep["rows"], rep["prompt_rows"])
    assert rows is not rep["rows"] and "predicted_tau_positional" not in rep["rows"][1]
    spec = [r for r in rows if r["impl"] == "specviz" and r["k"]]
    assert spec and all(r["predicted_tau_positional"] == pytest.approx(r["mean_acceptance_length"], rel=0.1) for r in spec)
    assert all("tau: measured" in r["prediction_note"] for r in spec)
    fig = vb.predicted_speedup_figure(rows)
    assert any("(per position)" in t.name for t in fig.data)
    assert not any("(per position)" in t.name for t in vb.predicted_speedup_figure(rep["rows"]).data)
    assert any("per-position" in t.name for t in vb.acceptance_length_figure(rows).data)


def test_keyboard_shortcuts_script_and_help():
    from specviz.viz.styles import KEYS, keys_help_html, lesson_js

    js = lesson_js()
    for ids, _what in KEYS.values():
        for i in ids:
            assert f'"{i}"' in js
    assert "INPUT|TEXTAREA|SELECT" in js  # never while typing
    helptext = keys_help_html()
    assert "<kbd>⇧→</kbd>" in helptext and "next rejection" in helptext and helptext.count("next rejection") == 1


@pytest.mark.browser
def test_keyboard_shortcuts_click_the_buttons(browser):
    from specviz.viz.styles import lesson_js

    page = browser.new_page()
    page.set_content("""<div id=sv-next-rejection><button onclick="window.hit=(window.hit||[]).concat('nr')">n</button></div>
        <button id=sv-play-btn disabled>play</button><button id=sv-pause-btn onclick="window.hit=(window.hit||[]).concat('pause')">p</button>
        <textarea id=box></textarea>""")
    page.evaluate(f"({lesson_js()})()")
    page.evaluate(f"({lesson_js()})()")  # installed once
    page.keyboard.press("Shift+ArrowRight")
    page.keyboard.press("]")
    page.keyboard.press(" ")  # Play is disabled: Pause
    page.focus("#box")
    page.keyboard.press("]")  # typing: ignored
    assert page.evaluate("window.hit") == ["nr", "nr", "pause"]
    page.close()


def test_card_names_the_what_ifs_best_k():
    """The card's best k is the what-if curve's (one a for every draft, this machine's v(k + 1)), the
    curve it is given; a verify-limited run is told to lower k only where that curve says so, and
    without a measured curve it says v(k + 1) is not measured instead of promising a narrower pass."""
    from specviz.viz.whatif import whatif_curve

    k_curve = whatif_curve(0.475, 0.3, 1.7, 1.0, 8, (1.05, 1.1, 1.3, 1.7, 2.0, 2.3, 2.6, 3.0))
    kb, sb = max(k_curve, key=lambda t: (t[1], -t[0]))
    s = explain.explain_speedup(a=0.475, k=4, tau=2.9, tokens=58, target_forwards=21, c=0.3, v=1.7, speedup=0.95,
                                k_curve=k_curve)
    assert kb < 4 and s.numbers["best_k"] == kb and f"peaks at k = {kb}: about {sb:.2f}x" in s.advice
    assert f'data-best-k="{kb}"' in s.html()
    flat = explain.explain_speedup(a=0.95, k=4, tau=4.5, tokens=90, target_forwards=21, c=0.01, v=2.5, speedup=1.5)
    assert flat.limit == "v" and "best_k" not in flat.numbers and "not measured here" in flat.advice
    assert "A smaller k keeps the pass narrow" not in flat.advice
    wide = whatif_curve(0.95, 0.01, 2.5, 1.0, 8, (2.5,) * 8)
    told = explain.explain_speedup(a=0.95, k=4, tau=4.5, tokens=90, target_forwards=21, c=0.01, v=2.5, speedup=1.5,
                                   k_curve=wide)
    assert told.numbers["best_k"] == 8 and "k = 8 is still the best k" in told.advice


def test_v_curve_from_bench_rows():
    rows = [{"impl": "specviz", "k": 2, "v": 1.2}, {"impl": "specviz", "k": 2, "v": 1.4}, {"impl": "specviz", "k": 2, "v": 9.0},
            {"impl": "specviz", "k": 4, "v": 1.5}, {"impl": "specviz", "k": 4, "v": 1.7}, {"impl": "hf", "k": 4, "v": 5.0},
            {"impl": "specviz", "k": 0, "v": None}]
    assert explain.v_curve_from_rows(rows) == {2: 1.4, 4: pytest.approx(1.6)}


# -- real records from tiny models -----------------------------------------------------------------


def test_lesson_pieces_on_real_runs(tiny_target, near_draft):
    """Real StepRecords (a draft model at T = 1, greedy too, and target-only) through every piece."""
    from specviz import Sampling, SpeculativeDecoder
    from specviz.core.engine import autoregressive
    from specviz.proposers import DraftModel

    prompt = "the cat sat on the mat"
    spec = SpeculativeDecoder(tiny_target, DraftModel(near_draft), k=4, sampling=Sampling(temperature=1.0)).generate(
        prompt, max_new_tokens=30, seed=3)
    greedy = SpeculativeDecoder(tiny_target, DraftModel(near_draft), k=3).generate(prompt, max_new_tokens=20, seed=0)
    base = autoregressive(tiny_target, prompt, max_new_tokens=30, sampling=Sampling(temperature=1.0), seed=3)
    assert all(s.k == 0 for s in base.steps)
    # the race ends where each run ends, with each run's own text
    fig = race.race_figure(spec.steps, base.steps, spec_start_ms=spec.stats.prefill_ms, base_start_ms=base.stats.prefill_ms)
    assert _trace(fig, "speculative")[0].y[-1] == spec.stats.new_tokens
    assert _trace(fig, "target-only")[0].y[-1] == base.stats.new_tokens
    assert race.race_text_at(base.steps, float("inf"))[0] == "".join(t for s in base.steps for t in s.committed_text)
    # every step renders in every frame, and the frames end on what was committed
    for run in (spec, greedy):
        for rec in run.steps:
            for phase, upto in phases.phase_frames(rec):
                assert f'data-phase="{phase}"' in phases.step_phase_html(rec, phase, upto)
            kinds = _kinds(phases.step_phase_html(rec, "commit"))
            assert kinds == [d.verdict for d in rec.drafts] + ([rec.next_kind] if rec.n_committed > min(rec.n_accepted, rec.n_committed) else [])
    rejections = phases.rejection_steps(spec.steps)
    assert rejections and phases.next_rejection(spec.steps, None) == rejections[0]  # T = 1: some drafts fail
    g = greedy.steps[0]
    assert g.drafts and "argmax p?" in viz.draft_table_html(g) and "not used at greedy" in viz.tokens_html(prompt, [g])
    # the card from the two runs' own Stats
    story = explain.explain_run(spec.steps, spec.stats, base.stats, k=4)
    assert story.measured is not None and story.predicted is not None and story.verdict in ("faster", "even", "slower")
    assert f"accepted {spec.stats.acceptance_rate:.0%} of the time" in story.text


# -- 8. one step, told once: the step vocabulary (core.stepwords) ----------------------------------


def _node(i, parent, depth, verdict, q=0.5, p=0.6, u=0.3):
    from specviz.core.records import TreeNode

    return TreeNode(index=i, token_id=200 + i, text=f"n{i}", parent=parent, depth=depth, q=q, p=p, r=p,
                    ratio=min(1.0, p / q), u=u if verdict != "not reached" else None, residual_mass=None,
                    verdict=verdict, top_q=())


def tree_step(rejected=False):
    """12 nodes, depth 4: the path 0-1-2-3 accepted + bonus; or (rejected) 0-1 accepted, node 5 rejected at depth 3."""
    shape = [(-1, 1), (0, 2), (1, 3), (2, 4), (-1, 1), (1, 3), (0, 2), (-1, 1), (4, 2), (6, 3), (5, 4), (9, 4)]
    path = [0, 1] if rejected else [0, 1, 2, 3]
    verdicts = ["accepted" if i in path else "not reached" for i in range(12)]
    if rejected:
        verdicts[2] = verdicts[3] = "not reached"
        verdicts[5] = "rejected"
    nodes = tuple(_node(i, par, dep, verdicts[i]) for i, (par, dep) in enumerate(shape))
    shown = path + ([5] if rejected else [])
    drafts = tuple(_d(j, 200 + i, f"n{i}", 0.5, 0.6, 0.3, verdicts[i]) for j, i in enumerate(shown))
    n = len(path)
    rec = _step(1, list(drafts), n, next_text="Z", next_kind="resampled" if rejected else "bonus")
    from dataclasses import replace

    return replace(rec, k=12, tree=nodes, accepted_path=tuple(path))


def test_a_tree_step_is_told_once_the_same_everywhere():
    from specviz.core.engine import compute_stats
    from specviz.core.stepwords import run_counts, step_counts
    from specviz.viz.tree import chain_view, tree_figure

    rec = tree_step()
    c = step_counts(rec)
    assert c == step_counts(chain_view(rec))  # the chain view tells the same counts
    assert (c.tree, c.nodes_drafted, c.nodes_verified, c.depth, c.path_accepted, c.next_kind) == (True, 12, 12, 4, 4, "bonus")
    note = "accepted path 4 of depth 4 (12 nodes drafted: the rate over nodes is 33%)"
    status = viz.step_summary_text(rec)  # the status line's words (specviz.ui.playground._step_message)
    assert note in status and status == viz.step_summary_text(chain_view(rec)) and "bonus" in status
    assert "rejected" not in status and "correction" not in status  # the old status said "draft 5 rejected"
    summary = viz.step_summary(chain_view(rec))
    assert html_escape(status) in summary and "all 4 drafts accepted" not in summary
    stats = compute_stats([rec])
    cards = viz.metrics_html(stats, steps=[rec])
    acc = re.search(r'data-metric="acceptance".*?sv-card-value">([^<]+)<.*?sv-card-sub">([^<]+)<', cards).groups()
    assert acc[0] == "100%" and "depth" in acc[1] and "33%" in acc[1]  # the card agrees with the chart
    fig = viz.acceptance_by_position_figure.spec(stats, run_counts([rec]))
    title = fig["layout"]["title"]["text"]
    assert "tree depth" in title and "100%" in title and "33%" in title and list(fig["data"][0]["y"]) == [1.0] * 4
    title = tree_figure(rec).layout.title.text  # two lines on the picture
    assert note in re.sub(r"<br><span[^>]*>|</span>", lambda m: " " if m.group().startswith("<br>") else "", title)
    tl = viz.timeline_figure.spec([chain_view(rec)])  # the page plots chain views: the counts still come from the tree
    assert tl["data"][-1]["name"] == "nodes drafted" and tl["data"][-1]["y"] == [12]
    tps = viz.tokens_per_step_figure.spec([chain_view(rec)])
    assert tps["data"][-1]["name"] == "depth + 1" and tps["data"][-1]["y"] == [5]
    r = tree_step(rejected=True)
    words = viz.step_summary_text(r)
    assert "accepted path 2 of depth 4 (12 nodes drafted: the rate over nodes is 17%)" in words
    assert "a node at depth 3 rejected, correction 'Z' resampled" in words
    assert words == viz.step_summary_text(chain_view(r)) and step_counts(r).rejected_at == 3


def html_escape(s):
    import html

    return html.escape(s)


def test_a_chain_step_keeps_its_words_and_greedy_says_argmax():
    from specviz.core.stepwords import step_counts

    assert viz.step_summary_text(rejected_step()) == "1 of 3 drafts accepted, draft 2 rejected, correction 'X' resampled"
    assert viz.step_summary_text(bonus_step()) == "all 2 drafts accepted + bonus token 'c'"
    assert "correction 'z' taken as argmax p" in viz.step_summary_text(greedy_step())  # not "resampled"
    c = step_counts(rejected_step())
    assert (c.tree, c.nodes_drafted, c.depth, c.path_accepted, c.next_kind, c.next_how) == (False, 3, 3, 1, "correction", "resampled")
    assert step_counts(greedy_step()).next_how == "argmax p" and step_counts(target_only_step(0, "a")).next_kind == "target"
    assert "100%" not in viz.metrics_html(Stats(1, 3, 1, 2, 1 / 3, 2.0, (1.0, 0.0, 0.0), 1, 2, 1, 0, 0, 0, 0),
                                          steps=[rejected_step()])


# -- 9. phases tell only what is known by then -----------------------------------------------------


def lesson_step():
    """k=3 with distinct numbers: accepted, rejected, discarded."""
    def d(i, tid, text, q, p, u, verdict):
        return _d(i, tid, text, q, p, u, verdict, top_p=((tid, text, p),), top_q=((tid, text, q),))

    return _step(0, [d(0, 10, " the", 0.81, 0.94, 0.27, "accepted"), d(1, 11, " cat", 0.72, 0.17, 0.68, "rejected"),
                     d(2, 12, " sat", 0.53, 0.36, None, "discarded")], 1, top_residual=((13, "X", 0.83),))


SECRETS_P = ["0.940", "0.170", "0.360"]  # p as the page formats it
SECRETS_U = ["0.270", "0.680", "0.236", "0.679", "0.830"]  # u, min(1, p/q), the residual
VERDICTS = ["accepted", "rejected", "discarded", "resampled", "bonus", "✓", "✗", "correction"]


def _page_at(rec, phase, upto=None):
    from specviz.viz.numbers import reveal

    shown = reveal(rec, phase, upto)
    return shown, {
        "table": viz.draft_table_html(rec, None, shown), "text": viz.tokens_html("a prompt", [rec], shown=shown),
        "summary": viz.step_summary(rec, shown), "positions": " ".join(viz.position_choices(rec, shown)),
        "chart": viz.figure_json(viz.topk_figure.spec(rec, None, shown)),
        "chart title": viz.topk_figure.spec(rec, None, shown)["layout"]["title"]["text"],
        "phase": phases.step_phase_html(rec, phase, upto),
    }


def test_the_draft_phase_shows_no_p_no_u_no_verdict():
    rec = lesson_step()
    shown, page = _page_at(rec, "draft")
    assert shown is not None and not shown.p
    for name, out in page.items():
        for secret in SECRETS_P + SECRETS_U:
            assert secret not in out, (name, secret)
        if name != "chart":  # the JSON has plotly's own keys
            body = re.sub(r"<thead>.*?</thead>", "", out)  # the headers' tooltips state the rule, not a verdict
            for word in VERDICTS:
                assert word not in body, (name, word)
    assert "0.810" in page["table"] and "0.810" in page["chart title"] and "tok-pending" in page["text"]
    assert "p (target)" not in page["chart"] and "residual" not in page["chart"]


def test_verify_then_decide_then_commit_reveal_in_order():
    rec = lesson_step()
    _, v = _page_at(rec, "verify")
    assert all(p in v["table"] for p in SECRETS_P) and "0.270" not in v["table"] and "rejected" not in v["table"]
    assert "p (target)" in v["chart"] and "residual" not in v["chart"] and "not judged yet" in v["chart title"]
    _, d0 = _page_at(rec, "decide", 0)
    assert "0.270" in d0["table"] and "accepted" in d0["table"] and "0.680" not in d0["table"]
    assert "rejected" not in d0["table"] + d0["text"] + d0["positions"]
    _, d1 = _page_at(rec, "decide", 1)
    assert "0.680" in d1["table"] and "rejected" in d1["table"] and "resampled" not in d1["table"] + d1["text"]
    _, c = _page_at(rec, "commit")
    assert "resampled" in c["table"] and "tok-resampled" in c["text"] and "residual" in c["chart"]
    assert viz.draft_table_html(rec) == c["table"]  # commit is the page as it always was


# -- 10. sentences that were wrong ------------------------------------------------------------------


def test_the_max_new_tokens_cut_is_not_a_step_that_found_nothing():
    from dataclasses import replace

    cut = replace(target_only_step(2, "a"), finished="length")  # one token was left: k was cut to 0
    assert explain.drafted_fraction([rejected_step(0), bonus_step(1), cut]) == 1.0
    assert explain.drafted_fraction([rejected_step(0), target_only_step(1, "b"), cut]) == 0.5  # a real miss counts


def test_whole_token_counts_read_as_words():
    s = explain.explain_speedup(a=0.1, k=2, tau=1.0, tokens=10, target_forwards=11)
    assert "committed only 1 token, as a target-only step does" in s.text and "instead of 1" not in s.text
    assert "1.0 tokens" not in s.text
    assert "4.6 tokens" in explain.explain_speedup(a=0.96, k=4, tau=4.6, tokens=65, target_forwards=15).text


def test_the_overhead_card_names_only_the_proposers_own_costs():
    kw = dict(a=0.96, k=4, tau=4.6, tokens=65, target_forwards=15, c=0.5, v=1.7, speedup=0.92)
    for name in ("ngram", "ngram-tree"):
        o = explain.explain_speedup(**kw, proposer=name)
        assert o.limit == "overhead" and "prefill" in o.advice and "draft model" not in o.text, name
        assert "the draft's too" not in o.text
    d = explain.explain_speedup(**kw, proposer="draft")
    assert "a draft model reads the prompt too" in d.advice


def test_a_tree_before_decide_shows_its_nodes_not_its_path():
    from specviz.viz.numbers import reveal
    from specviz.viz.tree import chain_view, tree_figure

    rec = chain_view(tree_step(rejected=True))  # as the page renders it
    for phase in ("draft", "verify"):
        shown = reveal(rec, phase)
        table = viz.draft_table_html(rec, None, shown)
        ph = phases.step_phase_html(rec, phase)
        assert table.count("<tr class=") == 12 and ph.count('class="sv-phase-cell') == 12  # every node, not the path
        page = table + ph + viz.tokens_html("", [rec], shown=shown) + " ".join(viz.position_choices(rec, shown))
        page += viz.figure_json(viz.topk_figure.spec(rec, None, shown)) + tree_figure(rec, shown=shown).to_json()
        for word in ('data-kind="accepted"', 'data-kind="rejected"', "tok-accepted", "tok-rejected", "✓", "✗"):
            assert word not in page, (phase, word)
    d = phases.step_phase_html(rec, "decide", 0)
    assert d.count('class="sv-phase-cell') == 1 and 'data-kind="accepted"' in d  # the walk so far, not the path ahead


def test_a_tree_steps_text_shows_its_rejected_siblings():
    """The text view of a tree step strikes through every rejected sibling where it was tried: before
    the path's node at its depth, and (beside the chain's rejected draft) where the walk stopped."""
    import re
    from dataclasses import replace

    from specviz.viz.tokens import rejected_siblings
    from specviz.viz.tree import chain_view

    rec = tree_step(rejected=True)  # path 0-1, node 5 rejected at depth 3 (the chain's rejected draft)
    tree = list(rec.tree)
    for i in (7, 6, 2):  # 7: a root child rejected before 0; 6: a child of 0 rejected before 1; 2: beside 5
        tree[i] = replace(tree[i], verdict="rejected", u=0.9)
    rec = chain_view(replace(rec, tree=tuple(tree)))
    sib = rejected_siblings(rec)
    assert {j: [nd.index for nd in nds] for j, nds in sib.items()} == {0: [7], 1: [6], 2: [2]}
    html_ = viz.tokens_html("", [rec], selected_step=rec.index)
    struck = re.findall(r'class="tok tok-rejected"[^>]*>([^<]*)<', html_)
    assert sorted(struck) == ["n2", "n5", "n6", "n7"]  # the chain's rejected draft and the three siblings, once each
    order = re.findall(r'class="tok tok-(\w+)"[^>]*>([^<]*)<', html_)
    assert [t for _k, t in order] == ["n7", "n0", "n6", "n1", "n5", "n2", "Z"]  # each where it was tried
    assert html_.count('class="sv-sibling"') == 3 and "a sibling" in html_
    assert rejected_siblings(tree_step()) == {} and rejected_siblings(_step(0, [], 0)) == {}  # none / a chain
