"""The engine on tiny random models: greedy equality, sampled exactness, KV rollback, seeds."""

import copy
from dataclasses import replace

import pytest
import torch

from specviz import Hook, Sampling, SpeculativeDecoder, TraceRecorder, autoregressive, load_trace
from specviz.analysis import checks
from specviz.core.engine import encode_prompt
from specviz.core.stats import position_counts, step_position_counts
from specviz.proposers import DraftModel, NGram
from specviz.remote.engines import positions_from_steps
from specviz.runtime.hfcompat import cache_kwargs
from specviz.runtime.kv import forward_logits, rollback
from tests.support import hf_greedy

PROMPTS = [
    "the cat sat on the mat. the cat sat on the",
    "hello world, hello again. hello",
    "a quick brown fox jumps over the lazy dog",
]


@pytest.mark.parametrize("k", [1, 3, 8])
@pytest.mark.parametrize("kind", ["draft", "near", "ngram"])
def test_greedy_equals_target_greedy(tiny_target, tiny_draft, near_draft, kind, k):
    proposer = {"draft": lambda: DraftModel(tiny_draft), "near": lambda: DraftModel(near_draft), "ngram": NGram}[kind]()
    decoder = SpeculativeDecoder(tiny_target, proposer, k=k)
    for prompt in PROMPTS:
        ref = hf_greedy(tiny_target, prompt, 40)
        res = decoder.generate(prompt, max_new_tokens=40)
        assert list(res.token_ids) == ref
        assert res.stats.new_tokens == len(ref)
        assert sum(s.n_committed for s in res.steps) == len(ref)


def test_tests_exercise_rejections_and_acceptances(tiny_target, near_draft):
    res = SpeculativeDecoder(tiny_target, DraftModel(near_draft), k=4).generate(PROMPTS[0], max_new_tokens=40)
    kinds = {s.next_kind for s in res.steps}
    assert 0 < res.stats.acceptance_rate < 1 and {"resampled", "bonus"} <= kinds


def test_cache_keyword_follows_the_installed_forward(tiny_target):
    """transformers 5.24 renamed ``past_key_values`` to ``cache``; an unknown keyword is swallowed
    silently, so the name is read from the forward's signature."""

    class Old(torch.nn.Module):
        def forward(self, input_ids=None, past_key_values=None, use_cache=None, **kwargs): ...

    class New(torch.nn.Module):
        def forward(self, input_ids=None, cache=None, use_cache=None, **kwargs): ...

    assert cache_kwargs(Old(), "c") == {"past_key_values": "c"}
    assert cache_kwargs(New(), "c") == {"cache": "c"}
    import inspect
    params = inspect.signature(type(tiny_target.model).forward).parameters
    assert next(iter(cache_kwargs(tiny_target.model, None))) in params


def test_autoregressive_equals_hf_greedy(tiny_target):
    for prompt in PROMPTS:
        res = autoregressive(tiny_target, prompt, max_new_tokens=30)
        assert list(res.token_ids) == hf_greedy(tiny_target, prompt, 30)
        assert res.stats.mean_acceptance_length == 1.0 and res.stats.drafted == 0


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_identical_draft_accepts_everything(tiny_target, temperature):
    res = SpeculativeDecoder(tiny_target, DraftModel(tiny_target), k=4, sampling=Sampling(temperature)).generate(
        PROMPTS[1], max_new_tokens=30, seed=3
    )
    assert res.stats.acceptance_rate == 1.0
    assert all(s.next_kind == "bonus" for s in res.steps if s.k == 4)


def test_max_new_tokens_is_exact(tiny_target, near_draft):
    for n in [1, 2, 5, 13]:
        res = SpeculativeDecoder(tiny_target, DraftModel(near_draft), k=8).generate(PROMPTS[0], max_new_tokens=n)
        assert len(res.token_ids) == n and res.finished == "length"
        assert all(s.k + 1 + sum(x.n_committed for x in res.steps[: s.index]) <= n for s in res.steps)


