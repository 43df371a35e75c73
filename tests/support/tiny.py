"""Every tiny offline model the tests use, built here and nowhere else (nothing is downloaded).

Two families:

- a character-level tokenizer (:func:`make_char_tokenizer`) with random Llamas on it
  (:func:`make_llama`, :func:`perturbed` for a draft that mostly agrees, :func:`loaded` to wrap one
  as a ``specviz.models.LoadedModel``); :func:`make_tiny_models` saves a target/draft pair as
  local checkpoints for the app;
- a byte-level BPE tokenizer (:func:`make_tiny_tokenizer`, :func:`make_bpe_tokenizer`) and a
  random Llama saved with it (:func:`make_tiny_model`), for loading through ``load_model``:

    model, tok = make_tiny_model(tmp_path, seed=1)    # model + tokenizer saved to tmp_path
    lm = specviz.models.load_model(str(tmp_path))     # loads them back like any local model

Same ``seed`` -> same weights, so two directories with different seeds make a target/draft pair
that shares one vocabulary.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import torch

from specviz.analysis.checks import char_tokenizer, tiny_llama

TINY_PROMPT = "the cat sat on the mat. the cat sat on the mat. the dog sat on the"

CHARS = "abcdefghijklmnopqrstuvwxyz .,!?'\n"
SPECIALS = ["<pad>", "<bos>", "<eos>", "<unk>"]


def make_char_tokenizer(chars: str = CHARS):
    """A character-level fast tokenizer: ids 0-3 special, then one id per character of ``chars``
    (another character set gives another vocabulary size)."""
    return char_tokenizer(chars)


def make_llama(vocab_size: int, hidden: int, layers: int, seed: int, sharpen: float = 1.0, **config_kwargs):
    """A random Llama (eval mode), the same weights for the same ``seed`` (specviz.analysis.checks.tiny_llama,
    which the GPU check uses too); ``sharpen`` scales the LM head so its distributions are peaked.
    ``config_kwargs`` override LlamaConfig fields (defaults: bos 1, eos 2, pad 0, 1024 positions).
    Like a plain ``torch.manual_seed(seed)`` before building, it leaves the global RNG seeded."""
    torch.manual_seed(seed)
    return tiny_llama(vocab_size, hidden, layers, seed, sharpen, **config_kwargs)


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


BPE_CORPUS = [
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
    return train_bpe(BPE_CORPUS * 20, vocab_size, ["<pad>", "<s>", "</s>", "<unk>"])


def make_tiny_models(root: Path) -> tuple[str, str]:
    """A tiny target and a noisy copy of it (same char tokenizer), saved as local checkpoints."""
    target_dir, draft_dir = root / "tiny-target", root / "tiny-draft"
    if not (target_dir / "config.json").is_file() or not (draft_dir / "config.json").is_file():
        tok = make_char_tokenizer()
        target = make_llama(len(tok), 64, 2, seed=0, sharpen=30.0)
        draft = perturbed(target, 0.1, seed=2)
        for model, d in ((target, target_dir), (draft, draft_dir)):
            model.save_pretrained(str(d))
            tok.save_pretrained(str(d))
    return str(target_dir), str(draft_dir)


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


def hf_greedy(target, prompt, n: int) -> list[int]:
    """``transformers``' own greedy continuation of ``prompt`` (n new token ids): the reference
    every speculative greedy run must equal token for token."""
    from specviz.core.engine import encode_prompt

    ids = torch.tensor([encode_prompt(target.tokenizer, prompt)], device=target.device)  # [1, n_prompt]
    out = target.model.generate(ids, max_new_tokens=n, do_sample=False)
    return out[0, ids.shape[1] :].tolist()


def outlier_llama(vocab_size: int):
    """A tiny Llama whose norms feed a few channels 50x louder than the rest, as Gemma's do
    (int8 smoothing has work to do)."""
    model = make_llama(vocab_size, 64, 2, seed=0, sharpen=30.0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("layernorm.weight") or name == "model.norm.weight":
                p[[5, 17]] *= 50.0
    return model


# -- the llama-like families the static step serves (specviz.runtime.body.FAMILIES) ----------

FAMILY_SIZES = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, max_position_embeddings=1024, bos_token_id=1, eos_token_id=2,
                    pad_token_id=0, tie_word_embeddings=False)

# name -> (transformers model_type, config fields beyond FAMILY_SIZES): each family's own features on
# (windows of 4-5 tokens, so that a test's 20-40 tokens run past them)
FAMILY_CONFIGS: dict[str, tuple[str, dict[str, Any]]] = {
    "llama": ("llama", {}),
    "mistral": ("mistral", dict(sliding_window=5)),  # the window on every layer
    "qwen2": ("qwen2", dict(use_sliding_window=True, sliding_window=4, max_window_layers=1)),  # q/k/v bias; layer 1 slides
    "qwen3": ("qwen3", dict(head_dim=16, attention_bias=True)),  # q/k norms (plain w), every projection biased
    "gemma3_text": ("gemma3_text", dict(head_dim=16, query_pre_attn_scalar=16, sliding_window=4,
                                        layer_types=["sliding_attention", "sliding_attention"])),  # all sliding
    "gemma3_full": ("gemma3_text", dict(head_dim=16, query_pre_attn_scalar=16, sliding_window=4,
                                        layer_types=["full_attention", "full_attention"])),  # no sliding layer
    "phi3": ("phi3", dict(sliding_window=5)),  # fused qkv_proj and gate_up_proj
    "phi3_partial": ("phi3", dict(partial_rotary_factor=0.5)),  # rotary on half of each head
}


def make_family_model(family: str, vocab_size: int, seed: int = 0, sharpen: float = 20.0, **config_kwargs):
    """A random tiny model of ``family`` (a :data:`FAMILY_CONFIGS` name; eval mode, float32), every
    weight nudged (Gemma's norms start at 0, Qwen2's biases at 0) and its head scaled by
    ``sharpen`` so that its distributions are peaked like a trained model's. Same seed, same weights;
    the global RNG is left alone."""
    from transformers import AutoConfig, AutoModelForCausalLM

    model_type, fields = FAMILY_CONFIGS[family]
    config = AutoConfig.for_model(model_type, **(FAMILY_SIZES | dict(vocab_size=vocab_size) | fields | config_kwargs))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config).eval()
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn(p.shape) * 0.05)
            model.get_output_embeddings().weight.mul_(sharpen)
    model.generation_config.pad_token_id = config.pad_token_id
    return model


def save_family_model(family: str, directory: str | Path, seed: int = 0, tokenizer: Any = None, **config_kwargs) -> str:
    """:func:`make_family_model` on the character tokenizer, saved (safetensors) with it to
    ``directory``, for ``load_model`` to read back as any local checkpoint. -> the directory."""
    tok = tokenizer if tokenizer is not None else make_char_tokenizer()
    model = make_family_model(family, len(tok), seed, **config_kwargs)
    Path(directory).mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(directory))
    tok.save_pretrained(str(directory))
    return str(directory)
