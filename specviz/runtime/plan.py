"""Which kernel each kind of weight runs at each width, on this machine: a plan, made by one step.

A plan is ``{kind: {width: kernel}}``: the LM head (``head``) and each projection kind of a decoder
body (``qkv``, ``o``, ``gate_up``, ``down``) name a kernel of :mod:`specviz.runtime.kernels`; the
greedy argmax (``argmax``: ``bf16``, ``int8`` or ``full``) and a sampled step's bounds (``sampled``:
``bf16`` or ``full``) name what runs instead. A width between two planned ones takes the narrower's;
a wider one the widest's.

:func:`specviz.runtime.tune.tune` (``specviz tune``, the app's warm-up, ``make bench``) measures it
once and writes one file per machine, model, torch version and thread count (:func:`write`); a
load, a decoder and its steps only read it (:func:`read`, :func:`of`). Without one, each kind
takes the CPU features' default (:func:`default_kernel`), logged once. Screens are exact, so the
plan never changes a certified result. Where the batch-invariant product runs, it runs every
width of every float32 kind (:func:`choose`): a verify pass's rows are the one-token step's, bit
for bit, on every machine.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from . import cpu, state
from .kernels import DEFAULT, TABLE

log = logging.getLogger(__name__)

FORMAT = 1
WIDTHS = tuple(range(1, cpu.MEASURED_ROWS + 1))  # float kernels: 1 (target-only) .. 9 (verifying k = 8)
HEAD_REPEATS, BODY_REPEATS = 3, 5  # rounds per width (the min of them: a busy moment only adds time)
FASTER = 0.9  # without a batch-invariant kernel, a later one replaces the one chosen only under 90% of its time


@dataclass(frozen=True)
class KindPlan:
    """One kind's kernel by width and, where tuned, every kernel's ms at each width."""

    kernels: dict[int, str]  # width -> kernel name
    ms: dict[int, dict[str, float]] = field(default_factory=dict)  # width -> kernel -> ms ({}: a feature default)

    def kernel(self, rows: int) -> str:
        """The kernel at ``rows`` rows: the widest planned width at or below it (the narrowest below all)."""
        below = [w for w in self.kernels if w <= rows]
        return self.kernels[max(below) if below else min(self.kernels)]

    def by_width(self, upto: int) -> tuple[str, ...]:
        """The kernels at widths 1..``upto``."""
        return tuple(self.kernel(r) for r in range(1, upto + 1))

    @property
    def cached(self) -> bool:  # read from a tuned plan (the reports' word)
        return bool(self.ms)


@dataclass(frozen=True)
class Plan:
    """A model's plan on this machine: its tuned kinds (the rest take feature defaults)."""

    key: str  # the model, as the file names it
    kinds: dict[str, KindPlan] = field(default_factory=dict)
    path: Path | None = None  # the file it was read from or written to (None: defaults only)

    def kind(self, name: str, dtype: torch.dtype = torch.float32, default: str | None = None) -> KindPlan:
        """``name``'s tuned plan, else ``default`` (or the CPU features' default) at every width."""
        return self.kinds.get(name) or KindPlan({1: default or default_kernel(name, dtype)})

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "model": self.key, "machine": cpu.machine_id(), "torch": torch.__version__,
                "threads": torch.get_num_threads(), "load": cpu.load_average(),
                "kinds": {k: {"kernels": {str(w): n for w, n in p.kernels.items()},
                              "ms": {str(w): m for w, m in p.ms.items()}} for k, p in self.kinds.items()}}


def default_kernel(kind: str, dtype: torch.dtype = torch.float32) -> str:
    """What ``kind`` runs without a plan, from this CPU's features (as ggml scores its CPU variants
    and ATen dispatches by capability): never a measurement."""
    if kind == "argmax" or kind == "sampled":
        return "bf16"  # the certified screen reads half the head's bytes (exact either way)
    for k in TABLE.values():  # the table's order: batch-invariant first
        if k.runs(dtype) and k.name != DEFAULT:
            return k.name
    return DEFAULT


def key_of(name: str, dtype: torch.dtype, quantize: str | None = None) -> str:
    """A model's plan key: its name, dtype and quantization."""
    return f"{name} {str(dtype).removeprefix('torch.')}{' ' + quantize if quantize else ''}"


def path_of(key: str, cache_dir: str | Path) -> Path:
    """The plan file of ``key`` on this machine, torch version and thread count."""
    here = f"{cpu.machine_id()} | torch {torch.__version__} | {torch.get_num_threads()} threads"
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", key)[:80]
    return Path(cache_dir).expanduser() / "plans" / f"{slug}-{hashlib.sha256(f'{key} | {here}'.encode()).hexdigest()[:12]}.json"


