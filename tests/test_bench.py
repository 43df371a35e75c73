"""Benchmark sweeps on tiny models: rows, order, stopping, files, HF reference rows, figures."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from specviz import bench as B
from specviz.analysis import metrics
from specviz.core.records import Sampling
from specviz.prompts import PromptRow
from specviz.proposers import DraftModel, NGram, from_spec
from specviz.viz import bench as V

PROMPTS = [
    PromptRow("the cat sat on the mat. the cat sat on the", "writing", "1"),
    PromptRow("abc abc abc abc abc", "coding", "2"),
]


@pytest.fixture(scope="module")
def proposers(near_draft):
    return {"ngram": NGram(), "draft:tiny-near": DraftModel(near_draft, name="draft:tiny-near")}


@pytest.fixture(scope="module")
def sweep(tiny_target, proposers):
    """One sweep with HF reference rows: 2 prompts x (target-only + 2 proposers x k in {1, 2}) x 2 impls."""
    s = B.Sweep(tiny_target, proposers, PROMPTS, B.BenchConfig(ks=(1, 2), max_new_tokens=12, compare_hf=True, warmup_tokens=4))
    s.events_seen = list(s)
    return s


@pytest.fixture(scope="module")
def report(sweep):
    return sweep.report()


# -- parsing ------------------------------------------------------------------------------------


def test_from_spec_ngram_and_none(tiny_target):
    p = from_spec("ngram", tiny_target)
    assert isinstance(p, NGram) and p.max_ngram == 3 and p.name == "ngram"
    p = from_spec(" ngram:5 ", tiny_target)
    assert isinstance(p, NGram) and p.max_ngram == 5 and p.name == "ngram:5"
    assert from_spec("none", tiny_target) is None
    assert from_spec("target-only", tiny_target) is None


def test_from_spec_draft_loads_on_the_targets_device(tiny_target, near_draft):
    calls = []

    def load(name, **kw):
        calls.append((name, kw))
        return near_draft

    p = from_spec("draft:some-model", tiny_target, load=load)
    assert isinstance(p, DraftModel) and p.model is near_draft
    assert calls == [("some-model", {"device": tiny_target.device, "dtype": tiny_target.dtype})]
    calls.clear()
    from_spec("draft:some-model@int8", tiny_target, load=load)
    assert calls[0][0] == "some-model@int8"  # load_model understands the suffix
    hybrid = from_spec("ngram+draft:some-model", tiny_target, load=load)
    assert hybrid.name == f"ngram+draft:{near_draft.name}" and hybrid.model is near_draft


@pytest.mark.parametrize("spec, words", [
    ("", "empty"), ("   ", "empty"), ("bogus", "unknown proposer"), ("ngram:0", "N >= 1"), ("ngram:x", "N >= 1"),
    ("draft:", "needs a model name"), ("ngram+draft:", "needs a model name"), ("eagle:3", "unknown proposer"), ("none:1", "unknown proposer"),
])
def test_from_spec_rejects_bad_specs(tiny_target, spec, words):
    with pytest.raises(ValueError, match=words) as info:
        from_spec(spec, tiny_target, load=lambda *a, **k: pytest.fail("must not load"))
    assert "ngram" in str(info.value) or "draft" in str(info.value) or "empty" in str(info.value)


def test_from_spec_rejects_a_draft_with_another_tokenizer(tiny_target):
    other = SimpleNamespace(name="other", tokenizer=SimpleNamespace(get_vocab=lambda: {"x": 0}))
    with pytest.raises(ValueError, match="does not share"):
        from_spec("draft:other", tiny_target, load=lambda *a, **k: other)


def test_parse_ks():
    assert B.parse_ks("1,2,4,8") == (1, 2, 4, 8)
    assert B.parse_ks("4, 1,4") == (1, 4)
    assert B.parse_ks([2, 1]) == (1, 2)
    for bad in ("", "0", "1,x", "99", [1.5]):
        with pytest.raises(ValueError):
            B.parse_ks(bad)


def test_bench_config_and_sweep_validation(tiny_target):
    with pytest.raises(ValueError):
        B.BenchConfig(ks=(0,))
    with pytest.raises(ValueError):
        B.BenchConfig(max_new_tokens=0)
    with pytest.raises(ValueError, match="no prompts"):
        B.Sweep(tiny_target, {"ngram": NGram()}, [], B.BenchConfig(ks=(1,)))
    bad = DraftModel(SimpleNamespace(name="other", tokenizer=SimpleNamespace(get_vocab=lambda: {})))
    with pytest.raises(ValueError, match="does not share"):
        B.Sweep(tiny_target, {"bad": bad}, PROMPTS, B.BenchConfig(ks=(1,)))


# -- the sweep ----------------------------------------------------------------------------------


def test_sweep_plans_every_configuration(sweep):
    labels = [(r.proposer, r.k, r.impl) for r in sweep.runs]
    assert labels == [
        ("target-only", 0, "specviz"), ("ngram", 1, "specviz"), ("ngram", 2, "specviz"),
        ("draft:tiny-near", 1, "specviz"), ("draft:tiny-near", 2, "specviz"),
        ("target-only", 0, "hf"), ("ngram", 1, "hf"), ("ngram", 2, "hf"),
        ("draft:tiny-near", 1, "hf"), ("draft:tiny-near", 2, "hf"),
    ]
    assert sweep.total == 20


def test_sweep_events(sweep):
    kinds = [e.kind for e in sweep.events_seen]
    reruns = kinds.count("rerun")  # a run a stall hit (a busy machine), timed again after the others
    assert kinds == ["warmup"] + ["run"] * 20 + ["rerun"] * reruns + ["done"]
    runs = [e for e in sweep.events_seen if e.kind == "run"]
    assert [e.done for e in runs] == list(range(1, 21))
    assert [e.prompt_done for e in runs].count(True) == 2 and runs[9].prompt_done and runs[19].prompt_done
    assert all(e.row is not None and e.total == 20 for e in runs)


def test_prompts_run_every_configuration_back_to_back(sweep, report):
    idx = [r["prompt_index"] for r in report["prompt_rows"]]
    assert idx == [0] * 10 + [1] * 10  # interleaved: each prompt runs all configurations in turn
    ran = [(r["proposer"], r["k"], r["impl"]) for r in report["prompt_rows"]]
    plan = [(s.proposer, s.k, s.impl) for s in sweep.runs]
    assert ran[:10] == plan and ran[10:] == plan[1:] + plan[:1]  # rotated by one per prompt
    assert sweep.order(10) == sweep.runs  # the rotation wraps around
    assert [r["category"] for r in report["prompt_rows"]] == ["writing"] * 10 + ["coding"] * 10


def test_summary_rows(report):
    rows = report["rows"]
    assert len(rows) == 10
    base = rows[0]
    assert (base["proposer"], base["k"], base["impl"]) == ("target-only", 0, "specviz")
    assert base["speedup"] == pytest.approx(1.0) and base["mean_acceptance_length"] == pytest.approx(1.0)
    assert base["acceptance_rate"] is None and base["c"] is None
    for r in rows:
        assert r["kind"] == "summary" and r["prompts"] == 2
        assert r["new_tokens"] == base["new_tokens"]  # greedy: the same text, so the same length
        assert 0 < r["new_tokens"] <= 2 * 12
        assert r["tokens_per_s"] == pytest.approx(r["new_tokens"] / r["wall_s"])
        assert r["ms_per_token"] == pytest.approx(1e3 / r["tokens_per_s"])
        assert r["speedup"] > 0 and r["speedup_vs_specviz"] > 0 and r["speedup_median"] > 0
        if r["impl"] == "specviz" and r["k"]:
            assert 0 <= r["acceptance_rate"] <= 1
            assert 1 <= r["mean_acceptance_length"] <= r["k"] + 1
            assert len(r["per_position"]) == r["k"]
            assert r["drafted"] <= r["k"] * r["steps"]
            assert r["c"] > 0 and r["v"] > 0
            assert r["predicted_speedup"] == pytest.approx(metrics.predicted_speedup(r["acceptance_rate"], r["k"], r["c"], r["v"]))
            assert r["expected_tokens_per_step"] == pytest.approx(metrics.expected_tokens_per_step(r["acceptance_rate"], r["k"]))
            assert r["draft_ms"] >= 0 and r["verify_ms"] > 0 and r["other_ms"] >= 0
            # exactness: greedy speculative output is the target's own output
            assert r["same_as_target"] == 1.0
    hf = [r for r in rows if r["impl"] == "hf"]
    assert len(hf) == 5
    hf_base = hf[0]
    assert hf_base["proposer"] == "target-only" and hf_base["speedup"] == pytest.approx(1.0)
    assert hf_base["same_as_target"] == 1.0  # transformers' greedy decoding agrees with ours
    for r in hf:
        assert r["acceptance_rate"] is None and r["c"] is None and r["draft_ms"] is None
        assert r["speedup_vs_specviz"] == pytest.approx(r["tokens_per_s"] / base["tokens_per_s"])
        assert r["mean_acceptance_length"] >= 1.0
        if r["k"]:
            assert r["same_as_target"] == 1.0


def test_ngram_on_repetitive_text_accepts_something(report):
    ngram = [r for r in report["rows"] if r["proposer"] == "ngram" and r["impl"] == "specviz"]
    assert all(r["drafted"] > 0 for r in ngram)


def test_per_prompt_rows(report):
    for r in report["prompt_rows"]:
        assert r["kind"] == "prompt" and r["prompt_tokens"] > 0 and r["wall_s"] > 0
        if r["impl"] == "specviz" and r["k"]:
            assert len(r["per_position_hits"]) == len(r["per_position_trials"]) <= r["k"]
            assert r["accepted"] <= r["drafted"]
        if r["k"] == 0:
            assert r["speedup"] == pytest.approx(1.0)
        # filled in even on prompt 1, where the target-only runs came after the others
        assert r["speedup"] is not None and r["speedup_vs_specviz"] is not None
        assert r["same_as_target"] is (None if (r["impl"], r["k"]) == ("specviz", 0) else True)


def test_meta_and_overhead(report):
    m = report["meta"]
    assert report["schema"] == B.SCHEMA
    assert m["ks"] == [1, 2] and m["max_new_tokens"] == 12 and m["prompts"] == 2 and m["compare_hf"]
    assert m["runs_done"] == m["runs_planned"] == 20 and not m["stopped"]
    assert m["categories"] == ["coding", "writing"]
    assert m["timed_s"] > 0 and m["warmup_s"] > 0
    assert m["wall_s"] >= m["timed_s"] + m["warmup_s"]
    assert m["overhead_s"] == pytest.approx(m["wall_s"] - m["timed_s"] - m["warmup_s"])
    # the overhead is measured and reported (README: 0.04% on gemma); a timed bound is not a test
    assert 0 <= m["overhead_frac"] < 1


def test_hf_assistant_gets_a_constant_k_without_touching_the_shared_model(near_draft):
    before = near_draft.model.generation_config.to_dict()
    kw = B._hf_kwargs(DraftModel(near_draft), 3)
    gen = kw["assistant_model"].generation_config
    assert gen.num_assistant_tokens == 3
    assert gen.num_assistant_tokens_schedule == "constant"
    assert gen.assistant_confidence_threshold == 0.0
    assert kw["assistant_model"].model is near_draft.model.model  # same weights
    assert near_draft.model.generation_config.to_dict() == before
    assert B._hf_kwargs(NGram(max_ngram=2), 5) == {"prompt_lookup_num_tokens": 5, "max_matching_ngram_size": 2}
    assert B._hf_kwargs(SimpleNamespace(name="other"), 2) is None


def test_hf_early_exit_drafts_with_the_targets_layers_on_a_private_config(tiny_target):
    """transformers' counterpart of early-exit:L: generate(assistant_early_exit=L), k from a
    private constant-k config; it gives the target's greedy output and never changes the shared
    model's configs (transformers lowers num_hidden_layers while it drafts)."""
    from specviz.bench import hf
    from specviz.core.engine import encode_prompt, eos_token_ids
    from specviz.proposers import EarlyExit

    kw = B._hf_kwargs(EarlyExit(tiny_target, 1), 3)
    assert kw["assistant_early_exit"] == 1
    before = (tiny_target.model.config.to_dict(), tiny_target.model.generation_config.to_dict())
    view = hf._self_assistant(tiny_target.model, 3)
    assert view.generation_config.num_assistant_tokens == 3 and view.model.layers is tiny_target.model.model.layers
    assert view.config is not tiny_target.model.config
    ids = encode_prompt(tiny_target.tokenizer, "the cat sat on the mat. the cat sat on the")
    early = hf._run_hf(tiny_target, ids, 12, Sampling(), 0, kw, eos_token_ids(tiny_target))
    plain = hf._run_hf(tiny_target, ids, 12, Sampling(), 0, {}, eos_token_ids(tiny_target))
    assert early["token_ids"] == plain["token_ids"]
    assert (tiny_target.model.config.to_dict(), tiny_target.model.generation_config.to_dict()) == before


