"""The roofline arithmetic (pure inputs) and the measurement helpers on a tiny model."""

from __future__ import annotations

import pytest
import torch

from specviz.analysis.hardware import (
    bandwidth,
    decode_bytes,
    kv_bytes_per_position,
    limit_fraction,
    roofline,
    verify_costs,
)
from tests.support.tiny import make_llama


def test_roofline_is_bandwidth_over_bytes():
    r = roofline(bytes_per_token=500_000_000, bytes_per_s=10e9)
    assert r.tokens_per_s == pytest.approx(20.0)
    assert r.ms_per_token == pytest.approx(50.0)
    with pytest.raises(ValueError, match="positive"):
        roofline(0, 10e9)


def test_limit_fraction_target_only_and_speculative():
    plain = limit_fraction(tokens_per_s=10.0, new_tokens=64, target_forwards=64, limit_tokens_per_s=20.0)
    assert plain.tokens_fraction == pytest.approx(0.5) and plain.forwards_fraction == pytest.approx(0.5)
    # 64 tokens in 32 forwards at 15 tok/s: 7.5 forwards/s, 0.375 of the limit; tokens at 0.75
    spec = limit_fraction(tokens_per_s=15.0, new_tokens=64, target_forwards=32, limit_tokens_per_s=20.0)
    assert spec.tokens_per_forward == pytest.approx(2.0)
    assert spec.tokens_fraction == pytest.approx(0.75)
    assert spec.forwards_fraction == pytest.approx(0.375)
    with pytest.raises(ValueError, match="forward"):
        limit_fraction(10.0, 5, 0, 20.0)


def _tiny(tie: bool):
    return make_llama(vocab_size=100, hidden=16, layers=1, seed=0, tie_word_embeddings=tie)


def test_decode_bytes_counts_one_embedding_row_and_tied_weights_once():
    untied, tied = _tiny(False), _tiny(True)
    every = sum(p.numel() for p in untied.parameters()) * 4 + sum(b.numel() * b.element_size() for b in untied.buffers())
    embed = 100 * 16
    assert decode_bytes(untied) == every - (embed - 16) * 4  # one row of the input embedding
    every_tied = sum(p.numel() for p in tied.parameters()) * 4 + sum(b.numel() * b.element_size() for b in tied.buffers())
    assert decode_bytes(tied) == every_tied  # the head reads the whole shared matrix, once
    assert decode_bytes(untied, "bfloat16") < decode_bytes(untied) < 2 * decode_bytes(untied, "bfloat16") + 1000
    linear = sum(m.weight.numel() for m in untied.modules() if isinstance(m, torch.nn.Linear))
    rows = sum(m.weight.shape[0] for m in untied.modules() if isinstance(m, torch.nn.Linear))
    assert decode_bytes(untied) - decode_bytes(untied, "int8") == linear * 3 - rows * 4
    assert decode_bytes(untied, kv_positions=10) - decode_bytes(untied) == 10 * kv_bytes_per_position(untied)
    with pytest.raises(ValueError, match="precision"):
        decode_bytes(untied, "int4")


def test_bandwidth_is_measured_once_per_process():
    a = bandwidth(size_bytes=4 << 20, repeats=2)
    assert a.bytes_per_s > 0 and a.threads == torch.get_num_threads()
    assert a.read in ("sum", "x @ M")  # the faster of the two reads of the same tensor
    assert bandwidth(size_bytes=4 << 20, repeats=2) is a
    with pytest.raises(ValueError, match="1 MiB"):
        bandwidth(size_bytes=10)


def test_verify_costs_cover_every_n_and_leave_no_cache_behind():
    model = make_llama(vocab_size=64, hidden=16, layers=1, seed=0)
    costs = verify_costs(model, context=8, max_n=5, repeats=1)
    assert sorted(costs.seconds) == [1, 2, 3, 4, 5] and costs.context == 8
    assert costs.v[1] == pytest.approx(1.0) and all(t > 0 for t in costs.seconds.values())
    assert sorted(verify_costs(model, context=4, max_n=2, repeats=2, stat="min").seconds) == [1, 2]
    with pytest.raises(ValueError, match="stat"):
        verify_costs(model, context=4, max_n=2, stat="mean")


def test_roofline_lines_name_target_only_and_the_best_speculative_row(monkeypatch):
    from specviz.analysis import hardware as H

    monkeypatch.setattr(H, "bandwidth", lambda: H.Bandwidth(bytes_per_s=10e9, threads=2, size_bytes=1 << 30))
    model = make_llama(vocab_size=64, hidden=16, layers=1, seed=0)
    rows = [
        {"impl": "specviz", "proposer": "target-only", "k": 0, "tokens_per_s": 10.0, "new_tokens": 64, "steps": 64},
        {"impl": "specviz", "proposer": "ngram", "k": 2, "tokens_per_s": 15.0, "new_tokens": 64, "steps": 32},
        {"impl": "specviz", "proposer": "ngram", "k": 4, "tokens_per_s": 12.0, "new_tokens": 64, "steps": 30},
        {"impl": "transformers", "proposer": "ngram", "k": 2, "tokens_per_s": 99.0, "new_tokens": 64, "steps": 32},
    ]
    limit = 10e9 / H.decode_bytes(model)
    lines = H.roofline_lines(rows, model)
    assert "10.0 GB/s" in lines[0]
    assert f"{10.0 / limit:.2f} of the limit" in lines[1] and lines[1].lstrip().startswith("target-only")
    assert "ngram, k=2" in lines[2] and "2.00 tokens per target forward" in lines[2]
