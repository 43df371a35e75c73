"""Drafts over part of the vocabulary (draft:NAME,vocab=N, FR-Spec): the head, the context rows,
and exactness (greedy equality, sampled output following the target) on tiny models."""

import pytest
import torch

from specviz import Sampling, SpeculativeDecoder
from specviz.analysis import checks
from specviz.core.logits import materialize
from specviz.proposers import DraftModel, from_spec
from specviz.proposers.vocab import ContextRows, SubsetHead, token_ranking, with_vocab_subset
from specviz.runtime.quantize import Int8Linear
from tests.test_engine import PROMPTS, hf_greedy

N = 12  # of the char tokenizer's 37 tokens


@pytest.fixture(scope="module")
def subset_draft(tiny_target, near_draft):
    return with_vocab_subset(near_draft, tiny_target, N)


def test_the_head_scores_its_rows_exactly_and_nothing_else(subset_draft, near_draft):
    head = subset_draft.model.get_output_embeddings()
    assert isinstance(head, SubsetHead) and head.ids.numel() == N
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    with torch.no_grad():
        full = near_draft.model(ids).logits[0]  # [5, V]
        part = subset_draft.model(ids).logits[0]  # [5, V]
    inside = torch.zeros(full.shape[-1], dtype=torch.bool)
    inside[head.ids] = True
    torch.testing.assert_close(part[:, inside], full[:, inside])
    assert torch.isinf(part[:, ~inside]).all() and (part[:, ~inside] < 0).all()


def test_the_shared_model_is_untouched_and_the_subset_is_built_once(subset_draft, near_draft, tiny_target):
    assert not isinstance(near_draft.model.get_output_embeddings(), SubsetHead)
    assert subset_draft.model.model is near_draft.model.model  # one body, two heads
    assert with_vocab_subset(near_draft, tiny_target, N) is subset_draft
    assert with_vocab_subset(near_draft, tiny_target, near_draft.vocab_size) is near_draft  # nothing to cut
    assert subset_draft.name == "tiny-near,vocab=12"


def test_the_cache_is_per_target_and_lets_a_freed_target_go(near_draft, tiny_target):
    import copy
    import gc
    import weakref

    from specviz.models import LoadedModel
    from specviz.proposers import vocab

    other = LoadedModel(copy.deepcopy(tiny_target.model), tiny_target.tokenizer, "tiny-other", tiny_target.device,
                        tiny_target.dtype, None)
    cut = with_vocab_subset(near_draft, other, N)
    assert cut is not with_vocab_subset(near_draft, tiny_target, N)  # its own target, its own ranking
    gone, gone_cut = weakref.ref(other.model), weakref.ref(cut.model)
    del other, cut
    gc.collect()
    assert gone() is None and gone_cut() is None  # the cache let the target and its cut draft go
    assert len(vocab._subsets[near_draft.model]) == 1  # tiny_target's entry only


def test_the_ranking_puts_the_calibration_texts_tokens_first(tiny_target):
    from specviz.models.int8 import calibration_token_ids

    rank = token_ranking(tiny_target)
    assert sorted(rank.tolist()) == list(range(tiny_target.vocab_size))
    written = {t for ids in calibration_token_ids(tiny_target.tokenizer, 32, 512) for t in ids}
    assert set(rank[: len(written)].tolist()) == written


def test_context_rows_score_a_sessions_own_tokens_in_float_only_while_active(subset_draft, near_draft):
    head = subset_draft.model.get_output_embeddings()
    outside = next(t for t in range(near_draft.vocab_size) if t not in head.members)
    rows, other = ContextRows(head), ContextRows(head)
    rows.add([outside, outside, int(head.ids[0])])  # a set member is not added twice
    assert rows.ids == [outside]
    x = torch.tensor([[5, 6, 7]])
    with torch.no_grad():
        full = near_draft.model(x).logits[0, -1]
        with rows.active():
            seen = subset_draft.model(x).logits[0, -1]
            with other.active():  # another session's rows: nothing extra
                unseen = subset_draft.model(x).logits[0, -1]
        after = subset_draft.model(x).logits[0, -1]
    torch.testing.assert_close(seen[outside], full[outside])
    assert torch.isinf(unseen[outside]) and torch.isinf(after[outside])


