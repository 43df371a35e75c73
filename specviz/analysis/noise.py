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

A sweep over many prompts (specviz.bench) has two more: :func:`median_interval`, the median of
the per-prompt speedups with a bootstrap interval over prompts and passes, and
:func:`stall_scores`, which finds the runs a stalled machine slowed (see their section below).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Hashable, Mapping, Sequence

import torch

__all__ = ["SpeedupInterval", "speedup_interval", "RESAMPLES", "LEVEL", "MedianInterval", "median_interval", "stall_scores",
           "STALL_FACTOR", "WIDE", "ONE_RUN", "is_wide", "stalled_steps", "stall_free"]

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
    stalled: int = 0  # steps a stall hit (stall_free), their time taken as their kind's median

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


# ---------------------------------------------------------------------------------------------
# A benchmark over many prompts: the median of per-prompt ratios, and the runs a stall hit
# ---------------------------------------------------------------------------------------------
#
# A sweep's one-pass total (summed tokens / summed seconds) is at the mercy of one stalled run: on
# a shared machine a run that takes 1-2 s can take 12-30 s once, and the total of a configuration
# whose every prompt ran 1.35x faster then reads 0.45x. Two pure tools for that, used by
# specviz.bench: the median of the per-prompt ratios with a bootstrap interval over prompts and
# repeats (a stall moves a median by at most one rank), and a score per run that says how far it
# fell from what its configuration and its prompt predict (a stall scores 5-30, noise under 2).

STALL_FACTOR = 2.0  # a run scoring above this is flagged (twice the time its configuration and prompt predict)
WIDE = 0.25  # an interval wider than this share of its median is called wide (more repeats would narrow it)
ONE_RUN = "one run"  # a bench row's verdict when its median rests on one ratio: no interval to judge it by


def is_wide(low: float, high: float, median: float) -> bool:
    """An interval wider than ``WIDE`` of its median, or one that reaches 1.0x: more passes (or, for a
    prediction, more calibration) would narrow it."""
    return high - low > WIDE * median or low <= 1.0 <= high


@dataclass(frozen=True)
class MedianInterval:
    """The median of per-prompt ratios and its bootstrap interval (``low``..``high`` at ``level``)."""

    median: float
    low: float
    high: float
    level: float
    n: int  # ratios (prompts x passes)
    groups: int  # prompts

    @property
    def verdict(self) -> str:
        """"faster" or "slower" when the whole interval is on one side of 1.0x, else "within noise"."""
        return "faster" if self.low > 1.0 else "slower" if self.high < 1.0 else "within noise"

    @property
    def wide(self) -> bool:
        """The interval spans more than ``WIDE`` of its median (or 1.0x): more passes would narrow it."""
        return self.high - self.low > WIDE * self.median or (self.verdict == "within noise" and self.n > 1)

    def words(self) -> str:
        """ "median 1.35× (90% interval 1.21–1.50×)" """
        return f"median {self.median:.2f}× ({self.level:.0%} interval {self.low:.2f}–{self.high:.2f}×)"


def median_interval(groups: Sequence[Sequence[float]], *, level: float = LEVEL, resamples: int = RESAMPLES,
                    seed: int = 0) -> MedianInterval:
    """The median of every ratio in ``groups`` (one group per prompt, one ratio per pass over it),
    with a two-level percentile bootstrap: prompts are resampled with replacement, then each drawn
    prompt's passes, and the median of the drawn ratios recomputed (seeded: the same interval every
    time). One prompt with one pass: the interval is the point. ValueError when there is no ratio."""
    groups = [list(g) for g in groups if len(g)]
    values = [x for g in groups for x in g]
    if not values:
        raise ValueError("no ratios to take a median of")
    if any(not math.isfinite(x) for x in values):
        raise ValueError("ratios must be finite")
    if not 0 < level < 1:
        raise ValueError(f"level must be between 0 and 1, got {level!r}")
    point = float(torch.tensor(values, dtype=torch.float64).quantile(0.5))
    if len(values) == 1:
        return MedianInterval(point, point, point, level, 1, 1)
    width = max(len(g) for g in groups)
    table = torch.full((len(groups), width), float("nan"), dtype=torch.float64)  # [G, R]: a prompt's ratios, NaN-padded
    for i, g in enumerate(groups):
        table[i, : len(g)] = torch.tensor(g, dtype=torch.float64)
    counts = torch.tensor([len(g) for g in groups])  # [G]
    gen = torch.Generator().manual_seed(int(seed))
    picked = torch.randint(0, len(groups), (resamples, len(groups)), generator=gen)  # [B, G] prompts drawn
    slots = torch.rand(resamples, len(groups), width, generator=gen)  # [B, G, R] -> a pass of the drawn prompt
    passes = (slots * counts[picked].unsqueeze(-1)).long()  # [B, G, R], each below its prompt's count
    drawn = table[picked.unsqueeze(-1), passes]  # [B, G, R]
    keep = torch.arange(width).view(1, 1, width) < counts[picked].unsqueeze(-1)  # a prompt draws as many passes as it has
    drawn = torch.where(keep, drawn, torch.full_like(drawn, float("nan"))).flatten(1)  # [B, G * R]
    medians = torch.nanquantile(drawn, 0.5, dim=1)  # [B]
    tail = (1 - level) / 2
    low, high = (float(torch.quantile(medians, q)) for q in (tail, 1 - tail))
    return MedianInterval(point, min(low, point), max(high, point), level, len(values), len(groups))