def test_stop_after_three_runs(tiny_target):
    seen, rows_seen = [], []
    rep = B.run_sweep(
        tiny_target, {"ngram": NGram()}, PROMPTS, B.BenchConfig(ks=(1, 2), max_new_tokens=6, warmup=False),
        on_event=seen.append, on_row=rows_seen.append, should_stop=lambda: sum(e.kind == "run" for e in seen) >= 3,
    )
    assert [e.kind for e in seen] == ["run", "run", "run", "stopped"]
    assert [B.to_record(r) for r in rows_seen] == rep["prompt_rows"] and len(rows_seen) == 3
    assert all(isinstance(r, B.PromptResult) for r in rows_seen)
    m = rep["meta"]
    assert m["stopped"] and m["runs_done"] == 3 and m["runs_planned"] == 6 and m["warmup_s"] == 0
    assert [(r["proposer"], r["k"], r["prompts"]) for r in rep["rows"]] == [("target-only", 0, 1), ("ngram", 1, 1), ("ngram", 2, 1)]


def test_repeats_run_every_prompt_again_in_a_new_rotation(tiny_target):
    with pytest.raises(ValueError, match="repeats"):
        B.BenchConfig(repeats=0)
    cfg = B.BenchConfig(ks=(1,), max_new_tokens=4, warmup=False, repeats=2)
    rep = B.run_sweep(tiny_target, {"ngram": NGram()}, ["the cat sat on the mat, the cat"], cfg)
    ran = [(r["prompt_index"], r["proposer"]) for r in rep["prompt_rows"]]
    assert ran == [(0, "target-only"), (0, "ngram"), (1, "ngram"), (1, "target-only")]
    assert rep["meta"]["prompts"] == 1 and rep["meta"]["repeats"] == 2 and rep["meta"]["runs_done"] == 4
    assert rep["meta"]["static_decode"] is True  # the default: chain drafts on the traced step
    assert rep["meta"]["static_decode_trace_s"] == 0.0  # an n-gram traces nothing
    assert [(r["proposer"], r["prompts"], r["new_tokens"]) for r in rep["rows"]] == [("target-only", 2, 8), ("ngram", 2, 8)]


