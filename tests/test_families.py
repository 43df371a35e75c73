"""Every llama-like family on the static step (specviz.runtime.body.FAMILIES): Llama, Mistral (a
window on every layer), Qwen2 (q/k/v bias, a sliding layer), Qwen3 (q/k norms), Gemma 3 text with
all layers sliding or none, and Phi-3 (fused qkv_proj and gate_up_proj; a partial rotary too),
each a tiny random checkpoint saved to disk and loaded with ``specviz.load_model`` as a user
would: the static step serves it, its logits are the ``transformers`` forward's through a prefill,
one-token steps, a k + 1 verify pass, rollbacks and a token tree (and in bfloat16 as close as that
forward's), greedy speculative output is ``generate()``'s
token for token, sampled output follows the target's law (a wrong rule fails the same check), the
fused runner writes each layer as the body does, and what cannot be served says why in a sentence
and keeps the ``transformers`` forward."""

import copy

import pytest
import torch

import specviz
from specviz import Sampling, SpeculativeDecoder, autoregressive
from specviz.analysis import checks
from specviz.proposers import DraftModel, NGram
from specviz.runtime import static_decode
from specviz.runtime.kv import forward_logits, rollback
from specviz.runtime.static_decode import StaticKV, static_cache, supports
from tests.support.kernel import NEEDS_OP
from tests.support.tiny import FAMILY_CONFIGS, hf_greedy, loaded, make_family_model, perturbed, save_family_model

FAMILIES = list(FAMILY_CONFIGS)  # the six families, Gemma 3's two other layer patterns and Phi-3's partial rotary
PROMPTS = ["the cat sat on the mat. the cat sat on the", "hello world, hello again. hello"]

# per family: (sliding layers, q/k normed, q/k/v biased, rotary dims of 16): what the body must have read
EXPECTED = {
    "llama": ([False, False], False, False, 16),
    "mistral": ([True, True], False, False, 16),
    "qwen2": ([False, True], False, True, 16),
    "qwen3": ([False, False], True, True, 16),
    "gemma3_text": ([True, True], True, False, 16),
    "gemma3_full": ([False, False], True, False, 16),
    "phi3": ([True, True], False, False, 16),
    "phi3_partial": ([False, False], False, False, 8),
}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """{family: its tiny checkpoint's directory}, saved once for the module."""
    root = tmp_path_factory.mktemp("families")
    return {family: save_family_model(family, root / family, seed=1) for family in FAMILIES}


@pytest.fixture(params=FAMILIES)
def family(request, checkpoints):
    """(name, the LoadedModel load_model gives for its checkpoint)."""
    return request.param, specviz.load_model(checkpoints[request.param])


def reference_logits(model, ids: list[int]) -> torch.Tensor:
    """Next-token logits after every prefix of ``ids``, one uncached transformers forward -> [n, V]."""
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float()


def close(got: torch.Tensor, want: torch.Tensor) -> None:
    torch.testing.assert_close(got, want, atol=2e-4, rtol=1e-4)


def test_each_family_is_served_by_the_static_step(family):
    """load_model's model takes the static step, its body having read the family's features from
    the saved config (windows, q/k norms, biases, rotary width): a wrong reading would also show in
    the logits below, this says which."""
    name, lm = family
    assert supports(lm.model) is None, supports(lm.model)
    cache = static_cache(lm.model)
    assert isinstance(cache, StaticKV)
    body = cache.decoder.body
    local, qk_norm, biased, rotary = EXPECTED[name]
    assert (body.local, body.qk_norm, body.rotary_dim) == (local, qk_norm, rotary)
    attn = lm.model.model.layers[0].self_attn
    qkv = attn.qkv_proj if name.startswith("phi3") else attn.q_proj
    assert (qkv.bias is not None) == biased
    assert cache.decoder.window == (lm.model.config.sliding_window if any(local) else None)


