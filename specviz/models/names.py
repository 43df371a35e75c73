"""Model names: a built-in, a local directory or a hub id, optionally ``@int8`` -> a resolved spec."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from .builtin import BUILTIN_MODELS

QUANTIZE_CHOICES = ("int8",)


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
