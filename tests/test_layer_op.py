"""The static step's ``fused`` runner (specviz.runtime.layer_op): each decoder layer of an int8 body,
or of a planned float32 one, as one C++ op (torch.ops.specviz_int8.layer). Against the body it writes out, op for op: the same
hidden states and the same K/V writes to float rounding, for Llama and Gemma 3 (sliding window),
chains, a token tree and rollbacks; the runner serves only the bodies it can (and by default
does), and a failure falls back to eager with the same tokens."""

import copy
import logging

import pytest
import torch

from specviz import SpeculativeDecoder
from specviz.models.int8 import Int8Options, quantize_int8
from specviz.proposers import DraftModel
from specviz.runtime import layer_op, static_decode
from specviz.runtime.static_decode import static_cache
from tests.support.kernel import NEEDS_OP
from tests.support.tiny import loaded
from tests.test_engine import PROMPTS, hf_greedy
from tests.test_static_decode import tiny_gemma

pytestmark = NEEDS_OP


@pytest.fixture(scope="module")
def gemma(tokenizer):
    return loaded(tiny_gemma(len(tokenizer), seed=11), tokenizer, "tiny-gemma-fused")


@pytest.fixture(params=["llama", "gemma"])
def int8_model(request, tiny_target, gemma):
    """An int8 copy (specviz's blocked kernel, q/k/v and gate/up fused, smoothing on: its 1/s in the op)."""
    base = tiny_target if request.param == "llama" else gemma
    return quantize_int8(copy.deepcopy(base.model), base.tokenizer, Int8Options(kernel="blocked"))


def _step_pair(model):
    """The eager body and the fused runner's step of one static decoder, and a cache holding a prompt."""
    decoder = static_cache(model).decoder
    cache = decoder.new_cache()
    with torch.inference_mode():
        cache.reserve(64)
        prompt = torch.tensor([1, 5, 9, 12, 7, 5, 9, 30, 4])
        example = decoder._inputs(cache, prompt, 0)
        decoder.body(*example)  # the prompt's keys and values, by the body itself
        cache.length = len(prompt)
        fused = layer_op.RUNNER.build(decoder.body, example)
    return decoder, cache, fused


def _same(decoder, cache, fused, example):
    """The body and the fused step on ``example``, each from the same buffers -> both writes equal."""
    keys, values = cache.keys.clone(), cache.values.clone()
    want = decoder.body(*example)
    want_kv = cache.keys.clone(), cache.values.clone()
    cache.keys.copy_(keys), cache.values.copy_(values)
    got = fused(*example)
    scale = float(want.abs().max())
    assert float((got - want).abs().max()) <= 1e-5 * scale
    for a, b in zip((cache.keys, cache.values), want_kv):
        assert float((a - b).abs().max()) <= 1e-5 * max(1.0, float(b.abs().max()))


@torch.inference_mode()
def test_the_op_is_the_body_written_out(int8_model):
    """Chains of 1, 3 and 6 tokens (past the 4-token window), a 5-node tree over slots fed earlier,
    and a rollback: the same hidden states and K/V writes as the body's own ops."""
    _writes_as_the_body(int8_model)


def _writes_as_the_body(model):
    decoder, cache, fused = _step_pair(model)
    p = cache.length
    for width in (1, 3, 6):
        _same(decoder, cache, fused, decoder._inputs(cache, torch.tensor([3 + i for i in range(width)]), p))
    tokens, positions = torch.tensor([4, 8, 6, 3, 10]), torch.tensor([p, p + 1, p + 1, p + 2, p + 2])
    visible = torch.tensor([[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 0, 1, 0, 0], [1, 1, 0, 1, 0], [1, 0, 1, 0, 1]], dtype=torch.bool)
    _same(decoder, cache, fused, decoder._inputs(cache, tokens, p, positions, visible))
    cache.length = p - 3  # a rollback: the next token overwrites a slot
    _same(decoder, cache, fused, decoder._inputs(cache, torch.tensor([7]), cache.length))


