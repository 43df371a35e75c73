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
    probed = H.roofline_lines(rows, model, probes_gb_s=[30.0, 20.0, 40.0, 24.0, 26.0])  # reads beside the runs
    assert "26.0 GB/s" in probed[0] and "the median of 5 reads beside target-only's runs" in probed[0]
    assert "20.0-40.0 GB/s" in probed[0] and f"{10.0 / (limit * 2.6):.2f} of the limit" in probed[1]


def _ticking_clock(step_s: float):
    """A stand-in clock that advances ``step_s`` on every read."""
    now = [0.0]

    def clock() -> float:
        now[0] += step_s
        return now[0]

    return clock


def test_compute_rates_on_a_stand_in_clock_are_flops_over_time_and_cached():
    from specviz.analysis import hardware as H

    rates = H.compute_rates((1, 3), repeats=2, refresh=True, clock=_ticking_clock(1e-3))
    out_f, in_f = H.RATE_SHAPE
    per_call = 1e-3 / 20  # one clock step spread over the 20 calls of a timing
    assert rates.flops_per_s[1] == pytest.approx(2 * out_f * in_f / per_call)
    assert rates.flops_per_s[3] == pytest.approx(3 * rates.flops_per_s[1])
    assert rates.at(2) == rates.flops_per_s[3] and rates.at(9) == rates.flops_per_s[3]  # nearest above, else widest
    assert H.compute_rates((1, 3), repeats=2) is rates
    with pytest.raises(ValueError, match="rows"):
        H.compute_rates((0, 2))
    big = H.compute_rates((2,), repeats=1, shapes={(4096, 640): 2}, refresh=True, clock=_ticking_clock(1e-3))
    kept = H.CACHED_BYTES // (4 * 640)  # the rows of a 4096 x 640 weight that are timed in cache
    assert big.flops_per_s[2] == pytest.approx(2 * 2 * kept * 640 / per_call)  # scaled to all rows and both copies


def test_linear_shapes_count_each_product_weight_once():
    from specviz.analysis.hardware import linear_shapes

    model = make_llama(vocab_size=64, hidden=16, layers=2, seed=0, tie_word_embeddings=False)
    shapes = linear_shapes(model)
    assert shapes[(64, 16)] == 1  # the head
    assert sum(shapes.values()) == sum(1 for m in model.modules() if isinstance(m, torch.nn.Linear))


def test_matmul_weights_count_linear_and_head_weights_once():
    from specviz.analysis.hardware import matmul_weights

    tied = make_llama(vocab_size=64, hidden=16, layers=1, seed=0, tie_word_embeddings=True)
    linears = sum(m.weight.numel() for m in tied.modules() if isinstance(m, torch.nn.Linear))
    assert matmul_weights(tied) == linears  # the tied head is one of the Linear layers, counted once
    untied = make_llama(vocab_size=64, hidden=16, layers=1, seed=0, tie_word_embeddings=False)
    assert matmul_weights(untied) == sum(m.weight.numel() for m in untied.modules() if isinstance(m, torch.nn.Linear))


def test_verify_floor_is_memory_bound_at_one_row_and_compute_bound_where_the_rate_stays_low():
    from specviz.analysis.hardware import ComputeRate, verify_floor

    rates = ComputeRate({1: 20e9, 9: 60e9}, threads=2, shapes=((1024, 512),))
    one = verify_floor(1_000_000_000, 250_000_000, 1, 25e9, rates)  # 1 GB of fp32 weights at 25 GB/s
    assert one.bound == "memory" and one.seconds == pytest.approx(0.04) and one.compute_s == pytest.approx(0.025)
    nine = verify_floor(1_000_000_000, 250_000_000, 9, 25e9, rates)
    assert nine.bound == "compute" and nine.seconds == pytest.approx(2 * 250e6 * 9 / 60e9)  # 75 ms: v(9) >= 1.875
    assert nine.seconds / one.seconds == pytest.approx(1.875)
    assert nine.serial_s / one.serial_s == pytest.approx((0.04 + 0.075) / (0.04 + 0.025))  # not overlapped
    with pytest.raises(ValueError, match="positive"):
        verify_floor(0, 1, 1, 1e9, rates)


def test_roofline_lines_add_decode_steps_alone_and_the_verify_floor(monkeypatch):
    from specviz.analysis import hardware as H

    monkeypatch.setattr(H, "bandwidth", lambda: H.Bandwidth(bytes_per_s=10e9, threads=2, size_bytes=1 << 30))
    monkeypatch.setattr(H, "compute_rates", lambda **_: H.ComputeRate({1: 1e9, 3: 2e9}, threads=2, shapes=((8, 8),)))
    model = make_llama(vocab_size=64, hidden=16, layers=1, seed=0)
    rows = [
        {"impl": "specviz", "proposer": "target-only", "k": 0, "tokens_per_s": 10.0, "new_tokens": 64, "steps": 64,
         "step_ms": 80.0},
        {"impl": "specviz", "proposer": "ngram", "k": 2, "tokens_per_s": 15.0, "new_tokens": 64, "steps": 32, "v": 1.4},
    ]
    lines = H.roofline_lines(rows, model)
    limit = 10e9 / H.decode_bytes(model)
    assert "prefill left out" in lines[2] and f"{12.5 / limit:.2f} of the limit" in lines[2]
    floor = [ln for ln in lines if "verify pass of 3 positions" in ln]
    assert floor and "v(3) >= " in floor[0] and "measured v = 1.40" in floor[0] and "compute-bound" in floor[0]
    assert "one after the other" in floor[0]
    nine = H.verify_floors(model, (3,), 10e9)[3]  # the floor divides by the measured 80 ms step, not by t(1)'s floor
    assert f"v(3) >= {nine.seconds / 0.080:.2f} where" in floor[0] and "one-token step (80 ms" in floor[0]
    rows[0].pop("step_ms")
    assert "against the floor of t(1)" in [ln for ln in H.roofline_lines(rows, model) if "verify pass" in ln][0]
    assert not [ln for ln in H.roofline_lines(rows, model.to(torch.bfloat16)) if "verify pass" in ln]  # fp32 rates only


def test_verify_floor_curve_is_float32_cpu_only_and_starts_at_one(monkeypatch):
    from specviz.analysis import hardware as H
    from specviz.bench.verify_cost import verify_floor_curve

    monkeypatch.setattr(H, "bandwidth", lambda: H.Bandwidth(bytes_per_s=1e6, threads=2, size_bytes=1 << 30))
    monkeypatch.setattr(H, "compute_rates", lambda rows, shapes: H.ComputeRate({1: 1e6, 2: 1e6, 4: 4e6}, 2, tuple(shapes)))
    model = make_llama(vocab_size=64, hidden=16, layers=1, seed=0)
    loaded = type("Loaded", (), {"model": model, "quantize": None})()
    curve = verify_floor_curve(loaded, (1, 2, 4))
    assert [n for n, _, _ in curve] == [1, 2, 4] and curve[0][1:] == (1.0, 1.0)
    nbytes, weights = H.decode_bytes(model), H.matmul_weights(model)
    one = max(nbytes / 1e6, 2 * weights / 1e6)
    assert curve[1][1] == pytest.approx(max(nbytes / 1e6, 4 * weights / 1e6) / one)  # 2 rows at 1 MFLOP/s
    assert curve[2][2] == pytest.approx((nbytes / 1e6 + 8 * weights / 4e6) / (nbytes / 1e6 + 2 * weights / 1e6))
    assert verify_floor_curve(type("Loaded", (), {"model": model.to(torch.bfloat16), "quantize": None})()) is None
