"""Model names: a built-in, a local directory or a hub id, optionally ``@int8`` (the CPU int8 copy)
or ``@bf16`` (the weights in bfloat16) -> a resolved spec."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from .builtin import BUILTIN_MODELS

QUANTIZE_CHOICES = ("int8",)
DTYPE_SUFFIXES = {"bf16": "bfloat16"}  # "name@bf16": the model in this dtype


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
    dtype: str | None = None  # from a dtype suffix ("bfloat16" for @bf16), else None: the caller's

    @property
    def display_name(self) -> str:
        suffix = self.quantize or next((s for s, d in DTYPE_SUFFIXES.items() if d == self.dtype), None)
        return f"{self.source}@{suffix}" if suffix else self.source


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
    dtype = None
    if not _safe_is_dir(path) and "@" in name:  # "name@int8" or "name@bf16"; a real directory with "@" wins
        name, suffix = name.rsplit("@", 1)
        suffix = suffix.strip().lower()
        if suffix in DTYPE_SUFFIXES:
            if quantize is not None:
                raise ValueError(f"{name_or_path!r} asks for {suffix} weights but quantize={quantize!r}")
            dtype = DTYPE_SUFFIXES[suffix]
        elif suffix in QUANTIZE_CHOICES:
            suffix_q = _check_quantize(suffix)
            if quantize is not None and suffix_q != quantize:
                raise ValueError(f"{name_or_path!r} asks for {suffix_q!r} but quantize={quantize!r}")
            quantize = suffix_q
        else:
            raise ValueError(
                f"unknown quantize or precision suffix {'@' + suffix!r} in {name_or_path!r}; "
                f"use {', '.join('@' + q for q in (*QUANTIZE_CHOICES, *DTYPE_SUFFIXES))} or none"
            )
        path = Path(name).expanduser()
    if name.lower() in BUILTIN_MODELS:
        return _Spec("builtin", name.lower(), quantize, dtype)
    if _safe_is_dir(path):
        return _Spec("local", str(path.resolve()), quantize, dtype)
    if _safe_exists(path):
        raise ValueError(f"{name!r} is a file, not a model directory (a directory with config.json and weights)")
    looks_like_path = name.startswith((".", "/", "~", "\\")) or name.count("/") > 1 or os.sep in name.replace("/", "")
    if _is_hub_id(name) and not looks_like_path:
        return _Spec("hub", name, quantize, dtype)
    if looks_like_path:
        raise ValueError(f"no such model directory: {name!r}; built-in models: {_builtin_names()}")
    raise ValueError(
        f"unknown model {name!r}: not a built-in, an existing directory or a Hugging Face hub id "
        f"(owner/name); built-in models: {_builtin_names()}"
    )
