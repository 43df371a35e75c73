"""The kernels specviz.runtime.cpu chose, in words for a person: one line per weight (the LM head,
each planned projection kind of the body) with both timings, or one short line without them."""

from __future__ import annotations

from typing import Any

from .cpu import KERNELS
from .projections import KIND_NAMES

__all__ = ["describe_argmax", "describe_head_kernels", "describe_kernels", "describe_runners", "kernel_summary"]


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
    lines.append(describe_runners(meta.get("static_decode_choices")))
    return [line for line in lines if line]


def describe_runners(choices: list[dict[str, Any]] | None) -> str:
    """The static step's runner each model kept and why: every runner's time per call at the widths
    it was chosen on (:func:`specviz.runtime.runners.choices`; "" for none)."""
    parts = []
    for c in choices or []:
        timed = [", ".join(f"{k} {v:.1f} ms" for k, v in sorted(c[key].items(), key=lambda kv: kv[1]))
                 + f" a call on {c[n]} token{'s' if c[n] > 1 else ''}" for key, n in (("ms", "width"), ("wide_ms", "wide")) if key in c]
        parts.append(f"{c['label']}: {c['kept']} ({'; '.join(timed)})")
    return "static decode step: " + "; ".join(parts) if parts else ""


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
    parts += [f"{c['label']} step: {c['kept']}" for c in meta.get("static_decode_choices") or []]
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


_MS = {KERNELS[0]: "f_linear_ms", KERNELS[1]: "onednn_ms", KERNELS[2]: "packed_ms", KERNELS[3]: "kmajor_ms",
       KERNELS[4]: "wfirst_ms", KERNELS[5]: "inductor_ms", KERNELS[6]: "blocked_ms"}  # plan_report's columns


def describe_head_kernels(report: dict[str, Any] | None, label: str = "LM head") -> str:
    """One line for a person: "LM head 262144x640, 2 threads: F.linear at 1-3 rows (34-36 ms vs
    oneDNN 44-45 ms), oneDNN at 4-9 rows (...) ..." ("" for None). ``label`` names the weight
    (a body's projection kind: its layers are counted, and the times are for all of them)."""
    if not report or not report.get("by_rows"):
        return ""
    rows = report["by_rows"]
    parts = []
    for g in _runs_of_one_kernel(rows):
        others = [k for k in KERNELS if k != g[0]["kernel"] and all(_MS[k] in w for w in g)]
        versus = ", ".join(f"{_ms_range(g, _MS[k])} ms for {k}" for k in others)
        mine = _MS.get(g[0]["kernel"], "onednn_ms")
        parts.append(f"{g[0]['kernel']} at {_span(g)} ({_ms_range(g, mine)} ms vs {versus})")
    shape = "x".join(str(n) for n in report.get("shape", []))
    layers = f" x {report['layers']} layers" if report.get("layers", 1) > 1 else ""
    how = "cached" if report.get("cached") else f"measured in {report.get('measure_s', 0.0):.1f} s"
    return (f"{label} {shape}{layers}, {report.get('threads')} threads: " + ", ".join(parts)
            + f"; {report.get('wider')} above {rows[-1]['rows']} rows ({how})")


def _ms_range(group: list[dict[str, Any]], key: str) -> str:
    lo, hi = min(w[key] for w in group), max(w[key] for w in group)
    digits = 1 if hi < 10 else 0  # a body's projections take a few ms
    return f"{lo:.{digits}f}" if round(lo, digits) == round(hi, digits) else f"{lo:.{digits}f}-{hi:.{digits}f}"
