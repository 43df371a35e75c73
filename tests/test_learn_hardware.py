"""The Learn tab's part 5 (specviz/learn/hardware.py, viz.learn.hardware_figure,
ui/learn_hardware_tab.py): the same a and c on this CPU's verify curve and on a flat GPU-like one."""

from __future__ import annotations

import json

import plotly.graph_objects as go
import pytest
import torch

from specviz.analysis import costmodel as C
from specviz.analysis import theory
from specviz.learn import hardware as hw
from specviz.runtime.cpu import machine_id
from specviz.viz.learn import hardware_figure


def test_the_curves_and_their_sources():
    assert hw.GPU_LIKE.v(1) == hw.GPU_LIKE.v(9) == hw.GPU_LIKE.v(17) == 1.0
    assert "illustration" in hw.GPU_LIKE.name and "Leviathan" in hw.GPU_LIKE.source and not hw.GPU_LIKE.measured
    cpu = hw.DOCUMENTED_CPU
    assert cpu.v(1) == 1.0 and cpu.v(5) == pytest.approx(1.564, abs=1e-3) and cpu.v(17) == pytest.approx(1.752, abs=1e-3)
    assert cpu.v(3) == pytest.approx((1.0 + cpu.v(5)) / 2)  # linear between the documented points
    assert "docs/advisor.md" in cpu.source and not cpu.measured


def test_speedup_is_theorys_formula_with_v_at_k_plus_one():
    kc = hw.speedup_vs_k(0.7, 0.1, hw.DOCUMENTED_CPU)
    assert kc.ks == tuple(range(1, hw.K_MAX + 1))
    for k, s, e in zip(kc.ks, kc.speedup, kc.tokens):
        assert s == pytest.approx(theory.expected_speedup(0.7, k, 0.1, hw.DOCUMENTED_CPU.v(k + 1)))
        assert e == pytest.approx(theory.expected_tokens_per_step(0.7, k))
    flat = hw.speedup_vs_k(0.7, 0.1, hw.GPU_LIKE)
    assert flat.best_k == theory.best_k(0.7, 0.1, 1.0, hw.K_MAX)[0]  # v = 1 everywhere: part 3's calculator
    with pytest.raises(ValueError, match="acceptance rate"):
        hw.speedup_vs_k(1.5, 0.1, hw.GPU_LIKE)


def test_the_best_k_here_is_smaller_than_on_a_gpu():
    lesson = hw.hardware_lesson(0.7, 0.1)
    # by hand: the CPU's v(3) = 1.28, v(4) = 1.42 against 1 on the GPU-like curve
    assert (lesson.cpu.best_k, lesson.gpu.best_k) == (2, 4)
    assert lesson.cpu.best_speedup == max(lesson.cpu.speedup) and lesson.cpu.best_speedup < lesson.gpu.best_speedup
    assert "best k on a CPU is 2" in lesson.sentence and "on a GPU the best k is 4" in lesson.sentence and "v(4) = 1.42" in lesson.sentence
    same = hw.hardware_lesson(0.8, 0.05)
    assert same.cpu.best_k == same.gpu.best_k and "both curves peak" in same.sentence


def test_a_curve_where_nothing_pays_and_one_that_flattens_are_said():
    steep = hw.VerifyCurve("a busy CPU (test)", {1: 1.0, 2: 2.5, 17: 3.0}, "made up", False)
    lesson = hw.HardwareLesson(0.7, 0.1, hw.speedup_vs_k(0.7, 0.1, steep), hw.speedup_vs_k(0.7, 0.1, hw.GPU_LIKE))
    assert lesson.cpu.best_speedup < 1 and "no k pays on a busy CPU" in lesson.sentence and "v(2) = 2.50" in lesson.sentence
    early = hw.VerifyCurve("an odd CPU (test)", {1: 1.0, 2: 1.3, 17: 1.35}, "made up", False)
    lesson = hw.HardwareLesson(0.8, 0.02, hw.speedup_vs_k(0.8, 0.02, early), hw.speedup_vs_k(0.8, 0.02, hw.GPU_LIKE, 6))
    assert lesson.cpu.best_k > lesson.gpu.best_k and "then flattens" in lesson.sentence