def test_bandwidth_is_read_beside_each_target_only_run_only_when_asked(tiny_target, monkeypatch):
    from specviz.analysis import hardware
    from specviz.bench import sweep as sweep_module

    reads = []

    def fake_bandwidth(size_bytes, repeats, refresh):  # a stand-in read, its order noted
        reads.append(len(reads))
        return hardware.Bandwidth(bytes_per_s=(20 + len(reads)) * 1e9, threads=2, size_bytes=size_bytes)

    monkeypatch.setattr(sweep_module, "bandwidth", fake_bandwidth)
    cfg = B.BenchConfig(ks=(1,), max_new_tokens=4, warmup=False, repeats=2, probe_bandwidth=True)
    s = B.Sweep(tiny_target, {"ngram": NGram()}, ["the cat sat on the mat, the cat"], cfg)
    ran = []
    for event in s:
        if event.kind == "run":
            ran.append((event.row.proposer, len(reads)))
    # two reads per target-only run (before and after it), none around the n-gram's
    assert ran == [("target-only", 2), ("ngram", 2), ("ngram", 2), ("target-only", 4)]
    assert s.report()["meta"]["bandwidth_gb_s"] == [21.0, 22.0, 23.0, 24.0]
    reads.clear()
    rep = B.run_sweep(tiny_target, {"ngram": NGram()}, ["the cat"], replace(cfg, probe_bandwidth=False, repeats=1))
    assert reads == [] and rep["meta"]["bandwidth_gb_s"] == []  # off by default (the app's lab)


