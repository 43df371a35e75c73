"""The tree-budget curve (analysis.treeshape.best_per_budget, analysis.advisor.tree_budget), its
plot (viz.advisor.tree_budget_figure), the Advisor panel's plot and `specviz advise --html`."""

from __future__ import annotations

import json

import plotly.graph_objects as go
import pytest

from specviz import cli
from specviz.analysis import advisor as A
from specviz.analysis.treeshape import best_per_budget, best_shape, chain, encode
from specviz.viz import advisor as VA
from tests.test_advisor import cost_model


def _steep(shape) -> float:
    """A step: 1 target step, and a quarter of one more per node verified."""
    return 1.0 + 0.25 * shape.nodes


def test_tokens_per_step_rise_and_the_speedup_peaks_where_best_shape_chose():
    accept = [[0.9, 0.0]] * 8  # only the first candidate is ever kept: a chain is optimal
    points = best_per_budget(accept, _steep, max_nodes=12, max_depth=8)
    assert [p.shape.nodes for p in points] == [0, 1, 2, 3, 4, 5, 6, 7, 8, 8, 8, 8, 8]  # depth 8 caps the chain
    assert all(encode(p.shape) == encode(chain(p.shape.nodes)) for p in points[1:])
    taus = [p.tau for p in points]
    assert taus == sorted(taus) and taus[0] == 1.0
    speed = [p.tokens_per_s for p in points]
    peak = speed.index(max(speed))
    # by hand: tau(n) / (1 + n/4) with tau(n) = 1 + 0.9 + ... + 0.9^n
    by_hand = [sum(0.9 ** i for i in range(n + 1)) / (1 + 0.25 * n) for n in range(9)]
    assert peak == by_hand.index(max(by_hand)) and 0 < peak < 8
    assert speed[:peak + 1] == sorted(speed[:peak + 1]) and speed[peak:9] == sorted(speed[peak:9], reverse=True)
    best, _ = best_shape(accept, _steep, max_nodes=12, max_depth=8)
    assert best.text == encode(points[peak].shape)


def test_flat_costs_take_the_whole_budget_and_no_speculation_can_win():
    accept = [[0.6, 0.3, 0.1]] * 4
    flat = best_per_budget(accept, lambda s: 1.0, max_nodes=10, max_depth=4)
    speed = [p.tokens_per_s for p in flat]
    assert speed == sorted(speed) and flat[-1].shape.nodes == 10  # every node is free: the largest tree
    costly = best_per_budget([[0.05]] * 4, lambda s: 1.0 + 0.5 * s.nodes, max_nodes=6, max_depth=4)
    assert max(costly, key=lambda c: c.tokens_per_s).shape.nodes == 0  # the empty tree: no speculation pays


def test_tree_budget_on_a_calibration_matches_the_forecast():
    cal = A.RankCalibration("ngram-tree:3", (100, 50, 25), ((50, 20), (25, 5), (10, 2)))
    cost = cost_model(slope=0.0005)
    budget = A.tree_budget(cal, cost, "ngram-tree", "ngram-tree:3", max_nodes=8, max_depth=3)
    assert [p.nodes for p in budget.points] == list(range(9))
    assert budget.points[0].shape == "0" and budget.points[0].speedup == pytest.approx(1.0)
    assert all(p.tau_lo <= p.tau <= p.tau_hi for p in budget.points)
    _, best = A.forecast_trees(cal, cost, "ngram-tree", lambda s: f"ngram-tree:3,shape={s}", range(1, 4), max_nodes=8)
    assert budget.best.shape == encode(best)
    d = budget.to_dict()
    assert d["best_nodes"] == budget.best.nodes and len(d["points"]) == 9 and d["points"][1]["step_ms"] > 0


def _names(fig) -> list[str]:
    return [t.name for t in fig.data]


