"""The Learn tab's multi-candidate experiment: several candidates for one position, tried in
turn against the residual, on a toy vocabulary.

A token tree offers m children c_1..c_m where a chain offers one. The exact rule
(``specviz.core.algorithm.verify_tree``; SpecInfer's multi-step speculative sampling, RSD) tries them
one after another, each against what is left of the target after the earlier ones failed:

1. r_1 = p. Accept c_j with probability min(1, r_j(c_j) / q_j(c_j)) (point masses: r_j(c_j)).
2. After a rejection r_{j+1} = norm(max(0, r_j - q_j)) (``sibling_residual``; a point mass just
   removes c_j and renormalises); sampled candidates: q_{j+1} = q_j without c_j.
3. None kept: draw the token from r_{m+1}.

The output is exactly p. The broken variant tests every child against the ORIGINAL p (step 1
with r_j = p) while still correcting from r_{m+1}: later candidates then come out too rarely and
the rest too often. ``run_tree_rule`` samples either N times with ``verify_tree`` itself (given
uniforms) and measures the TV distance to p against the sampling noise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from ..core.algorithm import sibling_residual, verify_tree
from .chain import NOISE_FACTOR, sampling_noise, tv_distance

__all__ = ["TREE_RULES", "TREE_MODES", "MAX_TREE_SAMPLES", "TreeRuleExperiment", "parse_candidates",
           "residual_steps", "broken_output_distribution", "try_candidates", "run_tree_rule"]

TREE_RULES = {
    "exact": "exact: each candidate against the residual left by the rejected ones",
    "broken-original-p": "broken: each candidate against the original p",
}
TREE_MODES = {
    "point": "point masses, in order (n-gram continuations, argmax / top-w drafts)",
    "sampled": "sampled from q without replacement",
}
MAX_TREE_SAMPLES = 50_000  # one verify_tree call per sample: about a second per 10,000 on a CPU


def parse_candidates(text: str | Sequence[str], tokens: Sequence[str]) -> list[int]:
    """'the, cat' -> their indices in ``tokens`` (in order); ValueError naming a token not in the
    vocabulary or given twice (siblings must differ)."""
    names = [t.strip() for t in (text.split(",") if isinstance(text, str) else text) if t and t.strip()]
    if not names:
        raise ValueError(f"name at least one candidate token, e.g. {tokens[0]}, {tokens[1]}")
    out = []
    for name in names:
        if name not in tokens:
            raise ValueError(f"candidate {name!r} is not in the toy vocabulary ({', '.join(tokens)})")
        i = list(tokens).index(name)
        if i in out:
            raise ValueError(f"candidate {name!r} is given twice: a tree's siblings are distinct tokens")
        out.append(i)
    if len(out) >= len(tokens):
        raise ValueError(f"give fewer candidates than tokens ({len(tokens)}): something must be left for the residual")
    return out


def residual_steps(p: torch.Tensor, candidates: Sequence[int], q: torch.Tensor | None = None) -> list[tuple[torch.Tensor, float]]:
    """[(r_j [V], mass of p not yet ruled out)] for j = 1..m+1: r_1 = p, then each candidate's
    rejection (``sibling_residual``). ``q`` None: point masses; else sampled candidates (q_j is q
    without the earlier candidates, renormalised)."""
    V = p.shape[0]
    r, mass, out = p.double(), 1.0, [(p.double(), 1.0)]
    qj = None if q is None else q.double().clone()
    for c in candidates:
        point = torch.nn.functional.one_hot(torch.tensor(c), V).double() if qj is None else qj  # [V]
        mass *= float(torch.clamp(r - point, min=0.0).sum())
        r = sibling_residual(r, point)
        out.append((r, mass))
        if qj is not None:
            qj[c] = 0.0
            qj = qj / qj.sum() if qj.sum() > 0 else qj
    return out


def broken_output_distribution(p: torch.Tensor, candidates: Sequence[int]) -> torch.Tensor:
    """What the broken rule gives for point-mass candidates, in closed form [V]: c_j comes out
    with prod_{i<j}(1 - p(c_i)) p(c_j), the rest from the correct final residual."""
    p = p.double()
    out, left = torch.zeros_like(p), 1.0
    for c in candidates:
        out[c] += left * float(p[c])
        left *= 1.0 - float(p[c])
    return out + left * residual_steps(p, candidates)[-1][0]


def _broken_try(p: torch.Tensor, q: torch.Tensor | None, cands: Sequence[int], us: Sequence[float],
                final_u: float) -> tuple[int, int]:
    """The broken rule: child j tested against the ORIGINAL p (not r_j); correction from r_{m+1}."""
    qj = None if q is None else q.double().clone()
    r = p.double()
    for j, (c, u) in enumerate(zip(cands, us)):
        qx = 1.0 if qj is None else float(qj[c])
        if u <= min(1.0, float(p[c]) / max(qx, 1e-300)):  # <- the bug: p, where the exact rule uses r_j
            return c, j
        point = torch.nn.functional.one_hot(torch.tensor(c), p.shape[0]).double() if qj is None else qj
        r = sibling_residual(r, point)
        if qj is not None:
            qj[c] = 0.0
            qj = qj / qj.sum() if qj.sum() > 0 else qj
    cdf = torch.cumsum(r, 0)
    return int(torch.searchsorted(cdf, torch.tensor(final_u * float(cdf[-1]), dtype=cdf.dtype), right=True).clamp(max=p.shape[0] - 1)), len(cands)


def try_candidates(p: torch.Tensor, candidates: Sequence[int], uniforms: Sequence[float], *, q: torch.Tensor | None = None,
                   rule: str = "exact", generator: torch.Generator | None = None) -> tuple[int, int]:
    """One position, m candidates as siblings under the root -> (output token, index of the kept
    child, m when none was kept). The exact rule is ``verify_tree`` itself with the given uniforms."""
    m = len(candidates)
    if rule == "broken-original-p":
        final = float(torch.rand(1, generator=generator)) if len(uniforms) <= m else float(uniforms[m])
        return _broken_try(p, q, candidates, list(uniforms)[:m], final)
    if rule != "exact":
        raise ValueError(f"unknown rule {rule!r}; choose one of {', '.join(TREE_RULES)}")
    V = p.shape[0]
    tokens = torch.tensor(list(candidates), dtype=torch.long)  # [m]
    parents = torch.full((m,), -1, dtype=torch.long)  # [m] all children of the root
    rows = p.to(torch.float64).expand(m + 1, V)  # [m+1, V] only row 0 (the root's p) is used for one position
    qs = None if q is None else q.to(torch.float64).expand(m, V)  # [m, V] siblings share q
    ver = verify_tree(rows, qs, tokens, parents, generator=generator, uniforms=list(uniforms))
    if ver.path:
        return int(candidates[ver.path[0]]), ver.path[0]
    return int(ver.next_token), m


@dataclass(frozen=True)
class TreeRuleExperiment:
    tokens: tuple[str, ...]
    p: torch.Tensor  # [V]
    q: torch.Tensor | None  # [V] for sampled candidates, None for point masses
    candidates: tuple[int, ...]  # point masses: the fixed candidates; sampled: () (drawn each time)
    m: int  # candidates per try
    mode: str  # "point" | "sampled"
    rule: str  # "exact" | "broken-original-p"
    n: int
    counts: torch.Tensor  # [V] output counts
    kept_by_child: tuple[int, ...]  # how often child 1..m was kept, then the residual's share (m + 1 entries)
    tv: float  # TV(histogram, p)
    noise: float  # mean TV of an n-sample histogram of p itself
    limit: float  # NOISE_FACTOR x noise
    theory_tv: float | None  # TV(what the rule gives in theory, p) where known
    matches: bool
    message: str
    kind: str  # "ok" | "error" | "info"

    @property
    def freq(self) -> torch.Tensor:
        return self.counts.double() / max(1, self.n)


def run_tree_rule(tokens: Sequence[str], p: torch.Tensor, q: torch.Tensor | None, *, mode: str = "point",
                  candidates: Sequence[int] = (), m: int = 2, rule: str = "exact", n: int = 10_000,
                  seed: int = 0) -> TreeRuleExperiment:
    """Sample one position N times with m candidates and the chosen rule; compare with p."""
    if mode not in TREE_MODES:
        raise ValueError(f"unknown mode {mode!r}; choose one of {', '.join(TREE_MODES)}")
    if rule not in TREE_RULES:
        raise ValueError(f"unknown rule {rule!r}; choose one of {', '.join(TREE_RULES)}")
    if not 1 <= int(n) <= MAX_TREE_SAMPLES:
        raise ValueError(f"N must be a whole number from 1 to {MAX_TREE_SAMPLES:,}")
    V = p.shape[0]
    p = p.double() / p.double().sum()
    g = torch.Generator().manual_seed(int(seed))
    if mode == "point":
        cands = list(candidates)
        if not cands:
            raise ValueError("point-mass mode needs the candidate tokens, in the order they are tried")
        m, qq = len(cands), None
    else:
        if q is None:
            raise ValueError("sampled candidates need the draft's q")
        if not 1 <= int(m) < int((q > 0).sum()):
            raise ValueError(f"m (candidates per try) must be from 1 to {int((q > 0).sum()) - 1}: fewer than the tokens q can draw")
        qq, m, cands = q.double() / q.double().sum(), int(m), []
    counts = torch.zeros(V, dtype=torch.long)
    kept = [0] * (m + 1)
    for _ in range(int(n)):
        cs = cands if mode == "point" else torch.multinomial(qq, m, replacement=False, generator=g).tolist()
        us = torch.rand(m + 1, generator=g, dtype=torch.float64).tolist()
        x, j = try_candidates(p, cs, us[:m] if rule == "exact" else us, q=qq, rule=rule, generator=g)
        counts[x] += 1
        kept[j] += 1
    freq = counts.double() / n
    tv, noise = tv_distance(freq, p), sampling_noise(p, int(n))
    limit = NOISE_FACTOR * noise
    theory = 0.0 if rule == "exact" else (tv_distance(broken_output_distribution(p, cands), p) if mode == "point" else None)
    matches = tv <= limit
    head = f"TV {tv:.3f} from p, {'within' if matches else 'above'} the sampling-noise limit {limit:.3f} at N = {int(n):,}"
    if rule == "exact" and matches:
        text, kind = f"Matches p: {head}. Trying several candidates against the residual keeps the output exactly p.", "ok"
    elif rule == "exact":
        text, kind = f"Misses p: {head}. The exact rule gives p in theory: with {int(n):,} samples this is chance; sample again.", "info"
    elif not matches:
        th = f" (in theory TV {theory:.3f})" if theory is not None else ""
        text, kind = (f"Misses p: {head}{th}. Testing a later candidate against the original p, not the residual, "
                      "counts the mass of the rejected candidates twice: the output is not p.", "error")
    else:
        th = f"; in theory it is TV {theory:.3f} from p" if theory else ""
        text, kind = (f"Looks like p here: {head}{th}. The broken rule is not exact in general; try more candidates, "
                      "a larger N, or candidates p likes.", "info")
    return TreeRuleExperiment(tuple(tokens), p, qq, tuple(cands), m, mode, rule, int(n), counts, tuple(kept), tv, noise,
                              limit, theory, matches, text, kind)