@pytest.fixture(params=["llama", "gemma"])
def planned_model(request, tiny_target, gemma, monkeypatch, tmp_path):
    """A float32 copy whose projections are planned (q/k/v and gate/up fused; F.linear at one row,
    oneDNN wider): what the fused runner serves in float32."""
    from specviz.runtime import plan as kernel_plan
    from specviz.runtime import projections
    from tests.test_static_decode import _plan

    monkeypatch.setenv("SPECVIZ_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(projections, "MIN_BODY_ELEMENTS", 0)  # tiny models' projections planned too
    monkeypatch.setattr(kernel_plan, "of", _plan("mixed"))
    base = tiny_target if request.param == "llama" else gemma
    model = copy.deepcopy(base.model)
    static_cache(model)  # plans the projections
    return model


@torch.inference_mode()
def test_the_op_is_a_float32_body_written_out(planned_model):
    """A planned float32 body on specviz's float32 product: the same hidden states and K/V writes as
    the body's own ops (chains, a tree, a rollback), and each row's bits the same at every width (a
    verify pass's first row is the decode step's)."""
    body = static_cache(planned_model).decoder.body
    assert layer_op.products_kind(body) == "float32" and layer_op.why_not(body) is None
    assert static_decode.runner_for(body) is layer_op.RUNNER
    _writes_as_the_body(planned_model)
    decoder, cache, fused = _step_pair(planned_model)
    p, rows = cache.length, torch.tensor([3, 8, 5, 11, 4])
    keys, values = cache.keys.clone(), cache.values.clone()
    wide = fused(*decoder._inputs(cache, rows, p))  # [5, d]
    for i in range(len(rows)):  # the same tokens one at a time, each on the keys the wide call wrote before it
        cache.keys.copy_(keys), cache.values.copy_(values)
        if i:
            fused(*decoder._inputs(cache, rows[:i], p))
        assert torch.equal(fused(*decoder._inputs(cache, rows[i : i + 1], p + i))[0], wide[i])


def test_it_serves_only_int8_bodies_on_specviz_kernel_and_planned_float32_ones(tiny_target, gemma, int8_model, monkeypatch):
    monkeypatch.delenv("SPECVIZ_STATIC_DECODE", raising=False)
    body = static_cache(int8_model).decoder.body
    assert layer_op.why_not(body) is None
    assert static_decode.runner_for(body) is layer_op.RUNNER
    fp32 = static_cache(gemma.model).decoder.body
    assert "specviz's int8 kernel" in layer_op.why_not(fp32)
    assert static_decode.runner_for(fp32).name == "eager"
    int_mm = quantize_int8(copy.deepcopy(tiny_target.model), options=Int8Options(smooth_alpha=None, kernel="int_mm"))
    assert layer_op.why_not(static_cache(int_mm).decoder.body) is not None


@torch.inference_mode()
def test_the_op_says_what_is_wrong(int8_model):
    decoder, cache, fused = _step_pair(int8_model)
    tokens, pos, cos, sin, _, _, mask, _, keys, values = decoder._inputs(cache, torch.tensor([3]), cache.length)
    fixed = layer_op._layer_args(decoder.body)[0]
    body = decoder.body
    h = torch.zeros(1, body.d)
    shape = (body.heads, body.kv_heads, body.scaling, body.eps, body.gemma)
    with pytest.raises(RuntimeError, match="norms and the four products"):
        torch.ops.specviz_int8.layer(h, fixed[0][:1], *fixed[1:], cos, sin, mask, keys[0], values[0], pos, *shape)
    with pytest.raises(RuntimeError, match="outside the slots"):
        torch.ops.specviz_int8.layer(h, *fixed, cos, sin, mask, keys[0], values[0], pos + 10_000, *shape)


def test_a_failing_fused_runner_falls_back_to_eager_with_the_same_tokens(gemma, monkeypatch, caplog):
    """Asked for by name on a body it cannot serve (a float32 model), the runner fails to build:
    the step runs eagerly, said once, and greedy decoding is the transformers forward's."""
    monkeypatch.setenv("SPECVIZ_STATIC_DECODE", "fused")
    model = tiny_gemma(len(gemma.tokenizer), seed=12)
    lm = loaded(model, gemma.tokenizer, "tiny-gemma-fused-fp32")
    with caplog.at_level(logging.WARNING, logger="specviz.runtime"):
        got = [list(SpeculativeDecoder(lm, None).generate(p, max_new_tokens=12).token_ids) for p in PROMPTS[:2]]
    assert static_cache(model).decoder.runner == "eager"
    assert sum("no fused static decode step" in r.getMessage() for r in caplog.records) == 1
    monkeypatch.setenv("SPECVIZ_STATIC_DECODE", "0")
    assert got == [hf_greedy(lm, p, 12) for p in PROMPTS[:2]]


def test_an_int8_draft_on_it_keeps_the_target_exact(gemma, monkeypatch):
    """The int8 copy drafting on the fused runner: greedy output is the target's own, and the
    drafts are the int8 copy's good ones."""
    monkeypatch.setenv("SPECVIZ_STATIC_DECODE", "fused")
    draft_model = quantize_int8(copy.deepcopy(gemma.model), gemma.tokenizer, Int8Options(kernel="blocked"))
    draft = loaded(draft_model, gemma.tokenizer, "tiny-gemma-fused-int8")
    proposer = DraftModel(draft)
    for k in (1, 3):
        dec = SpeculativeDecoder(gemma, proposer, k=k)
        for prompt in PROMPTS[:3]:
            assert list(dec.generate(prompt, max_new_tokens=20).token_ids) == hf_greedy(gemma, prompt, 20)
    assert static_cache(draft_model).decoder.runner == "fused"
    assert dec.generate(PROMPTS[0], max_new_tokens=20).stats.acceptance_rate > 0.5


@torch.inference_mode()
def test_a_prompt_prefilled_by_the_fused_body_continues_as_the_model_does(gemma, monkeypatch):
    """A prompt prefilled by the fused body (all its rows in one call of each layer's op): the next
    token's distribution is the int8 model's own (its transformers forward over the whole sequence)."""
    from specviz.runtime.kv import forward_logits, new_cache

    monkeypatch.setenv("SPECVIZ_STATIC_DECODE", "fused")
    q8 = quantize_int8(copy.deepcopy(gemma.model), gemma.tokenizer, Int8Options(kernel="blocked"))
    first = static_cache(q8)
    forward_logits(q8, torch.tensor([1, 5, 9]), first, 1)
    forward_logits(q8, torch.tensor([4]), first, 1)
    decoder = first.decoder
    assert decoder.runner == "fused"
    for prompt in ([1, 5, 9, 12, 7, 5, 9, 30, 4, 8], [2, 6, 9, 13, 8, 5, 3, 31, 5, 9]):
        static, dynamic = static_cache(q8), new_cache(q8)
        for feed in (prompt, [6], [3]):
            a = forward_logits(q8, torch.tensor(feed), static, 1)
            b = forward_logits(q8, torch.tensor(feed), dynamic, 1)
            overlap = float(torch.minimum(torch.softmax(a, -1), torch.softmax(b, -1)).sum())
            assert overlap > 0.97
