"""The advisor's greedy replay (specviz.analysis.replay) against the engine's own runs on tiny
random models: for the same prompt, every step the replay derives from one target-only decode
(drafts, kept drafts, committed tokens) and the advisor's counts from them equal what the
engine measures running the proposer itself, for ngram at k = 1, 2, 4, ngram-tree (free and with
a static shape), a draft model (chain and static draft tree) and ngram+draft."""

from __future__ import annotations

import pytest

from specviz.analysis import advisor as A
from specviz.analysis import replay as R
from specviz.analysis.treeshape import decode
from specviz.core.engine import SpeculativeDecoder
from specviz.core.records import Sampling
from specviz.proposers.registry import from_spec
from tests.support import TINY_PROMPT, loaded, make_char_tokenizer, make_llama, perturbed

PROMPTS = [TINY_PROMPT, "abc abc abc abd abc abc ab", "hello there. hello there. hello", "the cat sat. the cat ran. the cat"]
MAX_NEW = 40


@pytest.fixture(scope="module")
def tiny():
    tok = make_char_tokenizer()
    target = make_llama(len(tok), 32, 2, seed=0, sharpen=30.0)
    draft = perturbed(target, 0.3, seed=2)  # agrees often, not always
    return loaded(target, tok, "tiny-target"), loaded(draft, tok, "tiny-draft")


@pytest.fixture(scope="module")
def decodes(tiny):
    """One target-only greedy decode per prompt: the replay's only input from the target."""
    target, _ = tiny
    out = []
    for prompt in PROMPTS:
        session = SpeculativeDecoder(target, None).start(prompt, max_new_tokens=MAX_NEW, chat=False, records="lean")
        while not session.done:
            session.step()
        out.append(R.decoded(session))
    return out


def engine_runs(target, proposer, k: int, records: str = "lean"):
    """The engine's own greedy runs of ``proposer`` at k on every prompt: (its steps, its output)."""
    decoder = SpeculativeDecoder(target, proposer, k=k, sampling=Sampling())
    runs, outputs = [], []
    for prompt in PROMPTS:
        session = decoder.start(prompt, max_new_tokens=MAX_NEW, chat=False, records=records)
        while not session.done:
            session.step()
        runs.append(list(session.steps))
        outputs.append(tuple(session.new_token_ids))
    return runs, outputs


def test_decodes_are_the_targets_greedy_output(tiny, decodes):
    target, _ = tiny
    _, outputs = engine_runs(target, from_spec("ngram", target), 4)
    assert outputs == [d.new_ids for d in decodes]  # any exact run commits the same text
    assert all(len(d.new_ids) == MAX_NEW or d.new_ids[-1] in (2,) for d in decodes)


@pytest.mark.parametrize("k", [1, 2, 4])
def test_ngram_chain_replay_equals_the_engine(tiny, decodes, k):
    target, _ = tiny
    proposer = from_spec("ngram", target)
    runs, _ = engine_runs(target, proposer, k)
    replayed = R.replay(proposer, decodes, k)
    assert R.summary(replayed) == R.summary(runs)
    assert any(kept for _, kept, _ in R.summary(runs))  # the prompts do repeat: something was kept
    ours, theirs = A.chain_calibration("ngram", replayed, k, MAX_NEW), A.chain_calibration("ngram", runs, k, MAX_NEW)
    assert (ours.steps, ours.reached, ours.drafted, ours.kept, ours.at_least, ours.drafted_tokens) == (
        theirs.steps, theirs.reached, theirs.drafted, theirs.kept, theirs.at_least, theirs.drafted_tokens)
    assert [r.p for r in ours.accept] == [r.p for r in theirs.accept]  # per-position acceptance


@pytest.mark.parametrize("spec,k", [("ngram-tree:3,nodes=64", 8), ("ngram-tree:3,nodes=16", 4),
                                    ("ngram-tree:3,shape=2111", 4), ("ngram-tree:2,shape=31", 2)])
