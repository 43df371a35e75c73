"""Statistical exactness in vLLM's style: samples of the rule converge to the target's p.

Each test also runs a deliberately wrong rule (resampling from p instead of the residual) and
checks that the same threshold catches it, so the test can fail.
"""

import pytest
import torch

import specviz.core.algorithm as algorithm
from specviz.core.algorithm import verify, verify_tree

N = 20_000
TV_OK = 0.02  # sampling noise at N = 20k over 8 tokens is ~0.005 (99.9%: 0.014)
N_WRONG = 4_000  # the controls whose wrong law is far (>= 0.19) from p: at 4k the noise is ~0.012 (99.9%: 0.03)


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
    first, second, bonus = [0] * V, [0] * V, [0] * V
    source = q if point_mass_draft is None else point_mass_draft
    every = torch.multinomial(source, n, replacement=True, generator=g).T  # [n, k]: x_i ~ q_i, all runs at once
    q_rule = None if point_mass_draft is not None else q
    for drafts, listed in zip(every, every.tolist()):
        ver = verify(p, q_rule, drafts, generator=g)
        n_acc = ver.n_accepted
        first[listed[0] if n_acc else ver.next_token] += 1
        if n_acc >= 1:
            second[listed[1] if n_acc > 1 else ver.next_token] += 1
        if n_acc == k:
            bonus[ver.next_token] += 1
    return torch.tensor(first, dtype=torch.float32), torch.tensor(second, dtype=torch.float32), torch.tensor(bonus, dtype=torch.float32)


def wrong_rule(monkeypatch):
    """Resample the correction from p instead of norm(max(0, p - q))."""
    monkeypatch.setattr(algorithm, "residual_distribution", lambda p, q: p)


@pytest.mark.parametrize("seed", [0, 1])
def test_draft_model_path_matches_p(seed):
    """N = 20000 over 8 tokens: exact TV ~ 0.005-0.006 (99.9%: 0.014), threshold 0.02 (seen 0.003 /
    0.008); the second token (~8200 / ~3200 runs) 0.009-0.011 (99.9%: 0.026) against 0.04. Detects a
    first-token deviation above 0.034: the wrong residual (0.067 / 0.046 away) fails it."""
    p, q = toy(seed)
    first, second, bonus = sample_rule(p, q, seed=seed)
    assert tv(first, p[0]) < TV_OK
    assert tv(second, p[1]) < 2 * TV_OK  # fewer samples: only steps that accepted x_1
    if bonus.sum() > 2000:
        assert tv(bonus, p[-1]) < 3 * TV_OK


def test_point_mass_path_matches_p_whatever_is_drafted():
    """N = 20000, 8 tokens: exact TV ~ 0.004 (99.9%: 0.011), threshold 0.02 (seen 0.004, skewed 0.003);
    second token (~5000 runs) 99.9%: 0.03 against 0.04. Detects a deviation above 0.031."""
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
    """The wrong law is 0.067 from p (exactly: 0.5 sum |min(p, q) - beta p|); at N = 20000 (noise
    0.005, 99.9%: 0.014) seen 0.069 > 0.06, three times the passing threshold."""
    p, q = toy(0)
    wrong_rule(monkeypatch)
    first, _, _ = sample_rule(p, q, seed=0)  # all N: the wrong law is only 0.067 from p
    assert tv(first, p[0]) > 3 * TV_OK


def test_wrong_point_mass_rule_fails_the_same_check(monkeypatch):
    """Drafting argmax p and resampling from p: the law is p(y) (1 - p(y)) = 0.189 from p; at
    N_WRONG = 4000 (noise 0.010, 99.9%: 0.025) seen 0.196 > 0.06 (margin 0.13)."""
    p, q = toy(3)
    monkeypatch.setattr(algorithm, "point_mass_residual", lambda p, x: p)
    likely = torch.zeros_like(q)
    likely[torch.arange(q.shape[0]), p[:-1].argmax(-1)] = 1.0  # drafts the most likely token
    first, _, _ = sample_rule(p, q, n=N_WRONG, seed=3, point_mass_draft=likely)
    assert tv(first, p[0]) > 3 * TV_OK