def stall_scores(seconds: Mapping[tuple[Hashable, Hashable], float]) -> dict[tuple[Hashable, Hashable], float]:
    """How far each run fell from what its configuration and its prompt predict. ``seconds`` maps
    (prompt, configuration) to a run's time per target pass (any unit); a run's score is the
    smaller of

    - its time over its configuration's median on the other prompts, and
    - the same over this prompt's factor: the lower median, over the prompt's other
      configurations, of each one's time here over its own median elsewhere (a long prompt slows
      every configuration alike),

    so a run is scored high only when it is slow against its own configuration *and* against what
    its prompt explains; a stall elsewhere cannot make a run look slow by making its prompt look
    fast. Medians throughout, so one stalled run barely moves what the others are judged by. A run
    with no other prompt to compare with gets no score (absent from the result)."""
    by_config: dict[Hashable, dict[Hashable, float]] = {}
    for (p, c), x in seconds.items():
        by_config.setdefault(c, {})[p] = x

    elsewhere: dict[tuple[Hashable, Hashable], float] = {}  # (c, p) -> c's median time on the prompts other than p
    for c, runs in by_config.items():
        for p in runs:
            others = [x for q, x in runs.items() if q != p and x > 0]
            if others:
                elsewhere[(c, p)] = _median(others)

    out = {}
    for (p, c), x in seconds.items():
        expected = elsewhere.get((c, p))
        if expected is None:
            continue
        factors = [runs[p] / elsewhere[(d, p)] for d, runs in by_config.items() if d != c and elsewhere.get((d, p))]
        raw = x / expected
        out[(p, c)] = min(raw, raw / _median(factors, low=True)) if factors else raw
    return out


def stalled_steps(ms: Sequence[float], kinds: Sequence[Hashable], factor: float = STALL_FACTOR,
                  min_others: int = 2) -> list[int]:
    """The steps of one run a stall hit, by index: a step that took over ``factor`` times the
    median of the other steps of its kind (``kinds[i]``: what step i did, e.g. how many tokens it
    drafted, so a wide step is judged against wide ones), where its kind has at least ``min_others``
    other steps. The bench's rule (``stall_scores``) at the scale of a step: a stall scores 5-30,
    a step's own noise under 2."""
    by_kind: dict[Hashable, list[int]] = {}
    for i, kind in enumerate(kinds):
        by_kind.setdefault(kind, []).append(i)
    out = []
    for i, (x, kind) in enumerate(zip(ms, kinds)):
        others = [ms[j] for j in by_kind[kind] if j != i]
        if len(others) >= min_others and x > factor * _median(others):
            out.append(i)
    return out


def stall_free(ms: Sequence[float], kinds: Sequence[Hashable], factor: float = STALL_FACTOR) -> tuple[list[float], list[int]]:
    """(the step times with each stalled step's replaced by the median of its kind's unstalled steps,
    the stalled indices): a speedup from them is what the run took where the machine did not stall
    (the "why this speedup?" card; the bench re-runs a stalled run instead)."""
    hit = stalled_steps(ms, kinds, factor)
    if not hit:
        return list(ms), []
    out, bad = list(ms), set(hit)
    for i in hit:
        out[i] = _median([ms[j] for j in range(len(ms)) if kinds[j] == kinds[i] and j not in bad])
    return out, hit


def _median(xs: Sequence[float], low: bool = False) -> float:
    """The median; ``low``: the lower of the two middle values (of two: the smaller)."""
    s = sorted(xs)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else s[mid - 1] if low else (s[mid - 1] + s[mid]) / 2