def test_ngram_tree_replay_equals_the_engine(tiny, decodes, spec, k):
    target, _ = tiny
    proposer = from_spec(spec, target)
    runs, _ = engine_runs(target, proposer, k)
    replayed = R.replay(proposer, decodes, k)
    assert R.summary(replayed) == R.summary(runs)
    assert [list(s.accepted_path) for r in replayed for s in r] == [list(s.accepted_path) for r in runs for s in r]
    assert [[(n.parent, n.depth) for n in s.tree] for r in replayed for s in r] == \
        [[(n.parent, n.depth) for n in s.tree] for r in runs for s in r]
    ours, theirs = A.rank_calibration_from_tree(spec, replayed, k, max_new_tokens=MAX_NEW), \
        A.rank_calibration_from_tree(spec, runs, k, max_new_tokens=MAX_NEW)
    assert (ours.trials, ours.kept, ours.steps, ours.nodes) == (theirs.trials, theirs.kept, theirs.steps, theirs.nodes)
    assert any(any(row) for row in ours.kept)


@pytest.mark.parametrize("k", [1, 3, 6])
def test_draft_chain_replay_equals_the_engine(tiny, decodes, k):
    target, draft = tiny
    proposer = from_spec("draft:tiny-draft", target, load=lambda name, **kw: draft)
    rows = R.draft_rows(draft, decodes, R.vocab_of(target))
    runs, _ = engine_runs(target, proposer, k, records="full")
    replayed = R.replay(proposer, decodes, k, rows)
    assert R.summary(replayed) == R.summary(runs)
    kept = [kept for _, kept, _ in R.summary(runs)]
    assert 0 < sum(kept) < sum(s.k for r in runs for s in r)  # some drafts kept, some not
    ours, theirs = A.chain_calibration("d", replayed, k, MAX_NEW), A.chain_calibration("d", runs, k, MAX_NEW)
    assert (ours.reached, ours.drafted, ours.kept, ours.at_least) == (theirs.reached, theirs.drafted, theirs.kept, theirs.at_least)
    # the draft tree's per-rank counts read the draft's top-10 where the chain got to
    ours, theirs = A.rank_calibration_from_chain("d", replayed, k, max_new_tokens=MAX_NEW), \
        A.rank_calibration_from_chain("d", runs, k, max_new_tokens=MAX_NEW)
    assert (ours.trials, ours.kept) == (theirs.trials, theirs.kept)


@pytest.mark.parametrize("shape,k", [("2111", 4), ("31", 2), ("1111", 4)])
def test_static_draft_tree_replay_equals_the_engine(tiny, decodes, shape, k):
    target, draft = tiny
    proposer = from_spec(f"draft-tree:tiny-draft,shape={shape}", target, load=lambda name, **kw: draft)
    runs, _ = engine_runs(target, proposer, k)
    replayed = R.replay_draft_tree(R.draft_rows(draft, decodes, R.vocab_of(target)), decodes,
                                   decode(shape).rank_paths(), k)
    got = [(min(s.n_accepted, s.n_committed), s.n_committed) for r in replayed for s in r]
    assert got == [(len(s.accepted_path[: s.n_committed]), s.n_committed) for r in runs for s in r]
    assert any(kept > 1 for kept, _ in got)  # paths of several nodes were kept


@pytest.mark.parametrize("k", [2, 5])
def test_ngram_or_draft_replay_equals_the_engine(tiny, decodes, k):
    target, draft = tiny
    proposer = from_spec("ngram+draft:tiny-draft", target, load=lambda name, **kw: draft)
    runs, _ = engine_runs(target, proposer, k)
    replayed = R.replay(proposer, decodes, k, R.draft_rows(draft, decodes, R.vocab_of(target)))
    assert R.summary(replayed) == R.summary(runs)
    assert [s.source for r in replayed for s in r if s.k] == [s.info.get("source") for r in runs for s in r if s.k]
    assert {s.source for r in replayed for s in r if s.k} == {"ngram", "draft"}


