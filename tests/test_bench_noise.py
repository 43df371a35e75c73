"""A bench that a stalled machine cannot fool (issue 51): the median of per-prompt speedups with its
interval, stalled runs found, re-run once and named, verdicts from the median; progress lines in a
log; prompts that end at once reported; the skipped sentence true for each proposer kind.

Stalls are injected: a stand-in clock (every run timed in virtual seconds from its steps, so the
verdicts are exact) with seconds added inside one run, and a real sleep inside one run's draft."""

from __future__ import annotations

import json
import time

import pytest

from specviz import bench as B
from specviz.analysis.noise import median_interval, stall_scores
from specviz.bench import stalls
from specviz.bench import sweep as sweep_module
from specviz.bench.verdicts import noise_lines
from specviz.core.engine import Session, encode_prompt
from specviz.prompts import PromptRow
from specviz.proposers import NGram
from tests.support.tiny import loaded, make_char_tokenizer, make_llama

PROMPTS = [
    PromptRow("the cat sat on the mat. the cat sat on the", "writing", "1"),
    PromptRow("abc abc abc abc abc abc", "coding", "2"),
    PromptRow("the sun and the moon and the", "math", "3"),
    PromptRow("to be or not to be, to be or", "writing", "4"),
    PromptRow("blue sky, blue sea, blue", "coding", "5"),
    PromptRow("red green red green red green", "math", "6"),
]


# -- the statistics, on numbers -------------------------------------------------------------------


def test_the_median_interval_is_seeded_and_holds_its_median():
    one = median_interval([[1.4]])
    assert (one.median, one.low, one.high, one.verdict) == (1.4, 1.4, 1.4, "faster")
    groups = [[1.3, 1.25], [1.4], [1.35, 1.5], [0.4], [1.2], [1.45]]  # one prompt stalled to 0.4x
    band = median_interval(groups)
    assert band == median_interval(groups) and band.n == 8 and band.groups == 6
    assert band.median == pytest.approx(1.325) and band.low <= band.median <= band.high
    assert band.verdict == "faster"  # one stalled ratio moves a median by a rank, not across 1.0x
    assert median_interval([[0.8], [1.3], [0.9], [1.2]]).verdict == "within noise"
    assert median_interval([[0.7], [0.8], [0.75]]).verdict == "slower"
    with pytest.raises(ValueError, match="no ratios"):
        median_interval([[], []])


def test_a_stall_scores_high_and_its_neighbours_do_not():
    # three configurations on six prompts, later prompts longer (slower alike); one run stalled 10x
    table = {(p, c): cost * (1 + 0.2 * p) for p in range(6) for c, cost in (("base", 1.0), ("a", 0.7), ("b", 1.3))}
    table[(2, "a")] *= 10
    scores = stall_scores(table)
    assert scores[(2, "a")] > 5
    assert max(s for key, s in scores.items() if key != (2, "a")) < 1.5  # a long prompt is not a stall
    # two prompts, two configurations: the stall is named, not the run that merely looks fast beside it
    two = stall_scores({(0, "a"): 1.0, (1, "a"): 20.0, (0, "b"): 1.0, (1, "b"): 1.1})
    assert two[(1, "a")] > 10 and two[(0, "b")] < 1.5


# -- a sweep on a stand-in clock ------------------------------------------------------------------


class VirtualClock:
    """Seconds that pass only when the engine steps: 10 ms a target pass, 2 ms a drafted token."""

    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def virtual(monkeypatch):
    clock = VirtualClock()
    step = Session.step

    def timed_step(self):
        record = step(self)
        clock.t += 0.010 + 0.002 * record.k
        return record

    monkeypatch.setattr(Session, "step", timed_step)
    return clock