def test_the_logits_are_the_transformers_forwards(family, monkeypatch):
    """A 9-token prefill, six one-token steps, a k + 1 = 5 token verify pass, and two wrong
    tokens rolled back and re-fed: the transformers forward's logits at every position, past every
    window (4-5 tokens), the buffers growing on the way."""
    _, lm = family
    model = lm.model
    monkeypatch.setattr(static_decode, "MIN_CAPACITY", 8)  # the buffers double twice
    monkeypatch.setattr(static_decode, "SPAN", 4)  # attention over views of several widths
    ids = [1] + [(7 * i + 3) % 30 + 3 for i in range(23)]  # 24 tokens
    want = reference_logits(model, ids)  # [24, V]
    cache = static_cache(model)
    got = [forward_logits(model, torch.tensor(ids[:9]), cache, 2)]  # the prefill, its last 2 rows
    for i in range(9, 15):
        got.append(forward_logits(model, torch.tensor(ids[i : i + 1]), cache, 1))  # one-token steps
    got.append(forward_logits(model, torch.tensor(ids[15:20]), cache, 5))  # a verify pass of k + 1 = 5
    close(torch.cat(got), want[7:20])
    forward_logits(model, torch.tensor([9, 9]), cache, 1)  # a wrong continuation ...
    rollback(cache, 20)  # ... cropped
    close(forward_logits(model, torch.tensor(ids[20:]), cache, 4), want[20:])
    assert cache.get_seq_length() == 24 and cache.capacity == 32


def test_a_rollback_reaches_into_the_prompt_past_the_window(family):
    """A copy of the cache and a crop into the prompt (past the window): re-feeding gives the same
    logits as the first time and as the transformers forward."""
    _, lm = family
    model = lm.model
    ids = [1] + [(5 * i + 4) % 30 + 3 for i in range(15)]  # 16 tokens
    want = reference_logits(model, ids)
    cache = static_cache(model)
    first = forward_logits(model, torch.tensor(ids), cache, 9)  # [9, V]: positions 7..15
    twin = copy.deepcopy(cache)
    rollback(cache, 7)
    again = forward_logits(model, torch.tensor(ids[7:]), cache, 9)
    close(again, first)
    close(again, want[7:])
    rollback(twin, 12)
    close(forward_logits(model, torch.tensor(ids[12:]), twin, 4), want[12:])


def test_a_token_tree_scores_as_each_path_does(family):
    """A 6-node tree over a 13-token context (past every window) in one pass on the static step:
    each node's logits are the transformers forward's over the context and that node's path;
    after the path root -> 5 -> 9 -> 7 is kept, the next tokens score as that path's continuation."""
    from specviz.runtime.kv import keep_path, score_tree

    _, lm = family
    model = lm.model
    ctx = [1] + [(7 * i + 5) % 30 + 3 for i in range(12)]  # 13 tokens
    tokens, parents = [5, 9, 12, 7, 30, 4], [-1, 0, 0, 1, -1, 4]
    cache = static_cache(model)
    forward_logits(model, torch.tensor(ctx[:-1]), cache, 1)
    got = score_tree(model, cache, torch.tensor(ctx[-1:]), torch.tensor(tokens), torch.tensor(parents))  # [7, V]

    def path(i: int) -> list[int]:  # node i's tokens from the root's child down
        return [] if i < 0 else path(parents[i]) + [tokens[i]]

    want = torch.stack([reference_logits(model, ctx + path(i))[-1] for i in range(-1, len(tokens))])
    close(got, want)
    keep_path(cache, len(tokens), [0, 1, 3])
    kept = ctx + [5, 9, 7]
    rollback(cache, len(kept) - 1)
    close(forward_logits(model, torch.tensor([7, 8, 11]), cache, 3), reference_logits(model, kept + [8, 11])[len(kept) - 1 :])


