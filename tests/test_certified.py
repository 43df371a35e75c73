"""Speculative sampling on bounded logits (specviz.core.certified): every decision is the exact
rule's for the same uniform draws, the tokens follow p (statistically, in test_exactness's style,
with a wrong rule that fails the same check), and a sampled lean session runs it through a screen."""

from __future__ import annotations

import math

import pytest
import torch

from specviz import Hook, Sampling, SpeculativeDecoder, tuning
from specviz.bench import kernel_words
from specviz.core import certified
from specviz.core.algorithm import verify
from specviz.proposers import DraftModel, NGram
from specviz.runtime import argmax_head, sampled_head
from tests.support.kernel import NEEDS_OP

N = 20_000
TV_OK = 0.02  # as test_exactness: noise at N = 20k over 16 tokens ~0.008 (99.9%: 0.02)


class Bounded:
    """A step's logits [n, V] known within b per row, as a screen gives them: y = l + e, |e| <= b."""

    def __init__(self, logits: torch.Tensor, b: float, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        self.logits, self.b, self.shape = logits, [b] * logits.shape[0], logits.shape
        self.y = logits + (torch.rand(logits.shape, generator=g) * 2 - 1) * b * 0.999
        self.exact_calls = 0

    def bounds(self):
        return self.y, self.b

    def exact(self, row: int, ids: torch.Tensor) -> torch.Tensor:
        self.exact_calls += 1
        return self.logits[row, ids]


def toy(seed: int, vocab: int = 16, k: int = 2, sharp: float = 2.0, T: float = 1.0, near: float | None = None):
    """Target logits [k+1, V], p at temperature T, and q [k, V]: another random law, or (``near``) the
    target's own logits plus noise of that size (a good draft: most steps accept everything)."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(k + 1, vocab, generator=g) * sharp  # [k+1, V]
    other = torch.randn(k, vocab, generator=g)
    q = torch.softmax((other * sharp if near is None else logits[:k] + other * near) / T, -1)  # [k, V]
    return logits, torch.softmax(logits / T, -1), q


@pytest.fixture
def wide(monkeypatch):
    """S of 3 ids: most of each row bounded only, so the envelope, its rejections and the undecided
    cases (and their exact rows) all run."""
    monkeypatch.setattr(certified, "SIZES", (3,))
    monkeypatch.setattr(certified, "WIDEST", math.inf)


def test_the_bounds_hold_p_and_z(wide):
    for seed in range(20):
        logits, p, _ = toy(seed, vocab=50, T=0.7)
        bounded = Bounded(logits, b=0.5, seed=seed)
        for r in range(logits.shape[0]):
            row = certified.BoundedRow(bounded.y[r], 0.5, 0.7, lambda ids, r=r: logits[r, ids], lambda r=r: p[r])
            z = float(torch.exp((logits[r].double() - row.shift) / 0.7).sum())
            assert row.z_lo <= z <= row.z_hi and row.p is None
            for i in range(50):
                lo, hi = row.p_interval(i)
                assert lo <= float(p[r, i]) * (1 + 1e-5) and float(p[r, i]) <= hi * (1 + 1e-5)
                assert float(row.g[i]) >= math.exp((float(logits[r, i]) - row.shift) / 0.7) * (1 - 1e-6)  # the envelope


@pytest.mark.parametrize("point_mass", [False, True], ids=["draft", "point-mass"])
def test_every_decision_is_the_exact_rules_for_the_same_draws(wide, point_mass):
    """The accepted prefix equals verify()'s on exact p for the same generator state, trial by trial,
    bounds undecided and decided alike (b = 1: many undecided)."""
    undecided = 0
    for seed in range(300):
        logits, p, q = toy(seed, T=1.0)
        drafts = torch.multinomial(q, 1, generator=torch.Generator().manual_seed(seed)).flatten()  # [k]
        rule_q = None if point_mass else q
        ref = verify(p, rule_q, drafts, generator=torch.Generator().manual_seed(seed))
        bounded = Bounded(logits, b=1.0, seed=seed)
        made = []
        ver = certified.verify_bounded(bounded, 1.0, rule_q, drafts, lambda: made.append(1) or p,
                                       torch.Generator().manual_seed(seed))
        undecided += bool(made)
        assert (ver.n_accepted, ver.resampled) == (ref.n_accepted, ref.resampled)
        assert torch.equal(ver.u, ref.u)
        assert torch.allclose(ver.p_x, ref.p_x) and torch.allclose(ver.ratio, ref.ratio)  # computed when read
    assert 0 < undecided < 300


def _first_tokens(logits, p, q, n=N, seed=0, point_mass=False, b=0.8, T=1.0):
    """Counts of the first token the bounded rule emits (x_1 if accepted, else the correction) and
    of the bonus token among steps that accepted everything."""
    g = torch.Generator().manual_seed(seed)
    k, V = q.shape
    first, bonus = torch.zeros(V), torch.zeros(V)
    bounded = Bounded(logits, b=b, seed=seed)
    every = torch.multinomial(q, n, replacement=True, generator=g).T  # [n, k]
    for drafts in every:
        ver = certified.verify_bounded(bounded, T, None if point_mass else q, drafts, lambda: p, g)
        first[int(drafts[0]) if ver.n_accepted else ver.next_token] += 1
        if ver.n_accepted == k:
            bonus[ver.next_token] += 1
    return first, bonus


def tv(counts, p):
    return 0.5 * float((counts / counts.sum() - p).abs().sum())


@pytest.mark.parametrize("point_mass", [False, True], ids=["draft", "point-mass"])
def test_the_bounded_rule_outputs_p(wide, point_mass):
    """N = 20000 over 16 tokens: noise ~0.008 (99.9%: 0.02); the bonus tokens (a few thousand) 0.05."""
    logits, p, q = toy(5)
    first, _ = _first_tokens(logits, p, q, point_mass=point_mass)
    assert tv(first, p[0]) < TV_OK
    logits, p, q = toy(6, near=0.3)  # a close draft: the bonus token comes up often
    first, bonus = _first_tokens(logits, p, q, n=N // 2, seed=1, point_mass=point_mass)
    assert tv(first, p[0]) < 1.5 * TV_OK
    assert bonus.sum() > 2000 and tv(bonus, p[-1]) < 2.5 * TV_OK


def test_accepting_every_envelope_proposal_fails_the_same_check(wide, monkeypatch):
    """The control: drawing from the envelope g without the w / g test (b = 0.8: ids outside S weigh
    up to e^1.6 = 5x too much) outputs another law; N = 4000 (noise 0.02) seen far above 0.06."""
    logits, p, q = toy(5, sharp=1.0)
    monkeypatch.setattr(certified.BoundedRow, "weight", lambda self, i: float(self.g[i]))
    first, _ = _first_tokens(logits, p, q, n=4000, point_mass=True)
    assert tv(first, p[0]) > 3 * TV_OK


def test_a_flat_row_is_computed_exactly():
    logits = torch.zeros(1, 5000)  # every id alike: no small S holds the mass
    p = torch.softmax(logits, -1)
    row = certified.BoundedRow(logits[0], 0.1, 1.0, lambda ids: logits[0, ids], lambda: p[0])
    assert row.p is not None and torch.equal(row.p, p[0])
    assert row.p_interval(3) == (float(p[0, 3]),) * 2


# -- through the engine: a sampled lean session on a screened head --------------------------------


@pytest.fixture
def bounded_head(tiny_target, monkeypatch):
    """The tiny target's head screened (bf16) and sampled steps bounded at every width; -> the
    verify_bounded calls seen."""
    monkeypatch.setenv("SPECVIZ_ARGMAX_HEAD", "on")
    monkeypatch.setenv("SPECVIZ_SAMPLED_HEAD", "on")
    assert argmax_head.attach(tiny_target.model, min_elements=0) is not None
    calls = []
    real = certified.verify_bounded
    import specviz.core.engine as engine

    monkeypatch.setattr(engine, "verify_bounded", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    yield calls
    argmax_head.detach(tiny_target.model)


def needs_op(test):
    """The screen op, built first; skipped without a C++ compiler (tests.support.kernel)."""
    for mark in NEEDS_OP:
        test = mark(test)
    return test


@needs_op
@pytest.mark.parametrize("proposer", ["none", "ngram", "draft"])
def test_a_sampled_lean_session_decides_on_bounds(tiny_target, near_draft, bounded_head, proposer):
    make = {"none": lambda: None, "ngram": NGram, "draft": lambda: DraftModel(near_draft)}[proposer]
    seen = []

    class ReadRecords(Hook):
        def on_step(self, session, record):  # read during the step: p from the full head, when asked
            seen.append((record.next_p, [(d.p, d.ratio) for d in record.drafts]))

    decoder = SpeculativeDecoder(tiny_target, make(), k=3, sampling=Sampling(temperature=0.8))
    result = decoder.generate("the cat sat on the mat. the cat", max_new_tokens=16, seed=1, records="lean",
                              hooks=[ReadRecords()])
    assert bounded_head and len(result.token_ids) == 16
    assert all(0 < p <= 1 and all(0 <= px <= 1 and 0 <= r <= 1 for px, r in drafts) for p, drafts in seen)


@needs_op
def test_full_records_and_top_p_alone_keep_the_full_head(tiny_target, bounded_head, monkeypatch):
    import specviz.core.engine as engine

    top_k = []
    real = certified.top_k_probs
    monkeypatch.setattr(engine, "top_k_probs", lambda *a: top_k.append(1) or real(*a))
    for sampling, records in ((Sampling(0.8), "full"), (Sampling(0.8, top_p=0.9), "lean")):
        SpeculativeDecoder(tiny_target, NGram(), k=3, sampling=sampling).generate(
            "the cat sat on the mat. the cat", max_new_tokens=8, records=records)
    assert not bounded_head and not top_k


@pytest.mark.parametrize("top_k, top_p, T", [(1, None, 0.7), (5, None, 1.0), (40, 0.9, 0.7), (16, 0.5, 2.0)])
def test_a_top_k_p_from_bounds_is_the_full_heads(top_k, top_p, T):
    """The top-k p made from the screen's candidates' exact logits equals logits_to_probs on the
    whole row, ties at the k-th logit included."""
    from specviz.core.algorithm import logits_to_probs

    g = torch.Generator().manual_seed(top_k)
    logits = torch.randn(3, 500, generator=g) * 3
    logits[1, :8] = logits[1].max()  # eight ids tied at the top
    logits[2, 10:30] = torch.sort(logits[2], descending=True).values[top_k - 1]  # ties at the k-th value
    sampling = Sampling(T, top_k=top_k, top_p=top_p)
    bounded = Bounded(logits, b=0.7)
    p = certified.top_k_probs(bounded, sampling)
    ref = logits_to_probs(logits, sampling)
    assert torch.equal(p > 0, ref > 0) and torch.allclose(p, ref, rtol=1e-6, atol=0)


@needs_op
@pytest.mark.parametrize("proposer", ["none", "ngram", "draft"])
def test_a_top_k_lean_session_draws_the_full_heads_tokens(tiny_target, near_draft, bounded_head, monkeypatch, proposer):
    """Top-k p is exact from the bounds, so a seed draws the same tokens as on the full head."""
    import specviz.core.engine as engine

    make = {"none": lambda: None, "ngram": NGram, "draft": lambda: DraftModel(near_draft)}[proposer]
    made = []
    real = certified.top_k_probs
    monkeypatch.setattr(engine, "top_k_probs", lambda *a: (lambda p: made.append(p is not None) or p)(real(*a)))

    def run():
        return SpeculativeDecoder(tiny_target, make(), k=3, sampling=Sampling(0.9, top_k=8, top_p=0.95)).generate(
            "the cat sat on the mat. the cat", max_new_tokens=16, seed=3, records="lean").token_ids

    bounded = run()
    assert made and all(made)  # every step's p from the bounds
    calls = len(made)
    monkeypatch.setenv("SPECVIZ_SAMPLED_HEAD", "0")
    assert bounded == run() and len(made) == calls  # the full head: the same tokens


@needs_op
def test_the_sampled_heads_choice_is_planned_reported_and_set(tiny_target, monkeypatch):
    model = tiny_target.model
    monkeypatch.setenv("SPECVIZ_ARGMAX_HEAD", "on")
    monkeypatch.setenv("SPECVIZ_SAMPLED_HEAD", "auto")
    assert argmax_head.attach(model, min_elements=0) is not None
    try:
        from specviz.models import model_bytes

        extra = sampled_head.screen_bytes(model)  # the bf16 copy (blocked), counted in the cache's budget
        assert extra >= model.get_output_embeddings().weight.numel() * 2 and model_bytes(tiny_target) > extra
        from specviz.runtime import plan as kernel_plan
        from specviz.runtime import state

        kind = tuning.sampled_kind(model)  # specviz tune's timing; a sampled step only reads the plan
        state.of(model).plan, state.of(model).sampled_screen = kernel_plan.Plan("tiny", {"sampled": kind} if kind else {}), None
        screen = sampled_head.screen_for(model, 1)
        report = kernel_words.sampled_report(model)
        if kind is None:
            assert report["widths"] == {} and screen is not None  # nothing tuned: the default, every width
        else:
            assert set(report["widths"]) == {str(r) for r in argmax_head.WIDTHS} and report["kind"] == "bf16 bounds"
            assert (screen is not None) == (1 in report["used"])
        monkeypatch.setenv("SPECVIZ_SAMPLED_HEAD", "on")
        assert sampled_head.screen_for(model, 40) is not None  # every width
        monkeypatch.setenv("SPECVIZ_SAMPLED_HEAD", "0")
        assert sampled_head.screen_for(model, 1) is None
        monkeypatch.setenv("SPECVIZ_SAMPLED_HEAD", "sometimes")
        with pytest.raises(ValueError, match="SPECVIZ_SAMPLED_HEAD"):
            sampled_head.screen_for(model, 1)
    finally:
        argmax_head.detach(model)
    monkeypatch.setenv("SPECVIZ_SAMPLED_HEAD", "on")
    assert sampled_head.screen_for(model, 1) is None and sampled_head.screen_bytes(model) == 0  # no screen: no bounds


@needs_op
def test_a_real_screens_bounds_hold_and_the_rule_on_them_outputs_p():
    """The bf16 screen op's values and bound (HeadLogits.bounds) around a random head's logits, and
    10,000 bonus draws on them: TV to p under 0.04 (about 20 tokens hold the mass: noise ~0.015)."""
    g = torch.Generator().manual_seed(3)
    w = torch.randn(3000, 48, generator=g)
    h = torch.randn(2, 48, generator=g) * 0.6
    logits = h @ w.T  # [2, V]
    L = argmax_head.HeadLogits(h, lambda x: x @ w.T, argmax_head.build(w))
    y, b = L.bounds()
    assert ((y - logits).abs() <= torch.tensor(b)[:, None]).all()
    assert torch.allclose(L.exact(1, torch.tensor([5, 7])), logits[1, [5, 7]], atol=1e-4)
    p = torch.softmax(logits, -1)
    counts = torch.zeros(3000)
    no_drafts = torch.zeros(0, dtype=torch.long)
    for _ in range(10_000):
        counts[certified.verify_bounded(L, 1.0, None, no_drafts, lambda: p, g).next_token] += 1
    assert tv(counts, p[0]) < 0.04


def test_a_broken_bound_is_said_and_the_exact_row_decides(wide, caplog):
    """A screen whose values sit below the logits by more than b (a bug the rule must not hide): it is
    found on the row's exact ids before any draw, logged and kept in BROKEN_BOUNDS, never clipped
    away, and the exact row decides (the bonus draws follow p); one id broken outside S is found when
    the envelope proposes it."""
    logits, p, _ = toy(5, vocab=16, k=0, sharp=1.0)
    bad = Bounded(logits, 0.05)
    bad.y = logits - 0.5  # every logit 0.5 above its screen value: outside y + b
    certified.BROKEN_BOUNDS.clear()
    counts = torch.zeros(16)
    g = torch.Generator().manual_seed(0)
    no_drafts = torch.zeros(0, dtype=torch.long)
    with caplog.at_level("ERROR", logger="specviz.core.certified"):
        for _ in range(4000):
            counts[certified.verify_bounded(bad, 1.0, None, no_drafts, lambda: p, g).next_token] += 1
    assert certified.BROKEN_BOUNDS and all(r > 1.0 for _, r in certified.BROKEN_BOUNDS)
    assert "above its certified bound" in caplog.text
    assert tv(counts, p[0]) < 0.05
    certified.BROKEN_BOUNDS.clear()
    one = Bounded(logits, 0.05)
    low = int(logits[0].argmin())  # outside S (the top 3 by y), proposed now and then
    one.y[0, low] -= 0.5
    for _ in range(4000):
        certified.verify_bounded(one, 1.0, None, no_drafts, lambda: p, g)
    assert [i for i, _ in certified.BROKEN_BOUNDS] and {i for i, _ in certified.BROKEN_BOUNDS} == {low}
    certified.BROKEN_BOUNDS.clear()


def test_sound_bounds_never_break(wide):
    certified.BROKEN_BOUNDS.clear()
    g = torch.Generator().manual_seed(1)
    for seed in range(40):
        logits, p, q = toy(seed, vocab=50, k=3, T=0.7)
        certified.verify_bounded(Bounded(logits, 0.8, seed), 0.7, q, torch.tensor([1, 2, 3]), lambda: p, g)
    assert certified.BROKEN_BOUNDS == []


@needs_op
def test_the_screens_bound_covers_the_float32_recompute():
    """The bf16 bound holds against the survivors' float32 recompute (pair_dots), not only the real
    dot product: on a long row (d = 4096) every |y - exact| <= b, and b carries the recompute's term."""
    g = torch.Generator().manual_seed(7)
    w = torch.randn(512, 4096, generator=g) / 64
    h = torch.randn(2, 4096, generator=g) * 3
    L = argmax_head.HeadLogits(h, lambda x: x @ w.T, argmax_head.build(w))
    y, b = L.bounds()
    ids = torch.arange(512)
    for r in range(2):
        assert bool(((y[r] - L.exact(r, ids)).abs() <= b[r]).all())
        term = argmax_head.recompute_error(4096) * float(h[r].norm()) * float(w.norm(dim=-1).max())
        assert b[r] >= term
    screen8 = argmax_head.build_int8(w)
    extra = argmax_head.recompute_error(4096) * w.double().norm(dim=1)
    assert bool((screen8.err.double() >= extra).all())