def _stall(monkeypatch, where: dict[tuple[str, int, int], float]):
    """Add seconds inside the first run of (proposer, k, prompt number): between its clock's start
    and end readings, as a machine busy elsewhere would."""
    run, seen = sweep_module._run_specviz, set()

    def stalled_run(decoder, ids, max_new_tokens, seed, clock):
        name = decoder.proposer.name if decoder.proposer is not None else B.TARGET_ONLY
        key = (name, decoder.k if decoder.proposer is not None else 0, _prompt_number(ids))
        if key in where and key not in seen:
            seen.add(key)
            extra = iter([0.0, where[key]])
            return run(decoder, ids, max_new_tokens, seed, lambda: clock() + next(extra))
        return run(decoder, ids, max_new_tokens, seed, clock)

    monkeypatch.setattr(sweep_module, "_run_specviz", stalled_run)


_IDS: dict[tuple[int, ...], int] = {}


def _prompt_number(ids) -> int:
    return _IDS.get(tuple(ids), -1)


def _sweep(target, clock, **cfg) -> B.Sweep:
    for i, p in enumerate(PROMPTS, 1):
        _IDS[tuple(encode_prompt(target.tokenizer, p.prompt, chat=False))] = i
    config = B.BenchConfig(ks=(1, 2, 4), max_new_tokens=16, warmup=False, chat=False, **cfg)
    s = B.Sweep(target, {"ngram": NGram()}, PROMPTS, config, clock=clock)
    s.events_seen = list(s)
    return s


def _verdicts(report) -> dict[tuple[str, int], tuple[str, float]]:
    return {(r["proposer"], r["k"]): (r["verdict"], round(r["speedup_median"], 6)) for r in report["rows"] if r["k"]}


def test_stalls_cannot_flip_a_verdict_and_are_named_and_rerun(tiny_target, virtual, monkeypatch):
    clean = _sweep(tiny_target, virtual).report()
    assert not clean["meta"]["reruns"] and clean["meta"]["flagged_runs"] == 0
    assert {v for v, _ in _verdicts(clean).values()} & {"faster", "slower"}  # the stand-in clock gives clear verdicts
    # 12 s stalls in runs of ~0.2 s: one on a speculative run, one on a prompt's target-only run
    _stall(monkeypatch, {("ngram", 2, 3): 12.0, (B.TARGET_ONLY, 0, 5): 12.0})
    s = _sweep(tiny_target, virtual)
    rep = s.report()
    assert [e.kind for e in s.events_seen].count("rerun") == 2 and s.events_seen[-1].kind == "done"
    named = {(r["proposer"], r["k"], r["prompt_index"]): r for r in rep["meta"]["reruns"]}
    assert set(named) == {("ngram", 2, 2), (B.TARGET_ONLY, 0, 4)}
    for rec in named.values():
        assert rec["before_s"] > 12 and rec["after_s"] < 1 and rec["score_before"] > 10 and not rec["flagged"]
    assert _verdicts(rep) == _verdicts(clean)  # re-run once, the stall is gone from every number
    rows = {(r["proposer"], r["k"]): r for r in rep["rows"]}
    assert rows[("ngram", 2)]["reruns"] == 1 and rows[("ngram", 2)]["speedup"] == pytest.approx(clean["rows"][2]["speedup"])
    text = "\n".join(noise_lines(rep))
    assert "re-run: ngram k=2 on prompt 3 (math 3): 12." in text and "target-only on prompt 5 (coding 5)" in text


