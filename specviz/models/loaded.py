"""LoadedModel: a causal LM ready for inference, with its tokenizer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from ..runtime.quantize import Int8Linear
from .device import _text_config

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


@dataclass
class LoadedModel:
    """A causal LM ready for inference, with the tokenizer that goes with it."""

    model: torch.nn.Module  # a transformers causal LM in eval mode; shared, never mutate it
    tokenizer: PreTrainedTokenizerBase  # tokenizer matching the model's vocabulary
    name: str  # "gemma-3-270m", "gemma-3-270m@int8", a hub id or a local path
    device: torch.device  # where the weights live (int8 models: always cpu)
    dtype: torch.dtype  # floating dtype of the weights/activations (int8 models: float32)
    quantize: str | None = None  # None or "int8"

    @property
    def vocab_size(self) -> int:
        """Size of the model's output logits (may exceed ``len(tokenizer)``: padded embeddings)."""
        head = self.model.get_output_embeddings()
        out = getattr(head, "out_features", None)  # nn.Linear and quantized Linear alike
        if out is None and getattr(head, "weight", None) is not None:
            out = head.weight.shape[0]
        if out is None:
            out = _text_config(self.model.config).vocab_size
        return int(out)

    @property
    def num_parameters(self) -> int:
        """Parameter count, counting tied weights once and int8-packed Linear weights too."""
        total = sum(p.numel() for p in self.model.parameters())
        head = self.model.get_output_embeddings()
        tied = bool(getattr(_text_config(self.model.config), "tie_word_embeddings", False))
        for module in self.model.modules():
            # An int8 Linear keeps its weight out of parameters(), as buffers (Int8Linear).
            if isinstance(module, Int8Linear):
                weight, bias = module.qweight, module.bias
            else:
                continue
            if tied and module is head:  # int8 copy of the tied embeddings: count them once
                continue
            total += weight.numel() + (bias.numel() if bias is not None else 0)
        return int(total)

    def __repr__(self) -> str:
        return (
            f"LoadedModel(name={self.name!r}, class={type(self.model).__name__}, "
            f"params={self.num_parameters / 1e6:.1f}M, vocab={self.vocab_size}, "
            f"device={self.device}, dtype={self.dtype}, quantize={self.quantize!r})"
        )