def test_the_report_shows_the_static_steps_trace_time(tiny_target):
    from specviz.cli import _trace_note
    from tests.support.tiny import loaded, perturbed

    fresh = loaded(perturbed(tiny_target.model, 0.1, seed=11), tiny_target.tokenizer, "tiny-fresh")  # never traced
    cfg = B.BenchConfig(ks=(2,), max_new_tokens=4, warmup=True)
    rep = B.run_sweep(tiny_target, {"draft": DraftModel(fresh)}, ["the cat sat on the mat"], cfg)
    traced = rep["meta"]["static_decode_trace_s"]
    assert traced > 0 and f"{traced:.1f} s" in _trace_note(rep["meta"]) and _trace_note({}) == ""
    assert "static decode step</th><td>on, traced in" in V.report_html(rep)
    old = {**rep, "meta": {k: v for k, v in rep["meta"].items() if not k.startswith("static_decode")}}
    assert "static decode step</th><td>not recorded" in V.report_html(old)  # a report from before the step


def test_sampled_sweep_and_plain_prompts(tiny_target):
    rep = B.run_sweep(
        tiny_target, {"ngram": NGram()}, ["the cat sat on the mat, the cat"],
        B.BenchConfig(ks=(2,), max_new_tokens=6, sampling=Sampling(temperature=1.0), seed=3, warmup=False),
    )
    assert len(rep["rows"]) == 2
    assert all(r["same_as_target"] is None for r in rep["rows"])  # sampled: outputs differ by design
    assert rep["prompt_rows"][0]["category"] == "custom"
    assert rep["meta"]["sampling"]["temperature"] == 1.0


