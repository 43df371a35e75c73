"""benchmarks/advisor_check.py on tiny models: its main() runs the advisor, the full sweep and the
tree-shape sweep end to end, and every error and gap in its output is computed from the two
numbers beside it. The costs come from numbers (no timing); every cache is under tmp_path."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from specviz.analysis import costmodel as C
from tests.support.tiny import make_char_tokenizer, make_llama, perturbed
from tests.test_advisor import cost_model

ROOT = Path(__file__).resolve().parents[1]


def _load_script():
    spec = importlib.util.spec_from_file_location("advisor_check", ROOT / "benchmarks" / "advisor_check.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def check():
    return _load_script()


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("advisor-check-models")
    tok = make_char_tokenizer()
    target = make_llama(len(tok), 64, 2, seed=0, sharpen=30.0)
    paths = []
    for name, model in (("target", target), ("draft", perturbed(target, 0.1, seed=2))):
        model.save_pretrained(str(root / name))
        tok.save_pretrained(str(root / name))
        paths.append(str(root / name))
    prompts = root / "prompts.jsonl"
    rows = [("code", "def f(x): return x. def f(x): return x. def"), ("dialogue", "hi there. hi there. hi"),
            ("extraction", "a=1, b=2, a=1, b=2, a=1"), ("code", "the cat sat on the mat. the cat sat on the"),
            ("dialogue", "abc abc abc abc abc"), ("extraction", "hello there. hello there. hello")]
    prompts.write_text("\n".join(json.dumps({"id": f"p{i}", "category": c, "prompt": p}) for i, (c, p) in enumerate(rows)))
    return paths[0], paths[1], str(prompts)


@pytest.fixture()
def fast_costs(monkeypatch, tmp_path):
    """The cost model from numbers; SPECVIZ_CACHE_DIR (shapes, picks, costs) under tmp_path."""
    monkeypatch.setenv("SPECVIZ_CACHE_DIR", str(tmp_path))

    def fake_measure(target, *, context=256, drafts=(), **kw):
        cost = cost_model(slope=0.0005, draft_step=0.002, overhead=0.001)
        return C.CostModel(**{**cost.__dict__, "key": C.cost_key(target, context), "target": str(target.name), "drafts": {
            str(d.name): C.DraftCost(str(d.name), *[getattr(cost.drafts["d"], f) for f in ("step_s", "feed_s", "level_s", "prefill_s")])
            for d in drafts}})

    monkeypatch.setattr(C, "measure", fake_measure)
    return tmp_path


def test_help_runs(check, capsys):
    with pytest.raises(SystemExit) as info:
        check.main(["--help"])
    assert info.value.code == 0 and "--k-max" in capsys.readouterr().out


def test_fixed_shapes_have_the_auto_budget(check):
    assert check.fill_shape(4, 1) == "1111" and check.fill_shape(4, 2) == "22" and check.fill_shape(5, 3) == "32"
    assert check.fill_shape(0, 2) == "0"
    fixed = check.fixed_shapes("211", "1111")
    assert fixed["chain = the DP's runner-up"] == "1111" and list(fixed.values()).count("1111") == 1  # run once
    assert "211" not in fixed.values()
    assert {check.T.decode(s).nodes for s in fixed.values()} == {4}


def test_main_on_tiny_models(check, models, fast_costs, tmp_path, capsys):
    target, draft, prompts = models
    out_json = tmp_path / "check.json"
    rc = check.main(["--target", target, "--proposer", "ngram", "--proposer", f"draft:{draft}", "--proposer", "ngram-tree:3",
                     "--prompts", prompts, "--heldout", "3", "--limit", "2", "--k-max", "3", "--max-new-tokens", "24",
                     "--calibrate-tokens", "20", "--threads", "1", "--quiet", "--json", str(out_json),
                     "--record", str(tmp_path / "error.json")])
    assert rc == 0
    out = capsys.readouterr().out
    res = json.loads(out_json.read_text())
    assert json.loads(out.split("```json\n", 1)[1].rsplit("\n```", 1)[0]) == res  # the same record on stdout
    for title in ("# Advisor check", "## Predicted against measured", "## The advisor's pick against the full sweep",
                  "## The full sweep"):
        assert title in out
    h = res["header"]
    assert h["cpu"]["model_name"] and h["cpu"]["torch_threads"] == 1 and "torch" in h["cpu"]
    assert h["calibration_prompts"] == [] and h["heldout_prompts"] == ["p3", "p4"]  # kinds in turn
    # greedy: the advisor decoded the held-out prompts once and replayed every proposer on them
    assert h["calibrate_on"] == "heldout" and h["calibration_method"] == "replay" and h["models_load_s"] >= 0
    (dec,) = h["replay"]["decodes"]
    assert dec["prompts"] == 2 and dec["replay_reproduced"] == 2 and dec["decoded_with"] == "ngram"
    assert "greedy decode for the replay: 2 prompts" in out

    # 1. the advisor: timed, ranked, a predicted best per proposer
    assert res["advisor"]["seconds"] > 0 and res["advisor"]["ranking"]
    speeds = [f["speedup"] for f in res["advisor"]["ranking"]]
    assert speeds == sorted(speeds, reverse=True)
    # 2. the full sweep: every proposer x k = 1..3 plus target-only, on the held-out prompts
    rows = {(r["proposer"], r["k"]) for r in res["sweep"]["rows"] if r["impl"] == "specviz"}
    for name in ("ngram", f"draft:{draft}", "ngram-tree:3"):
        assert {(name, k) for k in (1, 2, 3)} <= rows
    assert ("target-only", 0) in rows and res["sweep"]["meta"]["prompts"] == 2
    # 3. every error from the two numbers beside it
    assert [c["proposer"] for c in res["per_proposer"]] == ["ngram", f"draft:{draft}", "ngram-tree:3"]
    measured = {(r["proposer"], r["k"]): r["speedup"] for r in res["sweep"]["rows"] if r["impl"] == "specviz"}
    for c in res["per_proposer"]:
        if c.get("spec") is None:
            continue
        assert c["measured_speedup"] == measured[(c["spec"], c["k"])]  # measured in the sweep, at the predicted best k
        best = next(f for f in res["advisor"]["ranking"] if f["proposer"] == c["proposer"])
        assert (best["spec"], best["k"], best["speedup"]) == (c["spec"], c["k"], c["predicted_speedup_loop"])
        err = (c["measured_speedup"] - c["predicted_speedup"]) / c["predicted_speedup"]
        assert c["error"] == pytest.approx(err) and c["within_10pct"] == (abs(err) <= 0.10)
        assert c["interval"][0] <= c["predicted_speedup_loop"] <= c["interval"][1]
    p = res["pick"]
    top = max(measured.items(), key=lambda kv: kv[1] if kv[1] is not None else -1)
    assert (p["sweep_best"]["spec"], p["sweep_best"]["k"]) == top[0] and p["sweep_best"]["measured_speedup"] == top[1]
    forecast = {(f["spec"], f["k"]) for f in res["advisor"]["ranking"]} | {("target-only", 0)}
    best_in = max((kv for kv in measured.items() if kv[0] in forecast), key=lambda kv: kv[1])
    assert (p["sweep_best_predicted"]["spec"], p["sweep_best_predicted"]["k"]) == best_in[0]
    assert "ngram-tree:3 k=1" in p["unpredicted"]  # the tree as given (its own mode): swept, not predicted
    pick_key = (p["pick"]["spec"], p["pick"]["k"]) if p["pick"]["spec"] != "none" else ("target-only", 0)
    assert p["pick"]["measured_speedup"] == measured[pick_key]
    gap = (top[1] - p["pick"]["measured_speedup"]) / top[1]
    assert p["gap"] == pytest.approx(gap) and p["within_5pct"] == (gap <= 0.05)
    assert p["time_ratio"] == pytest.approx(p["advisor_s"] / p["sweep_s"]) and p["sweep_s"] == res["sweep"]["seconds"]
    # 4. the tree: shape=auto (read back from the tmp cache) against fixed shapes of its node budget
    (tree,) = res["trees"]
    shapes = json.loads((fast_costs / "advisor" / "shapes.json").read_text())
    assert shapes[f"{target}|ngram-tree:3"]["shape"] == tree["auto"] == res["advisor"]["shapes"]["ngram-tree:3"]
    assert tree["auto"] != "0"  # these prompts and 24 tokens give the trie kept nodes (greedy, seeded models)
    assert tree["rows"][0]["label"] == "shape=auto" and tree["rows"][0]["shape"] == tree["auto"]
    assert tree["rows"][0]["spec"] == f"ngram-tree:3,shape={tree['auto']}"  # shape=auto built the advised shape
    assert {r["nodes"] for r in tree["rows"]} == {tree["nodes"]} and len(tree["rows"]) >= 2
    assert len({r["shape"] for r in tree["rows"]}) == len(tree["rows"])
    fixed = [r["measured_speedup"] for r in tree["rows"][1:]]
    assert tree["auto_at_least_as_fast"] == (tree["rows"][0]["measured_speedup"] >= max(fixed))
    assert tree["best_fixed"] == max(tree["rows"][1:], key=lambda r: r["measured_speedup"])["label"]
    ranked = next(f for f in res["advisor"]["ranking"] if f["spec"] == tree["rows"][0]["spec"])
    assert tree["rows"][0]["predicted_speedup_loop"] == pytest.approx(ranked["speedup"])  # the advisor's own forecast
    assert "shape=auto against fixed shapes" in out and "every output equal to target-only's: yes" in out
    assert list((fast_costs / "advisor").glob("costs-*.json"))  # the cost model's cache: under tmp_path too


def test_calibrate_on_the_other_prompts(check, models, fast_costs, tmp_path, capsys):
    """--calibrate-on calibration (as specviz advise --heldout): the draft is calibrated on the
    first prompts, prompt lookup on the held-out ones it will run on: two greedy decodes."""
    target, draft, prompts = models
    out_json = tmp_path / "check.json"
    rc = check.main(["--target", target, "--proposer", "ngram", "--proposer", f"draft:{draft}", "--prompts", prompts,
                     "--heldout", "3", "--limit", "1", "--k-max", "2", "--max-new-tokens", "12", "--calibrate-tokens", "10",
                     "--calibrate-on", "calibration", "--quiet", "--json", str(out_json), "--record", ""])
    assert rc == 0
    h = json.loads(out_json.read_text())["header"]
    assert h["calibration_prompts"] == ["p0", "p1", "p2"] and h["calibrate_on"] == "calibration"
    decodes = {tuple(d["for"]): d for d in h["replay"]["decodes"]}
    assert decodes[("ngram",)]["prompts"] == 1 and decodes[("ngram",)]["decoded_with"] == "ngram"
    assert decodes[(f"draft:{draft}",)]["decoded_with"] == f"draft:{draft}"
    assert all(d["replay_reproduced"] == d["prompts"] for d in decodes.values())


def test_every_chain_configuration_against_the_median(check, models, fast_costs, tmp_path, capsys):
    """The default mode (issue 51): the first prompt of each kind, every chain at each --k, each whole-run
    prediction beside the measured median and its interval; the summary and the published record are
    computed from the rows beside them."""
    target, draft, prompts = models
    out_json, record = tmp_path / "check.json", tmp_path / "error.json"
    argv = ["--target", target, "--proposer", "ngram", "--proposer", f"draft:{draft}", "--prompts", prompts,
            "--per-kind", "1", "--k", "1,2", "--max-new-tokens", "12", "--calibrate-tokens", "10", "--quiet",
            "--json", str(out_json), "--record", str(record)]
    assert check.main(argv) == 0
    out = capsys.readouterr().out
    res = json.loads(out_json.read_text())
    h = res["header"]
    assert h["kinds"] == {"code": ["p0"], "dialogue": ["p1"], "extraction": ["p2"]} and h["ks"] == [1, 2]
    assert h["heldout_prompts"] == ["p0", "p1", "p2"]
    chains = res["chains"]
    assert {(c["name"], c["k"]) for c in chains} == {(n, k) for n in ("ngram", f"draft:{draft}") for k in (1, 2)}
    medians = {(r["proposer"], r["k"]): r for r in res["sweep"]["rows"] if r["impl"] == "specviz"}
    for c in chains:
        row = medians[(c["name"], c["k"])]
        assert c["measured_median"] == row["speedup_median"] and c["measured_interval"] == [row["speedup_low"], row["speedup_high"]]
        assert c["error_vs_median"] == pytest.approx((c["predicted_speedup"] - c["measured_median"]) / c["measured_median"])
    errs = [abs(c["error_vs_median"]) for c in chains]
    sm = res["chain_summary"]
    assert sm["configurations"] == 4 and sm["mean_abs_error"] == pytest.approx(sum(errs) / 4)
    assert sm["max_abs_error"] == pytest.approx(max(errs)) and sm["too_high"] == sum(c["error_vs_median"] > 0 for c in chains)
    assert sm["within_goal"] == (sm["mean_abs_error"] <= 0.05 and sm["max_abs_error"] <= 0.10)
    assert "## Every chain configuration" in out and "mean absolute error" in out
    pub = json.loads(record.read_text())
    assert pub["summary"] == sm and len(pub["rows"]) == 4 and pub["ks"] == [1, 2] and "--per-kind 1" in pub["command"]
    assert pub["cpu"]["model_name"] == h["cpu"]["model_name"]
    # what specviz advise and the app's Advisor panel show: read from the record, never a number in the code
    from specviz.bench.advice_out import error_words, published_error
    words = error_words(published_error(record))
    assert f"{100 * sm['mean_abs_error']:.1f}% from the measured medians" in words and "3 held-out prompts of 3 kinds" in words
    assert f"{sm['too_high']} of 4 too high" in words and "--per-kind 1" in words
    (tmp_path / "broken.json").write_text("{")
    assert published_error(tmp_path / "none.json") is None and published_error(tmp_path / "broken.json") is None
    assert "no held-out check is recorded here" in error_words(None)


def test_error_summary_on_recorded_numbers(check):
    rows = [{"name": "ngram", "k": 1, "error_vs_median": 0.04}, {"name": "draft", "k": 2, "error_vs_median": -0.12},
            {"name": "draft", "k": 4, "error_vs_median": None}]
    sm = check.error_summary(rows)
    assert sm["configurations"] == 2 and sm["mean_abs_error"] == pytest.approx(0.08) and sm["too_high"] == 1
    assert sm["worst"] == {"configuration": "draft", "k": 2, "error": -0.12} and not sm["within_goal"]
    assert sm["within_10pct"] == 1
    assert check.error_summary([])["within_goal"] is False


def test_heldout_kinds(check):
    from specviz.prompts import load_prompts
    rows = load_prompts(check.PROMPTS)
    held, rest, kinds = check.select_by_kind(rows, 3)
    assert list(kinds) == ["code", "writing", "structured"] and all(len(v) == 3 for v in kinds.values())
    assert len(held) == 9 and len(rest) == len(rows) - 9 and not {r.id for r in held} & {r.id for r in rest}
    assert {r.category for r in held if r.id in kinds["structured"]} == {"structured", "shell", "sql"}
    with pytest.raises(SystemExit):
        check.main(["--k", "0,2"])
