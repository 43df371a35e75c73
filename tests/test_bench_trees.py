"""Tree shapes in the benchmark sweep, and this machine's verify-cost curve (tiny models)."""

from __future__ import annotations

import pytest

from specviz import bench as B
from specviz.analysis import prediction, theory
from specviz.bench.shapes import expand_tree_shapes, is_tree_spec, parse_tree_nodes, with_tree_nodes
from specviz.bench.verify_cost import best_k_with_curve, curve_speedups, measure_verify_cost, v_at, verify_curve
from specviz.prompts import PromptRow
from specviz.proposers import check_spec, from_spec

PROMPTS = [PromptRow("the cat sat on the mat. the cat sat on the mat. the dog sat on the", "writing", "1"),
           PromptRow("abc abd abc abe abc abd abc", "coding", "2")]


# -- spec expansion -----------------------------------------------------------------------------


def test_expand_tree_shapes_sets_nodes_on_tree_specs_only():
    specs = expand_tree_shapes(["ngram", "ngram-tree", "draft-tree:m@int8,width=3,nodes=9", "none"], (4, 8))
    assert specs == ["ngram", "ngram-tree:3,nodes=4", "ngram-tree:3,nodes=8", "draft-tree:m@int8,width=3,nodes=4",
                     "draft-tree:m@int8,width=3,nodes=8", "none"]
    for s in specs:
        check_spec(s)  # every expanded spec is valid syntax
    assert expand_tree_shapes(["ngram-tree:4"], ()) == ["ngram-tree:4"]
    assert with_tree_nodes("draft:m", 8) == "draft:m"
    assert is_tree_spec("ngram-tree:2") and not is_tree_spec("ngram")


@pytest.mark.parametrize("bad", ["4,x", "0", "-2", "4.5", "99"])
def test_parse_tree_nodes_refuses_bad_input(bad):
    with pytest.raises(ValueError, match="tree nodes"):
        parse_tree_nodes(bad)


def test_parse_tree_nodes():
    assert parse_tree_nodes("16, 4,8,4") == (4, 8, 16)
    assert parse_tree_nodes("") == () and parse_tree_nodes(None) == ()


# -- the sweep with trees beside chains -----------------------------------------------------------


@pytest.fixture(scope="module")
def tree_report(tiny_target):
    specs = expand_tree_shapes(["ngram", "ngram-tree"], (2, 6))
    props = {p.name: p for p in (from_spec(s, tiny_target) for s in specs)}
    cfg = B.BenchConfig(ks=(2, 3), max_new_tokens=10, compare_hf=True, warmup_tokens=3)
    sweep = B.Sweep(tiny_target, props, PROMPTS, cfg)
    list(sweep)
    return sweep, sweep.report()


def test_tree_rows_count_nodes_and_depth(tree_report):
    sweep, report = tree_report
    rows = report["rows"]
    trees = [r for r in rows if r["proposer"].startswith("ngram-tree")]
    chains = [r for r in rows if r["proposer"] == "ngram" and r["impl"] == "specviz"]
    assert {r["proposer"] for r in trees} == {"ngram-tree:3,nodes=2", "ngram-tree:3,nodes=6"}
    for r in trees + chains:
        assert r["nodes_per_step"] == pytest.approx(r["drafted"] / r["steps"])
        assert len(r["per_position"]) <= r["k"]  # positions are depths, never more than k
    assert all(r["tree"] for r in trees) and not any(r["tree"] for r in chains)
    for r in trees:
        assert r["expected_tokens_per_step"] is None  # the i.i.d. chain formula is not applied to trees
        assert r["nodes_per_step"] <= int(r["proposer"].rsplit("=", 1)[1]) + 1e-9
    for r in chains:
        assert r["nodes_per_step"] <= r["k"] + 1e-9


def test_compare_hf_has_no_rows_for_trees(tree_report):
    sweep, report = tree_report
    hf = [r for r in report["rows"] if r["impl"] == "hf"]
    assert {r["proposer"] for r in hf} == {"target-only", "ngram"}
    assert set(sweep.hf_skipped) == {"ngram-tree:3,nodes=2", "ngram-tree:3,nodes=6"}


