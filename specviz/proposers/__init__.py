"""Proposers: things that draft tokens for the target to verify."""

from ..core.proposer import Proposer
from .cross_tokenizer import CrossTokenizerDraft
from .draft_model import DraftModel
from .draft_tree import DraftTree
from .early_exit import EarlyExit
from .hybrid import NGramOrDraft
from .ngram import NGram
from .ngram_tree import NGramTree
from .registry import REGISTRY, ProposerKind, check_spec, from_spec, get_kind, kinds, split_options

__all__ = ["Proposer", "CrossTokenizerDraft", "DraftModel", "DraftTree", "EarlyExit", "NGram", "NGramTree", "NGramOrDraft",
           "REGISTRY", "ProposerKind", "check_spec", "from_spec", "get_kind", "kinds", "split_options"]
