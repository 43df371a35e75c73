"""A draft that is the target's own weights (NAME@int8 drafting for NAME) starts each session from
the target's keys and values of the prompt instead of running the prompt itself; any other draft
computes its own. Exactness never depends on it."""

import copy

import pytest
import torch

from specviz import SpeculativeDecoder
from specviz.models.int8 import quantize_int8
from specviz.proposers import DraftModel, DraftTree, NGramOrDraft
from specviz.proposers.draft_model import same_weights
from specviz.proposers.vocab import with_vocab_subset
from specviz.runtime import static_decode
from tests.support.tiny import loaded
from tests.test_engine import PROMPTS, hf_greedy

pytestmark = pytest.mark.skipif(not static_decode.enabled(), reason="the prompt's states are shared between static steps")


@pytest.fixture(scope="module")
def int8_copy(tiny_target):
    model = quantize_int8(copy.deepcopy(tiny_target.model), tiny_target.tokenizer)
    return loaded(model, tiny_target.tokenizer, "tiny-target@int8")


def _first_step(decoder, prompt):
    session = decoder.start(prompt, max_new_tokens=8)
    session.step()
    return session


def test_same_weights_is_by_name_and_shape(tiny_target, int8_copy, near_draft, tiny_draft):
    assert same_weights(int8_copy, tiny_target)
    assert same_weights(with_vocab_subset(int8_copy, tiny_target, 12), tiny_target)
    assert not same_weights(near_draft, tiny_target)  # other weights: its own name
    renamed = copy.copy(tiny_draft)
    renamed.name = "tiny-target@int8"  # the target's name, another shape
    assert not same_weights(renamed, tiny_target)


@pytest.mark.parametrize("kind", ["draft", "ngram+draft", "draft-tree"])
def test_an_int8_copy_starts_from_the_targets_prompt_states(tiny_target, int8_copy, kind):
    draft = DraftModel(int8_copy)
    proposer = {"draft": draft, "ngram+draft": NGramOrDraft(draft), "draft-tree": DraftTree(int8_copy, nodes=6)}[kind]
    prompt = "the cat sat on the mat and the cat"
    session = _first_step(SpeculativeDecoder(tiny_target, proposer, k=3), prompt)
    state, target = session.proposer_state, session.cache
    n = len(session.prompt_ids) - 1  # the target's prefill: all but the last prompt token
    if kind != "ngram+draft":  # the hybrid's first step may come from the n-gram: its draft not run yet
        assert state.ids[:n] == list(session.prompt_ids[:-1])
    assert torch.equal(state.cache.keys[:, :, :n], target.keys[:, :, :n])
    assert torch.equal(state.cache.values[:, :, :n], target.values[:, :, :n])


def test_another_draft_computes_its_own(tiny_target, near_draft):
    session = _first_step(SpeculativeDecoder(tiny_target, DraftModel(near_draft), k=3), "the cat sat on the mat")
    n = len(session.prompt_ids) - 1
    assert not torch.equal(session.proposer_state.cache.keys[:, :, :n], session.cache.keys[:, :, :n])


def test_a_cut_head_scores_the_shared_prompts_tokens(tiny_target, int8_copy):
    cut = with_vocab_subset(int8_copy, tiny_target, 8)
    head = cut.model.get_output_embeddings()
    prompt = "zebra quartz jinx"
    session = _first_step(SpeculativeDecoder(tiny_target, DraftModel(cut), k=2), prompt)
    outside = {t for t in session.prompt_ids[:-1] if t not in head.members}
    assert outside and outside <= set(session.proposer_state.context_rows.ids)


@pytest.mark.parametrize("k", [1, 4])
def test_greedy_output_is_still_the_targets(tiny_target, int8_copy, k):
    dec = SpeculativeDecoder(tiny_target, DraftModel(int8_copy), k=k)
    for prompt in PROMPTS:
        assert list(dec.generate(prompt, max_new_tokens=20).token_ids) == hf_greedy(tiny_target, prompt, 20)