def test_the_figure_marks_the_optimum_and_measured_points():
    cal = A.RankCalibration("ngram-tree:3", (100, 50, 25), ((50, 20), (25, 5), (10, 2)))
    budget = A.tree_budget(cal, cost_model(slope=0.0005), "ngram-tree", "ngram-tree:3", max_nodes=8, max_depth=3)
    runs = [{"proposer": "ngram-tree:3", "spec": "ngram-tree:3,shape=21", "nodes": 3, "measured_speedup": 1.4,
             "measured_tau": 2.1}, {"proposer": "ngram", "spec": "ngram", "nodes": None, "measured_speedup": 1.2}]
    fig = VA.tree_budget_figure([budget], runs)
    go.Figure(fig.to_dict())  # valid Plotly
    names = _names(fig)
    assert any("tokens per step" in n for n in names) and any("predicted speedup" in n for n in names)
    star = next(t for t in fig.data if "best" in t.name)
    assert star.marker.symbol == "star" and list(star.x) == [budget.best.nodes] and star.yaxis == "y2"
    assert f"({budget.best.shape})" in star.name
    meas = next(t for t in fig.data if "measured speedup" in t.name)
    assert list(meas.x) == [3] and list(meas.y) == [1.4]
    assert len([n for n in names if "measured" in n]) == 2  # the chain run is not on a tree's curve
    assert fig.layout.yaxis2.overlaying == "y"
    empty = VA.tree_budget_figure([])
    assert not empty.data and "No tree proposer" in empty.layout.annotations[0].text


# -- the CLI's --html and the panel's plot on tiny models -----------------------------------------------


@pytest.fixture()
def fast_costs(monkeypatch, tmp_path):
    from specviz.analysis import costmodel as C

    monkeypatch.setenv("SPECVIZ_CACHE_DIR", str(tmp_path))

    def fake_measure(target, *, context=256, drafts=(), **kw):
        cost = cost_model(slope=0.0005, overhead=0.001)
        return C.CostModel(**{**cost.__dict__, "key": C.cost_key(target, context), "target": str(target.name)})

    monkeypatch.setattr(C, "measure", fake_measure)


PROMPTS = ("the cat sat on the mat. the cat sat on the mat. the cat", "abc abc abc abc abc abc", "hello there. hello there.")


def test_advise_html_has_the_tree_budget_plot(capsys, models_dir, fast_costs, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("\n".join(json.dumps({"prompt": p}) for p in PROMPTS))
    page, data = tmp_path / "advice.html", tmp_path / "advice.json"
    rc = cli.main(["advise", "--target", models_dir["target"], "--proposer", "ngram-tree:3", "--proposer", "ngram",
                   "--prompts", str(prompts), "--max-new-tokens", "16", "--k-max", "4", "--calibrate-tokens", "30",
                   "--run-top", "2", "--no-chat", "--quiet", "--html", str(page), "--json", str(data)])
    out, err = capsys.readouterr()
    assert rc == 0, err
    text = page.read_text()
    assert "<h2>Tree budget</h2>" in text and "plotly" in text.lower() and "node budget" in text
    assert "Predicted against measured" in text and "t(n) ms" in text
    payload = json.loads(data.read_text())
    budget = payload["tree_budgets"]["ngram-tree:3"]
    assert len(budget["points"]) == 17 and budget["points"][0]["shape"] == "0"
    assert all("proposer" in r and "nodes" in r for r in payload["runs"])
    assert all(r["nodes"] for r in payload["runs"] if r["spec"].startswith("ngram-tree"))


def test_the_panel_shows_the_tree_budget(models_dir, allow_local, fast_costs):
    at = pytest.importorskip("specviz.ui.advisor_tab")
    state = at.AdvisorState()
    outs = list(at.on_calibrate(state, models_dir["target"], ["ngram-tree:3"], at.CUSTOM, [], "\n".join(PROMPTS), 3, 16,
                                30, 0.0))
    fig = next(o["advisor_budget"] for o in reversed(outs) if "advisor_budget" in o)
    assert any("ngram-tree:3: predicted speedup" == t.name for t in fig.data)
    runs = list(at.on_run_top(state, 1))
    fig = runs[-1]["advisor_budget"]
    assert any("best" in t.name for t in fig.data)
