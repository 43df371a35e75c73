"""Tiny offline models for tests: a byte-level BPE tokenizer and a random Llama, no downloads.

    tok = make_tiny_tokenizer(tmp_path)               # saved to tmp_path, returned
    model, tok = make_tiny_model(tmp_path, seed=1)    # model + tokenizer saved to tmp_path
    lm = specviz.models.load_model(str(tmp_path))     # loads them back like any local model

Same ``seed`` -> same weights, so two directories with different seeds make a target/draft pair
that shares one vocabulary.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

try:
    from conftest import make_llama, train_bpe  # the one builder of tiny Llamas and BPE tokenizers
except ImportError:  # tests/ imported as a package
    from tests.conftest import make_llama, train_bpe

SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<pad>"]  # ids 0, 1, 2, 3

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Speculative decoding drafts a few tokens and the target model verifies them in one pass.",
    "The capital of France is Paris. The capital of Italy is Rome.",
    "def add(a, b):\n    return a + b\n",
    "Once upon a time there was a small model that wanted to be fast.",
    "Hello world! How are you today? I am fine, thank you.",
    "1 2 3 4 5 6 7 8 9 10, one two three four five six seven eight nine ten.",
]

CHAT_TEMPLATE = (
    "{% for message in messages %}<s>{{ message['role'] }}: {{ message['content'] }}</s>\n{% endfor %}"
    "{% if add_generation_prompt %}<s>assistant: {% endif %}"
)


def make_tiny_tokenizer(tmp_dir: str | Path | None = None, vocab_size: int = 384, add_bos: bool = True):
    """A byte-level BPE tokenizer (any text encodes, no <unk>) trained on a few sentences.

    Specials: <unk>=0, <s>=1 (bos, prepended when ``add_bos``), </s>=2 (eos), <pad>=3; it has a
    small chat template. Saved to ``tmp_dir`` when given. Deterministic.
    """
    from tokenizers import processors

    if add_bos:
        post = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)])
    else:
        post = processors.ByteLevel(trim_offsets=False)
    tok = train_bpe(CORPUS * 4, vocab_size, SPECIAL_TOKENS, post_processor=post, chat_template=CHAT_TEMPLATE)
    if tmp_dir is not None:
        Path(tmp_dir).mkdir(parents=True, exist_ok=True)
        tok.save_pretrained(str(tmp_dir))
    return tok


def make_tiny_model(
    dir: str | Path | None = None,
    hidden: int = 32,
    layers: int = 2,
    seed: int = 0,
    tokenizer: Any = None,
    **config_kwargs: Any,
):
    """A random ``LlamaForCausalLM`` (fp32, eval mode) whose vocabulary matches the tiny tokenizer.

    Saves model (safetensors) and tokenizer to ``dir`` when given; returns ``(model, tokenizer)``.
    ``config_kwargs`` override LlamaConfig fields (e.g. ``initializer_range=0.2`` for peakier
    distributions).
    """
    tok = tokenizer if tokenizer is not None else make_tiny_tokenizer()
    settings: dict[str, Any] = dict(
        max_position_embeddings=512,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    settings.update(config_kwargs)
    with torch.random.fork_rng(devices=[]):  # seed locally, leave the global RNG alone
        model = make_llama(settings.pop("vocab_size", len(tok)), hidden, layers, seed, **settings)
    model.generation_config.pad_token_id = tok.pad_token_id
    if dir is not None:
        Path(dir).mkdir(parents=True, exist_ok=True)
        model.save_pretrained(str(dir))
        tok.save_pretrained(str(dir))
    return model, tok
