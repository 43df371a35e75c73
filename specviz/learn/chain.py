"""The Learn tab's experiments, as pure functions (no Gradio, no Plotly).

1. The rule on a toy vocabulary: draw ``x ~ q``, accept it with ``min(1, p(x)/q(x))``, otherwise
   draw from a fallback distribution. With the residual ``norm(max(0, p - q))`` as the fallback the
   output is exactly ``p``; with a broken fallback (``p`` itself, or ``q``) it is not; lossy
   typical acceptance accepts by a threshold on ``p(x)`` and falls back to ``argmax p``.
   :func:`simulate_rule` samples one drafted position N times (vectorised), and
   :func:`output_distribution` gives what it converges to, in closed form.
2. The same at a real model's next-token position: :func:`next_token_distributions` gives the
   target's ``p`` and the draft's ``q`` (one forward each), :func:`compare_with_speculation`
   samples the next token N times with speculation (the rule on the real ``p`` and ``q``: exactly
   the distribution speculative decoding commits at that position) and without (from ``p``).
3. The expected-speedup calculator: :func:`speedup_curve` and :func:`best_k` (from
   :mod:`specviz.analysis.theory`, re-exported here), and the user's measured runs
   (:mod:`specviz.learn.measured`, re-exported here).

The acceptance math is not re-implemented here: it calls :mod:`specviz.core.algorithm`
(``acceptance_ratio``, ``residual_distribution``, ``typical_threshold``), the same code the
engine verifies with, and :mod:`specviz.analysis.theory` for the expected speedup.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import torch

from ..analysis.theory import best_k, speedup_curve
from ..core.algorithm import Acceptance, acceptance_ratio, logits_to_probs, residual_distribution, typical_threshold
from ..core.records import Sampling
from .measured import (  # re-exported (__all__): the calculator's measured runs live there
    K_MAX,
    MeasuredRun,
    load_bench_runs,
    mean_costs,
    parse_measured_runs,
    pick_run,
    runs_by_proposer,
    runs_from_bench_report,
)
from .measured import to_float as _to_float  # the Learn forms' number reader (the UI asks it here)

__all__ = [
    "BROKEN_RULES", "MAX_TOKENS", "MIN_TOKENS", "PRESETS", "RULES", "MeasuredRun", "NextToken", "RuleExperiment",
    "SpecComparison", "acceptance_probability", "comparison_rows", "best_k", "compare_with_speculation", "exact_output_distribution",
    "load_bench_runs", "next_token_distributions", "output_distribution", "parse_distribution", "parse_measured_runs",
    "parse_table", "rule_parts", "run_rule", "runs_from_bench_report", "sampling_noise", "simulate_rule",
    "speedup_curve", "top_token_ids", "tv_distance", "verdict",
]

MIN_TOKENS, MAX_TOKENS = 5, 8
MAX_SAMPLES = 1_000_000
DEFAULT_EPS = Acceptance().eps  # typical acceptance's defaults, the engine's
DEFAULT_DELTA = Acceptance().delta

# rule id -> label (the typical rule is labelled LOSSY wherever it appears)
RULES: dict[str, str] = {
    "exact": "exact: resample from the residual max(0, p − q)",
    "no-residual": "broken: no residual (resample from p)",
    "resample-q": "broken: resample from q",
    "typical": "typical acceptance (LOSSY)",
}
BROKEN_RULES = ("no-residual", "resample-q")

# name -> (tokens, p, q): starting points for the toy vocabulary (weights; normalised on parse)
PRESETS: dict[str, tuple[list[str], list[float], list[float]]] = {
    "draft too confident": (
        ["the", "a", "cat", "dog", "sat", "ran"],
        [0.30, 0.25, 0.20, 0.10, 0.10, 0.05],
        [0.70, 0.10, 0.05, 0.05, 0.05, 0.05],
    ),
    "draft agrees": (
        ["the", "a", "cat", "dog", "sat", "ran"],
        [0.30, 0.25, 0.20, 0.10, 0.10, 0.05],
        [0.28, 0.27, 0.18, 0.12, 0.09, 0.06],
    ),
    "draft too flat": (
        ["the", "a", "cat", "dog", "sat", "ran", "on", "mat"],
        [0.55, 0.20, 0.10, 0.05, 0.04, 0.03, 0.02, 0.01],
        [0.125] * 8,
    ),
    "disjoint": (
        ["the", "a", "cat", "dog", "sat", "ran"],
        [0.50, 0.30, 0.20, 0.0, 0.0, 0.0],
        [0.0, 0.0, 0.0, 0.40, 0.35, 0.25],
    ),
}


# -- parsing -----------------------------------------------------------------------------------


def parse_distribution(values: str | Sequence[Any], name: str = "p", *, min_tokens: int = MIN_TOKENS,
                       max_tokens: int = MAX_TOKENS, labels: Sequence[str] | None = None) -> torch.Tensor:
    """Weights (a list, or text like ``"0.5, 0.3 0.2"``) -> a normalised float64 tensor [V].

    Raises ValueError for non-numbers, negative values, all zeros, or fewer than ``min_tokens`` /
    more than ``max_tokens`` values. Weights need not sum to 1: they are divided by their sum.
    ``labels`` (token names) make the messages say ``q('the')`` rather than ``q[1]``.
    """
    if isinstance(values, str):
        parts = [s for s in re.split(r"[\s,;]+", values.strip()) if s]
    elif isinstance(values, torch.Tensor):
        parts = values.flatten().tolist()
    else:
        parts = list(values)
    if not min_tokens <= len(parts) <= max_tokens:
        raise ValueError(f"{name} needs {min_tokens} to {max_tokens} values (one per token), got {len(parts)}")
    where = [f"{name}({labels[i]!r})" if labels is not None and i < len(labels) else f"{name}[{i + 1}]"
             for i in range(len(parts))]
    xs = [_to_float(v, where[i]) for i, v in enumerate(parts)]
    for i, x in enumerate(xs):
        if x < 0:
            raise ValueError(f"{where[i]} is negative ({x:g}): probabilities are >= 0")
    total = sum(xs)
    if total <= 0:
        raise ValueError(f"{name} is all zeros: give at least one token some probability")
    return torch.tensor(xs, dtype=torch.float64) / total


def _blank(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v)) or (isinstance(v, str) and not v.strip())


def parse_table(rows: Iterable[Sequence[Any]]) -> tuple[list[str], torch.Tensor, torch.Tensor]:
    """Rows of (token, p, q) -> (token names, p [V], q [V]), both normalised.

    Fully blank rows are skipped; a blank token name becomes ``t1``, ``t2``, ...; names must differ.
    """
    kept = [list(r) + [None] * (3 - len(r)) for r in rows if not all(_blank(v) for v in list(r)[:3])]
    if not MIN_TOKENS <= len(kept) <= MAX_TOKENS:
        raise ValueError(f"the toy vocabulary needs {MIN_TOKENS} to {MAX_TOKENS} tokens (rows), got {len(kept)}")
    names = [f"t{i + 1}" if _blank(r[0]) else str(r[0]).strip() for i, r in enumerate(kept)]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"token names must differ; repeated: {', '.join(repr(d) for d in dupes)}")
    p = parse_distribution([r[1] for r in kept], "p", labels=names)
    q = parse_distribution([r[2] for r in kept], "q", labels=names)
    return names, p, q


# -- distances ---------------------------------------------------------------------------------


def tv_distance(a: torch.Tensor, b: torch.Tensor) -> float:
    """Total-variation distance ½ Σ |a − b| between two distributions [V] (0 = equal, 1 = disjoint)."""
    return 0.5 * float((a.double() - b.double()).abs().sum())


def sampling_noise(p: torch.Tensor, n: int) -> float:
    """The TV distance an n-sample histogram of ``p`` itself shows on average: ½ Σ_x E|X_x/n − p(x)|.

    X_x ~ Binomial(n, p(x)); its mean absolute deviation is De Moivre's closed form
    2 ν C(n, ν) p^ν (1 − p)^(n − ν + 1) with ν = ⌊n p⌋ + 1 (exact, also for a 262k-token vocabulary).
    """
    n = max(1, int(n))
    p = p.double().clamp(0.0, 1.0)
    live = (p > 0) & (p < 1)
    if not bool(live.any()):
        return 0.0
    pl = p[live]
    nu = torch.floor(n * pl) + 1  # [m]
    log_mad = (math.log(2.0) + torch.log(nu) + math.lgamma(n + 1) - torch.lgamma(nu + 1) - torch.lgamma(n - nu + 1)
               + nu * torch.log(pl) + (n - nu + 1) * torch.log1p(-pl))
    return 0.5 * float(torch.exp(log_mad).sum()) / n


def acceptance_probability(p: torch.Tensor, q: torch.Tensor) -> float:
    """β = Σ_x q(x) min(1, p(x)/q(x)) = Σ min(p, q): the chance a draft x ~ q is accepted."""
    return float((q * acceptance_ratio(p, q)).sum())


# -- the rules ---------------------------------------------------------------------------------


def _check_rule(rule: str) -> None:
    if rule not in RULES:
        raise ValueError(f"unknown rule {rule!r}; choose one of: {', '.join(RULES)}")


def rule_parts(p: torch.Tensor, q: torch.Tensor, rule: str = "exact", *, eps: float = DEFAULT_EPS,
               delta: float = DEFAULT_DELTA) -> tuple[torch.Tensor, torch.Tensor]:
    """(accept [V], fallback [V]) of one drafted position under ``rule``.

    accept[x]: the chance a drafted x is kept (min(1, p/q), or 0/1 for typical acceptance);
    fallback: the distribution the token is drawn from after a rejection.
    """
    _check_rule(rule)
    if p.shape != q.shape or p.dim() != 1:
        raise ValueError(f"p and q must be 1-D and the same size, got {tuple(p.shape)} and {tuple(q.shape)}")
    if rule == "typical":
        Acceptance("typical", eps=eps, delta=delta)  # validates eps and delta
        accept = (p > typical_threshold(p, eps, delta)).to(p.dtype)  # [V]
        fallback = torch.zeros_like(p)
        fallback[int(p.argmax())] = 1.0  # reject -> argmax p, as the engine does
        return accept, fallback
    accept = acceptance_ratio(p, q)  # [V] min(1, p/q)
    fallback = {"exact": lambda: residual_distribution(p, q), "no-residual": lambda: p, "resample-q": lambda: q}[rule]()
    return accept, fallback


def output_distribution(p: torch.Tensor, q: torch.Tensor, rule: str = "exact", *, eps: float = DEFAULT_EPS,
                        delta: float = DEFAULT_DELTA) -> torch.Tensor:
    """What one drafted position commits under ``rule``, in closed form [V]:

    Pr[x] = q(x) accept(x) + (1 − Σ_y q(y) accept(y)) fallback(x).

    exact: min(p, q) + (1 − β) norm(max(0, p − q)) = p;   no-residual: min(p, q) + (1 − β) p;
    resample-q: min(p, q) + (1 − β) q;   typical: q on the tokens above the threshold, the rest on argmax p.
    """
    accept, fallback = rule_parts(p, q, rule, eps=eps, delta=delta)
    kept = q * accept  # [V]
    return kept + (1.0 - kept.sum()).clamp_min(0.0) * fallback


exact_output_distribution = output_distribution  # the name used in the design notes


def _simulate(p: torch.Tensor, q: torch.Tensor, n: int, rule: str, seed: int, eps: float,
              delta: float) -> tuple[torch.Tensor, int]:
    if isinstance(n, bool) or int(n) != n or not 1 <= n <= MAX_SAMPLES:
        raise ValueError(f"N (samples) must be a whole number from 1 to {MAX_SAMPLES:,}, got {n!r}")
    n = int(n)
    accept, fallback = rule_parts(p, q, rule, eps=eps, delta=delta)
    g = torch.Generator(device=p.device).manual_seed(int(seed))
    V = p.shape[0]
    x = torch.multinomial(q, n, replacement=True, generator=g)  # [n] drafts x ~ q
    u = torch.rand(n, generator=g, device=p.device, dtype=p.dtype)  # [n] u ~ U(0, 1)
    kept = u < accept[x]  # [n]; strict, so accept = 0 never keeps (the engine's u <= ratio differs on a null set)
    n_rejected = int((~kept).sum())
    counts = torch.bincount(x[kept], minlength=V)  # [V]
    if n_rejected:
        y = torch.multinomial(fallback, n_rejected, replacement=True, generator=g)  # [n_rejected]
        counts = counts + torch.bincount(y, minlength=V)
    return counts, n - n_rejected


def simulate_rule(p: torch.Tensor, q: torch.Tensor, n: int, rule: str = "exact", seed: int = 0, *,
                  eps: float = DEFAULT_EPS, delta: float = DEFAULT_DELTA) -> torch.Tensor:
    """Counts [V] of the token committed at one drafted position, over n independent tries.

    Each try: draw x ~ q, keep it with the rule's acceptance chance, otherwise draw from the rule's
    fallback (see :func:`rule_parts`). Vectorised: 10,000 tries take milliseconds.
    """
    return _simulate(p, q, n, rule, seed, eps, delta)[0]


# -- verdicts ----------------------------------------------------------------------------------

NOISE_FACTOR = 3.0  # a histogram "matches" when its TV is within this many times the expected noise


def verdict(tv: float, noise: float, theory_tv: float, rule: str, n: int) -> tuple[str, str, bool]:
    """(sentence, kind "ok" | "error" | "info", matches) for a histogram's TV distance from p."""
    limit = NOISE_FACTOR * noise
    matches = tv <= limit
    lossy = rule == "typical"
    if matches:
        text = (f"matches p (TV {tv:.3f}, within the sampling-noise limit {limit:.3f} at N = {n:,}: "
                f"a histogram of p itself is off by ~{noise:.3f} on average)")
        if theory_tv > 1e-9:
            what = "typical acceptance is lossy" if lossy else "this rule is not exact"
            text += (f", but {what}: in theory its output is TV {theory_tv:.3f} from p here, "
                     f"hidden by the noise of {n:,} samples")
            return text + ".", "info", True
        if rule in BROKEN_RULES or lossy:
            text += (". This rule is not exact in general, but with these p and q it happens to give p "
                     "(try the 'draft too confident' preset).")
            return text, "info", True
        return text + ".", "ok", True
    if lossy:
        return (f"misses p: TV {tv:.3f}, above the sampling-noise limit {limit:.3f} at N = {n:,} — typical acceptance is LOSSY: its output is not p "
                f"(in theory TV {theory_tv:.3f}).", "error", False)
    if rule in BROKEN_RULES:
        return (f"misses p: TV {tv:.3f}, above the sampling-noise limit {limit:.3f} at N = {n:,} — this rule is not exact "
                f"(in theory TV {theory_tv:.3f} from p).", "error", False)
    return (f"misses p: TV {tv:.3f}, above the sampling-noise limit {limit:.3f}. The exact rule gives p in theory: with {n:,} samples "
            "this is chance; sample again or raise N.", "info", False)


