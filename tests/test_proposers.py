"""Early exit, cross-tokenizer drafting, dynamic k and typical acceptance."""

import pytest
import torch

from specviz import Sampling, SpeculativeDecoder
from specviz.analysis import checks
from specviz.core.algorithm import Acceptance, typical_threshold, verify
from specviz.core.schedules import ConfidenceK, HeuristicK, changes_nothing, make_schedule
from specviz.proposers import CrossTokenizerDraft, DraftModel, EarlyExit, NGram, NGramOrDraft, NGramTree
from specviz.proposers.cross_tokenizer import text_to_target_tokens
from tests.test_engine import PROMPTS, hf_greedy


@pytest.fixture(scope="module")
def deep_target(tokenizer):
    from tests.support import loaded, make_llama

    return loaded(make_llama(len(tokenizer), 64, 4, seed=6, sharpen=30.0), tokenizer, "tiny-deep")


@pytest.mark.parametrize("k", [1, 3, 8])
def test_early_exit_greedy_equality_and_target_untouched(deep_target, k):
    layers_before = list(deep_target.model.model.layers)
    for L in (1, 3):
        dec = SpeculativeDecoder(deep_target, EarlyExit(deep_target, L), k=k)
        for prompt in PROMPTS[:2]:
            assert list(dec.generate(prompt, max_new_tokens=30).token_ids) == hf_greedy(deep_target, prompt, 30)
    assert list(deep_target.model.model.layers) == layers_before
    assert deep_target.model.config.num_hidden_layers == 4


def test_early_exit_rejects_bad_depth(deep_target):
    for L in (0, 4, 9):
        with pytest.raises(ValueError, match="layers"):
            EarlyExit(deep_target, L)


@pytest.mark.parametrize("k", [1, 3, 8])
def test_cross_tokenizer_greedy_equality(tiny_target, bpe_draft, k):
    dec = SpeculativeDecoder(tiny_target, CrossTokenizerDraft(bpe_draft), k=k)
    for prompt in PROMPTS:
        res = dec.generate(prompt, max_new_tokens=30)
        assert list(res.token_ids) == hf_greedy(tiny_target, prompt, 30)
        assert res.stats.drafted > 0
        assert any(s.info.get("draft_tokens") for s in res.steps)  # the mapping the UI shows


def test_cross_tokenizer_on_a_same_tokenizer_draft_accepts_everything(tiny_target):
    res = SpeculativeDecoder(tiny_target, CrossTokenizerDraft(tiny_target), k=4).generate(PROMPTS[0], max_new_tokens=30)
    assert res.stats.acceptance_rate == 1.0


def test_text_to_target_tokens(tokenizer):
    committed = tokenizer("the ca", add_special_tokens=False)["input_ids"]
    assert text_to_target_tokens(tokenizer, committed, "the ca", "t sat") == tokenizer("t sat", add_special_tokens=False)["input_ids"]


@pytest.mark.parametrize("kind", ["early-exit", "cross"])
def test_sampled_output_follows_the_target(tiny_target, bpe_draft, kind):
    """TV of the first two sampled tokens from the exact target law, N = 1500 runs: exact TV1 ~ 0.043
    (99.9%: 0.071), TV2 ~ 0.054 (99.9%: 0.081), threshold 0.08 (seen: early exit 0.040 / 0.044, cross
    0.034 / 0.072). Resampling from p instead of the residual: early exit 0.155 (caught), cross
    0.038 (not caught: its drafts get p ~ 0; test_engine[ngram] covers that residual)."""
    proposer = EarlyExit(tiny_target, 1) if kind == "early-exit" else CrossTokenizerDraft(bpe_draft)
    dec = SpeculativeDecoder(tiny_target, proposer, k=3, sampling=Sampling(3.0))
    tv1, tv2 = checks.first_two_tv(dec, "hello hello hello hel", 1500)
    assert tv1 < 0.08 and tv2 < 0.08, (tv1, tv2)


def test_heuristic_schedule_moves_k(tiny_target, near_draft):
    sched = HeuristicK()
    res = SpeculativeDecoder(tiny_target, DraftModel(near_draft), k=2, schedule=sched).generate(PROMPTS[0], max_new_tokens=60)
    ks = [s.k for s in res.steps]
    assert len(set(ks)) > 1
    scheduled = 2
    for prev, cur in zip(res.steps, res.steps[1:]):
        # the schedule's k moves from its own last value; a step near the end drafts fewer
        scheduled = min(32, scheduled + 2) if prev.n_accepted == prev.k else max(1, scheduled - 1)
        left = 60 - sum(s.n_committed for s in res.steps[: cur.index])
        assert cur.k == min(scheduled, left - 1)
    assert list(res.token_ids) == hf_greedy(tiny_target, PROMPTS[0], 60)


