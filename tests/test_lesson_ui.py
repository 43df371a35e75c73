"""The playground's lesson pieces (specviz.ui.lesson) driven through their handlers, without a browser,
on tiny local models: each guided tour reaches its moment, navigation finds steps and rejections, a
step plays in phases, a tree step shows its tree, the card explains a run, a loaded trace says how
it was sampled, and bad values name their field.
"""

from __future__ import annotations

import re

import pytest

from tests.support import app_server


def _raw(env, **change):
    args = dict(target=env["SPECVIZ_DEFAULT_TARGET"], proposer="draft", draft=env["SPECVIZ_DEFAULT_DRAFT"], k=4,
                temperature=1.0, top_p=1.0, top_k=0, seed=0, max_new_tokens=24, prompt=app_server.TINY_PROMPT, chat=True,
                schedule="constant", layers=1, rule="exact", options="")
    args.update(change)
    return tuple(args.values())


NAMES = ["target", "proposer", "draft", "k", "temperature", "top_p", "top_k", "seed", "max_new_tokens", "prompt", "chat",
         "schedule", "layers", "rule", "options"]


def _tour(env, key, **change):
    """Run a tour's two handlers as the page chains them: -> (state, last frame, control values)."""
    from specviz.ui import lesson
    from specviz.ui.playground_view import OUTPUTS
    from specviz.ui.state import PlaygroundState

    st = PlaygroundState()
    setup = lesson.tour_setup(key)(st)
    assert set(setup) <= set(NAMES) | set(OUTPUTS) | {"lesson_mode"}
    assert setup["lesson_mode"]["value"] is True and st.lesson_mode  # every tour is a lesson: the box says so
    controls = {n: u["value"] for n, u in setup.items() if n in NAMES and isinstance(u, dict) and "value" in u}
    raw = dict(zip(NAMES, _raw(env)))
    raw.update(controls)
    raw["max_new_tokens"] = 24
    raw.update(change)
    frames = list(lesson.tour_run(key)(st, *[raw[n] for n in NAMES]))
    assert frames and all(set(f) <= set(OUTPUTS) | set(NAMES) for f in frames)
    for f in frames:  # a control the run sets (the rejection tour's seed) is applied as the page would
        raw.update({n: u["value"] for n, u in f.items() if n in NAMES and isinstance(u, dict) and "value" in u})
    return st, frames[-1], raw


def _arrives(frame, key):
    """The tour's last frame says where it arrived: its status carries the moment and what it names."""
    from specviz.ui.lesson import ARRIVALS

    assert f'data-arrive="{" ".join(ARRIVALS[key])}"' in frame["status"], frame["status"]


def _lesson(frame):
    from specviz.ui.lesson_view import LESSON_OUTPUTS

    return {name: frame[name] for name in LESSON_OUTPUTS if name in frame}


def test_tour_speedup_ends_on_the_card_and_the_race(tiny_env):
    st, frame, _ = _tour(tiny_env, "speedup")
    assert st.done and st.comparable_baseline() is not None, st.message
    parts = _lesson(frame)
    assert 'data-verdict="' in parts["why"] and 'data-verdict="unknown"' not in parts["why"]
    assert "Speedup" in parts["why"] and "target step" in parts["why"]
    assert parts["race_box"]["visible"] is True and "sv-race-spec" in parts["race"]
    assert "Tour done" in st.message[0]
    _arrives(frame, "speedup")
    st.close()


def test_tour_rejection_stops_on_a_rejection_in_its_draft_phase_in_lesson_mode(tiny_env):
    """Issue 52: the tour lands on the step with the rejection at its start (draft phase, lesson mode
    on, nothing of p or u shown yet), and phase ▶ walks it to the rejected draft's decide frame."""
    from specviz.ui import lesson

    st, frame, raw = _tour(tiny_env, "rejection")
    assert raw["temperature"] > 0 and raw["seed"] == 0  # the tiny pair rejects on seed 0: no search
    rec = st.shown_step()
    assert any(d.verdict == "rejected" for d in rec.drafts), st.message
    assert st.lesson_mode and st.phase == ("draft", -1) and st.selected_pos is None
    phase = _lesson(frame)["phase"]
    assert 'data-phase="draft"' in phase and 'data-kind="rejected"' not in phase  # not told yet
    _arrives(frame, "rejection")
    assert "◀ phase / phase ▶" in st.message[0] and "Lesson mode is on" in st.message[0]
    assert "seed" not in frame and "ran to the end" not in st.message[0]
    for _ in range(20):  # phase ▶ until the rejected draft is decided
        out = lesson.on_phase(st, 1)
        if 'data-kind="rejected"' in out["phase"]:
            break
    assert st.phase[0] == "decide" and st.shown_step() is rec
    assert rec.drafts[st.selected_pos].verdict == "rejected"
    st.close()


