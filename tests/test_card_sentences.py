"""Every sentence the lesson's cards say, checked against the numbers it explains (issue 52): the
"why this speedup?" card walked through its branches (each limit, each verdict, a measurement above
and below its decode loop, greedy and sampled, LOSSY, an n-gram that misses), the step summaries'
counts in the singular, and Learn part 5's opening text against its title."""

from __future__ import annotations

import itertools
import re

import pytest

from specviz.analysis.noise import SpeedupInterval
from specviz.analysis.theory import expected_tokens_per_step
from specviz.viz import explain

GRID = list(itertools.product(
    (0.2, 0.6, 0.96),          # a
    (1, 4),                    # k
    (0.001, 0.05, 0.5),        # c
    (1.05, 1.7, 3.0),          # v
    (None, 0.5, 0.92, 1.3, 6.0),  # measured speedup (None: no target-only run yet)
    (0.0, 1.0),                # temperature
    (1.0, 0.4),                # drafted fraction
))


def _story(a, k, c, v, speedup, temperature, f, *, lossy=False, costs=True, band=None):
    tau = 1 + f * (expected_tokens_per_step(a, k) - 1)
    tokens = 60
    forwards = round(tokens / tau) + 1
    return explain.explain_speedup(a=a, k=k, tau=tau, tokens=tokens, target_forwards=forwards,
                                   c=c if costs else None, v=v if costs else None, speedup=speedup,
                                   drafted_fraction=f, proposer="ngram" if f < 1 else "int8 draft",
                                   temperature=temperature, lossy=lossy, band=band), tau


def _num(s: str) -> float:
    return float(s)


def test_each_sentence_of_the_card_agrees_with_its_numbers():
    """Every branch of the card (GRID: each limit and verdict comes up), each sentence's numbers."""
    limits, verdicts = set(), set()
    for case in GRID:
        story = _check_card(*case)
        limits.add(story.limit)
        verdicts.add(story.verdict)
    assert limits >= {"a", "c", "v", "coverage", "overhead"} and verdicts >= {"faster", "even", "slower"}


def _check_card(a, k, c, v, speedup, temperature, f):
    s, tau = _story(a, k, c, v, speedup, temperature, f)
    text = s.text
    # words: never "all 1 drafts", "1 draft tokens", "1 tokens"; never a temperature to lower at T = 0
    assert not re.search(r"\ball 1 drafts\b|(?<![\d.])1 draft tokens\b|(?<![\d.])1 tokens\b", text), text
    if k == 1:  # no smaller k to take
        assert not re.search(r"smaller k|Lower k", text), text
    if temperature == 0:
        assert "temperature" not in text, text
    # acceptance, as the card counts it
    assert f"accepted {a:.0%} of the time" in text
    if "thrown away" in text:
        assert f"{1 - a:.0%} of the drafts are thrown away" in text
    # the cost sentence's arithmetic: k' x c + v = cost; tau / cost = the decode loop's speedup
    k_eff = k * f
    cost = k_eff * c + v
    m = re.search(r"x (\d+\.\d\d) \+ (\d+\.\d\d) = (\d+\.\d\d) target steps for .*?: (\d+\.\d\d) / (\d+\.\d\d) = "
                  r"(\d+\.\d\d)x in the decode loop", text)
    assert m, text
    assert m.group(1) == f"{c:.2f}" and m.group(2) == f"{v:.2f}" and m.group(3) == f"{cost:.2f}" == m.group(5)
    assert m.group(4) == f"{tau:.2f}" and m.group(6) == f"{tau / cost:.2f}" == f"{s.predicted:.2f}"
    # a measurement set beside the decode loop: "below" only when it is below, "above" only when above
    gap = re.search(r"Measured (\d+\.\d\d)x, (below|above) the (\d+\.\d\d)x of the decode loop", text)
    if speedup is not None and abs(speedup - s.predicted) > 0.1 * s.predicted:
        assert gap, text
    if gap:
        measured, where, loop = _num(gap.group(1)), gap.group(2), _num(gap.group(3))
        assert measured == round(speedup, 2) and loop == round(s.predicted, 2)
        assert (measured < loop) == (where == "below"), text
        assert where == "below" or "also counts" not in gap.string[gap.start():gap.start() + 200]
    # the headline's verdict is the measured one (else the decode loop's)
    shown = speedup if speedup is not None else s.predicted
    if "pays here" in s.headline or s.advice.startswith("It pays"):
        assert shown >= explain.FASTER, text
    if "slower than target-only" in s.headline:
        assert shown < explain.SLOWER, text
    # what each limit's advice quotes
    if s.limit == "v":
        assert f"scoring {k + 1} tokens costs {v:.2f} decode steps" in s.advice
    if s.limit == "c":
        assert f"cost{'s' if k == 1 else ''} {k * c:.2f} target steps a round" in s.advice
    if s.limit == "coverage":
        assert f"{1 - f:.0%} of the steps drafted nothing" in s.advice
    if s.limit == "overhead":
        assert f"which alone runs at {s.predicted:.2f}x" in s.advice and shown < explain.SLOWER
    return s


