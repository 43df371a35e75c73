"""The app's start-up preparation: the default configuration (the one *Show me a speedup* runs)
made ready in the background while the page comes up, and what it is doing at each moment.

A first run after a start used to pay the target's load, its kernel plan's measuring (``specviz tune``,
once per machine, model and torch version: :func:`tune_models`), its static decode step's one-off build
and runner measurement, and the first session's own one-offs (the verify pass's width traced, the
first prefill): about 10 s of a quiet 2-core CPU's time, in the speedup tour's 16 s. :func:`prepare`
does all of it in a daemon thread as soon as the app starts (the last as one short untimed run of
the default configuration); a run that needs one of
those models while it is still at work waits for it *and says so* (:meth:`StartUp.wait` reports
the stage in the status line), so no wait is hidden, it has only moved to before the first click.

Once the default configuration is ready, models named ``later`` (the app passes *Show me a
rejection*'s int8 draft) are loaded and built too, in a thread of their own at the lowest CPU
priority (:func:`lowest_priority`), so they never delay the defaults; one that the hosting limits'
model budget could not hold beside the defaults (:func:`room_for`) is skipped with a log line.
"""

from __future__ import annotations

import json
import os
import threading
import time
import weakref
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import torch

from ..runtime import static_decode
from .limits import Limits

__all__ = ["STARTUP", "StartUp", "estimate_bytes", "lowest_priority", "prepare", "record_path", "room_for",
           "tune_models", "tune_targets", "warm_static_steps"]

RECORD_FILE = "startup-seconds.json"  # in the cache directory: how long the last start's preparation took

Progress = Callable[[str], None]
Fits = Callable[[str, list], "str | None"]  # (name, [(name, LoadedModel)] ready) -> why it must be skipped, or None

_warmed: "weakref.WeakSet[torch.nn.Module]" = weakref.WeakSet()  # models whose static step this process built
_warmed_lock = threading.Lock()


def warm_static_steps(models: Iterable[tuple[str, Any]], progress: Progress | None = None,
                      widths: Iterable[int] = (1,)) -> float:
    """Build the static decode step of each (name, LoadedModel) not built yet in this process for
    ``widths`` tokens and choose its runner now (``static_decode.warm``), saying so first through
    ``progress``: the one wait a run's status line used to leave unexplained. -> seconds spent."""
    spent = 0.0
    for name, loaded in models:
        module = getattr(loaded, "model", None)
        if not isinstance(module, torch.nn.Module):
            continue
        with _warmed_lock:
            fresh = module not in _warmed
        if fresh and progress is not None and static_decode.enabled() and static_decode.supports(module) is None:
            progress(f"Preparing {name}'s fast decode step (built and measured once per start)…")
        spent += static_decode.warm(module, widths)
        with _warmed_lock:
            _warmed.add(module)
    return spent


def tune_models(models: Iterable[tuple[str, Any]]) -> list[str]:
    """``specviz tune`` for each (name, LoadedModel): its kernel plan measured and written where this
    machine has none yet (read where it has), before its decode step is built. -> the names measured now."""
    from .. import tuning

    measured = []
    for name, loaded in models:
        module = getattr(loaded, "model", None)
        if isinstance(module, torch.nn.Module) and tuning.tune(module)[1]:
            measured.append(name)
    return measured


ONCE = ("converting ", "measuring ")  # progress lines of work a start does once per machine (then cached)


def tune_targets(names: Iterable[str], dtype: str = "auto", again: bool = False, say: Progress | None = None,
                 options: Any = None) -> list[str]:
    """``specviz tune``: load each model on the CPU and measure its kernel plan here, or find it
    measured (``again``: measure anyway) -> a line or two per model, saying where its plan is.
    ``options``: the command's engine options (:class:`specviz.settings.Options`; None: the environment's)."""
    from .. import tuning
    from ..models import load_model
    from ..runtime.state import cache_home

    lines = []
    for name in names:
        model = load_model(name, device="cpu", dtype=dtype, progress=say, options=options).model
        plan, new = tuning.tune(model, cache_home(options), again=again, progress=say)
        lines.append(f"{name}: {'measured, written to' if new else 'already there (--again measures again):'} {plan.path}\n"
                     f"  {plan_words(plan)}")
    return lines