@pytest.fixture(scope="module")
def cut(tiny):
    """The draft with its head cut to 12 of the 37 tokens (vocab=12): its session's context
    tokens outside them are scored as they arrive (proposers.vocab.ContextRows)."""
    from specviz.proposers.vocab import with_vocab_subset

    target, draft = tiny
    return with_vocab_subset(draft, target, 12)


@pytest.mark.parametrize("spec,k,schedule", [("draft", 3, None), ("draft", 6, None), ("ngram+draft", 4, None),
                                             ("draft", 5, "median"), ("ngram+draft", 5, "median")])
def test_a_cut_draft_replays_as_the_engine_runs_it(tiny, cut, decodes, spec, k, schedule):
    """A vocab=N draft's rows teacher-forced with its context rows added as the text arrives give
    the engine's steps back (with a confidence stop too: kept drafts and committed tokens, and the
    chain's length up to the first rejected draft)."""
    target, _ = tiny
    proposer = from_spec(f"{spec}:tiny-cut", target, load=lambda name, **kw: cut)
    assert R.replayable(proposer)
    rows = R.draft_rows(cut, decodes, R.vocab_of(target))
    stop = _a_threshold_that_stops(rows) if schedule else None
    runs = _engine_runs_under(target, proposer, k, f"confidence:{stop}" if stop else "constant")
    ours, theirs = R.summary(R.replay(proposer, decodes, k, rows, stop=stop)), R.summary(runs)
    assert [(kept, n) for _, kept, n in ours] == [(kept, n) for _, kept, n in theirs]
    assert [min(d, kept + 1) for d, kept, _ in ours] == [min(d, kept + 1) for d, kept, _ in theirs]
    if stop is None:
        assert ours == theirs



def test_a_cut_drafts_replay_without_its_context_rows_parts_from_the_engine(tiny, cut, decodes, monkeypatch):
    """The context rows are what makes the cut draft's replay exact: its 12 rows alone keep far
    fewer drafts than the engine's draft does."""
    target, _ = tiny
    proposer = from_spec("draft:tiny-cut", target, load=lambda name, **kw: cut)
    theirs = R.summary(_engine_runs_under(target, proposer, 4, "constant"))
    monkeypatch.setattr(R, "context_rows_for", lambda model: None)
    ours = R.summary(R.replay(proposer, decodes, 4, R.draft_rows(cut, decodes, R.vocab_of(target))))
    assert ours != theirs and sum(kept for _, kept, _ in ours) < sum(kept for _, kept, _ in theirs)


def test_what_cannot_be_replayed_says_so(tiny, decodes):
    target, draft = tiny
    assert not R.replayable(object()) and R.replayable(from_spec("ngram", target))
    with pytest.raises(ValueError, match="cannot be replayed"):
        R.replay(object(), decodes, 2)
    with pytest.raises(ValueError, match="teacher-forced rows"):
        R.replay(from_spec("draft:tiny-draft", target, load=lambda name, **kw: draft), decodes, 2)


# -- the advisor on the replay ------------------------------------------------------------------------


@pytest.fixture()
def numbers(monkeypatch, tmp_path):
    """The cost model from numbers (no timing); the caches under tmp_path."""
    from specviz.analysis import costmodel as C
    from tests.test_advisor import cost_model

    monkeypatch.setenv("SPECVIZ_CACHE_DIR", str(tmp_path))

    def fake_measure(target, *, context=256, drafts=(), **kw):
        cost = cost_model(slope=0.0005, draft_step=0.002, overhead=0.001)
        d = cost.drafts["d"]
        return C.CostModel(**{**cost.__dict__, "key": C.cost_key(target, context), "target": str(target.name), "drafts": {
            str(m.name): C.DraftCost(str(m.name), d.step_s, d.feed_s, d.level_s, d.prefill_s) for m in drafts}})

    monkeypatch.setattr(C, "measure", fake_measure)
    return tmp_path