@pytest.mark.parametrize("costs", [True, False])
def test_a_lossy_run_says_lossy_first_and_an_exact_one_never(costs):
    lossy, _ = _story(0.9, 4, 0.05, 1.3, 1.5, 1.0, 1.0, lossy=True, costs=costs)
    exact, _ = _story(0.9, 4, 0.05, 1.3, 1.5, 1.0, 1.0, costs=costs)
    assert lossy.headline.startswith("LOSSY (typical acceptance") and 'data-lossy="true"' in lossy.html()
    assert "LOSSY" not in exact.text and "data-lossy" not in exact.html()


def test_within_noise_is_even_whichever_side_of_the_decode_loop():
    s, _ = _story(0.96, 4, 0.05, 1.3, 1.2, 1.0, 1.0, band=SpeedupInterval(1.2, 0.9, 1.5, 0.9, 2000))
    assert s.verdict == "even" and "within noise" in s.headline and "pays here" not in s.headline


def test_step_summaries_count_one_draft_in_the_singular():
    import html

    from specviz.viz.phases import step_phase_html
    from specviz.viz.tokens import step_summary_text, tokens_html
    from tests.test_lesson_viz import _d, _step

    bonus = _step(0, [_d(0, 5, "a", 0.9, 0.8, 0.1, "accepted")], 1, next_text="b", next_kind="bonus")
    text = step_summary_text(bonus)
    assert "the 1 draft accepted" in text and "all 1 drafts" not in text
    tip = html.unescape(tokens_html("", [bonus]))  # the bonus token's tooltip
    assert "bonus token: the 1 draft accepted" in tip and "all 1 drafts" not in tip
    assert "its 1 draft gives p at 2 positions" in html.unescape(step_phase_html(bonus, "verify"))
    two = _step(0, [_d(0, 5, "a", 0.9, 0.8, 0.1, "accepted"), _d(1, 6, "c", 0.9, 0.8, 0.1, "accepted")], 2,
                next_text="b", next_kind="bonus")
    assert "all 2 drafts accepted" in step_summary_text(two)
    one_rejected = _step(0, [_d(0, 5, "a", 0.9, 0.1, 0.5, "rejected")], 0)
    assert "0 of 1 draft accepted" in step_summary_text(one_rejected)


def test_learn_part_5_opens_where_its_title_holds(monkeypatch, tmp_path):
    """The title says the best k differs between this CPU and a GPU: the opening a and c are a point
    where it does, on the documented curve and on a measured one that agrees with the GPU at the
    first preferred point (as a cached cost model did in issue 52)."""
    from specviz.learn import hardware as hw
    from specviz.ui import learn_hardware_tab as tab

    for curve in (hw.DOCUMENTED_CPU,
                  hw.VerifyCurve("this machine (measured)", {1: 1.0, 2: 1.02, 17: 1.3}, "a flat CPU", True)):
        monkeypatch.setattr(hw, "cpu_curve", lambda cache_dir=None, c=curve: c)
        a, c = hw.default_point(tmp_path)
        lesson = hw.hardware_lesson(a, c, tmp_path)
        assert lesson.cpu.best_k != lesson.gpu.best_k, (curve.name, a, c)
        words, _ = tab.on_hardware(a, c)
        assert "both curves peak" not in words
        assert f"the best k on {curve.name.split(' (')[0]} is {lesson.cpu.best_k}" in words or "no k pays" in words
    flat = hw.VerifyCurve("this machine (measured)", {1: 1.0, 17: 1.0}, "as flat as the GPU", True)
    monkeypatch.setattr(hw, "cpu_curve", lambda cache_dir=None: flat)
    assert hw.default_point(tmp_path) == hw.START_POINTS[0]  # nowhere different: the first point, and it says so
    assert "both curves peak" in tab.on_hardware(*hw.START_POINTS[0])[0]


@pytest.mark.parametrize("a, c, v", [(0.8, 0.01, 1.2), (0.6, 0.5, 1.1)])  # acceptance-limited, then draft-cost-limited
def test_the_card_never_advises_a_smaller_k_where_the_what_if_peaks_at_a_larger_one(a, c, v):
    """Issue 52 (the persona walk): "a smaller k keeps more of them" beside "the what-if below peaks at
    k = 7" told a teacher both ways. With the curve's star past this k no smaller k is offered; with
    it below, it still is."""
    k, tau = 4, expected_tokens_per_step(a, 4)
    common = dict(a=a, k=k, tau=tau, tokens=60, target_forwards=round(60 / tau) + 1, c=c, v=v, speedup=1.3,
                  proposer="int8 draft", temperature=0.8)
    up = explain.explain_speedup(**common, k_curve=[(kk, 1.0 + 0.05 * kk) for kk in range(1, 9)])  # peaks at k = 8
    assert up.limit in ("a", "c") and up.numbers["best_k"] == 8
    assert "smaller k" not in up.advice and "Lower k" not in up.advice and "peaks at k = 8" in up.advice, up.advice
    down = explain.explain_speedup(**common, k_curve=[(kk, 2.0 - 0.1 * kk) for kk in range(1, 9)])  # peaks at k = 1
    assert "smaller k" in down.advice or "Lower k" in down.advice, down.advice
