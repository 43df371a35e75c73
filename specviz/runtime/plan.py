"""Which kernel each kind of weight runs at each width, on this machine: a plan, made by one step.

A plan is ``{kind: {width: kernel}}``: the LM head (``head``) and each projection kind of a decoder
body (``qkv``, ``o``, ``gate_up``, ``down``) name a kernel of :mod:`specviz.runtime.kernels`; the
greedy argmax (``argmax``: ``bf16``, ``int8`` or ``full``) and a sampled step's bounds (``sampled``:
``bf16`` or ``full``) name what runs instead. A width between two planned ones takes the narrower's;
a wider one the widest's.

:func:`specviz.tuning.tune` (``specviz tune``, the app's warm-up, ``make bench``) measures it
once and writes one file per machine, model, torch version and thread count (:func:`write`); a
load, a decoder and its steps only read it (:func:`read`, :func:`of`). Without one, each kind
takes the CPU features' default (:func:`default_kernel`), logged once. Screens are exact, so the
plan never changes a certified result. Where the batch-invariant product runs, it runs every
width of every float32 kind (:func:`specviz.tuning.choose`): a verify pass's rows are the one-token step's, bit
for bit, on every machine.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from . import cpu, state
from .kernels import DEFAULT, TABLE

log = logging.getLogger(__name__)

FORMAT = 1
WIDTHS = tuple(range(1, cpu.MEASURED_ROWS + 1))  # float kernels: 1 (target-only) .. 9 (verifying k = 8)


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
    """The plan ``model`` was loaded with (:func:`specviz.runtime.projections.load`), or feature defaults for a model loaded otherwise."""
    held = state.peek(model) if isinstance(model, torch.nn.Module) else None
    return held.plan if held is not None and held.plan is not None else Plan("")