def test_stops_at_eos_and_never_commits_past_it(tiny_target, near_draft):
    eos = 2
    usual = max(set(hf_greedy(tiny_target, PROMPTS[2], 40)), key=hf_greedy(tiny_target, PROMPTS[2], 40).count)
    model = copy.deepcopy(tiny_target.model)
    with torch.no_grad():  # EOS now wins wherever the target's most common token did
        model.lm_head.weight[eos] = model.lm_head.weight[usual] * 1.01
    target = replace(tiny_target, model=model)
    ref = hf_greedy(target, PROMPTS[2], 40)
    assert eos in ref, "the EOS setup should produce an EOS"
    for proposer in [DraftModel(near_draft), NGram()]:
        res = SpeculativeDecoder(target, proposer, k=4).generate(PROMPTS[2], max_new_tokens=40)
        assert list(res.token_ids) == ref[: ref.index(eos) + 1]
        assert res.finished == "eos" and res.token_ids[-1] == eos


def test_kv_rollback_matches_full_recompute(tiny_target, near_draft):
    session = SpeculativeDecoder(tiny_target, DraftModel(near_draft), k=4, sampling=Sampling(1.0)).start(
        PROMPTS[0], max_new_tokens=40, seed=1
    )
    rejected = 0
    while not session.done:
        rec = session.step()
        rejected += rec.n_accepted < rec.k
        ctx = session.context
        # target: the cache holds ctx[:-1]; feeding ctx[-1] must give the full-recompute logits
        cache = copy.deepcopy(session.cache)
        via_cache = forward_logits(tiny_target.model, ctx[-1:], cache, 1)[0]
        full = tiny_target.model(ctx[None]).logits[0, -1]
        assert torch.allclose(via_cache, full, atol=1e-4)
        # draft: its cache holds state.ids; recompute its last position both ways
        st = session.proposer_state
        dcache = copy.deepcopy(st.cache)
        rollback(dcache, len(st.ids) - 1)
        ids = torch.tensor(st.ids)
        via_cache = forward_logits(near_draft.model, ids[-1:], dcache, 1)[0]
        assert torch.allclose(via_cache, near_draft.model(ids[None]).logits[0, -1], atol=1e-4)
    assert rejected > 0


def test_same_seed_same_run(tiny_target, tiny_draft):
    def run(seed):
        dec = SpeculativeDecoder(tiny_target, DraftModel(tiny_draft), k=3, sampling=Sampling(0.8, top_p=0.95))
        res = dec.generate(PROMPTS[0], max_new_tokens=30, seed=seed)
        strip = lambda s: replace(s, draft_ms=0, verify_ms=0, other_ms=0)  # noqa: E731
        return res.token_ids, [strip(s) for s in res.steps]

    a, b, c = run(7), run(7), run(8)
    assert a == b
    assert a[0] != c[0]


@pytest.mark.parametrize("kind", ["draft", "ngram", "target-only"])
def test_sampled_first_two_tokens_follow_the_target(tiny_target, tiny_draft, kind):
    """TV of the first and second sampled tokens (38 cells) from the exact target law, N = 1500 runs:
    exact sampling gives TV1 ~ 0.043-0.048 (99.9%: 0.073), TV2 ~ 0.054 (99.9%: 0.081), threshold 0.08
    (seen: draft 0.044 / 0.056, ngram 0.039 / 0.058, target-only 0.037 / 0.055). Resampling from p
    instead of the residual moves TV1 by 0.17 (draft) / 0.19 (ngram): seen 0.191 / 0.195 > 0.12."""
    sampling = Sampling(3.0)  # flat enough that p and q differ a lot: a wrong rule shows
    proposer = {"draft": lambda: DraftModel(tiny_draft), "ngram": NGram, "target-only": lambda: None}[kind]()
    prompt = checks.ngram_friendly_prompt(tiny_target, sampling) if kind == "ngram" else "hello hello hello hel"
    decoder = SpeculativeDecoder(tiny_target, proposer, k=3, sampling=sampling)
    n = 1500
    ok1, ok2 = checks.first_two_tv(decoder, prompt, n)
    assert ok1 < 0.08 and ok2 < 0.08, (ok1, ok2)
    if proposer is not None:  # the same check catches a wrong rule: resampling from p
        with checks.wrong_rule():
            bad1, _ = checks.first_two_tv(decoder, prompt, n)
        assert bad1 > 0.12, (ok1, bad1)