def test_tour_rejection_runs_the_next_seed_after_a_run_without_one_and_says_so(tiny_env, monkeypatch):
    """A seed whose run accepts every draft (issue 52: 51 of 51 on one start of the app) no longer ends
    the tour: it runs the next seed, says which seeds it ran, and sets the seed box to the run shown."""
    from specviz.ui import lesson

    real, real_restart, restarts = lesson._rejected_pos, lesson._restart, []

    def restart(state, settings, search):
        restarts.append(settings.seed)
        return (yield from real_restart(state, settings, search))

    # seed 0 "accepts every draft": its rejections are not seen, as if its draws had all fallen below the ratio
    monkeypatch.setattr(lesson, "_restart", restart)
    monkeypatch.setattr(lesson, "_rejected_pos", lambda r: real(r) if restarts else None)
    st, frame, raw = _tour(tiny_env, "rejection")
    assert restarts == [1] and st.settings.seed == 1 and raw["seed"] == 1 and frame["seed"]["value"] == 1, st.message
    rec = st.shown_step()
    assert any(d.verdict == "rejected" for d in rec.drafts) and st.phase == ("draft", -1)
    text = st.message[0]
    assert text.startswith("Seed 0 ran to the end (") and "without a rejection, so the tour ran seed 1" in text
    _arrives(frame, "rejection")
    st.close()


def test_tour_rejection_that_finds_none_says_what_it_ran(tiny_env):
    """The draft is the target itself: min(1, p/q) = 1, every draft is kept, on every seed. The tour
    runs TOUR_SEEDS seeds, then says so and which, and the seed box shows the last run."""
    from specviz.ui import lesson

    st, frame, raw = _tour(tiny_env, "rejection", draft=tiny_env["SPECVIZ_DEFAULT_TARGET"], max_new_tokens=6)
    last = lesson.TOUR_SEEDS - 1
    assert st.settings.seed == last and frame["seed"]["value"] == last
    text = st.message[0]
    assert text.startswith(f"Seeds 0 to {last} ran to the end (") and "without a rejection" in text
    assert "data-arrive" not in frame["status"]
    kept, drafted = map(int, re.search(r"(\d+) of (\d+) drafts accepted", text).groups())
    assert kept == drafted >= lesson.TOUR_SEEDS  # every run drafted, and every draft was kept
    st.close()


def test_tour_no_pay_card_names_what_limits_it(tiny_env):
    st, frame, raw = _tour(tiny_env, "no-pay")
    assert raw["layers"] == 1 and raw["proposer"] == "early-exit"
    why = _lesson(frame)["why"]
    assert "data-limit=" in why and "was not trained" in why
    _arrives(frame, "no-pay")
    st.close()


def test_tour_tree_stops_on_a_branching_tree_step(tiny_env):
    st, frame, raw = _tour(tiny_env, "tree")
    rec = st.shown_step()
    assert rec.tree, st.message
    parents = [nd.parent for nd in rec.tree]
    assert len(set(parents)) < len(parents)  # branches
    parts = _lesson(frame)
    assert parts["tree_row"]["visible"] is True and parts["tree"] is not None
    assert 'data-steps="' in frame["tokens"]  # the text view renders the tree step's committed path
    _arrives(frame, "tree")
    assert "◀ phase" not in st.message[0]  # the nav row is not in view with the tree: not named
    st.close()


