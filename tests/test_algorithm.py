"""The rule on hand-written distributions: exact expected outcomes."""

import pytest
import torch

import specviz.core.algorithm as algorithm
from specviz.core.algorithm import acceptance_ratio, logits_to_probs, point_mass_residual, residual_distribution, verify
from specviz.core.records import Sampling


def rows(*dists):
    return torch.tensor(dists, dtype=torch.float32)


def test_acceptance_ratio_is_min_1_p_over_q():
    p = torch.tensor([0.2, 0.5, 0.0])
    q = torch.tensor([0.4, 0.25, 0.3])
    assert torch.allclose(acceptance_ratio(p, q), torch.tensor([0.5, 1.0, 0.0]))


def test_residual_is_normalised_positive_part():
    p = torch.tensor([0.5, 0.3, 0.2, 0.0])
    q = torch.tensor([0.2, 0.5, 0.2, 0.1])
    # max(0, p - q) = [0.3, 0, 0, 0] -> [1, 0, 0, 0]
    assert torch.allclose(residual_distribution(p, q), torch.tensor([1.0, 0.0, 0.0, 0.0]))
    p = torch.tensor([0.4, 0.4, 0.2])
    q = torch.tensor([0.2, 0.3, 0.5])
    assert torch.allclose(residual_distribution(p, q), torch.tensor([2 / 3, 1 / 3, 0.0]))


def test_residual_of_identical_distributions_falls_back_to_p():
    p = torch.tensor([0.25, 0.75])
    assert torch.allclose(residual_distribution(p, p.clone()), p)


def test_point_mass_residual_removes_the_drafted_token():
    p = torch.tensor([0.5, 0.25, 0.25])
    assert torch.allclose(point_mass_residual(p, 0), torch.tensor([0.0, 0.5, 0.5]))


def test_greedy_accepts_matching_prefix_and_corrects_with_argmax():
    p = rows([0.1, 0.7, 0.2], [0.6, 0.3, 0.1], [0.2, 0.2, 0.6], [0.1, 0.1, 0.8])  # argmax 1, 0, 2, 2
    ver = verify(p, None, torch.tensor([1, 0, 1]), generator=None, greedy=True)
    assert (ver.n_accepted, ver.next_token, ver.resampled) == (2, 2, True)
    ver = verify(p, None, torch.tensor([1, 0, 2]), generator=None, greedy=True)
    assert (ver.n_accepted, ver.next_token, ver.resampled) == (3, 2, False)  # bonus = argmax p[3]
    ver = verify(p, None, torch.tensor([2, 0, 2]), generator=None, greedy=True)
    assert (ver.n_accepted, ver.next_token) == (0, 1)


def test_greedy_uses_target_logits_argmax_when_given():
    p = rows([0.5, 0.5], [0.5, 0.5])
    ver = verify(p, None, torch.tensor([1]), generator=None, greedy=True, target_argmax=torch.tensor([1, 0]))
    assert (ver.n_accepted, ver.next_token) == (1, 0)


