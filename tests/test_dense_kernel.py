"""specviz's own float32 product for a few rows (``torch.ops.specviz_int8.dense``, the kernel
table's batch-invariant one): the plain product to float rounding at every width, the same
bits for a row whatever the width, and a planned layer on it."""

from __future__ import annotations

import copy

import pytest
import torch

from specviz import tuning
from specviz.runtime import dense_kernel
from specviz.runtime.kernels import PlannedLinear
from tests.support.kernel import NEEDS_OP

pytestmark = NEEDS_OP


@pytest.mark.parametrize("out, k", [(16, 8), (37, 19), (1000, 64), (1536, 640)])
@pytest.mark.parametrize("bias", [False, True])
def test_dense_is_the_plain_product_at_every_width(out, k, bias):
    g = torch.Generator().manual_seed(out + k)
    w, b = torch.randn(out, k, generator=g), (torch.randn(out, generator=g) if bias else None)
    blocked = dense_kernel.block(w)
    assert blocked.shape == (-(-out // 16), k, 16)
    for rows in (1, 2, 3, 5, 9, 12, 13, 25):
        x = torch.randn(rows, k, generator=g)
        y = dense_kernel.dense(x, blocked, b, out)
        assert y.shape == (rows, out) and y.is_contiguous()
        torch.testing.assert_close(y, torch.nn.functional.linear(x, w, b), atol=1e-4, rtol=1e-4)


def test_a_row_gets_the_same_bits_at_every_width():
    """Each output sums its inputs in order in one chain: a verify pass's first row is the decode step's."""
    g = torch.Generator().manual_seed(1)
    w = torch.randn(200, 640, generator=g)
    blocked = dense_kernel.block(w)
    x = torch.randn(17, 640, generator=g)
    alone = torch.cat([dense_kernel.dense(x[r : r + 1], blocked, None, 200) for r in range(17)])
    for rows in (2, 5, 9, 13, 17):
        assert torch.equal(dense_kernel.dense(x[:rows], blocked, None, 200), alone[:rows])


def test_a_planned_layer_on_it_and_its_copies():
    torch.manual_seed(0)
    members = [torch.nn.Linear(32, 24), torch.nn.Linear(32, 26)]
    planned = PlannedLinear.fuse(members)
    assert members[1].weight.data_ptr() == planned.weight[24:].data_ptr()  # the members view its rows
    plain = lambda x: torch.nn.functional.linear(x, planned.weight, planned.bias)  # noqa: E731
    planned.use(["F.linear", "specviz blocked", "specviz blocked"])
    assert planned.only is None and planned.blocked is not None  # its copy kept where a width reads it
    planned.use(["specviz blocked"])
    assert planned.only is not None  # one kernel for every width
    calls = []
    real = dense_kernel.dense
    cpu_dense = lambda *a: calls.append(a[0].shape[0]) or real(*a)  # noqa: E731
    with pytest.MonkeyPatch.context() as mp, torch.inference_mode():
        mp.setattr(dense_kernel, "dense", cpu_dense)
        for rows in (1, 2, 7):
            x = torch.randn(rows, 32)
            torch.testing.assert_close(planned(x), plain(x), atol=1e-5, rtol=1e-5)
    assert calls == [1, 2, 7]
    twin = copy.deepcopy(planned)  # the blocked copy is not carried: F.linear on the copy's weight
    assert twin.blocked is None
    x = torch.randn(3, 32)
    with torch.inference_mode():
        torch.testing.assert_close(twin(x), plain(x), atol=1e-5, rtol=1e-5)


def test_specviz_tune_times_it_beside_the_tables_other_kernels():
    w = torch.randn(48, 32)
    times = tuning.time_kernels((w, w), 3, 1)
    assert "specviz blocked" in times and "F.linear" in times and all(t > 0 for t in times.values())
