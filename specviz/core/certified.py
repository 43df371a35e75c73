"""Speculative sampling on logits known within certified bounds: the same rule, the same
distribution, without the whole float32 head on most steps.

A sampled step needs p = softmax(l / T) over the target's vocabulary, and a 262,144 x 640 float32
head is most of a small model's step (671 MB read a row). A screen reads a cheaper copy of the head
and gives every logit within a proven bound, y_i - b <= l_i <= y_i + b
(:mod:`specviz.runtime.argmax_head`). So, per row of the step:

1. the 16 ids with the largest y (S; or 128, or 1024, the first that leaves under EPS of the
   envelope's mass outside; a row that leaves over WIDEST outside even then is computed exactly)
   get their exact float32 logits;
2. every weight w_i = exp((l_i - shift) / T) (shift = max y + b, above every logit) is exact on S
   and between e^(-2b/T) g_i and the envelope g_i = exp((y_i + b - shift) / T) outside it, so
   Z = sum w lies in [Z_S + e^(-2b/T) A, Z_S + A], A = sum of g outside S (<= EPS Z_S);
3. each decision of :func:`specviz.core.algorithm.verify` is taken on those bounds: accept x_i
   while u_i <= min(1, p(x_i) / q(x_i)) with the same u_i (p(x_i) = w_x / Z, w_x exact), decided
   when both ends of p(x_i)'s interval agree; draw the bonus token from p and the correction
   from norm(max(0, p - q)) by rejection sampling from the envelope (propose i ~ g, keep it
   with probability w_i / g_i, the exact ratio from one exact logit; the residual's envelope is
   max(0, g / Z_lo - q), its acceptance decided on bounds as above).
   Where the bounds cannot decide, that row's exact p is computed from the full head and the
   decision taken on it with the same uniform draw (never a fresh one: a redraw conditioned on
   being undecided would bias the rule).

So every decision is the one the rule takes on exact p with the same u, and the tokens drawn
follow the same distribution (other draws of the generator than the full head's sampler, so a
seed gives other tokens). A top-k step (:func:`top_k_probs`) needs no bounds on p at all: the k
largest logits lie among a few ids the screen names, whose exact logits give p exactly (then the
full rule, and its top-p if any, as on the full head; a seed gives the same tokens). Top-p alone
cuts p by cumulative mass over the whole row, which this module does not bound: the engine keeps
the full head for it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from .algorithm import (
    Verification,
    acceptance_ratio,
    accepts,
    check_draft_ids,
    logits_to_probs,
    point_mass_residual,
    residual_distribution,
    sample,
    top_n,
)
from .records import Deferred

log = logging.getLogger(__name__)

SIZES = (16, 128, 1024)  # S is the top 16 ids by screen value, or 128, or 1024: the first whose tail is small enough
EPS = 1e-3  # ... the envelope's mass outside S at most this share of Z_S (Z's interval under ~1e-3 wide)
WIDEST = 0.25  # with 1024 ids still more than this share outside: the row is computed exactly
SLACK = 1e-6  # Z's interval widened by this much, for the float sums it is computed from
MAX_TRIES = 64  # proposals a rejection sampler makes before it draws from the exact row instead
# the envelope is computed in float32: its argument (|x| <= 88 where exp does not underflow) is
# within 88 * 2^-24 relative, exp and the product within an ulp or two; 2^-16 covers them all
ENVELOPE_ROUNDING = 1 + 2.0**-16


MAX_TOP_K_CANDIDATES = 8192  # top-k: more ids than this within 2b of the k-th screen value: the full head


def plain_temperature(sampling) -> bool:
    """Whether ``sampling`` is one this module bounds: a temperature > 0, no top-k, no top-p."""
    return not sampling.greedy and not sampling.top_k and (sampling.top_p is None or sampling.top_p >= 1.0)


def bounded_sampling(sampling) -> bool:
    """Whether a sampled step under ``sampling`` can skip the whole head: a plain temperature
    (:func:`verify_bounded`), or a top-k (with or without top-p: :func:`top_k_probs`)."""
    return plain_temperature(sampling) or (not sampling.greedy and bool(sampling.top_k))


def top_k_probs(logits, sampling) -> torch.Tensor | None:
    """p [n, V] under a top-k ``sampling`` (and its top-p, if any), exactly, from a step's bounded
    logits: the k largest logits lie among the ids whose screen value is within 2b of the k-th
    largest one (each of the k ids with the largest y - b has a logit >= that k-th y - b, so every
    id of y + b below it is outside the top k); :func:`specviz.core.algorithm.logits_to_probs` on
    their exact logits alone is the full head's p there (top-k, then top-p, on the same values),
    and every other id's p is 0. None where a row has more than MAX_TOP_K_CANDIDATES candidates
    (the caller reads the full head)."""
    y, b = logits.bounds()  # [n, V], [n]
    k = min(int(sampling.top_k), y.shape[-1])
    p = torch.zeros_like(y)  # [n, V]
    for r in range(y.shape[0]):
        kth = float(top_n(y[r], k)[0][-1])
        ids = torch.nonzero(y[r] >= kth - 2 * b[r]).flatten()  # [m] every id of the top k, and some more
        if ids.numel() > MAX_TOP_K_CANDIDATES:
            return None
        p[r, ids] = logits_to_probs(logits.exact(r, ids), sampling)  # the rest of the row is 0 under top-k
    return p


@dataclass
class BoundedRow:
    """One row of logits l [V] within certified bounds, at temperature T, as the rule reads it.

    ``exact(ids)`` gives exact float32 logits of some ids; ``full()`` the exact p row (softmax(l / T)
    over the whole head: the fallback, also taken where even 1024 ids leave too much mass outside S)."""

    y: torch.Tensor  # [V] float32: the screen's values, |l_i - y_i| <= b
    b: float
    temperature: float
    exact: Callable[[torch.Tensor], torch.Tensor]  # ids [m] -> l [m] float32
    full: Callable[[], torch.Tensor]  # -> p [V] float32, exact
    ids: frozenset[int] = field(init=False, default=frozenset())  # S, the ids with exact weights
    g: torch.Tensor = field(init=False)  # [V] float32: exact weights w on S, the envelope elsewhere
    z_lo: float = field(init=False, default=0.0)
    z_hi: float = field(init=False, default=0.0)
    p: torch.Tensor | None = field(init=False, default=None)  # [V] the exact row, once computed

    def __post_init__(self) -> None:
        T, y, b = self.temperature, self.y, self.b
        self.shift = float(y.max()) + b  # >= every logit: every weight exp((l - shift) / T) is <= 1
        # [V] envelope g_i = exp((y_i + b - shift) / T) >= w_i, widened by ENVELOPE_ROUNDING so that its
        # own float32 rounding cannot put it below w_i
        self.g = torch.exp((y - (self.shift - b)) / T) * ENVELOPE_ROUNDING
        total = float(self.g.sum(dtype=torch.float64))
        low = math.exp(-2 * b / T)  # w_i >= low * g_i
        for n in SIZES:
            ids = top_n(y, n)[1]  # [n]
            exact = self.exact(ids)  # [n] their exact logits, each within b of its y (checked: never assumed)
            off = float((exact - y[ids]).abs().max())
            if off > b:
                _broken_bound(int(ids[int((exact - y[ids]).abs().argmax())]), math.exp(off - b))
                self.make_exact()
                return
            w = torch.exp((exact.double() - self.shift) / T)  # [n] exact weights
            z_s, rest = float(w.sum()), max(0.0, total - float(self.g[ids].sum(dtype=torch.float64)))
            if rest <= EPS * z_s:
                break
        if rest > WIDEST * z_s:
            self.make_exact()  # a flat row (a high temperature): its bounds would decide too little
            return
        self.g[ids] = w.float()
        self.ids = frozenset(ids.tolist())
        self.z_lo = (z_s + low * rest / ENVELOPE_ROUNDING) * (1 - SLACK)
        self.z_hi = (z_s + rest) * (1 + SLACK)

    def make_exact(self) -> torch.Tensor:
        """The exact p row (the full head), remembered: every later decision on this row uses it."""
        if self.p is None:
            self.p = self.full()
        return self.p

    def weight(self, i: int) -> float:
        """w_i = exp((l_i - shift) / T), exact (one exact logit where i is outside S)."""
        if i in self.ids:
            return float(self.g[i])
        return math.exp((float(self.exact(torch.tensor([i]))[0]) - self.shift) / self.temperature)

    def p_interval(self, i: int) -> tuple[float, float]:
        """p_i's certified interval [lo, hi] (a point once the row is exact)."""
        if self.p is not None:
            return float(self.p[i]), float(self.p[i])
        w = self.weight(i)
        return w / self.z_hi, w / self.z_lo