def test_navigation_and_phases(tiny_env):
    from specviz.ui import lesson
    from specviz.ui import playground as pg
    from specviz.ui.state import PlaygroundState
    from specviz.viz.phases import rejection_steps

    st = PlaygroundState()
    for _ in range(4):
        list(pg.on_step(st, *_raw(tiny_env)))
    lesson.on_nav(st, "prev-step")
    assert st.shown_step().index == 2
    lesson.on_nav(st, "prev-step")
    assert st.shown_step().index == 1
    rej = rejection_steps(st.steps)
    assert rej, "the tiny pair at T = 1 rejects at step 1 (seed 0)"
    st.select(None)
    lesson.on_nav(st, "prev-rejection")  # from the latest step back to the last rejection before it
    assert st.shown_step().index == max(i for i in rej if i < 3)
    assert st.phase[0] == "decide" and st.shown_step().drafts[st.selected_pos].verdict == "rejected"
    lesson.on_nav(st, "next-rejection")
    assert st.shown_step().index == min((i for i in rej if i > max(i for i in rej if i < 3)), default=st.shown_step().index)
    st.select(0)
    frames = [lesson.on_phase(st, -1) for _ in range(10)]  # back to the first frame: draft
    assert st.phase == ("draft", -1) and 'data-phase="draft"' in frames[-1]["phase"]
    lesson.on_phase(st, 1)
    assert st.phase[0] == "verify"
    lesson.on_speed(st, "1 step/s")
    assert st.play_delay_s == 1.0
    st.close()


def test_proposer_options_reach_the_spec_and_bad_ones_are_named(tiny_env):
    from specviz.ui.state import parse_settings

    s = parse_settings(*_raw(tiny_env, proposer="draft-tree", options="nodes=5,width=2"))
    assert s.proposer.endswith(",nodes=5,width=2")
    s = parse_settings(*_raw(tiny_env, proposer="ngram-tree", options="nodes=5"))
    assert s.proposer == "ngram-tree:3,nodes=5"
    with pytest.raises(ValueError, match="height"):
        parse_settings(*_raw(tiny_env, proposer="ngram-tree", options="height=5"))


@pytest.mark.parametrize("field, value, words", [("seed", -1, "seed"), ("top_k", -3, "top-k"),
                                                  ("k", 0, "k (tokens drafted"), ("temperature", -1, "temperature")])
def test_bad_values_name_their_field(tiny_env, field, value, words):
    from specviz.ui import playground as pg
    from specviz.ui.state import PlaygroundState

    st = PlaygroundState()
    raw = dict(zip(NAMES, _raw(tiny_env)))
    raw[field] = value
    frames = list(pg.on_step(st, *raw.values()))
    assert words in frames[-1]["status"] and "sv-msg-error" in frames[-1]["status"]


def test_a_loaded_lossy_trace_says_lossy_and_sets_its_controls(tiny_env, tmp_path):
    from specviz.ui import lesson
    from specviz.ui import playground as pg
    from specviz.ui.state import PlaygroundState

    st = PlaygroundState()
    raw = dict(zip(NAMES, _raw(tiny_env, rule="typical (LOSSY)", temperature=0.7)))
    list(pg.on_play(st, *raw.values()))
    path = st.trace_path
    other = PlaygroundState()
    out = pg.on_load_trace(other, path)
    assert "LOSSY" in out["status"] and "T = 0.7" in out["status"]
    controls = lesson.trace_controls(other)
    t, rule = controls["temperature"], controls["rule"]
    assert t["value"] == 0.7 and rule["value"] == "typical (LOSSY)"
    st.close()
    other.close()


def test_defaults_tell_the_true_story_and_avoid_int8_beside_a_gpu(monkeypatch):
    import torch

    from specviz.app import runs

    for var in ("SPECVIZ_DEFAULT_TARGET", "SPECVIZ_DEFAULT_DRAFT", "SPECVIZ_DEFAULT_PROPOSER", "SPECVIZ_DEFAULT_PROMPT",
                "SPECVIZ_DEFAULT_TEMPERATURE", "SPECVIZ_DEFAULT_K"):
        monkeypatch.delenv(var, raising=False)
    d = runs.Defaults.from_env()
    assert runs.prefix_of(d.proposer) == "ngram" and d.k == 4 and d.temperature == 0
    assert "def longest_common_subsequence_length" in d.prompt  # the answer quotes the code: the lookup drafts
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    d = runs.Defaults.from_env()
    assert "@int8" not in d.draft
    for tour in runs.TOURS:
        assert "@int8" not in str(runs.tour_settings(tour.key, d, cuda=True).get("draft"))
    # the no-pay tour runs a short early-exit run and its target-only run (a wait toward 15 s on 2 cores)
    no_pay = runs.tour_settings("no-pay", d)
    assert no_pay["max_new_tokens"] == min(d.max_new_tokens, runs.NO_PAY_TOKENS) and no_pay["k"] == 2


def _text(frame):
    """Every value of a frame as one string (HTML, updates, the figures' JSON)."""
    return " ".join(str(getattr(v, "plot", v)) for v in frame.values())


