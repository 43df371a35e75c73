"""Step records built lazily: the costly fields computed from tensors kept for the step, on first read.

A run nobody watches (a benchmark) never pays for the top-10 lists over the vocabulary, the
token texts or the full softmax under greedy; a hook, the UI or a trace that reads them gets the
same values an eager build gives. ``StepTensors.release`` drops the kept tensors when the next
step starts: ``records="full"`` computes whatever is still pending first (the values stay
readable forever), ``records="lean"`` does not (reading a released field raises ValueError).
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from .algorithm import TOP_N, logits_to_probs, top_n
from .logits import materialize
from .records import Deferred, DraftDecision, LazyFields, StepRecord

RECORD_MODES = ("full", "lean")


class LazyProbs:
    """p = logits_to_probs(logits, sampling), computed once when first asked for."""

    def __init__(self, logits: torch.Tensor, sampling):
        self.logits, self.sampling, self._p = logits, sampling, None

    @property
    def shape(self) -> torch.Size:
        """p's shape, [n, V], known without computing p."""
        return self.logits.shape

    def get(self) -> torch.Tensor:
        if self._p is None:
            self._p = logits_to_probs(materialize(self.logits), self.sampling)  # [n, V]
        return self._p

    def known(self, p: torch.Tensor) -> None:
        """p computed another way (exactly: a top-k p from a few exact logits a row), kept as p."""
        self._p = p


class StepTensors:
    """The tensors one step's record is computed from, and memoised top-10 lists."""

    def __init__(self, texts, p: LazyProbs, proposal, ver):
        self.texts, self.p, self.proposal, self.ver = texts, p, proposal, ver
        self._top: dict[Any, list] = {}
        self.released = False
        self.records: list[LazyFields] = []

    def lazy(self, fn: Callable[[], Any]) -> Deferred:
        def compute():
            if self.released:
                raise ValueError(
                    "this record field was never computed and its step's tensors were released "
                    "(records='lean'); read it during the step (a hook's on_step) or use records='full'"
                )
            return fn()

        return Deferred(compute)

    def _topk(self, key, rows: Callable[[], torch.Tensor]) -> list:
        if key not in self._top:
            t = rows()
            vals, ids = (x.tolist() for x in top_n(t, TOP_N))
            self._top[key] = [self.texts.tops(v, i) for v, i in zip(vals, ids)] if t.dim() == 2 else [self.texts.tops(vals, ids)]
        return self._top[key]

    def top_p(self, row: int):
        return self._topk("p", self.p.get)[row]

    def top_q(self, row: int):
        return self._topk("q", lambda: self.proposal.q)[row]

    def top_residual(self):
        return self._topk("r", lambda: self.ver.residual)[0]

    def release(self, resolve: bool) -> None:
        if resolve:
            for r in self.records:
                r.resolve()
        self.released = True
        self.p = self.proposal = self.ver = None
        self._top.clear()
        self.records = []


def chain_record(session, proposal, p: LazyProbs, ver, committed: list[int],
                 timings: tuple[float, float, float]) -> tuple[StepRecord, StepTensors]:
    """The StepRecord of a chain step, its costly fields deferred; -> (record, kept tensors).
    ``timings``: (draft, verify, other) ms."""
    texts = session.decoder.texts
    k = proposal.k
    kept = StepTensors(texts, p, proposal, ver)
    lazy = kept.lazy
    n = ver.n_accepted
    ids = proposal.tokens.tolist()
    has_q = proposal.has_q  # without computing a pending q
    vals = Floats(ver)
    u = ver.u.tolist() if ver.u is not None else [None] * k
    threshold = ver.threshold.tolist() if ver.threshold is not None else [None] * k

    def draft(i: int) -> DraftDecision:
        t = ids[i]
        return DraftDecision(
            position=i,
            token_id=t,
            text=lazy(lambda: texts(t)),
            q=lazy(lambda: vals.get("q_x")[i]),
            p=lazy(lambda: vals.get("p_x")[i]),
            ratio=lazy(lambda: vals.get("ratio")[i]),  # a bounded sampled step computes it from p when read
            u=u[i] if i <= n else None,
            verdict="accepted" if i < n else ("rejected" if i == n else "discarded"),
            top_p=lazy(lambda: kept.top_p(i)),
            top_q=lazy(lambda: kept.top_q(i)) if has_q else (),
            threshold=threshold[i] if i <= n else None,
        )

    drafts = tuple(draft(i) for i in range(k))
    nxt = ver.next_token
    record = StepRecord(
        index=len(session.steps),
        k=k,
        drafts=drafts,
        n_accepted=n,
        next_token_id=nxt,
        next_token_text=lazy(lambda: texts(nxt)),
        next_kind="target" if k == 0 else ("resampled" if n < k else "bonus"),
        next_p=lazy(lambda: float(p.get()[n, nxt])),
        top_next=lazy(lambda: kept.top_p(n)),
        top_residual=lazy(kept.top_residual) if ver.given("residual") else (),  # (a pending residual counts, unread)
        committed=tuple(committed),
        committed_text=lazy(lambda: tuple(texts(t) for t in committed)),
        draft_ms=timings[0],
        verify_ms=timings[1],
        other_ms=timings[2],
        finished=session.finished,
        info=dict(proposal.info),
        rule="typical" if ver.threshold is not None else "exact",
    )
    kept.records = [record, *drafts]
    return record, kept


class Floats:
    """ver.p_x / q_x / ratio as Python lists, converted once when first asked for."""

    def __init__(self, ver):
        self.ver, self._d = ver, {}

    def get(self, name: str) -> list:
        if name not in self._d:
            self._d[name] = getattr(self.ver, name).tolist()
        return self._d[name]
