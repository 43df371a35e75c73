"""The start-up preparation (specviz.app.warmup): the default configuration's models loaded and
their static decode steps built in the background; a run that needs them meanwhile waits and
says what is being prepared; a step built once is not announced again. No timing is asserted."""

from __future__ import annotations

import threading

import pytest

from specviz.app import runs, warmup
from specviz.runtime import static_decode
from tests.support.tiny import loaded, make_llama


@pytest.fixture
def fresh_startup(monkeypatch):
    """A StartUp of this test's own, in place of the process's."""
    s = warmup.StartUp()
    monkeypatch.setattr(warmup, "STARTUP", s)
    monkeypatch.setattr(runs, "STARTUP", s)
    return s


def _model(tokenizer, name, seed):
    return loaded(make_llama(len(tokenizer), 32, 1, seed=seed), tokenizer, name)


def test_prepare_loads_tunes_then_builds_the_static_step_and_a_run_then_waits_for_nothing(tokenizer, fresh_startup,
                                                                                         monkeypatch):
    from specviz import tuning
    from specviz.runtime import state

    model = _model(tokenizer, "tiny-warm", 11)
    assert static_decode.supports(model.model) is None  # a float Llama on the CPU: served by the static step
    said: list[str] = []
    tuned = []
    real = tuning.tune
    monkeypatch.setattr(tuning, "tune", lambda m, *a, **k: tuned.append(state.of(m).decoder is None) or real(m, *a, **k))
    thread = warmup.prepare(["tiny-warm"], load=lambda name, progress=None: model, say=said.append)
    thread.join(120)
    assert not fresh_startup.running and fresh_startup.stage is None and not fresh_startup.errors
    assert list(fresh_startup.seconds) == ["load tiny-warm", "tune tiny-warm", "static tiny-warm"]
    assert tuned == [True]  # the plan is made before the decode step that reads it
    assert said[0] == "loading tiny-warm" and said[1].startswith("tuning tiny-warm's kernels") and "fast decode step" in said[2]
    assert said[-1].startswith("start-up preparation done")
    assert static_decode.warm(model.model) == 0.0  # built already: nothing left for the first run
    run_said: list[str] = []
    assert fresh_startup.wait(["tiny-warm"], run_said.append) == 0.0 and run_said == []
    assert runs.warm_static_steps(model, None, run_said.append) == 0.0 and run_said == []  # not announced again


def test_a_run_during_the_preparation_waits_and_says_what_is_being_prepared(tokenizer, fresh_startup):
    model = _model(tokenizer, "tiny-slow", 12)
    release = threading.Event()

    def slow_load(name, progress=None):
        release.wait(30)
        return model

    fresh_startup.start(["tiny-slow"], slow_load, lambda msg: None)
    assert fresh_startup.running and "loading tiny-slow" in fresh_startup.line()
    assert fresh_startup.wait(["another-model"], lambda msg: None) == 0.0  # a run of other models does not wait
    said, waiter = _wait_until_it_speaks(fresh_startup, ["tiny-slow"], release)
    assert not waiter.is_alive() and not fresh_startup.running
    assert said and said[0].startswith("Waiting for the start-up preparation of the default configuration: loading tiny-slow")
    assert fresh_startup.line() is None


def test_the_rehearsal_runs_last_and_does_not_wait_for_its_own_preparation(tokenizer, fresh_startup):
    model = _model(tokenizer, "tiny-reh", 15)
    seen: list = []

    def rehearse(say):
        seen.append((fresh_startup.stage, fresh_startup.wait(["tiny-reh"], say), list(fresh_startup.seconds)))

    thread = warmup.prepare(["tiny-reh"], load=lambda name, progress=None: model, say=lambda msg: None, rehearse=rehearse)
    thread.join(120)
    assert not thread.is_alive() and not fresh_startup.errors
    stage, waited, before = seen[0]
    assert stage.startswith("running the default configuration once, untimed") and waited == 0.0
    assert before == ["load tiny-reh", "tune tiny-reh", "static tiny-reh"] and "rehearsal" in fresh_startup.seconds


def test_a_run_announces_a_static_step_it_builds_itself(tokenizer):
    model = _model(tokenizer, "tiny-cold", 13)
    said: list[str] = []
    runs.warm_static_steps(model, None, said.append)
    assert said == ["Preparing tiny-cold's fast decode step (built and measured once per start)…"]