def test_accepting_everything_fails_the_same_check(monkeypatch):
    """Accepting every draft outputs q: TV(p, q) = 0.84; at N_WRONG = 4000 seen 0.843 > 0.06."""
    p, q = toy(1)
    monkeypatch.setattr(algorithm, "acceptance_ratio", lambda p_x, q_x: torch.ones_like(p_x))
    first, _, _ = sample_rule(p, q, n=N_WRONG, seed=1)
    assert tv(first, p[0]) > 3 * TV_OK


# -- edges: u = 0 and draft ids outside the vocabulary (found by vLLM's rejection-sampler tests) --


def zero_uniforms(monkeypatch):
    """torch.rand returns exactly 0.0 about once in 2^24 draws: make every draw that one."""
    monkeypatch.setattr(torch, "rand", lambda *size, generator=None, device=None, **kw: torch.zeros(*size, device=device))


def test_a_zero_uniform_never_accepts_a_draft_the_target_rules_out(monkeypatch):
    zero_uniforms(monkeypatch)
    g = torch.Generator().manual_seed(0)
    p = torch.tensor([[0.0, 0.6, 0.4], [0.2, 0.3, 0.5]])  # [k+1, V]: p(x_1 = 0) = 0
    q = torch.tensor([[0.9, 0.05, 0.05]])  # [k, V]: the draft liked token 0
    for draft_q in (q, None):  # a sampled draft and a point mass
        ver = verify(p, draft_q, torch.tensor([0]), generator=g)
        assert float(ver.u[0]) == 0.0 and float(ver.ratio[0]) == 0.0
        assert ver.n_accepted == 0 and ver.resampled and ver.next_token in (1, 2)
    ver = verify(torch.tensor([[1e-6, 0.6, 0.4 - 1e-6], [0.2, 0.3, 0.5]]), None, torch.tensor([0]), generator=g)
    assert ver.n_accepted == 1  # any ratio above 0 still accepts at u = 0


def test_a_zero_uniform_never_accepts_a_tree_node_the_target_rules_out(monkeypatch):
    g = torch.Generator().manual_seed(0)
    p = torch.tensor([[0.0, 0.6, 0.4], [0.2, 0.3, 0.5], [0.2, 0.3, 0.5]])  # [n+1, V]: root row gives token 0 p = 0
    tokens, parents = torch.tensor([0, 1]), torch.tensor([-1, -1])  # two children of the root
    q = torch.tensor([[0.9, 0.1, 0.0], [0.9, 0.1, 0.0]])  # siblings share their parent's q
    ver = verify_tree(p, None, tokens, parents, generator=g, uniforms=[0.0, 0.99])
    assert ver.verdict == ("rejected", "rejected") and ver.path == () and ver.next_token == 2
    zero_uniforms(monkeypatch)
    for draft_q in (q, None):
        ver = verify_tree(p, draft_q, tokens, parents, generator=g)
        assert ver.u[0] == 0.0 and ver.ratio[0] == 0.0 and ver.verdict[0] == "rejected"
        assert ver.path == (1,)  # token 1 (p = 0.6 > 0) is accepted at u = 0


@pytest.mark.parametrize("bad", [-1, 3, 1 << 40])
def test_draft_ids_outside_the_vocabulary_are_refused(bad):
    g = torch.Generator().manual_seed(0)
    p = torch.tensor([[0.2, 0.3, 0.5], [0.2, 0.3, 0.5]])  # V = 3
    for kw in ({}, {"greedy": True}):
        with pytest.raises(ValueError, match=r"drafted token ids must be in \[0, 3\).*" + str(bad)):
            verify(p, None, torch.tensor([bad]), generator=g, **kw)
    with pytest.raises(ValueError, match=r"drafted token ids must be in \[0, 3\)"):
        verify(p, torch.full((1, 3), 1 / 3), torch.tensor([bad]), generator=g)
    with pytest.raises(ValueError, match=r"drafted token ids must be in \[0, 3\)"):
        verify_tree(p, None, torch.tensor([bad]), torch.tensor([-1]), generator=g)