@dataclass(frozen=True)
class RuleExperiment:
    """One run of the toy experiment: N tries of one drafted position under one rule."""

    tokens: tuple[str, ...]
    p: torch.Tensor  # [V] target
    q: torch.Tensor  # [V] draft
    rule: str
    n: int
    counts: torch.Tensor  # [V] long
    expected: torch.Tensor  # [V] the rule's output distribution, closed form
    accepted: int  # tries whose draft was kept
    tv: float  # TV(histogram, p)
    theory_tv: float  # TV(expected, p)
    noise: float  # TV an n-sample histogram of p shows by chance
    matches: bool
    message: str
    kind: str  # "ok" | "info" | "error"

    @property
    def freq(self) -> torch.Tensor:
        return self.counts.double() / max(1, self.n)


def run_rule(tokens: Sequence[str], p: torch.Tensor, q: torch.Tensor, rule: str = "exact", n: int = 10_000,
             seed: int = 0, *, eps: float = DEFAULT_EPS, delta: float = DEFAULT_DELTA) -> RuleExperiment:
    """Simulate, compare with p and with the closed form, and phrase the verdict."""
    counts, accepted = _simulate(p, q, n, rule, seed, eps, delta)
    expected = output_distribution(p, q, rule, eps=eps, delta=delta)
    freq = counts.double() / n
    tv, theory = tv_distance(freq, p), tv_distance(expected, p)
    noise = sampling_noise(p, n)  # what a histogram of p itself shows
    text, kind, ok = verdict(tv, noise, theory, rule, n)
    return RuleExperiment(tuple(tokens), p, q, rule, int(n), counts, expected, accepted, tv, theory, noise, ok, text, kind)


