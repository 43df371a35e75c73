"""The playground's what-if panel: the theory's curve over k from a run's own a, k, c (specviz.viz.whatif),
and its handlers (specviz.ui.whatif_view) on tiny local models."""

from __future__ import annotations

import json

import pytest

from tests.test_lesson_ui import _raw


def test_the_curve_is_the_theorys_own():
    from specviz.analysis.theory import expected_speedup, expected_speedup_drafting, expected_tokens_per_step
    from specviz.viz.whatif import whatif_curve

    curve = whatif_curve(0.7, 0.1, 1.2, 1.0, 8)
    assert [k for k, _ in curve] == list(range(1, 9))
    for k, s in curve:
        assert s == pytest.approx(expected_speedup(0.7, k, 0.1, 1.2))
    part = whatif_curve(0.7, 0.1, 1.2, 0.6, 4)
    assert part[-1][1] == pytest.approx(expected_speedup_drafting(expected_tokens_per_step(0.7, 4), 0.6, 4, 0.1, 1.2))
    assert part[-1][1] < curve[3][1]  # steps that find nothing to draft pay less


def test_the_figure_moves_with_the_sliders_and_keeps_the_run():
    from specviz.viz.whatif import RunPoint, whatif_figure, whatif_html

    run = RunPoint(a=0.6, k=4, c=0.2, v=1.3, f=1.0, measured=1.1, timed=True)
    fig = whatif_figure.spec(run, 0.9, 6, 0.05)
    names = [t["name"] for t in fig["data"]]
    assert names[0].startswith("this run (a = 0.6, c = 0.2)") and names[1].startswith("what if (a = 0.9, c = 0.05)")
    assert any(n.startswith("measured 1.10×") for n in names)
    own, mine = fig["data"][0]["y"], fig["data"][1]["y"]
    assert all(m > o for m, o in zip(mine, own))  # better a and cheaper drafts: higher everywhere
    measured = next(t for t in fig["data"] if t["name"].startswith("measured"))
    assert measured["x"] == [4] and measured["y"] == [1.1]
    note = whatif_html(run, 0.9, 6, 0.05)
    assert "At a = 0.9, k = 6, c = 0.05" in note and "1.10× measured" in note and f"{run.predicted:.2f}×" in note
    # a and c as the number boxes show them (rounded to 3 decimals): an n-gram's c is not "0.00" beside a box's 0.001
    cheap = RunPoint(a=0.8571, k=4, c=0.0012, v=1.5, f=1.0, measured=None, timed=False)
    note = whatif_html(cheap, 0.8571, 4, 0.0012)
    assert "At a = 0.857, k = 4, c = 0.001:" in note and "own a = 0.857, k = 4, c = 0.001:" in note and "0.00:" not in note
    assert whatif_figure.spec(cheap, 0.8571, 4, 0.0012)["data"][1]["name"] == "what if (a = 0.857, c = 0.001)"
    json.dumps(fig)  # plain data
    assert whatif_figure.spec(None, 0.5, 4, 0.1)["data"] == [] and 'data-ready="0"' in whatif_html(None, 0.5, 4, 0.1)
    untimed = RunPoint(a=0.6, k=4, c=0.2, v=1.0, f=0.8, measured=None, timed=False)
    assert "estimated" in whatif_html(untimed, 0.6, 4, 0.2) and "80% of steps" in whatif_figure.spec(untimed, 0.6, 4, 0.2)["layout"]["title"]["text"]