def test_build_decoder_waits_for_the_preparation_of_its_models(tokenizer, fresh_startup, monkeypatch):
    """build_decoder asks the start-up preparation first, with the target and the draft the spec names."""
    asked: list[list] = []
    monkeypatch.setattr(fresh_startup, "wait", lambda names, progress=None, poll_s=0.5: asked.append(list(names)) or 0.0)
    model = _model(tokenizer, "tiny-t", 14)

    class S:
        target, proposer, k, schedule, acceptance, prompt, chat = "tiny-t", "draft:tiny-d,vocab=8", 2, "constant", "exact", "ab", False
        sampling = runs.Sampling(temperature=0.0)

    with pytest.raises(Exception):  # the draft cannot load here; what matters is what was waited for
        runs.build_decoder(S(), lambda msg: None, load=lambda name, progress=None, **kw: model if name == "tiny-t" else 1 / 0)
    assert asked == [["tiny-t", "tiny-d"]]
    assert runs.draft_name("ngram") is None and runs.draft_name("draft:gemma-3-270m@int8") == "gemma-3-270m@int8"


def test_the_app_prepares_the_default_configuration(monkeypatch):
    """ui.warm_up hands the defaults' models (the target; the draft only when the default proposer
    uses one) to the preparation, and the rejection tour's draft to prepare after them."""
    from specviz import ui

    seen: list[list[str]] = []
    later_seen: list = []

    def prepare(names, rehearse=None, later=None):
        seen.append(list(names))
        later_seen.append(later)
        return rehearse

    monkeypatch.setattr(warmup, "prepare", prepare)
    monkeypatch.setenv("SPECVIZ_DEFAULT_PROPOSER", "ngram")
    assert ui.warm_up() is not None  # the default configuration is rehearsed too
    monkeypatch.setenv("SPECVIZ_DEFAULT_PROPOSER", "draft")
    ui.warm_up()
    assert ui.warm_up(["some-model"]) is None  # other models: loaded and built only
    d = runs.Defaults.from_env()
    assert seen == [[d.target], [d.target, d.draft], ["some-model"]]
    tour_draft = runs.tour_settings("rejection", d)["draft"]
    assert later_seen[0] == {tour_draft: "the rejection tour's draft"} and later_seen[2] is None


def test_the_app_rehearses_its_default_configuration_on_tiny_models(tiny_env, specviz_op, tmp_path, monkeypatch):
    """The real rehearsal (ui._rehearse) on the defaults (tiny local models): the decoder built as a
    Step builds it, a short session run to its end, its static steps left built for the first run;
    on a machine with no cost model of the target cached, its verify cost measured once into the
    advisor's cache, which the What-if and Learn part 5 read (issue 52: a fresh machine's what-if
    held one v at every k)."""
    from specviz import ui
    from specviz.learn.hardware import measured_curve
    from specviz.models import cache_dir, load_model
    from tests.support.kernel import share_built_ops

    share_built_ops(tmp_path / "cache")  # (the ops this worker built: none compiled again)
    monkeypatch.setenv("SPECVIZ_CACHE_DIR", str(tmp_path / "cache"))  # a fresh machine's cache
    d = runs.Defaults.from_env()
    assert measured_curve(cache_dir(), d.target) is None
    said: list[str] = []
    ui._rehearse(d, said.append)
    target = load_model(d.target)
    assert static_decode.warm(target.model) == 0.0  # built: the first Step has nothing of this left to pay
    assert any(line.startswith("measuring") and "verify cost" in line for line in said), said
    curve = measured_curve(cache_dir(), d.target)
    assert curve is not None and len(curve.points) >= 16  # v(n) at n = 1..17, read as the what-if reads it
    again: list[str] = []
    ui._rehearse(d, again.append)
    assert not any(line.startswith("measuring") for line in again)  # once per machine


# -- the rejection tour's draft, prepared after the defaults -------------------------------------


def test_a_later_model_loads_after_the_defaults_are_ready_at_the_lowest_priority(tokenizer, fresh_startup):
    """The later model (the app passes the rejection tour's int8 draft) is loaded only once the
    default configuration is ready, in a thread of its own at nice 19, and its static step built."""
    import os

    target, draft = _model(tokenizer, "tiny-def", 21), _model(tokenizer, "tiny-def@int8", 22)
    seen: list[tuple] = []

    def load(name, progress=None):
        seen.append((name, fresh_startup.running, threading.current_thread().name,
                     os.getpriority(os.PRIO_PROCESS, threading.get_native_id())))
        return draft if name.endswith("@int8") else target

    said: list[str] = []
    thread = warmup.prepare(["tiny-def"], load=load, say=said.append, later={"tiny-def@int8": "the rejection tour's draft"},
                            fits=lambda name, ready: None)
    thread.join(120)
    fresh_startup.later_thread.join(120)
    assert not fresh_startup.running and not fresh_startup.later_running and not fresh_startup.errors
    (first, _running, _t, nice_first), (second, running, thread_name, nice) = seen
    assert (first, second) == ("tiny-def", "tiny-def@int8")
    assert running is False and thread_name == "specviz-warm-up-later"  # the defaults were ready first
    assert nice == 19 or not hasattr(os, "setpriority")
    done = next(i for i, m in enumerate(said) if m.startswith("start-up preparation done"))
    assert any("tiny-def@int8 (the rejection tour's draft)" in m for m in said[done:])
    assert "later tiny-def@int8" in fresh_startup.seconds
    assert static_decode.warm(draft.model) == 0.0  # its fast decode step is built too


