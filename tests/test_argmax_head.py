"""The certified greedy argmax head (specviz.runtime.argmax_head): the screen op's error stays within
its bound, the argmax is the full head's (ties: the first id), and greedy sessions keep their tokens."""

from __future__ import annotations

import pytest
import torch

from specviz import Hook, Sampling, SpeculativeDecoder, tuning
from specviz.bench import kernel_words
from specviz.proposers import DraftModel, DraftTree, NGram, NGramTree
from specviz.runtime import argmax_head
from tests.support.kernel import NEEDS_OP

pytestmark = NEEDS_OP


@pytest.mark.parametrize("vocab, d", [(16, 8), (1000, 64), (4099, 37), (20000, 640)])
@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5, 9, 13, 25])
@pytest.mark.parametrize("dot", [False, True], ids=["f32-rows", "bf16-rows"])
def test_screen_is_within_its_bound(vocab, d, rows, dot):
    g = torch.Generator().manual_seed(vocab + rows)
    w = torch.randn(vocab, d, generator=g) * torch.rand(vocab, 1, generator=g)  # rows of many norms
    w[0, 0] = 1e-39  # a denormal weight: the bf16 instruction reads it as 0
    h = torch.randn(rows, d, generator=g) * 30
    screen = argmax_head.build(w, dot=dot)
    y = screen.screen(h)  # [rows, V]
    assert y.shape == (rows, vocab) and y.dtype == torch.float32
    exact = h.double() @ w.double().T
    err = (y.double() - exact).abs().amax(dim=1)  # [rows]
    assert (err <= screen.bound(h).double()).all(), (err, screen.bound(h))
    x = screen.rows(h)[0][:, :d].double()  # the rows the op multiplied: h, or bf16(h)
    assert torch.equal(x, h.double()) != dot
    wide = x @ w.to(torch.bfloat16).double().T  # the screen is the product with bf16(W)
    assert torch.allclose(y.double(), wide, rtol=0, atol=1e-4 * float(h.norm(dim=1).max()))


@pytest.mark.parametrize("vocab, d", [(16, 8), (1000, 64), (4099, 37), (20000, 640)])
@pytest.mark.parametrize("rows", [1, 2, 5, 13, 25])
@pytest.mark.parametrize("dot", [False, True], ids=["f32-rows", "bf16-rows"])
def test_the_ops_survivors_are_the_screens_rows_within_2b_of_its_max(vocab, d, rows, dot):
    """``screen_top`` keeps, in the screen's own pass, exactly the (row, id) the written-out screen
    keeps: y >= max(y) - 2B, row-major, ids ascending, never a padding id; its max is the screen's."""
    g = torch.Generator().manual_seed(vocab + rows)
    w = torch.randn(vocab, d, generator=g)
    h = torch.randn(rows, d, generator=g) * 3
    screen = argmax_head.build(w, dot=dot)
    x, off = screen.rows(h)
    two_b = 2 * screen.bound(h, off) * torch.linspace(1, 200, rows)  # thresholds keeping few to many
    y = screen.screen(h, x)  # [rows, V]
    top, got_rows, got_cols = torch.ops.specviz_int8.screen_top(x, screen.blocked, two_b, vocab, vocab)
    assert torch.equal(top, y.max(dim=-1).values)
    want_rows, want_cols = (y >= (y.max(dim=-1).values - two_b)[:, None]).nonzero(as_tuple=True)
    assert torch.equal(got_rows, want_rows) and torch.equal(got_cols, want_cols)
    top, *_ = torch.ops.specviz_int8.screen_top(x, screen.blocked, torch.full((rows,), 1e30), vocab, 3)
    assert torch.isnan(top).all() == (vocab > 3)  # more survivors than the cap: the row says so


def _first_argmax(h, w):
    return (h @ w.T).max(dim=-1).indices


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("dot", [False, True], ids=["f32-rows", "bf16-rows"])
def test_argmax_is_the_full_heads_with_near_ties_and_exact_ties(seed, dot):
    g = torch.Generator().manual_seed(seed)
    vocab, d = 3000, 96
    w = torch.randn(vocab, d, generator=g)
    h = torch.randn(5, d, generator=g)
    best = _first_argmax(h, w)
    # an exact tie after the winner (same row: it must lose), one before it (it must win), and a
    # row within bf16's rounding of each winner
    w[-1] = w[best[0]]
    w[1] = w[best[1]]
    w[2] = w[best[2]] * (1 - 2.0**-10)
    screen = argmax_head.build(w, dot=dot)
    got = screen.argmax(h)
    assert got.tolist() == _first_argmax(h, w).tolist()
    assert got[1] == 1  # the earlier of two equal rows