def test_without_a_rerun_the_stalled_runs_are_left_out_and_the_verdict_holds(tiny_target, virtual, monkeypatch):
    clean = _verdicts(_sweep(tiny_target, virtual).report())
    _stall(monkeypatch, {("ngram", 2, 3): 12.0, ("ngram", 4, 1): 12.0, ("ngram", 4, 4): 12.0})
    s = _sweep(tiny_target, virtual, rerun_stalls=False)
    rep = s.report()
    assert "rerun" not in [e.kind for e in s.events_seen]
    assert rep["meta"]["flagged_runs"] == 3 and all(r["flagged"] and r["after_s"] is None for r in rep["meta"]["reruns"])
    assert all(stalls.rerun_sentence(r).endswith("not re-run (re-runs are off): left out of the summary.")
               for r in rep["meta"]["reruns"])
    flagged = [(r["proposer"], r["k"], r["prompt_index"]) for r in rep["prompt_rows"] if r["flagged"]]
    assert sorted(flagged) == [("ngram", 2, 2), ("ngram", 4, 0), ("ngram", 4, 3)]
    for key, (verdict, _) in _verdicts(rep).items():
        assert verdict == clean[key][0] or "within noise" in (verdict, clean[key][0]), key  # never faster <-> slower
    # the totals those stalls would have printed: every stalled configuration reads as a slowdown
    with_stalls = B.summarize([{**r, "flagged": False} for r in rep["prompt_rows"]])
    for r in with_stalls:
        if (r.proposer, r.k) in {("ngram", 2), ("ngram", 4)}:
            assert r.speedup < 0.5 and clean[(r.proposer, r.k)][1] > 1.0
    # the readout explains a configuration from its unflagged runs only: c as in the clean sweep
    rows = {(r["proposer"], r["k"]): r for r in rep["rows"]}
    assert rows[("ngram", 4)]["flagged_runs"] == 2 and rows[("ngram", 4)]["c"] < 1.0
    why = B.format_table(rep["rows"])
    assert "0/2" in why and "0/1" in why  # re-run / left out per configuration


def test_a_real_sleep_in_one_run_is_flagged_rerun_and_said_in_a_log(tiny_target, monkeypatch, capsys):
    """A sleep inside one run's drafting (real time): the CLI's console, without a terminal, says
    a line per prompt and the re-run, and its report names the run."""
    from specviz.bench.console import report_text, run_with_progress

    run, calls = sweep_module._run_specviz, []

    def sleepy(decoder, ids, max_new_tokens, seed, clock):
        calls.append(decoder.k)
        if decoder.proposer is not None and decoder.k == 1 and len([c for c in calls if c == 1]) == 2:
            propose = decoder.proposer.propose

            def slow(*a, **kw):
                decoder.proposer.__dict__.pop("propose", None)
                time.sleep(0.6)
                return propose(*a, **kw)

            decoder.proposer.propose = slow  # sleeps once, inside the timed run
        return run(decoder, ids, max_new_tokens, seed, clock)

    monkeypatch.setattr(sweep_module, "_run_specviz", sleepy)
    config = B.BenchConfig(ks=(1, 2), max_new_tokens=12, warmup=False, chat=False)
    sweep = B.Sweep(tiny_target, {"ngram": NGram()}, PROMPTS[:4], config)
    said = []
    run_with_progress(sweep, said.append)
    rep = sweep.report()
    assert [line for line in said if line.startswith("prompt ")][0].startswith("prompt 1/4 (writing 1) done: 3 runs in ")
    assert len([line for line in said if line.startswith("prompt ")]) == 4
    rerun = next(r for r in rep["meta"]["reruns"] if r["label"].startswith("ngram k=1 on prompt 2"))
    assert rerun["before_s"] > 0.6 > rerun["after_s"]
    assert any(line.startswith("re-ran ngram k=1 on prompt 2 (coding 2)") for line in said)
    text = report_text(rep, rep["rows"], tiny_target)
    assert "Reading these numbers:" in text and "- re-run: ngram k=1 on prompt 2 (coding 2)" in text
    assert capsys.readouterr().err == ""  # no bar drawn without a terminal: the lines are what a log gets


# -- prompts that end at once, and the skipped sentence --------------------------------------------


