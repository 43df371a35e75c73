"""The expected-speedup calculator's measured runs (part 3 of the Learn tab's experiments,
:mod:`specviz.learn.chain`): runs typed as ``a, k, speedup`` lines or read from a ``specviz
bench --json`` report, checked, grouped and picked; and the number reader every Learn form uses."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..app.parsing import finite_number
from ..core.bounds import LEARN_CURVE_MAX_K, THEORY_MAX_K

__all__ = ["K_MAX", "MeasuredRun", "load_bench_runs", "mean_costs", "parse_measured_runs", "pick_run", "runs_by_proposer",
           "runs_from_bench_report", "to_float"]


def to_float(value: Any, what: str) -> float:
    """A number the user typed (``what`` names it in the error): "60%" is 0.6, blank is an error."""
    if isinstance(value, bool):
        raise ValueError(f"{what} must be a number, got {value!r}")
    if isinstance(value, str):
        text = value.strip().rstrip("%")
        if not text:
            raise ValueError(f"{what} is empty: enter a number (0 for 'never')")
        return finite_number(value, what, text=text, scale=100.0 if value.strip().endswith("%") else 1.0)
    return finite_number(value, what)


K_MAX = LEARN_CURVE_MAX_K  # the calculator's curve range (specviz.core.bounds)


@dataclass(frozen=True)
class MeasuredRun:
    """A measured run to set against the theory."""

    a: float  # acceptance rate
    k: int
    speedup: float  # measured, vs target-only
    label: str = ""
    c: float | None = None
    v: float | None = None

    def line(self) -> str:
        tail = f"  # {self.label}" if self.label else ""
        return f"{self.a:.3f}, {self.k}, {self.speedup:.3f}{tail}"


def _run(a: float, k: float, s: float, label: str = "", c: float | None = None, v: float | None = None,
         where: str = "") -> MeasuredRun:
    if not 0 <= a <= 1:
        raise ValueError(f"{where}a (acceptance rate) must be from 0 to 1, got {a:g}")
    if k != int(k) or not 1 <= k <= THEORY_MAX_K:
        raise ValueError(f"{where}k must be a whole number from 1 to {THEORY_MAX_K}, got {k:g}")
    if s <= 0:
        raise ValueError(f"{where}speedup must be > 0, got {s:g}")
    return MeasuredRun(a, int(k), s, label, c, v)


def parse_measured_runs(text: str) -> list[MeasuredRun]:
    """Lines of ``a, k, speedup  # label`` (commas or spaces; ``a=0.6 k=4 speedup=1.3`` also works)."""
    runs = []
    for lineno, raw in enumerate((text or "").splitlines(), 1):
        body, _, label = raw.partition("#")
        body = re.sub(r"\b(a|k|speedup|s)\s*=\s*", "", body.strip(), flags=re.I)
        if not body:
            continue
        parts = [s for s in re.split(r"[\s,;]+", body) if s]
        where = f"line {lineno}: "
        if len(parts) != 3:
            raise ValueError(f"{where}expected three numbers 'a, k, speedup' (e.g. '0.6, 4, 1.3'), got {raw.strip()!r}")
        a, k, s = (to_float(x, f"{where}{name}") for x, name in zip(parts, ("a", "k", "speedup")))
        runs.append(_run(a, k, s, label.strip(), where=where))
    return runs


def runs_from_bench_report(report: Mapping[str, Any]) -> list[MeasuredRun]:
    """The speculative summary rows of a ``specviz bench --json`` report that have a and a speedup."""
    rows = report.get("rows") if isinstance(report, Mapping) else None
    if not isinstance(rows, list):
        raise ValueError("this is not a specviz bench report: it has no 'rows' list (make one with `specviz bench --json`)")
    runs = []
    for r in rows:
        if not isinstance(r, Mapping) or r.get("kind", "summary") != "summary" or r.get("impl", "specviz") != "specviz":
            continue
        a, k, s = r.get("acceptance_rate"), r.get("k"), r.get("speedup")
        if a is None or s is None or not isinstance(k, (int, float)) or k < 1:
            continue
        label = f"{r.get('proposer', '')} k={int(k)}".strip()
        runs.append(_run(float(a), float(k), float(s), label, r.get("c"), r.get("v")))
    if not runs:
        raise ValueError("the report has no speculative runs with an acceptance rate and a speedup "
                         "(it needs target-only rows too: run `specviz bench` with its default proposers)")
    return runs


def load_bench_runs(path: str | Path) -> list[MeasuredRun]:
    """:func:`runs_from_bench_report` of a JSON file."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"could not read {Path(path).name}: {e}") from None
    except ValueError as e:
        raise ValueError(f"{Path(path).name} is not JSON ({e})") from None
    return runs_from_bench_report(data)


def mean_costs(runs: Sequence[MeasuredRun]) -> tuple[float | None, float | None, float | None]:
    """Mean a, c and v over runs that report them (None where none does)."""
    def mean(xs: list[float]) -> float | None:
        return sum(xs) / len(xs) if xs else None

    return (mean([r.a for r in runs]), mean([r.c for r in runs if r.c is not None]),
            mean([r.v for r in runs if r.v is not None]))


def pick_run(runs: Sequence[MeasuredRun], label: str | None = None) -> MeasuredRun:
    """The run whose label is ``label``, or (None / unknown label) the run with the best measured
    speedup. The calculator takes a, c and v from ONE run: averaging them across proposers (an
    n-gram's c ~ 0.01 with a draft model's c ~ 0.3) describes no proposer at all."""
    if not runs:
        raise ValueError("no measured runs to pick from")
    for r in runs:
        if label is not None and r.label == label:
            return r
    return max(runs, key=lambda r: r.speedup)


def runs_by_proposer(runs: Sequence[MeasuredRun]) -> dict[str, list[MeasuredRun]]:
    """Runs grouped by proposer (the label without its ' k=K' tail), in the order they appear."""
    out: dict[str, list[MeasuredRun]] = {}
    for r in runs:
        name = re.sub(r"\s+k=\d+$", "", r.label) or "run"
        out.setdefault(name, []).append(r)
    return out
