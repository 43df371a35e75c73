"""The Learn tab's experiments: the rule simulation converges to p for the exact rule and misses
for the broken ones, the closed forms match the simulations and the engine's verify(), parsing
fails with clear messages, the real-model comparison runs on tiny models, and the handlers turn
errors into messages."""

from __future__ import annotations

import json
import math

import plotly.graph_objects as go
import pytest
import torch

from specviz.analysis.theory import expected_speedup, expected_tokens_per_step
from specviz.core.algorithm import Acceptance, verify
from specviz.core.records import Sampling
from specviz.learn import chain as learn
from specviz.learn.chain import (
    PRESETS,
    RULES,
    compare_with_speculation,
    next_token_distributions,
    output_distribution,
    parse_distribution,
    parse_measured_runs,
    parse_table,
    run_rule,
    sampling_noise,
    simulate_rule,
    tv_distance,
)
from specviz.viz import learn as vl


def preset(name: str):
    tokens, p, q = PRESETS[name]
    return tokens, parse_distribution(p), parse_distribution(q)


def random_pair(seed: int, V: int = 7, sharp: float = 1.5):
    g = torch.Generator().manual_seed(seed)
    p = torch.softmax(torch.randn(V, generator=g, dtype=torch.float64) * sharp, 0)
    q = torch.softmax(torch.randn(V, generator=g, dtype=torch.float64) * sharp, 0)
    return p, q


# -- the simulation ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(PRESETS))
def test_exact_rule_converges_to_p(name):
    _, p, q = preset(name)
    n = 20_000
    counts = simulate_rule(p, q, n, "exact", seed=1)
    assert int(counts.sum()) == n and counts.shape == p.shape
    tv = tv_distance(counts.double() / n, p)
    assert tv < 4 * sampling_noise(p, n) + 1e-9, tv
    assert tv < 0.02


@pytest.mark.parametrize("rule, at_least", [("no-residual", 0.1), ("resample-q", 0.25), ("typical", 0.3)])
def test_broken_and_lossy_rules_miss_p(rule, at_least):
    tokens, p, q = preset("draft too confident")
    exp = run_rule(tokens, p, q, rule, 10_000, seed=0)
    assert exp.tv > at_least and exp.theory_tv > at_least
    assert not exp.matches and exp.kind == "error"
    assert exp.message.startswith("misses p")
    assert ("LOSSY" in exp.message) if rule == "typical" else ("not exact" in exp.message)


def test_exact_verdict_says_matches_within_noise():
    tokens, p, q = preset("draft too confident")
    exp = run_rule(tokens, p, q, "exact", 10_000, seed=0)
    assert exp.matches and exp.kind == "ok" and exp.theory_tv < 1e-12
    assert exp.message.startswith(f"matches p (TV {exp.tv:.3f}, within the sampling-noise limit ")
    # the verdict agrees with its numbers: the TV it calls "within" is at most the limit it names
    limit = float(exp.message.split("limit ")[1].split(" ")[0])
    assert exp.tv <= limit and limit == pytest.approx(learn.NOISE_FACTOR * exp.noise, abs=5e-4)
    assert 0 < exp.accepted < exp.n  # about beta = sum min(p, q) = 0.6 of the drafts are kept
    assert abs(exp.accepted / exp.n - learn.acceptance_probability(p, q)) < 0.02


def test_a_broken_rule_that_happens_to_give_p_says_so():
    tokens, p, q = preset("disjoint")  # beta = 0: every draft is rejected, and "resample from p" is then p
    exp = run_rule(tokens, p, q, "no-residual", 10_000)
    assert exp.matches and exp.kind == "info" and "not exact in general" in exp.message
    tokens, p, q = preset("draft agrees")  # a small bias, below the noise of 300 samples
    exp = run_rule(tokens, p, q, "resample-q", 300)
    assert exp.matches and exp.theory_tv > 0.01 and "hidden by the noise" in exp.message


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("rule", list(RULES))
def test_closed_forms_match_the_simulation(rule, seed):
    p, q = random_pair(seed)
    expected = output_distribution(p, q, rule)
    assert math.isclose(float(expected.sum()), 1.0, abs_tol=1e-9) and bool((expected >= 0).all())
    n = 20_000
    freq = simulate_rule(p, q, n, rule, seed=seed).double() / n
    assert tv_distance(freq, expected) < 4 * sampling_noise(expected, n) + 1e-9


