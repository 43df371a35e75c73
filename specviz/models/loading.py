"""load_model: resolve the name, check the cache, load (float or int8), cache."""

from __future__ import annotations

import copy
import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import torch

from .. import settings
from .builtin import BUILTIN_MODELS, _convert_lock, _ensure_converted
from .cache import _cache_get, _cache_put, _CacheKey, _key_lock
from .device import _check_size, cache_dir, estimate_parameters, resolve_device, resolve_dtype
from .hub import _auto_config, _from_pretrained, _hub_error, _hub_offline
from .loaded import LoadedModel
from .names import _resolve_spec, _Spec

Progress = Callable[[str], None]


def load_model(
    name_or_path: str,
    device: str | torch.device = "auto",
    dtype: str | torch.dtype = "auto",
    quantize: str | None = None,
    *,
    progress: Progress | None = None,
    options: settings.Options | None = None,
) -> LoadedModel:
    """Load a causal LM and its tokenizer (cached in-process; see the module docstring).

    ``name_or_path``: a built-in name (``list_models()``), a local checkpoint directory or a hub
    id ``owner/name``, optionally ending in ``@int8`` or in ``@bf16`` (the same as
    ``dtype="bfloat16"``: a name that carries its precision, for menus and proposer specs). ``device``: ``"auto"`` (cuda, mps, cpu) or
    explicit. ``dtype``: ``"auto"`` (bfloat16 on cuda, else float32), ``"float32"``,
    ``"bfloat16"``, ``"float16"`` or a ``torch.dtype``. ``quantize``: ``None`` or ``"int8"``
    (CPU and float32 only; ``device="auto"`` then means cpu, and is refused where CUDA is
    available: load the model without @int8 on a GPU). ``progress`` receives short
    human-readable stage messages. ``options``: the engine's settings as a value (the CLI and the
    app build them once, :func:`specviz.settings.options`), kept on the model's runtime object for
    the runtime to read; without them it reads the environment's when it asks. Raises ``ValueError`` with a message meant for the user when
    the name is unknown, the model is too big, the hub refuses, or options conflict.
    """
    report = progress or (lambda _msg: None)
    spec = _resolve_spec(name_or_path, quantize)
    if spec.quantize == "int8":
        is_auto = device is None or (isinstance(device, str) and device.strip().lower() == "auto")
        dev = torch.device("cpu") if is_auto and not torch.cuda.is_available() else resolve_device(device)
        if dev.type != "cpu":
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
        if spec.dtype is not None:
            named = resolve_dtype(spec.dtype, dev)
            if dtype not in (None, "auto") and dt != named:
                raise ValueError(f"{spec.display_name!r} asks for {spec.dtype} but dtype={dtype!r}")
            dt = named

    key: _CacheKey = (f"{spec.kind}:{spec.source}", str(dev), str(dt), spec.quantize)
    with _key_lock(key):
        hit = _cache_get(key)
        if hit is not None:  # the same weights under the name asked for ("m@bf16" or "m" with dtype=bfloat16)
            _pin(hit.model, options)
            return hit if hit.name == spec.display_name else replace(hit, name=spec.display_name)
        if spec.quantize == "int8":
            lm = _load_int8(spec, report, options)
        else:
            lm = _load_float(spec, dev, dt, report, options)
        _cache_put(key, lm)
        report(f"{lm.name} ready")
        return lm


def _pin(model: torch.nn.Module, options: settings.Options | None) -> None:
    """Keep ``options`` on ``model``'s runtime object (before its plan is read: the screens it attaches read them)."""
    if options is not None:
        from ..runtime import state

        state.of(model).pinned = options


def _load_int8(spec: _Spec, report: Progress, options: settings.Options | None = None) -> LoadedModel:
    cpu, fp32 = torch.device("cpu"), torch.float32
    base = _cache_get((f"{spec.kind}:{spec.source}", str(cpu), str(fp32), None))
    if base is not None:
        # never touch the shared fp32 model: a copy of its modules, sharing its (read-only) float
        # tensors: the Linear layers' are replaced and only the embedding and norms stay, no 1 GB clone
        memo: dict[int, object] = {id(p): p for p in base.model.parameters()}
        for m in base.model.modules():  # fused float projections (runtime.kernels.PlannedLinear), not submodules
            for g in getattr(m, "group", ()) or ():
                if isinstance(g, torch.nn.Module):
                    memo.update({id(p): p for p in g.parameters()})
        model = copy.deepcopy(base.model, memo)
        tokenizer = base.tokenizer
    else:
        fresh = _load_float(spec, cpu, fp32, report, options)  # private copy, not cached
        model, tokenizer = fresh.model, fresh.tokenizer
    from ..runtime import plan, projections
    from ..runtime.int8_kernel import needs_build
    from .int8 import Int8Options, choose_kernel
    from .int8cache import quantize_cached

    if needs_build(options):
        report("building specviz's int8 kernel for this CPU (once, about 15 s)…")
    int8 = Int8Options(kernel=choose_kernel(options))  # specviz's own kernel where it builds, else torch._int_mm
    model, _ = quantize_cached(model, tokenizer, f"{spec.kind}:{spec.source}", int8, report=report)  # on disk after the first start
    # the plan's kernels (its screens); read, never measured
    _pin(model, options)
    projections.load(model, plan.key_of(spec.display_name, fp32, "int8"), cache_dir())
    return LoadedModel(model, tokenizer, spec.display_name, cpu, fp32, "int8")


def _load_float(spec: _Spec, dev: torch.device, dt: torch.dtype, report: Progress,
                options: settings.Options | None = None) -> LoadedModel:
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
    from ..runtime import plan, projections

    # the head's kernel per width and its screens, from the plan `specviz tune` wrote for this machine
    # (CPU features' defaults without one): read, never measured
    _pin(model, options)
    projections.load(model, plan.key_of(spec.display_name, dt), cache_dir())
    return LoadedModel(model, tok, spec.display_name, dev, dt, None)