def test_the_panel_starts_from_the_run_and_keeps_what_the_user_set(tiny_env):
    from specviz.ui import playground as pg
    from specviz.ui import whatif_view as wv
    from specviz.ui.playground_view import OUTPUTS, render
    from specviz.ui.state import PlaygroundState

    st = PlaygroundState()
    assert wv.whatif_outputs(st)["whatif_note"].count('data-ready="0"') == 1
    raw = _raw(tiny_env, max_new_tokens=16)
    list(pg.on_step(st, *raw))
    out = render(st)
    assert set(wv.WHATIF_OUTPUTS) <= set(out) <= set(OUTPUTS)
    stats = st.stats()
    assert out["whatif_a"]["value"] == pytest.approx(stats.acceptance_rate, abs=1e-3) and out["whatif_k"]["value"] == 4
    assert "estimated" in out["whatif_note"]  # no target-only run yet
    list(pg.on_play(st, *raw))
    frames = list(pg.on_baseline(st, *raw))
    last = frames[-1]
    assert "measured" in last["whatif_note"] and "from the target-only run" in last["whatif_note"]
    assert "measured" in last["whatif_plot"].plot
    moved = wv.on_whatif(st, 0.95, 7, 0.01)
    assert set(moved) == {"whatif_plot", "whatif_note"} and "At a = 0.95, k = 7, c = 0.01" in moved["whatif_note"]
    again = render(st)  # the run redraws: the user's values stay, the sliders are not reset
    assert "whatif_a" not in again and "At a = 0.95" in again["whatif_note"]
    back = wv.on_whatif_reset(st)
    assert back["whatif_k"]["value"] == 4 and st.whatif is None
    wv.on_whatif(st, 0.5, 2, 0.3)
    list(pg.on_step(st, *_raw(tiny_env, seed=3)))  # a new run follows its own numbers again
    assert st.whatif is None
    st.close()


def test_the_what_if_and_learn_part_5_read_one_v_curve_and_a_run_without_one_says_fitted(tiny_env, monkeypatch):
    """Issue 52: the what-if applied the run's one v to every k (best k = 16) while the card said the verify
    pass limits and Learn part 5 taught that v(n) grows. With this machine's measured v(n) for the run's
    target (the advisor's cost model), the what-if's curve and best k are Learn part 5's at the same a and
    c, and the card is given the same curve; without one, the chart says its v is fitted from this run."""
    from specviz.learn import hardware as hw
    from specviz.ui import lesson_view
    from specviz.ui import playground as pg
    from specviz.ui import whatif_view as wv
    from specviz.viz import explain
    from specviz.viz.whatif import WHATIF_MAX_K

    st = wv.PlaygroundState()
    raw = _raw(tiny_env, max_new_tokens=16)
    list(pg.on_play(st, *raw))
    list(pg.on_baseline(st, *raw))
    flat = json.loads(wv.whatif_outputs(st)["whatif_plot"].plot)
    assert "fitted from this run" in flat["layout"]["title"]["text"]

    steep = hw.VerifyCurve("this machine (measured)", {1: 1.0, 2: 1.4, 3: 1.8, 17: 7.0}, "a test curve", True)
    asked = []
    monkeypatch.setattr(hw, "measured_curve", lambda cache_dir=None, target=None: asked.append(target) or steep)
    run = wv._run(st)
    assert asked[-1] == st.settings.target and run.v_at and run.v_of(3) == pytest.approx(steep.v(4))
    fig = json.loads(wv.whatif_outputs(st)["whatif_plot"].plot)
    assert "measured on this machine" in fig["layout"]["title"]["text"]
    best = next(int(t["name"].split("= ")[1].split()[0]) for t in fig["data"] if t["name"].startswith("best k"))
    a, c = round(run.a, 3), round(run.c, 3)  # the sliders' values
    assert best == hw.speedup_vs_k(a, c, steep, WHATIF_MAX_K).best_k  # Learn part 5 at the same a and c
    seen = {}
    real = explain.explain_run
    monkeypatch.setattr(lesson_view, "explain_run", lambda *args, **kw: seen.update(kw) or real(*args, **kw))
    lesson_view.why_html(st)
    assert dict(seen["k_curve"])[best] == max(s for _k, s in seen["k_curve"])  # the card: the chart's curve and star
    st.close()


CURVES = {
    "a steep measured v(n)": {1: 1.0, 2: 1.4, 3: 1.8, 17: 7.0},  # the best k below the run's k = 4
    "a flat measured v(n)": {1: 1.0, 2: 1.02, 17: 1.1},  # the best k above it
    "no measured v(n)": None,  # the run's own v at every k, labelled fitted
}