def test_greedy_output_is_generates_token_for_token(family):
    """Target-only, an n-gram chain and a draft model of the same family (the target with noise on
    its weights: accepted often, rejected sometimes), all on the static step: greedy output equals
    ``model.generate()``'s."""
    name, lm = family
    draft = loaded(perturbed(lm.model, 0.1, seed=3), lm.tokenizer, f"tiny-{name}-near")
    assert isinstance(DraftModel(draft).init_state(lm).cache, StaticKV)  # the draft's steps too
    for prompt in PROMPTS:
        want = hf_greedy(lm, prompt, 20)
        assert list(autoregressive(lm, prompt, max_new_tokens=20).token_ids) == want
        for proposer in (NGram(), DraftModel(draft)):
            session = SpeculativeDecoder(lm, proposer, k=4).start(prompt, max_new_tokens=20)
            assert isinstance(session.cache, StaticKV)
            while not session.done:
                session.step()
            assert list(session.new_token_ids) == want, (name, type(proposer).__name__)


def test_sampled_output_follows_the_target(checkpoints):
    """As tests/test_engine.py's check, on the Phi-3 (fused projections, the window on every
    layer): TV of the first and second sampled tokens (38 cells) from the exact target law,
    computed from the transformers forward, over N = 1500 runs of the n-gram chain on the static
    step. Exact sampling: expected TV 0.025 / 0.029 at this N, seen 0.030 / 0.033, threshold 0.08;
    resampling from p instead of the residual: seen 0.236 on the first token, threshold 0.12."""
    name = "phi3"
    lm = specviz.load_model(checkpoints[name])
    sampling = Sampling(3.0)  # flat enough that a wrong rule shows
    decoder = SpeculativeDecoder(lm, NGram(), k=3, sampling=sampling)
    prompt = checks.ngram_friendly_prompt(lm, sampling)
    assert isinstance(decoder.start(prompt, max_new_tokens=2).cache, StaticKV)
    ok1, ok2 = checks.first_two_tv(decoder, prompt, 1500)
    assert ok1 < 0.08 and ok2 < 0.08, (ok1, ok2)
    with checks.wrong_rule():
        bad1, _ = checks.first_two_tv(decoder, prompt, 1500)
    assert bad1 > 0.12, (ok1, bad1)


def test_an_all_sliding_gemma3_runs_past_its_window(tokenizer):
    """A Gemma 3 whose every layer slides (it once raised KeyError 'full_attention'): served, its
    one rotary table the sliding layers', the same logits as transformers 30 tokens past a 4-token
    window, and greedy output equal to generate()'s."""
    model = make_family_model("gemma3_text", len(tokenizer), seed=4)
    assert set(model.config.layer_types) == {"sliding_attention"} and supports(model) is None
    ids = [1] + [(3 * i + 4) % 30 + 3 for i in range(33)]
    cache = static_cache(model)
    got = torch.cat([forward_logits(model, torch.tensor(ids[:6]), cache, 1)]
                    + [forward_logits(model, torch.tensor(ids[i : i + 2]), cache, 2) for i in range(6, 34, 2)])
    close(got, reference_logits(model, ids)[5:])
    lm = loaded(model, tokenizer, "tiny-gemma3-all-sliding")
    assert list(autoregressive(lm, PROMPTS[0], max_new_tokens=16).token_ids) == hf_greedy(lm, PROMPTS[0], 16)


def _refused():
    """(family, config fields, what the sentence names): configs the body cannot serve exactly."""
    return [
        ("phi3", dict(rope_parameters=dict(rope_type="longrope", rope_theta=10000.0, short_factor=[1.0] * 8,
                                            long_factor=[4.0] * 8, original_max_position_embeddings=64)), "longrope"),
        ("llama", dict(rope_parameters=dict(rope_type="dynamic", rope_theta=10000.0, factor=2.0)), "dynamic"),
        ("mistral", dict(hidden_act="gelu"), "activation 'gelu'"),
        ("gemma3_text", dict(attn_logit_softcapping=50.0), "soft-capping"),
        ("qwen2", dict(use_sliding_window=False, layer_types=["sliding_attention", "full_attention"]), "sliding_window"),
    ]


