"""Measured CPU kernel choices: the LM head of large-vocabulary models, and the body's projections.

Target-only decoding runs the target's LM head on 1 row, verifying k drafts on k + 1 rows. Two
fp32 kernels compete for it: PyTorch's ``F.linear`` and oneDNN's linear
(``torch.ops.mkldnn._linear_pointwise``, the kernel Inductor uses). Which is faster depends on the
CPU and on the width. gemma-3-270m's 262,144 x 640 head on 2 threads: on an AVX-512/AMX Xeon
``F.linear`` wins below 4 rows (34 ms vs 44 at 3 rows) and loses from 4 (63 vs 44); on an AVX2-only
AMD EPYC (Zen 3) oneDNN wins at every width (1 row 55.5 ms vs 28.2, 3 rows 175 vs 63). So no rule
carried from one CPU decides: :func:`speed_up_lm_head` times both kernels on the model's own head at
every width from 1 to :data:`MEASURED_ROWS` rows (interleaved, median of a few), picks the faster per
width, and caches the choice as JSON (per CPU model and ISA flags, torch version, thread count, head
shape and dtype) in its caller's directory, so a later load does not measure (delete
``lm_head_kernels.json`` there to measure again). :func:`head_kernel_report` gives the choice and
both timings per width (``python benchmarks/lm_head.py``). The kernels differ in float rounding
(~1e-4 on logits), as any two GEMM kernels do. The decoder body's projections choose the same way
(:mod:`specviz.runtime.projections`). In bfloat16 (:data:`DTYPES`) oneDNN runs AMX tiles where the
CPU has them, and is never chosen where it has no bf16 product (:func:`onednn_bf16`); in fp32 more
kernels are timed: oneDNN on a packed copy (:func:`pack`), F.linear on a K-major copy (:func:`kmajor`,
one row), the weight as BLAS's left operand (:func:`_weight_first_linear`, one and two rows), and for a
large head Inductor's C++ GEMM (:mod:`specviz.runtime.inductor_gemm`). ``SPECVIZ_CPU_HEAD=0``: not the head."""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import logging
import os
import platform
import statistics
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from .. import settings
from .inductor_gemm import frozen_gemm

log = logging.getLogger(__name__)

MIN_HEAD_ELEMENTS = 8_000_000  # smaller heads are fast either way
# Widths measured: 1 (target-only) .. 9 (verifying k = 8, the widest k of the default bench sweep;
# the CLI's default k is 4). specviz.core.bounds.ENGINE_MAX_K (32) allows up to 33 rows and token
# trees verify more, but measuring every width costs a full head pass per kernel per round, so
# wider passes use the widest measured width's choice.
MEASURED_ROWS = 9
HEAD_REPEATS = 4  # rounds per width at most (fewer when one kernel is clearly the faster)
BUDGET_S = 6.0  # no new width is started past this much measuring; the rest take the widest choice
FASTER = 0.9  # oneDNN replaces F.linear at a width only when it takes under 90% of F.linear's time
CLEAR_GAP = 2.0  # one round decides a width when one kernel takes over twice the other's time
AGREED_GAP = 1.25  # two rounds decide it when both favour the same kernel by this much
CACHE_FILE = "lm_head_kernels.json"
CACHE_FORMAT = 8  # 8: specviz's blocked float32 product (projections); 2: bf16's oneDNN timed on its packed copy (:func:`pack`); 3: fp32's too; 4: fp32's K-major copy; 5: weight-first; 6: at 1-2 rows only; 7: Inductor GEMM
KERNELS = ("F.linear", "oneDNN", "oneDNN packed", "F.linear K-major", "weight-first", "Inductor GEMM", "specviz blocked")  # by code: a plan's onednn_at holds these indices
WEIGHT_FIRST_ROWS = 2  # weight-first is timed up to this many rows (see _weight_first_linear)
SPLIT = 4  # weight-first's one row: the weight's rows in this many blocks, one batched product (see _weight_first_linear)
PACK_ROWS = {torch.bfloat16: 1, torch.float32: 16}  # the rows oneDNN lays a packed copy out for (see pack)
DTYPES = (torch.float32, torch.bfloat16)  # the weights whose kernels are measured