def test_summarize_is_pure_and_handles_partial_rows(report):
    rows = B.summarize(report["prompt_rows"][:7])  # prompt 0, up to the first HF rows (records, as in a file)
    assert [r.prompts for r in rows] == [1] * 7 and all(isinstance(r, B.SummaryRow) for r in rows)
    assert B.summarize([]) == []


# -- output files -------------------------------------------------------------------------------


def test_json_roundtrip(report, tmp_path):
    path = B.write_json(report, tmp_path / "out.json")
    data = json.loads(path.read_text())
    assert data["schema"] == B.SCHEMA and len(data["rows"]) == 10 and len(data["prompt_rows"]) == 20
    assert B.load_report(path)["meta"]["target"] == "tiny-target"
    (tmp_path / "bad.json").write_text('{"schema": "other"}')
    with pytest.raises(ValueError, match="not a specviz bench report"):
        B.load_report(tmp_path / "bad.json")


def test_csv(report, tmp_path):
    path = B.write_csv(report["rows"], tmp_path / "out.csv")
    rows = list(csv.DictReader(io.StringIO(path.read_text())))
    assert len(rows) == 10 and list(rows[0]) == B.CSV_COLUMNS
    assert rows[1]["proposer"] == "ngram" and rows[1]["impl"] == "specviz"
    assert len(rows[2]["per_position"].split(";")) == 2
    assert rows[0]["acceptance_rate"] == ""


def test_csv_columns_and_the_reports_definitions_read_the_metrics_table(report):
    """The CSV keeps the columns it always had (files written before still line up) and reads
    them, like the report's definitions, from METRICS."""
    assert B.CSV_COLUMNS == [
        "proposer", "k", "impl", "prompts", "new_tokens", "wall_s", "tokens_per_s", "ms_per_token", "speedup",
        "speedup_median", "speedup_vs_specviz", "acceptance_rate", "mean_acceptance_length", "per_position",
        "steps", "drafted", "accepted", "draft_ms", "verify_ms", "other_ms", "prefill_ms", "step_ms", "c", "v",
        "expected_tokens_per_step", "predicted_speedup", "same_as_target", "nodes_per_step", "tree",
        # the robust statistics (issue 51), after every column files written before had
        "speedup_low", "speedup_high", "verdict", "flagged_runs", "reruns",
    ]
    assert B.CSV_COLUMNS[3:] == [m.name for m in metrics.METRICS if m.csv]
    defs = report["meta"]["definitions"]
    for name in B.CSV_COLUMNS[3:]:
        assert defs[name] == metrics.metric(name).definition
    assert set(B.CSV_COLUMNS[3:]) <= set(report["rows"][0])  # every column is a summary row's key


def test_write_reports_takes_the_html_renderer_from_its_caller(report, tmp_path):
    out = tmp_path / "r.html"
    with pytest.raises(ValueError, match="html_renderer"):
        B.write_reports(report, html_path=str(out))
    lines = B.write_reports(report, html_path=str(out), html_renderer=lambda r: f"<p>{r['meta']['target']}</p>")
    assert lines == [f"HTML report written to {out}"] and out.read_text() == "<p>tiny-target</p>"


def test_format_table(report):
    text = B.format_table(report["rows"])
    lines = text.splitlines()
    assert len(lines) == 2 + 10
    assert lines[0].split()[:3] == ["proposer", "k", "impl"] and lines[0].split()[-2:] == ["predicted", "iid"]
    assert "target-only" in lines[2] and "1.00x" in lines[2]


# -- figures ------------------------------------------------------------------------------------


def test_every_figure_builder(report):
    figs = V.build_figures(report)
    assert list(figs) == list(V.FIGURES) == [
        "latency", "speedup", "acceptance_rate", "acceptance_length", "predicted", "per_position", "category",
        "tree_tau", "tree_speedup", "verify_cost"]
    names = lambda f: [t.name for t in f.data if t.meta not in ("prefill", "stall")]  # noqa: E731  (marks: bench_marks)
    # two proposers x two impls
    assert names(figs["latency"]) == ["ngram", "draft:tiny-near", "ngram (hf)", "draft:tiny-near (hf)"]
    assert len(figs["latency"].layout.shapes) == 2  # target-only reference lines (specviz, hf)
    assert names(figs["speedup"]) == names(figs["latency"])
    assert list(figs["speedup"].data[0].x) == [1, 2]
    assert names(figs["acceptance_rate"]) == ["ngram", "draft:tiny-near"]
    assert "ngram: theory E(a, k)" in names(figs["acceptance_length"])
    # build_figures adds the per-position prediction (prediction.augment_rows)
    assert names(figs["predicted"]) == ["ngram measured", "ngram predicted (per position)", "draft:tiny-near measured",
                                        "draft:tiny-near predicted (per position)"]
    assert names(figs["tree_tau"])[:2] == ["ngram", "draft:tiny-near"]  # chains over nodes/step, theory beside
    assert names(figs["tree_tau"])[-1].startswith("draft:tiny-near: chain theory E(a=")  # one line per proposer
    assert len(figs["per_position"].data) == 4  # proposer x k
    assert {t.type for t in figs["category"].data} == {"bar"}
    assert set(figs["category"].data[0].x) == {"writing", "coding"}
    for f in figs.values():
        f.to_json()  # valid and serialisable


