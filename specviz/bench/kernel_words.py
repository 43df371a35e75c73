"""The kernels a sweep's target ran (its meta: the LM head's and each projection kind's plan,
:func:`plan_report`; an int8 model's kernel; the argmax and sampled screens), as JSON for the
sweep's meta and in words for the console and the HTML report: one line each with timings, or one
short line."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ..runtime import argmax_head, cpu, state
from ..runtime.kernels import PlannedLinear
from ..runtime.plan import KindPlan
from ..runtime.plan import of as plan_of
from ..runtime.projections import KIND_NAMES, float_head

# a report's columns before kernels had one table (older sweeps' JSON): column -> kernel name
_OLD = {"f_linear_ms": "F.linear", "onednn_ms": "oneDNN", "packed_ms": "oneDNN packed", "kmajor_ms": "F.linear K-major",
        "wfirst_ms": "weight-first", "inductor_ms": "Inductor GEMM", "blocked_ms": "specviz blocked"}


def _runs(items: list[tuple[int, Any]], adjacent: bool = False) -> list[list[tuple[int, Any]]]:
    """(width, value) pairs in width order, neighbours of equal value grouped (``adjacent``: only
    consecutive widths)."""
    groups: list[list[tuple[int, Any]]] = []
    for w, v in items:
        if groups and groups[-1][-1][1] == v and (not adjacent or groups[-1][-1][0] == w - 1):
            groups[-1].append((w, v))
        else:
            groups.append([(w, v)])
    return groups


def _span(group: list[tuple[int, Any]]) -> str:
    """ "1 row", "3 rows", "2-9 rows"."""
    first, last = group[0][0], group[-1][0]
    return f"{first}-{last} rows" if len(group) > 1 else f"{first} row{'s' if first > 1 else ''}"


def _screened(report: dict[str, Any]) -> str:
    """The widths a screen report uses, in runs of consecutive widths: "1-5 rows, 9 rows"."""
    return ", ".join(_span(g) for g in _runs([(r, 0) for r in sorted(int(r) for r in report.get("used") or [])], True)) or "no width"


def _ms(w: dict[str, Any]) -> dict[str, float]:
    """A width's {kernel: ms}."""
    return dict(w["ms"]) if "ms" in w else {_OLD[k]: v for k, v in w.items() if k in _OLD}


def _ms_range(times: list[dict[str, float]], key: str) -> str:
    lo, hi = min(t[key] for t in times), max(t[key] for t in times)
    digits = 1 if hi < 10 else 0  # a body's projections take a few ms
    return f"{lo:.{digits}f}" if round(lo, digits) == round(hi, digits) else f"{lo:.{digits}f}-{hi:.{digits}f}"


def _plans(meta: dict[str, Any]) -> list[tuple[str, dict[str, Any] | None]]:
    return [("LM head", meta.get("lm_head"))] + [(KIND_NAMES.get(k, k), v) for k, v in (meta.get("projections") or {}).items()]


def _used(screen) -> list[int]:
    return [r for r in range(1, len(screen.use_at)) if screen.use_at[r]]


def _timed(screen) -> dict[str, list[float]]:
    return {str(r): [round(a, 2), round(b, 2)] for r, (a, b) in screen.times.items()}


def plan_report(kind: KindPlan, shape: Sequence[int], dtype: torch.dtype, wrapped: bool = True) -> dict[str, Any]:
    """A kind's kernels per width, JSON-able, as a sweep's meta keeps them."""
    widths = sorted(kind.ms) or [1]
    return {
        "by_rows": [{"rows": w, "kernel": kind.kernel(w), "ms": dict(kind.ms.get(w, {}))} for w in widths],
        "wider": kind.kernel(widths[-1] + 1), "wrapped": wrapped, "cached": kind.cached,
        "source": "tuned" if kind.cached else "CPU features", "machine": cpu.machine_id(), "torch": torch.__version__,
        "threads": torch.get_num_threads(), "shape": list(shape), "dtype": str(dtype).removeprefix("torch."),
    }


def head_report(model: torch.nn.Module) -> dict[str, Any] | None:
    """The LM head's kernels per width (:func:`plan_report`), or None where its head is not a large float one."""
    try:
        linear = float_head(model)
    except (TypeError, AttributeError):  # not a model
        return None
    if linear is None or cpu.disabled(state.of(model).options):
        return None
    wrapped = model.get_output_embeddings()
    kind = wrapped.plan if isinstance(wrapped, PlannedLinear) and wrapped.plan is not None else plan_of(model).kind("head")
    return plan_report(kind, linear.weight.shape, linear.weight.dtype, isinstance(wrapped, PlannedLinear))


def projection_report(model: torch.nn.Module | None) -> dict | None:
    """:func:`plan_report` of each planned projection kind of ``model``'s static step (ms for all
    its layers); None when it has no step yet or nothing was planned."""
    found = state.peek(model) if isinstance(model, torch.nn.Module) else None
    decoder = found.decoder if found is not None else None
    if decoder is None or not decoder.body.kernel_plans:
        return None
    layers = len(decoder.body.layers)
    return {kind: {**plan_report(p, [], decoder.body.dtype), "layers": layers} for kind, p in decoder.body.kernel_plans.items()}