def test_closed_forms_by_hand():
    p, q = random_pair(7)
    m = torch.minimum(p, q)
    beta = float(m.sum())
    torch.testing.assert_close(output_distribution(p, q, "exact"), p)
    torch.testing.assert_close(learn.exact_output_distribution(p, q, "exact"), p)
    torch.testing.assert_close(output_distribution(p, q, "no-residual"), m + (1 - beta) * p)
    torch.testing.assert_close(output_distribution(p, q, "resample-q"), m + (1 - beta) * q)
    eps, delta = 0.09, 0.3
    entropy = -(p * p.log()).sum()
    thr = min(eps, delta * math.exp(-float(entropy)))
    keep = p > thr
    want = torch.where(keep, q, torch.zeros_like(q))
    want[int(p.argmax())] += float(q[~keep].sum())
    torch.testing.assert_close(output_distribution(p, q, "typical", eps=eps, delta=delta), want)


def test_point_mass_q_is_exact_too():
    p, _ = random_pair(3)
    q = torch.zeros_like(p)
    q[2] = 1.0  # an n-gram's draft
    torch.testing.assert_close(output_distribution(p, q, "exact"), p)
    freq = simulate_rule(p, q, 20_000, "exact", seed=0).double() / 20_000
    assert tv_distance(freq, p) < 4 * sampling_noise(p, 20_000)


@pytest.mark.parametrize("acceptance", [Acceptance(), Acceptance("typical", eps=0.09, delta=0.3)])
def test_the_simulation_commits_what_the_engines_verify_commits(acceptance):
    """One drafted position (k = 1): the first committed token of verify() has the closed form's distribution."""
    p, q = random_pair(11, V=6, sharp=0.5)
    rule = acceptance.rule
    g = torch.Generator().manual_seed(0)
    n = 3000
    counts = torch.zeros(6, dtype=torch.long)
    for _ in range(n):
        x = torch.multinomial(q, 1, generator=g)  # [1]
        v = verify(torch.stack([p, p]), q[None], x, generator=g, acceptance=acceptance)
        first = int(x[0]) if v.n_accepted == 1 else v.next_token
        counts[first] += 1
    expected = output_distribution(p, q, rule, eps=acceptance.eps, delta=acceptance.delta)
    assert 0 < float(expected.max()) < 0.9  # not degenerate
    assert tv_distance(counts.double() / n, expected) < 4 * sampling_noise(expected, n)


def test_simulation_is_seeded_vectorised_and_checks_its_input(monkeypatch):
    p, q = random_pair(0, V=8)
    a = simulate_rule(p, q, 10_000, "exact", seed=5)
    assert torch.equal(a, simulate_rule(p, q, 10_000, "exact", seed=5))
    assert not torch.equal(a, simulate_rule(p, q, 10_000, "exact", seed=6))
    # vectorised: a fixed number of draws (the drafts, then the fallbacks) however many tries, on a
    # real vocabulary size; a loop over the tries would make one draw per try
    big_p, big_q = torch.softmax(torch.randn(50_000), 0), torch.softmax(torch.randn(50_000), 0)
    draws, real = [], torch.multinomial
    monkeypatch.setattr(torch, "multinomial", lambda *args, **kw: draws.append(args[1]) or real(*args, **kw))
    counts = simulate_rule(big_p, big_q, 10_000)
    monkeypatch.undo()
    assert len(draws) <= 2 and draws[0] == 10_000 and int(counts.sum()) == 10_000
    with pytest.raises(ValueError, match="unknown rule"):
        simulate_rule(p, q, 10, "sloppy")
    with pytest.raises(ValueError, match="N \\(samples\\)"):
        simulate_rule(p, q, 0)
    with pytest.raises(ValueError, match="same size"):
        simulate_rule(p, q[:5], 10)
    with pytest.raises(ValueError, match="eps"):
        simulate_rule(p, q, 10, "typical", eps=0.0)


