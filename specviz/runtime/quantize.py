"""A faithful int8 copy of a float32 model for CPU self-drafting, on maintained int8 kernels.

``torch.ao.quantization.quantize_dynamic`` alone (per-tensor int8 weights, one activation scale
for the whole input batch) puts gemma-3-270m's next-token distribution far from its float
original: Gemma's hidden states carry a few channels hundreds of times larger than the rest, and
a batched prefill shares one scale with the huge first-token (attention-sink) rows. This module
fixes the inputs the int8 products see (``python benchmarks/int8_quality.py`` measures every
option):
- per-output-channel symmetric weight scales (``per_channel``);
- one activation scale per token (``per_token``), for every row at once;
- SmoothQuant (Xiao et al., 2023) outlier migration (``smooth_alpha``): per input channel j,
  s_j = max|X_j|^alpha / max|W_:,j|^(1 - alpha) measured on calibration text; the layer computes
  (x / s) @ (W * s)^T, the same product with the activation outliers moved into the weights;
- full 8-bit activations (the int32 accumulation is exact), or 7 bits (``reduce_range``); some
  layers may stay in float (``keep_float``: name suffixes, e.g. ``"down_proj"``).

The projections that read one input (q/k/v, gate/up) share one smoothing and are one fused layer,
so the static step quantizes that input once and multiplies once (72 products a token for
gemma-3-270m, not 126: on a Zen 4 EPYC, 0.8 ms of a 24 ms full-vocabulary draft token in a
session, 2 ms of the body alone; docs/benchmarks.md). Two kernels (``Int8Options.kernel``), no
quantized tensors (``torch.ao``, deprecated upstream) anywhere:
- ``"int_mm"`` (the options' default, :class:`Int8Linear`): ``torch._int_mm`` (int8 x int8 -> int32; oneDNN's VNNI
  kernel where the CPU has it, an exact integer GEMM elsewhere) on plain int8 tensors with the
  scales applied after it, as torchao's CPU int8 path does: no quantized tensors, no warnings,
  symmetric activations, every row at once, so one graph serves every width. A large output head
  (gemma's 262,144 rows) can also run on oneDNN's int8 linear with its weight prepacked once
  (:func:`specviz.runtime.int8_speed.speed_up_int8_head`).
- ``"blocked"`` (:class:`BlockedInt8Linear`): the same int8 weights and scales on specviz's own
  product (:mod:`specviz.runtime.int8_kernel`, built for this CPU): asymmetric uint8 activations
  per token, one op a product, one graph for every width.

An ``@int8`` model (``specviz.models``) runs ``blocked`` where specviz's kernel builds, else
``int_mm`` (:func:`specviz.runtime.int8_speed.choose_kernel`).

Calibration text: the bundled Spec-Bench dev prompts (offline, deterministic). Mean next-token
overlap with float32 on gemma-3-270m (12 held-out prompts x 5 positions after a batched prefill /
4 prompts fed token by token), asymmetric activations (measured on the packed kernel since
removed): torch.ao's quantize_dynamic 0.77 / 0.81; per-channel
0.80 / 0.84; + per-token 0.88 / 0.84; + 8-bit 0.93 / 0.92; + smoothing (alpha 0.5, the default)
0.95 / 0.94; ``down_proj`` in float 0.97 / 0.97 (~70 MB more read per token).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from types import SimpleNamespace

import torch

from . import int8_kernel
from .smoothing import SHARED_INPUTS, activation_absmax, calibration_token_ids, shared_input_groups, smoothing_scales  # noqa: F401

PREFILL_ROWS = 16  # a blocked layer given this many rows at once may run them in one _int_mm call (int_mm_pays)
KERNELS = ("int_mm", "blocked")  # Int8Options.kernel: Int8Linear, BlockedInt8Linear
HEAD_KERNELS = ("_int_mm", "oneDNN")  # the int_mm head's two kernels (speed_up_int8_head)


@dataclass(frozen=True)
class Int8Options:
    """How :func:`quantize_int8` quantizes. The defaults are the measured winner."""

    per_channel: bool = True  # one weight scale per output row (else one per matrix)
    per_token: bool = True  # one activation scale per input row (else one per call)
    smooth_alpha: float | None = 0.5  # SmoothQuant migration strength; None: no smoothing
    keep_float: tuple[str, ...] = ()  # Linear layers whose qualified name ends with one of these stay float
    reduce_range: bool = False  # 7-bit activations on the int_mm path (else 8 bits: its int32 sums are exact)
    calibration_prompts: int = 8  # bundled prompts run through the float model for smoothing
    kernel: str = "int_mm"  # "int_mm" (torch._int_mm) or "blocked" (specviz's own, built for this CPU)
    fuse_siblings: bool = True  # q/k/v and gate/up as one fused layer each (one smoothing, one product per input)

    def __post_init__(self):
        if self.kernel not in KERNELS:
            raise ValueError(f"kernel must be one of {', '.join(KERNELS)}, not {self.kernel!r}")
        if self.smooth_alpha is not None and not 0.0 <= self.smooth_alpha <= 1.0:
            raise ValueError(f"smooth_alpha must lie in [0, 1] or be None, not {self.smooth_alpha}")
        if self.calibration_prompts < 1:
            raise ValueError(f"calibration_prompts must be at least 1, not {self.calibration_prompts}")


def quantize_weight(weight: torch.Tensor, per_channel: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric int8 ``weight`` [out, in] -> (int8 [out, in], float32 scale [out]: one per row,
    or the matrix's one scale repeated)."""
    w = weight.detach().float()
    amax = w.abs().amax(dim=1) if per_channel else w.abs().amax().expand(w.shape[0])  # [out]
    scale = (amax / 127.0).clamp_min(1e-12)  # [out]
    ints = torch.round(w / scale[:, None]).clamp_(-127, 127).to(torch.int8)  # [out, in]
    return ints.contiguous(), scale.contiguous()


