"""The CPU kernels a float weight's product runs on, in one table, and the one planned linear that runs them.

Each kernel is a :class:`Kernel`: its name, how it prepares its copy of a weight (None: it reads
the weight itself), the product, whether it is batch-invariant (a row gets the same bits at every
width, so a verify pass's first row is the one-row decode step's: the property "speculative greedy
= target-only greedy" rests on) and what it needs of this CPU and build. A plan
(:mod:`specviz.runtime.plan`) names a kernel per width for each kind of weight, ``{kind: {width:
kernel name}}``; :class:`PlannedLinear` runs a weight on it: the LM head, or one projection kind of
a decoder layer (q/k/v and gate/up fused into one weight whose rows the members' weights view).

The table holds the kernels that won a width by more than 10% somewhere they were measured
(docs/results-log.md, "one kernel table"): specviz's own blocked product (batch-invariant),
PyTorch's ``F.linear`` (no copy, always there) and oneDNN on its packed copy (bf16's only oneDNN
way, and fp32's widest widths). Two kernels give different float roundings (~1e-4 on logits), so a
seed's tokens follow the plan (stable once tuned); the certified screens never depend on it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from . import cpu, dense_kernel

__all__ = ["DEFAULT", "TABLE", "Kernel", "PlannedLinear", "fusable", "fused_of", "pack"]

Product = Callable[[torch.Tensor, torch.Tensor, "torch.Tensor | None", "torch.Tensor | None", int], torch.Tensor]


def _onednn(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """oneDNN's linear on a packed weight: [rows, in] -> [rows, out]."""
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


def pack(weight: torch.Tensor) -> torch.Tensor | None:
    """A weight [out, in] reordered once into oneDNN's blocked layout (an mkldnn tensor, as many
    bytes again), which its linear then reads without reordering on every call (a plain bf16
    weight is reordered on every call: 36 ms against 24 for gemma-3-270m's body on an AMX Xeon).
    None where this build or CPU has no such product."""
    if weight.device.type != "cpu" or weight.dtype not in cpu.DTYPES or not torch.backends.mkldnn.is_available():
        return None
    if weight.dtype == torch.bfloat16 and not cpu.onednn_bf16():
        return None
    try:
        return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), 1 if weight.dtype == torch.bfloat16 else 16)
    except (RuntimeError, AttributeError):
        return None


@dataclass(frozen=True)
class Kernel:
    """One product of x [rows, in] and a weight [out, in] -> [rows, out]."""

    name: str
    run: Product  # (x, weight, its copy or None, bias, out) -> [rows, out]
    copy: str | None = None  # the PlannedLinear buffer its prepared copy lives in (None: reads the weight)
    prepare: Callable[[torch.Tensor], "torch.Tensor | None"] | None = None  # weight -> its copy (None: cannot here)
    batch_invariant: bool = False  # a row's bits do not depend on the width
    dtypes: tuple[torch.dtype, ...] = cpu.DTYPES
    needs: str = ""  # what it needs of this CPU or build, in words

    def runs(self, dtype: torch.dtype) -> bool:
        """Whether it can run a weight of ``dtype`` here (a copy kernel may still fail to prepare)."""
        if dtype not in self.dtypes:
            return False
        if self.copy == "blocked":
            return dense_kernel.available()
        if self.copy == "packed":
            return torch.backends.mkldnn.is_available() and (dtype != torch.bfloat16 or cpu.onednn_bf16())
        return True


F_LINEAR = Kernel("F.linear", lambda x, w, c, b, out: F.linear(x, w, b), needs="nothing")
BLOCKED = Kernel("specviz blocked", lambda x, w, c, b, out: dense_kernel.dense(x, c, b, out), "blocked", dense_kernel.block,
                 batch_invariant=True, dtypes=(torch.float32,), needs="specviz's native ops built here (a C++ compiler)")
PACKED = Kernel("oneDNN packed", lambda x, w, c, b, out: _onednn(x, c, b), "packed", pack,
                needs="oneDNN in this torch build (bf16: a CPU with a bf16 product, AVX512-BF16 or AMX)")
TABLE: dict[str, Kernel] = {k.name: k for k in (BLOCKED, F_LINEAR, PACKED)}  # in order of preference
COPIES = tuple(k.copy for k in TABLE.values() if k.copy)  # a planned layer's copies of its weight
DEFAULT = "F.linear"


