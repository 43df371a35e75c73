"""The ``transformers`` side of the comparison: generate() doing the same work as a proposer."""

from __future__ import annotations

import copy
import time
from typing import Any, Callable

import torch

from ..core.records import Sampling
from ..proposers import DraftModel, EarlyExit, NGram, Proposer


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _hf_kwargs(proposer: Proposer, k: int) -> dict[str, Any] | None:
    """transformers generate() arguments that do the same work as ``proposer`` at ``k``."""
    if isinstance(proposer, NGram):
        return {"prompt_lookup_num_tokens": k, "max_matching_ngram_size": proposer.max_ngram}
    if isinstance(proposer, EarlyExit):
        # transformers' early exit drafts with the target's own first L layers (its
        # EarlyExitCandidateGenerator truncates config.num_hidden_layers while drafting) and reads
        # k from the *target's* generation_config: generate() runs on a shallow copy that has its own.
        return {"assistant_early_exit": proposer.layers, SELF_ASSISTANT_K: k}
    if isinstance(proposer, DraftModel):
        # The assistant's own generation_config decides its draft length (transformers 5 reads
        # num_assistant_tokens from there, not from generate()'s kwargs). A shallow copy of the
        # module with its own config keeps the shared model untouched: constant k, no
        # confidence-based early stop (threshold 0 disables ConfidenceCriteria).
        assistant = copy.copy(proposer.model.model)
        assistant.generation_config = _constant_k_config(assistant, k)
        return {"assistant_model": assistant}
    return None


SELF_ASSISTANT_K = "_specviz_self_assistant_k"  # _run_hf: run generate() on a copy of the target with this constant k


def _constant_k_config(model, k: int):
    """A copy of ``model``'s generation config drafting exactly k tokens a step (no schedule, no
    confidence-based early stop: threshold 0 disables ConfidenceCriteria)."""
    gen = copy.deepcopy(model.generation_config)
    gen.num_assistant_tokens = k
    gen.num_assistant_tokens_schedule = "constant"
    gen.assistant_confidence_threshold = 0.0
    return gen


class _StepCounter:
    """A transformers streamer that counts generate()'s steps (every put after the prompt's)."""

    def __init__(self):
        self.puts = 0

    def put(self, value) -> None:
        self.puts += 1

    def end(self) -> None:
        pass

    @property
    def steps(self) -> int:
        return max(0, self.puts - 1)


def _self_assistant(model, k: int):
    """A shallow copy of ``model`` (the same weights) with its own constant-k generation config
    and its own model config: transformers' early exit lowers ``config.num_hidden_layers`` while
    it drafts, which must never touch the shared model another session may be running."""
    view = copy.copy(model)
    view._modules = dict(model._modules)
    prefix = model.base_model_prefix
    base = copy.copy(getattr(model, prefix))
    base.config = copy.deepcopy(base.config)
    setattr(view, prefix, base)
    view.config = base.config
    view.generation_config = _constant_k_config(model, k)
    return view


def _run_hf(target, ids: list[int], max_new_tokens: int, sampling: Sampling, seed: int, extra: dict[str, Any], eos,
            clock: Callable[[], float] = time.perf_counter) -> dict[str, Any]:
    from transformers.utils import logging as hf_logging

    model = target.model
    extra = dict(extra)
    self_k = extra.pop(SELF_ASSISTANT_K, None)
    if self_k is not None:  # the target drafts for itself (early exit)
        model = _self_assistant(model, self_k)
    device = target.device
    input_ids = torch.tensor([ids], dtype=torch.long, device=device)
    kwargs: dict[str, Any] = dict(
        input_ids=input_ids, attention_mask=torch.ones_like(input_ids), max_new_tokens=max_new_tokens,
        do_sample=not sampling.greedy, pad_token_id=model.generation_config.pad_token_id,
    )
    if not sampling.greedy:
        kwargs.update(temperature=sampling.temperature, top_k=sampling.top_k or 0, top_p=sampling.top_p or 1.0)
    kwargs.update(extra)
    counter = _StepCounter()
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []), torch.inference_mode():
            torch.manual_seed(seed)  # generate() samples from the global RNG; fork_rng restores it after
            _sync(device)
            t0 = clock()
            out = model.generate(streamer=counter, **kwargs)
            _sync(device)
            wall = clock() - t0
    finally:
        hf_logging.set_verbosity(verbosity)
    new = out[0, len(ids):].tolist()
    finished = "length"
    for j, t in enumerate(new):  # same EOS rule as the engine: stop at (and keep) the first EOS
        if t in eos:
            new, finished = new[: j + 1], "eos"
            break
    return {
        "token_ids": new,
        "new_tokens": len(new),
        "wall_s": wall,
        "steps": counter.steps,
        "drafted": None,
        "accepted": None,
        "per_position_hits": [],
        "per_position_trials": [],
        "tree_steps": None,
        "draft_ms": None,
        "verify_ms": None,
        "other_ms": None,
        "prefill_ms": None,
        "finished": finished,
    }
