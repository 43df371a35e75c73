"""The `specviz` command on tiny local models: generate, bench, models, serve and its errors."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from specviz import cli, tuning
from specviz.core.hooks import load_trace
from tests.support import make_char_tokenizer, make_llama, perturbed

PROMPT = "the cat sat on the mat. the cat sat on the"


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> tuple[str, str]:
    """A tiny target and a noisy copy (same tokenizer), saved as local checkpoints."""
    root = tmp_path_factory.mktemp("cli-models")
    tok = make_char_tokenizer()
    target = make_llama(len(tok), 64, 2, seed=0, sharpen=30.0)
    draft = perturbed(target, 0.1, seed=2)
    paths = []
    for name, model in (("target", target), ("draft", draft)):
        d = root / name
        model.save_pretrained(str(d))
        tok.save_pretrained(str(d))
        paths.append(str(d))
    return paths[0], paths[1]


def run(capsys, *argv) -> tuple[int, str, str]:
    rc = cli.main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def one_line_error(err: str) -> str:
    lines = [l for l in err.splitlines() if l.startswith("specviz: error:")]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


# -- generate -----------------------------------------------------------------------------------


def test_generate_plain_when_not_a_tty(capsys, models):
    target, draft = models
    rc, out, err = run(capsys, "generate", "--target", target, "--proposer", f"draft:{draft}", "--k", "3",
                       "--max-new-tokens", "12", "--prompt", PROMPT)
    assert rc == 0, err
    assert "\x1b[" not in out  # captured output is not a terminal
    assert "tokens 12 in" in out and "acceptance rate" in out and "tokens/s" in out
    assert "per-position acceptance:" in out


def test_generate_colours_tokens_and_strikes_rejected_drafts(capsys, models):
    target, _ = models
    rc, out, _ = run(capsys, "generate", "--target", target, "--proposer", "draft:" + models[1], "--k", "4",
                     "--max-new-tokens", "24", "--prompt", "abc xyz", "--color", "always", "--quiet")
    assert rc == 0
    data = json.loads(run(capsys, "generate", "--target", target, "--proposer", "draft:" + models[1], "--k", "4",
                          "--max-new-tokens", "24", "--prompt", "abc xyz", "--json", "--quiet")[1])
    kinds = {s["next_kind"] for s in data["steps"]}
    verdicts = {d["verdict"] for s in data["steps"] for d in s["drafts"]}
    if data["stats"]["accepted"]:
        assert cli.STYLES["accepted"] in out
    if "rejected" in verdicts:
        assert "\x1b[9m" in out  # ANSI strikethrough
    if "resampled" in kinds:
        assert cli.STYLES["resampled"] in out
    assert "legend:" in out


def test_render_steps_marks_every_kind():
    from specviz.core.records import DraftDecision, StepRecord

    def d(i, text, verdict):
        return DraftDecision(i, 10 + i, text, 1.0, 0.5, 0.5, None, verdict)

    def step(drafts, n, committed, kind):
        return StepRecord(0, len(drafts), tuple(drafts), n, 0, committed[-1], kind, 0.5, (), (), tuple(range(len(committed))),
                          tuple(committed), 0.0, 0.0, 0.0)

    steps = [
        step([d(0, "a", "accepted"), d(1, "X", "rejected"), d(2, "Y", "discarded")], 1, ["a", "b"], "resampled"),
        step([d(0, "c", "accepted")], 1, ["c", "d"], "bonus"),
        step([], 0, ["e"], "target"),
    ]
    plain = cli.render_steps(steps, color=False)
    assert plain == "abcde"
    coloured = cli.render_steps(steps, color=True)
    S, R = cli.STYLES, cli.RESET
    assert coloured == (f"{S['accepted']}a{R}{S['rejected']}X{R}{S['discarded']}Y{R}{S['resampled']}b{R}"
                        f"{S['accepted']}c{R}{S['bonus']}d{R}e")


def test_use_color(monkeypatch):
    tty = types.SimpleNamespace(isatty=lambda: True)
    pipe = types.SimpleNamespace(isatty=lambda: False)
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert cli.use_color(tty) and not cli.use_color(pipe)
    assert cli.use_color(pipe, "always") and not cli.use_color(tty, "never")
    monkeypatch.setenv("NO_COLOR", "1")
    assert not cli.use_color(tty)


def test_a_plain_run_shows_what_a_fully_recorded_one_does(capsys, models, tmp_path):
    """A plain run keeps lean records (greedy steps take the head's certified argmax) and renders
    each step as it ends: the same coloured text and stats as a run that records everything (--trace)."""
    target, draft = models
    argv = ["generate", "--target", target, "--proposer", f"draft:{draft}", "--k", "4", "--max-new-tokens", "24",
            "--prompt", "abc xyz", "--color", "always", "--quiet"]
    rc, lean, _ = run(capsys, *argv)
    rc2, full, _ = run(capsys, *argv, "--trace", str(tmp_path / "t.jsonl"))
    assert rc == rc2 == 0 and cli.STYLES["accepted"] in lean
    strip = lambda out: [line for line in out.splitlines() if not line.startswith("time ")]  # noqa: E731 - the clock differs
    assert strip(lean) == strip(full)


def test_generate_json_and_trace(capsys, models, tmp_path):
    target, _ = models
    trace = tmp_path / "run.jsonl"
    rc, out, _ = run(capsys, "generate", "--target", target, "--proposer", "ngram:2", "--k", "2", "--max-new-tokens", "10",
                     "--prompt", PROMPT, "--json", "--trace", str(trace), "--quiet")
    assert rc == 0
    data = json.loads(out)
    assert set(data) >= {"text", "token_ids", "stats", "steps", "finished"}
    assert data["proposer"] == "ngram:2" and data["k"] == 2
    assert data["stats"]["new_tokens"] == len(data["token_ids"]) == 10
    assert sum(len(s["committed"]) for s in data["steps"]) == 10
    t = load_trace(trace)
    assert len(t.steps) == len(data["steps"]) and t.text == data["text"]


def test_generate_target_only_matches_speculative_greedy(capsys, models):
    target, draft = models
    base = json.loads(run(capsys, "generate", "--target", target, "--proposer", "none", "--max-new-tokens", "16",
                          "--prompt", PROMPT, "--json", "--quiet")[1])
    assert base["proposer"] == "target-only" and all(s["k"] == 0 for s in base["steps"])
    spec = json.loads(run(capsys, "generate", "--target", target, "--proposer", f"draft:{draft}", "--k", "4",
                          "--max-new-tokens", "16", "--prompt", PROMPT, "--json", "--quiet")[1])
    assert spec["token_ids"] == base["token_ids"]


def test_generate_reads_stdin(capsys, models, monkeypatch):
    import io

    monkeypatch.setattr(sys, "stdin", io.StringIO(PROMPT))
    rc, out, _ = run(capsys, "generate", "--target", models[0], "--prompt", "-", "--max-new-tokens", "4", "--json", "--quiet")
    assert rc == 0 and json.loads(out)["prompt"] == PROMPT


@pytest.mark.parametrize("argv, words", [
    (["generate", "--proposer", "bogus", "--prompt", "x"], "unknown proposer"),
    (["generate", "--proposer", "ngram:zero", "--prompt", "x"], "ngram:N"),
    (["generate", "--k", "0", "--prompt", "x"], "--k"),
    (["generate", "--prompt", "   "], "prompt is empty"),
    (["generate", "--temperature", "-1", "--prompt", "x"], "temperature"),
    (["generate", "--top-p", "2", "--prompt", "x"], "top_p"),
    (["generate", "--prompt", "x", "--k", "99"], "k (tokens drafted per step)"),
    (["bench", "--k", "1,x"], "comma-separated"),
    (["bench", "--category", "no-such-category"], "no prompts selected"),
    (["bench", "--proposer", "what"], "unknown proposer"),
    (["bench", "--limit", "0"], "--limit"),
    (["bench", "--prompts", "/no/such/file.jsonl"], "No such file"),
    (["nonsense"], "invalid choice"),
    (["generate"], "--prompt"),
])
def test_errors_are_one_line_with_status_2(capsys, models, argv, words):
    argv = list(argv)
    if argv[0] in ("generate", "bench"):
        argv[1:1] = ["--target", models[0]]
    rc, _, err = run(capsys, *argv)
    assert rc == 2
    line = one_line_error(err)
    assert words in line, line


def test_unknown_model_is_one_line(capsys):
    rc, _, err = run(capsys, "generate", "--target", "definitely-not-a-model", "--prompt", "x")
    assert rc == 2 and "unknown model" in one_line_error(err)


def test_draft_with_another_tokenizer_is_one_line(capsys, models, tmp_path):
    from transformers import AutoTokenizer

    other = tmp_path / "other"
    tok = make_char_tokenizer()
    tok.add_tokens(["<extra>"])
    model = make_llama(len(tok), 32, 1, seed=3)
    model.save_pretrained(str(other))
    tok.save_pretrained(str(other))
    assert len(AutoTokenizer.from_pretrained(str(other))) == len(tok)
    rc, _, err = run(capsys, "generate", "--target", models[0], "--proposer", f"draft:{other}", "--prompt", "x")
    assert rc == 2 and "does not share" in one_line_error(err)


def test_console_script_never_prints_a_traceback(models):
    exe = Path(sys.executable).parent / "specviz"
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "specviz.cli"]
    ok = subprocess.run(cmd + ["--help"], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0 and "generate" in ok.stdout and "bench" in ok.stdout
    bad = subprocess.run(cmd + ["generate", "--target", models[0], "--proposer", "draft:", "--prompt", "x"],
                         capture_output=True, text=True, timeout=300, env={**os.environ, "SPECVIZ_DEBUG": ""})
    assert bad.returncode == 2
    assert "Traceback" not in bad.stderr and bad.stderr.strip().startswith("specviz: error:")


# -- bench --------------------------------------------------------------------------------------


def test_bench_writes_json_csv_html(capsys, models, tmp_path):
    target, draft = models
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(
        json.dumps({"prompt": PROMPT, "category": "story"}) + "\n"
        + json.dumps({"turns": ["abc abc abc abc", "second turn"], "category": "code", "question_id": 7}) + "\n"
        + json.dumps({"prompt": "never run", "category": "story"}) + "\n"
    )
    out_json, out_csv, out_html = tmp_path / "b.json", tmp_path / "b.csv", tmp_path / "b.html"
    rc, out, err = run(capsys, "bench", "--target", target, "--proposer", "ngram", "--proposer", f"draft:{draft}",
                       "--k", "1,2", "--prompts", str(prompts), "--limit", "2", "--max-new-tokens", "8",
                       "--json", str(out_json), "--csv", str(out_csv), "--html", str(out_html))
    assert rc == 0, err
    # the table, the overhead line and the readout
    assert "target-only" in out and "ngram" in out and "speedup" in out
    assert "overhead" in out and ("Best:" in out or "Only:" in out)
    assert "run" in err  # the tqdm progress bar went to stderr
    rep = json.loads(out_json.read_text())
    assert rep["schema"] == "specviz.bench/1"
    assert [(r["proposer"], r["k"]) for r in rep["rows"]] == [
        ("target-only", 0), ("ngram", 1), ("ngram", 2), (f"draft:{draft}", 1), (f"draft:{draft}", 2)]
    assert rep["meta"]["prompts"] == 2 and rep["meta"]["categories"] == ["code", "story"]
    assert {r["category"] for r in rep["prompt_rows"]} == {"story", "code"}
    assert len(rep["prompt_rows"]) == 10
    rows = list(csv.DictReader(out_csv.open()))
    assert len(rows) == 5 and rows[0]["proposer"] == "target-only"
    page = out_html.read_text()
    assert page.count('class="fig"') == 10 and "<table" in page


def test_bench_compare_hf_and_bundled_prompts(capsys, models, tmp_path):
    target, draft = models
    out_json = tmp_path / "hf.json"
    rc, out, err = run(capsys, "bench", "--target", target, "--proposer", f"draft:{draft}", "--proposer", "none",
                       "--k", "2", "--category", "coding", "--limit", "1", "--max-new-tokens", "6", "--compare-hf",
                       "--no-warmup", "--no-chat", "--json", str(out_json), "--quiet")
    assert rc == 0, err
    assert err == ""  # --quiet: no bar, no messages
    rep = json.loads(out_json.read_text())
    assert [(r["proposer"], r["k"], r["impl"]) for r in rep["rows"]] == [
        ("target-only", 0, "specviz"), (f"draft:{draft}", 2, "specviz"), ("target-only", 0, "hf"), (f"draft:{draft}", 2, "hf")]
    assert rep["meta"]["categories"] == ["coding"] and rep["meta"]["warmup_s"] == 0 and not rep["meta"]["chat"]
    assert rep["prompt_rows"][0]["prompt_id"]  # a Spec-Bench question id
    hf = [r for r in rep["rows"] if r["impl"] == "hf"]
    assert all(r["speedup_vs_specviz"] is not None for r in hf)


# -- models and serve ---------------------------------------------------------------------------


def test_models_lists_the_builtins(capsys):
    rc, out, _ = run(capsys, "models")
    assert rc == 0 and "gemma-3-270m" in out and "smollm2-135m" in out
    rc, out, _ = run(capsys, "models", "--json")
    names = [m["name"] for m in json.loads(out)]
    assert names == ["gemma-3-270m", "smollm2-135m"]


def test_serve_builds_and_launches_the_app(capsys, monkeypatch):
    import specviz

    calls = {}
    fake = types.ModuleType("specviz.ui")
    fake.build_demo = lambda: "DEMO"
    fake.launch = lambda demo, **kw: calls.update(demo=demo, **kw)
    monkeypatch.setitem(sys.modules, "specviz.ui", fake)
    monkeypatch.setattr(specviz, "ui", fake, raising=False)
    rc, _, _ = run(capsys, "serve", "--host", "0.0.0.0", "--port", "7999")
    assert rc == 0 and calls == {"demo": "DEMO", "server_name": "0.0.0.0", "server_port": 7999}


def test_serve_without_the_app_is_one_line(capsys, monkeypatch):
    import specviz

    fake = types.ModuleType("specviz.ui")
    monkeypatch.setitem(sys.modules, "specviz.ui", fake)
    monkeypatch.setattr(specviz, "ui", fake, raising=False)
    rc, _, err = run(capsys, "serve")
    assert rc == 2 and "app is not available" in one_line_error(err)


def test_bench_interrupted_keeps_the_runs_it_measured(capsys, models, tmp_path, monkeypatch):
    from specviz import bench as B

    target, _ = models
    events = B.Sweep.events

    def interrupted(self, should_stop=None):  # Ctrl-C after two timed runs
        for ev in events(self, should_stop):
            yield ev
            if ev.kind == "run" and ev.done == 2:
                raise KeyboardInterrupt

    monkeypatch.setattr(B.Sweep, "events", interrupted)
    out_json = tmp_path / "partial.json"
    rc, out, err = run(capsys, "bench", "--target", target, "--proposer", "ngram", "--k", "1,2",
                       "--max-new-tokens", "4", "--limit", "2", "--json", str(out_json))
    assert rc == 0, err
    assert "interrupted after 2 of 6 runs" in err
    rep = json.loads(out_json.read_text())
    assert rep["meta"]["stopped"] and rep["meta"]["runs_done"] == 2 and len(rep["prompt_rows"]) == 2


# -- tune -------------------------------------------------------------------------------------------


def test_tune_measures_once_and_writes_the_plan_that_loading_reads(capsys, models, tmp_path, monkeypatch):
    import torch

    from specviz.models import cache_dir
    from specviz.models.cache import clear_model_cache
    from specviz.runtime import cpu, state
    from specviz.runtime import plan as kernel_plan

    monkeypatch.setenv("SPECVIZ_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cpu, "MIN_HEAD_ELEMENTS", 0)  # the tiny head counted as a large one
    calls = []
    monkeypatch.setattr(tuning, "time_kernels", lambda ws, rows, repeats: calls.append(rows) or {"F.linear": 1.0})
    clear_model_cache()
    rc, out, _ = run(capsys, "tune", "--target", models[0], "--quiet")
    assert rc == 0 and "measured, written to" in out and calls == list(kernel_plan.WIDTHS), out
    path = kernel_plan.path_of(kernel_plan.key_of(models[0], torch.float32), cache_dir())
    assert path.exists() and json.loads(path.read_text())["kinds"]["head"]["kernels"]["1"] == "F.linear"
    rc, out, _ = run(capsys, "tune", "--target", models[0], "--quiet")  # measured once
    assert rc == 0 and "already" in out and len(calls) == len(kernel_plan.WIDTHS)
    clear_model_cache()
    from specviz.models import load_model

    assert state.of(load_model(models[0]).model).plan.path == path  # loading reads it
    import specviz.models as M

    given, real_load = [], M.load_model
    monkeypatch.setattr(M, "load_model", lambda *a, **kw: given.append(kw.get("options")) or real_load(*a, **kw))
    rc, out, _ = run(capsys, "tune", "--target", models[0], "--again", "--quiet")
    assert rc == 0 and "measured" in out and len(calls) == 2 * len(kernel_plan.WIDTHS)
    assert given and given[0] is not None and given[0].cache_dir == str(tmp_path)  # the command's options, passed down
    clear_model_cache()
