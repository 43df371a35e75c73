"""The kernels a model's plan chose (specviz.runtime.plan), in words for a person: one line per
weight (the LM head, each planned projection kind of the body) with the timings, or one short line
without them."""

from __future__ import annotations

from typing import Any

from . import plan as plan_defaults
from .projections import KIND_NAMES

__all__ = ["describe_argmax", "describe_head_kernels", "describe_kernels", "describe_plan", "kernel_summary"]


def describe_kernels(report: dict[str, Any] | None) -> list[str]:
    """The LM head's line and one per planned projection kind of the body, from a sweep's meta
    (``lm_head``: :func:`head_kernel_report`; ``projections``: by kind, as
    :func:`specviz.runtime.static_decode.projection_kernel_report` gives them), and an int8
    model's kernel (``int8_kernel``: :func:`specviz.runtime.int8_speed.kernel_choice`)."""
    meta = report or {}
    lines = [describe_head_kernels(meta.get("lm_head"))]
    for kind, plan in (meta.get("projections") or {}).items():
        lines.append(describe_head_kernels(plan, f"{KIND_NAMES.get(kind, kind)} projections"))
    int8 = meta.get("int8_kernel") or {}
    if int8.get("kernel"):  # an @int8 model was loaded: its products' kernel (specviz.runtime.int8_speed.choose_kernel)
        lines.append(f"int8 products: {int8['kernel']} ({int8.get('why', '')})")
    lines.append(describe_argmax(meta.get("argmax_head")))
    lines.append(describe_argmax(meta.get("sampled_head"), "sampled steps' logits bounded through"))
    return [line for line in lines if line]


def describe_argmax(report: dict[str, Any] | None, what: str = "greedy argmax:") -> str:
    """Greedy steps' argmax through the LM head's bf16 or int8 screen (:func:`specviz.runtime.argmax_head.report`),
    or (``what``) sampled steps' bounds (:func:`specviz.runtime.sampled_head.report`): where it is used and, per
    width timed, the full head against the screen's ("" for None)."""
    if not report or not report.get("widths"):
        return ""
    widths = sorted((int(r), a, b) for r, (a, b) in report["widths"].items())
    times = ", ".join(f"{r} row{'s' if r > 1 else ''} {a:.1f} -> {b:.1f} ms" for r, a, b in widths)
    kind = report.get("kind", "bf16").split()[0]
    return f"{what} the LM head's {kind} screen at {_screened(report)} (full head -> screened: {times})"


def _screened(report: dict[str, Any]) -> str:
    """The widths an argmax report screens at, in runs: "1-5 rows, 9 rows" ("no width")."""
    spans: list[list[dict[str, int]]] = []
    for r in sorted(int(r) for r in report.get("used") or []):
        if spans and spans[-1][-1]["rows"] == r - 1:
            spans[-1].append({"rows": r})
        else:
            spans.append([{"rows": r}])
    return ", ".join(_span(g) for g in spans) or "no width"


def kernel_summary(report: dict[str, Any] | None) -> str:
    """The kernels of a sweep's meta in one short line, without timings: "LM head: oneDNN at 1-9
    rows; q/k/v: F.linear at 1 row, oneDNN at 2-9 rows; ...; int8: blocked" ("" when none was
    measured)."""
    meta = report or {}
    plans = [("LM head", meta.get("lm_head"))] + [(KIND_NAMES.get(k, k), v) for k, v in (meta.get("projections") or {}).items()]
    parts = []
    for name, plan in plans:
        rows = (plan or {}).get("by_rows") or []
        if not rows:
            continue
        parts.append(f"{name}: " + ", ".join(f"{g[0]['kernel']} at {_span(g)}" for g in _runs_of_one_kernel(rows)))
    int8 = meta.get("int8_kernel") or {}
    if int8.get("kernel"):
        parts.append(f"int8: {int8['kernel']}")
    if (meta.get("argmax_head") or {}).get("widths"):
        parts.append(f"greedy argmax: {meta['argmax_head'].get('kind', 'bf16')} screen at {_screened(meta['argmax_head'])}")
    if (meta.get("sampled_head") or {}).get("widths"):
        parts.append(f"sampled steps: bf16 screen's bounds at {_screened(meta['sampled_head'])}")
    return "; ".join(parts)


