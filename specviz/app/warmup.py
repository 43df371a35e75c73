"""The app's start-up preparation: the default configuration (the one *Show me a speedup* runs)
made ready in the background while the page comes up, and what it is doing at each moment.

A first run after a start used to pay the target's load, its static decode step's one-off build
and runner measurement, and the first session's own one-offs (the verify pass's width traced, the
first prefill): about 10 s of a quiet 2-core CPU's time, in the speedup tour's 16 s. :func:`prepare`
does all of it in a daemon thread as soon as the app starts (the last as one short untimed run of
the default configuration); a run that needs one of
those models while it is still at work waits for it *and says so* (:meth:`StartUp.wait` reports
the stage in the status line), so no wait is hidden, it has only moved to before the first click.
"""

from __future__ import annotations

import threading
import time
import weakref
from typing import Any, Callable, Iterable

import torch

from ..runtime import static_decode

__all__ = ["STARTUP", "StartUp", "prepare", "warm_static_steps"]

Progress = Callable[[str], None]

_warmed: "weakref.WeakSet[torch.nn.Module]" = weakref.WeakSet()  # models whose static step this process built
_warmed_lock = threading.Lock()


def warm_static_steps(models: Iterable[tuple[str, Any]], progress: Progress | None = None) -> float:
    """Build the static decode step of each (name, LoadedModel) not built yet in this process and
    choose its runner now (``static_decode.warm``), saying so first through ``progress``: the one
    wait a run's status line used to leave unexplained. -> seconds spent."""
    spent = 0.0
    for name, loaded in models:
        module = getattr(loaded, "model", None)
        if not isinstance(module, torch.nn.Module):
            continue
        with _warmed_lock:
            fresh = module not in _warmed
        if fresh and progress is not None and static_decode.enabled() and static_decode.supports(module) is None:
            progress(f"Preparing {name}'s fast decode step (built and measured once per start)…")
        spent += static_decode.warm(module)
        with _warmed_lock:
            _warmed.add(module)
    return spent


class StartUp:
    """What the start-up preparation is doing: its models, the current stage (None when idle or
    done), and the seconds each stage took."""

    def __init__(self) -> None:
        self.names: tuple[str, ...] = ()
        self.stage: str | None = None
        self.started: float | None = None
        self.seconds: dict[str, float] = {}
        self.errors: dict[str, str] = {}
        self._done = threading.Event()
        self._done.set()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return not self._done.is_set()

    def line(self) -> str | None:
        """The status line's words while it runs ("… (4 s so far)"), else None."""
        stage, started = self.stage, self.started
        if not self.running or stage is None or started is None:
            return None
        return (f"Waiting for the start-up preparation of the default configuration: {stage} "
                f"({time.perf_counter() - started:.0f} s since the app started it)…")

    def wait(self, names: Iterable[str], progress: Progress | None = None, poll_s: float = 0.5) -> float:
        """If the preparation is still at work on any of ``names``, wait for it to end, reporting
        each of its stages through ``progress``. -> seconds waited."""
        if not self.running or not set(names) & set(self.names) or threading.current_thread() is self._thread:
            return 0.0  # (the preparation's own rehearsal does not wait for itself)
        t, said = time.perf_counter(), None
        while not self._done.wait(poll_s if progress is not None else None):
            line = self.line()
            if line and line.split(" (")[0] != said and progress is not None:
                said = line.split(" (")[0]
                progress(line)
        return time.perf_counter() - t

    def _run(self, names: tuple[str, ...], load: Callable[..., Any], say: Progress,
             rehearse: Callable[[Progress], Any] | None) -> None:
        def stage(text: str) -> None:
            self.stage = text
            say(text)

        try:
            loaded = []
            for name in names:
                t = time.perf_counter()
                stage(f"loading {name}")
                try:
                    loaded.append((name, load(name, progress=say)))
                except Exception as e:  # noqa: BLE001 - the page reports it again when used
                    self.errors[name] = f"{type(e).__name__}: {e}"
                    say(f"could not load {name}: {e}")
                self.seconds[f"load {name}"] = time.perf_counter() - t
            for name, model in loaded:
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
                    rehearse(say)
                except Exception as e:  # noqa: BLE001 - the first run does it again and says what failed
                    self.errors["rehearsal"] = f"{type(e).__name__}: {e}"
                    say(f"could not rehearse the default configuration: {e}")
                self.seconds["rehearsal"] = time.perf_counter() - t
        finally:
            self.stage = None
            self._done.set()
            say(f"start-up preparation done in {time.perf_counter() - (self.started or 0.0):.1f} s "
                f"({', '.join(f'{k} {v:.1f} s' for k, v in self.seconds.items())})")

    def start(self, names: Iterable[str], load: Callable[..., Any], say: Progress,
              rehearse: Callable[[Progress], Any] | None = None) -> threading.Thread | None:
        """Prepare ``names`` (load, then build each one's static step, then ``rehearse(say)``: one
        short untimed run of the configuration) in a daemon thread; None when a preparation is
        already running."""
        with self._lock:
            if self.running:
                return None
            self.names, self.seconds, self.errors = tuple(dict.fromkeys(names)), {}, {}
            self.started, self.stage = time.perf_counter(), "starting"
            self._done.clear()
        thread = self._thread = threading.Thread(target=self._run, args=(self.names, load, say, rehearse),
                                                 name="specviz-warm-up", daemon=True)
        thread.start()
        return thread


STARTUP = StartUp()


def prepare(names: Iterable[str], load: Callable[..., Any] | None = None, say: Progress | None = None,
            rehearse: Callable[[Progress], Any] | None = None) -> threading.Thread | None:
    """Start preparing ``names`` (the default configuration's models; ``rehearse``: one short
    untimed run of it) in the background: :data:`STARTUP` says what it is doing; a run that needs
    them waits for it and says so."""
    if load is None:
        from ..models import load_model as load
    return STARTUP.start(names, load, say or (lambda msg: print(f"[specviz] {msg}", flush=True)), rehearse)