def test_sampling_noise_is_the_mean_tv_of_a_histogram_of_p():
    p, _ = random_pair(2, V=6)
    n = 1000
    g = torch.Generator().manual_seed(0)
    tvs = [tv_distance(torch.bincount(torch.multinomial(p, n, True, generator=g), minlength=6).double() / n, p)
           for _ in range(300)]
    assert abs(sum(tvs) / len(tvs) - sampling_noise(p, n)) < 0.1 * sampling_noise(p, n)
    assert sampling_noise(torch.tensor([1.0, 0.0, 0.0]), 100) == 0.0


# -- parsing -----------------------------------------------------------------------------------


def test_parse_distribution_normalises():
    torch.testing.assert_close(parse_distribution("1 1 2, 0; 4"), torch.tensor([0.125, 0.125, 0.25, 0.0, 0.5], dtype=torch.float64))
    torch.testing.assert_close(parse_distribution([0.2, "0.2", 0.2, 0.2, "20%"]), torch.full((5,), 0.2, dtype=torch.float64))


@pytest.mark.parametrize("values, message", [
    ([0.5, -0.1, 0.2, 0.2, 0.2], "negative"),
    ([0, 0, 0, 0, 0], "all zeros"),
    ([0.5, 0.5, 0.5, 0.5], "5 to 8 values"),
    ([0.1] * 9, "5 to 8 values"),
    ([0.1, "x", 0.1, 0.1, 0.1], "must be a number"),
    ([0.1, float("nan"), 0.1, 0.1, 0.1], "finite"),
    ([0.1, "", 0.1, 0.1, 0.1], "empty"),
    ("0.1 0.2 abc 0.3 0.4", "must be a number"),
])
def test_parse_distribution_errors(values, message):
    with pytest.raises(ValueError, match=message):
        parse_distribution(values, "q")


def test_parse_table():
    rows = [["the", 3, 1], [None, 1, 1], ["", "", ""], ["cat", 1, 1], ["dog", 1, 1], ["sat", 1, 0], ["ran", 1, 1]]
    tokens, p, q = parse_table(rows)
    assert tokens == ["the", "t2", "cat", "dog", "sat", "ran"]  # the blank row is skipped
    assert math.isclose(float(p[0]), 3 / 8) and math.isclose(float(q[4]), 0.0)
    with pytest.raises(ValueError, match="must differ"):
        parse_table([["a", 1, 1]] * 5)
    with pytest.raises(ValueError, match="5 to 8 tokens"):
        parse_table(rows[:3])
    with pytest.raises(ValueError, match="q is all zeros"):
        parse_table([[t, 1, 0] for t in "abcde"])


# -- part 2: tiny real models ------------------------------------------------------------------