def screen_report(model) -> dict[str, Any] | None:
    """A sweep's meta of the greedy argmax screens (:mod:`specviz.runtime.argmax_head`): {"widths":
    {rows: [full ms, screened ms]}, "used": [rows], "kind", "by_kind": {kind: [rows]}}, or None."""
    screen = argmax_head.screen_of(model)
    if screen is None:
        return None
    return {"widths": _timed(screen), "used": _used(screen), "kind": screen.kind,
            "by_kind": {s.kind: _used(s) for s in argmax_head.screens_of(model)}}


def sampled_report(model) -> dict[str, Any] | None:
    """The same of the sampled steps' bounds (:mod:`specviz.runtime.sampled_head`), once a sampled
    step made them, or None."""
    held = state.peek(model)
    if held is None or held.sampled_screen is None:
        return None
    screen = held.sampled_screen[1]
    return {"widths": _timed(screen), "used": _used(screen), "kind": "bf16 bounds"}


def describe_head_kernels(report: dict[str, Any] | None, label: str = "LM head") -> str:
    """One line: "LM head 262144x640, 2 threads: F.linear at 1-3 rows (34-36 ms vs 44-45 ms for
    oneDNN), ..." ("" for None); ``label`` names the weight (a projection kind: the times are for
    all its layers)."""
    if not report or not report.get("by_rows"):
        return ""
    rows, parts = report["by_rows"], []
    for g in _runs([(w["rows"], w["kernel"]) for w in rows]):
        times = [_ms(w) for w in rows if g[0][0] <= w["rows"] <= g[-1][0]]
        mine = g[0][1]
        others = [k for k in times[0] if k != mine and all(k in t for t in times)]
        versus = ", ".join(f"{_ms_range(times, k)} ms for {k}" for k in others)
        timed = f" ({_ms_range(times, mine)} ms vs {versus})" if all(mine in t for t in times) and others else ""
        parts.append(f"{mine} at {_span(g)}{timed}")
    shape = "x".join(str(n) for n in report.get("shape", []))
    layers = f" x {report['layers']} layers" if report.get("layers", 1) > 1 else ""
    how = report.get("source") or ("cached" if report.get("cached") else f"measured in {report.get('measure_s', 0.0):.1f} s")
    return (f"{label} {shape}{layers}, {report.get('threads')} threads: " + ", ".join(parts)
            + f"; {report.get('wider')} above {rows[-1]['rows']} rows ({how})")


def describe_argmax(report: dict[str, Any] | None, what: str = "greedy argmax:") -> str:
    """Greedy steps' screen (or ``what``: sampled steps' bounds), where it is used and, per width
    timed, the full head against the screened one ("" for None)."""
    if not report or not report.get("widths"):
        return ""
    times = ", ".join(f"{r} row{'s' if r > 1 else ''} {a:.1f} -> {b:.1f} ms"
                      for r, (a, b) in sorted((int(r), v) for r, v in report["widths"].items()))
    kind = report.get("kind", "bf16").split()[0]
    return f"{what} the LM head's {kind} screen at {_screened(report)} (full head -> screened: {times})"


def describe_kernels(report: dict[str, Any] | None) -> list[str]:
    """Every line of a sweep's meta: the head's, each planned projection kind's, the int8 kernel's
    and the screens'."""
    meta = report or {}
    lines = [describe_head_kernels(plan, label if label == "LM head" else f"{label} projections") for label, plan in _plans(meta)]
    int8 = meta.get("int8_kernel") or {}
    if int8.get("kernel"):
        lines.append(f"int8 products: {int8['kernel']} ({int8.get('why', '')})")
    lines.append(describe_argmax(meta.get("argmax_head")))
    lines.append(describe_argmax(meta.get("sampled_head"), "sampled steps' logits bounded through"))
    return [line for line in lines if line]


def kernel_summary(report: dict[str, Any] | None) -> str:
    """The same in one short line without timings: "LM head: oneDNN at 1-9 rows; q/k/v: F.linear at
    1 row, oneDNN at 2-9 rows; ...; int8: blocked" ("" when nothing was measured)."""
    meta = report or {}
    parts = [f"{name}: " + ", ".join(f"{g[0][1]} at {_span(g)}" for g in _runs([(w["rows"], w["kernel"]) for w in plan["by_rows"]]))
             for name, plan in _plans(meta) if (plan or {}).get("by_rows")]
    if (meta.get("int8_kernel") or {}).get("kernel"):
        parts.append(f"int8: {meta['int8_kernel']['kernel']}")
    for key, words in (("argmax_head", "greedy argmax: {kind} screen"), ("sampled_head", "sampled steps: bf16 screen's bounds")):
        if (meta.get(key) or {}).get("widths"):
            parts.append(words.format(kind=meta[key].get("kind", "bf16")) + f" at {_screened(meta[key])}")
    return "; ".join(parts)
