"""The CPU LM-head fast path: same numbers as the plain head, used only where it is measured faster."""

import pytest
import torch

from specviz.runtime import cpu

pytestmark = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="no oneDNN in this torch build")


def test_row_adaptive_linear_matches_the_plain_layer():
    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 3000)
    fast = cpu.RowAdaptiveLinear(lin)
    assert fast.weight is lin.weight and fast.bias is lin.bias
    with torch.inference_mode():
        for rows in (1, 3, 4, 9):
            x = torch.randn(1, rows, 64)  # [batch, rows, in] as a causal LM's head sees it
            torch.testing.assert_close(fast(x), lin(x), rtol=1e-4, atol=1e-4)
            assert fast(x).shape == (1, rows, 3000)


def test_speed_up_lm_head_wraps_only_large_fp32_cpu_heads(monkeypatch, tiny_target):
    model = tiny_target.model
    assert not cpu.speed_up_lm_head(model)  # a 37 x 32 head: nothing to gain
    monkeypatch.setattr(cpu, "MIN_HEAD_ELEMENTS", 0)
    monkeypatch.setattr(cpu, "time_head", lambda weight, rows, repeats=3: (2.0, 1.0))  # "oneDNN measures faster"
    monkeypatch.setenv("SPECVIZ_CPU_HEAD", "0")
    assert not cpu.speed_up_lm_head(model)
    monkeypatch.delenv("SPECVIZ_CPU_HEAD")
    head = model.get_output_embeddings()
    try:
        assert cpu.speed_up_lm_head(model)
        assert isinstance(model.get_output_embeddings(), cpu.RowAdaptiveLinear)
        assert model.get_output_embeddings().linear is head
        assert not cpu.speed_up_lm_head(model)  # already wrapped: not twice
    finally:
        model.set_output_embeddings(head)  # the fixture is shared
    monkeypatch.setattr(cpu, "time_head", lambda weight, rows, repeats=3: (1.0, 2.0))  # slower here: left alone
    assert not cpu.speed_up_lm_head(model) and model.get_output_embeddings() is head
