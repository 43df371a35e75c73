"""ZeroGPU: with a stand-in ``spaces`` package that behaves like a ZeroGPU Space (each decorated call
forks a worker process, its arguments and result cross a pickle boundary, nothing else comes back,
and a visitor's daily quota is counted in requested seconds), every tab still gives the same results
as on a CPU, a visitor's mistake still reads as a clear message, an exhausted quota reads as one
sentence and loses nothing, and app.py imports ``spaces`` before anything imports torch."""

from __future__ import annotations

import os
import pickle
import re
import shutil
import subprocess
import sys
import types
from pathlib import Path

import gradio as gr
import pytest
import torch

from specviz.app.replay import Replay
from specviz.ui import zerogpu
from tests.support import app_server
from tests.test_advisor_ui import _raw as advisor_raw
from tests.test_advisor_ui import fast_costs  # noqa: F401 - the cost model from numbers (a fixture)

ROOT = Path(__file__).resolve().parents[1]


class QuotaError(gr.Error):
    """What ``spaces`` raises when a visitor's quota cannot cover a request (an ``HTMLError``, a gr.Error)."""


def _forking_spaces(zero_gpu: bool, quota_s: float = 1e9):
    """A stand-in ``spaces``: ``GPU(duration=...)`` asks the quota first (refusing as spaces does),
    then runs the function in a forked child; -> (spaces, spaces.config, calls, quota) where calls
    holds (function name, seconds asked, the worker's pid)."""
    calls: list[tuple[str, int, int]] = []
    quota = {"left": quota_s}
    spaces, config = types.ModuleType("spaces"), types.ModuleType("spaces.config")
    config.Config = type("Config", (), {"zero_gpu": zero_gpu})

    def GPU(task=None, *, duration=60, size=None):
        def decorate(fn):
            if not zero_gpu:
                return fn

            def in_worker(*args, **kwargs):
                seconds = duration(*args, **kwargs) if callable(duration) else duration
                if seconds > quota["left"]:
                    raise QuotaError(f"You have exceeded your free GPU quota ({seconds}s requested vs. "
                                     f"{quota['left']:.0f}s left). Create a free account to get more usage quota.")
                quota["left"] -= seconds
                payload = pickle.dumps((args, kwargs))
                r, w = os.pipe()
                pid = os.fork()
                if pid == 0:  # the GPU worker: a fork of the app
                    try:
                        # libgomp's thread pool does not survive a fork: a parent that ran OpenMP on 2+
                        # threads (an earlier test's set_num_threads(2)) hangs the child's first parallel
                        # product, so the worker computes on one thread, as the tiny models do anyway
                        torch.set_num_threads(1)
                        os.close(r)
                        a, k = pickle.loads(payload)
                        try:
                            out = ("ok", fn(*a, **k))
                        except BaseException as e:  # noqa: BLE001 - the worker's error reaches the app without its text
                            out = ("error", type(e).__name__)
                        with os.fdopen(w, "wb") as f:
                            f.write(pickle.dumps((os.getpid(), out)))
                    finally:
                        os._exit(0)
                os.close(w)
                with os.fdopen(r, "rb") as f:
                    data = f.read()
                os.waitpid(pid, 0)
                worker, (status, value) = pickle.loads(data)
                calls.append((getattr(args[0], "__name__", "?"), seconds, worker))
                if status == "error":
                    raise gr.Error(f"ZeroGPU worker error: {value}")
                return value

            return in_worker

        return decorate if task is None else decorate(task)

    spaces.GPU, spaces.config = GPU, config
    return spaces, config, calls, quota


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory):
    target, draft = app_server.make_tiny_models(tmp_path_factory.mktemp("zerogpu-models"))
    return {"target": target, "draft": draft}