def test_next_token_distributions_are_the_models_softmax(tiny_target, near_draft):
    sampling = Sampling(temperature=1.5, top_p=0.95)
    nt = next_token_distributions(tiny_target, near_draft, "the cat sat on the", sampling)
    ids = tiny_target.tokenizer("the cat sat on the")["input_ids"]
    assert list(nt.prompt_ids) == ids and nt.draft_token is None
    from specviz.core.algorithm import logits_to_probs

    with torch.inference_mode():
        want_p = logits_to_probs(tiny_target.model(torch.tensor([ids])).logits[0, -1], sampling)
        want_q = logits_to_probs(near_draft.model(torch.tensor([ids])).logits[0, -1], sampling)
    torch.testing.assert_close(nt.p.float(), want_p, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(nt.q.float(), want_q, atol=1e-5, rtol=1e-4)
    cmp = compare_with_speculation(nt.p, nt.q, 10_000, seed=0)
    assert cmp.kind == "ok" and cmp.message.startswith("Both match p")
    assert cmp.tv_spec < 4 * cmp.noise + 1e-9 and cmp.theory_tv < 1e-9
    assert int(cmp.spec_counts.sum()) == int(cmp.plain_counts.sum()) == 10_000
    ids_, p, q, spec, plain = learn.comparison_rows(nt.p, nt.q, cmp)
    assert len(ids_) <= 13 and all(math.isclose(sum(col), 1.0, abs_tol=1e-6) for col in (p, q, spec, plain))


def test_typical_acceptance_on_a_real_model_is_measured_lossy(tiny_target, tiny_draft):
    nt = next_token_distributions(tiny_target, tiny_draft, "the dog sat", Sampling(temperature=2.0))
    cmp = compare_with_speculation(nt.p, nt.q, 10_000, seed=0, rule="typical")
    assert cmp.theory_tv > 0.05 and cmp.tv_spec > 0.05 and "LOSSY" in cmp.message


def test_ngram_point_mass_and_errors(tiny_target, tmp_path):
    nt = next_token_distributions(tiny_target, None, "abcabcab", Sampling(temperature=1.0))
    assert nt.draft_token == tiny_target.tokenizer.convert_tokens_to_ids("c")
    assert float(nt.q.sum()) == 1.0 and float(nt.q[nt.draft_token]) == 1.0
    cmp = compare_with_speculation(nt.p, nt.q, 10_000)
    assert cmp.tv_spec < 4 * cmp.noise + 1e-9
    with pytest.raises(ValueError, match="no earlier occurrence"):
        next_token_distributions(tiny_target, None, "xyz", Sampling(temperature=1.0))
    with pytest.raises(ValueError, match="greedy"):
        next_token_distributions(tiny_target, None, "abcab", Sampling(temperature=0.0))
    with pytest.raises(ValueError, match="prompt is empty"):
        next_token_distributions(tiny_target, None, "  ", Sampling(temperature=1.0))
    from tests.support import loaded, make_tiny_model

    model, tok = make_tiny_model(seed=3)
    with pytest.raises(ValueError, match="tokenizer"):
        next_token_distributions(tiny_target, loaded(model, tok, "bpe"), "abc", Sampling(temperature=1.0))


# -- part 3: the calculator --------------------------------------------------------------------


def test_speedup_curve_and_best_k():
    curve = learn.speedup_curve(0.8, 0.1, 1.0, 16)
    assert [k for k, _, _ in curve] == list(range(1, 17))
    for k, e, s in curve:
        assert e == expected_tokens_per_step(0.8, k) and s == expected_speedup(0.8, k, 0.1, 1.0)
    k, s = learn.best_k(0.8, 0.1, 1.0)
    assert s == max(t[2] for t in curve) and curve[k - 1][2] == s
    assert learn.best_k(0.0, 0.5, 1.0) == (1, expected_speedup(0.0, 1, 0.5, 1.0))
    with pytest.raises(ValueError, match="acceptance rate"):
        learn.speedup_curve(1.5, 0.1)
    with pytest.raises(ValueError, match="v "):
        learn.speedup_curve(0.5, 0.1, 0.0)


def test_parse_measured_runs():
    runs = parse_measured_runs("0.62, 4, 1.35  # my run\n\n a=0.5 k=2 speedup=1.1\n0.7 8 0.9")
    assert [(r.a, r.k, r.speedup, r.label) for r in runs] == [(0.62, 4, 1.35, "my run"), (0.5, 2, 1.1, ""), (0.7, 8, 0.9, "")]
    assert parse_measured_runs("") == []
    for text, message in [("0.6 4", "three numbers"), ("1.6 4 1.2", "from 0 to 1"), ("0.6 2.5 1.2", "whole number"),
                          ("0.6 4 -1", "speedup must be > 0"), ("0.6 four 1.2", "must be a number")]:
        with pytest.raises(ValueError, match=message):
            parse_measured_runs("0.5, 2, 1.1\n" + text)


def _report():
    base = dict(kind="summary", impl="specviz", acceptance_rate=None, speedup=1.0, c=None, v=None)
    return {"schema": "specviz-bench/1", "rows": [
        base | dict(proposer="target-only", k=0),
        base | dict(proposer="ngram", k=4, acceptance_rate=0.5, speedup=1.4, c=0.01, v=1.3),
        base | dict(proposer="draft:x", k=2, acceptance_rate=0.7, speedup=0.9, c=0.3, v=1.1),
        base | dict(proposer="ngram", k=4, impl="hf", acceptance_rate=None, speedup=1.2),
    ]}


def test_runs_from_a_bench_report(tmp_path):
    runs = learn.runs_from_bench_report(_report())
    assert [(r.k, r.a, r.speedup, r.label) for r in runs] == [(4, 0.5, 1.4, "ngram k=4"), (2, 0.7, 0.9, "draft:x k=2")]
    a, c, v = learn.mean_costs(runs)
    assert math.isclose(a, 0.6) and math.isclose(c, 0.155) and math.isclose(v, 1.2)
    assert learn.pick_run(runs).label == "ngram k=4" and learn.pick_run(runs, "draft:x k=2").c == 0.3
    assert list(learn.runs_by_proposer(runs)) == ["ngram", "draft:x"]
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(_report()))
    assert learn.load_bench_runs(path) == runs
    assert parse_measured_runs("\n".join(r.line() for r in runs))[0].k == 4
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match="not JSON"):
        learn.load_bench_runs(tmp_path / "bad.json")
    with pytest.raises(ValueError, match="no 'rows'"):
        learn.runs_from_bench_report({"hello": 1})
    with pytest.raises(ValueError, match="no speculative runs"):
        learn.runs_from_bench_report({"rows": [_report()["rows"][0]]})


