"""Helpers shared by the tests: tiny models (:mod:`.tiny`), the app served in-process
(:mod:`.app_server`) and headless Chromium (:mod:`.browser`).

    from tests.support import TINY_PROMPT, loaded, make_llama
    from tests.support import app_server, browser
"""

from .tiny import (
    TINY_PROMPT,
    hf_greedy,
    loaded,
    make_bpe_tokenizer,
    make_char_tokenizer,
    make_llama,
    make_tiny_model,
    make_tiny_models,
    make_tiny_tokenizer,
    perturbed,
    train_bpe,
)

__all__ = [
    "TINY_PROMPT", "hf_greedy", "loaded", "make_bpe_tokenizer", "make_char_tokenizer", "make_llama", "make_tiny_model",
    "make_tiny_models", "make_tiny_tokenizer", "perturbed", "train_bpe",
]
