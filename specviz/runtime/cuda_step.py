"""The static decode step on a CUDA GPU: the same body (:mod:`specviz.runtime.body`) replayed from
CUDA graphs (``torch.cuda.CUDAGraph``; no Dynamo: ZeroGPU forbids compiling at run time), since a
small model's GPU step is a few hundred kernel launches, not arithmetic.

Exactness: every call runs at one shape, :data:`WIDTH` rows (n tokens padded with copies of the
first, which write the same K/V to the same slot) by the buffers' whole capacity (masks padded with
-inf), the head too (:func:`head_rows`). cuBLAS picks its kernel, so its rounding, by shape; at one
shape a token's row has the same bits alone or in a verify pass, so greedy output equals this
step's own target-only decoding (not ``generate()``'s, whose kernels differ).

A graph is captured on a buffer's first call, keyed by its address and capacity (the last
:data:`MAX_GRAPHS` kept); any failure gives way to the same padded inputs run eagerly, said once;
steps wider than :data:`WIDTH` (a prompt) run eagerly. ``capture`` is a seam: :func:`replaying`
stands in on the CPU (tests/test_cuda_step.py); the capture itself is untested here (docs/gpu.md).
"""

from __future__ import annotations

import collections
import contextlib
import logging
import threading
from typing import Callable

import torch

from .body import Runner

log = logging.getLogger(__name__)

WIDTH = 32  # rows every graphed call runs (n new tokens padded): k + 1 of a chain, a tree's nodes
CAPACITY = 4096  # positions a CUDA session's buffers start with (gpt-fast's max_seq_length): one graph, one shape
MAX_GRAPHS = 8  # graphs kept per body (each a session's buffers); the oldest goes first

Capture = Callable[[Callable[[], torch.Tensor]], tuple[Callable[[], None], torch.Tensor]]


def cuda_capture(fn: Callable[[], torch.Tensor], pool=None) -> tuple[Callable[[], None], torch.Tensor]:
    """``fn`` (reading only static tensors) run once eagerly on a side stream (cuBLAS handles and
    workspaces are made outside the capture, as torch's docs ask), then captured -> (replay, the
    static output it refills)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool, capture_error_mode="thread_local"):  # other sessions' threads may run
        out = fn()
    return graph.replay, out


def replaying(fn: Callable[[], torch.Tensor], pool=None) -> tuple[Callable[[], None], torch.Tensor]:
    """The CPU stand-in for :func:`cuda_capture`, with the same contract."""
    out = fn()
    return (lambda: out.copy_(fn())), out


def padded(example: tuple, width: int) -> tuple:
    """The body's inputs for n <= ``width`` tokens at the graph's shape: row tensors [n, ...] with
    row 0 repeated to ``width`` rows, masks [n, S] widened to the capacity C with -inf, then padded
    likewise (a repeated row writes row 0's keys and values to row 0's slot)."""
    *rows, mask, mask_local, keys, values = example
    n, (span, capacity) = int(rows[0].shape[0]), (int(mask.shape[1]), int(keys.shape[2]))

    def wide(m: torch.Tensor) -> torch.Tensor:  # [n, S] -> [n, C]
        return torch.cat([m, m.new_full((n, capacity - span), float("-inf"))], 1) if capacity > span else m

    def tall(t: torch.Tensor) -> torch.Tensor:  # [n, ...] -> [width, ...]
        return torch.cat([t, t[:1].expand(width - n, *t.shape[1:])]) if width > n else t

    return (*(tall(t) for t in rows), tall(wide(mask)), tall(wide(mask_local)), keys, values)


class GraphStep:
    """The body as a step (the body's inputs -> hidden states [n, d], the buffers written) replayed
    from one graph per session buffer; eager on the same padded inputs after any failure."""

    def __init__(self, body: torch.nn.Module, capture: Capture | None = None, width: int | None = None):
        self.body, self.width = body, width or WIDTH
        self.capture = capture or (replaying if not body.embedding.is_cuda else cuda_capture)
        self.pool = torch.cuda.graph_pool_handle() if self.capture is cuda_capture else None  # graphs share memory
        self.graphs: collections.OrderedDict = collections.OrderedDict()  # key -> (static inputs, replay, out)
        self.failed: str | None = None  # why graphs gave way to eager (None: they did not)
        self.note = "CUDA graphs" if self.capture is cuda_capture else f"graphs via {getattr(self.capture, '__name__', 'a stand-in')}"
        self._lock = threading.Lock()  # one copy-in, replay and copy-out at a time: the inputs are shared

    def __call__(self, *example) -> torch.Tensor:
        n = int(example[0].shape[0])
        if n > self.width:
            return self.body(*example)  # a prompt's rows: eagerly at their width
        inputs = padded(example, self.width)
        with self._lock:
            if self.failed is None:
                try:
                    return self._replay(inputs)[:n].clone()
                except Exception as e:  # capture refused, out of memory, a replay error: eager from now on
                    self._give_up(e)
            return self.body(*inputs)[:n]

    def _replay(self, inputs: tuple) -> torch.Tensor:
        *rows, keys, values = inputs
        key = (int(keys.shape[2]), keys.data_ptr(), values.data_ptr(), keys.dtype)
        graph = self.graphs.get(key)
        if graph is None:
            static = [t.clone() for t in rows]  # the graph's own inputs, refilled before each replay
            with torch.cuda.device(keys.device) if keys.is_cuda else contextlib.nullcontext():  # its side stream there
                replay, out = self.capture(lambda: self.body(*static, keys, values), self.pool)
            graph = self.graphs[key] = (static, replay, out)
            while len(self.graphs) > MAX_GRAPHS:
                self.graphs.popitem(last=False)
        self.graphs.move_to_end(key)
        static, replay, out = graph
        for dst, src in zip(static, rows):
            dst.copy_(src)
        replay()
        return out  # [width, d]

    def _give_up(self, error: Exception) -> None:
        self.failed = f"{type(error).__name__}: {error}"
        self.graphs.clear()
        log.warning("specviz: graphs of the static decode step failed (%s); running it eagerly from now on, on the same"
                    " padded inputs", self.failed)


def head_rows(head: torch.nn.Module, hidden: torch.Tensor, width: int | None = None) -> torch.Tensor:
    """``head`` on hidden [rows, d] at :data:`WIDTH` rows (row 0 repeated) -> [rows, V]."""
    rows, width = int(hidden.shape[0]), width or WIDTH
    if rows >= width:
        return head(hidden)
    return head(torch.cat([hidden, hidden[:1].expand(width - rows, -1)]))[:rows]


RUNNER = Runner("cuda", lambda body, example: GraphStep(body))  # graphs captured on first use, per session buffer

__all__ = ["CAPACITY", "MAX_GRAPHS", "RUNNER", "WIDTH", "GraphStep", "cuda_capture", "head_rows", "padded", "replaying"]
