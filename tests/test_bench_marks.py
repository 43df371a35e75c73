"""The Benchmark plots mark prefill-dominated and stalled runs, and draw one theory line per chain
proposer from its own a and c (specviz/viz/bench_marks.py, specviz/viz/bench.py)."""

from __future__ import annotations

import pytest

from specviz.analysis.metrics import expected_tokens_per_step
from specviz.viz import bench as V
from specviz.viz.bench_marks import PREFILL_RULE, prefill_share


def _ms(prefill, steps_ms):
    return {"prefill_ms": prefill, "draft_ms": steps_ms * 0.2, "verify_ms": steps_ms * 0.7, "other_ms": steps_ms * 0.1}


def _summary(proposer, k, speedup, *, accepted=0, drafted=0, c=None, v=1.2, prefill=10.0, steps_ms=90.0, **extra):
    return {"kind": "summary", "proposer": proposer, "k": k, "impl": "specviz", "speedup": speedup,
            "speedup_median": speedup, "speedup_low": speedup - 0.1, "speedup_high": speedup + 0.1,
            "ms_per_token": 10.0 / speedup, "accepted": accepted, "drafted": drafted,
            "acceptance_rate": accepted / drafted if drafted else None, "c": c, "v": v,
            "nodes_per_step": float(k), "mean_acceptance_length": 1 + accepted / max(1, drafted) * k,
            **_ms(prefill, steps_ms), **extra}


def _prompt(proposer, k, prefill, steps_ms, i):
    return {"kind": "prompt", "proposer": proposer, "k": k, "impl": "specviz", "prompt_index": i, "category": "coding",
            "prompt_id": str(i), "accepted": 1, "drafted": 2, **_ms(prefill, steps_ms)}


def _report():
    rows = [{"kind": "summary", "proposer": "target-only", "k": 0, "impl": "specviz", "speedup": 1.0, "ms_per_token": 10.0,
             **_ms(10.0, 90.0)},
            _summary("ngram", 1, 1.16, accepted=60, drafted=100, c=0.01),
            _summary("ngram", 2, 0.88, accepted=100, drafted=200, c=0.01, prefill=200.0),  # one prompt's prefill outlier
            _summary("ngram", 4, 1.40, accepted=200, drafted=400, c=0.02, reruns=1),  # a stalled run, re-run
            _summary("draft:d@int8", 1, 1.10, accepted=90, drafted=100, c=0.40),
            _summary("draft:d@int8", 2, 1.20, accepted=170, drafted=200, c=0.40, flagged_runs=1)]
    prompts = [_prompt("ngram", 2, 150.0, 40.0, 0), _prompt("ngram", 2, 5.0, 40.0, 1),  # run 0: prefill 79% of its ms
               _prompt("ngram", 1, 5.0, 40.0, 0), _prompt("ngram", 1, 5.0, 40.0, 1)]
    return {"rows": rows, "prompt_rows": prompts}


def test_the_prefill_rule_reads_the_rows_own_timings():
    assert prefill_share(_ms(50.0, 50.0)) == pytest.approx(0.5)
    assert prefill_share({"prefill_ms": 5.0}) is None  # transformers' rows: no step timings, no judgement
    rows = {(r["proposer"], r["k"]): r for r in V.report_rows(_report())}
    assert rows[("ngram", 2)]["prefill_runs"] == 1 and rows[("ngram", 2)]["timed_runs"] == 2
    assert rows[("ngram", 1)]["prefill_runs"] == 0
    assert rows[("ngram", 4)]["prefill_runs"] == 0 and rows[("ngram", 4)]["timed_runs"] == 1  # judged on its sums


@pytest.mark.parametrize("figure, key", [("speedup", "speedup_median"), ("latency", "ms_per_token"),
                                         ("predicted", "speedup")])
def test_the_k_plots_mark_prefill_dominated_and_stalled_points_and_say_the_rule(figure, key):
    fig = V.build_figures(_report())[figure]
    marks = {t.meta: t for t in fig.data if t.meta in ("prefill", "stall")}
    assert set(marks) == {"prefill", "stall"}
    prefill = marks["prefill"]
    assert PREFILL_RULE in prefill.name and list(prefill.x) == [2]
    assert list(prefill.y) == [pytest.approx(_summary("ngram", 2, 0.88)[key])]  # on the point itself
    assert "1 of 2 runs prefill-dominated" in prefill.hovertext[0] and PREFILL_RULE in prefill.hovertext[0]
    stall = marks["stall"]
    assert sorted(stall.x) == [2, 4] and "stalled" in stall.name
    assert any("1 re-run" in h for h in stall.hovertext) and any("1 left out" in h for h in stall.hovertext)


def test_no_marks_when_nothing_is_marked():
    rep = _report()
    rep["rows"] = [r for r in rep["rows"] if (r["proposer"], r["k"]) in (("target-only", 0), ("ngram", 1))]
    fig = V.build_figures(rep)["speedup"]
    assert not [t for t in fig.data if t.meta in ("prefill", "stall")]


def test_one_theory_line_per_proposer_from_its_own_a_and_c():
    rep = {**_report(), "verify_cost": [(n, 10.0 + 0.5 * n) for n in range(1, 18)]}
    figs = V.build_figures(rep)
    tau = [t for t in figs["tree_tau"].data if t.meta == "theory"]
    assert [t.name.split(":")[0] for t in tau] == ["ngram", "draft"]  # "draft:d@int8: chain theory ..."
    a_ngram, a_draft = 360 / 700, 260 / 300  # each pooled over its own k only
    assert f"E(a={a_ngram:.2f}, n)" in tau[0].name and f"E(a={a_draft:.2f}, n)" in tau[1].name
    assert list(tau[0].y)[3] == pytest.approx(expected_tokens_per_step(a_ngram, 4))
    pooled = (360 + 260) / 1000
    for fig in (figs["tree_tau"], figs["tree_speedup"]):
        assert not any(f"a={pooled:.2f}" in (t.name or "") for t in fig.data)  # no configuration that does not exist
    speed = [t for t in figs["tree_speedup"].data if t.meta == "theory"]
    assert len(speed) == 2 and "c=0.400" in speed[1].name and "c=0.013" in speed[0].name
    colors = {t.name: t.line.color for t in figs["tree_tau"].data}
    assert colors[tau[0].name] == colors["ngram"] and colors[tau[1].name] == colors["draft:d@int8"]
    notes = [a.text for a in figs["verify_cost"].layout.annotations]
    assert len(notes) == 2 and notes[0].startswith("ngram (a=") and notes[1].startswith("draft:d@int8 (a=")


def test_the_table_names_the_prefill_dominated_runs_beside_the_stalled_ones():
    headers, body = V.table_rows(V.report_rows(_report()))
    cells = {(line[0], line[1]): dict(zip(headers, line)) for line in body}
    assert cells[("ngram", 2)]["prefill-dominated runs"] == "1 of 2" and cells[("ngram", 1)]["prefill-dominated runs"] == ""
    assert dict(zip(headers, V.table_help()))["prefill-dominated runs"].startswith("runs with prefill over half")