def rows_of(prompts):
    from specviz.prompts import PromptRow

    return [PromptRow(p, "mixed", f"p{i}") for i, p in enumerate(prompts)]


def test_the_advisors_tau_is_the_engines_own_under_greedy(tiny, numbers):
    """Every chain forecast's tau at k is the engine's own run's at k (steps the run's end did not
    cut); every tree forecast's tau is that shape's own run's."""
    from specviz.bench.advise import advise

    target, draft = tiny
    load = lambda name, **kw: draft  # noqa: E731
    advice = advise(target, ["ngram", "draft:tiny-draft", "ngram-tree:3"], rows_of(PROMPTS), load=load, ks=range(1, 5),
                    min_drafted=10_000, max_new_tokens=MAX_NEW, chat=False, cache_dir=numbers)
    assert advice.method == "replay" and advice.replay["decodes"][0]["replay_reproduced"] == len(PROMPTS)
    assert any("acceptance replayed from one greedy decode of 4 prompts" in n for n in advice.notes)
    for f in advice.forecasts:
        proposer = from_spec(f.spec, target, load=load)
        runs, _ = engine_runs(target, proposer, f.k)
        assert f.tau == pytest.approx(A.replayed_tau(runs, f.k, MAX_NEW)), f.label
    assert {f.proposer for f in advice.forecasts} == {"ngram", "draft:tiny-draft", "ngram-tree:3"}
    assert all(f.extra.get("tau_model") is not None for f in advice.forecasts if f.shape)
    best_tree = A.rank([f for f in advice.forecasts if f.shape])[0]
    assert advice.shapes["ngram-tree:3"] == best_tree.shape  # shape=auto: the fastest on its own replayed tau


def test_prompt_lookup_calibrates_on_the_prompts_that_run(tiny, numbers):
    from specviz.bench.advise import advise

    target, draft = tiny
    load = lambda name, **kw: draft  # noqa: E731
    calib, run = rows_of(["qwertyuiop zxcvbnm"]), rows_of(PROMPTS[:2])
    advice = advise(target, ["ngram", "draft:tiny-draft"], calib, run_prompts=run, load=load, ks=range(1, 4),
                    max_new_tokens=MAX_NEW, chat=False, cache_dir=numbers)
    decodes = {tuple(d["for"]): d for d in advice.replay["decodes"]}
    assert decodes[("ngram",)]["prompts"] == 2 and decodes[("draft:tiny-draft",)]["prompts"] == 1
    ngram = next(f for f in advice.forecasts if f.spec == "ngram" and f.k == 3)
    runs, _ = engine_runs(target, from_spec("ngram", target), 3)
    assert ngram.tau == pytest.approx(A.replayed_tau(runs[:2], 3, MAX_NEW))  # the prompts that run, not the calibration one
    assert advice.prompts == 2


def test_sampling_runs_each_proposer(tiny, numbers):
    from specviz.bench.advise import advise

    target, _ = tiny
    advice = advise(target, ["ngram"], rows_of(PROMPTS[:2]), ks=range(1, 3), max_new_tokens=16, chat=False,
                    sampling=Sampling(temperature=0.8), cache_dir=numbers)
    assert advice.method == "runs" and not advice.by_k and not advice.replay["decodes"]
    with pytest.raises(ValueError, match="greedy"):
        advise(target, ["ngram"], rows_of(PROMPTS[:1]), sampling=Sampling(temperature=0.8), replay=True, cache_dir=numbers)


