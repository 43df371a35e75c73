"""Shared fixtures: tiny random models built from configs (nothing is downloaded)."""

from __future__ import annotations

import copy
import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("SPECVIZ_ALLOW_LOCAL_PATHS", "1")  # tests serve tiny models from local directories
torch.set_num_threads(1)  # tiny models: one thread is fastest and leaves a core free

CHARS = "abcdefghijklmnopqrstuvwxyz .,!?'\n"
SPECIALS = ["<pad>", "<bos>", "<eos>", "<unk>"]


def make_char_tokenizer():
    """A character-level fast tokenizer: ids 0-3 special, then one id per character."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIALS + list(CHARS))}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    tk.decoder = decoders.Fuse()
    tk.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 1)])
    return PreTrainedTokenizerFast(
        tokenizer_object=tk, bos_token="<bos>", eos_token="<eos>", unk_token="<unk>", pad_token="<pad>"
    )


def make_llama(vocab_size: int, hidden: int, layers: int, seed: int, sharpen: float = 1.0, **config_kwargs):
    """A random Llama (eval mode) seeded with ``torch.manual_seed(seed)``; ``sharpen`` scales the LM
    head so its distributions are peaked, not flat. ``config_kwargs`` override LlamaConfig fields
    (defaults: bos 1, eos 2, pad 0, 1024 positions)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(**dict(
        vocab_size=vocab_size, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
        bos_token_id=1, eos_token_id=2, pad_token_id=0, tie_word_embeddings=False,
    ) | config_kwargs)
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(sharpen)
    model.generation_config.pad_token_id = cfg.pad_token_id
    return model


def loaded(model, tokenizer, name):
    from specviz.models import LoadedModel

    return LoadedModel(model=model, tokenizer=tokenizer, name=name, device=torch.device("cpu"), dtype=torch.float32)


def perturbed(model, scale: float, seed: int):
    """A copy of ``model`` with Gaussian noise on every weight: a draft that mostly agrees."""
    twin = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in twin.parameters():
            p.add_(torch.randn(p.shape, generator=g) * scale * p.std())
    return twin


@pytest.fixture(scope="session")
def tokenizer():
    return make_char_tokenizer()


@pytest.fixture(scope="session")
def tiny_target(tokenizer):
    return loaded(make_llama(len(tokenizer), 64, 2, seed=0, sharpen=30.0), tokenizer, "tiny-target")


@pytest.fixture(scope="session")
def tiny_draft(tokenizer):
    """A smaller, unrelated random model on the same vocabulary: mostly rejected."""
    return loaded(make_llama(len(tokenizer), 32, 2, seed=1, sharpen=30.0), tokenizer, "tiny-draft")


@pytest.fixture(scope="session")
def near_draft(tiny_target):
    """The target with noise on its weights: accepted often, rejected sometimes."""
    return loaded(perturbed(tiny_target.model, 0.1, seed=2), tiny_target.tokenizer, "tiny-near")


CORPUS = [
    "the cat sat on the mat. the cat sat on the hat.",
    "hello world, hello again. hello there, said the cat.",
    "a quick brown fox jumps over the lazy dog, then the dog sat.",
]


def train_bpe(texts, vocab_size: int, specials, post_processor=None, **fast_kwargs):
    """A byte-level BPE (any text encodes) trained on ``texts``, with specials named <pad> <s> </s> <unk>
    in the order ``specials`` gives them ids; ``fast_kwargs`` go to PreTrainedTokenizerFast."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tk = Tokenizer(models.BPE(unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=list(specials),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    tk.train_from_iterator(texts, trainer)
    if post_processor is not None:
        tk.post_processor = post_processor
    return PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                   pad_token="<pad>", **fast_kwargs)


def make_bpe_tokenizer(vocab_size: int = 300):
    """A byte-level BPE trained here on a few sentences: a *different* tokenizer from the
    character one (other ids, multi-character tokens), for cross-tokenizer drafting."""
    return train_bpe(CORPUS * 20, vocab_size, ["<pad>", "<s>", "</s>", "<unk>"])


@pytest.fixture(scope="session")
def bpe_draft():
    """A random model over a different (BPE) tokenizer."""
    tok = make_bpe_tokenizer()
    return loaded(make_llama(len(tok), 32, 2, seed=4, sharpen=30.0), tok, "tiny-bpe")


# -- the app and the browser (tests/app_server.py), for the browser and load tests -------------


@pytest.fixture(scope="module")
def tiny_env(tmp_path_factory):
    """The app's defaults naming tiny local models, set in os.environ for the module, then restored."""
    import app_server

    with app_server.patched_environ(app_server.tiny_env(tmp_path_factory.mktemp("tiny-models"))) as env:
        yield env


@pytest.fixture(scope="module")
def tiny_app(tiny_env):
    """The whole app served in this process on the tiny models: its URL."""
    import app_server

    demo, url = app_server.start(tiny_env)
    yield url
    demo.close()


@pytest.fixture(scope="module")
def needs_browser():
    """Skips the test where Chromium or Playwright is missing."""
    import app_server

    reason = app_server.missing_browser()
    if reason:
        pytest.skip(reason)


@pytest.fixture(scope="module")
def app_url(needs_browser, tiny_app):
    """The served app's URL, for tests that open it in the browser (skipped, and nothing served, without one)."""
    return tiny_app


@pytest.fixture(scope="module")
def browser(needs_browser):
    """Debian's headless Chromium driven by Playwright, one per test module."""
    import app_server
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = app_server.launch_chromium(p)
        yield b
        b.close()