@pytest.mark.parametrize("kind", ["vocab-draft", "cross", "draft-tree"])
def test_the_statistical_sampler_draws_what_generate_draws(tiny_target, tiny_draft, near_draft, bpe_draft, kind):
    """checks.first_two_tokens (one prefill, a draft's state carried over, stopped at two tokens)
    gives exactly generate()'s first two tokens, seed for seed: its speed-ups change no draw."""
    from specviz.proposers import CrossTokenizerDraft, DraftTree
    from specviz.proposers.vocab import with_vocab_subset

    proposer, k, length = {
        "vocab-draft": (lambda: DraftModel(with_vocab_subset(tiny_draft, tiny_target, 8)), 3, 3),
        "cross": (lambda: CrossTokenizerDraft(bpe_draft), 3, 3),
        "draft-tree": (lambda: DraftTree(near_draft, nodes=6, width=3), 2, 2),
    }[kind]
    decoder = SpeculativeDecoder(tiny_target, proposer(), k=k, sampling=Sampling(3.0))
    prompt = "hello hello hello hel"
    fast = list(checks.first_two_tokens(decoder, prompt, range(20), max_new_tokens=length))
    slow = [decoder.generate(prompt, max_new_tokens=length, seed=s).token_ids for s in range(20)]
    assert fast == [(t[0], t[1] if len(t) > 1 else -1) for t in slow]
    assert len(set(fast)) > 5  # the seeds really draw different tokens


class Counter(Hook):
    def __init__(self):
        self.calls = []

    def on_start(self, s):
        self.calls.append("start")

    def on_draft(self, s, p):
        self.calls.append("draft")

    def on_verify(self, s, v):
        self.calls.append("verify")

    def on_step(self, s, r):
        self.calls.append("step")

    def on_finish(self, s, r):
        self.calls.append("finish")


def test_hooks_see_every_step_in_order(tiny_target, near_draft):
    h = Counter()
    res = SpeculativeDecoder(tiny_target, DraftModel(near_draft), k=2).generate(PROMPTS[0], max_new_tokens=10, hooks=[h])
    assert h.calls[0] == "start" and h.calls[-1] == "finish"
    assert h.calls[1:-1] == ["draft", "verify", "step"] * res.stats.steps


def test_trace_round_trip(tiny_target, near_draft, tmp_path):
    path = tmp_path / "run.jsonl"
    dec = SpeculativeDecoder(tiny_target, DraftModel(near_draft), k=3, sampling=Sampling(0.7))
    res = dec.generate(PROMPTS[0], max_new_tokens=20, seed=5, hooks=[TraceRecorder(path)])
    trace = load_trace(path)
    assert trace.header["target"] == "tiny-target" and trace.header["seed"] == 5 and trace.header["k"] == 3
    assert trace.steps == res.steps
    assert trace.stats == res.stats and trace.text == res.text


def test_records_hold_what_the_ui_needs(tiny_target, near_draft):
    res = SpeculativeDecoder(tiny_target, DraftModel(near_draft), k=4, sampling=Sampling(1.0)).generate(
        PROMPTS[0], max_new_tokens=40, seed=2
    )
    for s in res.steps:
        assert len(s.drafts) == s.k and s.draft_ms >= 0 and s.verify_ms > 0
        for d in s.drafts:
            assert len(d.top_p) == 10 and len(d.top_q) == 10
            assert d.ratio == pytest.approx(min(1.0, d.p / d.q), rel=1e-5)
            if d.verdict != "discarded":
                assert d.u is not None and (d.u <= d.ratio) == d.accepted
        if s.next_kind == "resampled":
            assert s.top_residual and s.drafts[s.n_accepted].verdict == "rejected"
    st = res.stats
    assert st.drafted == sum(s.k for s in res.steps) and st.new_tokens == 40
    assert st.mean_acceptance_length == pytest.approx(40 / st.steps)
    assert st.acceptance_rate == pytest.approx(st.accepted / st.drafted)
    assert st.target_forwards == st.steps + 1