# -- part 2: a real model's next token -----------------------------------------------------------


@dataclass(frozen=True)
class NextToken:
    """The target's and the proposer's distributions over the token after a prefix."""

    prompt_ids: tuple[int, ...]
    p: torch.Tensor  # [V] float64, cpu: the target's, after sampling settings
    q: torch.Tensor  # [V] float64, cpu: the draft's (a one-hot for a point-mass proposer)
    draft_token: int | None = None  # the n-gram's proposed token (point mass), else None


def _fit_logits(logits: torch.Tensor, vocab: int) -> torch.Tensor:
    """Draft logits [V_d] -> [vocab]: cut, or pad with -inf, so q lives on the target's vocabulary."""
    if logits.shape[-1] >= vocab:
        return logits[:vocab]
    return torch.cat([logits, logits.new_full((vocab - logits.shape[-1],), float("-inf"))])


def _normalised(probs: torch.Tensor) -> torch.Tensor:
    """float64 and summing to 1 to rounding, so the closed forms compare at ~1e-15, not ~1e-7."""
    probs = probs.double()
    return probs / probs.sum()


@torch.inference_mode()
def _last_logits(lm, ids: list[int]) -> torch.Tensor:
    from ..runtime.kv import forward_logits, new_cache

    x = torch.tensor(ids, dtype=torch.long, device=lm.device)  # [n]
    return forward_logits(lm.model, x, new_cache(lm.model), 1)[0].cpu()  # [V]