def test_the_defaults_do_not_wait_for_the_later_model_but_its_run_does_and_says_so(tokenizer, fresh_startup):
    target, draft = _model(tokenizer, "tiny-d2", 23), _model(tokenizer, "tiny-d2@int8", 24)
    release = threading.Event()

    def load(name, progress=None):
        if name.endswith("@int8"):
            release.wait(60)
            return draft
        return target

    thread = fresh_startup.start(["tiny-d2"], load, lambda msg: None, later={"tiny-d2@int8": "the rejection tour's draft"},
                                 fits=lambda name, ready: None)
    thread.join(120)
    for _ in range(200):  # the later thread has started loading
        if fresh_startup.later_stage:
            break
        threading.Event().wait(0.05)
    assert fresh_startup.later_running and not fresh_startup.running
    assert fresh_startup.wait(["tiny-d2"], lambda msg: None) == 0.0  # the default configuration is ready now
    said, waiter = _wait_until_it_speaks(fresh_startup, ["tiny-d2", "tiny-d2@int8"], release)
    fresh_startup.later_thread.join(120)
    assert not waiter.is_alive() and not fresh_startup.later_running
    assert said and said[0].startswith("Waiting for the start-up preparation of the rejection tour's draft, after the "
                                       "default configuration's: loading tiny-d2@int8")


def test_a_later_model_the_limits_cannot_hold_is_skipped_with_a_log_line(tokenizer, fresh_startup, monkeypatch):
    target = _model(tokenizer, "tiny-d3", 25)
    loads: list[str] = []
    said: list[str] = []
    monkeypatch.setenv("SPECVIZ_MODEL_MEMORY_GB", "0.000001")  # a byte budget the defaults alone fill
    thread = warmup.prepare(["tiny-d3"], load=lambda name, progress=None: loads.append(name) or target, say=said.append,
                            later={"tiny-d3@int8": "the rejection tour's draft"})
    thread.join(120)
    fresh_startup.later_thread.join(120)
    assert loads == ["tiny-d3"] and "tiny-d3@int8" in fresh_startup.skipped
    (line,) = [m for m in said if "skipping" in m]
    assert "tiny-d3@int8 (the rejection tour's draft)" in line and "SPECVIZ_MODEL_MEMORY_GB" in line


def test_room_for_reads_the_hosting_limits(tokenizer, monkeypatch):
    from specviz.app.limits import Limits
    from specviz.models import model_bytes

    target = _model(tokenizer, "tiny-r", 26)
    ready = [("tiny-r", target)]
    size = model_bytes(target)
    monkeypatch.delenv("SPECVIZ_MODEL_CACHE_SIZE", raising=False)
    assert warmup.room_for("tiny-r@int8", ready, Limits()) is None  # no byte budget, room in the count
    assert warmup.estimate_bytes("tiny-r@int8", ready) == size  # an int8 copy: at most its float model
    assert warmup.room_for("tiny-r@int8", ready, Limits(model_memory_gb=2.5 * size / 2**30)) is None
    assert "SPECVIZ_MODEL_MEMORY_GB" in warmup.room_for("tiny-r@int8", ready, Limits(model_memory_gb=1.5 * size / 2**30))
    assert "unknown" in warmup.room_for("owner/some-model", ready, Limits(model_memory_gb=100.0))
    monkeypatch.setenv("SPECVIZ_MODEL_CACHE_SIZE", "1")  # one more model would drop the target
    assert "SPECVIZ_MODEL_CACHE_SIZE=1" in warmup.room_for("tiny-r@int8", ready, Limits())


def _wait_until_it_speaks(startup, names: list[str], release: threading.Event) -> tuple[list[str], threading.Thread]:
    """A run waiting for ``names`` in a thread; once it has said what it waits for, the slow load is
    released and the run joined. -> (what it said, its thread)."""
    said: list[str] = []
    waiter = threading.Thread(target=startup.wait, args=(names, said.append, 0.05))
    waiter.start()
    for _ in range(200):
        if said:
            break
        threading.Event().wait(0.05)
    release.set()
    waiter.join(120)
    return said, waiter


def test_a_zerogpu_space_measures_no_verify_cost_at_start_up(monkeypatch):
    """On a ZeroGPU Space the runs time the GPU lent per call, not the start-up process's device: its
    rehearsal measures no cost model (a CPU curve would price a GPU run's what-if)."""
    from specviz import ui
    from specviz.ui import zerogpu

    monkeypatch.setattr(zerogpu, "active", lambda: True)
    said: list[str] = []
    ui._measure_verify_cost(None, 0, None, said.append)  # returns before it reads the model or the settings
    assert said == []
