"""specviz: watch, test and measure speculative decoding."""

from . import proposers
from .analysis.theory import expected_speedup, expected_tokens_per_step
from .core.algorithm import logits_to_probs, verify
from .core.engine import Session, SpeculativeDecoder, autoregressive, compute_stats, encode_prompt
from .core.hooks import Hook, HookList, TraceRecorder, load_trace
from .core.records import DraftDecision, GenerationResult, Proposal, Sampling, Stats, StepRecord
from .models import LoadedModel, list_models, load_model

__version__ = "0.1.0"

__all__ = [
    "DraftDecision", "GenerationResult", "Hook", "HookList", "LoadedModel", "Proposal", "Sampling",
    "Session", "SpeculativeDecoder", "Stats", "StepRecord", "TraceRecorder", "autoregressive",
    "compute_stats", "encode_prompt", "expected_speedup", "expected_tokens_per_step",
    "list_models", "load_model", "load_trace", "logits_to_probs", "proposers", "verify",
]