def quantize_rows(x: torch.Tensor, per_token: bool, qmax: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric dynamic quantization of ``x`` [rows, in] -> (int8 [rows, in], float32 step
    [rows, 1], or [1, 1] with one scale for the call). Every row at once: no loop, any width."""
    amax = x.abs().amax(dim=1, keepdim=True) if per_token else x.abs().amax().reshape(1, 1)  # [rows | 1, 1]
    step = amax.clamp_min(1e-12) / qmax
    return torch.round(x / step).to(torch.int8), step  # |x / step| <= qmax: no clamp needed


class Int8Linear(torch.nn.Module):
    """y = q(x / s) @ q(W * s)^T (+ bias): a drop-in for a float ``nn.Linear``; q: symmetric int8
    (per output row for W, per token for x), the product ``torch._int_mm``. Its int8 weight, scales
    and smoothing are buffers (``qweight`` [out, in], ``scale`` [out], ``inv_smooth`` [in])."""

    def __init__(self, linear: torch.nn.Linear, smooth: torch.Tensor | None, options: Int8Options):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        weight = linear.weight.detach().float()  # [out, in]
        if smooth is not None:
            weight = weight * smooth[None, :]  # [out, in]
            self.register_buffer("inv_smooth", (1.0 / smooth).float().contiguous())  # [in]
        else:
            self.inv_smooth = None
        ints, scale = quantize_weight(weight, options.per_channel)
        self.register_buffer("qweight", ints)  # [out, in] int8
        self.register_buffer("scale", scale)  # [out] float32
        if linear.bias is not None:
            self.register_buffer("bias", linear.bias.detach().float().contiguous())  # [out]
        else:
            self.bias = None
        self.per_token = options.per_token
        self.qmax = 63.0 if options.reduce_range else 127.0
        self.onednn_at: tuple[bool, ...] = (False,)  # by rows (the last entry for wider): oneDNN's prepacked kernel
        self._packed: tuple[torch.Tensor, torch.Tensor] | None = None  # for oneDNN, built on first use
        self.group: tuple[Int8Linear, ...] = ()  # (the fused layer,) when this one is rows of it (rows())

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [..., in] -> [..., out]
        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.in_features).float()  # [rows, in]
        if self.inv_smooth is not None:
            x2 = x2 * self.inv_smooth  # [rows, in]
        xq, step = quantize_rows(x2, self.per_token, self.qmax)  # [rows, in] int8, [rows | 1, 1]
        if self.onednn_for(x2.shape[0]):  # a Python branch, False for every layer but a measured head
            y = self._onednn(xq) * step  # [rows, out]
        else:
            y = torch._int_mm(xq, self.qweight.t()).float() * step * self.scale  # [rows, out]
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*lead, self.out_features)

    def _onednn(self, xq: torch.Tensor) -> torch.Tensor:
        """oneDNN's int8 linear on the prepacked weight: uint8 activations (xq + 128, zero point 128),
        float32 out with the weight scales applied -> [rows, out] (the row steps still to apply)."""
        if self._packed is None:
            self._packed = (prepack(self.qweight), torch.zeros(self.out_features, dtype=torch.long))
        packed, zeros = self._packed  # the weight in oneDNN's layout, its zero points [out]
        xu = (xq.to(torch.int16) + 128).to(torch.uint8)  # [rows, in]
        return torch.ops.onednn.qlinear_pointwise(xu, 1.0, 128, packed, self.scale, zeros, None, 1.0, 0,
                                                  torch.float32, "none", [], "")

    def onednn_for(self, rows: int) -> bool:
        """Whether ``rows`` rows run on oneDNN's prepacked kernel (only where a head was measured)."""
        table = self.onednn_at
        return any(table) and table[min(rows, len(table) - 1)]

    @property
    def any_width(self) -> bool:
        """One graph of this layer serves every width: no kernel switch by rows (every layer but a
        measured head; the static decode step keeps the head out of its graph anyway)."""
        return not any(self.onednn_at)

    def kernel(self, rows: int) -> str:
        """The kernel ``rows`` rows run on."""
        return HEAD_KERNELS[1] if self.onednn_for(rows) else HEAD_KERNELS[0]

    def __getstate__(self) -> dict:  # copies and pickles leave the prepacked weight out (rebuilt on use)
        state = super().__getstate__() if hasattr(super(), "__getstate__") else self.__dict__
        return {**state, "_packed": None}

    def _like(self, qweight: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor | None) -> "Int8Linear":
        """A layer with these int8 rows [N, in], scales [N] and bias [N] and this one's smoothing
        and activation settings (every width on ``_int_mm``)."""
        new = Int8Linear.__new__(Int8Linear)
        torch.nn.Module.__init__(new)
        new.in_features, new.out_features = self.in_features, int(qweight.shape[0])
        if self.inv_smooth is not None:
            new.register_buffer("inv_smooth", self.inv_smooth)
        else:
            new.inv_smooth = None
        new.register_buffer("qweight", qweight)  # [N, in]
        new.register_buffer("scale", scale)  # [N]
        if bias is not None:
            new.register_buffer("bias", bias)
        else:
            new.bias = None
        new.per_token, new.qmax = self.per_token, self.qmax
        new.onednn_at, new._packed, new.group = (False,), None, ()
        return new.eval()

    def select_rows(self, ids: torch.Tensor) -> "Int8Linear":
        """A copy keeping output rows ``ids`` [N] only, with exactly the same int8 values and
        per-row scales (a per-tensor weight keeps its one scale); every width on ``_int_mm``."""
        return self._like(self.qweight[ids].contiguous(), self.scale[ids].contiguous(),
                          None if self.bias is None else self.bias[ids].contiguous())

    def rows(self, start: int, stop: int) -> "Int8Linear":
        """Output rows start..stop-1 as a layer of their own that shares this one's storage (views:
        no copy), remembering this one as its ``group``."""
        part = self._like(self.qweight[start:stop], self.scale[start:stop],
                          None if self.bias is None else self.bias[start:stop])
        part.group = (self,)  # a tuple: not registered as a submodule (the model counts each weight once)
        return part

    def dequantized(self) -> torch.Tensor:
        """The float weight this layer stands for, [out, in]: its int8 values times their scales,
        the smoothing undone."""
        w = self.qweight.float() * self.scale[:, None]  # [out, in]
        return w * self.inv_smooth[None, :] if self.inv_smooth is not None else w

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, smoothed={self.inv_smooth is not None}"


class BlockedInt8Linear(Int8Linear):
    """``Int8Options(kernel="blocked")``: the same int8 weight, scales and smoothing as
    :class:`Int8Linear`, multiplied by specviz's own kernel (:mod:`specviz.runtime.int8_kernel`:
    the weight blocked for AVX-512 VNNI, asymmetric uint8 activations per token, smoothing,
    scales and bias in the same call: one op a product). A prefill's many rows take ``_int_mm``
    where it pays (:func:`int_mm_pays`). One graph serves every width. The blocked copy
    (``blocked``, ``wsum``: buffers, so a compiled or exported body owns them) is a second copy of the int8 weight, which stays: a fused layer's rows (q, k, v) are views
    of it, and the disk cache stores it. Those rows, which only the model's own forward calls,
    block their part on their first call."""

    def __init__(self, linear: torch.nn.Linear, smooth: torch.Tensor | None, options: Int8Options):
        super().__init__(linear, smooth, options)
        self._block()

    def _block(self) -> None:
        blocked, wsum = int8_kernel.block(self.qweight)  # [N/64, K/4, 64, 4], [N]
        self.register_buffer("blocked", blocked, persistent=False)
        self.register_buffer("wsum", wsum, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [..., in] -> [..., out]
        plain = x.dim() == 2 and x.dtype == torch.float32  # the static body's rows: no reshape, no cast (ops in a graph)
        x2 = x if plain else x.reshape(-1, self.in_features).float()  # [rows, in]
        if prefill_on_int_mm(x2.shape[0]):
            return super().forward(x)
        blocked, wsum = (self.blocked, self.wsum) if "blocked" in self._buffers else self._part_blocked()
        y = int8_kernel.linear(x2, blocked, self.scale, wsum, self.bias, self.inv_smooth, self.out_features)  # [rows, out]
        return y if plain else y.reshape(*x.shape[:-1], self.out_features)

    def _part_blocked(self) -> tuple[torch.Tensor, torch.Tensor]:
        found = self.__dict__.get("_part_copy")
        if found is None:
            with _blocking:
                found = self.__dict__.get("_part_copy")
                if found is None:
                    found = self.__dict__["_part_copy"] = int8_kernel.block(self.qweight)
        return found

    def __getstate__(self) -> dict:  # copies and pickles leave a part's blocked copy out (rebuilt on use)
        return {**super().__getstate__(), "_part_copy": None}

    def _like(self, qweight: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor | None,
              blocked: bool = True) -> "BlockedInt8Linear":
        new = super()._like(qweight, scale, bias)
        new.__class__ = BlockedInt8Linear
        if blocked:
            new._block()
        return new

    def rows(self, start: int, stop: int) -> "BlockedInt8Linear":
        part = self._like(self.qweight[start:stop], self.scale[start:stop],
                          None if self.bias is None else self.bias[start:stop], blocked=False)
        part.group = (self,)
        return part

    def kernel(self, rows: int) -> str:
        return HEAD_KERNELS[0] if prefill_on_int_mm(rows) else "blocked"


_blocking = threading.Lock()


LAYERS: dict[str, type[Int8Linear]] = {"int_mm": Int8Linear, "blocked": BlockedInt8Linear}  # by KERNELS


_int_mm_probe: dict[str, bool] = {}  # int_mm_pays's one measurement


def prefill_on_int_mm(rows: int) -> bool:
    """Whether ``rows`` rows at once (a prompt's prefill) go to one ``torch._int_mm`` call rather
    than a layer's own few-row kernel: :data:`PREFILL_ROWS` or more, where that pays here."""
    return rows >= PREFILL_ROWS and int_mm_pays()


def int_mm_pays(time_both=None) -> bool:
    """Whether one ``torch._int_mm`` call on :data:`PREFILL_ROWS` rows beats specviz's blocked
    kernel on them here; measured once per process (1024 x 640, min of 3 after a warm round).
    With VNNI ``_int_mm`` is oneDNN's kernel and can win; without it ``_int_mm`` is an exact but
    slow integer GEMM (on an AVX2-only AMD EPYC, Zen 1, 16 rows through 4096 x 640 took 151 ms
    against 2.8 ms for a few-row kernel). ``time_both() -> (int_mm s, blocked s)`` stands in for
    the timing in tests."""
    if "pays" not in _int_mm_probe:
        try:
            int_mm_s, blocked_s = (time_both or _time_int_mm_and_blocked)()
        except (RuntimeError, AttributeError):  # no _int_mm in this build, or no blocked kernel: keep the layer's own
            int_mm_s, blocked_s = 1.0, 0.0
        _int_mm_probe["pays"] = int_mm_s < blocked_s
    return _int_mm_probe["pays"]


def _time_int_mm_and_blocked() -> tuple[float, float]:
    w, x = torch.randn(1024, 640), torch.randn(PREFILL_ROWS, 640)  # [out, in], [rows, in]
    ints, scale = quantize_weight(w, True)  # [out, in] int8, [out]
    ints_t, (blocked, wsum) = ints.t().contiguous(), int8_kernel.block(ints)
    xq = quantize_rows(x, True, 127.0)[0]  # [rows, in] int8
    both = (lambda: torch._int_mm(xq, ints_t), lambda: int8_kernel.linear(x, blocked, scale, wsum, None, None, 1024))
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(4):
        for f, ts in zip(both, times):
            t = time.perf_counter()
            f()
            ts.append(time.perf_counter() - t)
    return min(times[0][1:]), min(times[1][1:])


def prepack(ints: torch.Tensor) -> torch.Tensor:
    """int8 weight [out, in] in oneDNN's blocked layout (an opaque tensor; built once per head)."""
    return torch.ops.onednn.qlinear_prepack(ints, None)


def _fused(names: tuple[str, ...], lins: list[torch.nn.Linear], stats: dict[str, torch.Tensor],
           options: Int8Options, layer: type[Int8Linear]) -> dict[str, torch.nn.Module]:
    """One ``layer`` (:class:`Int8Linear` or :class:`BlockedInt8Linear`) over the stacked weights of
    projections that read one input (one smoothing, measured on that input against all their
    weights; one activation quantization and one int8 product for all of them in the static
    step) -> {name: its rows}."""
    weight = torch.cat([lin.weight.detach().float() for lin in lins])  # [sum out, in]
    bias = None if lins[0].bias is None else torch.cat([lin.bias.detach().float() for lin in lins])
    stacked = SimpleNamespace(in_features=weight.shape[1], out_features=weight.shape[0], weight=weight, bias=bias)
    seen = [stats[n] for n in names if n in stats]
    smooth = None
    if options.smooth_alpha is not None and seen:
        smooth = smoothing_scales(torch.stack(seen).amax(dim=0), weight, options.smooth_alpha)
    fused = layer(stacked, smooth, options)
    out, start = {}, 0
    for name, lin in zip(names, lins):
        out[name] = fused.rows(start, start + lin.out_features)
        start += lin.out_features
    return out


def _float_linear(module: torch.nn.Module) -> torch.nn.Linear | None:
    if type(module) is torch.nn.Linear:
        return module
    inner = getattr(module, "linear", None)  # specviz.runtime.cpu.RowAdaptiveLinear wraps the head
    return inner if type(inner) is torch.nn.Linear else None


@torch.inference_mode()
def quantize_int8(model: torch.nn.Module, tokenizer=None, options: Int8Options | None = None) -> torch.nn.Module:
    """Replace every float32 ``nn.Linear`` of ``model`` (in place; the LM head included, as its
    own int8 copy when tied; the input embedding stays float) by an :class:`Int8Linear`.

    ``tokenizer`` is needed for smoothing (it encodes the calibration prompts). -> ``model`` (eval).
    """
    options = options or Int8Options()
    if options.smooth_alpha is not None and tokenizer is None:
        raise ValueError("smoothing needs the model's tokenizer for its calibration text; pass tokenizer= or smooth_alpha=None")
    targets, seen = [], set()
    for name, m in model.named_modules():  # a wrapper comes before the Linear it wraps: keep the wrapper's name
        lin = _float_linear(m)
        if lin is not None and id(lin) not in seen:
            seen.add(id(lin))
            targets.append((name, lin))
    if not targets:
        raise ValueError("the model has no nn.Linear layers to quantize")
    stats = {}
    if options.smooth_alpha is not None:
        stats = activation_absmax(model, calibration_token_ids(tokenizer, options.calibration_prompts))
    for name, lin in targets:
        if lin.weight.dtype != torch.float32 or lin.weight.device.type != "cpu":
            raise ValueError(f"int8 quantization needs float32 weights on the CPU; {name} is {lin.weight.dtype} on {lin.weight.device}")
    chosen = {name: lin for name, lin in targets if not any(name.endswith(suffix) for suffix in options.keep_float)}
    replacements = {}
    layer = LAYERS[options.kernel]
    if options.kernel == "blocked" and (why := int8_kernel.load()) is not None:
        raise ValueError(f"the blocked int8 kernel is not available here: {why}")
    for names in shared_input_groups(chosen) if options.fuse_siblings else ():  # q/k/v, gate/up: one fused layer each
        replacements.update(_fused(names, [chosen[n] for n in names], stats, options, layer))
    for name, lin in chosen.items():
        if name in replacements:
            continue
        smooth = None
        if options.smooth_alpha is not None and name in stats:
            smooth = smoothing_scales(stats[name], lin.weight, options.smooth_alpha)
        replacements[name] = layer(lin, smooth, options)
    for name, new in replacements.items():
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, new)
    return model.eval()