def test_confidence_schedule_stops_drafting_early(tiny_target, near_draft):
    always_stop = ConfidenceK(threshold=1.0)
    res = SpeculativeDecoder(tiny_target, DraftModel(near_draft), k=6, schedule=always_stop).generate(PROMPTS[0], max_new_tokens=20)
    assert all(s.k == 1 for s in res.steps if s.k)
    never = ConfidenceK(threshold=0.0)
    res = SpeculativeDecoder(tiny_target, DraftModel(near_draft), k=6, schedule=never).generate(PROMPTS[0], max_new_tokens=20)
    assert res.steps[0].k == 6
    assert list(res.token_ids) == hf_greedy(tiny_target, PROMPTS[0], 20)


def test_a_confidence_stop_says_where_and_why_it_stopped(tiny_target, near_draft):
    """A step the confidence stop cut short records after how many drafts and on what top
    probability (under the threshold), and the step view says it in words; a step it did not cut
    records nothing."""
    from specviz import viz

    threshold = 0.9
    res = SpeculativeDecoder(tiny_target, DraftModel(near_draft), k=6, schedule=ConfidenceK(threshold)).generate(
        PROMPTS[0], max_new_tokens=30)
    stopped = [s for s in res.steps if "stopped" in s.info]
    assert stopped and all(s.info["stopped"]["after"] == s.k < 6 and s.info["stopped"]["top"] < threshold for s in stopped)
    assert all(s.k == min(6, 30 - sum(r.n_committed for r in res.steps[: s.index]) - 1)
               for s in res.steps if "stopped" not in s.info and s.k)
    assert "The draft stopped after" in viz.step_summary(stopped[0]) and "under the confidence" in viz.step_summary(stopped[0])
    assert list(res.token_ids) == hf_greedy(tiny_target, PROMPTS[0], 30)


def test_the_draft_a_confidence_stop_is_unsure_of_is_its_last_proposed(tiny_target, near_draft):
    """The stop reads each draft's top probability, max q, and the draft it is unsure of is still
    proposed (its forward is paid; the target may keep it), then no more."""
    seen: list[float] = []

    def stop(top):
        seen.append(top)
        return len(seen) == 2  # unsure of the second draft

    draft = DraftModel(near_draft, policy="argmax")
    ctx = tiny_target.tokenizer(PROMPTS[0], return_tensors="pt").input_ids[0]
    proposal = draft.propose(draft.init_state(tiny_target), ctx, 5, Sampling(temperature=1.0), torch.Generator().manual_seed(0),
                             stop=stop)
    assert proposal.tokens.numel() == 2 and len(seen) == 2
    torch.testing.assert_close(torch.tensor(seen), proposal.q.max(-1).values, rtol=1e-6, atol=0)
    assert proposal.info["stopped"] == {"after": 2, "top": seen[1]}


def test_a_confidence_stop_a_proposer_never_reads_is_refused(tiny_target, near_draft):
    """n-gram drafts carry no q: a confidence schedule would rerun constant k under another name
    (a bench once ranked two such identical runs 15% apart)."""
    for proposer in (NGram(), NGramTree()):
        with pytest.raises(ValueError, match="exactly as constant k. Use constant or heuristic"):
            SpeculativeDecoder(tiny_target, proposer, k=4, schedule="confidence:0.3")
        SpeculativeDecoder(tiny_target, proposer, k=4, schedule="heuristic")
    for proposer in (DraftModel(near_draft), NGramOrDraft(DraftModel(near_draft))):
        SpeculativeDecoder(tiny_target, proposer, k=4, schedule="confidence:0.3")  # both stop on the draft's q
    assert changes_nothing(ConfidenceK(0.3), None) is None and changes_nothing(HeuristicK(), NGram()) is None


def test_make_schedule():
    assert make_schedule("confidence:0.7") == ConfidenceK(0.7)
    assert make_schedule("heuristic") == HeuristicK()
    with pytest.raises(ValueError, match="unknown k schedule"):
        make_schedule("fast")


def test_typical_rule_by_hand():
    p = torch.tensor([[0.7, 0.2, 0.1], [0.4, 0.4, 0.2], [1.0, 0.0, 0.0]])
    th = typical_threshold(p[:2], eps=0.09, delta=0.3)
    H = -(p[:2] * p[:2].log()).sum(-1)
    assert torch.allclose(th, torch.clamp(0.3 * torch.exp(-H), max=0.09))
    g = torch.Generator().manual_seed(0)
    typical = Acceptance("typical")
    # p(x_1 = 1) = 0.2 > threshold, p(x_2 = 2) = 0.2 > threshold -> both accepted, bonus = 0
    ver = verify(p, None, torch.tensor([1, 2]), generator=g, acceptance=typical)
    assert (ver.n_accepted, ver.next_token) == (2, 0)
    strict = Acceptance("typical", eps=0.5, delta=1.0)  # threshold exp(-H) ~ 0.45 at row 0
    ver = verify(p, None, torch.tensor([1, 2]), generator=g, acceptance=strict)
    assert (ver.n_accepted, ver.next_token, ver.resampled) == (0, 0, True)  # correction = argmax p