def test_a_proposer_the_replay_cannot_follow_runs_its_own_calibration(tiny, numbers, monkeypatch):
    """early-exit is a draft model (the target's first layers) and is replayed; one the replay
    cannot follow (here: any draft, as a vocab=N draft or xdraft would be) runs at k = max as before."""
    from specviz.bench.advise import advise
    from specviz.proposers.ngram import NGram

    target, _ = tiny
    advice = advise(target, ["ngram", "early-exit:1"], rows_of(PROMPTS[:2]), ks=range(1, 3), max_new_tokens=16,
                    chat=False, cache_dir=numbers)
    assert advice.replay["decodes"][0]["for"] == ["ngram", "early-exit:1"] and set(advice.by_k) == {"ngram", "early-exit:1"}
    monkeypatch.setattr(R, "replayable", lambda p: isinstance(p, NGram))
    advice = advise(target, ["ngram", "early-exit:1"], rows_of(PROMPTS[:2]), ks=range(1, 3), max_new_tokens=16,
                    chat=False, cache_dir=numbers)
    (dec,) = advice.replay["decodes"]
    assert dec["for"] == ["ngram"] and set(advice.by_k) == {"ngram"}
    assert advice.calibrations["early-exit:1"].steps > 0  # its own engine run at k = 2
    assert {f.proposer for f in advice.forecasts} == {"ngram", "early-exit:1"}


def test_prompt_lookup_replays_every_prompt_that_runs_not_only_enough_drafts(tiny, numbers):
    """What prompt lookup accepts changes from prompt to prompt, so its greedy decode covers every
    prompt that will run (up to REPLAY_PROMPTS), however few drafts min_drafted asks for; a draft
    model's own calibration prompts still stop once it has enough."""
    from specviz.bench import advise as B

    target, draft = tiny
    load = lambda name, **kw: draft  # noqa: E731
    calib, run = rows_of(PROMPTS[2:]), rows_of(PROMPTS)
    advice = B.advise(target, ["ngram", "draft:tiny-draft"], calib, run_prompts=run, load=load, ks=range(1, 3),
                      min_drafted=1, max_new_tokens=MAX_NEW, chat=False, cache_dir=numbers)
    decodes = {tuple(d["for"]): d for d in advice.replay["decodes"]}
    assert decodes[("ngram",)]["prompts"] == len(PROMPTS) and decodes[("draft:tiny-draft",)]["prompts"] == 1
    ngram = next(f for f in advice.forecasts if f.spec == "ngram" and f.k == 2)
    runs, _ = engine_runs(target, from_spec("ngram", target), 2)
    assert ngram.tau == pytest.approx(A.replayed_tau(runs, 2, MAX_NEW))  # all four prompts' tau


@pytest.mark.parametrize("spec,k", [("draft", 3), ("ngram+draft", 2), ("ngram+draft", 5)])
def test_a_draft_that_starts_from_the_targets_prompt_replays_as_the_engine_runs_it(tiny, decodes, spec, k):
    """A draft named as the target's own weights (NAME@...: the engine hands it the target's prompt
    states, proposers.draft_model.take_target_prompt): its rows teacher-forced from those states
    and ngram+draft's first catch-up from the prompt's end give the engine's steps back."""
    import copy

    target, noisy = tiny
    draft = copy.copy(noisy)
    draft.name = "tiny-target@noisy"  # the target's name: its own weights, as far as the engine can tell
    proposer = from_spec(f"{spec}:tiny-target@noisy", target, load=lambda name, **kw: draft)
    runs, _ = engine_runs(target, proposer, k)
    rows = R.draft_rows(draft, decodes, R.vocab_of(target), target=target)
    assert R.summary(R.replay(proposer, decodes, k, rows, shared_prompt=True)) == R.summary(runs)
    own_rows = R.draft_rows(draft, decodes, R.vocab_of(target))  # the prompt through the draft itself
    assert own_rows != rows  # the target's prompt states are not the draft's


def _engine_runs_under(target, proposer, k: int, schedule: str):
    decoder = SpeculativeDecoder(target, proposer, k=k, sampling=Sampling(), schedule=schedule)
    runs = []
    for prompt in PROMPTS:
        session = decoder.start(prompt, max_new_tokens=MAX_NEW, chat=False, records="lean")
        while not session.done:
            session.step()
        runs.append(list(session.steps))
    return runs