TimeWidth = Callable[[torch.Tensor, int], tuple[float, ...]]  # (weight [out, in], rows) -> (F.linear s, oneDNN s[, packed s])


def _onednn_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """oneDNN's linear (fp32 or bf16): [rows, in] -> [rows, out]."""
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


@functools.cache
def onednn_bf16() -> bool:
    """Whether oneDNN has a bf16 inner product on this CPU (none on an AVX2-only one: Zen 3)."""
    try:
        _onednn_linear(torch.ones(1, 32, dtype=torch.bfloat16), torch.ones(8, 32, dtype=torch.bfloat16), None)
    except RuntimeError:
        return False
    return True


def pack(weight: torch.Tensor) -> torch.Tensor | None:
    """A weight [out, in] reordered once into oneDNN's own blocked layout for :data:`PACK_ROWS`
    rows (an mkldnn tensor, as many bytes again), which oneDNN's linear reads without reordering it
    on every call. bf16: oneDNN's only way (a plain bf16 weight is reordered on every call):
    gemma-3-270m's bf16 matrices at 1 row, all read in turn, 36 ms plain against 24 ms packed on an
    AMX Xeon (2 threads), flat to 9 rows. fp32: a third kernel, timed beside the other two (its
    262,144 x 640 head on an AVX2 Zen 1 EPYC: 2 rows 80 ms plain, 39 ms packed; 1 row 39 ms plain,
    45 ms packed), where it costs a second copy of the weight. None where this build lacks the op."""
    if weight.dtype not in PACK_ROWS or weight.device.type != "cpu":
        return None
    try:
        return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), PACK_ROWS[weight.dtype])
    except (RuntimeError, AttributeError):
        return None


def kmajor(weight: torch.Tensor) -> torch.Tensor | None:
    """A copy of an fp32 weight [out, in] stored K-major, [in, out] (as many bytes again): one row
    times it, ``x @ copy``, streams each input feature's long row of outputs, which on an AMX Xeon
    (2 threads) read gemma-3-270m's 262,144 x 640 head in 25 ms against 33 for ``F.linear`` on the
    weight, and its gate/up in 5.9 ms against 8.7; from two rows it is twice as slow, so it is a
    one-row kernel, timed there only. None for other dtypes or devices."""
    if weight.dtype != torch.float32 or weight.device.type != "cpu":
        return None
    return weight.detach().t().contiguous()  # [in, out]


