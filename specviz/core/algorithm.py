"""The acceptance-and-resampling rule of speculative sampling, as pure tensor functions.

Notation follows Leviathan, Kalman & Matias (2023): ``p`` is the target's distribution, ``q`` the
draft's (both after the same temperature / top-k / top-p), ``x_i`` the i-th drafted token,
``u_i ~ U(0, 1)``. Nothing here touches a model: every function maps tensors to tensors, so the
rule is tested on hand-written distributions and reused by the engine, the Learn tab and the
statistical exactness tests. What the rule implies for speed (expected tokens per step, expected
speedup) is in :mod:`specviz.analysis.theory`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .records import Deferred, Lazy, LazyFields, Sampling

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


SAMPLE_BLOCK = 512  # the inverse-CDF sampler's first level: sums of this many probabilities


def sample(probs: torch.Tensor, generator: torch.Generator | None) -> int:
    """Draw one token id from a distribution [V] (weights >= 0, not necessarily normalized: the
    residual max(0, p - q) is drawn as it is), by inverse transform sampling: u ~ U(0, total),
    the id whose cumulative weight first exceeds u. In two levels, sums of SAMPLE_BLOCK weights
    and then one block's, both accumulated in float64, so a 262k vocabulary costs one pass over
    its weights and one uniform draw (``torch.multinomial`` draws an exponential per token: 5 ms
    against 0.1 ms on a Zen 4 EPYC). A weight of 0 is never drawn."""
    V = probs.shape[-1]
    n = -(-V // SAMPLE_BLOCK)
    blocks = probs.new_zeros(n * SAMPLE_BLOCK)
    blocks[:V] = probs
    blocks = blocks.view(n, SAMPLE_BLOCK)  # [n, B]
    ends = torch.cumsum(blocks.sum(1, dtype=torch.float64), 0)  # [n]: cumulative weight to each block's end
    total = float(ends[-1])
    if not total > 0:
        raise ValueError("cannot sample from a distribution with no positive weight")
    u = float(torch.rand(1, generator=generator, dtype=torch.float64, device=probs.device)) * total  # [0, total)
    b = min(int((ends <= u).sum()), n - 1)  # the first block whose end exceeds u
    u -= float(ends[b - 1]) if b else 0.0
    inside = torch.cumsum(blocks[b], 0, dtype=torch.float64)  # [B]
    i = int((inside <= u).sum())
    if i >= SAMPLE_BLOCK or blocks[b, i] <= 0:  # u past the block's own rounding of its sum: its last weight > 0
        i = int(torch.nonzero(blocks[b] > 0)[-1])
    return b * SAMPLE_BLOCK + i


def argmax(logits: torch.Tensor) -> torch.Tensor:
    """argmax over the last dimension, the first index on ties (as ``Tensor.argmax``). A float32
    CPU tensor goes through NumPy's argmax, the same index (the first largest; the first NaN if
    any) about 12x faster over a 262k vocabulary (19 against 220 us, Zen 4 EPYC: torch's
    reduction carries an index per lane); ``max(-1).indices`` elsewhere."""
    if logits.device.type == "cpu" and logits.dtype == torch.float32 and not logits.requires_grad and logits.dim():
        return torch.as_tensor(logits.numpy().argmax(-1))  # a 0-d or [R] int64
    return logits.max(dim=-1).indices


TOP_BLOCK = 512  # top_n's block width


def top_n(x: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The n largest values of each row of ``x`` [V] or [R, V] and their indices, largest first,
    as ``torch.topk(x, n)`` gives them, about 20x faster over a 262k vocabulary: the n largest
    values of a row lie in the n blocks of ``TOP_BLOCK`` entries with the largest maxima, so one
    max per block and two small top-n's replace a selection over the whole row. Equal values may
    come in another index order than topk's."""
    V = x.shape[-1]
    n = min(n, V)
    if V < 8 * TOP_BLOCK * max(n, 1):
        return torch.topk(x, n, dim=-1)
    rows = x.reshape(-1, V)  # [R, V]
    nb = -(-V // TOP_BLOCK)
    if nb * TOP_BLOCK != V:
        rows = torch.nn.functional.pad(rows, (0, nb * TOP_BLOCK - V), value=float("-inf"))
    blocks = rows.view(rows.shape[0], nb, TOP_BLOCK)  # [R, nb, B]
    best = torch.topk(blocks.amax(-1), n, dim=-1).indices  # [R, n] the blocks holding the n largest
    cand = torch.gather(blocks, 1, best[..., None].expand(-1, -1, TOP_BLOCK)).reshape(rows.shape[0], -1)  # [R, n*B]
    vals, pos = torch.topk(cand, n, dim=-1)  # [R, n]
    ids = best.gather(1, torch.div(pos, TOP_BLOCK, rounding_mode="floor")) * TOP_BLOCK + pos % TOP_BLOCK
    return vals.reshape(*x.shape[:-1], n), ids.reshape(*x.shape[:-1], n)


def acceptance_ratio(p_x: torch.Tensor, q_x: torch.Tensor) -> torch.Tensor:
    """min(1, p(x) / q(x)) per drafted token. [k], [k] -> [k]."""
    return torch.clamp(p_x / q_x.clamp_min(torch.finfo(q_x.dtype).tiny), max=1.0)


def accepts(u: torch.Tensor, ratio: torch.Tensor) -> torch.Tensor:
    """u_i <= min(1, p(x_i) / q(x_i)), never at ratio 0: ``torch.rand`` returns exactly 0.0 about
    once in 2^24 draws, and a draft the target gives p = 0 must still be rejected. [k], [k] -> [k] bool"""
    return (u <= ratio) & (ratio > 0)


def check_draft_ids(tokens: torch.Tensor, vocab: int) -> None:
    """ValueError unless every drafted id is in [0, vocab): a negative id would silently read p
    from the last column, one past the end would fail deep inside indexing."""
    ids = tokens.tolist()
    bad = [t for t in ids if not 0 <= t < vocab]
    if bad:
        raise ValueError(
            f"drafted token ids must be in [0, {vocab}) (the target's vocabulary), got {bad[:5]}"
            f"{' ...' if len(bad) > 5 else ''}: the proposer drafted ids the target does not have"
        )


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
class Verification(LazyFields):
    """The outcome of one verify() call (tensors stay on the model's device).

    Under greedy p_x and q_x may be computed on first read (the decision needs argmax only)."""

    n_accepted: int  # length of the accepted prefix, 0..k
    next_token: int  # correction (n < k) or bonus (n == k) token
    resampled: bool  # True when next_token came from the residual after a rejection
    p_x: torch.Tensor = Lazy()  # [k] p(x_i)
    q_x: torch.Tensor = Lazy()  # [k] q(x_i) (ones for point masses)
    ratio: torch.Tensor = Lazy()  # [k] min(1, p/q); greedy: 1.0 where x_i == argmax p else 0.0
    u: torch.Tensor | None = Lazy()  # [k] uniform draws (None when greedy)
    residual: torch.Tensor | None = Lazy()  # [V] the distribution next_token was drawn from after a rejection
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
    check_draft_ids(drafts, _width(p))
    idx = torch.arange(k, device=drafts.device)
    if greedy and (_is_lazy(p) or _is_lazy(q)):
        # p and / or q not computed yet (objects with .get()): the decision needs argmax only,
        # so p(x_i) and q(x_i) are computed when a record or hook reads them.
        best = target_argmax if target_argmax is not None else _get(p).argmax(dim=-1)  # [k+1]
        matches = (drafts == best[:k])  # [k]
        n = _accepted_prefix(matches)
        p_x = Deferred(lambda: _get(p)[idx, drafts])  # [k]
        q_x = Deferred(lambda: _get(q)[idx, drafts] if q is not None else torch.ones(k, dtype=_get(p).dtype, device=drafts.device))
        return Verification(n, int(best[n]), n < k, p_x, q_x, matches.to(torch.float32 if _is_lazy(p) else p.dtype), None, None)
    p, q = _get(p), _get(q)
    p_x = p[idx, drafts]  # [k]
    q_x = q[idx, drafts] if q is not None else torch.ones_like(p_x)  # [k]

    if greedy:
        best = target_argmax if target_argmax is not None else p.argmax(dim=-1)  # [k+1]
        matches = (drafts == best[:k]).to(p.dtype)  # [k]
        n = _accepted_prefix(matches.bool())
        return Verification(n, int(best[n]), n < k, p_x, q_x, matches, None, None)

    if acceptance.rule == "typical":
        return _verify_typical(p, drafts, p_x, q_x, acceptance, generator)

    # 1. Accept x_i while u_i <= min(1, p(x_i) / q(x_i)) (never at ratio 0).
    ratio = acceptance_ratio(p_x, q_x)  # [k]
    u = torch.rand(k, generator=generator, device=p.device)  # [k]
    n = _accepted_prefix(accepts(u, ratio))
    if n == k:
        # 2a. Every draft accepted: sample the bonus token from p at position k+1.
        return Verification(n, sample(p[k], generator), False, p_x, q_x, ratio, u, None)
    # 2b. First rejection at n: sample the correction from norm(max(0, p - q)) there.
    if q is not None:
        residual = residual_distribution(p[n], q[n])
    else:
        residual = point_mass_residual(p[n], int(drafts[n]))
    return Verification(n, sample(residual, generator), True, p_x, q_x, ratio, u, residual)


def _is_lazy(x) -> bool:
    return x is not None and not isinstance(x, torch.Tensor)


def _get(x):
    """A tensor, None, or a lazily computed tensor (anything with .get())."""
    return x.get() if _is_lazy(x) else x


def _width(p) -> int:
    """V, the last dimension of p: a tensor's, a lazy p's ``shape`` when it has one, else computed."""
    shape = getattr(p, "shape", None)
    return int(shape[-1]) if shape is not None else int(_get(p).shape[-1])


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


# -- token trees (SpecInfer 2024, EAGLE-2 2024; RSD: Jeon et al. 2024) ---------------------------


def check_tree(tokens: torch.Tensor, parents: torch.Tensor) -> list[list[int]]:
    """Validate a token tree and return its children lists: ``children[v + 1]`` are node v's
    children in order (``children[0]``: the root's). Raises ValueError for a parent that does not
    come before its child or for two siblings with the same token (the proposer must merge them).

    tokens: [n] long, parents: [n] long (-1 = a child of the root)
    """
    n = int(tokens.shape[0])
    if parents.shape != tokens.shape:
        raise ValueError(f"a tree needs one parent per node: {n} tokens but parents of shape {tuple(parents.shape)}")
    par, tok = parents.tolist(), tokens.tolist()
    children: list[list[int]] = [[] for _ in range(n + 1)]
    seen: set[tuple[int, int]] = set()
    for i, (a, x) in enumerate(zip(par, tok)):
        if not -1 <= a < i:
            raise ValueError(f"tree node {i} has parent {a}: parents must be -1 (the root) or an earlier node")
        if (a, x) in seen:
            raise ValueError(
                f"tree node {i} repeats token {x} among the children of node {a}: "
                "a proposer must merge duplicate siblings into one node"
            )
        seen.add((a, x))
        children[a + 1].append(i)
    return children


def tree_depths(parents: torch.Tensor) -> list[int]:
    """Depth of each node (1 for the root's children). [n] long -> n ints."""
    depth: list[int] = []
    for a in parents.tolist():
        depth.append(1 if a < 0 else depth[a] + 1)
    return depth


def tree_path(parents: torch.Tensor, node: int) -> list[int]:
    """Node indices from the root's child down to ``node`` (inclusive)."""
    par = parents.tolist()
    path = []
    while node >= 0:
        path.append(node)
        node = par[node]
    return path[::-1]


def sibling_residual(r: torch.Tensor, q_j: torch.Tensor) -> torch.Tensor:
    """r_{j+1} = norm(max(0, r_j - q_j)) [V]: what is left of the target after child c_j failed.

    With a point mass q_j = onehot(c_j) this is r_j with c_j removed, renormalised.
    """
    return residual_distribution(r, q_j)


@dataclass(frozen=True)
class TreeVerification(LazyFields):
    """The outcome of one verify_tree() call; per-node lists hold None where a node was never tried.

    Under greedy p_x may be computed on first read (the walk needs argmax only)."""

    path: tuple[int, ...]  # accepted node indices, from the root's child down
    next_token: int  # correction (no child of the last accepted node kept) or bonus (a leaf kept)
    resampled: bool  # True when next_token came from the last residual
    p_x: torch.Tensor = Lazy()  # [n] p(x) at each node's parent
    q_x: torch.Tensor = Lazy()  # [n] q(x) at each node's parent (ones for point masses)
    r_x: tuple[float | None, ...] = Lazy()  # the residual's probability of x when x was tried
    ratio: tuple[float | None, ...] = Lazy()  # acceptance probability used (greedy: 1.0 / 0.0)
    u: tuple[float | None, ...] = Lazy()  # uniform draws (None when greedy or not tried)
    residual_mass: tuple[float | None, ...] = Lazy()  # after a rejection: mass of p not yet ruled out
    verdict: tuple[str, ...] = Lazy()  # "accepted" | "rejected" | "not reached"
    residual: torch.Tensor | None = Lazy()  # [V] what next_token was drawn from after rejections

    @property
    def n_accepted(self) -> int:
        return len(self.path)


def verify_tree(
    p: torch.Tensor,
    q: torch.Tensor | None,
    tokens: torch.Tensor,
    parents: torch.Tensor,
    *,
    generator: torch.Generator | None,
    greedy: bool = False,
    target_argmax: torch.Tensor | None = None,
    uniforms: list[float] | None = None,
) -> TreeVerification:
    """Walk a token tree from the root, keeping one child per depth, and pick the next token.

    p:       [n+1, V] target distributions: row 0 after the root (the last committed token),
             row i+1 after node i (greedy: or an object with .get() and .shape, computed only
             when p_x is read)
    q:       [n, V] the draft distribution each node was sampled from (its parent's; siblings
             share it), or None when nodes are point masses (n-gram, top-w, argmax drafts)
    tokens:  [n] node token ids; parents: [n] parent indices (-1 = root), parent < child
    greedy:  temperature 0: follow the child equal to argmax p; correct with argmax p
    target_argmax: [n+1] argmax of the target logits (greedy only; defaults to argmax p)
    uniforms: the u draws to use, in the order children are tried (toy examples and tests);
             default: drawn from ``generator``

    Sampling, at a node v with children c_1..c_m (r_1 = p_v):
      sampled children (drawn from q WITHOUT replacement; RSD, Jeon et al. 2024; SpecInfer's
      multi-step speculative sampling with distinct candidates):
        1. accept c_j with probability min(1, r_j(c_j) / q_j(c_j)), q_1 = q;
        2. after a rejection r_{j+1} = norm(max(0, r_j - q_j)) and q_{j+1} = q_j without c_j,
           renormalised;
      point-mass children (q = None): the same steps with q_j = onehot(c_j): accept c_j with
      probability r_j(c_j); after a rejection r_{j+1} = r_j without c_j, renormalised.
      3. a child kept: move to it and repeat; no child kept: sample the correction from r_{m+1};
         a leaf kept: sample the bonus token from p at that leaf.
    Either way every committed token follows p exactly.
    """
    children = check_tree(tokens, parents)
    n, V = int(tokens.shape[0]), _width(p)
    check_draft_ids(tokens, V)
    if p.shape[0] != n + 1:
        raise ValueError(f"verify_tree needs n+1 = {n + 1} rows of p (root + one per node), got {p.shape[0]}")
    if _is_lazy(p) and not greedy:
        p = _get(p)
    tok = tokens.tolist()
    rows = (parents + 1).clamp_min(0)  # [n] row of p each node is judged under (its parent's)
    p_x = Deferred(lambda: _get(p)[rows, tokens]) if _is_lazy(p) else p[rows, tokens]  # [n]
    ones = torch.ones(n, dtype=p.dtype if isinstance(p, torch.Tensor) else torch.float32, device=tokens.device)  # [n]
    q_x = q[torch.arange(n, device=q.device), tokens] if q is not None else ones  # [n]
    r_x: list[float | None] = [None] * n
    ratio: list[float | None] = [None] * n
    u_list: list[float | None] = [None] * n
    mass_left: list[float | None] = [None] * n
    verdict = ["not reached"] * n
    path: list[int] = []
    node = -1  # the root
    draws = iter(uniforms) if uniforms is not None else None
    if greedy:
        best = (target_argmax if target_argmax is not None else _get(p).argmax(dim=-1)).tolist()  # [n+1]
        while True:
            want = best[node + 1]
            kept = None
            for c in children[node + 1]:
                hit = tok[c] == want
                ratio[c], verdict[c] = (1.0, "accepted") if hit else (0.0, "rejected")
                kept = c if hit else kept
            if kept is None:
                return TreeVerification(tuple(path), want, bool(children[node + 1]), p_x, q_x, tuple(r_x),
                                        tuple(ratio), tuple(u_list), tuple(mass_left), tuple(verdict), None)
            path.append(kept)
            node = kept
    while True:
        kids = children[node + 1]
        if not kids:
            # 3b. A leaf was kept (or the tree is empty): the bonus token comes from p there.
            return TreeVerification(tuple(path), sample(p[node + 1], generator), False, p_x, q_x, tuple(r_x),
                                    tuple(ratio), tuple(u_list), tuple(mass_left), tuple(verdict), None)
        r = p[node + 1]  # [V] r_1 = p at v
        q_j = q[kids[0]] if q is not None else None  # [V] the draft's distribution at v
        mass = 1.0
        kept = None
        for c in kids:
            x = tok[c]
            point = torch.nn.functional.one_hot(torch.tensor(x, device=p.device), V).to(p.dtype) if q_j is None else q_j  # [V]
            a = float(torch.clamp(r[x] / point[x].clamp_min(torch.finfo(p.dtype).tiny), max=1.0))
            u = float(next(draws)) if draws is not None else float(torch.rand(1, generator=generator, device=p.device))
            r_x[c], ratio[c], u_list[c] = float(r[x]), a, u
            # 1. Accept c_j with probability min(1, r_j(c_j) / q_j(c_j)) (never at ratio 0).
            if u <= a and a > 0:
                verdict[c] = "accepted"
                kept = c
                break
            # 2. Rejected: r_{j+1} = norm(max(0, r_j - q_j)); sampled: q_{j+1} = q_j without c_j.
            verdict[c] = "rejected"
            mass *= float(torch.clamp(r - point, min=0.0).sum())
            mass_left[c] = mass
            r = sibling_residual(r, point)
            if q_j is not None:
                q_j = q_j.clone()
                q_j[x] = 0.0
                total = q_j.sum()
                q_j = q_j / total if total > 0 else q_j
        if kept is None:
            # 3a. No child kept: the correction comes from the last residual.
            return TreeVerification(tuple(path), sample(r, generator), True, p_x, q_x, tuple(r_x),
                                    tuple(ratio), tuple(u_list), tuple(mass_left), tuple(verdict), r)
        path.append(kept)
        node = kept
