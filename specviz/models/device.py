"""Devices, dtypes, the cache directory, and the size guard that refuses models too big for the machine."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from .. import settings
from ..runtime.state import cache_home

if TYPE_CHECKING:
    from transformers import PretrainedConfig


def cache_dir() -> Path:
    """Where converted built-in models live: ``$SPECVIZ_CACHE_DIR``, else ``~/.cache/specviz``
    (the one cache directory, :func:`specviz.runtime.state.cache_home`)."""
    return cache_home()


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

        with torch.device("meta"):  # transformers 5 warns of nothing here (a log line at most)
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
    env = settings.value("SPECVIZ_MAX_PARAMS").strip()
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