def test_positional_prediction_covers_tree_rows(tree_report):
    _, report = tree_report
    rows = prediction.augment_rows(report["rows"], report["prompt_rows"])
    for r in rows:
        if r["impl"] == "specviz" and r["k"] and r.get("per_position"):
            # tau = 1 + sum_i r_i reach_i reproduces the measured tokens per step up to the cut last step
            assert r["predicted_tau_positional"] == pytest.approx(r["mean_acceptance_length"], rel=0.25)
            assert r["prediction_note"]


def test_csv_has_nodes_per_step(tree_report):
    _, report = tree_report
    text = B.csv_text(report["rows"])
    assert "nodes_per_step" in text.splitlines()[0] and "tree" in text.splitlines()[0]


# -- verify cost ---------------------------------------------------------------------------------


def test_measure_verify_cost_returns_every_n_and_leaves_no_state(tiny_target):
    pts = measure_verify_cost(tiny_target, ns=(1, 2, 5), context_len=16, reps=2)
    assert [n for n, _ in pts] == [1, 2, 5] and all(ms > 0 for _, ms in pts)
    with pytest.raises(ValueError, match="n"):
        measure_verify_cost(tiny_target, ns=(0,))


def test_verify_curve_and_best_k():
    flat = verify_curve([(n, 10.0) for n in range(1, 18)])
    assert all(v == 1.0 for _, v in flat)
    # v = 1 for every n: the curve's best k is the calculator's best k
    assert best_k_with_curve(0.8, 0.05, flat) == theory.best_k(0.8, 0.05, 1.0, 16)
    steep = verify_curve([(n, 10.0 * n) for n in range(1, 18)])  # a CPU where t(n) grows linearly
    k_steep, s_steep = best_k_with_curve(0.8, 0.05, steep)
    k_flat, _ = best_k_with_curve(0.8, 0.05, flat)
    assert k_steep < k_flat and s_steep < 1.0  # with v(n) = n nothing pays at a = 0.8
    assert v_at(steep, 3) == pytest.approx(3.0) and v_at([(1, 1.0), (3, 2.0)], 2) == pytest.approx(1.5)
    assert [k for k, _, _ in curve_speedups(0.5, 0.1, steep)] == list(range(1, 17))
    with pytest.raises(ValueError, match="t\\(1\\)"):
        verify_curve([(2, 5.0)])


# -- figures, readout and the tab's handlers -------------------------------------------------------


def test_tree_figures_plot_against_nodes_with_theory(tree_report):
    from specviz.viz import bench as V

    _, report = tree_report
    rep = {**report, "verify_cost": [(n, 10.0 + n) for n in range(1, 18)]}
    figs = V.build_figures(rep)
    names = [t.name for t in figs["tree_tau"].data]
    assert "ngram" in names and "ngram-tree:3 depth 2" in names and "ngram-tree:3 depth 3" in names
    assert names[-1].startswith("ngram: chain theory E(a=")  # one line per chain proposer (bench_marks.chain_fits)
    tree = next(t for t in figs["tree_tau"].data if t.name == "ngram-tree:3 depth 2")
    rows = [r for r in report["rows"] if r["proposer"].startswith("ngram-tree") and r["k"] == 2]
    assert sorted(tree.x) == sorted(r["nodes_per_step"] for r in rows)  # x = measured nodes verified per step
    assert [t.name for t in figs["tree_speedup"].data][-1].startswith("ngram: theory, measured v(n)")
    vfig = figs["verify_cost"]
    assert list(vfig.data[0].y)[0] == 1.0 and list(vfig.data[0].x) == list(range(1, 18))
    assert "best k" in vfig.layout.annotations[0].text
    md = V.why_markdown(rep)
    assert "Measured vs predicted from per-position acceptance" in md and prediction.ASSUMPTIONS in md
    assert "The verify curve decides" in md
    for r in V.report_rows(rep):  # every row's prediction note is on the page
        if r.get("prediction_note"):
            assert r["prediction_note"] in md
    headers, body = V.table_rows(V.report_rows(rep))
    assert "nodes/step" in headers and "speedup predicted" in headers
    page = V.report_html(rep, include_plotlyjs="cdn")
    assert page.count('class="fig"') == len(V.FIGURES) and "per-position" in page


