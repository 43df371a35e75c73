"""specviz: watch, test and measure speculative decoding."""

from .algorithm import logits_to_probs, verify
from .engine import Session, SpeculativeDecoder, autoregressive, compute_stats, encode_prompt
from .hooks import Hook, HookList, TraceRecorder, load_trace
from .models import LoadedModel, list_models, load_model
from .records import DraftDecision, GenerationResult, Proposal, Sampling, Stats, StepRecord
from .theory import expected_speedup, expected_tokens_per_step
from . import proposers

__version__ = "0.1.0"

__all__ = [
    "DraftDecision", "GenerationResult", "Hook", "HookList", "LoadedModel", "Proposal", "Sampling",
    "Session", "SpeculativeDecoder", "Stats", "StepRecord", "TraceRecorder", "autoregressive",
    "compute_stats", "encode_prompt", "expected_speedup", "expected_tokens_per_step",
    "list_models", "load_model", "load_trace", "logits_to_probs", "proposers", "verify",
]
