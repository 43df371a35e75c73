"""A draft that scores only the likeliest part of the vocabulary (FR-Spec: Zhao et al., 2025,
"Accelerating Large-Vocabulary Language Models via Frequency-Ranked Speculative Sampling").

gemma-3-270m's output head has 262,144 rows: in its int8 copy the head alone is about a third of
a draft token's time, and most rows are tokens a draft almost never needs (other scripts, rare
pieces). ``draft:NAME,vocab=N`` gives the draft a head over N rows: the N tokens its *target*
puts the most probability on, on average over the bundled calibration text (every next-token
distribution summed, so a token counts where it was plausible, not only where it was written),
with every token of that text first. Rows outside the set get logit -inf: the draft never
proposes them and q is 0 there.

Exactness does not depend on the set: the target verifies with its full vocabulary and the rule
is exact for any q (a token the draft cannot propose is simply always the target's own pick after
a rejection). Only speed and acceptance change; ``specviz bench`` measures both.

The draft's body is shared with the full-vocabulary draft: :func:`with_vocab_subset` returns a
model that shares every module except the head (built once per model and N, never mutated).
"""

from __future__ import annotations

import copy
import threading
import weakref
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import numpy as np
import torch

from ..runtime.argmax_head import top_probability

MIN_VOCAB = 1  # a floor for the argument only: useful sets are thousands of tokens (bench them)


_EXTRA: ContextVar[tuple[torch.Tensor, torch.Tensor] | None] = ContextVar("specviz_vocab_extra", default=None)


class SubsetHead(torch.nn.Module):
    """logits[..., ids] = x @ W[ids]^T, -inf elsewhere: an output head over ``ids`` laid out on
    the full vocabulary of ``out_features`` entries, so nothing downstream changes shape. Inside
    :meth:`ContextRows.active` the session's extra rows (context tokens outside ``ids``) are
    scored too, in float; the module itself is shared and never changes."""

    def __init__(self, head: torch.nn.Module, ids: torch.Tensor, out_features: int, float_rows: Callable[[torch.Tensor], torch.Tensor]):
        super().__init__()
        self.rows = head_rows(head, ids)  # a Linear (float or Int8Linear) over len(ids) rows
        self.register_buffer("ids", ids.long().contiguous())  # [N] token ids, row order
        self.members = frozenset(ids.tolist())
        self.float_rows = float_rows  # token ids [E] -> the full head's rows [E, d], float
        self.in_features, self.out_features = int(getattr(head, "in_features", 0)), out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [..., d] -> [..., V]
        return self.lazy_logits(x).laid_out()

    def lazy_logits(self, x: torch.Tensor, dtype: torch.dtype | None = None) -> SubsetLogits:
        """The logits of x [n, d] over the head's rows and the session's extra rows (those active
        now), laid out on the full vocabulary, in ``dtype`` (default: the rows'), only when read: a
        greedy draft reads the argmax alone (16k values, not a 262k row of -inf written and scanned
        a token: 0.45 -> 0.10 ms on a Zen 4 EPYC)."""
        y = self.rows(x)  # [n, N]
        extra = _EXTRA.get()
        if extra is None:
            return SubsetLogits(y, self.ids, None, None, self.out_features, dtype)
        ids, weight = extra  # [E], [E, d]
        return SubsetLogits(y, self.ids, (x.to(weight.dtype) @ weight.T).to(y.dtype), ids, self.out_features, dtype)

    def extra_repr(self) -> str:
        return f"rows={self.ids.numel()}, out_features={self.out_features}"


