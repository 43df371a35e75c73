"""specviz.analysis.theory against hand-computed values and against simulated chains of drafts."""

from __future__ import annotations

import random

import pytest

from specviz.analysis import theory
from specviz.analysis.theory import (
    conditional_rates,
    expected_speedup,
    expected_speedup_drafting,
    expected_tokens_per_step,
    expected_tokens_per_step_drafting,
    expected_tokens_per_step_per_position,
)
from specviz.core import bounds


def test_theory_against_hand_computed_values():
    assert expected_tokens_per_step(0.0, 4) == 1.0
    assert expected_tokens_per_step(1.0, 4) == 5.0
    assert expected_tokens_per_step(0.5, 2) == pytest.approx(1.75)  # 1 + .5 + .25
    assert expected_tokens_per_step(0.8, 4) == pytest.approx((1 - 0.8**5) / 0.2)
    # a = 0.8, k = 4, c = 0.05: (1 - 0.32768) / 0.2 = 3.3616 tokens per step, / (4 * 0.05 + 1)
    assert expected_speedup(0.8, 4, 0.05) == pytest.approx(3.3616 / 1.2)
    assert expected_speedup(0.5, 2, 0.1, v=1.5) == pytest.approx(1.75 / 1.7)


def test_per_position_hand_computed():
    # 1 + 0.9 + 0.9 * 0.5 + 0.9 * 0.5 * 0.2 = 2.44
    assert expected_tokens_per_step_per_position([0.9, 0.5, 0.2]) == pytest.approx(2.44)
    assert expected_tokens_per_step_per_position([]) == 1.0  # no drafts: the target's token only
    assert expected_tokens_per_step_per_position([0.0, 1.0, 1.0]) == 1.0  # nothing past a sure rejection


@pytest.mark.parametrize("a, k", [(0.0, 3), (0.3, 1), (0.7, 4), (0.95, 8), (1.0, 5)])
def test_per_position_with_equal_rates_is_the_iid_formula(a, k):
    assert expected_tokens_per_step_per_position([a] * k) == pytest.approx(expected_tokens_per_step(a, k))


def test_conditional_rates_undo_the_reported_products():
    a = [0.9, 0.5, 0.2]
    reported = [0.9, 0.45, 0.09]  # Stats.per_position: steps with draft i accepted / steps
    assert conditional_rates(reported) == pytest.approx(a)
    assert expected_tokens_per_step_per_position(conditional_rates(reported)) == pytest.approx(1 + sum(reported))
    assert conditional_rates([0.5, 0.0, 0.0]) == [0.5, 0.0, 0.0]  # nothing reached: 0, not a division by 0


def _simulate(rates, drafted_fraction, steps, rng):
    """Mean tokens per step of a chain: draft i accepted with P(rates[i]) while all before were."""
    total = 0
    for _ in range(steps):
        n = 0
        if rng.random() < drafted_fraction:
            for a in rates:
                if rng.random() >= a:
                    break
                n += 1
        total += n + 1  # accepted drafts + the correction or bonus token
    return total / steps


def test_per_position_matches_a_simulated_chain_and_iid_does_not():
    rates = [0.95, 0.6, 0.3, 0.1]
    got = _simulate(rates, 1.0, 40_000, random.Random(0))
    assert got == pytest.approx(expected_tokens_per_step_per_position(rates), rel=0.02)
    # the i.i.d. formula with the pooled acceptance rate is measurably off for falling rates
    mean_a = sum(rates) / len(rates)
    assert abs(got - expected_tokens_per_step(mean_a, len(rates))) > 0.1


def test_drafted_fraction_matches_a_simulation():
    rates, f = [0.8, 0.7, 0.6], 0.4
    got = _simulate(rates, f, 40_000, random.Random(1))
    e = expected_tokens_per_step_drafting(expected_tokens_per_step_per_position(rates), f)
    assert got == pytest.approx(e, rel=0.02)
    # ignoring the steps that did not draft overestimates
    assert expected_tokens_per_step_per_position(rates) > got + 0.5


def test_drafted_fraction_limits():
    assert expected_tokens_per_step_drafting(3.0, 1.0) == 3.0
    assert expected_tokens_per_step_drafting(3.0, 0.0) == 1.0
    assert expected_tokens_per_step_drafting(3.0, 0.5) == 2.0
    # f = 1 is the plain formula; f = 0 is target-only decoding (1 token for one plain step)
    e = expected_tokens_per_step(0.8, 4)
    assert expected_speedup_drafting(e, 1.0, 4, 0.05, 1.0) == pytest.approx(expected_speedup(0.8, 4, 0.05, 1.0))
    assert expected_speedup_drafting(e, 0.0, 4, 0.05, 1.0) == pytest.approx(1.0)
    # half the steps draft (cost 4 * 0.05 + 1.1), half are plain steps costing 1.02
    want = (0.5 * e + 0.5) / (0.5 * 1.3 + 0.5 * 1.02)
    assert expected_speedup_drafting(e, 0.5, 4, 0.05, 1.1, plain_step_cost=1.02) == pytest.approx(want)


@pytest.mark.parametrize("call, match", [
    (lambda: expected_tokens_per_step_per_position([0.5, 1.5]), "position 2"),
    (lambda: expected_tokens_per_step_per_position([float("nan")]), "position 1"),
    (lambda: conditional_rates([0.5, -0.1]), "rate 2"),
    (lambda: expected_tokens_per_step_drafting(2.0, 1.2), "drafted_fraction"),
    (lambda: expected_tokens_per_step_drafting(0.5, 0.5), ">= 1"),
    (lambda: expected_speedup_drafting(2.0, 1.0, 4, 0.0, 0.0), "cost per step"),
    (lambda: theory.speedup_curve(1.5, 0.1), "acceptance rate"),
])
def test_bad_input_says_what_is_wrong(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_each_k_bound_is_defined_once_and_used():
    from specviz.app import limits
    from specviz.core import engine
    from specviz.learn import chain as learn

    assert engine.MAX_K is bounds.ENGINE_MAX_K
    assert limits.Limits().max_k == bounds.HOSTING_DEFAULT_MAX_K <= bounds.ENGINE_MAX_K
    assert learn.K_MAX == bounds.LEARN_CURVE_MAX_K
    assert len(theory.speedup_curve(0.5, 0.1)) == bounds.LEARN_CURVE_MAX_K
    assert bounds.THEORY_MAX_K >= bounds.ENGINE_MAX_K
    learn.parse_measured_runs(f"0.5, {bounds.THEORY_MAX_K}, 1.1")
    with pytest.raises(ValueError, match=f"1 to {bounds.THEORY_MAX_K}"):
        learn.parse_measured_runs(f"0.5, {bounds.THEORY_MAX_K + 1}, 1.1")