def test_theory_trace_is_e_at_the_measured_a(report):
    fig = V.acceptance_length_figure(report["rows"])
    theory = next(t for t in fig.data if t.name == "ngram: theory E(a, k)")
    rows = {r["k"]: r for r in report["rows"] if r["proposer"] == "ngram" and r["impl"] == "specviz"}
    for k, y in zip(theory.x, theory.y):
        assert y == pytest.approx(metrics.expected_tokens_per_step(rows[k]["acceptance_rate"], k))


def test_predicted_trace_uses_a_c_v(report):
    fig = V.predicted_speedup_figure(report["rows"])
    pred = next(t for t in fig.data if t.name == "draft:tiny-near predicted")
    rows = {r["k"]: r for r in report["rows"] if r["proposer"] == "draft:tiny-near" and r["impl"] == "specviz"}
    for k, y in zip(pred.x, pred.y):
        r = rows[k]
        assert y == pytest.approx(metrics.expected_speedup(r["acceptance_rate"], k, r["c"], r["v"]))


def test_figures_of_nothing():
    for name, fig in V.build_figures(None).items():
        assert fig.data == () and "No results yet" in fig.layout.annotations[0].text, name
    only_base = [{"kind": "summary", "proposer": "target-only", "k": 0, "impl": "specviz", "ms_per_token": 10.0}]
    assert len(V.latency_figure(only_base).layout.shapes) == 1
    assert V.speedup_figure(only_base).data == ()


def test_table_rows(report):
    headers, body = V.table_rows(report["rows"])
    assert headers[:3] == ["proposer", "k", "impl"] and len(body) == 10
    assert body[0][0] == "target-only" and body[0][7] == "1.00"


def test_report_html(report):
    page = V.report_html(report)
    assert page.startswith("<!DOCTYPE html>") and "</html>" in page
    assert page.count('class="fig"') == len(V.FIGURES)
    assert page.count("plotly.js v") <= 2 and "Plotly.newPlot" in page  # the library is inlined once
    assert "Why (no) speedup?" in page and "Best:" in page
    assert page.count("<tr>") >= 10 + 1
    small = V.report_html(report, include_plotlyjs="cdn")
    assert len(small) < len(page) / 5


# fields added by the robust statistics (issue 51): a run's stall score and re-run, a summary's interval and verdict
ROBUST_FIELDS = {"stall_score", "rerun_from_s", "flagged", "speedup_low", "speedup_high", "verdict", "flagged_runs", "reruns"}


@pytest.mark.parametrize("name", ["bench-gemma-cpu.json", "bench-gemma-cpu-schedules.json"])
def test_reports_written_before_typed_rows_still_load_and_summarize_alike(name):
    from pathlib import Path

    data = B.load_report(Path(__file__).resolve().parents[1] / "benchmarks" / "results" / name)
    typed = [B.PromptResult.from_record(r) for r in data["prompt_rows"]]
    added = {"tree_steps", "nodes_per_step", "tree"}  # fields added since these reports were written (token trees)
    added |= ROBUST_FIELDS
    for new, old in zip((B.to_record(r) for r in typed), data["prompt_rows"]):
        assert {k: v for k, v in new.items() if k not in added} == old  # same keys, same values
        assert list(k for k in new if k not in added) == list(old)  # same order
    again = [B.to_record(r) for r in B.summarize(data["prompt_rows"])]
    assert [(r["proposer"], r["k"], r["impl"]) for r in again] == [(r["proposer"], r["k"], r["impl"]) for r in data["rows"]]
    for new, old in zip(again, data["rows"]):
        assert [k for k in new if k not in added] == list(old)
        for key in ("new_tokens", "tokens_per_s", "speedup", "acceptance_rate", "c", "predicted_speedup"):
            assert new[key] == pytest.approx(old[key]), key
    assert B.csv_text(typed[:0]) == B.csv_text([])