# -- figures -----------------------------------------------------------------------------------


def test_figure_builders():
    from specviz.viz.theme import COLORS

    tokens, p, q = preset("draft too confident")
    fig = vl.rule_figure(tokens, p, q)
    assert isinstance(fig, go.Figure)
    names = [t.name for t in fig.data]
    assert names[:3] == ["p (target)", "q (draft)", "residual norm(max(0, p − q))"]
    assert [t.marker.color for t in fig.data[:3]] == [COLORS["p"], COLORS["q"], COLORS["residual"]]
    assert [round(y, 4) for y in fig.data[3].y] == [round(min(1.0, float(a / b)), 4) for a, b in zip(p, q)]
    typ = vl.rule_figure(tokens, p, q, "typical", eps=0.09, delta=0.3)
    assert "LOSSY" in typ.layout.title.text and set(typ.data[-1].y) == {0.0, 1.0}
    assert "residual norm(max(0, p − q))" not in [t.name for t in typ.data]  # typical acceptance has no residual

    exp = run_rule(tokens, p, q, "resample-q", 2000)
    fig = vl.histogram_figure(exp)
    assert fig.data[0].marker.color == COLORS["rejected"] and "misses p" in fig.layout.title.text
    assert list(fig.data[1].y) == [float(x) for x in p]
    fig = vl.histogram_figure(run_rule(tokens, p, q, "exact", 2000))
    assert fig.data[0].marker.color == COLORS["accepted"] and "matches p" in fig.layout.title.text
    assert "LOSSY" in vl.histogram_figure(run_rule(tokens, p, q, "typical", 2000)).layout.title.text

    fig = vl.comparison_figure(["a", "b", "(all other tokens)"], [0.5, 0.3, 0.2], [0.4, 0.4, 0.2], [0.5, 0.3, 0.2],
                               [0.5, 0.3, 0.2], n=100, tv_spec=0.01, tv_plain=0.02)
    assert len(fig.data) == 4 and "TV 0.010" in fig.layout.title.text
    fig = vl.comparison_figure(["a"], [1.0], [1.0], [1.0], [1.0], n=1, tv_spec=0, tv_plain=0, rule="typical")
    assert "LOSSY" in fig.layout.title.text and "LOSSY" in fig.data[2].name
    assert vl.comparison_figure([], [], [], [], [], n=1, tv_spec=0, tv_plain=0).data == ()

    runs = parse_measured_runs("0.6, 4, 1.3 # mine\n0.5, 20, 0.8")
    fig = vl.speedup_figure(0.7, 0.1, 1.0, 4, runs)
    by_name = {t.name: t for t in fig.data}
    assert list(by_name["your measured runs"].x) == [4, 20] and len(by_name["expected speedup"].x) == 20
    best = [t for t in fig.data if t.name.startswith("best k")][0]
    assert (best.x[0], best.y[0]) == (learn.best_k(0.7, 0.1, 1.0, 20)[0], learn.best_k(0.7, 0.1, 1.0, 20)[1])
    assert vl.unique_labels(["a", "a", "b"]) == ["a", "a #2", "b"]


# -- the tab's handlers, without a browser -----------------------------------------------------


