"""How the static decode step's body runs: runners behind one seam (three here, a fourth in layer_op: each layer one op).

The body (:class:`specviz.runtime.body.DecoderBody`) is one function of tensors, ``(tokens,
positions, rotary rows, masks, K/V buffers) -> hidden states``, that writes the new tokens' keys
and values into the buffers in place. A :class:`Runner` turns it and one example of its inputs
into a callable of the same inputs (the same hidden states, the same buffer writes):

- ``eager``: the body itself, op by op from Python; always there, and the fallback of the others;
- ``compile``: ``torch.compile`` (Inductor, ``dynamic=True``: one graph for every width of two or
  more and context span; a width of one gets its own, as Dynamo specialises sizes 0 and 1); built
  on the example and, for a wider one, on its first row too, so both graphs are paid for up front;
- ``export``: ``torch.export`` with symbolic width, span and capacity, compiled ahead of time by
  AOTInductor into a package on disk (:func:`package_path`: keyed by the body's code, shapes,
  constants and the torch version, under ``$SPECVIZ_CACHE_DIR/static_decode`` like the converted
  models, or a directory the caller names); the weights stay out of the package and are lent to
  it at load (``load_constants(user_managed=True)``), so a package is a few MB and is built once.

The fourth, ``fused`` (:mod:`specviz.runtime.layer_op`), runs each decoder layer of an int8 body as
one C++ op; it is a :class:`Runner` like these and chosen the same way.

Every build is timed (:class:`Built`); which runner a model keeps is chosen by
:mod:`specviz.runtime.static_decode` (by measurement, or by ``SPECVIZ_STATIC_DECODE``).

A bottom-layer module: it imports nothing from specviz but its settings.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import logging
import os
import sys
import textwrap
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from .. import settings

log = logging.getLogger(__name__)

Step = Callable[..., torch.Tensor]  # the body's inputs -> hidden states [n, d] (writes the buffers)
BUDGET_S = 120.0  # a build still running after this long is not waited for when choosing by measurement


@dataclass(frozen=True)
class Runner:
    """One way to run the body: its name, why it cannot run here (None: it can), and its build
    (body, example inputs, package directory) -> the step. ``any_width``: one build serves every
    width of a body whose shapes are all written for any n (plain ``nn.Linear`` or specviz's int8
    projections); a body with projections that loop over their rows in Python, which a graph
    unrolls, gets a build per width (eager serves every width of every body)."""

    name: str
    build_step: Callable[[torch.nn.Module, tuple, Path | None], Step]
    unavailable: Callable[[], str | None] = lambda: None
    every_body_any_width: bool = False

    def any_width(self, body: torch.nn.Module) -> bool:
        return self.every_body_any_width or bool(getattr(body, "any_width", False))

    def build(self, body: torch.nn.Module, example: tuple, directory: Path | None = None) -> "Built":
        """The step for ``body``, built (and, for the compiled runners, run once) on ``example``."""
        t = time.perf_counter()
        step = self.build_step(body, example, directory)
        return Built(self.name, step, time.perf_counter() - t, getattr(step, "note", ""))


@dataclass(frozen=True)
class Built:
    """A runner's step for one body and what building it cost (wall seconds; ``note``: e.g. the
    package it loaded)."""

    runner: str
    step: Step
    seconds: float
    note: str = ""


def build_within(runner: Runner, body: torch.nn.Module, example: tuple, directory: Path | None,
                 budget_s: float | None) -> Built:
    """:meth:`Runner.build`, given up on (TimeoutError) after ``budget_s`` seconds (None: no bound).
    A build given up on finishes in a background thread and is dropped (an export package it
    writes still serves the next process)."""
    if budget_s is None:
        return runner.build(body, example, directory)
    done: dict[str, object] = {}
    inference, grad = torch.is_inference_mode_enabled(), torch.is_grad_enabled()  # thread-local: carried over

    def work():
        try:
            with torch.inference_mode(inference), torch.set_grad_enabled(grad):
                done["built"] = runner.build(body, example, directory)
        except BaseException as e:  # handed to the caller
            done["error"] = e

    worker = threading.Thread(target=work, name=f"specviz-build-{runner.name}", daemon=True)
    worker.start()
    worker.join(budget_s)
    if worker.is_alive():
        raise TimeoutError(f"still building after {budget_s:.0f} s")
    if "error" in done:
        raise done["error"]  # type: ignore[misc]
    return done["built"]  # type: ignore[return-value]


def first_row(example: tuple) -> tuple:
    """The same inputs for the example's first token only (its keys and values, written at its slot,
    are the ones the full example writes there: the first token sees only the context)."""
    *rows, keys, values = example
    return (*(t[:1] for t in rows), keys, values)


def widened(example: tuple, n: int) -> tuple:
    """The example's first token repeated n times: n rows that each see what the first sees and
    write its keys and values at its slot (the same values, whatever n), to time a width."""
    *rows, keys, values = first_row(example)
    return (*(t.expand(n, *t.shape[1:]).contiguous() for t in rows), keys, values)


def two_wide(example: tuple) -> tuple:
    """The example with at least two tokens (its first row repeated), for a graph that must not
    specialise the width to 1; only for tracing with fake tensors, never run."""
    if int(example[0].shape[0]) > 1:
        return example
    *rows, keys, values = example
    return (*(torch.cat([t[:1], t[:1]]) for t in rows), keys, values)


class _Labelled:
    """A step with a note on how it was built (for the log line)."""

    def __init__(self, step: Step, note: str):
        self._step, self.note = step, note

    def __call__(self, *args):
        return self._step(*args)


# -- eager ---------------------------------------------------------------------------------------


def _eager(body: torch.nn.Module, example: tuple, directory: Path | None) -> Step:
    return body


# -- torch.compile -------------------------------------------------------------------------------


def mark(t: torch.Tensor, dim: int) -> None:
    """Tell Dynamo that ``t``'s size ``dim`` varies (width n, context span S, capacity C) rather
    than letting it share a symbol with an equal fixed size (duck sizing: a span of 640 would be
    specialised with gemma-3-270m's hidden size) or specialise on the first size seen."""
    torch._dynamo.maybe_mark_dynamic(t, dim)


def _compile(body: torch.nn.Module, example: tuple, directory: Path | None) -> Step:
    fullgraph = bool(getattr(body, "rows_at_once", getattr(body, "any_width", False)))  # a projection's row loop breaks the graph
    # every body's layer is one code object, each body up to four graphs of it (width 1 or more, span
    # below or at capacity): Dynamo's recompile limit raised for these calls only, not for the process
    roomy = torch._dynamo.config.patch(recompile_limit=max(torch._dynamo.config.recompile_limit, 64))
    if hasattr(body, "run_layers"):  # one decoder layer compiled, its graph shared by every layer
        compiled = roomy(torch.compile(body.layer, fullgraph=fullgraph))

        def layer(h, module, w, pos, cos, sin, mask, keys, values):
            mark(h, 0)
            return compiled(h, module, w, pos, cos, sin, mask, keys, values)

        def step(tokens, pos, cos, sin, cos_local, sin_local, mask, mask_local, keys, values):
            for t in (pos, cos, sin, cos_local, sin_local, mask, mask_local):
                mark(t, 0)
            for t in (mask, mask_local, keys[0], values[0]):
                mark(t, t.dim() - 1 if t.dim() == 2 else 1)
            return body.run_layers(layer, tokens, pos, cos, sin, cos_local, sin_local, mask, mask_local, keys, values)
    else:
        step = roomy(torch.compile(body, dynamic=True, fullgraph=fullgraph))
    if int(example[0].shape[0]) > 1:
        step(*first_row(example))  # the width-1 graph (Dynamo specialises size 1)
    step(*example)  # compiles here, not in the session's first timed step
    return step


# -- torch.export + AOTInductor ------------------------------------------------------------------


def cache_home() -> Path:
    """specviz's cache directory: ``$SPECVIZ_CACHE_DIR`` (where the converted models live), else
    ``~/.cache/specviz``."""
    env = settings.value("SPECVIZ_CACHE_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "specviz"


def cache_root() -> Path:
    """Where packages live by default: ``<cache_home()>/static_decode``."""
    return cache_home() / "static_decode"


def _code(cls: type) -> str:
    """``cls``'s code as a syntax tree, without comments and docstrings (editing those keeps a package)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree)


def fingerprint(body: torch.nn.Module) -> str:
    """A key for everything an exported graph bakes in: the torch version, the body's code, its
    scalar settings, and every module type and tensor name, shape and dtype (not the weights' values,
    which are lent to the package at load)."""
    h = hashlib.sha256()
    h.update(f"{torch.__version__}|{sys.version_info[:2]}|".encode())
    h.update(_code(type(body)).encode())
    for name, module in body.named_modules():
        scalars = {k: v for k, v in vars(module).items() if not k.startswith("_") and isinstance(v, (bool, int, float, str, list, tuple))}
        h.update(f"{name}:{type(module).__qualname__}:{module.extra_repr()}:{sorted(scalars.items())!r}|".encode())
    for name, t in (*body.named_parameters(), *body.named_buffers()):
        h.update(f"{name}:{tuple(t.shape)}:{t.dtype}|".encode())
    return h.hexdigest()[:24]


def package_path(body: torch.nn.Module, directory: Path | None = None) -> Path:
    """The AOTInductor package of ``body`` (built or not)."""
    return (directory or cache_root()) / f"{type(body).__name__.strip('_').lower()}-{fingerprint(body)}.pt2"


def _dynamic_shapes():
    """Width n, context span S and buffer capacity C symbolic, in the body's argument order."""
    from torch.export import Dim

    n, span, cap = Dim("n", min=1, max=1 << 16), Dim("S", min=2, max=1 << 24), Dim("C", min=2, max=1 << 24)
    return ({0: n}, {0: n}, {0: n}, {0: n}, {0: n}, {0: n}, {0: n, 1: span}, {0: n, 1: span}, {2: cap}, {2: cap})


def _export(body: torch.nn.Module, example: tuple, directory: Path | None) -> Step:
    if getattr(body, "rows_at_once", False) and not getattr(body, "any_width", False):
        raise RuntimeError("its projections change kernel with the width, which one graph of symbolic width cannot hold")
    path = package_path(body, directory)
    note = f"loaded {path}"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        program = torch.export.export(body, two_wide(example), dynamic_shapes=_dynamic_shapes(), strict=False)
        tmp = path.with_name(f"{path.stem}.{os.getpid()}.{threading.get_ident()}.tmp.pt2")
        torch._inductor.aoti_compile_and_package(
            program, package_path=str(tmp), inductor_configs={"aot_inductor.package_constants_in_so": False})
        os.replace(tmp, path)  # whole or not at all, for a concurrent process
        note = f"built {path}"
    compiled = torch._inductor.aoti_load_package(str(path))
    tensors = {**dict(body.named_parameters()), **dict(body.named_buffers())}
    compiled.load_constants({k: tensors[k] for k in compiled.get_constant_fqns()}, check_full_update=True,
                            user_managed=True)  # the model's own weights: no copy
    step = _Labelled(compiled, note)
    step(*example)
    return step


def _export_unavailable() -> str | None:
    return None if hasattr(torch._inductor, "aoti_compile_and_package") else "no AOTInductor packaging in this torch"


# -- the choice ----------------------------------------------------------------------------------

_built: list[Built] = []  # every build in this process
_kept: list[str] = []  # the runner each body kept, in order
_choices: list[dict] = []  # each choice by measurement: {"label", "kept", "width", "ms": {runner: per call}}


def build_seconds() -> float:
    """Seconds this process has spent building static decode steps (tracing, compiling, exporting, loading)."""
    return sum(b.seconds for b in _built)


def kept() -> tuple[str, ...]:
    """The runners the bodies of this process kept, each once, in the order first kept."""
    return tuple(dict.fromkeys(_kept))


def choices() -> list[dict]:
    """Each runner choice this process measured: the body's label, the runner kept, and each runner's
    ms per call at the two widths timed (``width``/``ms`` and ``wide``/``wide_ms``; for ``specviz
    bench``'s kernel lines)."""
    return [dict(c) for c in _choices]


def per_call_s(steps: dict[str, Step], example: tuple, rounds: int = 3) -> dict[str, float | Exception]:
    """Each step's median wall time per call on ``example`` over ``rounds`` rounds, the steps
    interleaved within a round (after one untimed round), so a busy machine slows them alike; a
    step that raises is timed no more and gets its exception instead. Each call writes the same
    keys and values at the same slots: repeating it changes nothing."""
    times: dict[str, list[float]] = {name: [] for name in steps}
    failed: dict[str, Exception] = {}
    for r in range(rounds + 1):
        for name, step in steps.items():
            if name in failed:
                continue
            t = time.perf_counter()
            try:
                step(*example)
            except Exception as e:
                failed[name] = e
            if r:
                times[name].append(time.perf_counter() - t)
    return {name: failed.get(name) or sorted(v)[len(v) // 2] for name, v in times.items()}


# the widths a runner choice times: a decode step's, and a verify pass of k = 4 drafts (the default k)
TIMED_WIDTHS = (1, 5)


class Choice:
    """The runner one body keeps, chosen on the body's first call: the one named, or the fastest
    of several by measurement (each built within :data:`BUDGET_S`, timed at :data:`TIMED_WIDTHS`
    on that call's first token, the times summed: a runner fast on one token but slow on a verify
    pass's five is not kept on a tie at one,
    the builds' cost logged and counted in :func:`build_seconds`). A runner that fails, at build or
    at any call, gives way to ``eager`` for this body, said once in the log with the reason; the
    call that failed is rerun eagerly on the same inputs, so the tokens are the same."""

    def __init__(self, body: torch.nn.Module, candidates: tuple[Runner, ...], label: str,
                 directory: Path | None = None, budget_s: float | None = BUDGET_S):
        self.body, self.candidates, self.label, self.directory = body, candidates, label, directory
        self.budget_s = budget_s if len(candidates) > 1 else None  # a runner asked for by name may take its time
        self.runner: Runner | None = None  # the one kept, after the first call
        self.per_call: dict[str, float] = {}  # seconds a call of each timed width took, summed, by runner
        self.per_width: dict[int, dict] = {}  # width -> runner -> seconds a call (or the exception it raised)
        self.steps: dict[int | None, Step] = {}  # the kept runner's steps by width (None: every width)
        self.build_s: dict[str, float] = {}  # seconds spent building, by runner (every width)
        self._lock = threading.RLock()

    def __call__(self, example: tuple) -> torch.Tensor:
        step = self._step(example)
        try:
            return step(*example)
        except Exception as e:
            if self.runner is EAGER:
                raise
            self._fall_back(e)
            return self.body(*example)

    def has_step(self, n: int) -> bool:
        """Whether a call of n tokens finds its step built (the runner chosen, its graph made)."""
        if self.runner is None:
            return False
        if self.runner.any_width(self.body):
            return None in self.steps
        key = getattr(self.body, "graph_key", None)
        return (n if key is None else key(n)) in self.steps

    def prepare(self, example: tuple) -> None:
        """Choose the runner (on this example) and build the step that serves its width, now."""
        self._step(example)

    def _width(self, example: tuple) -> object:
        """The key of the step that serves ``example``: None (one for every width), or what the
        body's ``graph_key(n)`` says tells graphs apart (the kernels its projections run at width
        n: widths with the same kernels share a graph), else the width itself."""
        if self.runner.any_width(self.body):
            return None
        n = int(example[0].shape[0])
        key = getattr(self.body, "graph_key", None)
        return n if key is None else key(n)

    def _step(self, example: tuple) -> Step:
        if self.runner is None:
            with self._lock:
                if self.runner is None:
                    self._choose(example)
        step = self.steps.get(self._width(example))
        if step is None:
            with self._lock:
                step = self.steps.get(self._width(example))
                if step is None:  # a new width of a per-width runner
                    try:
                        step = self.steps[self._width(example)] = self._build(self.runner, example, None).step
                    except Exception as e:
                        self._fall_back(e)
                        step = self.body
        return step

    def _build(self, runner: Runner, example: tuple, budget_s: float | None) -> Built:
        built = build_within(runner, self.body, example, self.directory, budget_s)
        _built.append(built)
        self.build_s[runner.name] = self.build_s.get(runner.name, 0.0) + built.seconds
        width = "" if runner.any_width(self.body) else f" for {int(example[0].shape[0])} token(s)"
        log.info("specviz: built the %s static decode step of %s%s in %.1f s%s", runner.name, self.label, width,
                 built.seconds, f" ({built.note})" if built.note else "")
        return built

    def _choose(self, example: tuple) -> None:
        built: dict[str, Built] = {}
        for runner in self.candidates:
            why = runner.unavailable()
            try:
                if why is not None:
                    raise RuntimeError(why)
                built[runner.name] = self._build(runner, example, self.budget_s)
            except Exception as e:
                log.warning("specviz: no %s static decode step for %s (%s: %s)", runner.name, self.label, type(e).__name__, e)
        if not built:
            built["eager"] = self._build(EAGER, example, None)
        extra: dict[str, dict[int, Step]] = {k: {} for k in built}  # per-width runners' steps at the timed widths
        if len(self.candidates) > 1:
            for n in TIMED_WIDTHS:  # a decode step's width and a verify pass's: a runner kept is fastest over both
                at_n = first_row(example) if n == 1 else widened(example, n)
                steps = {}
                for k, b in built.items():
                    runner = next(r for r in (*self.candidates, EAGER) if r.name == k)
                    if runner.any_width(self.body) or n == int(example[0].shape[0]):
                        steps[k] = b.step
                    else:
                        try:
                            steps[k] = extra[k][n] = self._build(runner, at_n, self.budget_s).step
                        except Exception as e:  # noqa: BLE001 - a width it cannot build: not kept
                            steps[k] = e
                unbuilt = {k: st for k, st in steps.items() if isinstance(st, Exception)}
                self.per_width[n] = {**per_call_s({k: st for k, st in steps.items() if k not in unbuilt}, at_n), **unbuilt}
            for k in list(built):
                failed = next((t[k] for t in self.per_width.values() if isinstance(t.get(k), Exception)), None)
                if failed is not None:  # built, but fails on a real call
                    del built[k]
                    log.warning("specviz: no %s static decode step for %s (%s: %s)", k, self.label, type(failed).__name__, failed)
                else:
                    self.per_call[k] = sum(t[k] for t in self.per_width.values())
        if not built:
            built["eager"] = self._build(EAGER, example, None)
        name = min(built, key=lambda k: self.per_call.get(k, 0.0))
        self.runner = next(r for r in (*self.candidates, EAGER) if r.name == name)
        self.steps = {self._width(example): built[name].step}
        for n, step in extra.get(name, {}).items():
            self.steps.setdefault(self._width(widened(example, n)), step)
        _kept.append(name)
        if len(self.candidates) > 1:
            ms = {n: {k: round(v * 1e3, 3) for k, v in t.items() if k in built} for n, t in self.per_width.items()}
            _choices.append({"label": self.label, "kept": name, "width": TIMED_WIDTHS[0], "ms": ms[TIMED_WIDTHS[0]],
                             "wide": TIMED_WIDTHS[1], "wide_ms": ms[TIMED_WIDTHS[1]]})
            timed = "; ".join(f"on {n} token(s) " + ", ".join(f"{k} {v:.2f} ms" for k, v in sorted(t.items(), key=lambda kv: kv[1]))
                              for n, t in ms.items())
            log.info("specviz: static decode step of %s, per call %s; keeping %s", self.label, timed, name)

    def _fall_back(self, error: Exception) -> None:
        """Eager from now on for this body (said once)."""
        with self._lock:
            if self.runner is EAGER:  # another thread fell back first
                return
            log.warning("specviz: the %s static decode step of %s failed (%s: %s); running it eagerly from now on",
                        self.runner.name, self.label, type(error).__name__, error)
            self.runner, self.steps = EAGER, {None: self.body}
            _kept.append("eager")


EAGER = Runner("eager", _eager, every_body_any_width=True)
COMPILE = Runner("compile", _compile, lambda: None if hasattr(torch, "compile") else "no torch.compile")
EXPORT = Runner("export", _export, _export_unavailable)

__all__ = ["BUDGET_S", "TIMED_WIDTHS", "Built", "COMPILE", "Choice", "EAGER", "EXPORT", "Runner", "build_seconds", "build_within", "choices",
           "cache_home", "cache_root", "fingerprint", "first_row", "kept", "package_path", "per_call_s", "widened"]