@pytest.mark.parametrize("name, fields, named", _refused(), ids=[r[0] for r in _refused()])
def test_what_cannot_be_served_says_why_and_keeps_the_transformers_forward(name, fields, named, tokenizer):
    """A config the body would get wrong is refused with one sentence naming why (never a crash),
    and the model decodes on its DynamicCache as before, greedy output equal to generate()'s."""
    model = make_family_model(name, len(tokenizer), seed=2, **fields)
    why = supports(model)
    assert isinstance(why, str) and named in why, why
    assert static_cache(model) is None
    if name != "qwen2":  # that config's own forward needs a window its layers name but lack
        lm = loaded(model, tokenizer, f"tiny-{name}-refused")
        session = SpeculativeDecoder(lm, NGram(), k=3).start(PROMPTS[1], max_new_tokens=12)
        assert not isinstance(session.cache, StaticKV)
        assert list(SpeculativeDecoder(lm, NGram(), k=3).generate(PROMPTS[1], max_new_tokens=12).token_ids) == \
            hf_greedy(lm, PROMPTS[1], 12)


def test_an_unknown_architecture_is_named():
    from transformers import GPT2Config, GPT2LMHeadModel

    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=37, n_embd=32, n_layer=1, n_head=2)).eval()
    why = supports(gpt2)
    assert why.startswith("architecture 'gpt2' is not one of") and all(f in why for f in ("mistral", "qwen2", "qwen3", "phi3"))


def needs_op(test):
    """:data:`tests.support.kernel.NEEDS_OP` on one test (skipped without a C++ compiler)."""
    for mark in NEEDS_OP:
        test = mark(test)
    return test


@needs_op
@pytest.mark.parametrize("name", ["qwen2", "qwen3", "phi3", "mistral"])
def test_the_fused_runner_writes_each_layer_as_the_body(name, tokenizer):
    """An int8 copy on specviz's blocked kernel, each layer one C++ op (layer_op): Qwen2's biases
    ride with the products, Qwen3's q/k norm (plain w) is the op's third scale, Phi-3's fused
    projections are the op's products as they are, Mistral's window covers every layer: the same
    hidden states and K/V writes as the body's own ops, chains, a tree and a rollback (as
    tests/test_layer_op.py checks Llama and Gemma 3)."""
    from specviz.models.int8 import Int8Options, quantize_int8
    from specviz.runtime import layer_op
    from tests.test_layer_op import _writes_as_the_body

    model = quantize_int8(make_family_model(name, len(tokenizer), seed=5), tokenizer, Int8Options(kernel="blocked"))
    body = static_cache(model).decoder.body
    assert layer_op.products_kind(body) == "int8" and layer_op.why_not(body) is None
    with torch.inference_mode():
        _writes_as_the_body(model)


def test_the_fused_runner_refuses_a_partial_rotary_with_a_sentence(tokenizer):
    """Phi-3 with half of each head rotated: the op rotates whole heads, so the fused runner says
    so and the eager body serves it (the logits test above covers it)."""
    from specviz.models.int8 import Int8Options, quantize_int8
    from specviz.runtime import layer_op

    model = quantize_int8(make_family_model("phi3_partial", len(tokenizer), seed=5), tokenizer, Int8Options(kernel="blocked"))
    body = static_cache(model).decoder.body
    assert "rotary covers 8 of a head's 16 dims" in layer_op.why_not(body)
    assert static_decode.runner_for(body).name == "eager"


@pytest.mark.parametrize("name", ["qwen2", "qwen3", "gemma3_text"])
def test_a_bf16_body_is_as_close_as_the_transformers_bf16_forward(name, tokenizer):
    """In bfloat16 (biases, Qwen3's q/k norm, an all-sliding Gemma 3): chains of several widths
    with rollbacks and a token tree, within two bf16 steps of the transformers bf16 forward and no
    further from float32 than it (tests/test_static_bf16.py's check, whose tree reference runs on
    a DynamicCache: Mistral's and Phi-3's forwards take no per-layer-type tree mask there)."""
    from tests.test_static_bf16 import bf16_pair, chains_and_tree_match

    chains_and_tree_match(*bf16_pair(make_family_model(name, len(tokenizer), seed=6)))
