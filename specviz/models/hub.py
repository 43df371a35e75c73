"""The Hugging Face hub: model pairs offered when it answers, loading with clear errors, and the
finishing touches every loaded model gets (eval mode, no grads, a pad token)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from .. import settings
from .names import _builtin_names

if TYPE_CHECKING:
    from transformers import PretrainedConfig, PreTrainedTokenizerBase


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
    forced = settings.word("SPECVIZ_HUB_MODELS")
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
        settings.foreign(v).strip().lower() in ("1", "true", "yes", "on")
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