def test_a_prompt_that_ends_at_once_is_reported_with_the_chat_template_on_a_base_model():
    import torch

    tok = make_char_tokenizer()
    tok.chat_template = "{% for m in messages %}{{ m['content'] }} {% endfor %}"
    model = make_llama(len(tok), 32, 1, seed=6, sharpen=30.0)
    target = loaded(model, tok, "tiny-base")
    with torch.no_grad():
        first = {p.prompt: int(model(torch.tensor([encode_prompt(tok, p.prompt, chat=True)])).logits[0, -1].argmax())
                 for p in PROMPTS}
    other = next(p for p in first if first[p] != first[PROMPTS[0].prompt])
    prompts = [PROMPTS[0].prompt, other]
    model.generation_config.eos_token_id = first[prompts[0]]  # the first prompt's first token ends its answer
    config = B.BenchConfig(ks=(1,), max_new_tokens=8, warmup=False, chat=True)
    rep = B.run_sweep(target, {"ngram": NGram()}, prompts, config)
    m = rep["meta"]
    assert "looks like a base model" in m["chat_note"] and "--no-chat" in m["chat_note"]
    assert [r["prompt_index"] for r in m["ended_at_once"]] == [0]
    rec = m["ended_at_once"][0]
    assert rec["new_tokens"] == 1 and "ended its answer after 1 token" in rec["reason"] and "chat template" in rec["reason"]
    lines = noise_lines(rep)
    assert any(line.startswith("prompt 1 (custom 1) ended at once: ") for line in lines)
    assert any(line.startswith("chat template: ") for line in lines)
    from specviz.viz.bench_readout import why_markdown

    assert "Ended at once" not in why_markdown(rep) and "- Prompt 1 (custom 1) ended at once" in why_markdown(rep)
    plain = B.run_sweep(loaded(model, make_char_tokenizer(), "tiny-base"), {}, prompts[1:2], config)["meta"]
    assert plain["ended_at_once"] == [] and "no chat template" in plain["chat_note"]


def test_the_skipped_sentence_is_true_for_each_proposer_kind(tiny_target, near_draft):
    from specviz.core.schedules import changes_nothing, make_schedule
    from specviz.proposers import from_spec

    conf = make_schedule("confidence:0.5")

    def why(spec):
        return changes_nothing(conf, from_spec(spec, tiny_target, load=lambda *a, **k: near_draft))

    ngram, ngram_tree, draft_tree = why("ngram"), why("ngram-tree"), why("draft-tree:tiny-near")
    assert "n-gram drafts carry no probabilities" in ngram and "token tree" not in ngram
    assert "token tree is grown to its node budget" in draft_tree and "n-gram" not in draft_tree
    assert "n-gram drafts carry no probabilities" in ngram_tree and "token tree is grown" in ngram_tree
    assert why("draft:tiny-near") is None and why("ngram+draft:tiny-near") is None  # a draft model's chain stops on q


def test_the_benchmark_tab_shows_the_interval_and_the_stalled_runs():
    from specviz.viz import bench as V

    rows = [
        {"proposer": "target-only", "k": 0, "impl": "specviz", "speedup": 1.0, "speedup_median": 1.0},
        {"proposer": "ngram", "k": 2, "impl": "specviz", "speedup": 0.58, "speedup_median": 1.35, "speedup_low": 1.2,
         "speedup_high": 1.5, "verdict": "faster", "reruns": 1, "flagged_runs": 1},
    ]
    headers, body = V.table_rows(rows)
    cell = dict(zip(headers, body[1]))
    assert cell["90% interval"] == "1.20–1.50" and cell["verdict"] == "faster" and cell["stalled runs"] == "1 re-run 1 left out"
    assert dict(zip(headers, body[0]))["90% interval"] == ""
    assert all(tip for h, tip in zip(headers, V.table_help()) if h in ("90% interval", "verdict", "stalled runs"))
    fig = V.speedup_figure(rows)
    trace = fig.data[0]
    assert list(trace.y) == [1.35] and list(trace.error_y.array) == [pytest.approx(0.15)]
    assert "total (tokens / seconds): 0.58" in trace.hovertext[0] and "1 re-run, 1 left out" in trace.hovertext[0]
    md = V.why_markdown({"rows": rows, "prompt_rows": [], "meta": {"reruns": [], "repeats": 1}})
    assert "the total says 0.58x, the median over prompts 1.35x" in md