def _write_cost(cache, machine: str, t1=0.1, slope=0.02, target="tiny") -> None:
    ts = {n: t1 + slope * (n - 1) for n in range(1, 18)}
    cost = C.CostModel(f"k-{machine}-{target}", machine, target, "float32", torch.__version__, 1, 64, None, ts, {2: ts[2]}, 0.0,
                       0.05)
    path = C.cache_path(cache, cost.key)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(cost.to_dict()))


def test_this_machines_cached_cost_model_replaces_the_documented_curve(tmp_path):
    assert hw.cpu_curve(tmp_path) is hw.DOCUMENTED_CPU and hw.cpu_curve(None) is hw.DOCUMENTED_CPU
    _write_cost(tmp_path, "another machine")
    assert hw.cpu_curve(tmp_path) is hw.DOCUMENTED_CPU  # measured elsewhere: not this machine's
    _write_cost(tmp_path, machine_id())
    curve = hw.cpu_curve(tmp_path)
    assert curve.measured and curve.name == "this machine (measured)" and machine_id() in curve.source
    assert curve.v(1) == 1.0 and curve.v(11) == pytest.approx(3.0)  # (0.1 + 0.2) / 0.1
    lesson = hw.hardware_lesson(0.7, 0.1, tmp_path)
    # by hand: k = 1, 2, 3 give 1.7 / 1.3, 2.19 / 1.6 and 2.533 / 1.9 (c k + v(k + 1), v rising 0.2 a position)
    assert lesson.cpu.curve.measured and lesson.cpu.best_k == 2 and lesson.cpu.best_speedup == pytest.approx(2.19 / 1.6)



def test_a_targets_curve_is_its_own_latest_cost_model_whatever_was_measured_since(tmp_path):
    """The what-if and Learn part 5 read this target's v(n): another target's cost model written
    later (a walk's tiny model after gemma's) does not hide it (it did: no curve, one v at every k)."""
    import os
    import time

    _write_cost(tmp_path, machine_id(), slope=0.02, target="gemma")
    old = time.time() - 60
    for f in (tmp_path / "advisor").glob("*.json"):
        os.utime(f, (old, old))
    _write_cost(tmp_path, machine_id(), slope=0.05, target="tiny")  # written since
    assert hw.measured_curve(tmp_path, "gemma").v(11) == pytest.approx(3.0)
    assert hw.measured_curve(tmp_path, "tiny").v(11) == pytest.approx(6.0)
    assert hw.measured_curve(tmp_path, "other") is None and hw.measured_curve(tmp_path).v(11) == pytest.approx(6.0)

def test_the_figure_marks_both_optima():
    lesson = hw.hardware_lesson(0.7, 0.1)
    fig = hardware_figure(lesson)
    go.Figure(fig.to_dict())  # valid Plotly
    stars = [t for t in fig.data if t.marker is not None and t.marker.symbol == "star"]
    assert [list(t.x) for t in stars] == [[2], [4]] and all(t.xaxis == "x2" for t in stars)
    names = [t.name for t in fig.data]
    assert any("a GPU (illustration)" in n for n in names) and any("a CPU (documented)" in n for n in names)
    assert fig.layout.xaxis2.domain[0] > fig.layout.xaxis.domain[1]


def test_the_handler_says_the_optima_and_the_sources(monkeypatch, tmp_path):
    lt = pytest.importorskip("specviz.ui.learn_hardware_tab")
    monkeypatch.setenv("SPECVIZ_CACHE_DIR", str(tmp_path))
    words, fig = lt.on_hardware(0.7, 0.1)
    assert "best k on a CPU is 2" in words and "Leviathan" in words and "docs/advisor.md" in words
    assert isinstance(fig, go.Figure)
    words, fig = lt.on_hardware(2.0, 0.1)
    assert "sv-msg-error" in words and "acceptance rate" in words
