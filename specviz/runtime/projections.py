"""The decoder body's projections on the kernel measured fastest at each width.

:func:`plan_projections` (used by :mod:`specviz.runtime.static_decode`) makes the choice that
:mod:`specviz.runtime.cpu` makes for the LM head, per projection kind (q/k/v fused, o, gate/up
fused, down): the kernels are timed on all the layers' weights read in turn, as a forward reads
them (one small matrix timed alone stays in the cache and favours another kernel). gemma-3-270m
on a Zen 4 EPYC, 2 threads, quiet, all 18 layers per pass: q/k/v 6.1 ms (F.linear) vs 8.3
(oneDNN) at 1 row, 11.7 vs 4.5 at 2 rows; gate/up 16.7 vs 9.7 at 1 row, 36.9 vs 11.9 at 2; so its
target-only step went from 73 to 55 ms and a 2-token verify pass from 119 to 68 ms (v(2) 1.63 ->
1.25). ``SPECVIZ_CPU_KERNELS=0`` leaves the projections alone.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from pathlib import Path

import torch
import torch.nn.functional as F

from .. import settings
from . import cpu, dense_kernel

__all__ = ["MIN_BODY_ELEMENTS", "BODY_REPEATS", "KIND_NAMES", "PlannedLinear", "fusable", "fused_of", "plan_projections"]

MIN_BODY_ELEMENTS = 4_000_000  # a projection kind whose layers hold fewer weights in all is left as it is
BODY_REPEATS = 5  # rounds per width (a pass over a body's layers takes milliseconds, not a head's tens)
KIND_NAMES = {"qkv": "q/k/v", "o": "o", "gate_up": "gate/up", "down": "down"}  # projection kinds, as a person reads them


def _onednn_linear_op(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return cpu._onednn_linear(x, weight, bias)  # looked up per call: a test may wrap _onednn_linear


# ``specviz::onednn_linear``: :func:`cpu._onednn_linear` as an operator of its own, for Inductor
# (the compile and export runners), which lowers oneDNN's op only for weights it packed itself. Registered on the dispatcher directly (CPU, and
# oneDNN's own tensors: a packed weight), not with ``torch.library.custom_op``, whose Python wrapper
# cost 22 us a call against 11 here (72 calls in a gemma-3-270m verify pass; a one-off script).
_LIBRARY = torch.library.Library("specviz", "DEF")
_LIBRARY.define("onednn_linear(Tensor x, Tensor weight, Tensor? bias) -> Tensor")
for _key in ("CPU", "MkldnnCPU"):
    _LIBRARY.impl("onednn_linear", _onednn_linear_op, _key)


@torch.library.register_fake("specviz::onednn_linear")
def _(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return x.new_empty(x.shape[0], weight.shape[0])


class PlannedLinear(torch.nn.Module):
    """Several fp32 or bf16 ``nn.Linear`` layers that read the same input (a layer's q/k/v, or gate/up), or
    one, as one weight [out, in] whose rows are theirs, run on the kernel measured faster at each
    width: oneDNN where ``onednn_at[rows]`` (the widest entry beyond its end), ``F.linear``
    elsewhere. The members' weights become views of its rows (no second copy), so the model's own
    forward still runs them as before."""

    any_width = True  # [n, in] -> [n, out] for any n (specviz.runtime.static_decode)

    def __init__(self, members: Sequence[torch.nn.Linear]):
        super().__init__()
        with torch.no_grad():
            weight = torch.cat([m.weight.detach() for m in members]) if len(members) > 1 else members[0].weight.detach()
            bias = None if members[0].bias is None else torch.cat([m.bias.detach() for m in members])
            start = 0
            for m in members:  # each member: a view of its rows
                rows = m.out_features
                m.weight = torch.nn.Parameter(weight[start : start + rows], requires_grad=False)
                if bias is not None:
                    m.bias = torch.nn.Parameter(bias[start : start + rows], requires_grad=False)
                m.group = (self,)  # a tuple: not a submodule of the member (see fused_of)
                start += rows
        self.weight = torch.nn.Parameter(weight, requires_grad=False)  # [out, in]
        self.bias = None if bias is None else torch.nn.Parameter(bias, requires_grad=False)
        self.in_features, self.out_features = int(weight.shape[1]), int(weight.shape[0])
        self.onednn_at: tuple[int, ...] = (0,)  # kernel codes by rows (HeadKernelPlan.onednn_at)
        self.plan: cpu.HeadKernelPlan | None = None  # the measured plan those codes come from (plan_projections)
        # the weight's oneDNN layout (:func:`pack`), which oneDNN reads; a buffer, so a graph takes it as one
        self.register_buffer("packed", None, persistent=False)
        self.register_buffer("kmajor", None, persistent=False)  # fp32's K-major copy (:func:`cpu.kmajor`), one row
        self.register_buffer("blocked", None, persistent=False)  # fp32's blocked copy (:func:`dense_kernel.block`)

    def __deepcopy__(self, memo: dict) -> "PlannedLinear":
        return cpu._copy_without_packed(self, memo)

    def pack(self) -> torch.Tensor | None:
        """The packed copy oneDNN reads (:func:`pack`), made on the first call."""
        if self.packed is None:
            self.packed = cpu.pack(self.weight)
        return self.packed

    def uniform(self) -> bool:
        """Whether every width runs the same code (then one graph serves every width): one kernel,
        and not weight-first, whose one row runs another product than its wider widths."""
        codes = set(self.onednn_at[1:] or (0,))
        return len(codes) == 1 and 4 not in codes and not (6 in codes and self.blocked is None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [n, in] -> [n, out]
        at = self.onednn_at
        code = at[-1] if self.uniform() else at[min(int(x.shape[0]), len(at) - 1)]
        if not code or (code == 3 and self.kmajor is None):
            return F.linear(x, self.weight, self.bias)
        if code == 3:
            return cpu._kmajor_linear(x, self.kmajor, self.bias)
        if code == 4:
            return cpu._weight_first_linear(x, self.weight, self.bias, self.out_features)
        if code == 6:
            if self.blocked is None:  # a copy of the layer (its blocked copy is not carried): the same sums' kernel family
                return F.linear(x, self.weight, self.bias)
            return dense_kernel.dense(x, self.blocked, self.bias, self.out_features)
        weight = cpu._read_by(code, self.weight, self.packed)
        if torch.compiler.is_compiling():  # compile or export: a graph that cannot hold oneDNN's op itself
            return torch.ops.specviz.onednn_linear(x, weight, self.bias)
        return cpu._onednn_linear(x, weight, self.bias)


def fused_of(*members: torch.nn.Module) -> torch.nn.Module | None:
    """The one layer whose rows ``members`` are, in order, or None: an int8 copy's q/k/v or gate/up
    (:func:`specviz.runtime.quantize.shared_input_groups`), or a float32 body's planned projection
    kind, a single layer included (:class:`PlannedLinear`)."""
    group = getattr(members[0], "group", ())
    if not group or any(getattr(m, "group", ()) != group for m in members):
        return None
    fused = group[0]
    return fused if sum(m.out_features for m in members) == fused.out_features else None


def _planned_of(members: Sequence[torch.nn.Linear]) -> "PlannedLinear | None":
    """The planned layer ``members`` already are the rows of, or None. A body's graphs reach the
    planned layer through its members (:func:`fused_of`), so a second body planning them anew would
    take them from the first: a graph of the first would then read a packed weight from outside its
    own modules (TorchScript's trace, since removed, failed there: "Unsupported value kind")."""
    fused = fused_of(*members)
    return fused if isinstance(fused, PlannedLinear) and fused.plan is not None else None


def fusable(members: Sequence[torch.nn.Module]) -> bool:
    """Whether ``members`` are plain fp32 or bf16 ``nn.Linear`` layers on the CPU with one input size,
    one dtype and all or none biased (what :class:`PlannedLinear` can take)."""
    return (all(type(m) is torch.nn.Linear and m.weight.dtype in cpu.DTYPES and m.weight.device.type == "cpu"
                for m in members)
            and len({m.in_features for m in members}) == 1 and len({m.bias is None for m in members}) == 1
            and len({m.weight.dtype for m in members}) == 1)


def plan_projections(
    kinds: dict[str, list[Sequence[torch.nn.Linear]]], cache_dir: str | Path | None = None,
) -> dict[str, tuple[list[PlannedLinear], cpu.HeadKernelPlan]]:
    """Each projection kind of a decoder body (``{"qkv": [(q, k, v) per layer], "o": [(o,) per
    layer], ...}``) as one :class:`PlannedLinear` per layer, with the kernel per width measured on
    all its layers' weights read in turn (:func:`time_weights`; cached like the head's plan, keyed
    by the count of layers too). Kinds that are not plain fp32 or bf16 Linears, or too small to matter
    (under :data:`MIN_BODY_ELEMENTS` weights in all), are left out and keep their own layers.
    Nothing is done with ``SPECVIZ_CPU_KERNELS=0`` or without oneDNN."""
    if settings.turned_off("SPECVIZ_CPU_KERNELS"):
        return {}
    if not torch.backends.mkldnn.is_available():
        return {}
    planned = {}
    for kind, groups in kinds.items():
        # A body's graphs reach a planned layer through the model's own projections (fused_of), so
        # layers an earlier body of this model reads (an early-exit draft shares the target's first
        # layers) stay as that body left them: its planned ones are taken over, its plain ones stay
        # plain. Planning them again would take them from under its graphs.
        done = [_planned_of(g) for g in groups]
        taken = [d for d in done if d is not None]  # an earlier body's planned layers
        earlier = taken[0] if taken else None
        free = [g for g, d in zip(groups, done) if d is None and not _read_plain(g)]
        qualifies = (bool(groups) and all(fusable(g) for g in groups)
                     and len({(sum(m.out_features for m in g), g[0].in_features) for g in groups}) == 1  # one plan
                     and (earlier is not None or sum(m.weight.numel() for g in groups for m in g) >= MIN_BODY_ELEMENTS))
        if not free or not qualifies:
            if earlier is not None:
                planned[kind] = (taken, earlier.plan)
            _claim_plain(free)
            continue
        layers = [PlannedLinear(g) for g in free]
        if earlier is not None:  # the rest take the earlier plan: the same shapes, kernels measured once
            for p in layers:
                _apply(p, earlier.plan)
            planned[kind] = (taken + layers, earlier.plan)
            continue
        weights = [p.weight.detach() for p in layers]

        blocked: list[torch.Tensor | None] = []  # specviz's blocked copies, made once for the timing

        def time_all(_weight: torch.Tensor, rows: int, weights=weights, layers=layers, blocked=blocked) -> tuple[float, ...]:
            packed = [p.pack() for p in layers]  # min: the quiet cost
            copies = [cpu.kmajor(w) for w in weights] if rows == 1 else None  # dropped after timing
            blocked[:] = blocked or [dense_kernel.block(w) for w in weights]
            run = lambda x: [dense_kernel.dense(x, b, None, w.shape[0]) for w, b in zip(weights, blocked)]  # noqa: E731
            return cpu.time_weights(weights, rows, BODY_REPEATS, early=False, stat=min, packed=packed, kmajor=copies,
                                    weight_first=True, blocked=None if None in blocked else run)
        try:
            plan = cpu.plan_head(weights[0], cache_dir, time_width=time_all, count=len(weights))
        except (RuntimeError, AttributeError):  # an op missing from this build: F.linear, as before
            continue
        if 6 in plan.onednn_at and not dense_kernel.available():  # cached, but the op is not built here
            plan = plan.without("blocked_s")
        for p, b in zip(layers, blocked or [None] * len(layers)):
            _apply(p, plan, b)
        planned[kind] = (layers, plan)
    return planned


_READ_PLAIN: "weakref.WeakSet[torch.nn.Module]" = weakref.WeakSet()  # layers a body reads as they are


def _read_plain(members: Sequence[torch.nn.Module]) -> bool:
    """Whether a body reads ``members`` as they are (:func:`_claim_plain`)."""
    return all(m in _READ_PLAIN for m in members)


def _claim_plain(groups: Sequence[Sequence[torch.nn.Module]]) -> None:
    """Note the layers a body reads as they are, so that a later body on the same model does not
    plan them from under its graphs (held weakly, and not carried by a copy of the model: a copy's
    first body plans afresh)."""
    _READ_PLAIN.update(m for g in groups for m in g)


def _apply(layer: PlannedLinear, plan: cpu.HeadKernelPlan, blocked: torch.Tensor | None = None) -> None:
    """``plan``'s kernel per width on ``layer``, with the copies of its weight those kernels read
    (``blocked``: its blocked copy where already made)."""
    layer.plan, layer.onednn_at = plan, plan.onednn_at
    layer.packed = layer.pack() if cpu._needs_packed(plan.onednn_at, layer.weight.dtype) else None  # only where read
    layer.kmajor = cpu.kmajor(layer.weight) if cpu._needs_kmajor(plan.onednn_at) else None
    if 6 in plan.onednn_at:  # specviz blocked: keep its copy
        layer.blocked = blocked if blocked is not None else dense_kernel.block(layer.weight)
    else:
        layer.blocked = None
