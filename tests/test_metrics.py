"""The theory functions and the "why no speedup?" readout, against hand-computed values."""

from __future__ import annotations

import math

import pytest

from specviz.analysis import metrics, theory


def test_reexports_are_the_theory_functions():
    for name in ("expected_tokens_per_step", "expected_speedup", "measured_c", "measured_v", "predicted_speedup",
                 "ideal_speedups", "limiting_factor"):
        assert getattr(metrics, name) is getattr(theory, name)


@pytest.mark.parametrize(
    "a, k, want",
    [
        (0.0, 4, 1.0),  # nothing accepted: one token per step
        (0.5, 1, 1.5),  # (1 - 0.25) / 0.5
        (0.5, 2, 1.75),  # (1 - 0.125) / 0.5
        (0.8, 4, 3.3616),  # (1 - 0.32768) / 0.2
        (1.0, 4, 5.0),  # everything accepted: k + 1
    ],
)
def test_expected_tokens_per_step(a, k, want):
    assert metrics.expected_tokens_per_step(a, k) == pytest.approx(want)


def test_expected_speedup_hand_computed():
    # (1 - 0.8^5) / ((1 - 0.8) (4 * 0.05 + 1)) = 3.3616 / 1.2
    assert metrics.expected_speedup(0.8, 4, 0.05, 1.0) == pytest.approx(3.3616 / 1.2)
    # v defaults to the paper's 1
    assert metrics.expected_speedup(0.5, 2, 0.1) == pytest.approx(1.75 / 1.2)
    # a slow verify pass halves it
    assert metrics.expected_speedup(0.5, 2, 0.1, 2.2) == pytest.approx(1.75 / 2.4)


def test_measured_c_and_v():
    # 8 drafted tokens took 40 ms; a target step takes 10 ms: one draft token = 0.5 target steps
    assert metrics.measured_c(40.0, 8, 10.0) == pytest.approx(0.5)
    assert metrics.measured_c(40.0, 0, 10.0) is None
    assert metrics.measured_c(40.0, 8, 0.0) is None
    # 10 steps: 300 ms verifying + 30 ms bookkeeping, target step 20 ms -> 33 / 20
    assert metrics.measured_v(300.0, 30.0, 10, 20.0) == pytest.approx(1.65)
    assert metrics.measured_v(300.0, 30.0, 0, 20.0) is None


def test_predicted_speedup():
    assert metrics.predicted_speedup(0.8, 4, 0.05, 1.0) == pytest.approx(3.3616 / 1.2)
    assert metrics.predicted_speedup(None, 4, 0.05, 1.0) is None
    assert metrics.predicted_speedup(0.8, 4, None, 1.0) is None
    assert metrics.predicted_speedup(0.8, 0, 0.05, 1.0) is None


def test_per_position_rates():
    assert metrics.per_position_rates([3, 1, 0], [4, 2, 0]) == [0.75, 0.5, 0.0]


@pytest.mark.parametrize(
    "a, k, c, v, want",
    [
        (0.2, 4, 0.01, 1.05, "a"),  # cheap draft, cheap verify, poor acceptance
        (0.9, 4, 0.5, 1.0, "c"),  # great acceptance, but each draft costs half a target step
        (0.9, 4, 0.0, 3.0, "v"),  # free draft, but the verify pass costs three steps
    ],
)
def test_limiting_factor(a, k, c, v, want):
    assert metrics.limiting_factor(a, k, c, v) == want
    gains = metrics.ideal_speedups(a, k, c, v)
    assert gains["now"] == pytest.approx(metrics.expected_speedup(a, k, c, v))
    assert gains[want] == max(gains["a"], gains["c"], gains["v"])


def test_ideal_speedups_hand_computed():
    g = metrics.ideal_speedups(0.9, 4, 0.5, 1.0)
    e = (1 - 0.9**5) / 0.1
    assert g["now"] == pytest.approx(e / 3.0)
    assert g["a"] == pytest.approx(5 / 3.0)
    assert g["c"] == pytest.approx(e / 1.0)
    assert g["v"] == pytest.approx(e / 3.0)


def _row(proposer, k, a, c, v, speedup):
    return {"proposer": proposer, "k": k, "impl": "specviz", "acceptance_rate": a, "c": c, "v": v,
            "speedup": speedup, "predicted_speedup": metrics.predicted_speedup(a, k, c, v)}


def test_explain_row_names_the_limit_with_the_numbers():
    e = metrics.explain_row(_row("draft:x", 4, 0.9, 0.5, 1.0, 1.3))
    assert e["limit"] == "c"
    assert set(e["sentences"]) == {"a", "c", "v"}
    assert "a = 0.90" in e["sentences"]["a"]
    assert "c = 0.50" in e["sentences"]["c"] and "2.00 target steps" in e["sentences"]["c"]
    assert "v = 1.00" in e["sentences"]["v"]
    assert "draft's cost limits it" in e["summary"] and "measured 1.30x" in e["summary"]
    for text in e["sentences"].values():  # one sentence each
        assert text.count(". ") == 0 and text.endswith(".")


