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
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE(unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(CORPUS * 4, trainer=trainer)
    if add_bos:
        core.post_processor = processors.TemplateProcessing(
            single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)]
        )
    else:
        core.post_processor = processors.ByteLevel(trim_offsets=False)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
        chat_template=CHAT_TEMPLATE,
    )
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
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = tokenizer if tokenizer is not None else make_tiny_tokenizer()
    settings: dict[str, Any] = dict(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        tie_word_embeddings=False,
    )
    settings.update(config_kwargs)
    config = LlamaConfig(**settings)
    with torch.random.fork_rng(devices=[]):  # seed locally, leave the global RNG alone
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.eval()
    model.generation_config.pad_token_id = tok.pad_token_id
    if dir is not None:
        Path(dir).mkdir(parents=True, exist_ok=True)
        model.save_pretrained(str(dir))
        tok.save_pretrained(str(dir))
    return model, tok