def test_lesson_mode_opens_each_step_in_its_draft_phase_and_phase_moves_on(tiny_env):
    from specviz.ui import lesson
    from specviz.ui import playground as pg
    from specviz.ui.state import PlaygroundState
    from specviz.viz.numbers import fmt_prob
    from specviz.viz.phases import phase_frames
    from specviz.viz.tree import chain_view

    st = PlaygroundState()
    lesson.on_lesson_mode(st, True)
    frames = list(pg.on_step(st, *_raw(tiny_env)))
    assert st.phase == ("draft", -1) and len(st.steps) == 1
    page = _text({k: v for f in frames for k, v in f.items()})
    rec = chain_view(st.steps[0])
    qs = {fmt_prob(d.q) for d in rec.drafts}
    secrets = {fmt_prob(d.p) for d in rec.drafts} | {fmt_prob(d.u) for d in rec.drafts if d.u is not None}
    for s in secrets - qs - {"—", "1.000"}:
        assert s not in page, s  # the target's p and the draws are not known in the draft phase
    assert "resampled" not in page and "bonus token" not in page and "drafts accepted" not in page
    assert "tok-pending" in next(f["tokens"] for f in frames if "tokens" in f)
    for _ in range(len(phase_frames(rec)) - 1):  # draft -> ... -> commit
        out = lesson.on_phase(st, 1)
    assert st.phase == ("commit", -1) and "accepted" in out["status"] and len(st.steps) == 1
    lesson.on_phase(st, 1)  # at commit: on to the next step, in its draft phase
    assert len(st.steps) == 2 and st.phase == ("draft", -1) and st.shown_step().index == 1
    lesson.on_lesson_mode(st, False)
    assert st.phase is None
    st.play_delay_s = 0.01  # "animate this step": every phase at the Play speed's pace, no click
    seen = [re.search(r'data-phase="(\w+)"', f["phase"]).group(1) for f in lesson.on_animate(st)]
    want = [p for p, _ in phase_frames(chain_view(st.shown_step()))]
    assert seen == want and seen[0] == "draft" and seen[-1] == "commit"
    st.close()


def test_after_the_run_finished_nothing_asks_to_run_more(tiny_env):
    from specviz.ui import lesson
    from specviz.ui import playground as pg
    from specviz.ui.state import PlaygroundState

    st = PlaygroundState()
    list(pg.on_play(st, *_raw(tiny_env, max_new_tokens=8)))
    assert st.done
    out = lesson.on_nav(st, "next-rejection")
    assert "run more" not in out["status"] and "finished" in out["status"]
    st.close()


def _guess_all(st, lesson, said_of):
    """Guess every draft of the shown step in lesson mode (phase ▶ to verify first): the guesses made."""
    from specviz.viz.tree import chain_view

    made = []
    lesson.on_phase(st, 1)  # draft -> verify: p is known, u is not
    rec = chain_view(st.shown_step())
    while True:
        out = lesson.on_guess(st, said_of(rec, len(made)))
        if "Nothing to guess" in out["status"]:
            break
        made.append(out)
    return rec, made