def next_token_distributions(target, draft, prefix: str | Sequence[int], sampling: Sampling,
                             *, chat: bool = False) -> NextToken:
    """p and q at the position after ``prefix`` (one forward pass each).

    target: a LoadedModel; draft: a LoadedModel sharing its tokenizer, or None for the n-gram
    (prompt lookup) proposer, whose q is a point mass on the token it would draft here.
    Sampling with temperature 0 is refused: greedy decoding has no distribution to compare.
    """
    from ..core.engine import encode_prompt

    if sampling.greedy:
        raise ValueError("temperature 0 is greedy: both ways always give argmax p. Choose a temperature above 0")
    ids = encode_prompt(target.tokenizer, prefix, chat=chat)
    logits_p = _last_logits(target, ids)  # [V]
    p = _normalised(logits_to_probs(logits_p, sampling))  # [V]
    if draft is None:
        from ..proposers.ngram import ngram_lookup

        found = ngram_lookup(torch.tensor(ids, dtype=torch.long), 1, 3, 1)
        if found is None or found.numel() == 0:
            raise ValueError("the n-gram proposer finds no earlier occurrence of the prefix's last tokens, so it "
                             "drafts nothing here: type a prefix that repeats itself (e.g. 'a b c a b'), or use a draft model")
        x = int(found[0])
        q = torch.zeros_like(p)
        q[x] = 1.0
        return NextToken(tuple(ids), p, q, x)
    from ..proposers.draft_model import check_same_tokenizer

    check_same_tokenizer(target, draft)
    logits_q = _fit_logits(_last_logits(draft, ids), p.shape[0])  # [V]
    q = _normalised(logits_to_probs(logits_q, sampling))  # [V]
    return NextToken(tuple(ids), p, q, None)