def test_handlers_turn_errors_into_messages():
    from specviz.ui import learn_tab as lt

    rows = lt.preset_rows("draft too confident")
    fig, html, _ = lt.on_sample(rows, "exact", 10_000, 0, 0.09, 0.3)
    assert 'data-matches="true"' in html and "matches p" in html
    _, html, _ = lt.on_sample(rows, "no-residual", 10_000, 0, 0.09, 0.3)
    assert 'data-matches="false"' in html and "misses p" in html and "not exact" in html
    for bad_rows, n, text in [(rows[:3], 100, "5 to 8 tokens"), ([["x", -1, 1]] + rows[1:], 100, "negative"),
                              (rows, "many", "must be a number"), (rows, 2.5, "whole numbers")]:
        out = lt.on_sample(bad_rows, "exact", n, 0, 0.09, 0.3)
        assert "sv-msg-error" in out[1] and text in out[1] and "Traceback" not in out[1]
    fig, msg = lt.on_inputs(rows, "typical", 0.09, 0.3)
    assert isinstance(fig, go.Figure) and "sv-msg-info" in msg and "LOSSY" in msg
    cards, fig, msg = lt.on_calc(0.7, 4, 0.1, 1.0, "0.6, 4, 1.3")
    assert f"{expected_speedup(0.7, 4, 0.1, 1.0):.2f}×" in cards and msg == ""
    cards, fig, msg = lt.on_calc(0.7, 4, 0.1, 1.0, "oops")
    assert "measured runs" in msg and isinstance(fig, go.Figure)  # the curve still draws
    out = lt.on_calc(0.7, 2.5, 0.1, 1.0, "")
    assert "whole number" in out[2]
    out = list(lt.on_model_sample("", lt.DRAFT_MODEL, "x", "hi", "exact", 1.0, 1.0, 100, 0))
    assert len(out) == 1 and "choose a target" in out[0][0]
    out = list(lt.on_model_sample("t", lt.DRAFT_MODEL, "x", "hi", "exact", 0, 1.0, 100, 0))
    assert "greedy" in out[0][0]


def test_model_handler_on_tiny_checkpoints(tmp_path):
    from specviz.ui import learn_tab as lt
    from tests.support import app_server

    target, draft = app_server.make_tiny_models(tmp_path)
    frames = list(lt.on_model_sample(target, lt.DRAFT_MODEL, draft, app_server.TINY_PROMPT, "exact", 1.0, 1.0, 10_000, 0))
    assert "Loading" in frames[0][0]
    html, fig = frames[-1]
    assert "Both match p" in html and 'data-tv-spec="' in html and len(fig.data) == 4
    html, _ = list(lt.on_model_sample(target, lt.NGRAM, "", "abcabcab", "exact", 1.0, 1.0, 1000, 0))[-1]
    assert "n-gram drafts" in html
    html, _ = list(lt.on_model_sample(str(tmp_path / "missing"), lt.DRAFT_MODEL, draft, "abc", "exact", 1.0, 1.0, 100, 0))[-1]
    assert "sv-msg-error" in html and "missing" in html


def test_part2_first_click_shows_the_proof_not_an_error(tmp_path, monkeypatch):
    """Issue 52: with the playground's defaults (the n-gram proposer) part 2 opened on the n-gram and a
    prefix it never drafts on, so its first click was a red error. The defaults now take the draft
    model, and the n-gram's fallback prefix repeats itself, so the first click samples."""
    from specviz.ui import learn_tab as lt
    from tests.support import app_server

    target, draft = app_server.make_tiny_models(tmp_path)
    monkeypatch.setenv("SPECVIZ_DEFAULT_TARGET", target)
    monkeypatch.setenv("SPECVIZ_DEFAULT_DRAFT", draft)
    monkeypatch.setenv("SPECVIZ_DEFAULT_PROPOSER", "ngram")  # the playground's own default
    monkeypatch.delenv("SPECVIZ_DEFAULT_PROMPT", raising=False)
    d = lt.LearnDefaults.from_env()
    assert d.proposer == lt.DRAFT_MODEL and d.draft == draft and d.prefix == lt.DEFAULT_PREFIX
    # the page's own first click: the defaults of every control in part 2
    html, fig = list(lt.on_model_sample(d.target, d.proposer, d.draft, d.prefix, "exact", 1.0, 1.0, 10_000, 0))[-1]
    assert "sv-msg-error" not in html and "Both match p" in html and len(fig.data) == 4
    html, _ = list(lt.on_model_sample(target, lt.NGRAM, "", lt.NGRAM_PREFIX, "exact", 1.0, 1.0, 1000, 0))[-1]
    assert "sv-msg-error" not in html and "n-gram drafts" in html


