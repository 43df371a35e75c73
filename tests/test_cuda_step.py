"""The CUDA-graph decode step (specviz.runtime.cuda_step) on the CPU: the same code path as on a GPU
with a stand-in for the capture (it records the callable and replays it into the same output
buffer), so the padding to one shape, the static input and output buffers, the graph per session
buffer and the fall-back to eager all run here; only torch.cuda.CUDAGraph itself does not."""

import copy
import logging

import pytest
import torch

from specviz import SpeculativeDecoder
from specviz.analysis.checks import loaded
from specviz.proposers import DraftModel, NGram
from specviz.runtime import cuda_step, state
from specviz.runtime.kv import forward_logits
from specviz.runtime.static_decode import StaticDecoder, static_cache
from tests.test_engine import PROMPTS, hf_greedy


@pytest.fixture
def graphed(monkeypatch):
    """The cuda runner chosen (as on a GPU), with room for 64 positions at first: buffers double
    during a test, so a second graph is captured on the new ones."""
    monkeypatch.setenv("SPECVIZ_STATIC_DECODE", "cuda")
    monkeypatch.setattr(cuda_step, "CAPACITY", 64)


def fresh(lm, dtype=torch.float32):
    """A copy of ``lm`` with no static step yet (a copied model starts with an empty runtime)."""
    return loaded(copy.deepcopy(lm.model), lm.tokenizer, lm.name, "cpu", dtype)


def step_of(lm) -> cuda_step.GraphStep:
    step = state.of(lm.model).decoder._step
    assert isinstance(step, cuda_step.GraphStep)
    return step


def test_padding_repeats_the_first_row_and_hides_the_new_columns():
    tokens, pos = torch.tensor([5, 6]), torch.tensor([3, 4])
    rot = torch.randn(2, 1, 4)
    mask = torch.tensor([[0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, float("-inf")]])  # [n=2, S=4]
    keys = values = torch.zeros(1, 1, 6, 4)  # capacity 6
    out = cuda_step.padded((tokens, pos, rot, rot, rot, rot, mask, mask, keys, values), 5)
    assert out[0].tolist() == [5, 6, 5, 5, 5] and out[1].tolist() == [3, 4, 3, 3, 3]
    assert torch.equal(out[2][2:], rot[:1].expand(3, 1, 4))
    assert out[6].shape == (5, 6) and torch.isinf(out[6][:, 4:]).all() and torch.equal(out[6][:2, :4], mask)
    assert out[8] is keys and out[9] is values  # the buffers themselves: the graph writes them


def test_the_head_gives_each_row_the_same_floats_whatever_the_rows():
    head = torch.nn.Linear(16, 50, bias=False)
    h = torch.randn(5, 16)
    rows = cuda_step.head_rows(head, h, 8)
    assert rows.shape == (5, 50)
    torch.testing.assert_close(rows, head(h))
    for i in range(5):  # one row alone (target-only decoding) and inside five (a verify pass): the same
        assert torch.equal(cuda_step.head_rows(head, h[i : i + 1], 8)[0], rows[i])


@pytest.mark.parametrize("family", ["llama", "gemma"])
def test_widths_1_to_9_give_the_eager_bodys_hidden_states_and_keys(graphed, family, tiny_target, tokenizer):
    from specviz.analysis.checks import tiny_gemma3

    lm = fresh(tiny_target) if family == "llama" else loaded(tiny_gemma3(len(tokenizer), window=4), tokenizer, "g")
    decoder = StaticDecoder(lm.model)
    step = cuda_step.GraphStep(decoder.body, width=12)
    ids = torch.tensor([1] + [(7 * i + 3) % 30 + 3 for i in range(63)])  # 10 + 1 + 2 + ... + 9 = 55 used
    graph_cache, eager_cache = decoder.new_cache(), decoder.new_cache()
    with torch.inference_mode():
        for cache in (graph_cache, eager_cache):
            cache.reserve(64)
            decoder.body(*decoder._inputs(cache, ids[:10], 0))  # the same prompt in both
            cache.length = 10
        for n in range(1, 10):
            start = graph_cache.length
            example = decoder._inputs(graph_cache, ids[start : start + n], start)
            got = step(*example)  # [n, d]
            want = decoder.body(*decoder._inputs(eager_cache, ids[start : start + n], start))
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
            assert torch.equal(got, decoder.body(*cuda_step.padded(example, 12))[:n])  # the padded eager body, bit for bit
            graph_cache.length = eager_cache.length = start + n
            torch.testing.assert_close(graph_cache.keys[:, :, : start + n], eager_cache.keys[:, :, : start + n])
            torch.testing.assert_close(graph_cache.values[:, :, : start + n], eager_cache.values[:, :, : start + n])
    assert len(step.graphs) == 1 and step.failed is None  # one graph served every width


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_greedy_equals_target_only_through_the_same_step(graphed, dtype, tiny_target, near_draft):
    target = fresh(tiny_target, dtype)
    prompt = PROMPTS[0]
    alone = SpeculativeDecoder(target, None).generate(prompt, max_new_tokens=40).token_ids
    assert state.of(target.model).decoder.runner == "cuda"
    for proposer, k in [(NGram(), 1), (NGram(), 3), (DraftModel(fresh(near_draft, dtype)), 3), (NGram(), 8)]:
        out = SpeculativeDecoder(target, proposer, k=k).generate(prompt, max_new_tokens=40).token_ids
        assert list(out) == list(alone), (type(proposer).__name__, k)
    step = step_of(target)
    assert step.failed is None and step.graphs  # replayed, never fell back
    if dtype == torch.float32:  # float32: transformers' own greedy too
        assert list(alone) == hf_greedy(target, prompt, 40)


