"""This machine's verify cost: how long the target takes to score n positions at once.

``t(n)`` is one target forward of n new tokens on top of a KV cache that already holds a
realistic prompt; ``v(n) = t(n) / t(1)`` is that cost in target decode steps. The paper
idealises ``v = 1`` for every n (a GPU reading the weights once dominates); on a CPU t(n) grows
with n, and that curve decides whether a wider tree (or a longer chain) pays:

    speedup(k) = E(a, k) / (k c + v(k + 1))      (k drafts, k + 1 positions scored)

``measure_verify_cost`` times the forwards (warm-up first, median of ``reps``, the cache rolled
back after each); the rest are pure functions of the measured points.
"""

from __future__ import annotations

from typing import Sequence

import torch

from ..analysis import theory

__all__ = ["DEFAULT_NS", "measure_verify_cost", "verify_floor_curve", "verify_curve", "v_at", "best_k_with_curve", "curve_speedups"]

DEFAULT_NS = tuple(range(1, 18))  # n = 1..17: k + 1 positions for k = 0..16


def measure_verify_cost(target, ns: Sequence[int] = DEFAULT_NS, context_len: int = 256, reps: int = 5,
                        warmup: int = 1) -> list[tuple[int, float]]:
    """[(n, median ms)] of one target forward over n new tokens after ``context_len`` cached ones
    (``specviz.analysis.hardware.verify_costs``: the cache rolled back after each, the n interleaved, the
    widest shape warmed first). target: a LoadedModel."""
    from ..analysis.hardware import verify_costs

    ns = sorted({int(n) for n in ns})
    if not ns or ns[0] < 1:
        raise ValueError(f"n (positions per verify) must be whole numbers >= 1, got {list(ns)!r}")
    if context_len < 1 or reps < 1 or warmup < 0:
        raise ValueError("context_len and reps must be >= 1 and warmup >= 0")
    costs = verify_costs(target.model, context=context_len, max_n=max(ns), repeats=reps, warmup=warmup)
    return [(n, 1e3 * costs.seconds[n]) for n in ns]


def verify_floor_curve(target, ns: Sequence[int] = DEFAULT_NS) -> list[tuple[int, float, float]] | None:
    """[(n, least v(n) where reading the weights and the products overlap, least v(n) where they
    run one after the other)] for a float32 target on the CPU, from this machine's bandwidth and
    the rate its BLAS reaches on n rows of the target's shapes in cache
    (``specviz.analysis.hardware.verify_floor``); None for other precisions and devices (the
    rates are float32 CPU products). target: a LoadedModel."""
    from ..analysis import hardware

    model = target.model
    first = next(model.parameters(), None)
    if first is None or first.device.type != "cpu" or first.dtype != torch.float32 or getattr(target, "quantize", None):
        return None
    floors = hardware.verify_floors(model, ns)
    return [(n, f.seconds / floors[1].seconds, f.serial_s / floors[1].serial_s) for n, f in floors.items()]


def verify_curve(points: Sequence[Sequence[float]]) -> list[tuple[int, float]]:
    """[(n, t(n) ms)] -> [(n, v(n) = t(n) / t(1))]; needs the n = 1 point."""
    pts = {int(n): float(t) for n, t in points}
    if 1 not in pts or pts[1] <= 0:
        raise ValueError("the verify-cost curve needs t(1) > 0 (one position) to normalise by")
    return [(n, pts[n] / pts[1]) for n in sorted(pts)]


def v_at(curve: Sequence[Sequence[float]], n: int) -> float | None:
    """v(n) from a normalised curve, linear between measured points; None beyond its ends."""
    pts = sorted((int(m), float(v)) for m, v in curve)
    for (n0, v0), (n1, v1) in zip(pts, pts[1:]):
        if n0 <= n <= n1:
            return v0 + (v1 - v0) * (n - n0) / (n1 - n0)
    return next((v for m, v in pts if m == n), None)


def curve_speedups(a: float, c: float, curve: Sequence[Sequence[float]]) -> list[tuple[int, float, float]]:
    """[(k, v(k+1), E(a, k) / (k c + v(k+1)))] for every k whose k + 1 the curve covers (k >= 1)."""
    theory.check_calculator_inputs(a, c, 1.0)
    out = []
    for n, v in sorted((int(m), float(x)) for m, x in curve):
        k = n - 1
        if k >= 1 and v > 0:
            out.append((k, v, theory.expected_tokens_per_step(a, k) / (k * c + v)))
    return out


def best_k_with_curve(a: float, c: float, curve: Sequence[Sequence[float]]) -> tuple[int, float] | None:
    """(k, speedup): the theory's best k given acceptance ``a``, draft cost ``c`` and this
    machine's verify curve v(n) (instead of the paper's v = 1); the smallest k on ties."""
    pts = curve_speedups(a, c, curve)
    if not pts:
        return None
    k, _, s = max(pts, key=lambda t: (t[2], -t[0]))
    return k, s
