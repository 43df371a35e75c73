"""The built-in offline model: speculative greedy equals the target's own greedy output."""

import pytest
import torch

from specviz import SpeculativeDecoder, autoregressive, load_model
from specviz.core.engine import encode_prompt
from specviz.proposers import DraftModel, NGram

pytestmark = pytest.mark.slow

PROMPTS = [
    "Rewrite this sentence in the passive voice: The committee approved the new budget on Monday.",
    "List the first five prime numbers and explain why 1 is not prime.",
    "Translate to German: The weather is nice today, so we are going to the park.",
]


@pytest.fixture(scope="module")
def gemma():
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        yield load_model("gemma-3-270m")
    except ValueError as exc:  # the model package is missing: say how to get it
        pytest.skip(str(exc))
    finally:  # the next file on this worker gets the suite's one thread back
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def gemma_int8(gemma):
    return load_model("gemma-3-270m@int8")


def hf_greedy(target, prompt, n):
    ids = torch.tensor([encode_prompt(target.tokenizer, prompt, chat=True)])
    with torch.inference_mode():
        out = target.model.generate(ids, max_new_tokens=n, do_sample=False)
    return out[0, ids.shape[1] :].tolist()


def test_gemma_speculative_greedy_equals_target_greedy(gemma, gemma_int8):
    ngram = SpeculativeDecoder(gemma, NGram(), k=4)
    draft = SpeculativeDecoder(gemma, DraftModel(gemma_int8), k=4)
    for prompt in PROMPTS:
        ref = hf_greedy(gemma, prompt, 32)
        assert list(autoregressive(gemma, prompt, max_new_tokens=32, chat=True).token_ids) == ref
        assert list(ngram.generate(prompt, max_new_tokens=32, chat=True).token_ids) == ref
        res = draft.generate(prompt, max_new_tokens=32, chat=True)
        assert list(res.token_ids) == ref
        assert res.stats.acceptance_rate > 0.3  # the int8 copy mostly agrees with its fp32 self
