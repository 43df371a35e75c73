"""ZeroGPU: Hugging Face Spaces' shared GPUs, used when the ``spaces`` package says so.

On a ZeroGPU Space (``spaces`` importable and ``SPACES_ZERO_GPU`` set) a GPU is lent only while
a function decorated with ``spaces.GPU`` runs, and that function runs in a *forked worker
process*: its arguments and results are pickled across, and nothing it changes in the app's
memory comes back. So the app hands the GPU only pure work with plain arguments:

- the playground records a whole run (or the target-only baseline) into a trace file in one GPU
  call (:func:`record_run`), then steps through the recorded steps (:class:`specviz.app.replay.Replay`), so
  Step, Play, Pause and the inspector behave as they do on a CPU;
- the Learn tab's next-token sampling and the Benchmark tab's sweep are already pure functions
  of the request.

Everywhere else (a CPU Space, a laptop, the tests) :func:`on_gpu` just calls the function.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

from ..app.replay import Replay
from ..core.hooks import TraceRecorder

log = logging.getLogger(__name__)

RUN_SECONDS = 120  # the GPU time asked for one recorded run or one next-token comparison
SWEEP_SECONDS = 600  # ... and for one benchmark sweep


def active() -> bool:
    """True on a ZeroGPU Space: ``spaces`` is importable and its config says ZeroGPU."""
    try:
        from spaces.config import Config
    except Exception:  # noqa: BLE001 - not installed, or a version without this module
        return False
    return bool(getattr(Config, "zero_gpu", False))


def _keep_message(fn: Callable[..., Any], args: tuple, kwargs: dict) -> tuple[bool, Any]:
    """(True, fn's result) or (False, a ValueError's message): an exception raised in a ZeroGPU
    worker reaches the app without its text, and these messages are meant for the visitor."""
    try:
        return True, fn(*args, **kwargs)
    except ValueError as e:
        return False, str(e)


def _gpu_seconds(fn: Callable[..., Any], args: tuple, kwargs: dict) -> int:
    return int(getattr(fn, "gpu_seconds", RUN_SECONDS))


def on_gpu(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``; on ZeroGPU inside ``spaces.GPU`` (asking for ``fn.gpu_seconds``,
    default :data:`RUN_SECONDS`), with a ValueError's message carried back from the worker."""
    if not active():
        return fn(*args, **kwargs)
    import spaces

    ok, value = spaces.GPU(duration=_gpu_seconds)(_keep_message)(fn, args, kwargs)
    if not ok:
        raise ValueError(value)
    return value


# -- the playground: record on the GPU, replay in the app ---------------------------------------


def record_run(settings: Any, path: str, target_only: bool = False) -> str:
    """Run ``settings`` (a ``ui.state.Settings``) to the end, writing every step to the trace
    file ``path``; returns ``path``. Pure: plain arguments in, a file out (safe in a fork)."""
    from ..app.runs import build_decoder

    decoder = build_decoder(settings, lambda msg: log.info("%s", msg), target_only=target_only)
    with open(path, "w", encoding="utf-8") as fh:
        decoder.generate(settings.prompt, max_new_tokens=settings.max_new_tokens, seed=settings.seed,
                         hooks=[TraceRecorder(fh)], chat=settings.chat)
    return path


def record(settings: Any, path: str, target_only: bool = False) -> Replay:
    """Record the run (on the GPU on ZeroGPU) and return it ready to replay step by step."""
    return Replay(on_gpu(record_run, settings, path, target_only))
