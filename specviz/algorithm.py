"""The acceptance-and-resampling rule of speculative sampling, as pure tensor functions.

Notation follows Leviathan, Kalman & Matias (2023): ``p`` is the target's distribution, ``q`` the
draft's (both after the same temperature / top-k / top-p), ``x_i`` the i-th drafted token,
``u_i ~ U(0, 1)``. Nothing here touches a model: every function maps tensors to tensors, so the
rule is tested on hand-written distributions and reused by the engine, the Learn tab and the
statistical exactness tests. What the rule implies for speed (expected tokens per step, expected
speedup) is in :mod:`specviz.theory`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .records import Sampling

TOP_N = 10  # how many tokens of p, q and the residual each record keeps for charts


def logits_to_probs(logits: torch.Tensor, sampling: Sampling) -> torch.Tensor:
    """Logits [..., V] -> probabilities [..., V] after temperature, top-k and top-p.

    In greedy mode (temperature 0) the result is the plain softmax: decisions use argmax, the
    probabilities are only shown.
    """
    logits = logits.float()
    if sampling.greedy:
        return torch.softmax(logits, dim=-1)
    logits = logits / sampling.temperature
    if sampling.top_k:
        kth = torch.topk(logits, min(int(sampling.top_k), logits.shape[-1]), dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if sampling.top_p is not None and sampling.top_p < 1.0:
        sorted_probs, order = torch.sort(probs, dim=-1, descending=True)
        mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs  # [..., V] mass of better tokens
        drop_sorted = mass_before >= sampling.top_p  # the first token is never dropped
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        probs = probs.masked_fill(drop, 0.0)
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs


def sample(probs: torch.Tensor, generator: torch.Generator | None) -> int:
    """Draw one token id from a distribution [V]."""
    return int(torch.multinomial(probs, 1, generator=generator))


def acceptance_ratio(p_x: torch.Tensor, q_x: torch.Tensor) -> torch.Tensor:
    """min(1, p(x) / q(x)) per drafted token. [k], [k] -> [k]."""
    return torch.clamp(p_x / q_x.clamp_min(torch.finfo(q_x.dtype).tiny), max=1.0)


def residual_distribution(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """norm(max(0, p - q)) [V]: what the correction is drawn from after a rejection.

    If p and q agree to rounding (the residual has no mass) this returns p, which is then the
    exact distribution to sample from.
    """
    residual = torch.clamp(p - q, min=0.0)
    mass = residual.sum()
    if mass <= torch.finfo(residual.dtype).tiny:
        return p
    return residual / mass


def point_mass_residual(p: torch.Tensor, x: int) -> torch.Tensor:
    """norm(max(0, p - onehot(x))) [V]: the residual when q is a point mass on x."""
    return residual_distribution(p, torch.nn.functional.one_hot(torch.tensor(x, device=p.device), p.shape[-1]).to(p.dtype))


@dataclass(frozen=True)
class Verification:
    """The outcome of one verify() call (tensors stay on the model's device)."""

    n_accepted: int  # length of the accepted prefix, 0..k
    next_token: int  # correction (n < k) or bonus (n == k) token
    resampled: bool  # True when next_token came from the residual after a rejection
    p_x: torch.Tensor  # [k] p(x_i)
    q_x: torch.Tensor  # [k] q(x_i) (ones for point masses)
    ratio: torch.Tensor  # [k] min(1, p/q); greedy: 1.0 where x_i == argmax p else 0.0
    u: torch.Tensor | None  # [k] uniform draws (None when greedy)
    residual: torch.Tensor | None  # [V] the distribution next_token was drawn from after a rejection
    threshold: torch.Tensor | None = None  # [k] typical rule only: min(eps, delta * exp(-H(p_i)))


@dataclass(frozen=True)
class Acceptance:
    """Which acceptance rule verify() applies.

    exact:   the rule of Leviathan et al.: output distribution == the target's.
    typical: LOSSY typical acceptance (Medusa; vLLM's TypicalAcceptanceSampler): accept x_i when
             p(x_i) > min(eps, delta * exp(-H(p_i))); after a rejection take argmax p. Faster
             when the draft is poor, but the output no longer follows p exactly.
    """

    rule: str = "exact"  # "exact" | "typical"
    eps: float = 0.09  # typical: the hard threshold (vLLM's posterior_threshold)
    delta: float = 0.3  # typical: scale of the entropy-adaptive threshold (vLLM's posterior_alpha)

    def __post_init__(self) -> None:
        if self.rule not in ("exact", "typical"):
            raise ValueError(f"acceptance rule must be 'exact' or 'typical', got {self.rule!r}")
        if not (0 < self.eps <= 1 and 0 < self.delta <= 1):
            raise ValueError(f"typical acceptance needs 0 < eps <= 1 and 0 < delta <= 1, got eps={self.eps}, delta={self.delta}")

    @property
    def lossy(self) -> bool:
        return self.rule != "exact"


EXACT = Acceptance()


def typical_threshold(p: torch.Tensor, eps: float, delta: float) -> torch.Tensor:
    """min(eps, delta * exp(-H(p))) per row. [..., V] -> [...]"""
    entropy = -(p * torch.log(p.clamp_min(1e-30))).sum(dim=-1)
    return torch.clamp(delta * torch.exp(-entropy), max=eps)


def verify(
    p: torch.Tensor,
    q: torch.Tensor | None,
    drafts: torch.Tensor,
    *,
    generator: torch.Generator | None,
    greedy: bool = False,
    target_argmax: torch.Tensor | None = None,
    acceptance: Acceptance = EXACT,
) -> Verification:
    """Keep the longest valid prefix of the drafts and pick the next token.

    p:       [k+1, V] target distributions at the k draft positions and the bonus position
    q:       [k, V] draft distributions, or None for point-mass proposals (q(x_i) = 1)
    drafts:  [k] drafted token ids x_1..x_k
    greedy:  temperature 0: accept while x_i == argmax p_i, correct with argmax p
    target_argmax: [k+1] argmax of the target logits (greedy only; defaults to argmax p)
    acceptance: the exact rule (default) or lossy typical acceptance
    """
    k = drafts.shape[0]
    idx = torch.arange(k, device=p.device)
    p_x = p[idx, drafts]  # [k]
    q_x = q[idx, drafts] if q is not None else torch.ones_like(p_x)  # [k]

    if greedy:
        best = target_argmax if target_argmax is not None else p.argmax(dim=-1)  # [k+1]
        matches = (drafts == best[:k]).to(p.dtype)  # [k]
        n = _accepted_prefix(matches.bool())
        return Verification(n, int(best[n]), n < k, p_x, q_x, matches, None, None)

    if acceptance.rule == "typical":
        return _verify_typical(p, drafts, p_x, q_x, acceptance, generator)

    # 1. Accept x_i while u_i <= min(1, p(x_i) / q(x_i)).
    ratio = acceptance_ratio(p_x, q_x)  # [k]
    u = torch.rand(k, generator=generator, device=p.device)  # [k]
    n = _accepted_prefix(u <= ratio)
    if n == k:
        # 2a. Every draft accepted: sample the bonus token from p at position k+1.
        return Verification(n, sample(p[k], generator), False, p_x, q_x, ratio, u, None)
    # 2b. First rejection at n: sample the correction from norm(max(0, p - q)) there.
    if q is not None:
        residual = residual_distribution(p[n], q[n])
    else:
        residual = point_mass_residual(p[n], int(drafts[n]))
    return Verification(n, sample(residual, generator), True, p_x, q_x, ratio, u, residual)


def _verify_typical(p, drafts, p_x, q_x, acceptance: Acceptance, generator) -> Verification:
    """LOSSY: accept x_i while p(x_i) > min(eps, delta * exp(-H(p_i))); correct with argmax p."""
    k = drafts.shape[0]
    threshold = typical_threshold(p[:k], acceptance.eps, acceptance.delta)  # [k]
    accepted = p_x > threshold
    n = _accepted_prefix(accepted)
    if n == k:
        return Verification(n, sample(p[k], generator), False, p_x, q_x, accepted.to(p.dtype), None, None, threshold)
    return Verification(n, int(p[n].argmax()), True, p_x, q_x, accepted.to(p.dtype), None, None, threshold)


def _accepted_prefix(accepted: torch.Tensor) -> int:
    """Length of the leading run of True in a [k] bool tensor."""
    return int(accepted.long().cumprod(dim=0).sum())