@pytest.mark.parametrize("name", ["remote-llama-gemma.json", "remote-llama-heldout.json"])
def test_remote_reports_written_before_load_as_typed_rows_and_summarize_alike(name):
    """Remote reports written when the rows were untyped dicts: the typed remote rows give the
    same records back, and the local lab's summarize gives the same summary rows."""
    from pathlib import Path

    data = B.load_report(Path(__file__).resolve().parents[1] / "benchmarks" / "results" / name)
    typed = [B.prompt_result(r) for r in data["prompt_rows"]]
    assert all(isinstance(r, B.RemotePromptResult) and r.draft_ms is None for r in typed)
    added = {"tree_steps", "nodes_per_step", "tree"}  # fields the local rows have that the remote ones lacked
    added |= ROBUST_FIELDS
    for new, old in zip((B.to_record(r) for r in typed), data["prompt_rows"]):
        assert {k: v for k, v in new.items() if k not in added} == old
    again = B.summarize(data["prompt_rows"])
    assert all(isinstance(r, B.RemoteSummaryRow) and r.c is None and r.v is None for r in again)
    again = [B.to_record(r) for r in again]
    assert [(r["proposer"], r["k"]) for r in again] == [(r["proposer"], r["k"]) for r in data["rows"]]
    for new, old in zip(again, data["rows"]):
        assert set(new) - set(old) <= added and set(old) <= set(new)
        for key, want in old.items():
            assert new[key] == (pytest.approx(want) if isinstance(want, (float, list)) else want), key
    cut = [c for c in B.CSV_COLUMNS if c not in added]
    old_csv, new_csv = (list(csv.DictReader(io.StringIO(B.csv_text(rows)))) for rows in (data["rows"], again))
    assert [{c: r[c] for c in cut} for r in new_csv] == [{c: r[c] for c in cut} for r in old_csv]  # the CSV of before