def test_a_failed_capture_gives_eager_the_same_tokens(graphed, tiny_target, monkeypatch, caplog):
    prompt = PROMPTS[1]
    want = SpeculativeDecoder(fresh(tiny_target), NGram(), k=3).generate(prompt, max_new_tokens=30).token_ids

    def refused(fn, pool=None):
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(cuda_step, "replaying", refused)
    target = fresh(tiny_target)
    with caplog.at_level(logging.WARNING, logger="specviz.runtime.cuda_step"):
        got = SpeculativeDecoder(target, NGram(), k=3).generate(prompt, max_new_tokens=30).token_ids
    assert list(got) == list(want)
    assert "not permitted" in step_of(target).failed
    assert sum("running it eagerly" in r.getMessage() for r in caplog.records) == 1  # said once


def test_a_replay_that_fails_midway_gives_eager_the_same_tokens(graphed, tiny_target, monkeypatch):
    prompt = PROMPTS[0]
    want = SpeculativeDecoder(fresh(tiny_target), NGram(), k=4).generate(prompt, max_new_tokens=30).token_ids
    calls = []

    def flaky(fn, pool=None):  # captures, then its 4th replay fails (out of memory, say)
        replay, out = real(fn, pool)

        def once():
            calls.append(1)
            if len(calls) == 4:
                raise torch.OutOfMemoryError("CUDA out of memory (a stand-in)")
            replay()
        return once, out

    real = cuda_step.replaying
    monkeypatch.setattr(cuda_step, "replaying", flaky)
    target = fresh(tiny_target)
    got = SpeculativeDecoder(target, NGram(), k=4).generate(prompt, max_new_tokens=30).token_ids
    assert list(got) == list(want) and len(calls) == 4
    assert "OutOfMemoryError" in step_of(target).failed


def test_wider_steps_run_eagerly_at_their_width(graphed, tiny_target, monkeypatch):
    monkeypatch.setattr(cuda_step, "WIDTH", 4)  # k = 8: a 9-token verify pass, wider than the graph
    target = fresh(tiny_target)
    out = SpeculativeDecoder(target, NGram(), k=8).generate(PROMPTS[2], max_new_tokens=30).token_ids
    assert list(out) == hf_greedy(target, PROMPTS[2], 30)
    assert step_of(target).width == 4 and step_of(target).failed is None


def test_a_token_tree_through_the_graph_gives_the_eager_logits(graphed, tiny_target, monkeypatch):
    ids = torch.tensor([1] + [(5 * i + 2) % 30 + 3 for i in range(12)])
    tokens = torch.tensor([7, 9, 11, 13])  # a root, two children of it, a grandchild under the first
    positions = torch.tensor([13, 14, 14, 15])
    visible = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1]], dtype=torch.bool)
    logits = {}
    for how in ("cuda", "eager"):
        monkeypatch.setenv("SPECVIZ_STATIC_DECODE", how)
        target = fresh(tiny_target)
        cache = static_cache(target.model)
        forward_logits(target.model, ids, cache, 1)
        logits[how] = cache.run_tree(tokens, positions, visible)  # [4, V]
        assert state.of(target.model).decoder.runner == how
    torch.testing.assert_close(logits["cuda"], logits["eager"], atol=1e-4, rtol=1e-4)
    assert torch.equal(logits["cuda"].argmax(-1), logits["eager"].argmax(-1))


def test_sessions_get_a_graph_each_and_the_oldest_goes(graphed, tiny_target, monkeypatch):
    monkeypatch.setattr(cuda_step, "MAX_GRAPHS", 2)
    target = fresh(tiny_target)
    outs = [SpeculativeDecoder(target, NGram(), k=2).generate(PROMPTS[0], max_new_tokens=8).token_ids for _ in range(3)]
    assert outs[0] == outs[1] == outs[2]
    assert len(step_of(target).graphs) <= 2


def test_a_gpu_body_takes_the_graphs_by_default(monkeypatch):
    from types import SimpleNamespace

    from specviz.runtime import static_decode

    monkeypatch.delenv("SPECVIZ_STATIC_DECODE", raising=False)
    on_gpu = SimpleNamespace(embedding=SimpleNamespace(is_cuda=True))
    assert static_decode.runner_for(on_gpu) is cuda_step.RUNNER
    monkeypatch.setenv("SPECVIZ_STATIC_DECODE", "eager")  # a runner named still wins
    assert static_decode.runner_for(on_gpu).name == "eager"
