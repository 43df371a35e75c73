"""The static decode step in bfloat16 (specviz.runtime.static_decode): a bf16 body computes as the
transformers bf16 forward does (products in bf16, RMSNorm and softmax in float32), so its logits
sit as close to the float32 model's as that forward's do, on chains of every width, rollbacks and
token trees, on every quick runner, with planned projections too; and the engine stays exact on
it: greedy speculative output is the bf16 target's own greedy output token for token."""

import copy

import pytest
import torch

from specviz import SpeculativeDecoder, autoregressive
from specviz.models import LoadedModel
from specviz.proposers import NGram, NGramTree
from specviz.runtime import body, projections, static_decode
from specviz.runtime.kv import forward_logits, keep_path, new_cache, rollback, score_tree
from specviz.runtime.static_decode import StaticKV, static_cache, supports
from tests.test_engine import PROMPTS
from tests.test_static_decode import _plan, reference_logits, tiny_gemma

BF16_ULP = 2.0**-7  # bf16's relative spacing: 8 significant bits


def bf16_pair(model: torch.nn.Module) -> tuple[torch.nn.Module, torch.nn.Module]:
    """(the float32 model, its bf16 copy)."""
    return model, copy.deepcopy(model).to(torch.bfloat16)


@pytest.fixture(params=["llama", "gemma"])
def pair(request, tiny_target, tokenizer):
    if request.param == "llama":
        return bf16_pair(copy.deepcopy(tiny_target.model))
    return bf16_pair(tiny_gemma(len(tokenizer), seed=7, sliding_window=8))


def assert_as_close_as_transformers(got: torch.Tensor, ref16: torch.Tensor, ref32: torch.Tensor) -> None:
    """``got`` [n, V] (the static bf16 step) lies within two bf16 steps of the logits' scale of the
    transformers bf16 forward's ``ref16``, and no further from the float32 ``ref32`` than ``ref16``
    is, give or take that much."""
    step = 2 * BF16_ULP * float(ref32.abs().max())
    assert float((got - ref16).abs().max()) <= step
    assert float((got - ref32).abs().max()) <= float((ref16 - ref32).abs().max()) + step


def chains_and_tree_match(m32: torch.nn.Module, m16: torch.nn.Module) -> StaticKV:
    """Feeds of several widths with rolled-back wrong tokens after each, then a 6-node tree with
    its path kept, on the bf16 step, against both transformers forwards. -> the static cache."""
    ids = [1] + [(11 * i + 2) % 30 + 3 for i in range(39)]  # 40 tokens
    ref32, ref16 = reference_logits(m32, ids), reference_logits(m16, ids)  # [40, V]
    cache = static_cache(m16)
    got = [forward_logits(m16, torch.tensor(ids[:3]), cache, 3)]
    assert isinstance(cache, StaticKV) and cache.keys.dtype == torch.bfloat16
    at = 3
    for n in (1, 4, 1, 9, 2, 6):
        got.append(forward_logits(m16, torch.tensor(ids[at : at + n] + [29] * 2), cache, n + 2)[:n])
        at += n
        rollback(cache, at)
    got = torch.cat(got)
    assert got.dtype == torch.float32
    assert_as_close_as_transformers(got, ref16[:at], ref32[:at])

    ctx = [1] + [(7 * i + 5) % 30 + 3 for i in range(12)]  # 13 tokens: past an 8-token window
    tokens, parents = torch.tensor([5, 9, 12, 7, 30, 4]), torch.tensor([-1, 0, 0, 1, -1, 4])
    tree_cache, dynamic = static_cache(m16), new_cache(m16)
    scored = []
    for c in (tree_cache, dynamic):
        forward_logits(m16, torch.tensor(ctx[:-1]), c, 1)
        scored.append(score_tree(m16, c, torch.tensor(ctx[-1:]), tokens, parents))  # [7, V]
    step = 2 * BF16_ULP * float(scored[1].detach().abs().max())
    assert float((scored[0] - scored[1]).detach().abs().max()) <= step
    kept = ctx + [5, 9, 7]  # root -> 5 -> 9 -> 7
    ref32, ref16 = reference_logits(m32, kept + [8, 11]), reference_logits(m16, kept + [8, 11])
    keep_path(tree_cache, int(tokens.shape[0]), [0, 1, 3])
    rollback(tree_cache, len(kept) - 1)
    got = forward_logits(m16, torch.tensor([7, 8, 11]), tree_cache, 3)
    assert_as_close_as_transformers(got, ref16[len(kept) - 1 :], ref32[len(kept) - 1 :])
    return cache


def test_bfloat16_is_served_and_float16_is_not(tiny_target):
    m32, m16 = bf16_pair(copy.deepcopy(tiny_target.model))
    assert supports(m16) is None
    assert "float32 or bfloat16" in supports(copy.deepcopy(m32).to(torch.float16))


