"""A speedup's noise band (specviz.analysis.noise): a percentile bootstrap over the runs' own step
timings, on hand-made timings; and the "why this speedup?" card saying "within noise"."""

from __future__ import annotations

import pytest

from specviz.analysis.noise import speedup_interval


def test_steady_timings_give_a_tight_band_around_the_ratio():
    # 2 tokens per 10 ms step against 1 token per 10 ms: exactly 2x, every resample alike
    band = speedup_interval([2] * 20, [10.0] * 20, [1] * 40, [10.0] * 40)
    assert band.speedup == pytest.approx(2.0) and band.low == pytest.approx(2.0) and band.high == pytest.approx(2.0)
    assert not band.within_noise and band.words() == "90% interval 2.00–2.00×"
    # the one-off prefill counts in the ratio but is not resampled
    with_prefill = speedup_interval([2] * 20, [10.0] * 20, [1] * 40, [10.0] * 40, spec_fixed_ms=200.0)
    assert with_prefill.speedup == pytest.approx((40 / 400) / (40 / 400))


def test_noisy_timings_widen_the_band_and_a_band_over_one_is_within_noise():
    # a 1.1x run whose steps took 2 to 40 ms: the band spans 1.0x
    spec_ms = [2.0, 40.0, 3.0, 35.0, 4.0, 30.0, 5.0, 38.0] * 3
    base_ms = [10.0, 12.0, 9.0, 11.0] * 12
    tokens = [2] * len(spec_ms)
    band = speedup_interval(tokens, spec_ms, [1] * len(base_ms), base_ms)
    assert band.low < 1.0 < band.high and band.within_noise
    assert band.low <= band.speedup <= band.high
    assert band == speedup_interval(tokens, spec_ms, [1] * len(base_ms), base_ms)  # seeded: the same band every time
    wider = speedup_interval(tokens, spec_ms, [1] * len(base_ms), base_ms, level=0.99)
    assert wider.low <= band.low and wider.high >= band.high
    # the same mean with steady steps: clear of 1.0x
    steady = speedup_interval(tokens, [sum(spec_ms) / len(spec_ms)] * len(spec_ms), [1] * len(base_ms), base_ms)
    assert steady.speedup == pytest.approx(band.speedup) and not steady.within_noise


@pytest.mark.parametrize("args, words", [
    (([], [], [1], [1.0]), "no steps"),
    (([1, 2], [1.0], [1], [1.0]), "one token count per step time"),
    (([1], [-1.0], [1], [1.0]), ">= 0"),
    (([0], [1.0], [1], [1.0]), "committed tokens"),
])
def test_bad_timings_are_named(args, words):
    with pytest.raises(ValueError, match=words):
        speedup_interval(*args)


def test_the_card_says_within_noise_when_the_band_spans_one():
    from specviz.analysis.noise import SpeedupInterval
    from specviz.viz.explain import explain_speedup

    common = dict(a=0.8, k=4, tau=3.0, tokens=60, target_forwards=21, c=0.1, v=1.2, speedup=1.3)
    noisy = explain_speedup(**common, band=SpeedupInterval(1.3, 0.9, 1.7, 0.9, 2000))
    assert "within noise" in noisy.headline and "90% interval 0.90–1.70×" in noisy.headline
    assert noisy.verdict == "even" and 'data-noise="within"' in noisy.html() and not noisy.advice.startswith("It pays")
    clear = explain_speedup(**common, band=SpeedupInterval(1.3, 1.2, 1.4, 0.9, 2000))
    assert clear.verdict == "faster" and "within noise" not in clear.headline and "1.20–1.40×" in clear.headline
    assert 'data-noise="clear"' in clear.html()
    assert "interval" not in explain_speedup(**common).headline  # no steps to resample: no band


def test_a_playground_run_and_its_target_only_run_show_the_band(tiny_env):
    from specviz.ui import playground as pg
    from specviz.ui.lesson_view import why_html
    from specviz.ui.state import PlaygroundState
    from tests.test_lesson_ui import _raw

    st = PlaygroundState()
    raw = _raw(tiny_env, max_new_tokens=16)
    list(pg.on_play(st, *raw))
    assert "data-noise" not in why_html(st)  # no target-only run yet
    list(pg.on_baseline(st, *raw))
    card = why_html(st)
    assert 'data-noise="' in card and "interval" in card
    low = float(card.split('data-low="')[1].split('"')[0])
    high = float(card.split('data-high="')[1].split('"')[0])
    measured = st.stats().tokens_per_s / st.comparable_baseline().tokens_per_s
    assert low <= measured + 1e-9 and measured <= high + 1e-9
    st.close()