def test_bad_input_raises_clear_errors(tiny_target, tokenizer):
    from transformers import GPT2TokenizerFast  # noqa: F401  (only to show the error names the fix)

    from tests.support import loaded, make_llama

    with pytest.raises(ValueError, match="from 1 to 32"):
        SpeculativeDecoder(tiny_target, NGram(), k=0)
    with pytest.raises(ValueError, match="from 1 to 32"):
        SpeculativeDecoder(tiny_target, NGram(), k=33)
    with pytest.raises(ValueError, match="prompt is empty"):
        SpeculativeDecoder(tiny_target, NGram()).start("   ")
    with pytest.raises(ValueError, match="max_new_tokens"):
        SpeculativeDecoder(tiny_target, NGram()).start("hi", max_new_tokens=0)
    other_tok = copy.deepcopy(tokenizer)
    other_tok.add_tokens(["<extra>"])
    other = loaded(make_llama(len(other_tok), 32, 1, seed=5), other_tok, "other-vocab")
    with pytest.raises(ValueError, match="tokenizer"):
        SpeculativeDecoder(tiny_target, DraftModel(other), k=2)


@pytest.fixture(scope="module")
def sliding_target(tokenizer):
    """A tiny Gemma 3 with an 8-token sliding window on most layers (like the built-in's 512)."""
    from specviz.analysis.checks import tiny_gemma3
    from tests.support import loaded

    return loaded(tiny_gemma3(len(tokenizer), seed=3, window=8), tokenizer, "tiny-gemma3-sliding")


def test_sliding_window_caches_roll_back_exactly(sliding_target):
    from tests.support import loaded, perturbed

    near = loaded(perturbed(sliding_target.model, 0.3, seed=1), sliding_target.tokenizer, "near")
    prompt = PROMPTS[0]  # 44 tokens: far past the 8-token window
    ref = hf_greedy(sliding_target, prompt, 40)
    for proposer in [DraftModel(near), NGram()]:
        res = SpeculativeDecoder(sliding_target, proposer, k=4).generate(prompt, max_new_tokens=40)
        assert list(res.token_ids) == ref
    session = SpeculativeDecoder(sliding_target, NGram(), k=4, sampling=Sampling(1.0)).start(prompt, max_new_tokens=30)
    rejected = 0
    while not session.done:
        rec = session.step()
        rejected += rec.n_accepted < rec.k
        cache = copy.deepcopy(session.cache)
        via_cache = forward_logits(sliding_target.model, session.context[-1:], cache, 1)[0]
        full = sliding_target.model(session.context[None]).logits[0, -1]
        assert torch.allclose(via_cache, full, atol=1e-4)
    assert rejected > 0


# -- bad input: the context window and damaged traces ------------------------------------------


@pytest.fixture(scope="module")
def short_target(tokenizer):
    """A tiny target whose context window is 64 positions, and that refuses to run at all: every
    test here must fail before the first forward pass."""
    from tests.support import loaded, make_llama

    model = make_llama(len(tokenizer), 32, 2, seed=0, max_position_embeddings=64)

    def no_forward(module, args, kwargs):
        raise AssertionError("a forward pass ran before the bad input was refused")

    model.register_forward_pre_hook(no_forward, with_kwargs=True)
    return loaded(model, tokenizer, "tiny-64")


@pytest.mark.parametrize("make", [
    lambda t: SpeculativeDecoder(t, NGram(), k=4).generate("the cat sat", max_new_tokens=10**6),
    lambda t: SpeculativeDecoder(t, None).start("the cat sat", max_new_tokens=10**6),
    lambda t: autoregressive(t, "the cat sat", max_new_tokens=10**6),
])
def test_max_new_tokens_past_the_context_window_is_refused_before_any_forward(short_target, make):
    n = len(encode_prompt(short_target.tokenizer, "the cat sat"))
    with pytest.raises(ValueError) as err:
        make(short_target)
    msg = str(err.value)
    assert f"the prompt has {n} tokens and max_new_tokens=1000000" in msg
    assert "tiny-64's context window is 64 tokens" in msg
    assert f"lower max_new_tokens to at most {64 - n}" in msg


