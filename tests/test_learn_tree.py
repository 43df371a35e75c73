"""The Learn tab's multi-candidate experiment: the exact rule gives p, the broken one does not."""

from __future__ import annotations

import pytest
import torch

from specviz.learn import chain as learn
from specviz.learn.tree import (
    broken_output_distribution,
    parse_candidates,
    residual_steps,
    run_tree_rule,
    try_candidates,
)
from specviz.viz import learn as vl

TOKENS, P, Q = learn.PRESETS["draft too confident"]
p = torch.tensor(P, dtype=torch.float64)
q = torch.tensor(Q, dtype=torch.float64)


def test_parse_candidates():
    assert parse_candidates("the, cat", TOKENS) == [0, 2]
    for bad, msg in (("", "at least one"), ("the, zebra", "not in the toy"), ("a, a", "twice"),
                     (",".join(TOKENS), "fewer candidates")):
        with pytest.raises(ValueError, match=msg):
            parse_candidates(bad, TOKENS)


def test_residual_shrinks_as_candidates_fail():
    steps = residual_steps(p, [0, 1])
    assert len(steps) == 3 and steps[0][1] == 1.0
    assert steps[1][1] == pytest.approx(0.7) and steps[2][1] == pytest.approx(0.45)  # mass of p not ruled out
    r2, r3 = steps[1][0], steps[2][0]
    assert float(r2[0]) == 0 and float(r3[0]) == 0 and float(r3[1]) == 0
    assert float(r3.sum()) == pytest.approx(1.0) and float(r3[2]) == pytest.approx(0.2 / 0.45)


def test_try_candidates_uses_the_residual_with_given_uniforms():
    # u_1 = 0.5 > p(the) = 0.3: "the" rejected; "a" is then judged under r_2(a) = 0.25 / 0.7 = 0.357
    assert try_candidates(p, [0, 1], [0.5, 0.3]) == (1, 1)  # 0.3 <= 0.357: kept by the exact rule
    x, j = try_candidates(p, [0, 1], [0.5, 0.3, 0.0], rule="broken-original-p")
    assert j == 2 and x not in (0, 1)  # 0.3 > p(a) = 0.25: the broken rule rejects it


@pytest.mark.parametrize("mode", ["point", "sampled"])
def test_exact_rule_matches_p_and_the_broken_rule_fails(mode):
    kw = dict(mode=mode, candidates=[0, 1], m=2, n=4000, seed=0)
    exact = run_tree_rule(TOKENS, p, None if mode == "point" else q, rule="exact", **kw)
    broken = run_tree_rule(TOKENS, p, None if mode == "point" else q, rule="broken-original-p", **kw)
    assert exact.matches and exact.kind == "ok" and exact.tv <= exact.limit
    assert not broken.matches and broken.kind == "error" and broken.tv > broken.limit
    assert sum(exact.kept_by_child) == exact.n and len(exact.kept_by_child) == 3
    # the verdict agrees with its numbers
    assert f"TV {exact.tv:.3f}" in exact.message and "within" in exact.message
    assert "above" in broken.message


def test_broken_closed_form_matches_its_samples():
    exp = run_tree_rule(TOKENS, p, None, mode="point", candidates=[0, 1], rule="broken-original-p", n=4000, seed=3)
    theory = broken_output_distribution(p, [0, 1])
    assert float(theory.sum()) == pytest.approx(1.0) and float(theory[1]) == pytest.approx(0.7 * 0.25)
    assert learn.tv_distance(exp.freq, theory) <= 3 * learn.sampling_noise(theory, 4000)
    assert exp.theory_tv == pytest.approx(learn.tv_distance(theory, p))


def test_bad_inputs():
    with pytest.raises(ValueError, match="m \\(candidates"):
        run_tree_rule(TOKENS, p, q, mode="sampled", m=6)
    with pytest.raises(ValueError, match="N must"):
        run_tree_rule(TOKENS, p, None, candidates=[0], n=0)
    with pytest.raises(ValueError, match="unknown rule"):
        run_tree_rule(TOKENS, p, None, candidates=[0], rule="nope")


def test_figures_and_handlers():
    from specviz.ui import learn_tree_tab as lt

    fig = vl.residual_steps_figure(TOKENS, residual_steps(p, [0, 1]), [0, 1])
    assert len(fig.data) == 3 and "0.45" in fig.layout.title.text
    hist, html, res = lt.on_tree_sample("point", "the, a", 2, "broken-original-p", 1500, 0)
    assert 'data-matches="false"' in html and len(hist.data) == 2 and len(res.data) == 3
    _, html, _ = lt.on_tree_sample("point", "the, zebra", 2, "exact", 100, 0)
    assert "sv-msg-error" in html and "zebra" in html
    fig, note = lt.on_tree_inputs("sampled", "", 3)
    assert len(fig.data) == 4 and "Sampled" in note
