"""ZeroGPU: with a stand-in ``spaces`` package that behaves like a ZeroGPU Space (the decorated
function's arguments and result cross a pickle boundary, as they cross into and back from the
forked GPU worker, and nothing else comes back), every tab still gives the same results as on a
CPU, and a visitor's mistake still reads as a clear message."""

from __future__ import annotations

import pickle
import sys
import types

import pytest

from specviz.app.replay import Replay
from specviz.ui import zerogpu
from tests.support import app_server


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory):
    target, draft = app_server.make_tiny_models(tmp_path_factory.mktemp("zerogpu-models"))
    return {"target": target, "draft": draft}


@pytest.fixture
def env(monkeypatch):
    monkeypatch.setenv("SPECVIZ_ALLOW_LOCAL_PATHS", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for var in ("SPECVIZ_MAX_PROMPT_TOKENS", "SPECVIZ_MAX_NEW_TOKENS", "SPECVIZ_MAX_K"):
        monkeypatch.delenv(var, raising=False)


def _fake_spaces(zero_gpu: bool):
    calls: list[tuple[str, int]] = []
    spaces, config = types.ModuleType("spaces"), types.ModuleType("spaces.config")
    config.Config = type("Config", (), {"zero_gpu": zero_gpu})

    def GPU(task=None, *, duration=None, size=None):
        def decorate(fn):
            if not zero_gpu:
                return fn

            def in_worker(*args, **kwargs):
                args, kwargs = pickle.loads(pickle.dumps((args, kwargs)))  # into the fork
                seconds = duration(*args, **kwargs) if callable(duration) else duration
                calls.append((getattr(args[0], "__name__", "?"), seconds))
                return pickle.loads(pickle.dumps(fn(*args, **kwargs)))  # and back

            return in_worker

        return decorate if task is None else decorate(task)

    spaces.GPU, spaces.config = GPU, config
    return spaces, config, calls


@pytest.fixture
def zero(monkeypatch):
    spaces, config, calls = _fake_spaces(True)
    monkeypatch.setitem(sys.modules, "spaces", spaces)
    monkeypatch.setitem(sys.modules, "spaces.config", config)
    return calls


def _raw(m, **change):
    args = dict(target=m["target"], proposer="draft", draft=m["draft"], k=3, temperature=1.0, top_p=1.0, top_k=0,
                seed=7, max_new_tokens=24, prompt=app_server.TINY_PROMPT, chat=True, schedule="constant", layers=1)
    args.update(change)
    return tuple(args.values())


def _play(raw):
    from specviz.ui import playground as pg
    from specviz.ui.state import PlaygroundState

    st = PlaygroundState()
    list(pg.on_play(st, *raw))
    list(pg.on_baseline(st, *raw))
    return st


def test_active_only_on_a_zerogpu_space(monkeypatch):
    monkeypatch.setitem(sys.modules, "spaces", None)  # not installed
    monkeypatch.setitem(sys.modules, "spaces.config", None)
    assert not zerogpu.active()
    spaces, config, calls = _fake_spaces(False)  # installed, but a CPU (or a dedicated GPU) Space
    monkeypatch.setitem(sys.modules, "spaces", spaces)
    monkeypatch.setitem(sys.modules, "spaces.config", config)
    assert not zerogpu.active() and zerogpu.on_gpu(sorted, [3, 1, 2]) == [1, 2, 3] and calls == []


def test_playground_records_on_the_gpu_and_replays_the_same_run(models_dir, env, monkeypatch):
    on_cpu = _play(_raw(models_dir))
    spaces, config, calls = _fake_spaces(True)
    monkeypatch.setitem(sys.modules, "spaces", spaces)
    monkeypatch.setitem(sys.modules, "spaces.config", config)
    on_zero = _play(_raw(models_dir))
    assert [name for name, _ in calls] == ["record_run", "record_run"]  # the run, then the target-only baseline
    assert on_zero.message[1] != "error", on_zero.message
    assert isinstance(on_zero.session, Replay) and on_zero.session.done
    cpu_ids = [t for s in on_cpu.steps for t in s.committed]
    assert [t for s in on_zero.steps for t in s.committed] == cpu_ids  # same seed, same tokens
    assert [t for s in on_zero.baseline_steps for t in s.committed] == [t for s in on_cpu.baseline_steps for t in s.committed]
    a, b = on_cpu.stats(), on_zero.stats()
    assert (a.steps, a.drafted, a.accepted, a.new_tokens, a.target_forwards) == (
        b.steps, b.drafted, b.accepted, b.new_tokens, b.target_forwards)
    assert on_zero.comparable_baseline() is not None and on_zero.trace_path
    on_cpu.close(), on_zero.close()


def test_playground_steps_one_at_a_time_and_bad_input_reads_clearly(models_dir, env, zero, monkeypatch):
    from specviz.ui import playground as pg
    from specviz.ui.state import PlaygroundState

    st = PlaygroundState()
    for n in (1, 2, 3):
        list(pg.on_step(st, *_raw(models_dir)))
        assert len(st.steps) == n and st.message[1] != "error", st.message
    assert len(zero) == 1  # recorded once, replayed step by step
    monkeypatch.setenv("SPECVIZ_MAX_PROMPT_TOKENS", "10")  # checked in the worker, after the tokenizer loads
    frames = list(pg.on_step(st, *_raw(models_dir, seed=8)))
    assert st.message[1] == "error" and "SPECVIZ_MAX_PROMPT_TOKENS" in st.message[0], st.message
    assert "Traceback" not in frames[-1]["status"] and len(st.steps) == 3  # the recorded run is untouched
    st.close()


def test_learn_and_bench_run_in_the_gpu_worker(models_dir, env, zero):
    from specviz.ui import bench_tab as bt
    from specviz.ui import learn_tab as lt

    html, fig = list(lt.on_model_sample(models_dir["target"], lt.DRAFT_MODEL, models_dir["draft"], "the cat",
                                        "exact", 1.0, 1.0, 500, 0))[-1]
    assert "data-tv-spec" in html and fig is not None, html
    state = bt.BenchState()
    frames = list(bt.on_run(state, models_dir["target"], ["ngram"], [2], bt.CUSTOM, [], "the cat sat on the mat",
                            1, 8, 0.0, False))
    assert [name for name, _ in zero] == ["compare_on_model", "sweep_report"]
    assert zero[1][1] == zerogpu.SWEEP_SECONDS
    assert state.report and state.report["rows"] and "Done in" in str(frames[-1])
    state.close()