@dataclass(frozen=True)
class SpecComparison:
    """N next tokens sampled with speculation (the exact rule on p, q) and without (from p)."""

    n: int
    spec_counts: torch.Tensor  # [V] long
    plain_counts: torch.Tensor  # [V] long
    tv_spec: float  # TV(with speculation, p)
    tv_plain: float  # TV(without, p)
    tv_between: float  # TV(with, without)
    theory_tv: float  # TV(what the rule gives in theory, p): 0 for the exact rule
    noise: float  # TV an n-sample histogram of p shows by chance
    beta: float  # Σ min(p, q): the chance the draft is accepted here
    accepted: int  # tries whose draft was kept
    rule: str
    message: str
    kind: str


def compare_with_speculation(p: torch.Tensor, q: torch.Tensor, n: int = 10_000, seed: int = 0, rule: str = "exact", *,
                             eps: float = DEFAULT_EPS, delta: float = DEFAULT_DELTA) -> SpecComparison:
    """Sample the next token n times with speculation (``rule`` on p and q) and n times from p alone."""
    spec, accepted = _simulate(p, q, n, rule, seed, eps, delta)
    g = torch.Generator(device=p.device).manual_seed(int(seed) + 1)
    plain = torch.bincount(torch.multinomial(p, n, replacement=True, generator=g), minlength=p.shape[0])
    fs, fp = spec.double() / n, plain.double() / n
    tv_s, tv_p, tv_b = tv_distance(fs, p), tv_distance(fp, p), tv_distance(fs, fp)
    theory = tv_distance(output_distribution(p, q, rule, eps=eps, delta=delta), p)
    noise = sampling_noise(p, n)
    beta = acceptance_probability(p, q)
    kept = f"The draft was kept {accepted / n:.0%} of the time"
    ok = tv_s <= NOISE_FACTOR * noise and tv_b <= 2 * NOISE_FACTOR * noise
    if rule == "typical":
        msg = (f"Typical acceptance (LOSSY): with speculation TV {tv_s:.3f} from p (in theory {theory:.3f}), without "
               f"TV {tv_p:.3f}, between them {tv_b:.3f} (sampling-noise limit {NOISE_FACTOR * noise:.3f}). {kept}; its output is "
               f"{'close to' if ok else 'not'} p here.")
        kind = "info" if ok else "error"
    elif ok:
        msg = (f"Both match p: with speculation TV {tv_s:.3f}, without TV {tv_p:.3f}, between them {tv_b:.3f}, "
               f"all within the sampling-noise limit ({NOISE_FACTOR * noise:.3f} from p, {2 * NOISE_FACTOR * noise:.3f} "
               f"between them; ~{noise:.3f} on average at N = {n:,}). {kept} (theory Σ min(p, q) = {beta:.0%}), and still the output is p.")
        kind = "ok"
    else:
        msg = (f"With speculation TV {tv_s:.3f} from p, without TV {tv_p:.3f}, between them {tv_b:.3f}: "
               f"above the sampling-noise limit ({NOISE_FACTOR * noise:.3f} from p, {2 * NOISE_FACTOR * noise:.3f} between "
               f"them; ~{noise:.3f} on average), which with {n:,} samples can be chance; "
               "sample again or raise N.")
        kind = "info"
    return SpecComparison(int(n), spec, plain, tv_s, tv_p, tv_b, theory, noise, beta, accepted, rule, msg, kind)


