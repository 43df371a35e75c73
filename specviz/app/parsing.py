"""One number parser for values typed by a user (the Learn tab's fields, the playground's controls).

Pure and dependency-free; it raises ``ValueError`` with a message meant for the user.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["finite_number"]


def finite_number(value: Any, name: str, *, text: str | None = None, scale: float = 1.0) -> float:
    """``float(value) / scale`` -> a finite float, or a ValueError naming ``name``.

    ``text`` (a cleaned-up form of ``value``, e.g. stripped of a ``%``) is parsed instead of
    ``value`` when given; the messages always quote the ``value`` the user typed.
    """
    try:
        x = float(value if text is None else text) / scale
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {value!r}") from None
    if not math.isfinite(x):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return x