def test_typical_acceptance_is_labelled_lossy_and_accepts_more(tiny_target, tiny_draft):
    sampling = Sampling(1.0)
    exact = SpeculativeDecoder(tiny_target, NGram(), k=4, sampling=sampling)
    typical = SpeculativeDecoder(tiny_target, NGram(), k=4, sampling=sampling, acceptance=Acceptance("typical", eps=0.01, delta=0.01))
    assert "LOSSY" in typical.label and "LOSSY" not in exact.label
    a = exact.generate(PROMPTS[0], max_new_tokens=40, seed=0).stats.acceptance_rate
    b = typical.generate(PROMPTS[0], max_new_tokens=40, seed=0).stats.acceptance_rate
    assert b >= a
    with pytest.raises(ValueError, match="exact"):
        Acceptance("fast")


@pytest.mark.parametrize("k", [1, 3, 8])
def test_ngram_or_draft_greedy_equality_using_both_sources(tiny_target, tiny_draft, k):
    prompt = "the cat sat on the mat. the cat sat on the"
    res = SpeculativeDecoder(tiny_target, NGramOrDraft(DraftModel(tiny_draft)), k=k).generate(prompt, max_new_tokens=40)
    assert list(res.token_ids) == hf_greedy(tiny_target, prompt, 40)
    sources = {s.info.get("source") for s in res.steps if s.k}
    assert sources == {"ngram", "draft"}, sources  # the lookup where the text repeats, the draft elsewhere


def test_ngram_or_draft_leaves_a_greedy_drafts_q_unread(tiny_target, tiny_draft):
    """Where the draft model drafts, the hybrid labels its proposal without reading q: a greedy
    draft's q is a softmax over the vocabulary a drafted token, computed only when something reads it."""
    proposer = NGramOrDraft(DraftModel(tiny_draft))
    context = torch.tensor(tiny_target.tokenizer("hello there", add_special_tokens=False).input_ids)
    proposal = proposer.propose(proposer.init_state(tiny_target), context, 3, Sampling(), torch.Generator())
    assert proposal.info["source"] == "draft" and proposal.pending() == ("q",)
    assert proposal.q.shape[0] == len(proposal.tokens)  # and it is there when read


def test_ngram_or_draft_sampled_output_follows_the_target(tiny_target, tiny_draft):
    """The prompt's last character is new: the first step drafts with the model, later ones with
    either source. N = 1500: exact TV1 ~ 0.042 (99.9%: 0.069), TV2 ~ 0.053 (99.9%: 0.079), threshold
    0.08 (seen 0.036 / 0.053); resampling from p instead of the residual: 0.172 > 0.12 (margin 0.05)."""
    dec = SpeculativeDecoder(tiny_target, NGramOrDraft(DraftModel(tiny_draft), min_ngram=1), k=3, sampling=Sampling(3.0))
    prompt = "hello hello hello hez"
    tv1, tv2 = checks.first_two_tv(dec, prompt, 1500)
    assert tv1 < 0.08 and tv2 < 0.08, (tv1, tv2)
    with checks.wrong_rule():
        bad1, _ = checks.first_two_tv(dec, prompt, 1500)
    assert bad1 > 0.12, (tv1, bad1)
    with pytest.raises(ValueError, match="min_ngram"):
        NGramOrDraft(DraftModel(tiny_draft), max_ngram=2, min_ngram=3)


@pytest.mark.parametrize("window", [30, 8])
def test_a_draft_with_a_shorter_window_drafts_nothing_past_it(tiny_target, tokenizer, window):
    """The target's window is 1024, the draft's ``window``: the draft never sees a position it does
    not have (30: it stops drafting mid-run; 8: the prompt alone is longer, so it never drafts), and
    the output is still the target's."""
    from tests.support import loaded, make_llama

    short = loaded(make_llama(len(tokenizer), 32, 2, seed=1, sharpen=30.0, max_position_embeddings=window),
                   tokenizer, f"tiny-draft-{window}")
    seen = []
    short.model.register_forward_pre_hook(
        lambda m, args, kwargs: seen.append(kwargs["cache"].get_seq_length() + kwargs["input_ids"].shape[1]),
        with_kwargs=True,
    )
    prompt = PROMPTS[1]
    res = SpeculativeDecoder(tiny_target, DraftModel(short), k=4).generate(prompt, max_new_tokens=40)
    assert list(res.token_ids) == hf_greedy(tiny_target, prompt, 40)
    assert max(seen, default=0) <= window  # positions fed to the draft: at most its window
    n_prompt = len(tiny_target.tokenizer(prompt)["input_ids"])
    length = n_prompt
    for s in res.steps:
        assert length + s.k - 1 <= window or s.k == 0
        length += s.n_committed
    assert (res.stats.drafted > 0) == (n_prompt < window)
