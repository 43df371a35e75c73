"""A certified greedy argmax for a large float32 LM head, at a half or a quarter of its bytes.

Greedy steps need only each row's argmax of w_i . h, and a 262,144 x 640 float32 head is most of a
small model's decode step (671 MB read). So: (1) screen y = h' . w'_i through a cheaper copy of the
head, :class:`Screen` (bf16, float32 or native bf16 products) or :class:`Int8Screen` (int8, exact
int32 sums); (2) bound |y_i - w_i . h| from the rounding alone, one B per row (bf16) or one per
(row, id) (int8, by Cauchy-Schwarz), the float32 recompute's own rounding included; (3) recompute in
float32 the ids the bound cannot rule out, kept in the screen's own pass (``screen_top``,
``screen8_top``: y [n, V] is never written), and take the first largest. The result is the float32
recompute's argmax over the whole head. Every bound, its assumptions and its tests:
docs/exactness.md, section 4. More than :data:`MAX_KEPT` survivors (a degenerate row): the full head
decides; a final-logit softcap can tie rows in float32, so such a head is never screened.

:class:`HeadLogits` is one step's logits: its argmax certified as above, every logit bounded (a
sampled step's, :mod:`specviz.runtime.sampled_head`), the full row computed only when read. Which
screen runs at which width the model's plan names (:func:`attach`; ``specviz tune`` measures it).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass

import torch

from . import cpu, state
from .quantize import quantize_weight

log = logging.getLogger(__name__)

MAX_KEPT = 4096  # more surviving rows than this: the full float32 head instead
INT8_MAX_KEPT = 16384  # the int8 screen's (its bound keeps ~10x more: gemma-3-270m, a few hundred, at most ~5,000)
WIDTHS = (1, 2, 3, 5, 9, 17)  # widths specviz tune times (a chain verifies k + 1 rows, a tree its nodes + 1; wider: the widest)
LANES = 16  # outputs a block of the screen op's weight
U32 = 2.0**-24
TINY = 2.0**-126  # float32's smallest normal: below it the bf16 instruction reads and writes 0


@dataclass(frozen=True)
class Screen:
    """A head's bf16 screening copy and the constants of its error bound."""

    weight: torch.Tensor  # [V, d] float32, the head's own
    blocked: torch.Tensor  # [ceil(V/16), ceil(d/2), 32] bf16 bits (int16) in input pairs, zero-padded: the op's layout
    norm_max: float  # N = max_i |w_i|
    err_max: float  # E = max_i |w_i - bf16(w_i)|
    dot: bool = False  # rows rounded to bf16 for the CPU's bf16 dot product (else float32 rows)
    use_at: tuple[bool, ...] = (False, True)  # by rows (the last entry for wider): screen at this width?
    times: dict[int, tuple[float, float]] = dataclasses.field(default_factory=dict)  # rows -> (full ms, screened ms)
    kind: str = "bf16"

    def used(self, rows: int) -> bool:
        return self.use_at[min(rows, len(self.use_at) - 1)]

    def rows(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The op's rows h' [n, 2 ceil(d/2)] (float32, or bf16 with denormals flushed) of float32
        hidden states h [n, d], and |h - h'| [n]."""
        x = torch.nn.functional.pad(h, (0, h.shape[-1] % 2))  # an odd d: one zero input more
        if not self.dot:
            return x, h.new_zeros(h.shape[0])
        xb = x.to(torch.bfloat16)
        xb = torch.where(xb.abs() < TINY, torch.zeros_like(xb), xb)  # the instruction reads denormals as 0
        return xb, (x - xb.float()).norm(dim=-1)

    def bound(self, h: torch.Tensor, off: torch.Tensor | None = None) -> torch.Tensor:
        """B per row of h [n, d] -> [n]; ``off``: |h - h'| [n] where already computed."""
        if off is None:
            off = self.rows(h)[1]
        hn, d, w = h.norm(dim=-1), h.shape[-1], self.norm_max + self.err_max  # [n]
        sums = 1.01 * d * (2 * U32 if self.dot else U32) * (hn + off) * w + (2 * d * TINY if self.dot else 0.0)
        recompute = recompute_error(d) * hn * self.norm_max  # the survivors' float32 recompute, in any order
        return (hn * self.err_max + off * w + sums + recompute) * 1.001

    def screen(self, h: torch.Tensor, x: torch.Tensor | None = None) -> torch.Tensor:
        """h' @ bf16(W)^T [n, V], float32, of float32 hidden states h [n, d] (``x``: h' where already made)."""
        x = self.rows(h)[0] if x is None else x
        return torch.ops.specviz_int8.screen(x, self.blocked)[:, : self.weight.shape[0]]

    def argmax(self, h: torch.Tensor) -> torch.Tensor | None:
        """The first argmax of h @ W^T per row [n] (h [n, d] float32), certified; None where some
        row keeps more than MAX_KEPT candidates (then the caller runs the full head)."""
        x, off = self.rows(h)
        # the survivors y >= max(y) - 2B in the op's own pass (y [n, V] never written): row-major,
        # ids ascending; top [n] NaN where a row kept more than MAX_KEPT
        top, rows, cols = torch.ops.specviz_int8.screen_top(x, self.blocked, 2 * self.bound(h, off),
                                                             self.weight.shape[0], MAX_KEPT)
        if not bool(torch.isfinite(top).all()):
            return None  # an overflow (the bound says nothing), or too many survivors
        return _first_best(self.weight, h, rows, cols)


def recompute_error(d: int) -> float:
    """gamma_d / (|h| |w|): a float32 dot product of length d, summed in any order, is within
    1.01 d u |h| |w| of the real one (u = 2^-24; d u < 0.01). Every bound here includes it once
    more for the exact logits the survivors are recomputed to (``pair_dots``), so the certified
    argmax is the recompute's own argmax over the whole head, not just within rounding of it
    (docs/exactness.md)."""
    return 1.01 * d * U32


def _first_best(weight: torch.Tensor, h: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """The first largest w_i . h per row of h [n, d] among the survivors (rows [m], cols [m]), in float32 -> [n]."""
    exact = torch.ops.specviz_int8.pair_dots(h, weight, rows, cols)  # [m] float32: w_i . h for each survivor
    n, big = h.shape[0], torch.iinfo(torch.long).max
    best = torch.full((n,), float("-inf"), dtype=exact.dtype).scatter_reduce(0, rows, exact, "amax")
    first = torch.where(exact == best[rows], cols, big)  # ties: the first id
    return torch.full((n,), big).scatter_reduce(0, rows, first, "amin")


@dataclass(frozen=True)
class Int8Screen:
    """A head's int8 screening copy: each row w_i as w'_i = scale_i q_i (q_i int8, |q| <= 127), and
    the two norms its bound needs (``torch.ops.specviz_int8.screen8_top``: each row of h quantized
    per token as the int8 product does, the sums exact in int32, a bound per (row, id) by
    Cauchy-Schwarz). A quarter of the float32 head's bytes; on CPUs with VNNI, four bf16 products'
    worth an instruction."""

    weight: torch.Tensor  # [V, d] float32, the head's own
    blocked: torch.Tensor  # [ceil(V/64), ceil(d/4), 64, 4] int8: the int8 product's layout
    scale: torch.Tensor  # [V] float32
    wsum: torch.Tensor  # [V] int32: sum_k q_ik (the zero points multiply it)
    err: torch.Tensor  # [V] float32: |w_i - w'_i| + the recompute's rounding per unit |h|, rounded up
    wn: torch.Tensor  # [V] float32: |w'_i|, rounded up
    use_at: tuple[bool, ...] = (False, True)
    times: dict[int, tuple[float, float]] = dataclasses.field(default_factory=dict)
    kind: str = "int8"

    used = Screen.used

    @property
    def norm_max(self) -> float:
        return float(self.wn.max())  # about max_i |w_i| (to scale timing rows)

    def argmax(self, h: torch.Tensor) -> torch.Tensor | None:
        """As :meth:`Screen.argmax`, through the int8 screen."""
        low, rows, cols = torch.ops.specviz_int8.screen8_top(h.contiguous(), self.blocked, self.scale, self.wsum,
                                                             self.err, self.wn, self.weight.shape[0], INT8_MAX_KEPT)
        if not bool(torch.isfinite(low).all()):
            return None  # too many survivors, or an overflow
        return _first_best(self.weight, h, rows, cols)


def build_int8(weight: torch.Tensor) -> Int8Screen:
    """The int8 screen of a float32 head weight [V, d] (symmetric, one scale a row)."""
    from . import int8_kernel

    w = weight.detach()
    q, scale = quantize_weight(w)  # [V, d] int8, [V]: as an @int8 model's layers
    blocked, wsum = int8_kernel.block(q)
    err, wn = torch.empty_like(scale), torch.empty_like(scale)
    inf = torch.tensor(float("inf"))
    for i in range(0, w.shape[0], 16384):  # in double, a slice at a time (the whole head would take 2.7 GB)
        wide = q[i : i + 16384].double() * scale[i : i + 16384].double()[:, None]  # w'_i exactly
        # |w_i - w'_i|, plus the recompute's rounding per unit |h| (recompute_error), rounded up
        err_i = (w[i : i + 16384].double() - wide).norm(dim=1) + recompute_error(w.shape[1]) * w[i : i + 16384].double().norm(dim=1)
        err[i : i + 16384] = torch.nextafter(err_i.float(), inf)
        wn[i : i + 16384] = torch.nextafter(wide.norm(dim=1).float(), inf)
    return Int8Screen(w, blocked, scale, wsum, err, wn)


def _bf16(weight: torch.Tensor) -> torch.Tensor:
    """bf16(w), denormals flushed to zero (as the bf16 instruction reads them)."""
    wb = weight.detach().to(torch.bfloat16)
    return torch.where(wb.abs() < TINY, torch.zeros_like(wb), wb)


def block(rounded: torch.Tensor) -> torch.Tensor:
    """A bf16 weight [V, d] (:func:`_bf16`'s) -> its bits in input pairs, [ceil(V/16), ceil(d/2), 32]
    (int16), zero-padded: for outputs j and inputs 2p, 2p + 1 of a block, entries 2j and 2j + 1 of row p."""
    v, d = rounded.shape
    vp, dp = -(-v // LANES) * LANES, d + d % 2
    padded = torch.zeros(vp, dp, dtype=torch.bfloat16)
    padded[:v, :d] = rounded
    return padded.view(torch.int16).view(vp // LANES, LANES, dp // 2, 2).permute(0, 2, 1, 3).reshape(vp // LANES, dp // 2, 2 * LANES)


def native_dot() -> bool:
    """Whether the screen op multiplies bf16 rows natively here (AVX512-BF16)."""
    return bool(torch.ops.specviz_int8.screen_dot_native())


def build(weight: torch.Tensor, dot: bool | None = None) -> Screen:
    """The screen of a float32 head weight [V, d] (its bf16 copy: half the weight's bytes again);
    ``dot``: bf16 rows (default: where the CPU multiplies them natively)."""
    w = weight.detach()
    rounded = _bf16(w)  # [V, d]
    err = (w - rounded.float()).norm(dim=-1)  # [V]
    return Screen(w, block(rounded), float(w.norm(dim=-1).max()), float(err.max()), native_dot() if dot is None else dot)


def top_probability(logits: torch.Tensor) -> torch.Tensor:
    """Logits [..., V] -> [...]: the largest softmax probability per row, 1 / sum(exp(l - max))."""
    logits = logits.float()
    top = logits.max(dim=-1, keepdim=True).values  # [..., 1]
    return 1.0 / torch.exp(logits - top).sum(dim=-1)


class HeadLogits:
    """One step's logits [n, V] (``specviz.core.logits``' BoundedLogits), computed when first read;
    its argmax certified without them, and (a bf16 screen's) every logit bounded without them
    (:meth:`bounds`, for a sampled step: :mod:`specviz.core.certified`)."""

    def __init__(self, hidden: torch.Tensor, full: Callable[[torch.Tensor], torch.Tensor], screen: Screen):
        self.hidden, self._full, self.screen, self._logits = hidden, full, screen, None  # hidden [n, d]
        self.shape = torch.Size((hidden.shape[0], screen.weight.shape[0]))

    def get(self) -> torch.Tensor:
        if self._logits is None:
            with torch.inference_mode():  # read later, perhaps outside the step's no-grad
                self._logits = self._full(self.hidden)  # [n, V]
        return self._logits

    def argmax(self) -> torch.Tensor:
        """[n]: the first largest logit's id per row, as ``logits.max(-1).indices``."""
        if self._logits is not None:
            return self._logits.max(dim=-1).indices
        best = self.screen.argmax(self.hidden.float())
        return best if best is not None else self.get().max(dim=-1).indices

    def top_probability(self) -> torch.Tensor:
        """[n]: each row's largest softmax probability, from the whole row (a confidence stop)."""
        return top_probability(self.get())

    def bounds(self) -> tuple[torch.Tensor, list[float]]:
        """(y [n, V] float32, b per row): every logit within b of its y (the bf16 screen's bound)."""
        h = self.hidden.float()
        x, off = self.screen.rows(h)
        return self.screen.screen(h, x), self.screen.bound(h, off).tolist()

    def exact(self, row: int, ids: torch.Tensor) -> torch.Tensor:
        """The float32 logits of ``ids`` [m] in row ``row`` -> [m] (each one dot product of the head)."""
        h = self.hidden[row : row + 1].float()
        return torch.ops.specviz_int8.pair_dots(h, self.screen.weight, torch.zeros_like(ids), ids)


# -- the choice, per model: the screen its plan names (specviz.runtime.plan) ----------------------


def setting(model: torch.nn.Module) -> str:
    value = state.of(model).options.argmax_head  # SPECVIZ_ARGMAX_HEAD
    if value not in ("auto", "on", "int8", "0"):
        raise ValueError(f"SPECVIZ_ARGMAX_HEAD must be auto, on, int8 or 0, not {value!r}")
    return value


def eligible(model: torch.nn.Module, min_elements: int | None = None) -> bool:
    """A large float32 nn.Linear-like head on the CPU (``min_elements``: cpu.MIN_HEAD_ELEMENTS), no final softcap."""
    min_elements = cpu.MIN_HEAD_ELEMENTS if min_elements is None else min_elements
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    w = getattr(head, "weight", None)
    text = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    return (isinstance(w, torch.Tensor) and w.dtype == torch.float32 and w.device.type == "cpu" and w.dim() == 2
            and w.numel() >= min_elements and getattr(head, "bias", None) is None
            and not getattr(text, "final_logit_softcapping", None))


KINDS = ("bf16", "int8")  # the screens a head may get
MAKERS = {"bf16": build, "int8": build_int8}


def attach(model: torch.nn.Module, min_elements: int | None = None) -> Screen | Int8Screen | None:
    """Give ``model`` the screen its plan names (its "argmax" kind; without a tuned plan, the bf16
    screen at every width: its argmax is certified either way, so only speed depends on it)
    where it is eligible (``on``: the bf16 screen at every width, ``int8``: the int8 one, ``0``:
    none). Nothing is timed here. -> the screen, or None; :func:`report`."""
    from . import int8_kernel, plan

    held = state.of(model)
    held.screen = None
    mode = setting(model)
    if mode == "0" or not eligible(model, min_elements):
        return None
    why = int8_kernel.load()
    if why is not None:
        log.info("specviz: no certified argmax head: the screen op %s", why)
        return None
    wanted = plan.of(model).kind("argmax") if mode == "auto" else plan.KindPlan({1: "bf16" if mode == "on" else "int8"})
    kinds = [k for k in dict.fromkeys(wanted.kernel(r) for r in range(1, max(max(wanted.kernels), WIDTHS[-1]) + 1)) if k in KINDS]
    if not kinds:
        log.info("specviz: the plan keeps the full float32 head for greedy steps")
        return None
    head = model.get_output_embeddings()
    screens = [dataclasses.replace(MAKERS[kind](head.weight), use_at=use_at(wanted, kind),
                                   times={w: (m["full"], m[kind]) for w, m in wanted.ms.items() if kind in m})
               for kind in kinds]  # the kind at one row first: target-only decoding's
    held.screen, held.extra["screens"] = screens[0], screens
    log.info("specviz: greedy argmax through the %s screen%s of the %dx%d head (%s)", " and ".join(kinds),
             "s" if len(kinds) > 1 else "", *head.weight.shape, "tuned" if wanted.cached else "CPU features' default")
    return held.screen


def use_at(kind_plan, kind: str) -> tuple[bool, ...]:
    """Screen at each width from 0 up (the last entry for wider): where ``kind_plan`` names ``kind``."""
    widest = max(max(kind_plan.kernels), WIDTHS[-1])
    return (False,) + tuple(kind_plan.kernel(r) == kind for r in range(1, widest + 1))


def screen_of(model: torch.nn.Module, rows: int | None = None) -> Screen | Int8Screen | None:
    """``model``'s screen (``rows``: the one its plan uses at that width, None where it runs the full head)."""
    held = state.peek(model)
    if held is None or held.screen is None or rows is None:
        return held.screen if held is not None else None
    return next((s for s in held.extra.get("screens", [held.screen]) if s.used(rows)), None)


def screens_of(model: torch.nn.Module) -> list:
    """Every screen ``model`` keeps (one, or the int8 and the bf16 one where each wins some widths)."""
    held = state.peek(model)
    return [] if held is None or held.screen is None else held.extra.get("screens", [held.screen])


def detach(model: torch.nn.Module) -> None:
    """Run ``model``'s full float32 head again at every width."""
    held = state.of(model)
    held.screen = None
    held.extra.pop("screens", None)
