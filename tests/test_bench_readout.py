"""The Benchmark readout speaks of real configurations: one prediction per configuration (its own
per-position rates, c and v), tau's rebuild from its own counts not called a prediction, and the
best k per proposer from its own a and c (never pooled across proposers)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _chain(proposer, k, a, c, speedup, v=1.2):
    return {"proposer": proposer, "k": k, "impl": "specviz", "acceptance_rate": a, "c": c, "v": v, "speedup": speedup,
            "accepted": int(a * 100), "drafted": 100}


def test_best_k_comes_from_each_proposers_own_a_and_c():
    from specviz.analysis.theory import best_k
    from specviz.bench.verify_cost import best_k_with_curve, verify_curve
    from specviz.viz.bench_readout import best_k_markdown

    curve = [(n, 10.0 + 0.5 * n) for n in range(1, 18)]
    rows = [_chain("ngram", 4, 0.6, 0.01, 1.5), _chain("ngram", 2, 0.65, 0.01, 1.3),
            _chain("draft:x@int8", 4, 0.9, 0.4, 1.1), {"proposer": "target-only", "k": 0, "impl": "specviz"}]
    md = best_k_markdown(rows, curve)
    assert "The verify curve decides" in md
    lines = [ln for ln in md.splitlines() if ln.startswith("- ")]
    assert len(lines) == 2  # one per proposer, from its fastest configuration
    vc = verify_curve(curve)
    for name, a, c, k in (("ngram", 0.6, 0.01, 4), ("draft:x@int8", 0.9, 0.4, 4)):
        line = next(ln for ln in lines if ln.startswith(f"- {name}: "))
        kb, sb = best_k_with_curve(a, c, vc)
        ki, si = best_k(a, c, 1.0, vc[-1][0] - 1)
        assert f"a = {a:.2f}, c = {c:.3f}, measured at k = {k}" in line and f"fastest measured k = {k}," in line
        assert f"best k {kb} ({sb:.2f}x)" in line and f"k {ki} ({si:.2f}x)" in line
    pooled = (60 + 65 + 90) / 300
    assert f"a = {pooled:.2f}" not in md  # nothing pooled across proposers
    assert best_k_markdown([], curve) == "" and best_k_markdown(rows, [(2, 1.0)]) == ""  # no t(1): no curve


def test_the_summary_gives_the_rows_own_per_position_prediction():
    from specviz.analysis import metrics

    row = {**_chain("ngram", 4, 0.6, 0.01, 1.3), "predicted_speedup_positional": 1.1}
    e = metrics.explain_row(row)
    assert e["predicted"] == 1.1 and "predicted 1.10x from its per-position acceptance" in e["summary"]
    iid = metrics.explain_row(_chain("ngram", 4, 0.6, 0.01, 1.3))
    assert "i.i.d." in iid["summary"] and iid["predicted"] == pytest.approx(metrics.predicted_speedup(0.6, 4, 0.01, 1.2))


def test_a_real_report_gives_each_configuration_one_prediction_and_no_tau_prediction_from_its_own_counts():
    from specviz.viz import bench as V

    path = ROOT / "benchmarks" / "results" / "bench-gemma-cpu.json"
    if not path.exists():
        pytest.skip("no bench report in benchmarks/results/")
    rep = json.loads(path.read_text())
    md = V.why_markdown(rep)
    heads = re.findall(r"\*\*(?:Best|Worst|Only): (\S+ k=\d+) \(measured ([\d.]+)x, predicted ([\d.]+)x", md)
    assert heads
    rows = {f"{r['proposer']} k={r['k']}": r for r in V.report_rows(rep) if r.get("impl") == "specviz"}
    for label, _measured, predicted in heads:
        note = rows[label]["prediction_note"]
        assert f"predicted {float(predicted):.2f}" in note  # the headline and its note give the same prediction
        assert "a check, not a prediction" in note and "predicts" in note  # tau's rebuild is not a prediction
        assert "tau: measured" in note


def test_the_summary_sentences_follow_the_per_position_tau_where_the_row_has_it():
    """A draft model's acceptance comes in runs: an i.i.d. E(a, k) called a bench's best row
    (tau 5.07 measured) "3.00 tokens a step" and put its limit on acceptance; the sentences and
    the limit now use the row's per-position tau, as its headline prediction does."""
    from specviz.analysis import metrics

    row = {**_chain("ngram+draft:x", 8, 0.68, 0.2, 1.78, v=1.49), "predicted_tau_positional": 5.07, "predicted_speedup_positional": 1.88}
    e = metrics.explain_row(row)
    assert "commits 5.07 of the 9 tokens" in e["sentences"]["a"] and "i.i.d. draft at this a: 3.03" in e["sentences"]["a"]
    assert e["limit"] == "c" and "predicted 1.88x from its per-position acceptance" in e["summary"]
    iid = metrics.explain_row(_chain("ngram+draft:x", 8, 0.68, 0.2, 1.78, v=1.49))
    assert "expected to commit 3.03 of the 9 tokens" in iid["sentences"]["a"] and iid["limit"] == "a"