def bounded_rows(logits, temperature: float, p_exact: Callable[[], torch.Tensor]) -> Callable[[int], BoundedRow]:
    """row(r) -> the BoundedRow of row r of a step's logits (anything with ``bounds()`` -> (y [n, V],
    b per row) and ``exact(r, ids)``), made when first asked for; ``p_exact()``: the exact p [n, V]."""
    y, b = logits.bounds()
    made: dict[int, BoundedRow] = {}

    def row(r: int) -> BoundedRow:
        if r not in made:
            made[r] = BoundedRow(y[r], b[r], temperature, lambda ids: logits.exact(r, ids), lambda: p_exact()[r])
        return made[r]

    return row


def accept_bounded(rows: Callable[[int], BoundedRow], drafts: torch.Tensor, q_x: torch.Tensor, u: torch.Tensor) -> int:
    """The accepted prefix's length: x_i accepted while u_i <= min(1, p(x_i) / q(x_i)) (never at
    ratio 0), each decided on p(x_i)'s interval, or on the exact row where the interval straddles u_i."""
    for i, x in enumerate(drafts.tolist()):
        lo, hi = rows(i).p_interval(x)
        q = q_x[i : i + 1]
        yes_lo = bool(accepts(u[i : i + 1], acceptance_ratio(torch.tensor([lo], dtype=q.dtype), q))[0])
        yes_hi = bool(accepts(u[i : i + 1], acceptance_ratio(torch.tensor([hi], dtype=q.dtype), q))[0])
        if yes_lo != yes_hi:  # undecided: the exact row, the same u
            p = rows(i).make_exact()
            yes_lo = bool(accepts(u[i : i + 1], acceptance_ratio(p[x : x + 1], q))[0])
        if not yes_lo:
            return i
    return int(drafts.shape[0])