class SubsetLogits:
    """Logits that are -inf outside ``ids`` and ``extra_ids``: y [n, N] at ``ids`` [N], extra [n, E] at
    ``extra_ids`` [E] (disjoint), on a vocabulary of V. ``get()`` lays them out, as the head's
    forward returns them; ``argmax()`` takes the first largest without that."""

    def __init__(self, y: torch.Tensor, ids: torch.Tensor, extra: torch.Tensor | None, extra_ids: torch.Tensor | None,
                 V: int, dtype: torch.dtype | None = None):
        self.y, self.ids, self.extra, self.extra_ids, self._logits = y, ids, extra, extra_ids, None
        self.shape, self.dtype = torch.Size((*y.shape[:-1], V)), dtype or y.dtype

    def get(self) -> torch.Tensor:
        if self._logits is None:
            with torch.inference_mode():  # read later, perhaps outside the step's no-grad
                self._logits = self.laid_out()
        return self._logits

    def laid_out(self) -> torch.Tensor:
        """[..., V]: -inf, and the values at their ids."""
        out = self.y.new_full(self.shape, float("-inf"), dtype=self.dtype)  # [..., V]
        out[..., self.ids] = self.y.to(self.dtype)
        if self.extra is not None:
            out[..., self.extra_ids] = self.extra.to(self.dtype)
        return out

    def top_probability(self) -> torch.Tensor:
        """[...]: the largest softmax probability per row, over the values alone (the -inf elsewhere
        add nothing to the sum), as the laid-out row's."""
        return top_probability(self._values())

    def _values(self) -> torch.Tensor:
        return self.y if self.extra is None else torch.cat([self.y, self.extra], dim=-1)  # [..., C]

    def argmax(self) -> torch.Tensor:
        """[...]: per row, the smallest id among the largest values (among the NaNs, if any), as
        ``get().max(-1).indices``; a row with every value -inf, from the laid-out row."""
        if self._logits is not None:
            return self._logits.max(dim=-1).indices
        values = self._values()  # [..., C]
        ids = (self.ids if self.extra is None else torch.cat([self.ids, self.extra_ids])).numpy()  # [C]
        rows = values.detach().float().reshape(-1, values.shape[-1]).numpy()  # [n, C]
        best = []
        for row in rows:
            top = row.max()  # NaN if any is
            if top == float("-inf"):
                return self.get().max(dim=-1).indices
            best.append(int(ids[np.isnan(row) if np.isnan(top) else row == top].min()))
        return torch.tensor(best, dtype=torch.long).reshape(self.shape[:-1])


class ContextRows:
    """One session's context tokens that a :class:`SubsetHead` leaves out, scored in float while
    :meth:`active`: a draft can then propose any token it has already seen (code identifiers,
    names), which FR-Spec's fixed set misses."""

    def __init__(self, head: SubsetHead):
        self.head = head
        self.ids: list[int] = []  # in the order they were added (the rows of _weight)
        self._seen: set[int] = set()
        self._ids = torch.empty(0, dtype=torch.long)  # [E]
        self._weight: torch.Tensor | None = None  # [E, d]

    def add(self, token_ids: Iterable[int]) -> None:
        """Include these context tokens (those already scored are skipped)."""
        members, seen, V = self.head.members, self._seen, self.head.out_features
        new = [x for x in dict.fromkeys(token_ids) if x not in members and x not in seen and 0 <= x < V]
        if not new:
            return
        ids = torch.tensor(new, dtype=torch.long, device=self.head.ids.device)  # [e]
        rows = self.head.float_rows(ids)  # [e, d]
        self.ids.extend(new)
        seen.update(new)
        self._ids = torch.cat([self._ids.to(ids.device), ids])
        self._weight = rows if self._weight is None else torch.cat([self._weight, rows])

    @contextmanager
    def active(self):
        token = _EXTRA.set((self._ids, self._weight) if self.ids else None)
        try:
            yield
        finally:
            _EXTRA.reset(token)


def context_rows_for(model: torch.nn.Module) -> ContextRows | None:
    """A new session's :class:`ContextRows` when ``model``'s head is a :class:`SubsetHead`, else None."""
    head = model.get_output_embeddings()
    return ContextRows(head) if isinstance(head, SubsetHead) else None


@contextmanager
def scoring(rows: ContextRows | None, token_ids: Iterable[int]):
    """While inside, a session's cut head also scores ``token_ids`` (added to ``rows``) and the
    context tokens added before; nothing happens for ``rows`` None (a full head)."""
    if rows is None:
        yield
        return
    rows.add(token_ids)
    with rows.active():
        yield


def head_rows(head: torch.nn.Module, ids: torch.Tensor) -> torch.nn.Module:
    """A copy of output head ``head`` (nn.Linear, a wrapper with ``.linear``, or Int8Linear)
    keeping only rows ``ids`` [N], in that order; int8 rows keep their exact int8 values."""
    if hasattr(head, "select_rows"):  # specviz.runtime.quantize.Int8Linear
        return head.select_rows(ids)
    linear = getattr(head, "linear", head)
    if not isinstance(linear, torch.nn.Linear):
        raise ValueError(f"vocab=N needs a Linear output head; this model's is {type(head).__name__}")
    rows = torch.nn.Linear(linear.in_features, ids.numel(), bias=linear.bias is not None,
                           device=linear.weight.device, dtype=linear.weight.dtype)
    with torch.no_grad():
        rows.weight.copy_(linear.weight[ids])  # [N, d]
        if linear.bias is not None:
            rows.bias.copy_(linear.bias[ids])
    return rows.eval()