def test_int8_rows_keep_their_exact_values():
    torch.manual_seed(0)
    lin = torch.nn.Linear(16, 40)
    q = Int8Linear(lin, torch.rand(16) + 0.5)
    ids = torch.tensor([3, 17, 39, 0])
    x = torch.randn(2, 16)
    torch.testing.assert_close(q.select_rows(ids)(x), q(x)[:, ids])


@pytest.mark.parametrize("k", [1, 3])
def test_greedy_output_is_still_the_targets(tiny_target, subset_draft, k):
    dec = SpeculativeDecoder(tiny_target, DraftModel(subset_draft), k=k)
    for prompt in PROMPTS:
        res = dec.generate(prompt, max_new_tokens=20)
        assert list(res.token_ids) == hf_greedy(tiny_target, prompt, 20)


def test_sampled_output_follows_the_target_and_a_wrong_rule_fails(tiny_target, tiny_draft):
    """TV of the first two sampled tokens from the exact target law, N = 1500 runs: exact sampling
    gives TV1 ~ 0.044 (99.9%: 0.070), TV2 ~ 0.054 (99.9%: 0.081), threshold 0.08 (seen 0.040 / 0.049).
    Resampling from p instead of the residual moves TV1 by ~0.14: seen 0.157 > 0.12 (margin 0.037)."""
    draft = with_vocab_subset(tiny_draft, tiny_target, 8)
    dec = SpeculativeDecoder(tiny_target, DraftModel(draft), k=3, sampling=Sampling(3.0))
    prompt = "hello hello hello hel"
    tv1, tv2 = checks.first_two_tv(dec, prompt, 1500)
    assert tv1 < 0.08 and tv2 < 0.08, (tv1, tv2)
    with checks.wrong_rule():
        bad1, _ = checks.first_two_tv(dec, prompt, 1500)
    assert bad1 > 0.12, (tv1, bad1)


def test_the_spec_option(tiny_target, near_draft):
    loads = {"tiny-near": near_draft}
    proposer = from_spec("draft:tiny-near,vocab=12,policy=argmax", tiny_target, load=lambda name, **kw: loads[name])
    assert proposer.name == "draft:tiny-near,vocab=12,policy=argmax"
    assert isinstance(proposer.model.model.get_output_embeddings(), SubsetHead)
    for bad, match in [("vocab=0", "whole number"), ("vocab=many", "whole number"), ("size=3", "unknown option")]:
        with pytest.raises(ValueError, match=match):
            from_spec(f"draft:tiny-near,{bad}", tiny_target, load=lambda name, **kw: loads[name])


@pytest.mark.parametrize("spec", ["ngram+draft:tiny-near,vocab=12", "draft-tree:tiny-near,vocab=12,nodes=6,width=2"])
def test_the_other_draft_kinds_take_vocab_and_stay_exact(tiny_target, near_draft, spec):
    loads = {"tiny-near": near_draft}
    proposer = from_spec(spec, tiny_target, load=lambda name, **kw: loads[name])
    assert proposer.name == spec  # the name is a spec that builds the same proposer
    head = proposer.model.model.get_output_embeddings()
    assert isinstance(head, SubsetHead) and head.ids.numel() == N
    assert not isinstance(near_draft.model.get_output_embeddings(), SubsetHead)
    dec = SpeculativeDecoder(tiny_target, proposer, k=3)
    for prompt in PROMPTS:
        assert list(dec.generate(prompt, max_new_tokens=20).token_ids) == hf_greedy(tiny_target, prompt, 20)
    state = proposer.init_state(tiny_target)
    context = torch.arange(1, 30)  # [29] distinct tokens: no n-gram match, the draft model drafts
    proposer.propose(state, context, 3, Sampling(), torch.Generator())
    rows = state.context_rows  # the session's own context tokens outside the set, scored too
    assert rows is not None and set(rows.ids) == {t for t in context.tolist() if t not in head.members}


