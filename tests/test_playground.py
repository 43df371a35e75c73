"""The playground's handlers (specviz.ui.playground: on_step, on_play, on_baseline, on_reset) driven
without a browser, on tiny local checkpoints (the models_dir fixture in conftest.py).

Each bad input must give an error message in the page, let no exception escape, leave the
session as it was, and the next normal Step must work (README: the bad-input table).
"""

from __future__ import annotations

import pytest

from specviz import models as M
from tests.support import TINY_PROMPT, make_char_tokenizer, make_llama


def _raw(m, **change):
    args = dict(target=m["target"], proposer="draft", draft=m["draft"], k=4, temperature=1.0, top_p=1.0, top_k=0,
                seed=0, max_new_tokens=12, prompt=TINY_PROMPT, chat=True, schedule="constant", layers=1)
    args.update(change)
    return tuple(args.values())


# -- the table of bad inputs (README: "Safe to host") ------------------------------------------

NAN = float("nan")

# (case id, changes to the good settings, extra environment, text the message must contain)
BAD_INPUTS = [
    ("unknown hub model", dict(target="no-such-owner/no-such-model-xyz"), {}, "no-such-owner/no-such-model-xyz"),
    ("unknown model name", dict(target="not a model!"), {}, "unknown model"),
    ("local path, not allowed", {}, {"SPECVIZ_ALLOW_LOCAL_PATHS": "0"}, "local paths are disabled"),
    ("relative path ..", dict(target="../../etc/passwd"), {"SPECVIZ_ALLOW_LOCAL_PATHS": "0"}, "local paths are disabled"),
    ("home path ~", dict(target="~/models/x"), {"SPECVIZ_ALLOW_LOCAL_PATHS": "0"}, "local paths are disabled"),
    ("hub id with ..", dict(target="owner/../x"), {"SPECVIZ_ALLOW_LOCAL_PATHS": "0"}, "local paths are disabled"),
    ("mismatched tokenizers", dict(draft="@bpe"), {}, "does not share the target"),
    ("vocabularies of different sizes", dict(draft="@small"), {}, "17 vs 37 tokens"),
    ("empty prompt", dict(prompt="   "), {}, "prompt is empty"),
    ("100,000-character prompt", dict(prompt="the cat sat. " * 7693), {}, "prompt is too long"),
    ("prompt over the token limit", dict(prompt=TINY_PROMPT + " the end"), {"SPECVIZ_MAX_PROMPT_TOKENS": "20"},
     "SPECVIZ_MAX_PROMPT_TOKENS"),
    ("k = 0", dict(k=0), {}, "from 1 to 16"),
    ("k = 100", dict(k=100), {}, "from 1 to 16"),
    ("k over SPECVIZ_MAX_K", dict(k=8), {"SPECVIZ_MAX_K": "6"}, "SPECVIZ_MAX_K"),
    ("temperature -1", dict(temperature=-1), {}, "temperature must be from 0"),
    ("temperature NaN", dict(temperature=NAN), {}, "temperature must be a finite number"),
    ("top-p 0", dict(top_p=0), {}, "top-p must be in (0, 1]"),
    ("top-p 1.5", dict(top_p=1.5), {}, "top-p must be in (0, 1]"),
    ("max new tokens 1,000,000", dict(max_new_tokens=1_000_000), {}, "max new tokens must be from 1 to"),
    ("max new tokens over SPECVIZ_MAX_NEW_TOKENS", dict(max_new_tokens=600), {}, "SPECVIZ_MAX_NEW_TOKENS"),
]


@pytest.fixture(scope="module")
def running(models_dir):
    """A playground session with one step done (the state every bad input must leave alone)."""
    import os

    from specviz.ui import playground as pg
    from specviz.ui.state import PlaygroundState

    saved = os.environ.get("SPECVIZ_ALLOW_LOCAL_PATHS")
    os.environ["SPECVIZ_ALLOW_LOCAL_PATHS"] = "1"
    st = PlaygroundState()
    list(pg.on_step(st, *_raw(models_dir)))
    assert len(st.steps) == 1, st.message
    yield st
    st.close()
    if saved is None:
        os.environ.pop("SPECVIZ_ALLOW_LOCAL_PATHS", None)
    else:
        os.environ["SPECVIZ_ALLOW_LOCAL_PATHS"] = saved