def test_bench_file_and_playground_runs(tmp_path):
    from specviz.ui import learn_tab as lt

    path = tmp_path / "b.json"
    path.write_text(json.dumps(_report()))
    text, pick, loaded, a, k, c, v, msg = lt.on_load_runs(str(path), "0.9, 1, 1.1")
    assert text.splitlines()[0] == "0.9, 1, 1.1" and len(text.splitlines()) == 3 and "Loaded 2" in msg
    # a, c and v come from ONE run (the best: ngram k=4), never the mean across proposers (0.6, 0.155, 1.2)
    assert (a["value"], k["value"], c["value"], v["value"]) == (0.5, 4, 0.01, 1.3)
    assert pick["choices"] == ["ngram k=4", "draft:x k=2"] and pick["value"] == "ngram k=4" and pick["visible"]
    assert "2 proposer(s)" in msg and "ngram k=4" in msg
    a, k, c, v, msg = lt.on_pick_run("draft:x k=2", loaded)
    assert (a["value"], k["value"], c["value"], v["value"]) == (0.7, 2, 0.3, 1.1) and "draft:x k=2" in msg
    out = lt.on_load_runs(str(tmp_path / "nope.json"), "")
    assert "sv-msg-error" in out[-1]

    class FakeStats:
        def __init__(self, tps, a=0.5):
            self.tokens_per_s, self.acceptance_rate = tps, a

    class FakeSettings:
        k = 3

        def describe(self):
            return "tiny + n-gram, k=3"

    class FakeState:
        settings = FakeSettings()

        def stats(self):
            return FakeStats(30.0)

        def comparable_baseline(self):
            return FakeStats(20.0)

    run = lt.run_from_playground(FakeState())
    assert (run.a, run.k, run.speedup) == (0.5, 3, 1.5)
    text, msg = lt.on_add_playground(FakeState(), "")
    assert parse_measured_runs(text)[0].speedup == 1.5
    FakeState.comparable_baseline = lambda self: None
    assert "target-only" in lt.on_add_playground(FakeState(), "")[1]


def test_the_app_has_the_learn_tab():
    from specviz.ui import build_demo

    demo = build_demo()
    ids = {c.get("props", {}).get("elem_id") for c in demo.config["components"]}
    assert {"sv-learn-sample", "sv-learn-model-btn", "sv-learn-calc"} <= ids


def test_the_learn_tab_receives_the_playground_run():
    """The "add my playground run" button is shown and its click reads the playground's own state."""
    from specviz.ui import build_demo
    from specviz.ui.state import PlaygroundState

    demo = build_demo()
    comps = {c["id"]: c for c in demo.config["components"]}
    button = next(c for c in comps.values() if c.get("props", {}).get("elem_id") == "sv-learn-add-playground")
    assert button["props"].get("visible", True) is True
    clicks = [d for d in demo.config["dependencies"] if any(t[0] == button["id"] for t in d["targets"])]
    assert len(clicks) == 1
    states = [comps[i] for i in clicks[0]["inputs"] if comps[i]["type"] == "state"]
    assert len(states) == 1
    state_block = demo.blocks[states[0]["id"]]
    assert state_block.value == PlaygroundState.lesson_first  # a fresh PlaygroundState per browser, in lesson mode
    pg_handlers = [d for d in demo.config["dependencies"] if states[0]["id"] in d["inputs"]]
    assert len(pg_handlers) > 1  # the same gr.State the playground's own handlers use


def test_calculator_k_range_is_the_theory_bound():
    from specviz.core.bounds import THEORY_MAX_K
    from specviz.ui import learn_tab as lt

    cards, fig, msg = lt.on_calc(0.7, THEORY_MAX_K, 0.1, 1.0, "")
    assert msg == "" and fig is not None
    _, _, msg = lt.on_calc(0.7, THEORY_MAX_K + 1, 0.1, 1.0, "")
    assert f"from 1 to {THEORY_MAX_K}" in msg
