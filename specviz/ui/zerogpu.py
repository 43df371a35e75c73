"""ZeroGPU: Hugging Face Spaces' shared GPUs, used when the ``spaces`` package says so.

On a ZeroGPU Space (``spaces`` importable and ``SPACES_ZERO_GPU`` set) a GPU is lent only while
a function decorated with ``spaces.GPU`` runs, and that function runs in a *forked worker
process*: its arguments and results are pickled across, and nothing it changes in the app's
memory comes back. So the app hands the GPU only pure work with plain arguments, one call each:

- the playground records a whole run (or the target-only baseline) into a trace file
  (:func:`record_run`), then steps through the recorded steps (:class:`specviz.app.replay.Replay`),
  so Step, Play, Pause and the inspector behave as they do on a CPU;
- the Learn tab's next-token sampling and the Benchmark tab's sweep are pure functions of the
  request already; the Advisor calibrates and ranks in one call, and runs its top configurations
  in another (``advisor_tab.advise_report``, ``advisor_tab.top_report``).

Each call asks for the GPU time its work needs (:func:`seconds_for`), not a flat maximum: a
visitor's daily quota is counted in requested seconds (2 minutes unauthenticated, 5 signed in),
and a request larger than what is left is refused before any work. Such a refusal (the quota, no
GPU free) reaches the visitor as one sentence (:func:`visitor_message`), and the page keeps what
it shows. Everywhere else (a CPU Space, a laptop, the tests) :func:`on_gpu` just calls the function.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Callable

from ..app.replay import Replay
from ..core.hooks import TraceRecorder

log = logging.getLogger(__name__)

START_S = 30  # loading the models onto the lent GPU (from the Space's disk) and a first step's warm-up
TOKEN_S = 0.1  # one decoded token, generous for the eager step of the small models a Space serves
COST_MODEL_S = 40  # the advisor's t(n) timings (n = 1..17, a few repeats) on the lent GPU
MIN_S, MAX_S = 20, 600  # what one call may ask for (ZeroGPU's default is 60 s)
RUN_SECONDS = 60  # a function with no estimate below (and no ``gpu_seconds``): ZeroGPU's default
SWEEP_SECONDS = MAX_S  # the most a sweep may ask for: ZeroGPU ends a call at its duration, so a larger one is refused first

_in_worker = False  # True inside a GPU call's worker: work there runs where it is, never nests a call


def active() -> bool:
    """True on a ZeroGPU Space: ``spaces`` is importable and its config says ZeroGPU (and this is
    not already a GPU worker)."""
    if _in_worker:
        return False
    try:
        from spaces.config import Config
    except Exception:  # noqa: BLE001 - not installed, or a version without this module
        return False
    return bool(getattr(Config, "zero_gpu", False))


# -- how much GPU time a call asks for -------------------------------------------------------------


def _clamp(seconds: float) -> int:
    return int(min(MAX_S, max(MIN_S, math.ceil(seconds))))


def _record_s(settings: Any, path: str = "", target_only: bool = False) -> float:
    return START_S + int(settings.max_new_tokens) * TOKEN_S  # a speculative run decodes no more than target-only


def _sweep_s(req: Any) -> float:
    """Every configuration on every prompt, target-only and the optional transformers run included,
    each warmed up once."""
    configs = len(req.proposers) * len(req.ks) * len(getattr(req, "schedules", ("constant",)) or ("constant",))
    runs = len(req.prompts) * (1 + configs + bool(getattr(req, "compare_hf", False))) + configs
    return START_S + runs * int(req.max_new_tokens) * TOKEN_S


def _advise_s(req: Any) -> float:
    """One greedy decode of the prompts (or the drafted tokens of a sampled calibration) and the cost model."""
    decode = len(req.prompts) * int(req.max_new_tokens) + len(req.proposers) * int(req.calibrate_tokens)
    return START_S + COST_MODEL_S + decode * TOKEN_S


def _run_top_s(req: Any, advice: Any, n: int, config: Any) -> float:
    runs = len(req.prompts) * (1 + int(n)) * max(1, int(getattr(config, "repeats", 1)))
    return START_S + runs * int(req.max_new_tokens) * TOKEN_S


ESTIMATES: dict[str, Callable[..., float]] = {
    "record_run": _record_s,
    "sweep_report": _sweep_s,
    "compare_on_model": lambda *a, **k: START_S,  # two forward passes, then the samples
    "verify_cost_points": lambda *a, **k: START_S + COST_MODEL_S,
    "advise_report": _advise_s,
    "top_report": _run_top_s,
}


def estimate_s(fn: Callable[..., Any], args: tuple, kwargs: dict) -> float:
    """The GPU seconds ``fn(*args, **kwargs)`` needs: its estimate from the request's size, else
    ``fn.gpu_seconds``, else :data:`RUN_SECONDS`."""
    estimate = ESTIMATES.get(getattr(fn, "__name__", ""))
    if estimate is not None:
        try:
            return float(estimate(*args, **kwargs))
        except (AttributeError, TypeError, ValueError):  # an argument of another shape: the plain default
            pass
    return float(getattr(fn, "gpu_seconds", RUN_SECONDS))


def seconds_for(fn: Callable[..., Any], args: tuple, kwargs: dict) -> int:
    """What the call asks ZeroGPU for: :func:`estimate_s` within [:data:`MIN_S`, :data:`MAX_S`]."""
    return _clamp(estimate_s(fn, args, kwargs))


# -- one call in the worker -------------------------------------------------------------------------


def _keep_message(fn: Callable[..., Any], args: tuple, kwargs: dict) -> tuple[bool, Any]:
    """(True, fn's result) or (False, a ValueError's message): an exception raised in a ZeroGPU
    worker reaches the app without its text, and these messages are meant for the visitor."""
    global _in_worker
    _in_worker = True  # a forked worker's own copy: the app's is untouched
    import torch

    # libgomp's thread pool does not survive a fork: a worker forked from an app that ran OpenMP on
    # two or more threads would hang at its first parallel CPU op; the GPU does the model's work here
    torch.set_num_threads(1)
    try:
        return True, fn(*args, **kwargs)
    except ValueError as e:
        return False, str(e)
    finally:
        _in_worker = False


def _gpu_seconds(fn: Callable[..., Any], args: tuple, kwargs: dict) -> int:
    return seconds_for(fn, args, kwargs)


def visitor_message(error: BaseException, seconds: int) -> str | None:
    """What a visitor reads when ZeroGPU refuses a call before any work (``spaces`` raises a
    ``gr.Error``: the daily quota, a request over the maximum, no GPU free), or None for another error."""
    text = str(getattr(error, "message", "") or error).strip()
    kept = "Nothing was lost: the page keeps what it shows."
    if "quota" in text.lower():
        return (f"ZeroGPU: {text} This needed about {seconds} s of GPU time; {kept} A run with fewer new tokens "
                "(or fewer prompts and configurations) asks for less, and the quota refills over the day.")
    if "larger than the maximum" in text or "No GPU" in text:
        return f"ZeroGPU: {text} (this needed about {seconds} s of GPU time). {kept} Try again shortly, or a smaller run."
    return None


def on_gpu(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``; on ZeroGPU inside ``spaces.GPU`` (asking for :func:`seconds_for`),
    with a ValueError's message carried back from the worker, and a refusal (quota, no GPU) as a
    ValueError the visitor reads."""
    if not active():
        return fn(*args, **kwargs)
    import spaces

    need = estimate_s(fn, args, kwargs)
    if need > MAX_S:  # ZeroGPU would end it at its duration, its work lost: said before any GPU time is spent
        raise ValueError(f"this needs about {math.ceil(need)} s of GPU time, more than one ZeroGPU call may take "
                         f"here ({MAX_S} s): choose fewer prompts, configurations or new tokens")
    seconds = _clamp(need)
    log.info("specviz: ZeroGPU call %s, asking for %d s", getattr(fn, "__name__", "?"), seconds)
    try:
        ok, value = spaces.GPU(duration=_gpu_seconds)(_keep_message)(fn, args, kwargs)
    except Exception as e:
        message = visitor_message(e, seconds)
        if message is None:
            raise
        raise ValueError(message) from None
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
