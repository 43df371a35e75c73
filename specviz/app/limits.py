"""Limits for hosting the app: what a visitor may ask of a shared server.

The web UI (playground, benchmark and learn tabs) checks every request against :class:`Limits`;
the command line is a local tool and keeps allowing local paths and large runs.

Environment variables (read by :meth:`Limits.from_env`, at each request, so a host may change them
between restarts without code changes):

=============================  =========  ==========================================================
variable                       default    meaning
=============================  =========  ==========================================================
``SPECVIZ_MAX_PROMPT_TOKENS``  2048       longest prompt, in the target's tokens (chat template
                                          included); also a cheap pre-check of 16 characters a token
``SPECVIZ_MAX_NEW_TOKENS``     512        most new tokens one run may generate
``SPECVIZ_MAX_K``              16         most tokens drafted per step (at most 32, the engine's)
``SPECVIZ_MAX_TREE_NODES``     64         most nodes a token tree may have per step (the app hands it
                                          to the decoder as max_tree_nodes; see runs.hosted_decoder)
``SPECVIZ_ALLOW_LOCAL_PATHS``  off        ``1`` lets visitors name local directories as models
``SPECVIZ_MAX_PARAMS``         RAM/2      refuse models with more parameters (see specviz.models)
``SPECVIZ_CONCURRENCY``        2          model runs at once, across all visitors (see specviz.ui)
``SPECVIZ_MODEL_MEMORY_GB``    unlimited  memory budget of the in-process model cache; least
                                          recently used models that are not in use are dropped
=============================  =========  ==========================================================

Every ``check_*`` function is pure and raises ``ValueError`` with a message meant for the visitor.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from typing import Any

from ..core.bounds import ENGINE_MAX_K, HOSTING_DEFAULT_MAX_K
from ..proposers.registry import check_spec, get_kind, split_options, tree_nodes

__all__ = [
    "CHARS_PER_TOKEN",
    "Limits",
    "check_bench_request",
    "check_proposer",
    "check_k",
    "count_prompt_tokens",
    "check_max_new_tokens",
    "check_model_name",
    "check_prompt_chars",
    "check_prompt_tokens",
    "check_prompts_fit",
    "check_tree_nodes",
    "max_tree_nodes",
    "load_checked",
]

CHARS_PER_TOKEN = 16  # a prompt longer than max_prompt_tokens * this is refused before tokenizing
_TRUE = {"1", "true", "yes", "on"}


def _env_int(name: str, default: int, lo: int = 1, hi: int | None = None) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(float(raw.replace("_", "")))
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not a whole number") from None
    if value < lo:
        raise ValueError(f"{name}={raw!r} must be at least {lo}")
    if hi is not None and value > hi:
        raise ValueError(f"{name}={raw!r} must be at most {hi}")
    return value


def _env_float(name: str) -> float | None:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not a number (gigabytes, e.g. 4 or 0.5)") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name}={raw!r} must be a positive number of gigabytes")
    return value


@dataclass(frozen=True)
class Limits:
    """What one request to the web UI may ask for (see the module docstring)."""

    max_prompt_tokens: int = 2048
    max_new_tokens: int = 512
    max_k: int = HOSTING_DEFAULT_MAX_K
    allow_local_paths: bool = False
    model_memory_gb: float | None = None  # None: no byte budget (the count limit still applies)

    @classmethod
    def from_env(cls) -> "Limits":
        return cls(
            max_prompt_tokens=_env_int("SPECVIZ_MAX_PROMPT_TOKENS", 2048),
            max_new_tokens=_env_int("SPECVIZ_MAX_NEW_TOKENS", 512),
            max_k=_env_int("SPECVIZ_MAX_K", HOSTING_DEFAULT_MAX_K, hi=ENGINE_MAX_K),
            allow_local_paths=os.environ.get("SPECVIZ_ALLOW_LOCAL_PATHS", "").strip().lower() in _TRUE,
            model_memory_gb=_env_float("SPECVIZ_MODEL_MEMORY_GB"),
        )


# -- checks ------------------------------------------------------------------------------------

_QUANT_SUFFIX = re.compile(r"@[A-Za-z0-9]+$")


def check_model_name(name: Any, limits: Limits | None = None) -> str:
    """The stripped model name, or ValueError. Without ``allow_local_paths`` only built-in names
    and Hugging Face hub ids (``owner/name``, optionally ``@int8``) pass: no absolute or relative
    paths, no ``..``, no ``~``, no backslashes, no existing local directories."""
    from ..models import BUILTIN_MODELS, _is_hub_id  # models imports torch: only when needed

    lim = limits or Limits.from_env()
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"choose a model: a built-in ({', '.join(BUILTIN_MODELS)}) or a Hugging Face id owner/name")
    name = name.strip()
    if len(name) > 200 or any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise ValueError("that model name is too long or has control characters")
    if lim.allow_local_paths:
        return name
    base = _QUANT_SUFFIX.sub("", name)
    if base.lower() in BUILTIN_MODELS:
        return name
    refused = (
        f"{name!r}: local paths are disabled on this server; use a built-in model "
        f"({', '.join(BUILTIN_MODELS)}) or a Hugging Face id owner/name (the host can set SPECVIZ_ALLOW_LOCAL_PATHS=1)"
    )
    if (base.startswith(("/", ".", "~", "\\")) or ".." in base or "\\" in base or "~" in base or ":" in base
            or base.count("/") > 1):
        raise ValueError(refused)
    if not _is_hub_id(base):
        raise ValueError(
            f"unknown model {name!r}: not a built-in ({', '.join(BUILTIN_MODELS)}) or a Hugging Face id owner/name"
        )
    try:
        local = os.path.isdir(base) or os.path.isdir(os.path.expanduser(base))
    except (OSError, ValueError):
        local = False
    if local:  # load_model prefers an existing directory over the hub id of the same name
        raise ValueError(refused)
    return name


def check_prompt_chars(prompt: str, limits: Limits | None = None) -> None:
    """Cheap pre-check before tokenizing: at most ``max_prompt_tokens * CHARS_PER_TOKEN`` characters."""
    lim = limits or Limits.from_env()
    most = lim.max_prompt_tokens * CHARS_PER_TOKEN
    if len(prompt) > most:
        raise ValueError(
            f"the prompt is too long: {len(prompt):,} characters; this server takes at most "
            f"{lim.max_prompt_tokens:,} tokens (SPECVIZ_MAX_PROMPT_TOKENS), about {most:,} characters at most"
        )


def check_prompt_tokens(n: int, limits: Limits | None = None) -> None:
    lim = limits or Limits.from_env()
    if n > lim.max_prompt_tokens:
        raise ValueError(
            f"the prompt is too long: {n:,} tokens; this server takes at most {lim.max_prompt_tokens:,} "
            "(SPECVIZ_MAX_PROMPT_TOKENS). Shorten it"
        )


def check_max_new_tokens(n: int, limits: Limits | None = None) -> None:
    lim = limits or Limits.from_env()
    if not 1 <= n <= lim.max_new_tokens:
        raise ValueError(
            f"max new tokens must be from 1 to {lim.max_new_tokens:,} on this server (SPECVIZ_MAX_NEW_TOKENS), got {n:,}"
        )


def check_k(k: int, limits: Limits | None = None) -> None:
    lim = limits or Limits.from_env()
    if not 1 <= k <= lim.max_k:
        raise ValueError(f"k (tokens drafted per step) must be from 1 to {lim.max_k} on this server (SPECVIZ_MAX_K), got {k}")


TREE_SYNTAX = "ngram-tree[:N][,nodes=N]  or  draft-tree:NAME[@int8][,nodes=N,width=W]"


def max_tree_nodes() -> int:
    """SPECVIZ_MAX_TREE_NODES (default 64): the most nodes one token tree may have per step."""
    return _env_int("SPECVIZ_MAX_TREE_NODES", 64)


def check_tree_nodes(n: int) -> None:
    """A tree of ``n`` nodes per step against SPECVIZ_MAX_TREE_NODES (a ValueError showing the syntax)."""
    most = max_tree_nodes()
    if n > most:
        raise ValueError(
            f"a token tree of {n} nodes per step is more than this server allows ({most}, SPECVIZ_MAX_TREE_NODES); "
            f"ask for fewer nodes: {TREE_SYNTAX}, e.g. draft-tree:NAME,nodes={min(12, most)}"
        )


def count_prompt_tokens(tokenizer: Any, prompt: str, chat: bool = True) -> int:
    """How many tokens the prompt takes, with the chat template when the tokenizer has one."""
    if chat and getattr(tokenizer, "chat_template", None):
        try:
            ids = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                                tokenize=True)
            if isinstance(ids, dict) or hasattr(ids, "keys"):
                ids = ids["input_ids"]
            return len(ids)
        except Exception:  # noqa: BLE001 - fall back to the plain count
            pass
    return len(tokenizer(prompt)["input_ids"])


def check_prompts_fit(tokenizer: Any, prompts: list[str], chat: bool = True, limits: Limits | None = None) -> None:
    """Every prompt's token count (chat template included) against ``max_prompt_tokens``; the
    message says which prompt is too long when there are several."""
    lim = limits or Limits.from_env()
    for i, prompt in enumerate(prompts):
        check_prompt_chars(prompt, lim)
        try:
            check_prompt_tokens(count_prompt_tokens(tokenizer, prompt, chat), lim)
        except ValueError as e:
            raise ValueError(f"prompt {i + 1}: {e}" if len(prompts) > 1 else str(e)) from None


def load_checked(name: str, limits: Limits | None = None, **kwargs: Any):
    """``specviz.models.load_model`` for requests from the web UI: the name is checked first, and
    the model runs with the engine's options read now (``options=`` unless the caller passes them)."""
    from .. import settings
    from ..models import load_model

    kwargs.setdefault("options", settings.options())
    return load_model(check_model_name(name, limits), **kwargs)


def check_proposer(spec: str, limits: Limits | None = None) -> str:
    """A proposer spec from the web UI: its syntax (the registry), the model it names (when its
    registry entry ``needs_model``) and a token tree's nodes against SPECVIZ_MAX_TREE_NODES,
    loading nothing. -> the spec's prefix."""
    lim = limits or Limits.from_env()
    prefix, arg = check_spec(spec)
    kind = get_kind(prefix)
    if kind.needs_model and arg:
        check_model_name(split_options(arg, kind.options)[0], lim)
    nodes = tree_nodes(spec)
    if nodes is not None:
        check_tree_nodes(nodes)
    return prefix


def check_bench_request(target: str, proposer_specs: list[str], ks: Any, max_new_tokens: int, prompts: list[str],
                        limits: Limits | None = None) -> None:
    """The benchmark tab's request: model names (the target and every proposer whose
    registry entry ``needs_model``), each k, max new tokens and every prompt's length."""
    lim = limits or Limits.from_env()
    check_model_name(target, lim)
    for spec in proposer_specs:
        check_proposer(spec, lim)
    for k in ks or ():
        check_k(int(k), lim)
    check_max_new_tokens(max_new_tokens, lim)
    for prompt in prompts:
        check_prompt_chars(prompt, lim)