@pytest.fixture
def env(monkeypatch):
    monkeypatch.setenv("SPECVIZ_ALLOW_LOCAL_PATHS", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for var in ("SPECVIZ_MAX_PROMPT_TOKENS", "SPECVIZ_MAX_NEW_TOKENS", "SPECVIZ_MAX_K", "SPECVIZ_MODEL_MEMORY_GB"):
        monkeypatch.delenv(var, raising=False)


def _install(monkeypatch, zero_gpu: bool = True, quota_s: float = 1e9):
    spaces, config, calls, quota = _forking_spaces(zero_gpu, quota_s)
    monkeypatch.setitem(sys.modules, "spaces", spaces)
    monkeypatch.setitem(sys.modules, "spaces.config", config)
    return calls, quota


@pytest.fixture
def zero(monkeypatch):
    return _install(monkeypatch)[0]


def _raw(m, **change):
    args = dict(target=m["target"], proposer="draft", draft=m["draft"], k=3, temperature=1.0, top_p=1.0, top_k=0,
                seed=7, max_new_tokens=24, prompt=app_server.TINY_PROMPT, chat=True, schedule="constant", layers=1)
    args.update(change)
    return tuple(args.values())


def _play(raw, st=None):
    from specviz.ui import playground as pg
    from specviz.ui.state import PlaygroundState

    st = st or PlaygroundState()
    list(pg.on_play(st, *raw))
    list(pg.on_baseline(st, *raw))
    return st


def _tokens(steps) -> list[int]:
    return [t for s in steps for t in s.committed]


def test_active_only_on_a_zerogpu_space(monkeypatch):
    monkeypatch.setitem(sys.modules, "spaces", None)  # not installed
    monkeypatch.setitem(sys.modules, "spaces.config", None)
    assert not zerogpu.active()
    calls, _ = _install(monkeypatch, zero_gpu=False)  # installed, but a CPU (or a dedicated GPU) Space
    assert not zerogpu.active() and zerogpu.on_gpu(sorted, [3, 1, 2]) == [1, 2, 3] and calls == []


def test_a_call_runs_in_a_forked_worker_and_only_its_result_comes_back(monkeypatch):
    calls, quota = _install(monkeypatch, quota_s=1000)
    assert zerogpu.on_gpu(os.getpid) != os.getpid()  # another process
    box: list[int] = []
    assert zerogpu.on_gpu(box.append, 1) is None and box == []  # what the worker changed stays there
    assert [c[1] for c in calls] == [zerogpu.RUN_SECONDS] * 2 and quota["left"] == 1000 - 2 * zerogpu.RUN_SECONDS
    assert zerogpu.active() and not zerogpu._in_worker  # the workers' flag stayed in the workers


def test_each_call_asks_for_the_time_its_work_needs():
    from specviz.ui.bench_tab import Request, sweep_report
    from specviz.ui.state import parse_settings

    def record(n):
        return zerogpu.seconds_for(zerogpu.record_run, (parse_settings("t", "ngram", "d", 3, 0.0, 1.0, 0, 0, n, "x", True),
                                                        "p"), {})

    assert zerogpu.MIN_S <= record(16) < record(256) <= zerogpu.MAX_S
    assert record(64) <= 120  # a default run fits an unauthenticated visitor's two minutes
    small = Request("t", ("ngram",), (2,), ("a", "b"), "custom", 8, None, False)
    large = Request("t", ("ngram", "draft:d"), (1, 2, 4, 8), tuple("abcdefgh"), "custom", 256, None, True)
    assert zerogpu.seconds_for(sweep_report, (small,), {}) < 60
    assert zerogpu.seconds_for(sweep_report, (large,), {}) == zerogpu.MAX_S  # capped: ZeroGPU refuses more


def test_a_call_larger_than_one_gpu_call_is_refused_before_it_starts(monkeypatch):
    from specviz.ui.bench_tab import Request, sweep_report

    calls, quota = _install(monkeypatch, quota_s=10_000)
    large = Request("t", ("ngram", "draft:d"), (1, 2, 4, 8), tuple("abcdefgh"), "custom", 256, None, True)
    with pytest.raises(ValueError, match=r"more than one ZeroGPU call may take here \(600 s\): choose fewer"):
        zerogpu.on_gpu(sweep_report, large)
    assert calls == [] and quota["left"] == 10_000  # no GPU time asked, none spent


def test_playground_records_on_the_gpu_and_replays_the_same_run(models_dir, env, monkeypatch):
    on_cpu = _play(_raw(models_dir))
    calls, _ = _install(monkeypatch)
    on_zero = _play(_raw(models_dir))
    assert [c[0] for c in calls] == ["record_run", "record_run"]  # the run, then the target-only baseline
    assert all(pid != os.getpid() for *_, pid in calls) and calls[0][1] == calls[1][1] == 30 + 3  # 24 tokens
    assert on_zero.message[1] != "error", on_zero.message
    assert isinstance(on_zero.session, Replay) and on_zero.session.done
    assert _tokens(on_zero.steps) == _tokens(on_cpu.steps)  # same seed, same tokens
    assert _tokens(on_zero.baseline_steps) == _tokens(on_cpu.baseline_steps)
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


def test_an_exhausted_quota_reads_as_one_sentence_and_loses_nothing(models_dir, env, monkeypatch):
    from specviz.ui import playground as pg

    calls, quota = _install(monkeypatch, quota_s=40)  # one 24-token run (33 s), not two
    st = _play(_raw(models_dir))  # the run fits; its baseline does not
    assert [c[0] for c in calls] == ["record_run"]
    assert st.message[1] == "error" and "exceeded your free GPU quota" in st.message[0], st.message
    assert "Nothing was lost" in st.message[0] and "fewer new tokens" in st.message[0]
    kept = _tokens(st.steps)
    assert kept and st.session.done and not st.baseline_steps
    frames = list(pg.on_play(st, *_raw(models_dir, seed=9)))  # another run: refused too, the shown one stays
    assert "quota" in st.message[0] and _tokens(st.steps) == kept and "Traceback" not in str(frames[-1])
    quota["left"] = 1000  # the quota refills: the baseline runs
    list(pg.on_baseline(st, *_raw(models_dir)))
    assert st.baseline_steps and _tokens(st.steps) == kept and st.message[1] != "error", st.message
    st.close()


def test_learn_and_bench_run_in_the_gpu_worker(models_dir, env, monkeypatch):
    from specviz.ui import bench_tab as bt
    from specviz.ui import learn_tab as lt

    args = (models_dir["target"], ["ngram"], [2], bt.CUSTOM, [], "the cat sat on the mat", 1, 8, 0.0, False)
    on_cpu = bt.BenchState()
    list(bt.on_run(on_cpu, *args))
    calls, _ = _install(monkeypatch)
    html, fig = list(lt.on_model_sample(models_dir["target"], lt.DRAFT_MODEL, models_dir["draft"], "the cat",
                                        "exact", 1.0, 1.0, 500, 0))[-1]
    assert "data-tv-spec" in html and fig is not None, html
    state = bt.BenchState()
    frames = list(bt.on_run(state, *args))
    assert [c[0] for c in calls] == ["compare_on_model", "sweep_report"]
    assert calls[1][1] < zerogpu.SWEEP_SECONDS  # one prompt, two configurations of 8 tokens: well under the cap
    assert state.report and state.report["rows"] and "Done in" in str(frames[-1])

    def same(report):
        return [(r.get("proposer"), r.get("k"), r.get("accepted"), r.get("drafted"), r.get("new_tokens"), r.get("same_as_target"))
                for r in report["rows"]]

    assert same(state.report) == same(on_cpu.report)
    state.close(), on_cpu.close()


def test_the_advisor_calibrates_and_runs_its_top_in_gpu_workers(models_dir, env, monkeypatch, fast_costs):  # noqa: F811
    from specviz.ui import advisor_tab as at

    raw = advisor_raw(models_dir["target"], ["ngram", f"draft:{models_dir['draft']}"])
    on_cpu = at.AdvisorState()
    list(at.on_calibrate(on_cpu, *raw))
    calls, _ = _install(monkeypatch)
    state = at.AdvisorState()
    outs = list(at.on_calibrate(state, *raw))
    assert "Calibrated on 3 prompts" in str(outs[-1]["advisor_msg"]), outs[-1]["advisor_msg"]
    assert [c[0] for c in calls] == ["advise_report"] and state.target is None  # the target stayed in the worker

    def ranked(advice):
        return [(f.label, round(f.tau, 9), round(f.speedup, 9)) for f in advice.forecasts]

    assert ranked(state.advice) == ranked(on_cpu.advice)  # the same calibration, the same ranking
    runs = list(at.on_run_top(state, 2))
    assert [c[0] for c in calls] == ["advise_report", "top_report"] and "Ran 2 configurations" in str(runs[-1]["advisor_msg"])


def test_app_imports_spaces_before_torch(tmp_path):
    """app.py's import path with a ``spaces`` on sys.path (ZeroGPU's package patches torch's CUDA
    when imported): ``spaces`` is imported first, before torch."""
    stub = tmp_path / "stub"
    (stub / "spaces").mkdir(parents=True)
    (stub / "spaces" / "__init__.py").write_text(
        "import os, sys\n"
        "with open(os.environ['SPACES_SEEN'], 'w') as f:\n"
        "    f.write('torch before spaces' if 'torch' in sys.modules else 'spaces first')\n"
        "def GPU(task=None, **kw):\n"
        "    return task if task is not None else (lambda fn: fn)\n")
    (stub / "spaces" / "config.py").write_text("class Config:\n    zero_gpu = False\n")
    seen = tmp_path / "seen.txt"
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("SPECVIZ_")}, "SPACES_SEEN": str(seen),
           "PYTHONPATH": os.pathsep.join([str(stub), str(ROOT)]), "GRADIO_ANALYTICS_ENABLED": "False",
           "HF_HUB_OFFLINE": "1", "SPECVIZ_HUB_MODELS": "0", "SPECVIZ_CACHE_DIR": str(tmp_path / "cache")}
    run = subprocess.run([sys.executable, "-c", "import app, sys; print('torch' in sys.modules, app.spaces.__file__)"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert seen.read_text() == "spaces first" and run.stdout.startswith("True") and str(stub) in run.stdout


# -- ZeroGPU's Pythons (3.10.13, 3.12.12): what can be checked without their torch ----------------

NEWER_THAN_310 = re.compile(  # standard-library names a Python 3.10 lacks (3.11: the first eight; 3.12: the last two)
    r"\btomllib\b|\bStrEnum\b|datetime\.UTC\b|\bTaskGroup\b|\bExceptionGroup\b|\bfile_digest\b|contextlib\.chdir\b"
    r"|from typing import [^\n]*\bSelf\b|itertools\.batched\b|from typing import [^\n]*\boverride\b")
COMPILE_ALL = """
import pathlib, sys
root = pathlib.Path(sys.argv[1])
bad = []
for p in sorted(root.glob("specviz/**/*.py")) + sorted(root.glob("benchmarks/*.py")) + sorted(root.glob("tests/**/*.py")) + [root / "app.py"]:
    try:
        compile(p.read_text(encoding="utf-8"), str(p), "exec")
    except SyntaxError as e:
        bad.append(f"{p}: {e}")
print("\\n".join(bad) or "ok")
"""


def _app_sources() -> list[Path]:
    """What a Space or a GPU check runs (the tests run in the project's own venv)."""
    return [*ROOT.glob("specviz/**/*.py"), *ROOT.glob("benchmarks/*.py"), ROOT / "app.py"]


def _pyenv_python(minor: str) -> Path | None:
    """The newest ``minor`` (``"3.12"``) interpreter pyenv has, or None (no pyenv, no such version)."""
    pyenv = shutil.which("pyenv")
    if pyenv is None:
        return None
    bare = subprocess.run([pyenv, "versions", "--bare"], capture_output=True, text=True, timeout=60).stdout.split()
    found = sorted((v for v in bare if v.startswith(minor + ".") and v.replace(".", "").isdigit()),
                   key=lambda v: tuple(map(int, v.split("."))))
    if not found:
        return None
    prefix = subprocess.run([pyenv, "prefix", found[-1]], capture_output=True, text=True, timeout=60).stdout.strip()
    python = Path(prefix) / "bin" / "python"
    return python if python.exists() else None


@pytest.mark.parametrize("minor", ["3.10", "3.12"])
def test_every_source_compiles_on_zerogpus_pythons(minor):
    python = _pyenv_python(minor)
    if python is None:
        pytest.skip(f"no Python {minor} from pyenv here")
    out = subprocess.run([str(python), "-c", COMPILE_ALL, str(ROOT)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stdout[-3000:] + out.stderr[-3000:]


def test_no_standard_library_name_newer_than_python_310():
    hits = [f"{p.relative_to(ROOT)}: {m.group(0)}" for p in _app_sources()
            for m in NEWER_THAN_310.finditer(p.read_text(encoding="utf-8"))]
    assert not hits, hits
    assert NEWER_THAN_310.search("import tomllib") and NEWER_THAN_310.search("from typing import Any, Self")  # it can fail