def test_parse_request_expands_tree_shapes(allow_local, models_dir):
    from specviz.ui import bench_tab as bt

    req = bt.parse_request(models_dir["target"], ["ngram", "ngram-tree"], [2], bt.CUSTOM, [], "abc abc", 1, 4, 0.0,
                           False, "4, 8")
    assert req.proposers == ("ngram", "ngram-tree:3,nodes=4", "ngram-tree:3,nodes=8") and req.tree_nodes == (4, 8)
    with pytest.raises(ValueError, match="tree nodes"):
        bt.parse_request(models_dir["target"], ["ngram-tree"], [2], bt.CUSTOM, [], "abc", 1, 4, 0.0, False, "4,x")


def test_verify_button_measures_and_attaches_the_curve(allow_local, models_dir, monkeypatch):
    from specviz.analysis import hardware
    from specviz.bench import verify_cost
    from specviz.ui import bench_tab as bt

    real = verify_cost.measure_verify_cost
    monkeypatch.setattr(bt, "measure_verify_cost", lambda t, ns, context_len, reps: real(t, (1, 2, 3), 8, 1))
    monkeypatch.setattr(bt, "DEFAULT_NS", (1, 2, 3))
    monkeypatch.setattr(hardware, "bandwidth", lambda: hardware.Bandwidth(bytes_per_s=20e9, threads=2, size_bytes=1 << 30))
    state = bt.BenchState()
    frames = list(bt.on_verify(state, models_dir["target"]))
    last = frames[-1]
    msg, vfig = last["verify_msg"], last["plot:verify_cost"]
    assert set(last) == {"verify_msg", "plot:verify_cost", "plot:tree_speedup", "why"}
    assert 'data-kind="ok"' in msg and "t(1) =" in msg, msg
    assert [n for n, _ in state.verify_cost] == [1, 2, 3] and state.verify_target == models_dir["target"]
    assert list(vfig.data[0].x) == [1, 2, 3]
    assert [n for n, *_ in state.verify_floor] == [1, 2, 3] and state.verify_floor[0][1:] == (1.0, 1.0)
    assert all(over <= serial + 1e-9 or over >= 1.0 for _, over, serial in state.verify_floor)
    assert [t.name for t in vfig.data][-2:] == ["least v(n) here: reading and products overlapped",
                                               "least v(n) here: one after the other"]
    report = bt.with_verify_cost(state, {"meta": {"target": models_dir["target"]}, "rows": []})
    assert report["verify_cost"] == [[n, ms] for n, ms in state.verify_cost]
    assert report["verify_floor"] == [list(p) for p in state.verify_floor]
    other = bt.with_verify_cost(state, {"meta": {"target": "another"}, "rows": []})
    assert "verify_cost" not in other  # a curve belongs to the target it was measured on
    msg = list(bt.on_verify(state, ""))[-1]["verify_msg"]
    assert 'data-kind="error"' in msg
    state.close()


def test_cli_tree_nodes_sweeps_each_budget_beside_the_chain(capsys, allow_local, models_dir, tmp_path):
    import json

    from specviz.cli import main

    out = tmp_path / "t.json"
    rc = main(["bench", "--target", models_dir["target"], "--proposer", "ngram", "--proposer", "ngram-tree",
               "--tree-nodes", "2,5", "--k", "2", "--category", "coding", "--limit", "1", "--max-new-tokens", "6",
               "--compare-hf", "--no-warmup", "--json", str(out), "--quiet"])
    assert rc == 0, capsys.readouterr().err
    rep = json.loads(out.read_text())
    assert [(r["proposer"], r["impl"]) for r in rep["rows"]] == [
        ("target-only", "specviz"), ("ngram", "specviz"), ("ngram-tree:3,nodes=2", "specviz"),
        ("ngram-tree:3,nodes=5", "specviz"), ("target-only", "hf"), ("ngram", "hf")]  # no HF rows for trees
    assert all(r["nodes_per_step"] is not None for r in rep["rows"] if r["impl"] == "specviz" and r["k"])
    rc = main(["bench", "--target", models_dir["target"], "--proposer", "ngram-tree", "--tree-nodes", "0", "--quiet"])
    assert rc != 0 and "--tree-nodes" in capsys.readouterr().err