def top_token_ids(*dists: torch.Tensor, n: int = 12) -> list[int]:
    """Up to n token ids worth showing: the top 2 of every distribution after the first (say the
    draft's favourite), filled up with the first's most likely, ordered by the first."""
    first = dists[0].double()
    picked: list[int] = []

    def add(d: torch.Tensor, m: int) -> None:
        for i in torch.topk(d.double(), min(m, d.shape[0])).indices.tolist():
            if len(picked) < n and float(d[i]) > 0 and i not in picked:
                picked.append(i)

    for d in dists[1:]:
        add(d, 2)
    add(first, n)
    return sorted(picked, key=lambda i: (-float(first[i]), i))


def comparison_rows(p: torch.Tensor, q: torch.Tensor, cmp: "SpecComparison", n_top: int = 12
                    ) -> tuple[list[int | None], list[float], list[float], list[float], list[float]]:
    """(ids, p, q, with, without) over the tokens worth showing, plus None = all the other tokens."""
    fs, fp = cmp.spec_counts.double() / cmp.n, cmp.plain_counts.double() / cmp.n
    ids = top_token_ids(p, fs, fp, q, n=n_top)
    idx = torch.tensor(ids, dtype=torch.long)
    cols = [d.double() for d in (p, q, fs, fp)]
    rows = [[float(v) for v in c[idx]] for c in cols]
    rest = [max(0.0, float(c.sum()) - sum(r)) for c, r in zip(cols, rows)]
    if any(r > 1e-9 for r in rest):
        ids = ids + [None]
        rows = [r + [x] for r, x in zip(rows, rest)]
    return ids, rows[0], rows[1], rows[2], rows[3]


__all__ += ["K_MAX", "mean_costs", "pick_run", "runs_by_proposer"]  # the calculator's, from .measured