def test_a_report_written_by_the_cli_names_its_reruns(tmp_path, tiny_target, virtual, monkeypatch):
    _stall(monkeypatch, {("ngram", 1, 2): 9.0})
    s = _sweep(tiny_target, virtual)
    path = tmp_path / "r.json"
    B.write_json(s.report(), path)
    back = B.load_report(path)
    assert [r["label"] for r in back["meta"]["reruns"]] == ["ngram k=1 on prompt 2 (coding 2)"]
    assert json.loads(path.read_text())["rows"][1]["reruns"] == 1
    assert stalls.rerun_sentence(back["meta"]["reruns"][0]).endswith("(kept).")


def test_specviz_bench_in_a_log_says_a_line_a_prompt_and_prints_the_median_beside_the_total(capsys, tmp_path):
    from specviz import cli

    tok = make_char_tokenizer()
    target = tmp_path / "target"
    make_llama(len(tok), 64, 2, seed=0, sharpen=30.0).save_pretrained(str(target))
    tok.save_pretrained(str(target))
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": p.prompt, "category": p.category, "id": p.id}) + "\n" for p in PROMPTS[:3]))
    rc = cli.main(["bench", "--target", str(target), "--proposer", "ngram", "--k", "1,2", "--prompts", str(prompts),
                   "--max-new-tokens", "6", "--no-warmup", "--no-chat"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    lines = [line for line in err.splitlines() if line.startswith("specviz: prompt ")]
    assert len(lines) == 3 and lines[0].startswith("specviz: prompt 1/3 (writing 1) done: 3 runs in ")
    assert "target-only" in lines[0] and "tok/s" in lines[0] and "3/9 runs" in lines[0]
    head = out.splitlines()[0].split()
    assert head[head.index("speedup") + 1: head.index("speedup") + 4] == ["median", "90%", "band"]
    assert "verdicts come from the median" in out


def test_the_tab_says_the_reruns_and_reads_the_same_numbers(tiny_target, virtual, monkeypatch):
    """The Benchmark tab renders a report through the same rows, readout and table: the re-run is
    named under the readout and counted in the done message, the interval is in the table."""
    from specviz.ui.bench_tab import _done_message
    from specviz.ui.bench_view import BenchState, render

    _stall(monkeypatch, {("ngram", 4, 6): 8.0})
    rep = _sweep(tiny_target, virtual).report()
    frame = render(BenchState(), rep, _done_message(rep))
    assert "1 run a stalled machine slowed was re-run (named under the readout)." in frame["progress"]
    assert "**Reading these numbers**" in frame["why"] and "- Re-run: ngram k=4 on prompt 6 (math 6): 8." in frame["why"]
    table = frame["table"]
    at = table["headers"].index("90% interval")
    ngram4 = next(row for row in table["data"] if row[0] == "ngram" and row[1] == 4)
    assert ngram4[at] and ngram4[table["headers"].index("stalled runs")] == "1 re-run"


def test_a_stopped_sweep_flags_its_stalled_runs_without_rerunning_them(tiny_target, virtual, monkeypatch):
    _stall(monkeypatch, {("ngram", 1, 2): 9.0})
    config = B.BenchConfig(ks=(1, 2), max_new_tokens=16, warmup=False, chat=False)
    for i, p in enumerate(PROMPTS, 1):
        _IDS[tuple(encode_prompt(tiny_target.tokenizer, p.prompt, chat=False))] = i
    seen = []
    rep = B.run_sweep(tiny_target, {"ngram": NGram()}, PROMPTS, config, on_event=seen.append,
                      should_stop=lambda: sum(e.kind == "run" for e in seen) >= 12, clock=virtual)  # 4 of 6 prompts
    assert rep["meta"]["stopped"] and "rerun" not in [e.kind for e in seen]
    (rec,) = rep["meta"]["reruns"]
    assert rec["label"] == "ngram k=1 on prompt 2 (coding 2)" and rec["after_s"] is None and rec["flagged"]
    assert "not re-run (the sweep was stopped)" in stalls.rerun_sentence(rec)
    row = next(r for r in rep["rows"] if (r["proposer"], r["k"]) == ("ngram", 1))
    assert row["flagged_runs"] == 1 and row["prompts"] == 3  # left out of every number