def test_the_warm_up_builds_every_width_the_timed_runs_use(tiny_target, monkeypatch, tmp_path):
    """After the warm-up no timed run builds a static step, at any verify width the sweep can use
    (a heuristic schedule's up to the engine's largest k) or the draft's two-token catch-up."""
    from specviz.core.bounds import ENGINE_MAX_K
    from specviz.runtime import plan as kernel_plan
    from specviz.runtime import projections, static_decode
    from tests.support.tiny import loaded, perturbed
    from tests.test_static_decode import _plan

    monkeypatch.setenv("SPECVIZ_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(projections, "MIN_BODY_ELEMENTS", 0)  # tiny projections planned
    monkeypatch.setattr(kernel_plan, "of", _plan("mixed"))  # F.linear at one row, oneDNN from two
    target = loaded(perturbed(tiny_target.model, 0.05, seed=21), tiny_target.tokenizer, "tiny-fresh-target")
    draft = loaded(perturbed(tiny_target.model, 0.1, seed=22), tiny_target.tokenizer, "tiny-fresh-draft")
    cfg = B.BenchConfig(ks=(2,), schedules=("constant", "heuristic"), max_new_tokens=10, warmup_tokens=1)
    sweep = B.Sweep(target, {"draft": DraftModel(draft)}, PROMPTS[:1], cfg)
    assert sweep.verify_widths() == range(1, ENGINE_MAX_K + 2)
    built_at = {}
    for event in sweep:
        if event.kind == "run" and not built_at:
            built_at["first run"] = static_decode.build_seconds()
    assert all(static_decode.static_cache(m.model).decoder.runner is not None for m in (target, draft))
    assert static_decode.build_seconds() == built_at["first run"] > 0


def test_a_schedule_that_changes_nothing_is_skipped_and_said(tiny_target, proposers):
    """confidence:T never stops an n-gram (its drafts carry no q): its rows would be constant k's
    again under another name, so the sweep leaves them out and says why."""
    cfg = B.BenchConfig(ks=(2, 4), schedules=("constant", "confidence:0.3"), max_new_tokens=4, warmup=False)
    sweep = B.Sweep(tiny_target, proposers, PROMPTS[:1], cfg)
    names = {(r.proposer, r.k) for r in sweep.runs}
    assert ("draft:tiny-near [confidence:0.3]", 4) in names and ("ngram", 4) in names
    assert not any(name.startswith("ngram [") for name, _ in names)
    assert len(sweep.schedule_skipped) == 1 and sweep.schedule_skipped[0].startswith("ngram [confidence:0.3]: ")
    assert "exactly as constant k" in sweep.report()["meta"]["schedule_skipped"][0]


def test_the_int8_kernel_is_named_only_by_a_sweep_that_runs_an_int8_model(tiny_target, monkeypatch):
    """meta.int8_kernel: the kernel an @int8 model chose in this process, in a sweep that runs
    one (by its spec); a sweep of float models leaves it out, whatever was loaded before."""
    from specviz.models import int8

    monkeypatch.setattr(int8, "_choices", {"kernel": "blocked", "why": "measured", "timings": None})
    cfg = B.BenchConfig(ks=(1,), max_new_tokens=4, warmup=False)
    assert B.run_sweep(tiny_target, {"ngram": NGram()}, ["the cat"], cfg)["meta"]["int8_kernel"] is None
    named = B.Sweep(tiny_target, {"draft:tiny@int8": NGram()}, ["the cat"], cfg)
    assert named._runs_int8() and named.report()["meta"]["int8_kernel"]["kernel"] == "blocked"


def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_one_set_of_a_merged_prompt_file_reads_as_the_file_it_was(tmp_path):
    """A set filtered out of a file of several gives the rows, order and category round robin its
    own file gave, so a command run on the old file gives the same prompts with --set."""
    from specviz.prompts import empty_reason, load_prompts, set_names

    mine = [{"id": f"a-{i}", "category": c, "prompt": f"prompt {i}"} for i, c in enumerate("xxyzx")]
    other = [{"id": f"b-{i}", "set": "b", "category": c, "prompt": f"other {i}"} for i, c in enumerate("yx")]
    alone = _write_jsonl(tmp_path / "a.jsonl", mine)
    merged = _write_jsonl(tmp_path / "kind.jsonl", other[:1] + [{**r, "set": "a"} for r in mine] + other[1:])
    for kw in ({}, {"limit": 3}, {"categories": ["x"]}, {"categories": ["x", "z"], "limit": 2}):
        old = [(r.prompt, r.category, r.id) for r in load_prompts(alone, **kw)]
        new = [(r.prompt, r.category, r.id) for r in load_prompts(merged, sets=["a"], **kw)]
        assert new == old and new, kw
    assert [r.id for r in load_prompts(alone)] == ["a-0", "a-2", "a-3", "a-1", "a-4"]  # categories in turn
    assert len(load_prompts(merged)) == 7 and set_names(merged) == ["b", "a"]
    assert {r.set_name for r in load_prompts(merged, sets=["a", "b"])} == {"a", "b"}
    assert "no prompt set c in" in empty_reason(merged, ["c"]) and "(sets: b, a)" in empty_reason(merged, ["c"])
    assert "categories available: x, y, z" in empty_reason(alone, None)


def test_bench_and_advise_take_a_set_and_name_the_sets_when_it_is_missing(tmp_path, capsys):
    from specviz import cli

    path = _write_jsonl(tmp_path / "kind.jsonl", [{"id": "q", "set": "one", "category": "code", "prompt": "x"}])
    for sub in ("bench", "advise"):
        rc = cli.main([sub, "--target", "none-needed", "--prompts", str(path), "--set", "two"])
        err = capsys.readouterr().err
        assert rc == 2 and "no prompt set two in" in err and "(sets: one)" in err, (sub, err)


PROMPT_DIR = Path(__file__).resolve().parents[1] / "benchmarks" / "prompts"


def test_the_bench_prompt_files_hold_named_sets_and_every_command_names_one_that_exists():
    """benchmarks/prompts/ holds a few files by kind, each line with an id and the set it came
    from; every `--prompts benchmarks/prompts/F.jsonl [... --set S]` in the README, the Makefile
    and docs/ names a file that exists and sets that file holds."""
    import re

    from specviz.prompts import read_jsonl

    sets_of, ids = {}, []
    for path in sorted(PROMPT_DIR.glob("*.jsonl")):
        rows = read_jsonl(path)
        assert rows and all(r.set_name and r.id and r.category for r in rows), path.name
        sets_of[path.name] = {r.set_name for r in rows}
        ids += [r.id for r in rows]
    assert len(ids) == len(set(ids)), "prompt ids repeat across benchmarks/prompts/"
    every = [s for names in sets_of.values() for s in names]
    assert len(every) == len(set(every)), "a set is split across files"
    assert len(sets_of) <= 6, "prompt sets by kind, not one file per run"
    root = PROMPT_DIR.parents[1]
    pages = [root / "README.md", root / "Makefile", *sorted((root / "docs").glob("*.md"))]
    command = re.compile(r"--prompts\s+benchmarks/prompts/([\w.-]+)((?:\s+\\?\s*--(?!prompts)[\w-]+(?:\s+[^\s-][^\s]*)?)*)")
    checked = 0
    for page in pages:
        for name, rest in command.findall(page.read_text(encoding="utf-8")):
            assert name in sets_of, f"{page.name}: benchmarks/prompts/{name} does not exist"
            for wanted in re.findall(r"--set\s+([\w.-]+)", rest):
                assert wanted in sets_of[name], f"{page.name}: {name} holds no set {wanted}"
                checked += 1
    assert checked >= 3
