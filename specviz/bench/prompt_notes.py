"""What a sweep says about its prompts: one that ended at once, and why it may have.

A prompt whose target-only answer is one token and EOS measures nothing (every configuration
"runs" the prefill and stops), and counted silently it drags every median toward 1.0x. The usual
cause is the chat template on a base model: ``specviz bench`` wraps prompts in the target's chat
template when its tokenizer has one (``BenchConfig.chat``, :func:`specviz.core.engine.encode_prompt`),
and a base model given a chat turn often closes its own turn at once. Gemma 3's base checkpoints
ship the template, so its presence says nothing about the training; the name does, mostly
("-it", "Instruct", "chat"), and a built-in says so in its description. Pure functions.
"""

from __future__ import annotations

import re
from typing import Any

from ..models.builtin import BUILTIN_MODELS
from .rows import PromptResult

AT_ONCE_TOKENS = 2  # a target-only answer this short, ended by EOS, "ended at once"
_TUNED = re.compile(r"(^|[-_./])(it|instruct|chat|sft|dpo|rlhf|orpo|assistant)([-_./]|$)|instruct", re.IGNORECASE)


def looks_instruction_tuned(name: str) -> bool:
    """Whether a model name says it is instruction-tuned ("-it", "Instruct", "chat", ...); a name
    without such a marker is taken for a base model. A built-in's description decides for it."""
    bare = name.split("@", 1)[0]
    builtin = BUILTIN_MODELS.get(bare)
    if builtin is not None:
        return "not instruction-tuned" not in builtin.description and "instruct" in builtin.description.lower()
    return bool(_TUNED.search(bare.rstrip("/").rsplit("/", 1)[-1]))


def chat_note(target: Any, chat: bool) -> str | None:
    """A warning when the chat template wraps a base model's prompts, or a note when there is no
    template to apply; None when chat is off or the model looks instruction-tuned."""
    if not chat:
        return None
    name = str(getattr(target, "name", "") or "")
    if not getattr(getattr(target, "tokenizer", None), "chat_template", None):
        return f"{name} has no chat template: the prompts went in as plain text."
    if looks_instruction_tuned(name):
        return None
    return (f"the chat template wraps the prompts, but {name} looks like a base model (no -it, Instruct or chat in its "
            "name): a base model often ends a chat turn at once. Try --no-chat, or an instruction-tuned target.")


def at_once_record(row: PromptResult, token_ids: list[int], tokenizer: Any, note: str | None) -> dict[str, Any] | None:
    """A target-only run that ended at once -> what the report says of it (None: it did not)."""
    if row.finished != "eos" or row.new_tokens > AT_ONCE_TOKENS:
        return None
    try:
        text = tokenizer.decode(token_ids, skip_special_tokens=False)
    except Exception:  # noqa: BLE001 - the ids are the reason's detail, not the reason
        text = " ".join(map(str, token_ids))
    n = row.new_tokens
    reason = f"the target ended its answer after {n} token{'s' if n != 1 else ''} ({text!r}, an end-of-sequence token)"
    if note and "base model" in note:
        reason += "; the chat template on a base model is the likely cause"
    return {"prompt_index": row.prompt_index, "prompt_id": row.prompt_id, "category": row.category,
            "new_tokens": n, "text": text, "reason": reason}


def at_once_sentence(rec: dict[str, Any]) -> str:
    """ "prompt 3 (writing 81) ended at once: the target ended its answer after 1 token (...)." """
    return f"prompt {rec['prompt_index'] + 1} ({rec['category']} {rec['prompt_id']}) ended at once: {rec['reason']}."


__all__ = ["AT_ONCE_TOKENS", "at_once_record", "at_once_sentence", "chat_note", "looks_instruction_tuned"]
