"""The static one-token decode step (specviz.runtime.static_decode) against the transformers forward it
replaces: the same logits (to float rounding) for Llama and Gemma 3 (sliding window included),
through prefill, token-by-token growth past the buffers' capacity, rollback and copies; and the
draft proposers that use it stay exact."""

import copy

import pytest
import torch

from specviz import SpeculativeDecoder, tuning
from specviz.proposers import DraftModel
from specviz.runtime import projections, state, static_decode
from specviz.runtime.body import EAGER, Runner
from specviz.runtime.kv import forward_logits, new_cache, rollback
from specviz.runtime.static_decode import StaticKV, static_cache, supports
from tests.support.kernel import NEEDS_OP
from tests.support.tiny import loaded, perturbed
from tests.test_engine import PROMPTS, hf_greedy


def tiny_gemma(vocab_size: int, seed: int = 0, sliding_window: int = 4):
    """A random 3-layer Gemma 3 text model with a 4-token (or ``sliding_window``) window on its first two layers."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    torch.manual_seed(seed)
    config = Gemma3TextConfig(
        vocab_size=vocab_size, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=16, sliding_window=sliding_window, max_position_embeddings=1024,
        layer_types=["sliding_attention", "sliding_attention", "full_attention"], bos_token_id=1, eos_token_id=2,
        pad_token_id=0, attn_implementation="sdpa",
    )
    model = Gemma3ForCausalLM(config).eval()
    with torch.no_grad():
        for p in model.parameters():  # norms start at zero (scale 1 + w = 1): give them weight too
            p.add_(torch.randn(p.shape) * 0.05)
        model.lm_head.weight.mul_(20.0)  # peaked distributions, like a trained model's
    return model


@pytest.fixture(scope="module")
def gemma(tokenizer):
    return loaded(tiny_gemma(len(tokenizer)), tokenizer, "tiny-gemma")


@pytest.fixture(params=["llama", "gemma"])
def model(request, tiny_target, gemma):
    return tiny_target if request.param == "llama" else gemma


def reference_logits(model, ids: list[int]) -> torch.Tensor:
    """Next-token logits after every prefix of ``ids`` from one uncached transformers forward -> [n, V]."""
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float()


def test_which_models_are_served(tiny_target, gemma):
    assert supports(tiny_target.model) is None and supports(gemma.model) is None
    from transformers import GPT2Config, GPT2LMHeadModel

    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=37, n_embd=32, n_layer=1, n_head=2)).eval()
    assert "architecture 'gpt2'" in supports(gpt2)
    assert static_cache(gpt2) is None
    half = copy.deepcopy(tiny_target.model).to(torch.float16)  # bfloat16 is served (tests/test_static_bf16.py)
    assert "float32 or bfloat16" in supports(half)


def test_the_logits_are_the_transformers_forwards(model, monkeypatch):
    monkeypatch.setattr(static_decode, "MIN_CAPACITY", 8)  # grow the buffers twice on the way
    monkeypatch.setattr(static_decode, "SPAN", 4)  # and attend over views of several widths
    ids = [1] + [(7 * i + 3) % 30 + 3 for i in range(29)]  # 30 tokens: past every sliding window
    want = reference_logits(model.model, ids)  # [30, V]
    cache = static_cache(model.model)
    assert isinstance(cache, StaticKV)
    got = [forward_logits(model.model, torch.tensor(ids[:10]), cache, 2)]  # the batched prefill, 2 rows kept
    for i in range(10, 30, 1):
        got.append(forward_logits(model.model, torch.tensor(ids[i : i + 1]), cache, 1))  # one static step
    got = torch.cat(got)  # [21, V]: positions 8..29
    assert cache.get_seq_length() == 30 and cache.capacity == 32
    torch.testing.assert_close(got, want[8:], atol=2e-4, rtol=1e-4)


def test_rollback_and_copies(model):
    ids = [1] + [(5 * i + 4) % 30 + 3 for i in range(15)]  # 16 tokens
    want = reference_logits(model.model, ids)
    cache = static_cache(model.model)
    forward_logits(model.model, torch.tensor(ids[:6]), cache, 1)
    forward_logits(model.model, torch.tensor([9, 9, 9]), cache, 1)  # a wrong continuation ...
    rollback(cache, 6)  # ... taken back
    twin = copy.deepcopy(cache)
    assert twin.decoder is cache.decoder and twin.keys is not cache.keys
    got = forward_logits(model.model, torch.tensor(ids[6:]), cache, 10)  # several tokens, one step each
    torch.testing.assert_close(got, want[6:], atol=2e-4, rtol=1e-4)
    torch.testing.assert_close(forward_logits(model.model, torch.tensor(ids[6:7]), twin, 1), want[6:7], atol=2e-4, rtol=1e-4)
    with pytest.raises(ValueError):
        cache.crop(3)


def test_a_rollback_into_the_prompt_past_the_window(model):
    """The prefill keeps every prompt position, sliding layers too: a rollback into the prompt
    (a draft tree whose whole tree was rejected re-feeds the prompt's last token) reads the
    window's earlier keys, not zeros."""
    ids = [1] + [(3 * i + 4) % 30 + 3 for i in range(13)]  # 14 tokens, past the 4-token window
    want = reference_logits(model.model, ids)
    cache = static_cache(model.model)
    forward_logits(model.model, torch.tensor(ids), cache, 1)
    rollback(cache, 9)
    torch.testing.assert_close(forward_logits(model.model, torch.tensor(ids[9:]), cache, 5), want[9:], atol=2e-4, rtol=1e-4)


@pytest.mark.parametrize("first", [1, 5])
def test_one_step_serves_any_number_of_tokens(model, monkeypatch, first):
    """The target's verify pass feeds k + 1 tokens at once, a draft one: the same step
    (built on whichever comes first) gives the transformers logits for every width, rollbacks
    between them included, with the sliding window cutting inside a multi-token feed."""
    monkeypatch.setattr(static_decode, "MIN_CAPACITY", 8)
    monkeypatch.setattr(static_decode, "SPAN", 4)
    ids = [1] + [(11 * i + 2) % 30 + 3 for i in range(39)]  # 40 tokens
    want = reference_logits(model.model, ids)  # [40, V]
    state.of(model.model).decoder = None  # built anew, on a feed of `first` tokens
    cache = static_cache(model.model)
    forward_logits(model.model, torch.tensor(ids[:3]), cache, 1)
    at = 3
    for n in [first, 1, 3, 9, 2, 1, 6, 4]:
        got = forward_logits(model.model, torch.tensor(ids[at : at + n] + [29] * 2), cache, n + 2)[:n]  # 2 wrong tokens ...
        torch.testing.assert_close(got, want[at : at + n], atol=2e-4, rtol=1e-4)
        at += n
        rollback(cache, at)  # ... rolled back, as after a rejection
    assert cache.get_seq_length() == at == 29 + first


def test_a_token_tree_scores_and_compacts_as_the_transformers_forward(model, monkeypatch):
    """The target's tree step on the static buffers: the same logits as kv.score_tree on a
    DynamicCache (tree mask, depth positions, the sliding window by position), and after keeping
    the accepted path the cache continues as if only that path had been fed."""
    from specviz.runtime.kv import keep_path, score_tree

    monkeypatch.setattr(static_decode, "SPAN", 4)
    ctx = [1] + [(7 * i + 5) % 30 + 3 for i in range(10)]  # 11 tokens: past the 4-token window
    root = torch.tensor(ctx[-1:])
    tokens = torch.tensor([5, 9, 12, 7, 30, 4])
    parents = torch.tensor([-1, 0, 0, 1, -1, 4])  # two branches from the root, one forking
    caches = [static_cache(model.model), new_cache(model.model)]
    logits = []
    for cache in caches:
        forward_logits(model.model, torch.tensor(ctx[:-1]), cache, 1)
        logits.append(score_tree(model.model, cache, root, tokens, parents))  # [7, V]
    torch.testing.assert_close(logits[0], logits[1], atol=2e-4, rtol=1e-4)
    path = [0, 1, 3]  # root -> 5 -> 9 -> 7
    kept = ctx + [5, 9, 7]
    want = reference_logits(model.model, kept + [8, 11])
    for cache in caches:
        keep_path(cache, int(tokens.shape[0]), path)
        rollback(cache, len(kept) - 1)
        assert cache.get_seq_length() == len(kept) - 1
        got = forward_logits(model.model, torch.tensor([7, 8, 11]), cache, 3)
        torch.testing.assert_close(got, want[len(kept) - 1 :], atol=2e-4, rtol=1e-4)


def test_a_draft_trees_levels_score_as_the_transformers_forward(model, monkeypatch):
    """A draft tree feeds level by level, each on top of the levels fed before it this step: on
    the static buffers each level's logits are kv.tree_forward_logits's on a DynamicCache (the
    earlier levels' slots by the mask, the sliding window by position), and the kept path
    continues as if only it had been fed."""
    from specviz.runtime.kv import keep_slots, tree_forward_logits

    monkeypatch.setattr(static_decode, "SPAN", 4)
    ctx = [1] + [(5 * i + 2) % 30 + 3 for i in range(9)]  # 10 tokens: past the 4-token window
    levels = [([6, 11], [-1, -1]), ([8, 3], [0, 0]), ([20, 9], [2, 3])]  # tokens, parent slot per level
    caches = [static_cache(model.model), new_cache(model.model)]
    got = []
    for cache in caches:
        forward_logits(model.model, torch.tensor(ctx), cache, 1)
        parents: list[int] = []
        depth: list[int] = []
        out = []
        for tokens, par in levels:
            T, m = len(parents), len(tokens)
            visible = torch.zeros(m, T + m, dtype=torch.bool)
            for j, a in enumerate(par):
                visible[j, T + j] = True
                while a >= 0:
                    visible[j, a] = True
                    a = parents[a]
            parents += par
            depth += [depth[a] + 1 if a >= 0 else 1 for a in par]
            slot_pos = torch.tensor([len(ctx) + d - 1 for d in depth])  # [T + m]
            out.append(tree_forward_logits(model.model, cache, torch.tensor(tokens), slot_pos[T:], visible, slot_pos))
        got.append(torch.cat(out))  # [6, V]
        keep_slots(cache, 6, [0, 2, 4])  # the path 6 -> 8 -> 20
    torch.testing.assert_close(got[0], got[1], atol=2e-4, rtol=1e-4)
    want = reference_logits(model.model, ctx + [6, 8, 20, 7])
    for cache in caches:
        torch.testing.assert_close(forward_logits(model.model, torch.tensor([7]), cache, 1), want[-1:], atol=2e-4, rtol=1e-4)


def test_target_steps_run_on_it_and_stay_exact(tiny_target, gemma, monkeypatch):
    """Target-only decoding, a chain step's verify pass and a token tree's run the target's static
    step; greedy output is the target's own token for token."""
    from specviz import autoregressive
    from specviz.core.engine import Session
    from specviz.proposers import NGram, NGramTree

    for target in (tiny_target, gemma):
        for proposer in (NGram(), NGramTree()):
            assert isinstance(Session(SpeculativeDecoder(target, proposer, k=4), list(range(1, 9)), 8, 0, (), "").cache, StaticKV)
        for prompt in PROMPTS:
            want = hf_greedy(target, prompt, 24)
            assert list(autoregressive(target, prompt, max_new_tokens=24).token_ids) == want
            for proposer in (NGram(), NGramTree()):
                assert list(SpeculativeDecoder(target, proposer, k=4).generate(prompt, max_new_tokens=24).token_ids) == want
    monkeypatch.setenv("SPECVIZ_STATIC_DECODE", "0")
    assert not isinstance(Session(SpeculativeDecoder(gemma, NGram(), k=4), [1, 2, 3], 8, 0, (), "").cache, StaticKV)


@torch.no_grad()
def test_an_int_mm_int8_body_runs_eagerly_at_every_width(gemma):
    """An int_mm int8 copy (per-token activation scales for all rows at once, q/k/v and gate/up
    fused, torch._int_mm), which the fused runner does not serve, runs on the eager body: one step
    feeds a chain's tokens several at a time and scores a tree, with its transformers forward's
    distributions."""
    static = int8_matches(gemma.model, "int_mm")
    assert static.decoder.runner == "eager"
    assert len(static.decoder.body.fused) == 2 * len(gemma.model.model.layers)


@torch.no_grad()
@pytest.mark.parametrize("runner", ["eager", "fused"])
def test_a_blocked_int8_body_serves_every_width_on_specviz_own_kernel(gemma, monkeypatch, runner):
    """kernel="blocked" (specviz.runtime.int8_kernel): one step for every width, eager or
    each layer one op (fused), the same distributions as its transformers forward (which calls the fused layer's rows)."""
    from specviz.runtime import int8_kernel

    if int8_kernel.load() is not None:
        pytest.skip(f"the int8 kernel cannot be built here: {int8_kernel.load()}")
    monkeypatch.setenv("SPECVIZ_STATIC_DECODE", runner)
    static = int8_matches(gemma.model, "blocked")
    assert static.decoder.runner == runner
    assert len(static.decoder.body.fused) == 2 * len(gemma.model.model.layers)


@torch.no_grad()
def int8_matches(model, kernel: str = "int_mm") -> StaticKV:
    """An int8 copy of ``model`` on its static step (the runner SPECVIZ_STATIC_DECODE names): the
    prompt, one token, three at once, a 5-wide tree, its path kept and two tokens more give the
    distributions of its transformers forward. -> the static cache."""
    from specviz.models.int8 import Int8Options, quantize_int8
    from specviz.runtime.kv import keep_path, score_tree

    q8 = quantize_int8(copy.deepcopy(model), options=Int8Options(smooth_alpha=None, kernel=kernel))
    ids = [1, 5, 9, 12, 7, 5, 9, 30, 4, 8, 6, 3, 10]
    dynamic, static = new_cache(q8), static_cache(q8)

    def close(a, b):  # int8 rounding may differ, the distribution does not
        for x, y in zip(torch.softmax(a, -1), torch.softmax(b, -1)):
            assert float(torch.minimum(x, y).sum()) > 0.97

    for feed in (ids[:4], ids[4:5], ids[5:8]):  # the prompt, one token, three at once
        keep = len(feed)
        close(forward_logits(q8, torch.tensor(feed), dynamic, keep), forward_logits(q8, torch.tensor(feed), static, keep))
    tokens, parents = torch.tensor(ids[9:]), torch.tensor([-1, 0, 0, 1])  # after the root ids[8]
    close(score_tree(q8, dynamic, torch.tensor(ids[8:9]), tokens, parents), score_tree(q8, static, torch.tensor(ids[8:9]), tokens, parents))
    for cache in (dynamic, static):
        keep_path(cache, 4, [0, 1])
        rollback(cache, 10)
    close(forward_logits(q8, torch.tensor([4, 2]), dynamic, 2), forward_logits(q8, torch.tensor([4, 2]), static, 2))
    return static


def test_drafts_use_it_and_stay_exact(tiny_target, gemma, monkeypatch):
    draft = loaded(perturbed(gemma.model, 0.1, seed=3), gemma.tokenizer, "tiny-gemma-near")
    proposer = DraftModel(draft)
    assert isinstance(proposer.init_state(gemma).cache, StaticKV)
    for k in (1, 4):
        dec = SpeculativeDecoder(gemma, proposer, k=k)
        for prompt in PROMPTS:
            res = dec.generate(prompt, max_new_tokens=24)
            assert list(res.token_ids) == hf_greedy(gemma, prompt, 24)
    assert dec.generate(PROMPTS[0], max_new_tokens=24).stats.acceptance_rate > 0.3  # the drafts are good ones
    monkeypatch.setenv("SPECVIZ_STATIC_DECODE", "0")
    assert not isinstance(DraftModel(draft).init_state(gemma).cache, StaticKV)


def test_the_step_is_built_once_per_model_and_freed_with_it(tokenizer):
    import gc
    import weakref

    model = tiny_gemma(len(tokenizer), seed=5)
    a, b = static_cache(model), static_cache(model)
    assert a.decoder is b.decoder and a is not b
    forward_logits(model, torch.tensor([1, 5, 9]), a, 1)
    gone = weakref.ref(model)
    del model, a, b
    gc.collect()
    assert gone() is None


def test_warm_builds_the_step_before_a_session_and_changes_nothing(tokenizer):
    """warm() builds the step up front (the app calls it while loading), once; a session after it
    builds nothing at any width and gives the transformers forward's greedy tokens as before."""
    model = tiny_gemma(len(tokenizer), seed=6)
    assert static_cache(model).decoder.runner is None
    assert static_decode.warm(model, (1, 5)) > 0 and static_cache(model).decoder.runner == "eager"
    assert static_decode.warm(model) == 0.0  # built already
    built = static_decode.build_seconds()
    lm = loaded(model, tokenizer, "tiny-gemma-warm")
    for prompt in PROMPTS[:2]:
        assert list(SpeculativeDecoder(lm, None).generate(prompt, max_new_tokens=12).token_ids) == hf_greedy(lm, prompt, 12)
    assert static_decode.build_seconds() == built


# -- the runners: eager and fused (specviz.runtime.layer_op) --------------------------------------


def chains_match(model, widths=(1, 4, 1, 9, 2, 6)) -> StaticKV:
    """Feeds of ``widths`` tokens, each with two wrong tokens after it rolled back, give the
    transformers logits (the sliding window cutting inside a feed). -> the static cache."""
    ids = [1] + [(11 * i + 2) % 30 + 3 for i in range(39)]  # 40 tokens
    want = reference_logits(model, ids)  # [40, V]
    cache = static_cache(model)
    forward_logits(model, torch.tensor(ids[:3]), cache, 1)
    at = 3
    for n in widths:
        got = forward_logits(model, torch.tensor(ids[at : at + n] + [29] * 2), cache, n + 2)[:n]
        torch.testing.assert_close(got, want[at : at + n], atol=2e-4, rtol=1e-4)
        at += n
        rollback(cache, at)
    return cache


def tree_matches(model) -> None:
    """A 6-node tree's logits on the static step as on a DynamicCache; after its path is kept both
    continue as the transformers forward over the accepted tokens."""
    from specviz.runtime.kv import keep_path, score_tree

    ctx = [1] + [(7 * i + 5) % 30 + 3 for i in range(12)]  # 13 tokens: past an 8-token window
    tokens, parents = torch.tensor([5, 9, 12, 7, 30, 4]), torch.tensor([-1, 0, 0, 1, -1, 4])
    caches = [static_cache(model), new_cache(model)]
    logits = []
    for cache in caches:
        forward_logits(model, torch.tensor(ctx[:-1]), cache, 1)
        logits.append(score_tree(model, cache, torch.tensor(ctx[-1:]), tokens, parents))  # [7, V]
    torch.testing.assert_close(logits[0], logits[1], atol=2e-4, rtol=1e-4)
    kept = ctx + [5, 9, 7]  # root -> 5 -> 9 -> 7
    want = reference_logits(model, kept + [8, 11])
    for cache in caches:
        keep_path(cache, int(tokens.shape[0]), [0, 1, 3])
        rollback(cache, len(kept) - 1)
        torch.testing.assert_close(forward_logits(model, torch.tensor([7, 8, 11]), cache, 3), want[len(kept) - 1 :],
                                   atol=2e-4, rtol=1e-4)


@pytest.fixture
def fresh(tiny_target):
    """The tiny target as a new model (so a new static step, built under the test's settings)."""
    return loaded(copy.deepcopy(tiny_target.model), tiny_target.tokenizer, "tiny-fresh-target")


@pytest.mark.parametrize("when", ["build", "call"])
def test_a_failing_runner_gives_way_to_eager_with_the_same_tokens(fresh, monkeypatch, caplog, when):
    """A runner that raises at build, or at a call after a few good ones, leaves that model on the
    eager body: said once in the log with the reason, and greedy output is the target's own."""
    from specviz.proposers import NGram

    calls = []

    def flaky(body, example):
        if when == "build":
            raise RuntimeError("no compiler here")

        def step(*args):
            calls.append(1)
            if len(calls) > 3:
                raise RuntimeError("no compiler here")
            return body(*args)

        return step

    monkeypatch.setitem(static_decode.RUNNERS, "fused", Runner("fused", flaky))
    monkeypatch.setenv("SPECVIZ_STATIC_DECODE", "fused")
    with caplog.at_level("WARNING", logger="specviz.runtime.static_decode"):
        for prompt in PROMPTS:
            want = hf_greedy(fresh, prompt, 16)
            assert list(SpeculativeDecoder(fresh, NGram(), k=4).generate(prompt, max_new_tokens=16).token_ids) == want
    said = [r.getMessage() for r in caplog.records if "fused" in r.getMessage()]
    assert len(said) == 1 and "no compiler here" in said[0], said
    assert state.of(fresh.model).decoder.runner == "eager"
    assert len(calls) == (0 if when == "build" else 4)


@NEEDS_OP[0]
def test_by_default_fused_serves_where_it_can_without_timing(gemma, monkeypatch, caplog, specviz_op):
    """Unset, the step runs fused where layer_op.why_not allows (an int8 copy on specviz's kernel) and
    times nothing, so a model runs the same kernels, and gives the same floats, on every start; a
    float32 body the fused runner does not serve runs eagerly."""
    monkeypatch.delenv("SPECVIZ_STATIC_DECODE", raising=False)
    with caplog.at_level("INFO", logger="specviz.runtime.static_decode"):
        decoder = int8_matches(gemma.model, "blocked").decoder
    assert decoder.runner == "fused"
    assert [r.getMessage() for r in caplog.records if "built" in r.getMessage()] == [
        f"specviz: built the fused static decode step of {decoder.label} in {decoder.build_s:.1f} s"]
    assert static_decode.build_seconds() > 0 and decoder.runner in static_decode.runners_kept()
    plain = static_decode.StaticDecoder(copy.deepcopy(gemma.model)).body
    assert static_decode.runner_for(plain) is EAGER


@pytest.mark.parametrize("value, mode", [("", "auto"), ("1", "auto"), ("0", "off"), ("off", "off"), ("eager", "eager"),
                                         ("FUSED", "fused"), ("fastest", "auto"),
                                         ("all", "auto"), ("export", "auto"), ("compile", "auto")])  # removed runners
def test_the_setting(monkeypatch, caplog, value, mode):
    monkeypatch.setenv("SPECVIZ_STATIC_DECODE", value)
    static_decode._say_unknown.cache_clear()
    with caplog.at_level("WARNING", logger="specviz.runtime.static_decode"):
        assert static_decode.mode() == mode and static_decode.enabled() == (mode != "off")
        static_decode.mode()
    warned = "".join(r.getMessage() for r in caplog.records)  # once, and why for a removed runner
    assert warned.count("SPECVIZ_STATIC_DECODE") == (value in ("fastest", "all", "export", "compile"))
    assert ("removed" in warned) == (value in ("all", "export", "compile"))


# -- the projections' kernels (specviz.runtime.projections.plan_projections) ---------------------------------


def _plan(kind: str):
    """A stand-in for the model's kernel plan (specviz.runtime.plan.of): "mixed": F.linear at one row,
    oneDNN on the packed copies from two (gemma-3-270m's q/k/v on a Zen 4 before the blocked
    product); "packed": oneDNN's packed copies at every width; "blocked": specviz's own product at
    every width (its op built here)."""
    from specviz.runtime import plan as kernel_plan

    by_width = {"mixed": {1: "F.linear", 2: "oneDNN packed"}, "packed": {1: "oneDNN packed"},
                "blocked": {1: "specviz blocked"}}[kind]
    tuned = kernel_plan.Plan("stand-in", {k: kernel_plan.KindPlan(by_width) for k in ("qkv", "o", "gate_up", "down")})
    return lambda model: tuned


@pytest.mark.parametrize("runner", ["eager", pytest.param("fused", marks=NEEDS_OP[0])])
@pytest.mark.parametrize("timing", ["mixed", "packed", pytest.param("blocked", marks=NEEDS_OP[0])])
def test_planned_projections_give_the_transformers_logits(runner, timing, tiny_target, tokenizer, monkeypatch, tmp_path,
                                                          request):
    """q/k/v and gate/up fused, and every projection kind on the kernel its plan names per width
    (oneDNN at some widths, F.linear at others, or one kernel everywhere): the same logits as the
    transformers forward for chains, rollbacks and a tree; the members' weights are views of the
    fused ones (no second copy)."""
    from specviz.runtime import kernels
    from specviz.runtime import plan as kernel_plan

    if timing == "blocked" or runner == "fused":
        request.getfixturevalue("specviz_op")  # built and loaded
    calls = []
    onednn = kernels._onednn
    monkeypatch.setattr(kernels, "_onednn", lambda *a: calls.append(a[0].shape[0]) or onednn(*a))
    monkeypatch.setenv("SPECVIZ_STATIC_DECODE", runner)
    monkeypatch.setenv("SPECVIZ_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(projections, "MIN_BODY_ELEMENTS", 0)  # tiny models' projections planned too
    monkeypatch.setattr(kernel_plan, "of", _plan(timing))
    monkeypatch.setattr(static_decode, "MIN_CAPACITY", 16)
    monkeypatch.setattr(static_decode, "SPAN", 8)
    for model in (copy.deepcopy(tiny_target.model), tiny_gemma(len(tokenizer), seed=7, sliding_window=8)):
        cache = chains_match(model)
        tree_matches(model)
        ids = [1] + [(5 * i + 3) % 30 + 3 for i in range(11)]  # one token at a time, as target-only decoding feeds
        want = reference_logits(model, ids)
        for at in range(len(ids) - 3, len(ids)):
            rollback(cache, at)
            if at == len(ids) - 3:
                rollback(cache, 0)
                forward_logits(model, torch.tensor(ids[:at]), cache, 1)
            torch.testing.assert_close(forward_logits(model, torch.tensor(ids[at : at + 1]), cache, 1), want[at : at + 1],
                                       atol=2e-4, rtol=1e-4)
        body = cache.decoder.body
        assert sorted(body.kernel_plans) == ["down", "gate_up", "o", "qkv"]
        attn = model.model.layers[0].self_attn
        fused = projections.fused_of(attn.q_proj, attn.k_proj, attn.v_proj)
        assert fused is not None and attn.q_proj.weight.data_ptr() == fused.weight.data_ptr()
        assert attn.k_proj.weight.untyped_storage().data_ptr() == fused.weight.untyped_storage().data_ptr()
        packs = kernels.pack(fused.weight) is not None
        # one row: F.linear in the mixed plan (the fused runner: specviz's float32 product at every width)
        assert timing == "blocked" or runner == "fused" or not packs or (calls and (timing == "packed" or 1 not in calls))
        assert not (timing == "blocked" and calls) and all((f.blocked is not None) is (timing == "blocked") for f in body.fused)
        assert cache.decoder.runner == runner
        if packs:  # a second copy only where a plan reads it
            assert all((f.packed is not None and f.packed.is_mkldnn) is (timing != "blocked") for f in body.fused)
        calls.clear()


def test_a_second_decoder_on_a_model_reuses_its_planned_layers(tiny_target, monkeypatch, tmp_path):
    """A second StaticDecoder on the same model (draft_cost.py's runners side by side) takes the
    first's planned layers instead of planning its own: one copy of the weights, and the first
    body's projections stay the ones it planned."""
    from specviz.runtime import kernels
    from specviz.runtime import plan as kernel_plan

    monkeypatch.setenv("SPECVIZ_STATIC_DECODE", "eager")
    monkeypatch.setenv("SPECVIZ_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(projections, "MIN_BODY_ELEMENTS", 0)
    monkeypatch.setattr(kernel_plan, "of", _plan("mixed"))  # oneDNN on the packed copies from two rows
    monkeypatch.setenv("SPECVIZ_STATIC_DECODE", "eager")  # the planned kernels themselves (not the fused op)
    model = copy.deepcopy(tiny_target.model)
    ids = [1] + [(11 * i + 2) % 30 + 3 for i in range(9)]
    want = reference_logits(model, ids)  # [10, V]
    first = static_decode.StaticDecoder(model).new_cache()
    forward_logits(model, torch.tensor(ids[:3]), first, 1)  # prefilled by the model's own forward: no graph yet
    second = static_decode.StaticDecoder(model)
    if kernels.pack(second.body.fused[0].weight) is None:
        pytest.skip("no packed oneDNN weights in this build")
    assert list(second.body.fused) == list(first.decoder.body.fused)  # the same layers, one copy of the weights
    forward_logits(model, torch.tensor(ids[:3]), second.new_cache(), 1)
    got = forward_logits(model, torch.tensor(ids[3:8]), first, 5)  # the first body's first graph: 5 rows, packed
    torch.testing.assert_close(got, want[3:8], atol=2e-4, rtol=1e-4)
    assert first.decoder.runner == "eager"


def test_a_projection_plan_is_read_never_measured(tiny_target, monkeypatch, tmp_path):
    """A decoder's projections take the kernels the model's plan names (feature defaults without
    one) and time nothing; SPECVIZ_CPU_KERNELS=0 leaves the projections alone."""
    from specviz.runtime import plan as kernel_plan

    monkeypatch.setenv("SPECVIZ_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(projections, "MIN_BODY_ELEMENTS", 0)
    monkeypatch.setattr(tuning, "time_kernels", lambda *a, **k: pytest.fail("timed while building a decoder"))
    body = static_decode.StaticDecoder(copy.deepcopy(tiny_target.model)).body
    want = kernel_plan.default_kernel("qkv")
    assert all(p.kernels == {1: want} and not p.cached for p in body.kernel_plans.values())
    assert all(f.kernels == (want,) * kernel_plan.WIDTHS[-1] for f in body.fused)
    monkeypatch.setenv("SPECVIZ_CPU_KERNELS", "0")
    off = static_decode.StaticDecoder(copy.deepcopy(tiny_target.model)).body
    assert off.kernel_plans == {} and len(off.fused) == 0


def test_an_early_exit_body_built_first_keeps_its_plain_layers_when_the_target_plans(tiny_target, monkeypatch, tmp_path):
    """An early-exit draft shares the target's first layers, and a sweep builds its body first (when
    it builds its decoders). Its kind too small to plan (the o projections of one layer) stays
    plain: layers a body reads stay as it left them, and the target plans the rest."""
    from specviz.proposers import EarlyExit
    from specviz.runtime import plan as kernel_plan

    monkeypatch.setenv("SPECVIZ_STATIC_DECODE", "eager")
    monkeypatch.setenv("SPECVIZ_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(kernel_plan, "of", _plan("mixed"))
    target = loaded(copy.deepcopy(tiny_target.model), tiny_target.tokenizer, "tiny-ee-target")
    layers = target.model.model.layers
    ee = EarlyExit(target, 1)
    monkeypatch.setattr(projections, "MIN_BODY_ELEMENTS", layers[0].self_attn.o_proj.weight.numel() + 1)
    SpeculativeDecoder(target, ee, k=2)  # builds the draft's body: its o projection is too small to plan
    assert projections.fused_of(layers[0].self_attn.o_proj) is None
    prompt = PROMPTS[0]
    want = SpeculativeDecoder(target, None).generate(prompt, max_new_tokens=12).token_ids  # the target's body
    assert projections.fused_of(layers[0].self_attn.o_proj) is None  # the draft's layer, left as it read it
    assert projections.fused_of(layers[1].self_attn.o_proj) is not None  # the target's own: planned
    for k in (1, 2, 3):
        assert SpeculativeDecoder(target, ee, k=k).generate(prompt, max_new_tokens=12).token_ids == want
    assert static_decode.static_cache(ee.model.model).decoder.runner == "eager"
    assert static_decode.static_cache(target.model).decoder.runner == "eager"
    assert list(want) == hf_greedy(target, prompt, 12)
