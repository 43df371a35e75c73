"""Proposers: things that draft tokens for the target to verify."""

from .base import Proposer
from .draft_model import DraftModel
from .ngram import NGram

__all__ = ["Proposer", "DraftModel", "NGram"]
