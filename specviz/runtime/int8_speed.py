"""Which int8 kernel an ``@int8`` model runs on this machine: specviz's own blocked product
(:mod:`specviz.runtime.int8_kernel`, built for this CPU) where it builds and loads, else
``torch._int_mm``, in every torch build. (oneDNN's prepacked int8 linear, once an int8 head's
option, was 6.7x or more slower than the blocked product on a Zen 3 and inexact without VNNI:
docs/results-log.md, 2026-12-06.)"""

from __future__ import annotations

from typing import Any

from .. import settings
from . import int8_kernel

_choices: dict[str, Any] = {}


def choose_kernel(options: settings.Options | None = None) -> str:
    """``"blocked"`` where specviz's kernel loads, else ``"int_mm"``; ``SPECVIZ_INT8_KERNEL=int_mm``
    asks for ``int_mm``. :func:`kernel_choice` says what was chosen and why."""
    named = (options or settings.options()).int8_kernel  # the environment's without options
    if named == "int_mm":
        _choices.update(kernel=named, why=f"SPECVIZ_INT8_KERNEL={named}")
        return named
    why_not = int8_kernel.load(options)
    if why_not is not None:
        _choices.update(kernel="int_mm", why=f"specviz's own kernel: {why_not}")
        return "int_mm"
    _choices.update(kernel="blocked", why=f"SPECVIZ_INT8_KERNEL={named}" if named == "blocked" else
                    "specviz's own kernel, built for this CPU")
    return "blocked"


def kernel_choice() -> dict[str, Any] | None:
    """The last :func:`choose_kernel` in this process: {"kernel", "why"}."""
    return dict(_choices) if _choices else None