def test_draft_tree_rows_in_the_sweep_are_exact_under_greedy(tiny_target, near_draft):
    from specviz.proposers.draft_tree import DraftTree

    props = {"draft-tree:near,nodes=3": DraftTree(near_draft, nodes=3, width=2, name="draft-tree:near,nodes=3")}
    sweep = B.Sweep(tiny_target, props, PROMPTS[:1], B.BenchConfig(ks=(2,), max_new_tokens=8, warmup=False))
    list(sweep)
    row = next(r for r in sweep.report()["rows"] if r["proposer"].startswith("draft-tree"))
    assert row["tree"] and row["same_as_target"] == 1.0  # greedy: the tree's output is the target's
    assert 0 < row["nodes_per_step"] <= 3 and len(row["per_position"]) <= 2


def test_the_lab_sweeps_the_k_schedules_chosen(allow_local, models_dir):
    """The lab's k schedules reach the sweep: a draft model runs under each (its rows named
    ``[confidence:T]``), the n-gram, which never stops on q, once; a schedule the lab does not offer
    (the heuristic, whose k would climb past SPECVIZ_MAX_K) or none at all is a message."""
    from specviz.ui import bench_tab as bt

    args = (models_dir["target"], ["ngram", f"draft:{models_dir['draft']}"], [3], bt.CUSTOM, [], "the cat sat on the mat",
            1, 8, 0.0, False, "")
    req = bt.parse_request(*args, ["constant", "confidence:0.5"])
    assert req.schedules == ("constant", "confidence:0.5") and bt._config(req).schedules == req.schedules
    state = bt.BenchState()
    frames = list(bt.on_run(state, *args, ["constant", "confidence:0.5"]))
    names = {(r["proposer"], r["impl"]) for r in state.report["rows"] if r.get("kind") == "summary"}
    draft = f"draft:{models_dir['draft']}"
    assert {(draft, "specviz"), (f"{draft} [confidence:0.5]", "specviz"), ("ngram", "specviz")} <= names, names
    assert not any(n.startswith("ngram [") for n, _ in names) and "Done in" in str(frames[-1])
    state.close()
    for bad, why in ((["heuristic"], "unknown k schedule 'heuristic'"), ([], "at least one k schedule")):
        with pytest.raises(ValueError, match=why):
            bt.parse_request(*args, bad)


def test_the_lab_runs_the_passes_chosen_and_each_adds_a_ratio_to_the_interval(allow_local, models_dir):
    """The tab's "Passes over the prompts" reaches the sweep (issue 52: its intervals were over
    prompts alone, and it sent the user to the CLI's --repeats): two passes over one prompt give
    every configuration two runs and a median with an interval, where one pass is "one run"; a
    count outside 1..MAX_REPEATS is a message."""
    from specviz.analysis.noise import ONE_RUN
    from specviz.ui import bench_tab as bt

    args = (models_dir["target"], ["ngram"], [2], bt.CUSTOM, [], "the cat sat on the mat, the cat sat on the mat",
            1, 8, 0.0, False, "", ["constant"])
    assert bt._config(bt.parse_request(*args, 3)).repeats == 3 and bt.parse_request(*args).repeats == 1
    verdicts = {}
    for passes in (1, 2):
        state = bt.BenchState()
        list(bt.on_run(state, *args, passes))
        report = state.report
        assert report["meta"]["repeats"] == passes
        runs_of = [r for r in report["prompt_rows"] if r["proposer"] == "ngram"]
        assert len(runs_of) == passes
        row = next(r for r in report["rows"] if r.get("kind") == "summary" and r["proposer"] == "ngram")
        verdicts[passes] = row["verdict"]
        state.close()
    assert verdicts[1] == ONE_RUN and verdicts[2] != ONE_RUN, verdicts
    for bad in (0, bt.MAX_REPEATS + 1, "x"):
        with pytest.raises(ValueError, match="passes"):
            bt.parse_request(*args, bad)