def test_lazy_logits_lay_out_as_the_forward_and_take_its_argmax(subset_draft):
    from specviz.proposers.vocab import SubsetLogits

    head = subset_draft.model.get_output_embeddings()
    outside = [t for t in range(head.out_features) if t not in head.members][:3]
    rows = ContextRows(head)
    rows.add(outside)
    torch.manual_seed(0)
    x = torch.randn(4, head.rows.in_features)
    with torch.no_grad(), rows.active():
        lazy, laid, full = head.lazy_logits(x), head.lazy_logits(x), head(x)  # [4, V]
    assert torch.equal(lazy.argmax(), full.max(dim=-1).indices)  # read after the rows' session: its rows still
    torch.testing.assert_close(laid.get(), full, rtol=0, atol=0)
    assert torch.equal(laid.argmax(), lazy.argmax())
    # ties go to the smallest id, whichever part holds it; a NaN wins (the smallest NaN id); all -inf: id 0
    V, ids, extra_ids = 10, torch.tensor([2, 5, 7]), torch.tensor([1, 9])
    cases = [([0.5, 3.0, 3.0], [3.0, 1.0]), ([3.0, 0.0, 3.0], [1.0, 3.0]), ([1.0, float("nan"), 2.0], [0.0, float("nan")]),
             ([float("-inf")] * 3, [float("-inf")] * 2)]
    for y, e in cases:
        lazy = SubsetLogits(torch.tensor([y]), ids, torch.tensor([e]), extra_ids, V)
        expected = SubsetLogits(torch.tensor([y]), ids, torch.tensor([e]), extra_ids, V).laid_out().max(dim=-1).indices
        assert torch.equal(lazy.argmax(), expected), (y, e)


def test_a_greedy_cut_draft_drafts_on_the_lazy_head_with_the_same_tokens_and_q(tiny_target, subset_draft):
    from specviz.runtime import static_decode

    if not static_decode.enabled():
        pytest.skip("the lazy head is the static step's")
    from specviz.proposers import draft_model

    seen = []
    real = draft_model.forward_logits

    def spy(*a, **kw):
        out = real(*a, **kw)
        seen.append(type(out).__name__)
        return out

    draft = DraftModel(subset_draft)
    greedy = Sampling(temperature=0.0)
    ctx = tiny_target.tokenizer("hello world", return_tensors="pt").input_ids[0]
    tops: dict[str, list[float]] = {"lazy": [], "laid out": []}

    def run(kind, forward):
        def stop(top):  # a confidence stop that never stops, recording what it read
            tops[kind].append(top)
            return False

        draft_model.forward_logits = forward
        try:
            return draft_model.draft_tokens(subset_draft, draft.init_state(tiny_target), ctx, 4, greedy, None, stop=stop)
        finally:
            draft_model.forward_logits = real

    tokens, lazy_q = run("lazy", spy)
    assert "SubsetLogits" in seen
    # the same drafts from the rows laid out whole (the head's forward as it was before the lazy head)
    eager = run("laid out", lambda *a, **kw: materialize(real(*a, **kw)))
    assert torch.equal(tokens, eager[0])
    torch.testing.assert_close(lazy_q.fn(), eager[1].fn(), rtol=0, atol=0)
    # a confidence stop reads the same top probability from the cut head's rows as from the whole row
    assert len(tops["lazy"]) == 3
    torch.testing.assert_close(torch.tensor(tops["lazy"]), torch.tensor(tops["laid out"]), rtol=1e-6, atol=0)
    torch.testing.assert_close(torch.tensor(tops["lazy"]), lazy_q.fn()[:3].max(-1).values, rtol=1e-6, atol=0)