def test_explain_row_without_measurements():
    e = metrics.explain_row({"proposer": "ngram", "k": 2, "acceptance_rate": None, "c": None, "v": None})
    assert e["limit"] is None and e["sentences"] == {}
    assert "could not be measured" in e["summary"]


def test_why_no_speedup_picks_best_and_worst():
    rows = [
        {"proposer": "target-only", "k": 0, "impl": "specviz", "speedup": 1.0, "acceptance_rate": None, "c": None, "v": None},
        _row("ngram", 2, 0.3, 0.01, 1.1, 1.1),
        _row("draft:x", 4, 0.9, 0.5, 1.0, 0.7),
        _row("ngram", 4, 0.2, 0.01, 1.2, 0.95),
        dict(_row("ngram", 8, 0.9, 0.0, 1.0, 9.0), impl="hf"),  # hf rows are not explained
    ]
    out = metrics.why_no_speedup(rows)
    assert out["best"]["label"] == "ngram k=2"
    assert out["worst"]["label"] == "draft:x k=4"
    assert out["best"]["limit"] == "a" and out["worst"]["limit"] == "c"
    md = out["markdown"]
    assert md.startswith("**Best: ngram k=2") and "**Worst: draft:x k=4" in md
    assert md.count("\n- ") == 6


def test_why_no_speedup_single_and_empty():
    one = metrics.why_no_speedup([_row("ngram", 2, 0.5, 0.01, 1.0, 1.4)])
    assert one["best"] is not None and one["markdown"].startswith("**Only: ngram k=2")
    none = metrics.why_no_speedup([])
    assert none["best"] is None and "No speculative configuration" in none["markdown"]


def test_theory_matches_simulated_iid_acceptance():
    """E(a, k) is the mean of min(first rejection, k) + 1 under i.i.d. acceptance."""
    import random

    rng = random.Random(0)
    a, k, n = 0.7, 4, 40000
    total = 0
    for _ in range(n):
        accepted = 0
        while accepted < k and rng.random() < a:
            accepted += 1
        total += accepted + 1
    assert math.isclose(total / n, metrics.expected_tokens_per_step(a, k), rel_tol=0.02)


# -- the definitions, written once -----------------------------------------------------------------


def test_metrics_table_names_are_unique_and_complete():
    names = [m.name for m in metrics.METRICS]
    assert len(names) == len(set(names))
    for m in metrics.METRICS:
        assert m.definition and not m.definition.endswith(".") and m.scope in ("row", "remote", "figures")
        assert metrics.metric(m.name) is m
    assert metrics.metric("acceptance_rate").symbol == "a" and metrics.metric("mean_acceptance_length").symbol == "tau"
    assert metrics.metric("acceptance_rate").label == "acceptance rate a"
    remote = metrics.definitions(remote=True)
    assert "not measurable remotely" in remote["c"] and "engine_mean_acceptance_length" in remote
    assert "engine_mean_acceptance_length" not in metrics.definitions()


def test_architecture_metrics_section_is_the_generated_table():
    """docs/architecture.md, "## Metrics", holds exactly metrics_markdown()'s table, and the
    theory and prediction subsections stay."""
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[1] / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = doc.split("\n## Metrics\n", 1)[1].split("\n## ", 1)[0]
    table = metrics.metrics_markdown()
    assert f"\n{table}\n" in section
    assert [ln for ln in section.splitlines() if ln.startswith("|")] == table.splitlines()
    assert "### Theory (`specviz.analysis.theory`)" in section and "### Measured vs predicted" in section


# -- what limits a speedup: one source -------------------------------------------------------------


@pytest.mark.parametrize("a, k, c, v", [(0.2, 4, 0.01, 1.05), (0.9, 4, 0.5, 1.0), (0.9, 4, 0.0, 3.0), (0.6, 2, 0.1, 1.3)])
def test_ideal_gains_is_ideal_speedups_in_the_iid_case(a, k, c, v):
    gains = metrics.ideal_gains(metrics.expected_tokens_per_step(a, k), k, c, v)
    want = metrics.ideal_speedups(a, k, c, v)
    assert gains == pytest.approx(want)
    assert metrics.limit_of(gains) == metrics.limiting_factor(a, k, c, v)
    assert metrics.explain_row(_row("x", k, a, c, v, 1.0))["limit"] == metrics.limit_of(gains)


def test_the_run_card_asks_the_same_source():
    from specviz.viz import explain

    for kw in (dict(a=0.96, k=4, tau=4.6, c=0.5, v=1.7), dict(a=0.2, k=4, tau=1.25, c=0.05, v=1.1),
               dict(a=0.9, k=4, tau=4.0, c=0.01, v=3.0), dict(a=0.7, k=2, tau=1.35, c=0.01, v=1.05, drafted_fraction=0.4)):
        f = kw.get("drafted_fraction", 1.0)
        s = explain.explain_speedup(tokens=60, target_forwards=20, **kw)
        gains = metrics.ideal_gains(kw["tau"], kw["k"] * f, kw["c"], kw["v"], f)
        assert s.limit == metrics.limit_of(gains) and s.predicted == pytest.approx(gains["now"])
    assert "coverage" in metrics.ideal_gains(1.35, 0.8, 0.01, 1.05, 0.4)