def _runs_of_one_kernel(rows: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Consecutive widths that chose the same kernel, grouped."""
    groups: list[list[dict[str, Any]]] = []
    for w in rows:
        if groups and groups[-1][-1]["kernel"] == w["kernel"]:
            groups[-1].append(w)
        else:
            groups.append([w])
    return groups


def _span(group: list[dict[str, Any]]) -> str:
    """ "1 row", "3 rows", "2-9 rows"."""
    first, last = group[0]["rows"], group[-1]["rows"]
    return f"{first}-{last} rows" if len(group) > 1 else f"{first} row{'s' if first > 1 else ''}"


# a report's columns before kernels had one table (older sweeps' JSON): column -> kernel name
_OLD = {"f_linear_ms": "F.linear", "onednn_ms": "oneDNN", "packed_ms": "oneDNN packed", "kmajor_ms": "F.linear K-major",
        "wfirst_ms": "weight-first", "inductor_ms": "Inductor GEMM", "blocked_ms": "specviz blocked"}


def _ms(w: dict[str, Any]) -> dict[str, float]:
    """A width's {kernel: ms}."""
    return dict(w["ms"]) if "ms" in w else {_OLD[k]: v for k, v in w.items() if k in _OLD}


def describe_head_kernels(report: dict[str, Any] | None, label: str = "LM head") -> str:
    """One line for a person: "LM head 262144x640, 2 threads: F.linear at 1-3 rows (34-36 ms vs
    oneDNN 44-45 ms), oneDNN at 4-9 rows (...) ..." ("" for None). ``label`` names the weight
    (a body's projection kind: its layers are counted, and the times are for all of them)."""
    if not report or not report.get("by_rows"):
        return ""
    rows = report["by_rows"]
    parts = []
    for g in _runs_of_one_kernel(rows):
        times = [_ms(w) for w in g]
        mine = g[0]["kernel"]
        others = [k for k in times[0] if k != mine and all(k in t for t in times)]
        versus = ", ".join(f"{_ms_range(times, k)} ms for {k}" for k in others)
        timed = f" ({_ms_range(times, mine)} ms vs {versus})" if all(mine in t for t in times) and others else ""
        parts.append(f"{mine} at {_span(g)}{timed}")
    shape = "x".join(str(n) for n in report.get("shape", []))
    layers = f" x {report['layers']} layers" if report.get("layers", 1) > 1 else ""
    how = report.get("source") or ("cached" if report.get("cached") else f"measured in {report.get('measure_s', 0.0):.1f} s")
    return (f"{label} {shape}{layers}, {report.get('threads')} threads: " + ", ".join(parts)
            + f"; {report.get('wider')} above {rows[-1]['rows']} rows ({how})")


def _ms_range(times: list[dict[str, float]], key: str) -> str:
    lo, hi = min(t[key] for t in times), max(t[key] for t in times)
    digits = 1 if hi < 10 else 0  # a body's projections take a few ms
    return f"{lo:.{digits}f}" if round(lo, digits) == round(hi, digits) else f"{lo:.{digits}f}-{hi:.{digits}f}"


def describe_plan(plan) -> str:
    """The plan in one line: each tuned kind's kernels by widths ("head: specviz blocked at 1-9 rows; ...")."""
    parts = [f"{kind}: " + ", ".join(f"{g[0]['kernel']} at {_span(g)}" for g in _runs_of_one_kernel(
        [{"rows": w, "kernel": n} for w, n in sorted(p.kernels.items())])) for kind, p in plan.kinds.items()]
    return "; ".join(parts) or f"nothing to tune here: CPU features' defaults ({plan_defaults.default_kernel('head')})"
