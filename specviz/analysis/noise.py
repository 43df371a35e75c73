"""How much of a measured speedup is noise: a bootstrap interval over the runs' own step timings.

A playground speedup is one run against one target-only run, each a few dozen steps on a machine
that may be busy; a single ratio hides how much it would move if the same runs were timed again.
:func:`speedup_interval` estimates that from the spread of the per-step times already recorded:

- the speedup is ``(N_s / (P_s + sum t_i)) / (N_b / (P_b + sum b_j))``: N tokens committed over
  the timed milliseconds, each step's (tokens, ms) pair from the run (t_i: the speculative run's
  step i, b_j: the target-only run's), P the one-off prefill, held fixed; this is the
  tokens-per-second ratio the cards show (``Stats.tokens_per_s``);
- a **percentile bootstrap over steps**: both runs' steps are resampled with replacement (each
  run keeps its number of steps, a step keeps its tokens and its time together), the ratio is
  recomputed for every resample, and the interval is the central ``level`` share of those ratios
  (the 5th to 95th percentile at level 0.9);
- the interval contains 1.0x: the run is **within noise** of target-only.

It assumes steps are exchangeable within a run (no trend such as a warm-up or a machine growing
busier part-way; a one-off first step widens the interval rather than being explained). The draw
is seeded, so a run always shows the same interval. Pure function of numbers (torch for the
resampling); no timing here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import torch

__all__ = ["SpeedupInterval", "speedup_interval", "RESAMPLES", "LEVEL"]

RESAMPLES = 2000  # bootstrap resamples
LEVEL = 0.9  # the interval's central share


@dataclass(frozen=True)
class SpeedupInterval:
    """A speedup and its bootstrap interval (``low``..``high`` at ``level``)."""

    speedup: float  # the ratio on the steps as recorded
    low: float
    high: float
    level: float
    resamples: int

    @property
    def within_noise(self) -> bool:
        """The interval contains 1.0x: not distinguishable from target-only on these runs."""
        return self.low <= 1.0 <= self.high

    def words(self) -> str:
        """ "90% interval 1.21-1.62x" """
        return f"{self.level:.0%} interval {self.low:.2f}–{self.high:.2f}×"


def _check(tokens: Sequence[float], ms: Sequence[float], what: str) -> None:
    if len(tokens) != len(ms):
        raise ValueError(f"{what}: one token count per step time, got {len(tokens)} counts and {len(ms)} times")
    if not tokens:
        raise ValueError(f"{what}: no steps to resample")
    if any(not math.isfinite(x) or x < 0 for x in (*tokens, *ms)):
        raise ValueError(f"{what}: token counts and step times must be finite and >= 0")


def speedup_interval(spec_tokens: Sequence[float], spec_ms: Sequence[float], base_tokens: Sequence[float],
                     base_ms: Sequence[float], *, spec_fixed_ms: float = 0.0, base_fixed_ms: float = 0.0,
                     level: float = LEVEL, resamples: int = RESAMPLES, seed: int = 0) -> SpeedupInterval:
    """The speculative run's speedup over the target-only run, with a percentile-bootstrap interval
    over steps (module docstring). ``*_tokens[i]`` / ``*_ms[i]``: step i's committed tokens and
    milliseconds; ``*_fixed_ms``: the one-off time (prefill) added to every resample unchanged.
    ValueError for empty or mismatched inputs, or a run with no time or no tokens."""
    _check(spec_tokens, spec_ms, "the speculative run")
    _check(base_tokens, base_ms, "the target-only run")
    if not 0 < level < 1:
        raise ValueError(f"level must be between 0 and 1, got {level!r}")
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples!r}")

    def rate(tokens: torch.Tensor, ms: torch.Tensor, fixed: float) -> torch.Tensor:
        return tokens / (ms + fixed)

    st, sm = torch.tensor(spec_tokens, dtype=torch.float64), torch.tensor(spec_ms, dtype=torch.float64)
    bt, bm = torch.tensor(base_tokens, dtype=torch.float64), torch.tensor(base_ms, dtype=torch.float64)
    if sm.sum() + spec_fixed_ms <= 0 or bm.sum() + base_fixed_ms <= 0 or bt.sum() <= 0 or st.sum() <= 0:
        raise ValueError("both runs need committed tokens and some measured time")
    point = float(rate(st.sum(), sm.sum(), spec_fixed_ms) / rate(bt.sum(), bm.sum(), base_fixed_ms))
    g = torch.Generator().manual_seed(int(seed))
    si = torch.randint(0, len(st), (resamples, len(st)), generator=g)
    bi = torch.randint(0, len(bt), (resamples, len(bt)), generator=g)
    base_rate = rate(bt[bi].sum(1), bm[bi].sum(1), base_fixed_ms)
    ratios = rate(st[si].sum(1), sm[si].sum(1), spec_fixed_ms) / base_rate.clamp_min(1e-300)
    ratios = ratios[torch.isfinite(ratios)]
    if ratios.numel() == 0:
        return SpeedupInterval(point, point, point, level, resamples)
    tail = (1 - level) / 2
    low, high = (float(torch.quantile(ratios, q)) for q in (tail, 1 - tail))
    return SpeedupInterval(point, min(low, point), max(high, point), level, resamples)
