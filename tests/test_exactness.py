"""Statistical exactness in vLLM's style: samples of the rule converge to the target's p.

Each test also runs a deliberately wrong rule (resampling from p instead of the residual) and
checks that the same threshold catches it, so the test can fail.
"""

import pytest
import torch

import specviz.core.algorithm as algorithm
from specviz.core.algorithm import verify

N = 20_000
TV_OK = 0.02  # sampling noise at N = 20k over 8 tokens is ~0.01


def tv(counts: torch.Tensor, p: torch.Tensor) -> float:
    return 0.5 * float((counts / counts.sum() - p).abs().sum())


def toy(seed: int, vocab: int = 8, k: int = 3, sharp: float = 2.0):
    g = torch.Generator().manual_seed(seed)
    p = torch.softmax(torch.randn(k + 1, vocab, generator=g) * sharp, -1)  # [k+1, V]
    q = torch.softmax(torch.randn(k, vocab, generator=g) * sharp, -1)  # [k, V]
    return p, q


def sample_rule(p, q, n=N, seed=0, point_mass_draft=None):
    """Run the rule n times; return counts of the first token, of the second token among steps
    that accepted x_1, and of the bonus token among steps that accepted everything."""
    g = torch.Generator().manual_seed(seed)
    k, V = p.shape[0] - 1, p.shape[1]
    first, second, bonus = torch.zeros(V), torch.zeros(V), torch.zeros(V)
    source = q if point_mass_draft is None else point_mass_draft
    for _ in range(n):
        drafts = torch.multinomial(source, 1, generator=g).flatten()  # [k] x_i ~ q_i
        ver = verify(p, None if point_mass_draft is not None else q, drafts, generator=g)
        out = drafts[: ver.n_accepted].tolist() + [ver.next_token]
        first[out[0]] += 1
        if ver.n_accepted >= 1:
            second[out[1]] += 1
        if ver.n_accepted == k:
            bonus[ver.next_token] += 1
    return first, second, bonus


def wrong_rule(monkeypatch):
    """Resample the correction from p instead of norm(max(0, p - q))."""
    monkeypatch.setattr(algorithm, "residual_distribution", lambda p, q: p)


@pytest.mark.parametrize("seed", [0, 1])
def test_draft_model_path_matches_p(seed):
    p, q = toy(seed)
    first, second, bonus = sample_rule(p, q, seed=seed)
    assert tv(first, p[0]) < TV_OK
    assert tv(second, p[1]) < 2 * TV_OK  # fewer samples: only steps that accepted x_1
    if bonus.sum() > 2000:
        assert tv(bonus, p[-1]) < 3 * TV_OK


def test_point_mass_path_matches_p_whatever_is_drafted():
    p, q = toy(3)
    # the proposer's choice may follow any distribution; with q = point mass the output is still p
    first, second, _ = sample_rule(p, q, seed=3, point_mass_draft=q)
    assert tv(first, p[0]) < TV_OK
    assert tv(second, p[1]) < 2 * TV_OK
    skewed = torch.zeros_like(q)
    skewed[:, 0] = 1.0  # always drafts token 0
    first, _, _ = sample_rule(p, q, seed=4, point_mass_draft=skewed)
    assert tv(first, p[0]) < TV_OK


def test_wrong_rule_fails_the_same_check(monkeypatch):
    p, q = toy(0)
    wrong_rule(monkeypatch)
    first, _, _ = sample_rule(p, q, seed=0)
    assert tv(first, p[0]) > 3 * TV_OK


def test_wrong_point_mass_rule_fails_the_same_check(monkeypatch):
    p, q = toy(3)
    monkeypatch.setattr(algorithm, "point_mass_residual", lambda p, x: p)
    likely = torch.zeros_like(q)
    likely[torch.arange(q.shape[0]), p[:-1].argmax(-1)] = 1.0  # drafts the most likely token
    first, _, _ = sample_rule(p, q, seed=3, point_mass_draft=likely)
    assert tv(first, p[0]) > 3 * TV_OK


def test_accepting_everything_fails_the_same_check(monkeypatch):
    p, q = toy(1)
    monkeypatch.setattr(algorithm, "acceptance_ratio", lambda p_x, q_x: torch.ones_like(p_x))
    first, _, _ = sample_rule(p, q, seed=1)
    assert tv(first, p[0]) > 3 * TV_OK