def read(key: str, cache_dir: str | Path | None) -> Plan | None:
    """The tuned plan of ``key`` here, or None (none, or unreadable: said in the log)."""
    path = path_of(key, cache_dir) if cache_dir is not None else None
    if path is None or not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
        if data.get("format") != FORMAT:
            raise ValueError(f"format {data.get('format')!r}, not {FORMAT}")
        kinds = {k: KindPlan({int(w): str(n) for w, n in v["kernels"].items()},
                             {int(w): {str(a): float(b) for a, b in m.items()} for w, m in v.get("ms", {}).items()})
                 for k, v in data["kinds"].items()}
        if any(not p.kernels for p in kinds.values()):
            raise ValueError("a kind with no widths")
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        log.warning("specviz: the kernel plan %s is unreadable (%s); kernels from CPU features", path, e)
        return None
    return Plan(key, kinds, path)


def write(plan: Plan, cache_dir: str | Path) -> Path:
    """``plan`` as its file, atomically (a reader sees the old file or the new one)."""
    path = path_of(plan.key, cache_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w") as f:
        json.dump(plan.to_json(), f, indent=1)
    os.replace(tmp, path)
    return path


def of(model: torch.nn.Module | None) -> Plan:
    """The plan ``model`` was loaded with (:func:`load`), or feature defaults for a model loaded otherwise."""
    held = state.peek(model) if isinstance(model, torch.nn.Module) else None
    return held.plan if held is not None and held.plan is not None else Plan("")


# -- measuring (specviz tune) ------------------------------------------------------------------


def time_kernels(weights: Sequence[torch.Tensor], rows: int, repeats: int,
                 clock: Callable[[], float] = time.perf_counter) -> dict[str, float]:
    """Seconds per pass of every kernel that runs here over ``weights`` (one kind's, read one after
    another as a forward reads them, each out of the cache when read again) at ``rows`` rows:
    the min of ``repeats`` rounds, the kernels interleaved (the order reversed every other round)."""
    dtype = weights[0].dtype
    x = torch.randn(rows, weights[0].shape[1], dtype=dtype)  # [rows, in]
    passes = {}
    for k in TABLE.values():
        copies = [k.prepare(w) if k.prepare else None for w in weights] if k.runs(dtype) else [None]
        if k.runs(dtype) and (k.copy is None or None not in copies):
            passes[k.name] = lambda k=k, copies=copies: [k.run(x, w, c, None, w.shape[0]) for w, c in zip(weights, copies)]
    return time_passes(passes, repeats, clock)


def time_passes(passes: dict[str, Callable[[], object]], repeats: int,
                clock: Callable[[], float] = time.perf_counter) -> dict[str, float]:
    """Seconds per call of each pass: one call to warm, then the min of ``repeats`` rounds, the
    passes interleaved (the order reversed every other round; kernels and the head screens alike)."""
    times: dict[str, list[float]] = {n: [] for n in passes}
    with torch.inference_mode():
        for p in passes.values():
            p()  # warm: oneDNN builds a primitive per shape
        for r in range(repeats):
            for name in (list(passes) if r % 2 == 0 else list(passes)[::-1]):
                t = clock()
                passes[name]()
                times[name].append(clock() - t)
    return {n: min(ts) for n, ts in times.items()}


def choose(seconds: dict[str, float], order: Sequence[str] = tuple(TABLE)) -> str:
    """The kernel a width runs. A batch-invariant kernel timed here runs every width, however the
    others time: a verify pass's rows are then the one-token step's, bit for bit, which is what
    "speculative greedy = target-only greedy" rests on (the others' times stay in the plan, for the
    report). Without one, each kernel in ``order`` replaces the one chosen so far only where it takes
    under :data:`FASTER` of every earlier one's time."""
    invariant = [n for n in order if n in seconds and TABLE[n].batch_invariant]
    if invariant:
        return invariant[0]
    chosen, best = None, float("inf")
    for name in order:
        t = seconds.get(name)
        if t is not None and (chosen is None or t < best * FASTER):
            chosen = name
        best = min(best, t) if t is not None else best
    return chosen or DEFAULT


def measure_kind(weights: Sequence[torch.Tensor], repeats: int, widths: Sequence[int] = WIDTHS) -> KindPlan:
    """One kind's plan, every kernel timed at every width."""
    ms = {r: {n: round(s * 1e3, 3) for n, s in time_kernels(weights, r, repeats).items()} for r in widths}
    return KindPlan({r: choose(m) for r, m in ms.items()}, ms)


def screen_kind(times: dict[int, dict[str, float]], kinds: Sequence[str]) -> KindPlan | None:
    """A screen's plan from {width: {"full": ms, kind: ms, ...}}: at each width the fastest of
    ``kinds`` where it takes under :data:`FASTER` of the full head's time ("full" elsewhere); None
    where none wins a width. Every screen's argmax is certified, so the choice moves only time: the
    int8 screen (a quarter of the bytes) wins the one-row steps of a memory-bound head, the bf16 one
    the wide verify passes, and a model keeps both where each wins somewhere."""
    def best(m: dict[str, float]) -> str:
        fastest = min((k for k in kinds if k in m), key=m.__getitem__, default="full")
        return fastest if fastest != "full" and m[fastest] < m["full"] * FASTER else "full"

    chosen = {w: best(m) for w, m in times.items()}
    return KindPlan(chosen, times) if any(k != "full" for k in chosen.values()) else None