@torch.inference_mode()
def token_ranking(target, n_prompts: int = 32, max_tokens: int = 512) -> torch.Tensor:
    """Every token id of ``target``'s vocabulary, most useful first -> [V] long: the tokens of the
    bundled calibration prompts (by count), then the rest by the target's next-token probability
    summed over every position of that text."""
    from ..models.int8 import calibration_token_ids
    from ..runtime.kv import vocab_size

    V = vocab_size(target.model)
    mass = torch.zeros(V, dtype=torch.float64)  # [V]
    counts = torch.zeros(V, dtype=torch.float64)  # [V]
    for ids in calibration_token_ids(target.tokenizer, n_prompts, max_tokens):
        x = torch.tensor([ids], device=target.device)  # [1, T]
        logits = target.model(input_ids=x, use_cache=False).logits[0].float()  # [T, V]
        mass += torch.softmax(logits, dim=-1).sum(0).double().cpu()[:V]
        counts.index_add_(0, torch.tensor(ids), torch.ones(len(ids), dtype=torch.float64))
    score = mass + counts * (mass.sum() + 1.0)  # a written token outranks any unwritten one
    return torch.argsort(score, descending=True, stable=True)  # [V]


_rankings: "weakref.WeakKeyDictionary[torch.nn.Module, torch.Tensor]" = weakref.WeakKeyDictionary()
# draft model -> target model -> {n: the cut LoadedModel}; weak on both models, so a freed target's
# entry goes with it (an id() key could be reused by the next model loaded at that address)
_subsets: "weakref.WeakKeyDictionary[torch.nn.Module, weakref.WeakKeyDictionary[torch.nn.Module, dict[int, Any]]]" = (
    weakref.WeakKeyDictionary()
)
_lock = threading.Lock()


def with_vocab_subset(draft, target, n: int):
    """``draft`` with an output head over the ``n`` tokens most useful to ``target`` (see the
    module docstring); built once per (draft, target, n) and shared. ValueError for a bad n.
    ``draft``, ``target``: specviz.models.LoadedModel; -> a LoadedModel named ``NAME,vocab=n``."""
    from ..models import LoadedModel

    V = draft.vocab_size
    if isinstance(n, bool) or not isinstance(n, int) or not MIN_VOCAB <= n:
        raise ValueError(f"vocab must be a whole number of tokens >= {MIN_VOCAB}, got {n!r}")
    if n >= V:
        return draft  # the whole vocabulary: nothing to cut
    with _lock:
        by_n = _subsets.setdefault(draft.model, weakref.WeakKeyDictionary()).setdefault(target.model, {})
        if n in by_n:
            return by_n[n]
        if target.model not in _rankings:
            _rankings[target.model] = token_ranking(target)
        ids = _rankings[target.model]
        ids = ids[ids < V][:n].sort().values  # [n] ascending: the scatter writes memory in order
        head = draft.model.get_output_embeddings()
        view = copy.copy(draft.model)  # shares the body's modules; the head is its own
        view._modules = dict(draft.model._modules)
        name = next((k for k, m in draft.model.named_children() if m is head), None)
        if name is None:
            raise ValueError(f"vocab=N cannot cut {draft.name}'s output head: it is not a direct child of the model")
        ids = ids.to(_device_of(head))
        setattr(view, name, SubsetHead(head, ids, V, _float_rows(draft.model, head)))
        sub = LoadedModel(view, draft.tokenizer, f"{draft.name},vocab={n}", draft.device, draft.dtype, draft.quantize)
        by_n[n] = sub
        return sub


def _float_rows(model: torch.nn.Module, head: torch.nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
    """ids [E] -> rows [E, d] of ``head``'s float weight: the tied input embedding when the head
    shares it (an int8 copy keeps its embedding float), else the head's own (dequantized) rows."""
    linear = getattr(head, "linear", head)
    weight = getattr(linear, "weight", None)
    embedding = model.get_input_embeddings()
    tied = bool(getattr(model.config.get_text_config(), "tie_word_embeddings", False))
    if tied and embedding is not None and embedding.weight.shape[0] >= getattr(head, "out_features", 0):
        table = embedding.weight  # [V, d]
        return lambda ids: table[ids].float()
    if isinstance(weight, torch.Tensor):
        return lambda ids: weight[ids].float()
    cache: dict[str, torch.Tensor] = {}

    def int8_rows(ids: torch.Tensor) -> torch.Tensor:  # an untied Int8Linear head: dequantize on first use
        if "w" not in cache:
            cache["w"] = head.dequantized()  # [V, d]
        return cache["w"][ids]

    return int8_rows


def _device_of(module: torch.nn.Module) -> torch.device:
    for t in list(module.parameters()) + list(module.buffers()):
        return t.device
    return torch.device("cpu")