def test_certain_acceptance_and_certain_rejection():
    g = torch.Generator().manual_seed(0)
    # p(x) >= q(x) at every drafted position: every draft accepted, bonus from p[k] (a point mass)
    p = rows([0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [1.0, 0.0, 0.0])
    q = rows([0.5, 0.5, 0.0], [0.0, 0.5, 0.5])
    for _ in range(20):
        ver = verify(p, q, torch.tensor([1, 2]), generator=g)
        assert (ver.n_accepted, ver.next_token, ver.resampled) == (2, 0, False)
    # p(x_1) = 0: always rejected; the residual max(0, p - q) = [0, 0, 0.5] -> token 2
    p = rows([0.0, 0.0, 1.0], [1.0, 0.0, 0.0])
    q = rows([0.0, 1.0, 0.0])
    for _ in range(20):
        ver = verify(p, q, torch.tensor([1]), generator=g)
        assert (ver.n_accepted, ver.next_token, ver.resampled) == (0, 2, True)
        assert torch.allclose(ver.residual, torch.tensor([0.0, 0.0, 1.0]))


def test_point_mass_accepts_with_probability_p():
    """N = 20000: the rate's sd is 0.0032 (99.9%: |error| < 0.011), tolerance 0.015; detects an
    acceptance probability off by more than 0.026 from p(x) = 0.3."""
    g = torch.Generator().manual_seed(1)
    p = rows([0.3, 0.7], [0.5, 0.5])
    n = 20000
    acc = sum(verify(p, None, torch.tensor([0]), generator=g).n_accepted for _ in range(n)) / n
    assert abs(acc - 0.3) < 0.015


def test_ratio_and_u_are_recorded():
    g = torch.Generator().manual_seed(0)
    p = rows([0.2, 0.8], [0.5, 0.5])
    q = rows([0.4, 0.6])
    ver = verify(p, q, torch.tensor([0]), generator=g)
    assert ver.ratio.tolist() == pytest.approx([0.5])
    assert ver.u is not None and 0 <= float(ver.u[0]) < 1
    assert ver.n_accepted == int(float(ver.u[0]) <= 0.5)


def test_temperature_top_k_top_p():
    logits = torch.tensor([2.0, 1.0, 0.0, -1.0])
    assert torch.allclose(logits_to_probs(logits, Sampling(1.0)), torch.softmax(logits, -1))
    assert torch.allclose(logits_to_probs(logits, Sampling(0.5)), torch.softmax(logits / 0.5, -1))
    top2 = logits_to_probs(logits, Sampling(1.0, top_k=2))
    assert top2[2:].sum() == 0 and torch.allclose(top2[:2], torch.softmax(logits[:2], -1))
    sm = torch.softmax(logits, -1)  # [0.644, 0.237, 0.087, 0.032]
    nucleus = logits_to_probs(logits, Sampling(1.0, top_p=0.8))  # 0.644 < 0.8 -> keep 2 tokens
    assert (nucleus > 0).tolist() == [True, True, False, False]
    assert torch.allclose(nucleus[:2], sm[:2] / sm[:2].sum())
    assert (logits_to_probs(logits, Sampling(1.0, top_p=0.5)) > 0).tolist() == [True, False, False, False]
    assert torch.allclose(logits_to_probs(logits, Sampling(0.0)), sm)  # greedy shows plain softmax


@pytest.mark.parametrize(
    "kwargs",
    [dict(temperature=-1), dict(temperature=float("nan")), dict(top_p=0.0), dict(top_p=1.5), dict(top_k=-2)],
)
def test_bad_sampling_settings_raise_helpful_errors(kwargs):
    with pytest.raises(ValueError, match="must"):
        Sampling(**kwargs)



def test_fast_argmax_breaks_ties_like_tensor_argmax():
    """The engine's argmax (max(-1).indices) picks the first maximal index, as Tensor.argmax does."""
    g = torch.Generator().manual_seed(0)
    for V in (5, 1000, 262144):
        x = torch.randint(0, 3, (4, V), generator=g).float()  # ties everywhere
        assert torch.equal(algorithm.argmax(x), x.argmax(dim=-1))
        assert torch.equal(algorithm.argmax(x[0]), x[0].argmax())
    y = torch.zeros(2, 10)
    y[:, 3] = y[:, 7] = 1.0
    assert algorithm.argmax(y).tolist() == [3, 3]


@pytest.mark.parametrize("shape", [(262_144,), (3, 262_144), (2, 100_003), (40,)])
def test_top_n_equals_topk(shape):
    from specviz.core.algorithm import top_n

    g = torch.Generator().manual_seed(sum(shape))
    x = torch.softmax(torch.randn(*shape, generator=g) * 4, dim=-1)
    x[..., 7] = float("-inf") if len(shape) > 1 else x[..., 7]
    vals, ids = top_n(x, 10)
    ref = torch.topk(x, min(10, shape[-1]), dim=-1)
    assert torch.equal(vals, ref.values) and torch.equal(ids, ref.indices)
    assert torch.equal(x.gather(-1, ids), vals)


def test_sample_draws_each_id_with_its_weight_and_never_a_zero():
    """The inverse-CDF sampler: over a vocabulary spanning several blocks, with zeros (top-k, the
    residual) and weights not normalized, each id comes up at its share (a chi-square test, which
    the same draws shifted by one id fail) and an id of weight 0 never does."""
    from specviz.core import algorithm

    g = torch.Generator().manual_seed(7)
    V = 3 * algorithm.SAMPLE_BLOCK + 37  # blocks, and a partial last one
    w = torch.softmax(torch.randn(V, generator=g) * 1.5, -1) * 3.0  # total 3: not normalized
    w[::5] = 0.0
    w[algorithm.SAMPLE_BLOCK - 1] = 0.0  # a block's last weight
    n = 60_000
    counts = torch.bincount(torch.tensor([algorithm.sample(w, g) for _ in range(n)]), minlength=V).double()
    assert counts[w == 0].sum() == 0
    expected = n * w.double() / w.double().sum()
    keep = expected > 5  # chi-square over the ids with enough expected draws, the rest pooled
    def chi2(c):
        pooled = torch.cat([c[keep], c[~keep].sum().view(1)]), torch.cat([expected[keep], expected[~keep].sum().view(1)])
        return float(((pooled[0] - pooled[1]) ** 2 / pooled[1]).sum()), int(keep.sum())
    stat, dof = chi2(counts)
    assert stat < dof + 5 * dof ** 0.5, (stat, dof)  # about 5 sigma above the mean
    shifted, _ = chi2(torch.roll(counts, 1))
    assert shifted > dof + 5 * dof ** 0.5  # a sampler off by one id fails the same test
    assert algorithm.sample(torch.tensor([0.0, 0.0, 2.0]), g) == 2 and algorithm.sample(torch.tensor([5.0]), g) == 0
    with pytest.raises(ValueError, match="no positive weight"):
        algorithm.sample(torch.zeros(4), g)