@pytest.mark.parametrize("case,change,env,text", BAD_INPUTS, ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_is_a_message_and_the_session_survives(running, models_dir, allow_local, monkeypatch, case, change,
                                                         env, text):
    from specviz.ui import playground as pg

    st = running
    change = {k: (models_dir[v[1:]] if isinstance(v, str) and v.startswith("@") else v) for k, v in change.items()}
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    before = (len(st.steps), st.settings, st.session)
    handlers = (pg.on_step, pg.on_play) if "draft" in change else (pg.on_step, pg.on_play, pg.on_baseline)
    for handler in handlers:  # (the target-only baseline does not load the draft)
        frames = list(handler(st, *_raw(models_dir, **change)))  # nothing escapes
        assert st.message[1] == "error" and text in st.message[0], (handler.__name__, st.message)
        assert "sv-msg-error" in frames[-1]["status"] and "Traceback" not in frames[-1]["status"]
        assert (len(st.steps), st.settings, st.session) == before
    for var in env:
        monkeypatch.delenv(var)
    monkeypatch.setenv("SPECVIZ_ALLOW_LOCAL_PATHS", "1")
    list(pg.on_step(st, *_raw(models_dir)))  # the same run goes on
    assert st.message[1] != "error", st.message
    assert len(st.steps) == before[0] + 1 or st.session.done


def test_reset_mid_run_stops_play_quietly(models_dir, allow_local):
    from specviz.ui import playground as pg
    from specviz.ui.state import PlaygroundState

    st = PlaygroundState()
    gen = pg.on_play(st, *_raw(models_dir, max_new_tokens=40))
    next(gen)  # "Loading…"
    while not st.steps:
        next(gen)
    pg.on_reset(st)
    rest = list(gen)  # the old Play ends without touching the fresh state
    assert rest == [] or st.steps == []
    assert st.steps == [] and st.session is None and st.message[1] == "info"
    list(pg.on_step(st, *_raw(models_dir)))
    assert len(st.steps) == 1 and st.message[1] != "error"
    st.close()


def test_an_exception_inside_a_step_is_reported_and_the_next_step_works(models_dir, allow_local, monkeypatch):
    from specviz.core.engine import Session
    from specviz.ui import playground as pg
    from specviz.ui.state import PlaygroundState

    st = PlaygroundState()
    list(pg.on_step(st, *_raw(models_dir)))
    real, calls = Session.step, []

    def flaky(self):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("boom inside the engine")
        return real(self)

    monkeypatch.setattr(Session, "step", flaky)
    frames = list(pg.on_step(st, *_raw(models_dir)))
    assert st.message[1] == "error" and "boom inside the engine" in st.message[0] and "Reset" in st.message[0]
    assert "Traceback" not in frames[-1]["status"] and len(st.steps) == 1
    list(pg.on_step(st, *_raw(models_dir)))
    assert st.message[1] != "error" and len(st.steps) == 2
    st.close()


def test_different_output_sizes_with_the_same_tokenizer_run(models_dir, allow_local, tmp_path):
    """A draft whose LM head is padded (more logits than tokens) is fine: it shares the tokenizer."""
    from specviz.ui import playground as pg
    from specviz.ui.state import PlaygroundState

    tok = make_char_tokenizer()
    make_llama(len(tok) + 11, 32, 2, seed=6, sharpen=30.0).save_pretrained(str(tmp_path / "padded"))
    tok.save_pretrained(str(tmp_path / "padded"))
    st = PlaygroundState()
    list(pg.on_play(st, *_raw(models_dir, draft=str(tmp_path / "padded"), max_new_tokens=8)))
    assert st.message[1] == "ok" and st.session.done, st.message
    st.close()


def test_a_live_run_pins_its_models_until_reset(models_dir, allow_local):
    from specviz.ui import playground as pg
    from specviz.ui.state import PlaygroundState

    st = PlaygroundState()
    list(pg.on_step(st, *_raw(models_dir)))
    target, draft = st.session.decoder.target, st.session.decoder.proposer.model
    assert M._pins.get(id(target), 0) >= 1 and M._pins.get(id(draft), 0) >= 1
    before = dict(M._pins)
    pg.on_reset(st)
    assert M._pins.get(id(target), 0) == before[id(target)] - 1
    list(pg.on_step(st, *_raw(models_dir)))
    st.close()
    assert M._pins.get(id(target), 0) == before[id(target)] - 1


def test_the_playground_offers_typical_acceptance_labelled_lossy(models_dir, allow_local):
    """Typical acceptance in the playground: recorded per step (rule and threshold), shown as LOSSY
    in the status, the tooltips and the draft table, and kept in the trace."""
    from specviz.core.hooks import load_trace
    from specviz.ui import playground as pg
    from specviz.ui.state import PlaygroundState, parse_settings
    from specviz.viz import tokens as vt

    st = PlaygroundState()
    frames = list(pg.on_play(st, *_raw(models_dir, max_new_tokens=16, acceptance="typical (LOSSY)")))
    assert st.settings.acceptance == "typical" and "LOSSY" in st.settings.describe()
    judged = [d for s in st.steps for d in s.drafts if d.verdict != "discarded"]
    assert judged and all(s.rule == "typical" for s in st.steps)
    assert all(d.threshold is not None and d.u is None and d.accepted == (d.p > d.threshold) for d in judged)
    tip = vt.tokens_html(st.prompt_text, st.steps)
    assert "typical (LOSSY)" in tip and "greedy:" not in tip
    assert "LOSSY" in vt.step_summary_text(next(s for s in reversed(st.steps) if s.k))  # the last step that drafted
    assert any(row[5].startswith("p>") for row in vt.draft_table_rows(st.steps[0])[:-1])
    assert frames and "Traceback" not in frames[-1]["status"]
    last = {k: v for f in frames for k, v in f.items()}  # issue 52: LOSSY on every number the run shows
    assert 'data-lossy="true"' in last["metrics"] and "LOSSY" in str(last["acceptance"].plot)
    assert "LOSSY" in str(last["tokens_per_step"].plot) and "LOSSY (typical acceptance" in last["why"]
    back = load_trace(st.trace_path).steps  # the run's own trace (the download)
    assert [s.rule for s in back] == [s.rule for s in st.steps] and back[0].drafts == st.steps[0].drafts
    st.close()
    with pytest.raises(ValueError, match="unknown acceptance rule"):
        parse_settings(*_raw(models_dir, acceptance="fast"))


def test_the_playground_runs_the_ngram_or_draft_proposer(models_dir, allow_local):
    from specviz.ui import playground as pg
    from specviz.ui.state import PlaygroundState
    from specviz.viz import tokens as vt

    st = PlaygroundState()
    list(pg.on_play(st, *_raw(models_dir, proposer="ngram+draft", temperature=0.0, max_new_tokens=30)))
    assert st.message[1] == "ok", st.message
    sources = {s.info.get("source") for s in st.steps if s.k}
    assert "ngram" in sources, sources  # the tiny prompt repeats itself
    assert any("drafted by" in vt.step_summary(s) for s in st.steps)
    st.close()


CONTROLS = ["target", "proposer", "draft", "k", "temperature", "top_p", "top_k", "seed", "max_new_tokens", "prompt", "chat",
            "schedule", "layers", "rule", "options"]  # parse_settings' order


@pytest.mark.parametrize("run", [
    dict(proposer="draft", k=3, temperature=0.7, top_p=0.9, top_k=5, seed=7, max_new_tokens=9, rule="typical (LOSSY)"),
    dict(proposer="draft-tree", k=2, temperature=1.0, top_p=1.0, top_k=0, seed=3, max_new_tokens=8, options="nodes=5,width=2"),
    dict(proposer="ngram", k=2, temperature=0.0, top_p=1.0, top_k=0, seed=1, max_new_tokens=8),
    dict(proposer="ngram+draft", k=3, temperature=0.9, top_p=0.95, top_k=0, seed=4, max_new_tokens=8),
    dict(proposer="ngram-tree", k=3, temperature=0.0, top_p=1.0, top_k=0, seed=2, max_new_tokens=8, options="nodes=6"),
    dict(proposer="early-exit", k=2, temperature=0.8, top_p=1.0, top_k=3, seed=5, max_new_tokens=8, layers=1),
    dict(proposer="xdraft", draft="@bpe", k=3, temperature=0.6, top_p=0.9, top_k=0, seed=6, max_new_tokens=8),
], ids=["draft-typical", "draft-tree", "ngram", "ngram+draft", "ngram-tree", "early-exit", "xdraft"])
def test_a_loaded_trace_restores_the_whole_run_and_leaves_nothing_behind(models_dir, allow_local, run):
    from specviz.ui import lesson
    from specviz.ui import playground as pg
    from specviz.ui.state import PlaygroundState, parse_settings

    run = {k: (models_dir[v[1:]] if isinstance(v, str) and v.startswith("@") else v) for k, v in run.items()}
    want = {**dict(zip(CONTROLS, _raw(models_dir))), "prompt": TINY_PROMPT + " again", "rule": "exact", "options": "", **run}
    live = PlaygroundState()
    list(pg.on_play(live, *[want[n] for n in CONTROLS]))
    assert live.session.done, live.message
    settings = live.settings

    st = PlaygroundState()  # another browser, its controls at other values
    shown = dict(zip(CONTROLS, _raw(models_dir, k=5, temperature=0.2, seed=99, max_new_tokens=4)), rule="exact", options="")
    list(pg.on_step(st, *[shown[n] for n in CONTROLS]))
    pg.on_load_trace(st, live.trace_path)
    updates = lesson.trace_controls(st)
    for name, u in updates.items():
        shown[name] = u["value"]
    for name in ("proposer", "k", "temperature", "top_p", "top_k", "seed", "max_new_tokens", "prompt", "rule", "options",
                 *(("layers",) if run["proposer"] == "early-exit" else ())):
        assert shown[name] == want[name], (name, shown[name], want[name])
    if run["proposer"] in ("draft", "draft-tree", "ngram+draft", "xdraft"):
        assert shown["draft"] == want["draft"]
    assert parse_settings(*[shown[n] for n in CONTROLS]) == settings  # the controls say the trace's whole run
    pg.on_reset(st)
    list(pg.on_step(st, *[shown[n] for n in CONTROLS]))  # the next live run uses the controls shown
    assert st.mode == "live" and st.settings == settings and len(st.steps) == 1 and st.phase is None
    live.close()
    st.close()


def test_before_the_first_click_the_page_says_a_step_waits_for_the_preparation_and_about_how_long(tmp_path, monkeypatch):
    """Issue 52: the page looked ready while its first Step sat 10-22 s behind the start-up preparation.
    While it runs, the note under the buttons says what a Step would wait for and about how long (the
    last start's total on this machine, kept in the cache directory; a first start says it has none);
    once it is over the note goes and its timer stops."""
    import html as html_text
    import threading

    from specviz.app import runs, warmup
    from specviz.ui import playground as pg

    s = warmup.StartUp()
    s.record = tmp_path / "startup-seconds.json"
    monkeypatch.setattr(warmup, "STARTUP", s)
    monkeypatch.setattr(runs, "STARTUP", s)
    assert pg.startup_note() == ""  # nothing at work: a Step would not wait
    for first in (True, False):
        release = threading.Event()
        s.start(["tiny-slow"], lambda name, progress=None: release.wait(30) and object(), lambda msg: None)
        note = html_text.unescape(pg.startup_note())
        assert "Start-up preparation at work: loading tiny-slow" in note and "waits for it" in note, note
        assert ("no earlier start on this machine" in note) == first
        assert first or "the last start's took" in note
        html, timer = pg.on_startup_tick()
        assert html["visible"] is True and timer.active is True
        release.set()
        s._thread.join(30)
        html, timer = pg.on_startup_tick()
        assert html["visible"] is False and timer.active is False and pg.startup_note() == ""
        assert s.record.exists()  # the total, for the next start's estimate
    # a start that converted a model (or tuned, or measured) once for this machine: the next start
    # says its total was an upper bound, not "about N s more" (a first start's 186 s read as the
    # estimate of a second start that took 28)
    release = threading.Event()

    def converting(name, progress=None):
        progress(f"converting {name} from GGUF (first run, ~2 min)…")
        return release.wait(30) and object()

    s.start(["tiny-slow"], converting, lambda msg: None)
    release.set()
    s._thread.join(30)
    assert s.once == ["converting tiny-slow from GGUF"]
    release = threading.Event()
    s.start(["tiny-slow"], lambda name, progress=None: release.wait(30) and object(), lambda msg: None)
    note = html_text.unescape(pg.startup_note())
    assert "at most about" in note and "included work done once per machine (converting tiny-slow from GGUF)" in note, note
    release.set()
    s._thread.join(30)
    assert s.once == [] and s._read_total(s.names)[1] == []  # this start did nothing once: the next estimate is plain
