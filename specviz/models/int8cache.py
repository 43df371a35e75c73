"""The ``@int8`` copy of a model, cached on disk: quantized once, read back on every later start.

Quantizing gemma-3-270m (``models.int8.quantize_int8``: calibration passes over the bundled
prompts, then every ``nn.Linear`` in int8) takes several seconds on a small CPU, on every start.
:func:`quantize_cached` keeps the result under ``cache_dir()/int8/`` as one safetensors file (the
int8 weights, their scales, the smoothing and the biases of every replaced layer) and, on a later
load, builds the same layers from it on the float model: no calibration, no weight quantization.
A layer built from the file holds exactly the values a fresh quantization computes, so the logits
are bit-identical (``tests/test_int8_cache.py``).

The file's key (in its metadata) is everything the result depends on: the source model (its name
and a digest of its float weights: every tensor's shape, dtype and an evenly strided sample of
its values), the torch and transformers versions, the options (``Int8Options``), the text of
``models/int8.py`` and ``runtime/quantize.py`` (the code version), the calibration token ids (tokenizer and prompts) and
this module's format. A file whose key differs (stale) or that cannot be read (corrupt) is
rebuilt, said in one log line; a cache directory that cannot be written is skipped silently.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from .device import cache_dir

log = logging.getLogger(__name__)

FORMAT = 3  # this module's file layout; bump when it changes (3: no packed layers; a blocked copy is stored as int_mm's)
SUBDIR = "int8"
_SAMPLES = 4096  # values read per tensor for the weight digest


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def weights_digest(model: torch.nn.Module) -> str:
    """A digest of the float model's parameters, in order, shared ones once: each one's shape,
    dtype and :data:`_SAMPLES` values taken at an even stride (milliseconds for 270M weights; names
    are left out, so the CPU head's wrapper, whether present or not, changes nothing)."""
    h = hashlib.sha256()
    for p in model.parameters():
        t = p.detach()
        h.update(f"{tuple(t.shape)}|{t.dtype}|".encode())
        flat = t.reshape(-1)
        step = max(1, flat.numel() // _SAMPLES)
        h.update(flat[::step].float().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def cache_key(source: str, model: torch.nn.Module, tokenizer: Any, options: Any) -> dict[str, str]:
    """Everything the int8 copy of ``model`` depends on, as strings (``source``: its name; a local
    directory passes ``"local"``, its weights digest standing for it)."""
    import transformers

    from ..runtime import quantize
    from . import int8

    calibration = ""
    if options.smooth_alpha is not None and tokenizer is not None:
        calibration = _sha(json.dumps(int8.calibration_token_ids(tokenizer, options.calibration_prompts)).encode())
    return {
        "format": str(FORMAT),
        "source": source,
        "weights": weights_digest(model),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "options": repr(options),
        "code": _sha(Path(int8.__file__).read_bytes() + Path(quantize.__file__).read_bytes()),
        "calibration": calibration,
    }


def cache_path(source: str, options: Any, weights: str, directory: str | Path | None = None) -> Path:
    """The file for ``source`` quantized with ``options``: a built-in or hub model by its name, a
    local directory by its name and weights (a copy of it elsewhere, under the same name, shares it)."""
    root = Path(directory).expanduser() if directory is not None else cache_dir()
    kind, _, name = source.partition(":")
    ident = weights if kind == "local" else source
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(name.rstrip("/")).name or "model")[:60]
    return root / SUBDIR / f"{slug}-{options.kernel}-{_sha(f'{ident}|{options!r}'.encode())[:12]}.safetensors"


def _float_targets(model: torch.nn.Module, options: Any) -> dict[str, torch.nn.Linear]:
    """The layers ``quantize_int8`` replaces, by the name it replaces them under (as it finds them)."""
    from .int8 import float_targets

    return float_targets(model)


# -- layers -> tensors and a plan, and back -----------------------------------------------------


def _dump(model: torch.nn.Module, names: list[str]) -> tuple[dict[str, torch.Tensor], list[dict[str, Any]]]:
    """The replaced layers ``names`` of a quantized ``model`` -> (tensors by key, one plan entry per
    layer). A fused layer (q/k/v, gate/up) is stored once, its members as rows of it."""
    from ..runtime.quantize import BlockedInt8Linear, Int8Linear

    tensors: dict[str, torch.Tensor] = {}
    plan: list[dict[str, Any]] = []
    fused_ids: dict[int, str] = {}

    def put_int_mm(key: str, layer: Int8Linear) -> dict[str, Any]:
        tensors[f"{key}.qweight"] = layer.qweight.contiguous()
        tensors[f"{key}.scale"] = layer.scale.contiguous()
        if layer.bias is not None:
            tensors[f"{key}.bias"] = layer.bias.contiguous()
        if layer.inv_smooth is not None:
            tensors[f"{key}.inv_smooth"] = layer.inv_smooth.contiguous()
        return {"in": layer.in_features, "bias": layer.bias is not None, "smooth": layer.inv_smooth is not None}

    def fused_key(fused: Int8Linear) -> str:
        if id(fused) not in fused_ids:
            key = fused_ids[id(fused)] = f"fused.{len(fused_ids)}"
            plan.append({"name": key, "type": "fused", **put_int_mm(key, fused)})
        return fused_ids[id(fused)]

    for name in names:
        layer = model.get_submodule(name)
        if type(layer) in (Int8Linear, BlockedInt8Linear) and layer.group:
            fused = layer.group[0]
            key = fused_key(fused)
            offset = layer.qweight.data_ptr() - fused.qweight.data_ptr()
            start = offset // (layer.in_features * layer.qweight.element_size())
            entry = {"name": name, "type": "rows", "of": key, "start": int(start),
                     "stop": int(start + layer.out_features)}
        elif type(layer) in (Int8Linear, BlockedInt8Linear):
            entry = {"name": name, "type": "int_mm", **put_int_mm(name, layer)}
        else:
            raise TypeError(f"{name}: {type(layer).__name__} is not an int8 layer this cache knows")
        plan.append(entry)
    return tensors, plan


def _build(plan: list[dict[str, Any]], tensors: dict[str, torch.Tensor], options: Any) -> dict[str, torch.nn.Module]:
    """The plan's layers, as ``quantize_int8`` built them -> {name: layer} (the fused ones are not
    modules of the model: only their rows are)."""
    from ..runtime.quantize import BlockedInt8Linear, Int8Linear

    built: dict[str, torch.nn.Module] = {}
    fused: dict[str, torch.nn.Module] = {}  # the fused layers, whose rows are the model's modules
    for e in plan:
        name, kind = e["name"], e["type"]
        smooth = tensors[f"{name}.inv_smooth"] if e.get("smooth") else None
        bias = tensors[f"{name}.bias"] if e.get("bias") else None
        if kind in ("int_mm", "fused"):
            cls = BlockedInt8Linear if options.kernel == "blocked" else Int8Linear
            proto = cls.__new__(cls)  # carries the settings _like copies
            torch.nn.Module.__init__(proto)
            proto.in_features = int(e["in"])
            proto.inv_smooth = smooth
            layer = proto._like(tensors[f"{name}.qweight"], tensors[f"{name}.scale"], bias)
            if kind == "fused":
                fused[name] = layer
            else:
                built[name] = layer
        elif kind == "rows":
            built[name] = fused[e["of"]].rows(int(e["start"]), int(e["stop"]))
        else:
            raise ValueError(f"unknown layer type {kind!r}")
    return built


def _read(path: Path, key: dict[str, str], options: Any) -> tuple[dict[str, torch.nn.Module] | None, str]:
    """-> (layers, "") from the file, or (None, why not)."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata() or {}
    stored = json.loads(meta.get("key", "{}"))
    if stored != key:
        changed = sorted(k for k in key if stored.get(k) != key[k])
        return None, f"stale ({', '.join(changed)} changed)"
    plan = json.loads(meta["plan"])
    return _build(plan, load_file(str(path)), options), ""


def _write(path: Path, key: dict[str, str], model: torch.nn.Module, names: list[str]) -> None:
    from safetensors.torch import save_file

    tensors, plan = _dump(model, names)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        save_file(tensors, str(tmp), metadata={"key": json.dumps(key, sort_keys=True), "plan": json.dumps(plan)})
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def quantize_cached(
    model: torch.nn.Module, tokenizer: Any, source: str, options: Any = None, *,
    directory: str | Path | None = None, report: Callable[[str], None] | None = None,
) -> tuple[torch.nn.Module, bool]:
    """``quantize_int8(model, tokenizer, options)`` (in place), read from the disk cache when it
    holds this model's copy, else computed and written there. ``source``: the model's identity
    (``"builtin:gemma-3-270m"``, ``"local:/path"``, ``"hub:owner/name"``); ``directory``: the cache
    root (default ``cache_dir()``). -> (the model, whether it came from the cache)."""
    from .int8 import Int8Options, quantize_int8

    options = options or Int8Options()
    say = report or (lambda _msg: None)
    name = source.partition(":")[2] or source
    key = cache_key("local" if source.startswith("local:") else source, model, tokenizer, options)
    path = cache_path(source, options, key["weights"], directory)
    targets = _float_targets(model, options)
    if path.is_file():
        try:
            layers, why = _read(path, key, options)
            if layers is not None and (sorted(layers) != sorted(targets) or any(
                    (layers[n].in_features, layers[n].out_features) != (lin.in_features, lin.out_features)
                    for n, lin in targets.items())):
                layers, why = None, "stale (its layers are not this model's)"
        except Exception as e:  # noqa: BLE001 - a damaged file: quantize again and rewrite it
            layers, why = None, f"unreadable ({type(e).__name__}: {str(e)[:120]})"
        if layers is not None:
            say(f"reading the int8 copy of {name} from the disk cache…")
            for layer_name, layer in layers.items():
                parent_name, _, child = layer_name.rpartition(".")
                parent = model.get_submodule(parent_name) if parent_name else model
                setattr(parent, child, layer)
            return model.eval(), True
        log.warning("specviz: the cached int8 copy of %s (%s) is %s; quantizing again", name, path, why)
    say(f"quantizing {name} to int8 (per-channel weights, per-token activations, outliers smoothed)…")
    model = quantize_int8(model, tokenizer, options).eval()
    try:
        _write(path, key, model, list(targets))
    except OSError as e:  # a read-only or full cache directory: quantize again next time
        log.debug("specviz: could not cache the int8 copy of %s in %s: %s", name, path, e)
    except Exception as e:  # noqa: BLE001 - a layer this module cannot store: the model is fine, only not cached
        log.warning("specviz: the int8 copy of %s is not cached on disk (%s: %s)", name, type(e).__name__, e)
    return model, False