class PlannedLinear(torch.nn.Module):
    """One fp32 or bf16 weight [out, in] (an ``nn.Linear``, kept as ``linear``: the head's own, or
    the fused rows of several layers that read the same input) run on its plan's kernel at each
    width (``kernels``: by width 1, 2, ...; wider: the last), with the copies of the weight those
    kernels read. Fused members' weights become views of its rows (no second copy), so the
    model's own forward still runs them as before."""

    any_width = True  # [n, in] -> [n, out] for any n (specviz.runtime.static_decode)

    def __init__(self, linear: torch.nn.Linear, kernels: Sequence[str] = (DEFAULT,)):
        super().__init__()
        self.linear = linear
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.kernels: tuple[str, ...] = tuple(kernels)
        self.plan = None  # the plan entry (specviz.runtime.plan.KindPlan) the kernels come from
        for name in COPIES:  # buffers, so a graph takes them as inputs; not saved
            self.register_buffer(name, None, persistent=False)
        self.use(kernels)

    @classmethod
    def fuse(cls, members: Sequence[torch.nn.Linear]) -> "PlannedLinear":
        """One planned layer whose rows are ``members``' (each member's weight becomes a view of them)."""
        with torch.no_grad():
            weight = torch.cat([m.weight.detach() for m in members]) if len(members) > 1 else members[0].weight.detach()
            bias = None if members[0].bias is None else torch.cat([m.bias.detach() for m in members])
            linear = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None, device="meta")
            linear.weight = torch.nn.Parameter(weight, requires_grad=False)  # [out, in]
            linear.bias = None if bias is None else torch.nn.Parameter(bias, requires_grad=False)
            fused, start = cls(linear), 0
            for m in members:
                rows = m.out_features
                m.weight = torch.nn.Parameter(weight[start : start + rows], requires_grad=False)
                if bias is not None:
                    m.bias = torch.nn.Parameter(bias[start : start + rows], requires_grad=False)
                m.group = (fused,)  # a tuple: not a submodule of the member (see fused_of)
                start += rows
        return fused

    @property
    def weight(self) -> torch.Tensor:  # HF code may read lm_head.weight
        return self.linear.weight

    @property
    def bias(self) -> torch.Tensor | None:
        return self.linear.bias

    def use(self, kernels: Sequence[str], plan=None) -> None:
        """Run ``kernels`` (by width) from now on, keeping only the copies they read; a kernel that
        cannot run here (not built, not this dtype, no copy) gives way to F.linear."""
        dtype = self.weight.dtype
        names = [k if k in TABLE and TABLE[k].runs(dtype) else DEFAULT for k in kernels] or [DEFAULT]
        for name in COPIES:
            wanted = any(TABLE[k].copy == name for k in names)
            if not wanted:
                setattr(self, name, None)
            elif getattr(self, name) is None:
                made = next(k for k in TABLE.values() if k.copy == name).prepare(self.weight)
                setattr(self, name, made)
        self.kernels = tuple(k if TABLE[k].copy is None or getattr(self, TABLE[k].copy) is not None else DEFAULT
                             for k in names)
        self.plan, self.only = plan, (self.kernels[0] if len(set(self.kernels)) == 1 else None)  # only: every width's

    def kernel(self, rows: int) -> str:
        """The kernel ``rows`` rows run on."""
        return self.kernels[min(max(rows, 1), len(self.kernels)) - 1]

    def __deepcopy__(self, memo: dict) -> "PlannedLinear":
        """A copy without the weight's copies (an opaque oneDNN tensor cannot be copied); it runs
        F.linear where its kernels read one, until :meth:`use` prepares them again."""
        new = self.__class__.__new__(self.__class__)
        memo[id(self)] = new
        for k, v in self.__dict__.items():
            if k == "_buffers":
                v = {n: (None if n in COPIES else b) for n, b in v.items()}
            new.__dict__[k] = copy.deepcopy(v, memo)
        return new

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [..., in] -> [..., out]
        rows = x.numel() // max(1, x.shape[-1])
        k = TABLE[self.only or self.kernel(rows)]
        held = getattr(self, k.copy) if k.copy else None
        if k.copy and held is None:  # a copy of the layer: the same product family, F.linear
            return F.linear(x, self.weight, self.bias)
        y = k.run(x.reshape(-1, x.shape[-1]), self.weight, held, self.bias, self.out_features)  # [rows, out]
        return y if x.dim() == 2 else y.reshape(*x.shape[:-1], self.out_features)


def fused_of(*members: torch.nn.Module) -> torch.nn.Module | None:
    """The one layer whose rows ``members`` are, in order, or None: an int8 copy's q/k/v or gate/up
    (:func:`specviz.models.int8.shared_input_groups`), or a float body's planned kind."""
    group = getattr(members[0], "group", ())
    if not group or any(getattr(m, "group", ()) != group for m in members):
        return None
    fused = group[0]
    return fused if sum(m.out_features for m in members) == fused.out_features else None


def fusable(members: Sequence[torch.nn.Module]) -> bool:
    """Whether ``members`` are plain fp32 or bf16 ``nn.Linear`` layers on the CPU with one input
    size, one dtype and all or none biased (what :meth:`PlannedLinear.fuse` takes)."""
    return (all(type(m) is torch.nn.Linear and m.weight.dtype in cpu.DTYPES and m.weight.device.type == "cpu"
                for m in members)
            and len({m.in_features for m in members}) == 1 and len({m.bias is None for m in members}) == 1
            and len({m.weight.dtype for m in members}) == 1)