def test_the_largest_max_new_tokens_that_fits_is_accepted(short_target):
    n = len(encode_prompt(short_target.tokenizer, "the cat sat"))
    session = SpeculativeDecoder(short_target, None).start("the cat sat", max_new_tokens=64 - n)
    assert session.max_new_tokens == 64 - n  # no step taken: the model refuses forwards here
    with pytest.raises(ValueError, match=f"at most {64 - n}"):
        SpeculativeDecoder(short_target, None).start("the cat sat", max_new_tokens=64 - n + 1)


def test_a_prompt_longer_than_the_context_window_is_refused(short_target):
    prompt = "the cat sat on the mat. " * 5  # 120 characters, one token each
    with pytest.raises(ValueError, match=r"the prompt has 121 tokens, but tiny-64's context window is 64 tokens; shorten the prompt"):
        SpeculativeDecoder(short_target, NGram()).generate(prompt, max_new_tokens=1)


def test_context_window_of_configs():
    from transformers import Gemma3Config, Gemma3TextConfig, LlamaConfig

    from specviz.runtime.kv import context_window

    class M:
        def __init__(self, config):
            self.config = config

    assert context_window(M(LlamaConfig(max_position_embeddings=77))) == 77
    text = Gemma3TextConfig(max_position_embeddings=99, vocab_size=64, hidden_size=16, num_hidden_layers=1)
    assert context_window(M(Gemma3Config(text_config=text))) == 99  # multimodal: the text config's
    assert context_window(M(object())) is None  # no limit stated: nothing to check


def _good_trace(tiny_target, tmp_path):
    path = tmp_path / "good.jsonl"
    SpeculativeDecoder(tiny_target, NGram(), k=2).generate(PROMPTS[0], max_new_tokens=6, hooks=[TraceRecorder(path)])
    return path.read_text(encoding="utf-8").splitlines()


@pytest.mark.parametrize("damage, line, match", [
    (lambda ls: ls[:2] + ["{not json"] + ls[2:], 3, "not JSON"),
    (lambda ls: ls[1:], 1, "before the header"),
    (lambda ls: [ls[0], ls[1].replace('"n_accepted"', '"n_acceptedX"')] + ls[2:], 2, "step line with missing or bad fields"),
    (lambda ls: ls[:1] + ["[1, 2, 3]"] + ls[1:], 2, "not a trace line"),
    (lambda ls: ls[:-1] + ['{"type": "finish", "stats": {"steps": 1}}'], None, "finish line with missing or bad fields"),
])
def test_a_damaged_trace_names_the_file_and_the_line(tiny_target, tmp_path, damage, line, match):
    lines = damage(_good_trace(tiny_target, tmp_path))
    bad = tmp_path / "damaged.jsonl"
    bad.write_text("\n".join(lines) + "\n", encoding="utf-8")
    n = line if line is not None else len(lines)
    with pytest.raises(ValueError, match=rf"^damaged\.jsonl, line {n}: .*{match}"):
        load_trace(bad)
    load_trace(tmp_path / "good.jsonl")  # the undamaged file still loads


def test_a_trace_without_a_header_or_not_text_is_refused(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n", encoding="utf-8")
    with pytest.raises(ValueError, match="empty.jsonl is not a specviz trace: it has no header line"):
        load_trace(empty)
    binary = tmp_path / "picture.png"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe")
    with pytest.raises(ValueError, match="picture.png is not a specviz trace: it is not UTF-8"):
        load_trace(binary)


def test_one_definition_of_the_per_position_rates(tiny_target, near_draft):
    # position i: steps that accepted more than i drafts / steps that drafted more than i (vLLM's)
    assert position_counts([2, 0, 3, 1, 5], [3, 2, 3, 0, 2]) == ([3, 3, 1], [4, 4, 2])
    assert position_counts([], []) == ([], [])
    res = SpeculativeDecoder(tiny_target, DraftModel(near_draft), k=3, sampling=Sampling(1.0), schedule="heuristic").generate(
        PROMPTS[0], max_new_tokens=30, seed=1)
    hits, trials = step_position_counts(res.steps)
    assert res.stats.per_position == tuple(h / t for h, t in zip(hits, trials)) and len(trials) == max(s.k for s in res.steps)
    remote = positions_from_steps([min(s.n_accepted, s.n_committed) for s in res.steps], [s.k for s in res.steps])
    assert remote == (hits, trials)  # the serving engines' per-step arrays count alike
