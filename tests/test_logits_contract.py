"""The logits contract (specviz.core.logits): the runtime's heads satisfy it by their shape, the
request values are the ones the runtime reads, and the engine names no runtime class."""

from __future__ import annotations

import ast
from pathlib import Path

import torch

from specviz.core import logits as contract
from specviz.proposers.vocab import SubsetLogits
from specviz.runtime import argmax_head, sampled_head

ROOT = Path(__file__).resolve().parents[1]


class _Bounded:
    """A stand-in bounded head: logits l, screen y = l + noise within b."""

    def __init__(self, logits: torch.Tensor, b: float):
        self.l, self.b, self.shape = logits, b, logits.shape
        self.y = logits + (torch.rand_like(logits) * 2 - 1) * b

    def get(self):
        return self.l

    def argmax(self):
        return self.l.argmax(-1)

    def top_probability(self):
        return argmax_head.top_probability(self.l)

    def bounds(self):
        return self.y, [self.b] * self.l.shape[0]

    def exact(self, row, ids):
        return self.l[row, ids]


def test_the_runtime_heads_satisfy_the_protocols():
    for name in ("get", "argmax", "top_probability", "bounds", "exact"):
        assert callable(getattr(argmax_head.HeadLogits, name)), name
    assert all(callable(getattr(SubsetLogits, n)) for n in ("get", "argmax", "top_probability"))
    assert not hasattr(SubsetLogits, "bounds")  # deferred, not bounded: a sampled step reads its full row


def test_the_request_values_are_the_runtimes():
    assert contract.Want.BOUNDS == sampled_head.SAMPLE
    assert contract.Want.ARGMAX is True and contract.Want.FULL is False


def test_tensors_and_stand_ins_are_told_apart():
    l = torch.randn(3, 50)
    bounded = _Bounded(l, 0.01)
    assert not contract.is_bounded(l) and contract.is_bounded(bounded)
    assert isinstance(bounded, contract.DeferredLogits)
    assert torch.equal(contract.materialize(l), l) and torch.equal(contract.materialize(bounded), l)
    assert torch.equal(contract.greedy_argmax(l), l.argmax(-1))
    assert torch.equal(contract.greedy_argmax(bounded), l.argmax(-1))
    y, b = bounded.bounds()
    assert bool(((y - l).abs() <= b[0]).all())


def test_the_engine_names_no_runtime_head():
    for name in ("engine.py", "lazyrec.py"):
        tree = ast.parse((ROOT / "specviz" / "core" / name).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and "argmax_head" in node.module:
                raise AssertionError(f"core/{name} imports {node.module}: ask specviz.core.logits instead")
            if isinstance(node, ast.ImportFrom) and node.module and "sampled_head" in node.module:
                raise AssertionError(f"core/{name} imports {node.module}: use Want.BOUNDS")