def test_a_degenerate_row_falls_back_to_the_full_head():
    w = torch.randn(argmax_head.MAX_KEPT + 500, 16)
    screen = argmax_head.build(w)
    h = torch.zeros(1, 16)  # every logit 0: every row survives the screen
    assert screen.argmax(h) is None
    logits = argmax_head.HeadLogits(h, lambda x: x @ w.T, screen)
    assert logits.argmax().tolist() == [0]
    assert torch.equal(logits.get(), h @ w.T)


def _int8_rows(h: torch.Tensor) -> torch.Tensor:
    """h' of float32 rows h [n, d] as the int8 product quantizes them (uint8 per token, a zero point)."""
    lo, hi = h.min(dim=1).values.clamp(max=0), h.max(dim=1).values.clamp(min=0)
    s = (hi - lo) / 255
    s = torch.where(s > 0, s, torch.ones_like(s))
    z = torch.round(-lo / s).clamp(0, 255)
    u = (torch.round(h * (1 / s)[:, None]) + z[:, None]).clamp(0, 255)
    return (u.double() - z.double()[:, None]) * s.double()[:, None]


@pytest.mark.parametrize("vocab, d", [(16, 8), (1000, 64), (4099, 37), (20000, 640)])
@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5, 9, 13])
def test_the_int8_screen_keeps_every_row_its_bound_cannot_rule_out(vocab, d, rows):
    """``screen8_top`` keeps (r, i) where y + B >= max_j (y_j - B_j) with y = h'.w'_i and B =
    |h| err_i + |h - h'| wn_i: the true argmax always, ids ascending, never padding. Checked against
    the same bound computed here in float64 (the op's is 0.1% wider): every row kept here is kept
    there, and every row the op keeps is within its own bound of the top."""
    g = torch.Generator().manual_seed(vocab * 7 + rows)
    w = torch.randn(vocab, d, generator=g) * torch.rand(vocab, 1, generator=g)  # rows of many norms
    h = torch.randn(rows, d, generator=g) * 3
    screen = argmax_head.build_int8(w)
    low, got_rows, got_cols = torch.ops.specviz_int8.screen8_top(h, screen.blocked, screen.scale, screen.wsum,
                                                                 screen.err, screen.wn, vocab, vocab)
    hq = _int8_rows(h)  # [rows, d] float64
    wide = torch.round(w / screen.scale[:, None]).clamp(-127, 127).double() * screen.scale.double()[:, None]  # w'
    y = hq @ wide.T  # [rows, V]
    bound = h.double().norm(dim=1)[:, None] * screen.err.double() + (h.double() - hq).norm(dim=1)[:, None] * screen.wn.double()
    exact = h.double() @ w.double().T
    assert ((exact - y).abs() <= bound + 1e-9).all()  # the bound holds
    kept = set(zip(got_rows.tolist(), got_cols.tolist()))
    floor = (y - bound).max(dim=1).values  # [rows]
    slack = 1e-5 * (1 + y.abs().max(dim=1, keepdim=True).values)  # [rows, 1]: float32 rounding of y in the op
    must = (y + bound >= floor[:, None] + slack).nonzero().tolist()
    assert {tuple(x) for x in must} <= kept
    assert all((r, int(exact[r].argmax())) in kept for r in range(rows))
    assert got_rows.tolist() == sorted(got_rows.tolist()) and all(c < vocab for c in got_cols.tolist())
    for r in range(rows):
        cols = got_cols[got_rows == r]
        assert cols.tolist() == sorted(cols.tolist())
        assert (y[r, cols] + bound[r, cols] >= floor[r] - 3e-3 * (1 + bound[r].max()) - 2 * slack[r]).all()
    low, *_ = torch.ops.specviz_int8.screen8_top(h * 0, screen.blocked, screen.scale, screen.wsum, screen.err, screen.wn,
                                                 vocab, 3)
    assert torch.isnan(low).all() == (vocab > 6)  # h = 0: every logit 0, every row kept; past twice the cap says so