@pytest.mark.parametrize("proposer", ["draft", "ngram"])  # the tiny defaults' (c near 1) and the app's default (c near 0, f < 1)
@pytest.mark.parametrize("curve", list(CURVES))
def test_the_what_if_the_card_and_learn_part_5_name_one_best_k_for_the_default_run(tiny_env, monkeypatch, curve,
                                                                                  proposer):
    """Issue 52's "one story", read where a user reads it: the what-if chart's star, the card's best k
    (its data-best-k and its words) and Learn part 5 given the same run ("use my playground run": the
    run's a, c, f on the v(n) the chart reads) name one k for the default run, whatever this machine's
    v(n) is. The card said "a smaller k keeps the pass narrow" beside a chart whose best k was 16."""
    import re

    from specviz.learn import hardware as hw
    from specviz.ui import learn_hardware_tab as lt
    from specviz.ui import lesson_view
    from specviz.ui import playground as pg
    from specviz.ui import whatif_view as wv

    v = None if CURVES[curve] is None else hw.VerifyCurve("this machine (measured)", CURVES[curve], "a test curve", True)
    monkeypatch.setattr(hw, "measured_curve", lambda cache_dir=None, target=None: v)
    st = wv.PlaygroundState()
    raw = _raw(tiny_env, max_new_tokens=40, proposer=proposer)  # k = 4
    list(pg.on_play(st, *raw))
    list(pg.on_baseline(st, *raw))
    fig = json.loads(wv.whatif_outputs(st)["whatif_plot"].plot)
    star = next(int(t["name"].split("= ")[1].split()[0]) for t in fig["data"] if t["name"].startswith("best k"))
    card = lesson_view.why_html(st)
    a_, c_, f_, words, _fig = lt.on_hardware_run(st)
    learn = int(re.search(r'data-best-k="(\d+)"', words).group(1))
    assert learn == lt.run_lesson(st).cpu.best_k == star, (curve, learn, star)
    assert f"best k on this {'machine' if v else 'run'} is {star}" in words or f"k = {star}" in words, words
    if v is None:
        assert "fitted from this run" in fig["layout"]["title"]["text"] and "data-best-k" not in card
        assert any(t["name"] == f"best k = {star} if v stayed flat" for t in fig["data"])  # not told as advice
        assert "smaller k keeps the pass narrow" not in card  # no promise the flat chart cannot show
        st.close()
        return
    assert "measured on this machine" in fig["layout"]["title"]["text"]
    said = int(re.search(r'data-best-k="(\d+)"', card).group(1))
    assert said == star, (curve, said, star)
    named = {int(k) for k in re.findall(r"(?:peaks at|still the best k|, k = )\D{0,30}?k = (\d+)", card)}
    assert named <= {star, 4}, (named, card)  # no other k advised
    if star < 4:
        assert f"peaks at k = {star}" in card  # the smaller k it advises is the star
    else:
        assert "A smaller k keeps the pass narrow" not in card  # a smaller k does not pay on this curve
    st.close()


@pytest.mark.parametrize("rule", ["exact", "typical"])
def test_a_typical_acceptance_run_is_marked_lossy_on_the_what_if(rule):
    """Issue 52: a typical-acceptance run's a and speedup are the LOSSY rule's: the chart's title, its
    measured point and the note say so; an exact run's do not."""
    from specviz.viz.whatif import run_point, whatif_figure, whatif_html
    from tests.test_lesson_viz import _d, _stats, _step

    steps = [_step(i, [_d(0, 10, " the", 0.8, 0.9, 0.2, "accepted"), _d(1, 11, " cat", 0.7, 0.1, 0.6, "rejected")], 1,
                   rule=rule) for i in range(6)]
    run = run_point(steps, _stats(6, 12, 6, 12, 1.0, 30.0, 120.0, 6.0), _stats(12, 0, 0, 12, 1.5, 0.0, 1200.0, 0.0), 2)
    assert run is not None and run.lossy == (rule == "typical") and run.measured is not None
    fig = whatif_figure.spec(run, run.a, run.k, run.c)
    title, names = fig["layout"]["title"]["text"], [t["name"] for t in fig["data"]]
    note = whatif_html(run, run.a, run.k, run.c)
    marked = ["LOSSY" in title, any(n.startswith("measured") and n.endswith("LOSSY") for n in names), "LOSSY" in note,
              'data-lossy="true"' in note]
    assert marked == [rule == "typical"] * 4, (title, names, note)
