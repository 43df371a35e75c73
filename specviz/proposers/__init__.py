"""Proposers: things that draft tokens for the target to verify."""

from .base import Proposer
from .cross_tokenizer import CrossTokenizerDraft
from .draft_model import DraftModel
from .early_exit import EarlyExit
from .hybrid import NGramOrDraft
from .ngram import NGram
from .registry import REGISTRY, ProposerKind, check_spec, from_spec, get_kind, kinds, split_options

__all__ = ["Proposer", "CrossTokenizerDraft", "DraftModel", "EarlyExit", "NGram", "NGramOrDraft",
           "REGISTRY", "ProposerKind", "check_spec", "from_spec", "get_kind", "kinds", "split_options"]
