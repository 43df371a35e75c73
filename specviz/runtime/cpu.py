"""This CPU, as the kernel plans see it: its identity (:func:`machine_id`, a plan file's key), what
it can run (:func:`onednn_bf16`), and whether other work is running beside us (:func:`busy`)."""

from __future__ import annotations

import functools
import hashlib
import os
import platform

import torch

from .. import settings

MIN_HEAD_ELEMENTS = 8_000_000  # smaller heads are fast either way: left as they are
# Widths a plan measures: 1 (target-only) .. 9 (verifying k = 8, the widest k of the default bench
# sweep). specviz.core.bounds.ENGINE_MAX_K (32) allows up to 33 rows; wider passes take width 9's kernel.
MEASURED_ROWS = 9
DTYPES = (torch.float32, torch.bfloat16)  # the weights whose kernels are planned


@functools.cache
def onednn_bf16() -> bool:
    """Whether oneDNN has a bf16 inner product on this CPU (none on an AVX2-only one: Zen 3 raised
    'could not create a primitive descriptor')."""
    try:
        x, w = torch.ones(1, 32, dtype=torch.bfloat16), torch.ones(8, 32, dtype=torch.bfloat16)
        torch.ops.mkldnn._linear_pointwise(x, w, None, "none", [], "")
    except (RuntimeError, AttributeError):
        return False
    return True


def machine_id() -> str:
    """This CPU: vendor, model name, family/model, torch's ISA level and a hash of the ISA flags."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if not line.strip():
                    break  # the first processor's block is enough
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    name = fields.get("model name") or platform.processor() or platform.machine()
    family = f" family {fields['cpu family']} model {fields.get('model', '?')}" if "cpu family" in fields else ""
    flags = fields.get("flags") or fields.get("Features") or platform.platform()
    capability = getattr(torch.backends.cpu, "get_cpu_capability", lambda: "?")()
    digest = hashlib.sha256(" ".join(sorted(flags.split())).encode()).hexdigest()[:12]
    caps = "".join(f", {k} {settings.foreign(k)}" for k in ("ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS") if settings.foreign(k))
    return f"{fields.get('vendor_id', platform.machine())} {name}{family}, {capability}{caps}, flags {digest}"


def load_average() -> float | None:
    """The 1-minute load average (None where the platform has none)."""
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return None


def busy() -> bool:
    """Whether other work is running beside this process (the 1-minute load average above the cores
    plus one): ``specviz tune`` says so, as two jobs on 2 cores double every kernel's time."""
    return (load_average() or 0.0) > (os.cpu_count() or 1) + 1


def disabled(options: settings.Options | None = None) -> bool:
    """``SPECVIZ_CPU_HEAD=0`` (or false/no/off; ``options.cpu_head``, the environment's without): leave every head as it is."""
    return not (options or settings.options()).cpu_head