def test_a_bf16_body_gives_the_transformers_bf16_logits(pair, monkeypatch, tmp_path):
    monkeypatch.setenv("SPECVIZ_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(static_decode, "MIN_CAPACITY", 16)  # the buffers grow on the way
    monkeypatch.setattr(static_decode, "SPAN", 8)
    cache = chains_and_tree_match(*pair)
    assert cache.decoder.runner == "eager"  # the fused op computes in float32 only


@pytest.mark.parametrize("timing", ["mixed", "packed"])
def test_planned_bf16_projections_give_the_same_logits(timing, pair, monkeypatch, tmp_path):
    """bf16 projections are planned as fp32 ones are (q/k/v and gate/up fused into bf16 weights,
    each kind on its planned kernel per width; here a stand-in plan), with the same logits."""
    from specviz.runtime import kernels
    from specviz.runtime import plan as kernel_plan

    if not _onednn_runs_bf16():
        pytest.skip("this CPU's oneDNN has no bf16 inner product: the plan keeps F.linear (test_cpu)")
    monkeypatch.setenv("SPECVIZ_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(projections, "MIN_BODY_ELEMENTS", 0)  # tiny models' projections planned too
    monkeypatch.setattr(kernel_plan, "of", _plan(timing))
    cache = chains_and_tree_match(*pair)
    body = cache.decoder.body
    assert sorted(body.kernel_plans) == ["down", "gate_up", "o", "qkv"]
    assert all(f.weight.dtype == torch.bfloat16 for f in body.fused)
    if kernels.pack(body.fused[0].weight) is not None:  # this build reorders bf16 weights: oneDNN reads the packed copies
        assert all(f.packed is not None and f.packed.is_mkldnn for f in body.fused)
    assert cache.decoder.runner == "eager"


def _onednn_runs_bf16() -> bool:
    """Whether this CPU's oneDNN has a bf16 inner product (an AVX2-only CPU has none: planning
    then times it as failing and keeps F.linear)."""
    from specviz.runtime import cpu

    return cpu.onednn_bf16()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_packed_copies_give_the_same_products(dtype):
    """A packed copy (bf16: oneDNN's only way; fp32: a kernel of the table) multiplies as the weight does."""
    from specviz.runtime import kernels

    if dtype == torch.bfloat16 and not _onednn_runs_bf16():
        pytest.skip("this CPU's oneDNN has no bf16 inner product")
    w = torch.randn(48, 32).to(dtype)
    packed = kernels.pack(w)
    if packed is None:
        pytest.skip("this torch build cannot reorder weights for oneDNN")
    assert packed.is_mkldnn and kernels.pack(w.to(torch.float16)) is None
    x = torch.randn(5, 32, dtype=dtype)
    tol = 1e-2 if dtype == torch.bfloat16 else 1e-5
    torch.testing.assert_close(kernels._onednn(x, packed, None), torch.nn.functional.linear(x, w), atol=tol, rtol=tol)


def test_a_bf16_product_of_the_static_body_rounds_each_row_alike_at_every_width():
    """A token's row of a bf16 verify pass holds the same floats as its one-token step: the static
    body runs every bf16 product on 2+ rows (a one-row product sums a long input in another order:
    gemma-3-270m's down projection, 2,048 inputs, on a Zen 4 EPYC), planned or plain."""
    if not _onednn_runs_bf16():
        pytest.skip("this CPU's oneDNN has no bf16 inner product")
    torch.manual_seed(0)
    down = torch.nn.Linear(2048, 640, bias=False).to(torch.bfloat16)
    planned = projections.PlannedLinear.fuse([copy.deepcopy(down)])
    planned.use(["oneDNN packed"])  # oneDNN on the packed copy at every width, as the bf16 plans run
    assert planned.packed is not None
    x = torch.randn(9, 2048).to(torch.bfloat16)
    with torch.inference_mode():
        for layer in (planned, down):
            wide = body._rows(layer, x)  # [9, 640]
            for n in (1, 2, 3, 5):
                rows = torch.cat([body._rows(layer, x[i : i + n])[:1] for i in range(9 - n + 1)])
                assert torch.equal(rows, wide[: 9 - n + 1]), (type(layer).__name__, n)
            torch.testing.assert_close(wide, torch.nn.functional.linear(x, down.weight), atol=1e-2, rtol=1e-2)
    fp32 = torch.nn.Linear(8, 4)
    assert body._rows(fp32, torch.ones(1, 8)).shape == (1, 4)  # other dtypes: as they are


def test_greedy_speculation_in_bf16_is_the_bf16_targets_own_output(tiny_target, tokenizer):
    """Chains and trees verified on the bf16 step (k + 1 rows) give the same greedy tokens as the
    bf16 target decoding alone (one row at a time), Llama and Gemma 3."""
    for model in (tiny_target.model, tiny_gemma(len(tokenizer), seed=3)):
        m16 = copy.deepcopy(model).to(torch.bfloat16)
        target = LoadedModel(m16, tokenizer, "tiny-bf16", torch.device("cpu"), torch.bfloat16)
        for prompt in PROMPTS:
            want = list(autoregressive(target, prompt, max_new_tokens=24).token_ids)
            for proposer in (NGram(), NGramTree()):
                run = SpeculativeDecoder(target, proposer, k=4).generate(prompt, max_new_tokens=24)
                assert list(run.token_ids) == want