def test_guess_first_bets_before_the_draw_reveals_it_and_keeps_score(tiny_env):
    from specviz.ui import lesson
    from specviz.ui import playground as pg
    from specviz.ui.lesson_view import guess_outputs
    from specviz.ui.state import PlaygroundState
    from specviz.viz.numbers import fmt_prob

    st = PlaygroundState()
    lesson.on_lesson_mode(st, True)
    list(pg.on_step(st, *_raw(tiny_env)))
    assert st.phase == ("draft", -1)
    assert guess_outputs(st)["guess_accept"]["interactive"] is False  # no p yet: nothing to bet on
    assert "Nothing to guess" in lesson.on_guess(st, "accept")["status"] and st.guesses.total == 0
    lesson.on_phase(st, 1)  # verify
    out = guess_outputs(st)
    rec = st.shown_step()
    d0 = rec.drafts[0]
    assert out["guess_accept"]["interactive"] is True and 'data-open="1"' in out["guess"]
    assert "p/q" in out["guess"] and fmt_prob(d0.p) in out["guess"]
    assert fmt_prob(d0.u) not in out["guess"]  # the draw is not told before the bet
    frame = lesson.on_guess(st, "accept")
    assert st.phase == ("decide", 0) and st.guesses.total == 1
    right = d0.verdict == "accepted"
    assert st.guesses.right == int(right)
    assert ("right" if right else "wrong") in frame["status"] and "Score" in frame["status"]
    assert fmt_prob(d0.u) in frame["guess"] and 'data-total="1"' in frame["guess"]
    assert 'data-phase="decide"' in frame["phase"]
    again = lesson.on_guess(st, "reject")  # the next draft (if any was judged after it)
    judged = [d for d in rec.drafts if d.verdict != "discarded"]
    assert st.guesses.total == min(2, len(judged)), again["status"]
    # a whole run of guesses: the score counts the verdicts guessed right
    for _ in range(3):
        lesson.on_phase(st, 1)
        while st.phase and st.phase[0] != "commit":
            lesson.on_phase(st, 1)
        lesson.on_phase(st, 1)  # on to the next step, in its draft phase
        _rec, made = _guess_all(st, lesson, lambda r, i: "reject")
    book = st.guesses
    assert book.right == sum(g.right for g in book.guesses.values()) and book.total >= 4
    assert all(g.right == (g.verdict == "rejected") for (s, _), g in book.guesses.items() if s > 0)
    list(pg.on_step(st, *_raw(tiny_env, seed=1)))  # a new run: a new score
    assert st.guesses.total == 0
    _guess_all(st, lesson, lambda r, i: "accept")
    assert st.guesses.total >= 1
    pg.on_reset(st)
    assert st.guesses.total == 0 and 'data-total="0"' in guess_outputs(st)["guess"]
    st.close()


def test_guess_first_at_greedy_asks_for_the_argmax_and_in_a_tree_walks_the_path(tiny_env):
    from specviz.ui import lesson
    from specviz.ui import playground as pg
    from specviz.ui.state import PlaygroundState

    st = PlaygroundState()
    lesson.on_lesson_mode(st, True)
    list(pg.on_step(st, *_raw(tiny_env, temperature=0.0)))
    lesson.on_phase(st, 1)
    from specviz.ui.lesson_view import guess_outputs

    assert "argmax of p" in guess_outputs(st)["guess"]
    rec, made = _guess_all(st, lesson, lambda r, i: "accept" if r.drafts[i].top_p[0][0] == r.drafts[i].token_id else "reject")
    assert made and st.guesses.right == st.guesses.total == len(made)  # the argmax is known: every guess right
    st.close()

    st = PlaygroundState()
    lesson.on_lesson_mode(st, True)
    for _ in range(6):  # a tree step: guessed along its walked path (the accepted nodes, then the rejected child)
        list(pg.on_step(st, *_raw(tiny_env, proposer="draft-tree", options="nodes=5,width=2")))
        if st.shown_step().tree:
            break
    assert st.shown_step().tree
    rec, made = _guess_all(st, lesson, lambda r, i: "accept")
    path = [d for d in rec.drafts if d.verdict != "discarded"]
    assert len(made) == len(path) and st.guesses.right == sum(d.verdict == "accepted" for d in path)
    assert "Path node" in made[0]["guess"] or len(made) == 1
    st.close()


def test_lesson_mode_is_the_pages_default_at_the_top_of_the_inspector():
    """Issue 52: a first visit opens in lesson mode (the page's state and its box agree), and the box
    is the step inspector's first control, above the step slider and the nav row; quick mode is
    one click (untick it)."""
    from specviz.ui import build_demo, lesson
    from specviz.ui.state import PlaygroundState

    demo = build_demo()
    comps = demo.config["components"]
    order = [c.get("props", {}).get("elem_id") for c in comps]
    box = comps[order.index("sv-lesson-mode")]["props"]
    assert box["value"] is True and box["label"] == "Lesson mode"
    note = comps[order.index("sv-lesson-note")]["props"]["value"]  # what it does, under it
    assert order.index("sv-lesson-mode") < order.index("sv-lesson-note") < order.index("sv-step-slider") and "quick mode" in note
    assert order.index("sv-lesson-mode") < order.index("sv-step-slider") < order.index("sv-nav")
    states = [demo.blocks[c["id"]] for c in comps if c["type"] == "state"]
    first = next(s.value for s in states if s.value == PlaygroundState.lesson_first)()
    assert first.lesson_mode and not PlaygroundState().lesson_mode  # the Python API's state stays quick
    lesson.on_lesson_mode(first, False)
    assert not first.lesson_mode