def _kmajor_linear(x: torch.Tensor, t: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """F.linear through a K-major copy: [rows, in] @ [in, out] (+ bias) -> [rows, out]."""
    return x @ t if bias is None else torch.addmm(bias, x, t)


def _weight_first_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, out: int | None = None) -> torch.Tensor:
    """The product with the weight as BLAS's left operand: y^T = W x^T, [out, in] @ [in, rows], then
    back to [rows, out] (no second copy of the weight). One row goes as :data:`SPLIT` blocks of the
    weight's rows in one batched product (``torch.bmm``, [SPLIT, out/SPLIT, in] @ [SPLIT, in, 1]):
    a plain one-column product takes BLAS's matrix-vector path, as slow as F.linear's. On a Zen 4
    EPYC (2 threads) gemma-3-270m's 262,144 x 640 head took 17 ms this way at 1 row against 30-37
    for oneDNN, packed or not, and 27 against 34 at 2 rows (a one-off script, min of 3 rounds). From
    3 rows it was slower than oneDNN on the packed copy in all but one of five runs there (3 rows
    39-58 ms against 27-41, in a forward 102 against 72; 4-6 rows two to three times as slow),
    and one lucky round had put it in a plan at 3 rows, so it is timed at 1 and 2 rows only
    (:data:`WEIGHT_FIRST_ROWS`)."""
    rows, out = x.shape[0], int(weight.shape[0]) if out is None else out  # out: a Python int, so a graph keeps no shape ops
    if rows == 1 and out % SPLIT == 0:
        y = torch.bmm(weight.view(SPLIT, out // SPLIT, -1), x.t().unsqueeze(0).expand(SPLIT, -1, -1))  # [SPLIT, out/SPLIT, 1]
        y = y.view(1, out)
    else:
        y = (weight @ x.t()).t().contiguous()  # [out, rows] -> [rows, out]
    return y if bias is None else y + bias


@dataclass(frozen=True)
class WidthTiming:
    """The kernels' seconds on the head at one width (``rows`` rows at once); ``packed_s``: oneDNN
    on an fp32 weight's packed copy (None where not timed)."""

    rows: int
    f_linear_s: float
    onednn_s: float
    packed_s: float | None = None
    kmajor_s: float | None = None  # F.linear on fp32's K-major copy (one row only; None where not timed)
    wfirst_s: float | None = None  # the weight as the left operand (fp32; None where not timed)
    inductor_s: float | None = None  # Inductor's C++ GEMM on a frozen copy (a large fp32 head; None where not timed)
    blocked_s: float | None = None  # specviz's own float32 product on a blocked copy (:func:`specviz.runtime.dense_kernel.block`; None where not timed)

    @property
    def kernel(self) -> str:
        """The kernel this width uses: another than F.linear only where it is clearly the faster."""
        return choose_kernel(self.f_linear_s, self.onednn_s, self.packed_s, self.kmajor_s, self.wfirst_s, self.inductor_s,
                             self.blocked_s)


def choose_kernel(f_linear_s: float, onednn_s: float, packed_s: float | None = None, kmajor_s: float | None = None,
                  wfirst_s: float | None = None, inductor_s: float | None = None, blocked_s: float | None = None) -> str:
    """Each kernel in turn (F.linear, oneDNN, weight-first, oneDNN packed, F.linear K-major, Inductor
    GEMM, specviz blocked) replaces the one chosen so far only when it takes under ``FASTER`` of every
    earlier one's time: a kernel that needs a second copy of the weight (packed, K-major, Inductor's,
    blocked) comes last, so it must beat all others."""
    chosen, best = KERNELS[0], f_linear_s
    for code, t in ((1, onednn_s), (4, wfirst_s), (2, packed_s), (3, kmajor_s), (5, inductor_s), (6, blocked_s)):
        if t is not None and t < best * FASTER:
            chosen = KERNELS[code]
        best = min(best, t) if t is not None else best
    return chosen


@dataclass(frozen=True)
class HeadKernelPlan:
    """The kernel per width for one head on one machine, with the timings it was chosen from."""

    machine: str  # CPU model, family and ISA flags (machine_id())
    torch: str
    threads: int
    shape: tuple[int, int]  # the head's weight [out, in]
    dtype: str
    widths: tuple[WidthTiming, ...]  # rows 1, 2, ... in order
    measure_s: float  # seconds the measuring took (on the load that measured)
    cached: bool = False  # read from the cache file instead of measured on this load

    def kernel(self, rows: int) -> str:
        """The kernel for ``rows`` rows; wider than the measured range: the widest width's."""
        return self.widths[min(max(rows, 1), len(self.widths)) - 1].kernel

    @property
    def onednn_at(self) -> tuple[int, ...]:
        """The kernel (an index into :data:`KERNELS`: 0 F.linear, 1 oneDNN, 2 oneDNN on the packed
        copy, 3 F.linear on the K-major copy, 4 weight-first, 5 Inductor GEMM, 6 specviz blocked) at each
        row count, indexed by rows (index 0: no rows, F.linear); truthy where another kernel than
        F.linear on the weight runs."""
        return (0,) + tuple(KERNELS.index(w.kernel) for w in self.widths)

    def without(self, timing: str) -> "HeadKernelPlan":
        """This plan as if one kernel (its WidthTiming field: "inductor_s", "blocked_s") were never timed (not built here)."""
        return replace(self, widths=tuple(replace(w, **{timing: None}) for w in self.widths))

    def to_entry(self) -> dict[str, Any]:
        """The JSON-able cache entry (everything but ``cached``)."""
        d = asdict(self)
        d.pop("cached")
        d["shape"] = list(self.shape)
        return d


def _plan_from_entry(entry: dict[str, Any]) -> HeadKernelPlan:
    opt = lambda w, key: None if w.get(key) is None else float(w[key])  # noqa: E731
    widths = tuple(WidthTiming(int(w["rows"]), float(w["f_linear_s"]), float(w["onednn_s"]), opt(w, "packed_s"),
                               opt(w, "kmajor_s"), opt(w, "wfirst_s"), opt(w, "inductor_s"), opt(w, "blocked_s"))
                   for w in entry["widths"])
    if not widths or [w.rows for w in widths] != list(range(1, len(widths) + 1)):
        raise ValueError("widths must be rows 1, 2, ... in order")
    return HeadKernelPlan(
        machine=str(entry["machine"]), torch=str(entry["torch"]), threads=int(entry["threads"]),
        shape=(int(entry["shape"][0]), int(entry["shape"][1])), dtype=str(entry["dtype"]),
        widths=widths, measure_s=float(entry["measure_s"]), cached=True,
    )


# -- measuring ---------------------------------------------------------------------------------


def time_head(
    weight: torch.Tensor, rows: int, repeats: int = 3, *, early: bool = True,
    clock: Callable[[], float] = time.perf_counter, stat: Callable[[list[float]], float] = statistics.median,
) -> tuple[float, float]:
    """Median seconds of (F.linear, oneDNN) on ``rows`` random rows through ``weight`` [out, in].

    The kernels alternate within each of up to ``repeats`` rounds (F.linear first in even rounds,
    oneDNN first in odd ones). ``early``: stop after one round when one kernel took over
    ``CLEAR_GAP`` times the other's time, after two when both favoured the same kernel by
    ``AGREED_GAP``. Warm the kernels first (:func:`measure_head` does)."""
    return time_weights((weight,), rows, repeats, early=early, clock=clock, stat=stat)


def time_weights(
    weights: Sequence[torch.Tensor], rows: int, repeats: int = 3, *, early: bool = True,
    clock: Callable[[], float] = time.perf_counter, stat: Callable[[list[float]], float] = statistics.median,
    packed: Sequence[torch.Tensor | None] | None = None, kmajor: Sequence[torch.Tensor | None] | None = None,
    weight_first: bool = False, inductor: Callable[[torch.Tensor], torch.Tensor] | None = None,
    blocked: Callable[[torch.Tensor], object] | None = None,
) -> tuple[float | None, ...]:
    """:func:`time_head` over several weights of one shape read one after another, as a forward reads
    one projection per layer (each weight out of the cache when read again, as in a real forward):
    seconds of (F.linear, oneDNN; inf where oneDNN has no bf16 product) for one pass over all. Then,
    each where asked: ``packed`` copies (:func:`pack`: bf16's oneDNN reads them instead; fp32's a third
    kernel), fp32's ``kmajor`` copies (fourth), ``weight_first`` up to :data:`WEIGHT_FIRST_ROWS` rows
    (fifth), a one-weight head's ``inductor`` kernel (sixth), ``blocked``: specviz's own kernel
    (seventh); None in the places of kernels not timed. With ``early``, a kernel over ``CLEAR_GAP``
    times the fastest after a round is timed no more."""
    x = torch.randn(rows, weights[0].shape[1], dtype=weights[0].dtype)  # [rows, in]
    copies = list(packed or [None] * len(weights))
    bf16 = weights[0].dtype == torch.bfloat16
    theirs = [p if p is not None and bf16 else w for w, p in zip(weights, copies)]
    usable = not bf16 or onednn_bf16()  # else oneDNN's time is infinite: never chosen
    kernels = [lambda: [F.linear(x, w) for w in weights], lambda: [_onednn_linear(x, w, None) for w in theirs] if usable else []]
    third = not bf16 and None not in copies
    if third:
        kernels.append(lambda: [_onednn_linear(x, w, None) for w in copies])
    fourth = not bf16 and kmajor is not None and len(kmajor) == len(weights) and None not in kmajor
    if fourth:
        kernels.append(lambda: [x @ t for t in kmajor])
    fifth = weight_first and not bf16 and rows <= WEIGHT_FIRST_ROWS
    if fifth:
        kernels.append(lambda: [_weight_first_linear(x, w, None) for w in weights])
    sixth = inductor is not None and not bf16 and len(weights) == 1
    if sixth:
        kernels.append(lambda: inductor(x))
    seventh = blocked is not None and not bf16
    if seventh:
        kernels.append(lambda: blocked(x))
    if len(weights) > 1:  # a pass over many weights is cheap: warm this width (oneDNN builds a plan per shape)
        with torch.inference_mode():
            [k() for k in kernels]
    times: list[list[float]] = [[] for _ in kernels]
    live = list(range(len(kernels)))
    with torch.inference_mode():
        for r in range(repeats):
            for i in (live if r % 2 == 0 else live[::-1]):
                t = clock()
                kernels[i]()
                times[i].append(clock() - t)
            if early and len(live) > 2:
                fastest = min(min(times[i]) for i in live)
                live = [i for i in live if min(times[i]) <= CLEAR_GAP * fastest]
            if early and (len(live) == 1 or (len(live) == 2 and _decided(times[live[0]], times[live[1]]))):
                break
    timed = iter(stat(ts) for ts in times)
    out: list[float | None] = [next(timed), next(timed)] + [next(timed) if on else None
                                                          for on in (third, fourth, fifth, sixth, seventh)]
    while out[-1] is None:
        out.pop()
    return tuple(out) if usable else (out[0], float("inf"), *out[2:])


def _decided(plain: list[float], onednn: list[float]) -> bool:
    gaps = [max(p, o) / max(min(p, o), 1e-12) for p, o in zip(plain, onednn)]
    if len(gaps) == 1:
        return gaps[0] > CLEAR_GAP
    same_side = len({p < o for p, o in zip(plain, onednn)}) == 1
    return len(gaps) == 2 and same_side and min(gaps) >= AGREED_GAP


def measure_head(
    weight: torch.Tensor, max_rows: int = MEASURED_ROWS, *, time_width: TimeWidth | None = None,
    budget_s: float = BUDGET_S, clock: Callable[[], float] = time.perf_counter,
) -> tuple[WidthTiming, ...]:
    """Both kernels' timings at rows 1, 2, ..., ``max_rows`` (fewer when ``budget_s`` runs out;
    width 1 is always measured). ``time_width(weight, rows) -> (F.linear s, oneDNN s)``
    (default :func:`time_head`)."""
    start = clock()
    if time_width is None:
        def time_width(w: torch.Tensor, rows: int) -> tuple[float, float]:  # the quiet cost: a busy moment only adds time
            return time_head(w, rows, HEAD_REPEATS, stat=min)

        x = torch.randn(1, weight.shape[1], dtype=weight.dtype)  # [1, in]
        with torch.inference_mode():
            F.linear(x, weight), _onednn_linear(x, weight, None)  # warm both once
    widths = []
    for rows in range(1, max_rows + 1):
        widths.append(WidthTiming(rows, *(None if t is None else float(t) for t in time_width(weight, rows))))
        if clock() - start > budget_s:
            break
    return tuple(widths)


def machine_id() -> str:
    """This CPU: vendor, model name, family/model, torch's ISA level and a hash of the ISA flags."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if not line.strip():
                    break  # the first processor's block is enough
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    name = fields.get("model name") or platform.processor() or platform.machine()
    family = f" family {fields['cpu family']} model {fields.get('model', '?')}" if "cpu family" in fields else ""
    flags = fields.get("flags") or fields.get("Features") or platform.platform()
    capability = getattr(torch.backends.cpu, "get_cpu_capability", lambda: "?")()
    digest = hashlib.sha256(" ".join(sorted(flags.split())).encode()).hexdigest()[:12]
    caps = "".join(f", {k} {settings.foreign(k)}" for k in ("ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS") if settings.foreign(k))
    return f"{fields.get('vendor_id', platform.machine())} {name}{family}, {capability}{caps}, flags {digest}"


# -- the cache ---------------------------------------------------------------------------------


def _cache_key(machine: str, threads: int, shape: tuple[int, int], dtype: str, count: int = 1) -> str:
    layers = f" x {count} layers" if count > 1 else ""
    return f"{machine} | torch {torch.__version__} | {threads} threads | {shape[0]}x{shape[1]} {dtype}{layers}"


def _read_cache(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    entries = data.get("entries") if isinstance(data, dict) and data.get("format") == CACHE_FORMAT else None
    return entries if isinstance(entries, dict) else {}


def _write_cache(path: Path, key: str, entry: dict[str, Any]) -> None:
    """Adds ``entry`` under ``key``, atomically (a reader sees the old file or the new one)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        entries = {**_read_cache(path), key: entry}
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        with os.fdopen(fd, "w") as f:
            json.dump({"format": CACHE_FORMAT, "entries": entries}, f, indent=1)
        os.replace(tmp, path)
    except OSError:  # a read-only cache: measure again next time
        pass


def plan_head(
    weight: torch.Tensor, cache_dir: str | Path | None = None, *, time_width: TimeWidth | None = None,
    max_rows: int = MEASURED_ROWS, count: int = 1, prepare: Callable[[], object] | None = None,
) -> HeadKernelPlan:
    """The kernel per width for ``weight`` [out, in] here: from ``cache_dir``'s cache file when it
    has this machine, torch, thread count, shape and dtype, else measured (and then cached).
    ``count``: how many weights of this shape ``time_width`` times in one pass (a body's layers);
    ``prepare``: called before measuring (not on a cache hit), outside the measuring's budget."""
    machine, threads = machine_id(), torch.get_num_threads()
    shape, dtype = (int(weight.shape[0]), int(weight.shape[1])), str(weight.dtype).removeprefix("torch.")
    key = _cache_key(machine, threads, shape, dtype, count)
    path = Path(cache_dir).expanduser() / CACHE_FILE if cache_dir is not None else None
    if path is not None and key in (entries := _read_cache(path)):
        try:
            return _plan_from_entry(entries[key])
        except (KeyError, TypeError, ValueError, IndexError):
            pass  # a damaged entry: measure again
    if prepare is not None:
        prepare()
    t0 = time.perf_counter()
    widths = measure_head(weight, max_rows, time_width=time_width)
    plan = HeadKernelPlan(machine, torch.__version__, threads, shape, dtype, widths, time.perf_counter() - t0)
    if path is not None and not busy():
        _write_cache(path, key, plan.to_entry())
    elif path is not None:
        log.info("specviz: %s kernel plan measured on a busy machine (load %.1f on %d cores): used, not cached",
                 f"{shape[0]}x{shape[1]} {dtype}", load_average() or 0.0, os.cpu_count() or 1)
    return plan


def load_average() -> float | None:
    """The 1-minute load average (None where the platform has none)."""
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return None


def busy() -> bool:
    """Whether other work is running beside this process (the 1-minute load average above the cores
    plus one): a plan measured then is used but not cached, so the next load measures it again. Two
    jobs on 2 cores doubled every kernel's time and turned a 2 ms pass into 113 ms at some widths."""
    return (load_average() or 0.0) > (os.cpu_count() or 1) + 1


# -- the wrapped head --------------------------------------------------------------------------


class RowAdaptiveLinear(torch.nn.Module):
    """Wraps an ``nn.Linear``: at ``rows`` rows runs oneDNN where ``onednn_at[rows]`` (the widest
    entry beyond its end), ``F.linear`` elsewhere. Holds the same weight (tied embeddings stay tied);
    behaves as the wrapped layer otherwise."""

    def __init__(self, linear: torch.nn.Linear, onednn_at: Sequence[int], packed: torch.Tensor | None = None,
                 kmajor: torch.Tensor | None = None, gemm: Callable[[torch.Tensor], torch.Tensor] | None = None):
        super().__init__()
        self.linear = linear
        self.onednn_at = tuple(int(b) for b in onednn_at) or (0,)
        self.packed = packed  # the weight's oneDNN layout (:func:`pack`): bf16's oneDNN, fp32's third kernel
        self.kmajor = kmajor  # fp32's K-major copy (:func:`kmajor`): the fourth kernel, one row
        self.gemm = gemm  # the compiled Inductor GEMM (inductor_gemm.FrozenGemm): the sixth kernel

    def __deepcopy__(self, memo: dict) -> "RowAdaptiveLinear":
        return _copy_without_packed(self, memo)

    @property
    def weight(self) -> torch.Tensor:  # HF code may read lm_head.weight
        return self.linear.weight

    @property
    def bias(self) -> torch.Tensor | None:
        return self.linear.bias

    def kernel(self, rows: int) -> str:
        """The kernel ``rows`` rows run on."""
        return KERNELS[self.onednn_at[min(rows, len(self.onednn_at) - 1)]]

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [..., in] -> [..., out]
        lin = self.linear
        rows = x.numel() // max(1, x.shape[-1])
        code = self.onednn_at[min(rows, len(self.onednn_at) - 1)]
        if not code or type(lin) is not torch.nn.Linear or lin.weight.dtype not in DTYPES or (code == 3 and self.kmajor is None) \
                or (code == 5 and (self.gemm is None or lin.bias is not None)):
            return lin(x)
        if code == 5:
            return self.gemm(x.reshape(rows, x.shape[-1])).reshape(*x.shape[:-1], -1)
        if code == 4:
            y = _weight_first_linear(x.reshape(rows, x.shape[-1]), lin.weight, lin.bias)  # [rows, out]
            return y.reshape(*x.shape[:-1], y.shape[-1])
        if code == 3:
            y = _kmajor_linear(x.reshape(rows, x.shape[-1]), self.kmajor, lin.bias)  # [rows, out]
            return y.reshape(*x.shape[:-1], y.shape[-1])
        y = _onednn_linear(x.reshape(rows, x.shape[-1]), _read_by(code, lin.weight, self.packed), lin.bias)  # [rows, out]
        return y.reshape(*x.shape[:-1], y.shape[-1])


def _read_by(code: int, weight: torch.Tensor, packed: torch.Tensor | None) -> torch.Tensor:
    """The tensor oneDNN reads for kernel ``code``: the packed copy for "oneDNN packed" and for any
    bf16 oneDNN (never the plain bf16 weight), else the weight itself."""
    return packed if packed is not None and (code == 2 or weight.dtype == torch.bfloat16) else weight


def _copy_without_packed(module: torch.nn.Module, memo: dict) -> torch.nn.Module:
    """A deep copy of ``module`` without its packed and K-major copies (an opaque oneDNN tensor
    cannot be copied; a K-major one would double the copy); the copy's oneDNN reads its plain
    weight until it is packed again, and its K-major rows run F.linear (same products)."""
    new = module.__class__.__new__(module.__class__)
    memo[id(module)] = new
    for k, v in module.__dict__.items():
        if k == "_buffers":
            v = {n: (None if n in COPIES else b) for n, b in v.items()}
        new.__dict__[k] = None if k in COPIES else copy.deepcopy(v, memo)
    return new


COPIES = ("packed", "kmajor", "gemm", "blocked")  # a layer's second copies of its weight: each read in place of it, never beside it


def _needs_packed(codes: Sequence[int], dtype: torch.dtype) -> bool:  # a plan's kernels read a packed copy: keep one
    return any(codes) if dtype == torch.bfloat16 else 2 in codes


def _needs_kmajor(codes: Sequence[int]) -> bool:  # a plan's kernels read a K-major copy: keep one
    return 3 in codes


_PLANS: weakref.WeakKeyDictionary[torch.nn.Module, tuple[HeadKernelPlan, bool]] = weakref.WeakKeyDictionary()
_PLANS_LOCK = threading.Lock()


def disabled() -> bool:
    """``SPECVIZ_CPU_HEAD=0`` (or false/no/off): leave every head as it is."""
    return settings.turned_off("SPECVIZ_CPU_HEAD")


def speed_up_lm_head(
    model: torch.nn.Module, cache_dir: str | Path | None = None, *, time_width: TimeWidth | None = None,
) -> bool:
    """Wrap the model's output head in :class:`RowAdaptiveLinear` when it is a large fp32 or bf16
    ``nn.Linear`` on the CPU and oneDNN is the faster kernel at some width (measured, or read from
    ``cache_dir``'s cache; ``None``: measure, cache nothing). -> whether it wrapped it.
    :func:`head_kernel_report` then tells what was chosen, wrapped or not."""
    if disabled():
        return False
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if type(head) is not torch.nn.Linear or head.weight.device.type != "cpu" or head.weight.dtype not in DTYPES:
        return False
    if head.weight.numel() < MIN_HEAD_ELEMENTS or not torch.backends.mkldnn.is_available():
        return False
    packed: list[torch.Tensor | None] = []  # packed once, when first needed: to time oneDNN, or to run it
    kcopy: list[torch.Tensor | None] = []  # fp32's K-major copy, made to time one row
    gemm: list = []  # fp32's Inductor GEMM, compiled before the measuring (its budget is for timing)
    prepare = None
    if time_width is None:
        def prepare():
            gemm[:] = [frozen_gemm(head.weight)]

        def time_width(w: torch.Tensor, rows: int) -> tuple[float | None, ...]:  # the kernels as they would run
            packed[:] = packed or [pack(w)]
            kcopy[:] = kcopy or [kmajor(w)]
            return time_weights((w,), rows, HEAD_REPEATS, stat=min, packed=packed, kmajor=kcopy if rows == 1 else None,
                                weight_first=True, inductor=gemm[0] if gemm else None)
    try:
        plan = plan_head(head.weight.detach(), cache_dir, time_width=time_width, prepare=prepare)
    except (RuntimeError, AttributeError):  # an op missing from this build
        return False
    compiled = (gemm[0] if gemm else frozen_gemm(head.weight)) if 5 in plan.onednn_at else None
    if 5 in plan.onednn_at and compiled is None:  # not buildable here (or turned off): the next best kernels
        plan = plan.without("inductor_s")
    wrap = any(plan.onednn_at)
    if wrap:
        kept = (packed[0] if packed else pack(head.weight)) if _needs_packed(plan.onednn_at, head.weight.dtype) else None
        rows1 = (kcopy[0] if kcopy else kmajor(head.weight)) if _needs_kmajor(plan.onednn_at) else None
        model.set_output_embeddings(RowAdaptiveLinear(head, plan.onednn_at, kept, rows1, compiled))
    with _PLANS_LOCK:
        _PLANS[model] = (plan, wrap)
    return wrap


def head_kernel_report(model: torch.nn.Module) -> dict[str, Any] | None:
    """The LM-head kernel chosen per width for ``model`` and both timings (ms), JSON-able; None when
    its head was not measured (small, not fp32 or bf16 on the CPU, int8, or ``SPECVIZ_CPU_HEAD=0``)."""
    with _PLANS_LOCK:
        try:
            found = _PLANS.get(model)
        except TypeError:  # not a module
            found = None
    if found is None:
        return None
    plan, wrap = found
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if wrap and not isinstance(head, RowAdaptiveLinear):  # replaced since (e.g. quantized)
        return None
    return plan_report(plan, wrap)


def plan_report(plan: HeadKernelPlan, wrapped: bool) -> dict[str, Any]:
    """``plan`` as :func:`head_kernel_report` gives it (``wrapped``: whether the head was wrapped)."""
    return {
        "by_rows": [
            {"rows": w.rows, "kernel": w.kernel, "f_linear_ms": round(w.f_linear_s * 1e3, 2),
             "onednn_ms": round(w.onednn_s * 1e3, 2)}
            | ({} if w.packed_s is None else {"packed_ms": round(w.packed_s * 1e3, 2)})
            | ({} if w.kmajor_s is None else {"kmajor_ms": round(w.kmajor_s * 1e3, 2)})
            | ({} if w.wfirst_s is None else {"wfirst_ms": round(w.wfirst_s * 1e3, 2)})
            | ({} if w.inductor_s is None else {"inductor_ms": round(w.inductor_s * 1e3, 2)})
            | ({} if w.blocked_s is None else {"blocked_ms": round(w.blocked_s * 1e3, 2)})
            for w in plan.widths
        ],
        "wider": plan.widths[-1].kernel,  # rows beyond the measured ones
        "wrapped": wrapped,
        "cached": plan.cached,
        "measure_s": round(plan.measure_s, 2),
        "machine": plan.machine,
        "torch": plan.torch,
        "threads": plan.threads,
        "shape": list(plan.shape),
        "dtype": plan.dtype,
    }