def _ranked(proposer, k, a, c, median, total, low=None, high=None):
    low, high = (median - 0.1, median + 0.1) if low is None else (low, high)
    return {**_chain(proposer, k, a, c, total), "speedup_median": median, "speedup_low": low, "speedup_high": high,
            "steps": 50, "new_tokens": 100, "prompts": 4}


def test_the_readout_never_contradicts_its_own_table():
    """Issue 52: a readout named ngram k = 4 the worst and, a screen lower, "best k 4 (1.29x)" from an a
    measured at k = 1. Walk every sentence that names a configuration against the table's medians."""
    from specviz.viz import bench as V

    curve = [(n, 10.0 + 0.3 * n) for n in range(1, 18)]  # a flat v(n): from k = 1's a the theory wants k = 4
    rows = [{"proposer": "target-only", "k": 0, "impl": "specviz", "speedup": 1.0},
            _ranked("ngram", 1, 0.55, 0.01, 1.16, 1.05), _ranked("ngram", 2, 0.5, 0.01, 1.02, 1.20),
            _ranked("ngram", 4, 0.35, 0.01, 0.88, 1.30),  # its total is the highest: the median ranks it worst
            _ranked("draft:d@int8", 1, 0.9, 0.3, 1.10, 1.0), _ranked("draft:d@int8", 2, 0.85, 0.3, 1.12, 1.0)]
    md = V.why_markdown({"rows": rows, "verify_cost": curve})
    table = {f"{r['proposer']} k={r['k']}": r for r in rows if r.get("k")}
    heads = dict(re.findall(r"\*\*(Best|Worst): (\S+ k=\d+) ", md))
    assert heads["Best"] == max(table, key=lambda lb: table[lb]["speedup_median"])  # ranked by the median
    assert heads["Worst"] == "ngram k=4"
    lines = [ln for ln in md.splitlines() if re.match(r"- \S+: fastest measured k", ln)]
    assert len(lines) == 2
    for line in lines:
        name = line[2:].split(":")[0] if not line.startswith("- draft:") else "draft:d@int8"
        mine = {lb: r for lb, r in table.items() if lb.startswith(name + " k=")}
        k_best = int(re.search(r"fastest measured k = (\d+)", line).group(1))
        top = max(mine, key=lambda lb: mine[lb]["speedup_median"])
        assert f"{name} k={k_best}" == top  # the same configuration the ranking's statistic picks
        assert f"{mine[top]['speedup_median']:.2f}x (median over prompts" in line
        assert f"measured at k = {k_best}" in line  # its a and c come from that configuration
        theory_k = int(re.search(r"the theory's best k (\d+)", line).group(1))
        if theory_k != k_best and f"{name} k={theory_k}" in mine:  # the sweep ran the theory's k: say what it measured
            said = mine[f"{name} k={theory_k}"]["speedup_median"]
            assert f"k = {theory_k} measured {said:.2f}x" in line and "the measurement decides" in line
    ngram = next(ln for ln in lines if ln.startswith("- ngram:"))
    assert "the theory's best k 4" in ngram and "ranked worst above" in ngram  # the contradiction, answered