def plan_words(plan) -> str:
    """A plan in one line: each tuned kind's kernels by width ("head: specviz blocked at 1-9 rows; ...")."""
    from ..runtime.plan import default_kernel

    parts = []
    for kind, p in plan.kinds.items():
        runs: list[list] = []  # [kernel, first width, last width]
        for w, name in sorted(p.kernels.items()):
            if runs and runs[-1][0] == name:
                runs[-1][2] = w
            else:
                runs.append([name, w, w])
        parts.append(f"{kind}: " + ", ".join(f"{n} at {a}-{b} rows" if a != b else f"{n} at {a} row{'s' if a > 1 else ''}"
                                             for n, a, b in runs))
    return "; ".join(parts) or f"nothing to tune here: CPU features' defaults ({default_kernel('head')})"


def lowest_priority() -> bool:
    """Give the calling thread (and the threads it starts, torch's workers among them) the lowest
    CPU priority (nice 19; Linux: a thread's own nice value). -> whether it could."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        return True
    except (AttributeError, OSError):
        return False


def estimate_bytes(name: str, ready: list[tuple[str, Any]]) -> int | None:
    """The weights' bytes ``name`` would add to the model cache, at most: an ``@int8`` copy holds no
    more than its float model (its embedding and norms are the float ones, its projections int8), so
    the float model's own bytes when it is loaded, else a built-in's parameter count in float32;
    None when unknown before loading (a hub id, a local directory)."""
    from ..models import BUILTIN_MODELS, model_bytes

    base = name[: -len("@int8")] if name.endswith("@int8") else name
    for ready_name, loaded in ready:
        if ready_name == base and isinstance(getattr(loaded, "model", None), torch.nn.Module):
            return model_bytes(loaded)
    builtin = BUILTIN_MODELS.get(base)
    return builtin.approx_params * 4 if builtin is not None else None


def room_for(name: str, ready: list[tuple[str, Any]], limits: Limits | None = None) -> str | None:
    """Why the hosting limits leave no room to keep ``name`` loaded beside the ``ready`` models
    (the default configuration's), or None when they do: its bytes must fit the model cache's
    memory budget (``SPECVIZ_MODEL_MEMORY_GB``) with the defaults', and one more model its count
    (``SPECVIZ_MODEL_CACHE_SIZE``); else the cache would drop a default model to hold it."""
    from ..models import cache as model_cache
    from ..models import model_bytes

    lim = limits or Limits.from_env()
    held = [lm for _n, lm in ready if isinstance(getattr(lm, "model", None), torch.nn.Module)]
    size = model_cache._cache_size()  # the cache's own reading of SPECVIZ_MODEL_CACHE_SIZE
    if len(held) + 1 > size:
        return f"SPECVIZ_MODEL_CACHE_SIZE={size} keeps {size} model(s) loaded and the default configuration holds {len(held)}"
    if lim.model_memory_gb is None:
        return None
    budget = lim.model_memory_gb * (1 << 30)
    extra = estimate_bytes(name, ready)
    if extra is None:
        return (f"its size is unknown before loading and SPECVIZ_MODEL_MEMORY_GB={lim.model_memory_gb:g} "
                "bounds the loaded models")
    used = sum(model_bytes(lm) for lm in held)
    if used + extra > budget:
        return (f"SPECVIZ_MODEL_MEMORY_GB={lim.model_memory_gb:g} would not hold it (about {extra / 2**30:.2f} GB) "
                f"beside the default configuration's {used / 2**30:.2f} GB")
    return None


class StartUp:
    """What the start-up preparation is doing: its models, the current stage (None when idle or
    done), and the seconds each stage took; then the models prepared after them (``later``: name
    -> what for), their stage and the ones skipped (name -> why)."""

    def __init__(self) -> None:
        self.names: tuple[str, ...] = ()
        self.stage: str | None = None
        self.started: float | None = None
        self.seconds: dict[str, float] = {}
        self.errors: dict[str, str] = {}
        self.later: dict[str, str] = {}
        self.later_stage: str | None = None
        self.later_started: float | None = None
        self.skipped: dict[str, str] = {}
        self.record: Path | None = None  # where a preparation's total seconds are kept for the next start's estimate
        self.expected_s: float | None = None  # the last start's total for these names (read from ``record``)
        self.expected_once: list[str] = []  # the work done once per machine that the last start's total holds
        self.once: list[str] = []  # this start's: converting a built-in, tuning its kernels, measuring its costs
        self._done = threading.Event()
        self._done.set()
        self._later_done = threading.Event()
        self._later_done.set()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.later_thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return not self._done.is_set()

    @property
    def later_running(self) -> bool:
        return not self._later_done.is_set()

    def how_long(self) -> str:
        """About how long the defaults' preparation has left, in words, from the last start's total on
        this machine (``record``); a first start says what it does instead of guessing a number."""
        if self.expected_s is None or self.started is None:
            return ("no earlier start on this machine to go by; a first start also converts the built-in models "
                    "and tunes their kernels once, about 3 minutes for Gemma on 2 cores")
        left = self.expected_s - (time.perf_counter() - self.started)
        if self.expected_once:  # a first start's total: an upper bound, not an estimate
            return (f"at most about {max(left, 0):.0f} s more: the last start's {self.expected_s:.0f} s included work "
                    f"done once per machine ({'; '.join(self.expected_once)})")
        if left >= 1:
            return f"about {left:.0f} s more: the last start's took {self.expected_s:.0f} s"
        return f"any moment now: the last start's took {self.expected_s:.0f} s"

    def ahead(self) -> str | None:
        """Said on the page before any click while the defaults are being prepared (what a Step or
        Play would wait for, and about how long); None when a Step would not wait."""
        stage, started = self.stage, self.started
        if not self.running or stage is None or started is None:
            return None
        return (f"Start-up preparation at work: {stage} ({time.perf_counter() - started:.0f} s so far; "
                f"{self.how_long()}). A Step, Play or tour of the default models waits for it, then runs.")

    def line(self) -> str | None:
        """The status line's words while it runs ("… (4 s so far)"), else None."""
        stage, started = self.stage, self.started
        if self.running and stage is not None and started is not None:
            return (f"Waiting for the start-up preparation of the default configuration: {stage} "
                    f"({time.perf_counter() - started:.0f} s since the app started it; {self.how_long()})…")
        stage, started = self.later_stage, self.later_started
        if self.later_running and stage is not None and started is not None:
            what = " and ".join(dict.fromkeys(self.later.values())) or "other models"
            return (f"Waiting for the start-up preparation of {what}, after the default configuration's: {stage} "
                    f"({time.perf_counter() - started:.0f} s since it started)…")
        return None

    def _pending(self, names: set[str]) -> threading.Event | None:
        """The preparation ``names`` must wait for (the defaults', then the later models'), or None."""
        if self.running and names & set(self.names):
            return self._done
        if self.later_running and names & set(self.later):
            return self._later_done
        return None

    def wait(self, names: Iterable[str], progress: Progress | None = None, poll_s: float = 0.5) -> float:
        """If the preparation is still at work on any of ``names``, wait for it to end, reporting
        each of its stages through ``progress``. -> seconds waited."""
        wanted = set(names)
        if threading.current_thread() in (self._thread, self.later_thread) or self._pending(wanted) is None:
            return 0.0  # (the preparation's own rehearsal does not wait for itself)
        t, said = time.perf_counter(), None
        while (event := self._pending(wanted)) is not None:
            if event.wait(poll_s if progress is not None else None):
                continue
            line = self.line()
            if line and line.split(" (")[0] != said and progress is not None:
                said = line.split(" (")[0]
                progress(line)
        return time.perf_counter() - t

    def _run(self, names: tuple[str, ...], load: Callable[..., Any], say: Progress,
             rehearse: Callable[[Progress], Any] | None, fits: Fits | None = None) -> None:
        def stage(text: str) -> None:
            self.stage = text
            said(text)

        def said(text: str) -> None:  # every line, noting the work done once per machine
            if text.startswith(ONCE):
                self.once.append(text.split(" (")[0].split(",")[0].removesuffix("…"))
            say(text)

        loaded: list[tuple[str, Any]] = []
        try:
            for name in names:
                t = time.perf_counter()
                stage(f"loading {name}")
                try:
                    loaded.append((name, load(name, progress=said)))
                except Exception as e:  # noqa: BLE001 - the page reports it again when used
                    self.errors[name] = f"{type(e).__name__}: {e}"
                    say(f"could not load {name}: {e}")
                self.seconds[f"load {name}"] = time.perf_counter() - t
            for name, model in loaded:
                t = time.perf_counter()
                stage(f"tuning {name}'s kernels on this machine (measured once per machine, model and torch version)")
                try:
                    self.once += [f"tuning {n}'s kernels" for n in tune_models([(name, model)])]
                except Exception as e:  # noqa: BLE001 - the model runs its feature defaults, said in the log
                    self.errors[f"tune {name}"] = f"{type(e).__name__}: {e}"
                    say(f"could not tune {name}'s kernels: {e}")
                self.seconds[f"tune {name}"] = time.perf_counter() - t
                t = time.perf_counter()
                stage(f"building {name}'s fast decode step and measuring its runner")
                try:
                    warm_static_steps([(name, model)])
                except Exception as e:  # noqa: BLE001 - a run builds it again (or falls back) and says so
                    self.errors[f"static {name}"] = f"{type(e).__name__}: {e}"
                    say(f"could not prepare {name}'s fast decode step: {e}")
                self.seconds[f"static {name}"] = time.perf_counter() - t
            if rehearse is not None and not self.errors:
                t = time.perf_counter()
                stage("running the default configuration once, untimed (its prompt's prefill and the verify pass's width)")
                try:
                    rehearse(stage)  # each of its lines is the stage a waiting Step names
                except Exception as e:  # noqa: BLE001 - the first run does it again and says what failed
                    self.errors["rehearsal"] = f"{type(e).__name__}: {e}"
                    say(f"could not rehearse the default configuration: {e}")
                self.seconds["rehearsal"] = time.perf_counter() - t
        finally:
            self._keep_total(names, time.perf_counter() - (self.started or 0.0))
            self.stage = None
            self._done.set()
            say(f"start-up preparation done in {time.perf_counter() - (self.started or 0.0):.1f} s "
                f"({', '.join(f'{k} {v:.1f} s' for k, v in self.seconds.items())})")
            if self.later_running:  # the defaults are ready: the later models in a thread of their own
                self.later_thread = threading.Thread(target=self._run_later, args=(loaded, load, say, fits or room_for),
                                                     name="specviz-warm-up-later", daemon=True)
                self.later_thread.start()

    def _read_total(self, names: tuple[str, ...]) -> tuple[float | None, list[str]]:
        """The last start's total seconds for the same models and the work it did once per machine,
        from ``record`` ((None, []): none, or unreadable)."""
        try:
            if self.record is None:
                return None, []
            saved = json.loads(self.record.read_text(encoding="utf-8"))
            if saved.get("names") != list(names):
                return None, []
            return float(saved["seconds"]), [str(w) for w in saved.get("once", [])]
        except (OSError, ValueError, KeyError, TypeError):
            return None, []

    def _keep_total(self, names: tuple[str, ...], seconds: float) -> None:
        """Keep this preparation's total for the next start's estimate (a failed one is not a measure)."""
        if self.record is None or self.errors:
            return
        try:
            self.record.parent.mkdir(parents=True, exist_ok=True)
            self.record.write_text(json.dumps({"names": list(names), "seconds": round(seconds, 1), "once": self.once}),
                                   encoding="utf-8")
        except OSError:
            pass

    def _run_later(self, ready: list[tuple[str, Any]], load: Callable[..., Any], say: Progress, fits: Fits) -> None:
        """Load and build each later model that the limits leave room for, at the lowest priority
        (a fresh thread, so torch's worker threads it starts are lowered with it)."""
        def stage(text: str) -> None:
            self.later_stage = text
            say(text)

        try:
            lowest_priority()
            self.later_started = time.perf_counter()
            for name, purpose in self.later.items():
                why = fits(name, ready)
                if why is not None:
                    self.skipped[name] = why
                    say(f"start-up preparation: skipping {name} ({purpose}): {why}; it loads when a run asks for it")
                    continue
                t = time.perf_counter()
                say(f"start-up preparation, now that the default configuration is ready: {name} ({purpose})")
                stage(f"loading {name}, at the lowest priority")
                try:
                    model = load(name, progress=say)
                    stage(f"tuning {name}'s kernels on this machine, at the lowest priority")
                    tune_models([(name, model)])
                    stage(f"building {name}'s fast decode step and measuring its runner")
                    warm_static_steps([(name, model)])
                except Exception as e:  # noqa: BLE001 - the run that needs it loads it again and says what failed
                    self.errors[name] = f"{type(e).__name__}: {e}"
                    say(f"could not prepare {name} ({purpose}): {e}")
                self.seconds[f"later {name}"] = time.perf_counter() - t
        finally:
            self.later_stage = None
            self._later_done.set()

    def start(self, names: Iterable[str], load: Callable[..., Any], say: Progress,
              rehearse: Callable[[Progress], Any] | None = None, later: Mapping[str, str] | None = None,
              fits: Fits | None = None) -> threading.Thread | None:
        """Prepare ``names`` (load, then build each one's static step, then ``rehearse(say)``: one
        short untimed run of the configuration) in a daemon thread; then, once they are ready, the
        ``later`` models (name -> what for; not one of ``names``) at the lowest priority in another,
        each unless ``fits(name, ready)`` (default :func:`room_for`) gives a reason to skip it.
        None when a preparation is already running."""
        with self._lock:
            if self.running or self.later_running:
                return None
            self.names, self.seconds, self.errors = tuple(dict.fromkeys(names)), {}, {}
            self.expected_s, self.expected_once = self._read_total(self.names)
            self.once = []
            self.later = {n: what for n, what in (later or {}).items() if n not in self.names}
            self.skipped, self.later_thread = {}, None
            self.started, self.stage = time.perf_counter(), "starting"
            self._done.clear()
            if self.later:
                self._later_done.clear()
        thread = self._thread = threading.Thread(target=self._run, args=(self.names, load, say, rehearse, fits),
                                                 name="specviz-warm-up", daemon=True)
        thread.start()
        return thread


STARTUP = StartUp()


def record_path() -> Path:
    """Where the app keeps its last preparation's total: the cache directory (``SPECVIZ_CACHE_DIR``)."""
    from ..runtime.state import cache_home

    return cache_home() / RECORD_FILE


def prepare(names: Iterable[str], load: Callable[..., Any] | None = None, say: Progress | None = None,
            rehearse: Callable[[Progress], Any] | None = None, later: Mapping[str, str] | None = None,
            fits: Fits | None = None) -> threading.Thread | None:
    """Start preparing ``names`` (the default configuration's models; ``rehearse``: one short
    untimed run of it) in the background, then the ``later`` models (name -> what for) at the
    lowest priority where the hosting limits leave room (``fits``, default :func:`room_for`):
    :data:`STARTUP` says what it is doing; a run that needs them waits for it and says so."""
    if load is None:
        from ..models import load_model as load
    return STARTUP.start(names, load, say or (lambda msg: print(f"[specviz] {msg}", flush=True)), rehearse,
                         later=later, fits=fits)