def _a_threshold_that_stops(rows) -> float:
    """The median of the draft's top probabilities: about half its positions fall below it."""
    tops = sorted(p for r in rows for p in r.top_p)
    return round(tops[len(tops) // 2], 3)


@pytest.mark.parametrize("spec,k", [("draft", 4), ("ngram+draft", 4), ("draft", 6)])
def test_a_confidence_stop_replays_as_the_engine_stops(tiny, decodes, spec, k):
    """Under confidence:T the replay stops each chain where the engine's draft does: every step's
    kept drafts and committed tokens are the engine's, and so is its length wherever the stop came
    no later than the first rejected draft (past it the draft conditions on its own rejected token,
    which teacher forcing does not see: there the length is the replay's estimate)."""
    target, draft = tiny
    proposer = from_spec(f"{spec}:tiny-draft", target, load=lambda name, **kw: draft)
    rows = R.draft_rows(draft, decodes, R.vocab_of(target))
    threshold = _a_threshold_that_stops(rows)
    runs = _engine_runs_under(target, proposer, k, f"confidence:{threshold}")
    replayed = R.replay(proposer, decodes, k, rows, stop=threshold)
    ours, theirs = R.summary(replayed), R.summary(runs)
    assert [(kept, n) for _, kept, n in ours] == [(kept, n) for _, kept, n in theirs]
    assert [min(d, kept + 1) for d, kept, _ in ours] == [min(d, kept + 1) for d, kept, _ in theirs]
    assert any(s.stopped for r in replayed for s in r)  # the stop ended some chains early
    assert any(0 < s.k < min(k, MAX_NEW) and s.n_accepted == s.k for r in runs for s in r)  # ... and the engine's too
    constant = R.summary(R.replay(proposer, decodes, k, rows))
    assert constant != ours


def test_the_advisor_prices_a_confidence_schedule(tiny, decodes, numbers):
    """advise(schedule="confidence:T"): the draft chains are replayed with the stop and say so (their
    tau is the engine's own under that schedule); prompt lookup, which never stops, is advised as
    it runs; the pick saved for auto stays a constant-k configuration."""
    from specviz.bench.advice_out import format_advice, pick_of
    from specviz.bench.advise import advise

    target, draft = tiny
    load = lambda name, **kw: draft  # noqa: E731
    threshold = _a_threshold_that_stops(R.draft_rows(draft, decodes, R.vocab_of(target)))
    advice = advise(target, ["ngram", "draft:tiny-draft"], rows_of(PROMPTS), load=load, ks=range(1, 5),
                    min_drafted=10_000, max_new_tokens=MAX_NEW, chat=False, cache_dir=numbers,
                    schedule=f"confidence:{threshold}")
    drafts = [f for f in advice.forecasts if f.proposer == "draft:tiny-draft"]
    assert drafts and all(f.extra["schedule"] == f"confidence:{threshold:g}" for f in drafts)
    assert all("schedule" not in f.extra for f in advice.forecasts if f.proposer == "ngram")
    for f in drafts:
        runs = _engine_runs_under(target, from_spec(f.spec, target, load=load), f.k, f"confidence:{threshold}")
        assert f.tau == pytest.approx(A.replayed_tau(runs, f.k, MAX_NEW)), f.label
    assert f"draft:tiny-draft [confidence:{threshold:g}] k=" in format_advice(advice)
    assert any("advised under confidence:" in n for n in advice.notes)
    assert pick_of(advice).spec in ("ngram", "none")  # auto runs constant k: every draft forecast here stops
    with pytest.raises(ValueError, match="constant and confidence:T schedules"):
        advise(target, ["ngram"], rows_of(PROMPTS), load=load, ks=range(1, 3), max_new_tokens=MAX_NEW, chat=False,
               cache_dir=numbers, schedule="heuristic")