def _broken_bound(i: int, ratio: float) -> None:
    """Say (once a process) that an exact logit lay outside its certified interval (``ratio`` > 1:
    how far, as a weight ratio); the caller then takes the exact row for the rest of that row's
    decisions. Sound bounds never come here (tests/test_certified.py); a bug must not be clipped away."""
    BROKEN_BOUNDS.append((i, ratio))
    if len(BROKEN_BOUNDS) == 1:
        log.error("specviz: id %d's exact logit is above its certified bound (w/g = %r); the exact row decides", i, ratio)


BROKEN_BOUNDS: list[tuple[int, float]] = []  # (id, w/g) of every bound found broken in this process


def sample_bounded(row: BoundedRow, generator: torch.Generator | None, exclude: int | None = None) -> int:
    """One id from p (``exclude``: from p with that id's mass removed, the residual of a point-mass
    draft), by rejection from the envelope: propose i ~ g, keep it with probability w_i / g_i
    (1 on S, exp((l_i - y_i - b) / T) outside, from its exact logit)."""
    if row.p is None:
        g = row.g
        if exclude is not None:
            g = g.clone()
            g[exclude] = 0.0
        if float(g.sum(dtype=torch.float64)) > 0:
            for _ in range(MAX_TRIES):
                i = sample(g, generator)
                if i in row.ids:
                    return i
                keep = row.weight(i) / float(g[i])  # w_i / g_i <= 1 while l_i <= y_i + b
                if keep > 1.0:  # the bound does not hold here: never clipped, the exact row instead
                    _broken_bound(i, keep)
                    break
                if float(torch.rand(1, generator=generator, dtype=torch.float64)) < keep:
                    return i
    p = row.make_exact()  # (between two proposals: a fresh exact draw has the same law)
    return sample(p if exclude is None else point_mass_residual(p, exclude), generator)


def residual_bounded(row: BoundedRow, q: torch.Tensor, generator: torch.Generator | None) -> int:
    """One id from norm(max(0, p - q)) (q [V]), by rejection from max(0, g / Z_lo - q) >= max(0, p - q):
    propose i, keep it when u' * envelope_i < max(0, p_i - q_i), decided on p_i's interval (or the
    exact row, the same u')."""
    if row.p is None:
        env = torch.clamp(row.g.double() / row.z_lo - q.double(), min=0.0)  # [V]
        if float(env.sum()) > 0:
            for _ in range(MAX_TRIES):
                i = sample(env, generator)
                bar = float(torch.rand(1, generator=generator, dtype=torch.float64)) * float(env[i])
                lo, hi = row.p_interval(i)
                qi = float(q[i])
                if bar < max(0.0, lo - qi):
                    return i
                if bar < max(0.0, hi - qi):  # undecided: the exact row decides this proposal
                    p = row.make_exact()
                    if bar < max(0.0, float(p[i]) - qi):
                        return i
                    break  # rejected; the rest from the exact row
    return sample(residual_distribution(row.make_exact(), q), generator)


def verify_bounded(logits, temperature: float, q, drafts: torch.Tensor, p_exact: Callable[[], torch.Tensor],
                   generator: torch.Generator | None) -> Verification:
    """:func:`specviz.core.algorithm.verify`'s exact rule (sampled, a chain) on a step's bounded
    logits [k+1, V] (see :func:`bounded_rows`); ``q`` [k, V] or None (point masses). p(x_i), the
    ratios and the residual are computed from the exact p [k+1, V] (``p_exact``) only when read."""
    k = drafts.shape[0]
    check_draft_ids(drafts, int(logits.shape[-1]))
    rows = bounded_rows(logits, temperature, p_exact)
    idx = torch.arange(k)
    q_x = q[idx, drafts] if q is not None else torch.ones(k)  # [k]
    u = torch.rand(k, generator=generator)  # [k], as the full rule draws them
    n = accept_bounded(rows, drafts, q_x, u)
    if n == k:
        nxt, resampled = sample_bounded(rows(k), generator), False
    elif q is None:
        nxt, resampled = sample_bounded(rows(n), generator, exclude=int(drafts[n])), True
    else:
        nxt, resampled = residual_bounded(rows(n), q[n], generator), True

    def p_x():
        return p_exact()[idx, drafts]

    def residual():
        p = p_exact()[n]
        return residual_distribution(p, q[n]) if q is not None else point_mass_residual(p, int(drafts[n]))

    return Verification(n, nxt, resampled, Deferred(p_x), q_x, Deferred(lambda: acceptance_ratio(p_x(), q_x)), u,
                        Deferred(residual) if resampled else None)
