"""The int8 layers an ``@int8`` model runs (:mod:`specviz.models.int8` makes them): y = q(x / s) @
q(W * s)^T, q symmetric int8 per output row for W and per token for x (exact int32 sums), s the
SmoothQuant scales. Two kernels, no ``torch.ao`` tensors: ``"blocked"`` (:class:`BlockedInt8Linear`,
specviz's own, :mod:`specviz.runtime.int8_kernel`), what an ``@int8`` model runs where it builds,
and ``"int_mm"`` (:class:`Int8Linear`, ``torch._int_mm``), the fallback where no compiler is there.
"""

from __future__ import annotations

import threading

import torch

from . import int8_kernel


def quantize_weight(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric int8 ``weight`` [out, in] -> (int8 [out, in], float32 scale [out], one a row)."""
    w = weight.detach().float()
    scale = (w.abs().amax(dim=1) / 127.0).clamp_min(1e-12)  # [out]
    ints = torch.round(w / scale[:, None]).clamp_(-127, 127).to(torch.int8)  # [out, in]
    return ints.contiguous(), scale.contiguous()


def quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric int8 ``x`` [rows, in], one step a row -> (int8 [rows, in], float32 step [rows, 1]).
    Every row at once, no loop: one graph serves any width."""
    step = x.abs().amax(dim=1, keepdim=True).clamp_min(1e-12) / 127.0  # [rows, 1]
    return torch.round(x / step).to(torch.int8), step  # |x / step| <= 127: no clamp needed


class Int8Linear(torch.nn.Module):
    """y = q(x / s) @ q(W * s)^T (+ bias): a drop-in for a float ``nn.Linear``; q: symmetric int8
    (per output row for W, per token for x), the product ``torch._int_mm``. Its int8 weight, scales
    and smoothing are buffers (``qweight`` [out, in], ``scale`` [out], ``inv_smooth`` [in])."""

    any_width = True  # one call serves every width, [n, in] -> [n, out] (specviz.runtime.body)

    def __init__(self, linear: torch.nn.Linear, smooth: torch.Tensor | None):
        super().__init__()
        weight = linear.weight.detach().float()  # [out, in]
        inv_smooth = None
        if smooth is not None:
            weight, inv_smooth = weight * smooth[None, :], (1.0 / smooth).float().contiguous()  # [out, in], [in]
        ints, scale = quantize_weight(weight)  # [out, in] int8, [out] float32
        bias = None if linear.bias is None else linear.bias.detach().float().contiguous()  # [out]
        self._hold(linear.in_features, ints, scale, bias, inv_smooth)

    def _hold(self, in_features: int, qweight: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor | None,
              inv_smooth: torch.Tensor | None) -> None:
        """Keep these tensors as the layer's buffers (an absent one as None)."""
        self.in_features, self.out_features = in_features, int(qweight.shape[0])
        for name, t in (("inv_smooth", inv_smooth), ("qweight", qweight), ("scale", scale), ("bias", bias)):
            if t is None:
                setattr(self, name, None)
            else:
                self.register_buffer(name, t)
        self.group: tuple[Int8Linear, ...] = ()  # (the fused layer,) when this one is rows of it (rows())

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [..., in] -> [..., out]
        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.in_features).float()  # [rows, in]
        if self.inv_smooth is not None:
            x2 = x2 * self.inv_smooth  # [rows, in]
        xq, step = quantize_rows(x2)  # [rows, in] int8, [rows, 1]
        y = torch._int_mm(xq, self.qweight.t()).float() * step * self.scale  # [rows, out]
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*lead, self.out_features)

    def _like(self, qweight: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor | None,
              blocked: bool = True) -> "Int8Linear":
        """A layer of int8 rows [N, in], scales [N], bias [N] with this one's smoothing
        (``blocked``: with a blocked copy of its own, where the class keeps one)."""
        new = Int8Linear.__new__(Int8Linear)
        torch.nn.Module.__init__(new)
        new._hold(self.in_features, qweight, scale, bias, self.inv_smooth)  # [N, in], [N], [N]
        return new.eval()

    def select_rows(self, ids: torch.Tensor) -> "Int8Linear":
        """A copy of output rows ``ids`` [N] only: the same int8 values and scales."""
        return self._like(self.qweight[ids].contiguous(), self.scale[ids].contiguous(),
                          None if self.bias is None else self.bias[ids].contiguous())

    def rows(self, start: int, stop: int) -> "Int8Linear":
        """Output rows start..stop-1 as a layer of their own that shares this one's storage (views:
        no copy), remembering this one as its ``group``."""
        part = self._like(self.qweight[start:stop], self.scale[start:stop],
                          None if self.bias is None else self.bias[start:stop], blocked=False)
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
    """Kernel ``"blocked"``: :class:`Int8Linear`'s weight, scales and smoothing on
    specviz's own kernel (:mod:`specviz.runtime.int8_kernel`), at every width, so a row has the
    same bits at any width. ``blocked``/``wsum`` are a second copy of the weight; ``qweight`` stays
    (a fused layer's rows are views of it, the disk cache stores it), and those rows, called only
    by the model's own forward, block their part on first use."""

    def __init__(self, linear: torch.nn.Linear, smooth: torch.Tensor | None):
        super().__init__(linear, smooth)
        self._block()

    def _block(self) -> None:
        blocked, wsum = int8_kernel.block(self.qweight)  # [N/64, K/4, 64, 4], [N]
        self.register_buffer("blocked", blocked, persistent=False)
        self.register_buffer("wsum", wsum, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [..., in] -> [..., out]
        plain = x.dim() == 2 and x.dtype == torch.float32  # the static body's rows: no reshape, no cast (ops in a graph)
        x2 = x if plain else x.reshape(-1, self.in_features).float()  # [rows, in]
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


_blocking = threading.Lock()


LAYERS: dict[str, type[Int8Linear]] = {"int_mm": Int8Linear, "blocked": BlockedInt8Linear}  # by kernel name