@pytest.mark.parametrize("seed", range(6))
def test_the_int8_screens_argmax_is_the_full_heads_with_near_ties_and_exact_ties(seed):
    g = torch.Generator().manual_seed(seed)
    vocab, d = 3000, 96
    w = torch.randn(vocab, d, generator=g)
    h = torch.randn(5, d, generator=g)
    best = _first_argmax(h, w)
    w[-1] = w[best[0]]  # an exact tie after the winner (it must lose), one before (it must win)
    w[1] = w[best[1]]
    w[2] = w[best[2]] * (1 - 2.0**-10)  # within int8's rounding of the winner
    w[3] = w[best[3]] * (1 - 2.0**-20)
    screen = argmax_head.build_int8(w)
    assert screen.argmax(h).tolist() == _first_argmax(h, w).tolist()
    assert screen.argmax(h)[1] == 1


@pytest.fixture(params=["bf16", "int8"])
def screened(tiny_target, monkeypatch, request):
    monkeypatch.setenv("SPECVIZ_ARGMAX_HEAD", "on" if request.param == "bf16" else "int8")
    assert argmax_head.attach(tiny_target.model, min_elements=0).kind == request.param
    calls = []
    kind = argmax_head.Screen if request.param == "bf16" else argmax_head.Int8Screen
    real = kind.argmax
    monkeypatch.setattr(kind, "argmax", lambda self, h: calls.append(h.shape[0]) or real(self, h))
    yield calls
    argmax_head.detach(tiny_target.model)


def _tokens(target, proposer, k, records, sampling=Sampling(0.0), seed=0):
    session = SpeculativeDecoder(target, proposer, k=k, sampling=sampling).start(
        "the cat sat on the mat. the cat", max_new_tokens=24, seed=seed, records=records)
    while not session.done:
        session.step()
    return session.result().token_ids


@pytest.mark.parametrize("proposer", ["none", "ngram", "draft", "ngram-tree", "draft-tree"])
def test_greedy_lean_sessions_keep_their_tokens_through_the_screen(tiny_target, near_draft, screened, proposer):
    make = {"none": lambda: None, "ngram": NGram, "draft": lambda: DraftModel(near_draft), "ngram-tree": NGramTree,
            "draft-tree": lambda: DraftTree(near_draft, nodes=6)}[proposer]
    with_screen = _tokens(tiny_target, make(), 3, "lean")
    assert screened, "the screened argmax never ran"
    argmax_head.detach(tiny_target.model)
    assert with_screen == _tokens(tiny_target, make(), 3, "lean")


def test_full_records_and_sampling_never_screen(tiny_target, screened):
    _tokens(tiny_target, NGram(), 3, "full")
    _tokens(tiny_target, NGram(), 3, "lean", Sampling(1.0))
    assert not screened


def test_a_lean_greedy_record_still_reads_p(tiny_target, screened):
    seen = []

    class ReadP(Hook):
        def on_step(self, session, record):
            seen.append(record.next_p)  # read during the step: computed from the full head

    for proposer in (NGram(), NGramTree()):
        session = SpeculativeDecoder(tiny_target, proposer, k=3, sampling=Sampling(0.0)).start(
            "the cat sat on the mat. the cat", max_new_tokens=8, records="lean", hooks=[ReadP()])
        while not session.done:
            session.step()
        assert screened and seen and all(0.0 < p <= 1.0 for p in seen)
        seen.clear()


def test_the_choice_comes_from_the_plan_and_is_reported(tiny_target, monkeypatch):
    from specviz.runtime import plan as kernel_plan
    from specviz.runtime import state

    monkeypatch.setenv("SPECVIZ_ARGMAX_HEAD", "auto")
    monkeypatch.setattr(tuning, "time_widths", lambda *a, **k: pytest.fail("timed outside specviz tune"))
    model, held = tiny_target.model, state.of(tiny_target.model)
    try:
        screen = argmax_head.attach(model, min_elements=0)  # no plan: the bf16 screen at every width
        assert screen.kind == "bf16" and all(screen.used(r) for r in (1, 5, 40))
        used = list(range(1, len(screen.use_at)))
        assert kernel_words.screen_report(model) == {"widths": {}, "used": used, "kind": "bf16", "by_kind": {"bf16": used}}
        times = {r: {"full": 10.0, "bf16": 20.0, "int8": 5.0 if r < 9 else 11.0} for r in argmax_head.WIDTHS}
        held.plan = kernel_plan.Plan("tiny", {"argmax": tuning.screen_kind(times, argmax_head.KINDS)})
        with monkeypatch.context() as m:  # only the kept copy is made
            m.setattr(argmax_head, "build", lambda w: pytest.fail("built the bf16 copy"))
            screen = argmax_head.attach(model, min_elements=0)
        assert screen.kind == "int8" and [screen.used(r) for r in (1, 5, 8, 9, 17, 40)] == [True] * 3 + [False] * 3
        report = kernel_words.screen_report(model)
        assert set(report["widths"]) == {str(r) for r in argmax_head.WIDTHS} and report["used"] == list(range(1, 9))
        slower = {r: {"full": 1.0, "bf16": 2.0, "int8": 3.0} for r in argmax_head.WIDTHS}
        assert tuning.screen_kind(slower, argmax_head.KINDS) is None  # tuned slower: the full head
        held.plan = kernel_plan.Plan("tiny", {"argmax": kernel_plan.KindPlan({1: "full"})})
        assert argmax_head.attach(model, min_elements=0) is None and kernel_words.screen_report(model) is None
    finally:
        held.plan = None
        argmax_head.detach(model)
    monkeypatch.setenv("SPECVIZ_ARGMAX_HEAD", "0")
    assert argmax_head.attach(model, min_elements=0) is None
    monkeypatch.setenv("SPECVIZ_ARGMAX_HEAD", "sometimes")
    with pytest.raises(ValueError, match="SPECVIZ_ARGMAX_HEAD"):
        argmax_head.attach(model, min_elements=0)


def test_the_roofline_counts_the_screen_greedy_steps_read(tiny_target, screened):
    from specviz.analysis import hardware

    model = tiny_target.model
    counted = hardware.decode_bytes(model)
    screen = argmax_head.screen_of(model)
    v, d = screen.weight.shape
    halved = hardware.screened_bytes(model, counted)
    # the screen's copy in place of float32 (padding counted)
    assert halved == counted - 4 * v * d + screen.blocked.numel() * screen.blocked.element_size()
    rows = [{"impl": "specviz", "proposer": "target-only", "k": 0, "steps": 10, "new_tokens": 10, "tokens_per_s": 5.0,
             "step_ms": 190.0}]
    lines = hardware.roofline_lines(rows, model, probes_gb_s=[10.0])
    assert any(f"{screen.kind} screen" in line for line in lines)
    argmax_head.detach(model)
    assert hardware.screened_bytes(model, counted) is None
    assert not any("bf16 screen" in line for line in hardware.roofline_lines(rows, model, probes_gb_s=[10.0]))


def test_a_plan_that_splits_the_widths_keeps_both_screens_and_each_width_reads_its_own(tiny_target, near_draft, monkeypatch):
    from specviz.runtime import plan as kernel_plan
    from specviz.runtime import state

    monkeypatch.setenv("SPECVIZ_ARGMAX_HEAD", "auto")
    held = state.of(tiny_target.model)
    times = {r: {"full": 10.0, "bf16": 6.0 if r >= 5 else 8.0, "int8": 3.0 if r < 5 else 9.0} for r in argmax_head.WIDTHS}
    held.plan = kernel_plan.Plan("tiny", {"argmax": tuning.screen_kind(times, argmax_head.KINDS)})
    seen = []
    for kind in (argmax_head.Screen, argmax_head.Int8Screen):
        real = kind.argmax
        monkeypatch.setattr(kind, "argmax", lambda self, h, real=real: seen.append((self.kind, h.shape[0])) or real(self, h))
    try:
        assert argmax_head.attach(tiny_target.model, min_elements=0).kind == "int8"  # one row's first
        assert [s.kind for s in argmax_head.screens_of(tiny_target.model)] == ["int8", "bf16"]
        assert [argmax_head.screen_of(tiny_target.model, r).kind for r in (1, 4, 5, 9)] == ["int8", "int8", "bf16", "bf16"]
        both = _tokens(tiny_target, DraftModel(near_draft), 5, "lean")  # one-row draft-free steps and 6-row verifies
        assert {kind for kind, _ in seen} == {"int8", "bf16"} and all((n < 5) == (kind == "int8") for kind, n in seen)
    finally:
        held.plan = None
        argmax_head.detach(tiny_target.model)
    assert both == _tokens(tiny_target, DraftModel(near_draft), 5, "lean")  # the full head's tokens
