"""The CPU LM-head fast path: same numbers as the plain head, each width on the kernel measured
faster there (a stand-in timer: no timed assertions), the choice cached per machine."""

import copy
import json
import os

import pytest
import torch

from specviz.core.bounds import ENGINE_MAX_K
from specviz.runtime import cpu, kernel_words, projections

pytestmark = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="no oneDNN in this torch build")

# A stand-in CPU where F.linear wins below 4 rows and oneDNN from there (the Xeon's shape).
XEON = {r: ((0.034, 0.044) if r < 4 else (0.063 + 0.005 * r, 0.044)) for r in range(1, 40)}


class Timer:
    """Stand-in for time_head: (F.linear s, oneDNN s) from a table; counts its calls."""

    def __init__(self, table):
        self.table, self.calls = table, []

    def __call__(self, weight, rows):
        self.calls.append(rows)
        return self.table[rows]


@pytest.fixture
def big_head(monkeypatch, tiny_target):
    """The tiny target counted as a large head; its own head put back afterwards (shared fixture)."""
    model = tiny_target.model
    head = model.get_output_embeddings()
    monkeypatch.setattr(cpu, "MIN_HEAD_ELEMENTS", 0)
    monkeypatch.delenv("SPECVIZ_CPU_HEAD", raising=False)
    yield model, head
    model.set_output_embeddings(head)
    cpu._PLANS.pop(model, None)


def test_the_measured_widths_are_engine_widths():
    assert 2 <= cpu.MEASURED_ROWS <= ENGINE_MAX_K + 1


@pytest.mark.parametrize("onednn_at", [(False, True, True, False, True), (False,) + (True,) * 9, (False, False)])
def test_row_adaptive_linear_matches_the_plain_layer_at_every_width(onednn_at):
    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 3000)
    fast = cpu.RowAdaptiveLinear(lin, onednn_at)
    assert fast.weight is lin.weight and fast.bias is lin.bias
    with torch.inference_mode():
        for rows in range(1, 12):  # the measured widths and beyond them
            x = torch.randn(1, rows, 64)  # [batch, rows, in] as a causal LM's head sees it
            torch.testing.assert_close(fast(x), lin(x), rtol=1e-4, atol=1e-4)
            assert fast(x).shape == (1, rows, 3000)
            assert fast.kernel(rows) == ("oneDNN" if onednn_at[min(rows, len(onednn_at) - 1)] else "F.linear")


def test_the_chooser_picks_the_faster_kernel_per_width():
    weight = torch.zeros(8, 4)
    timer = Timer(XEON)
    plan = cpu.HeadKernelPlan("m", "t", 2, (8, 4), "float32", cpu.measure_head(weight, 9, time_width=timer), 0.0)
    assert timer.calls == list(range(1, 10))  # every width, once
    assert [plan.kernel(r) for r in range(1, 10)] == ["F.linear"] * 3 + ["oneDNN"] * 6
    assert plan.onednn_at == (False, False, False, False) + (True,) * 6  # indexed by rows
    assert plan.kernel(33) == "oneDNN"  # wider than measured: the widest width's choice
    odd = {1: (2.0, 1.0), 2: (1.0, 2.0), 3: (1.0, 0.95), 4: (1.0, 0.5)}  # within 10%: F.linear stays
    plan = cpu.HeadKernelPlan("m", "t", 2, (8, 4), "float32", cpu.measure_head(weight, 4, time_width=Timer(odd)), 0.0)
    assert [plan.kernel(r) for r in range(1, 5)] == ["oneDNN", "F.linear", "F.linear", "oneDNN"]


def test_measuring_stops_starting_widths_past_its_budget():
    ticks = iter(range(100))
    widths = cpu.measure_head(torch.zeros(8, 4), 9, time_width=Timer(XEON), budget_s=2.5, clock=lambda: next(ticks))
    assert [w.rows for w in widths] == [1, 2, 3]


def test_time_head_interleaves_and_stops_once_one_kernel_is_clearly_faster():
    weight = torch.randn(16, 8)

    def clock_of(durations):  # each sample reads the clock twice: start, end
        now, seq = 0.0, [0.0]
        for d in durations:
            now += d
            seq += [now, now]
        it = iter(seq)
        return lambda: next(it)

    assert cpu.time_head(weight, 2, clock=clock_of([3.0, 1.0])) == (3.0, 1.0)  # a 3x gap: one round
    # 1.5x and 1.5x the same way: two rounds (the second runs oneDNN first), medians of two
    assert cpu.time_head(weight, 2, clock=clock_of([1.5, 1.0, 1.0, 1.5])) == (1.5, 1.0)
    # a close call: all three rounds (F.linear 1, 1, 1.125; oneDNN 1.125, 1.25, 1.5), medians of three
    assert cpu.time_head(weight, 2, clock=clock_of([1.0, 1.125, 1.25, 1.0, 1.125, 1.5])) == (1.0, 1.25)
    assert cpu.time_head(weight, 2, 4, early=False, clock=clock_of([3.0, 1.0, 1.0, 3.0] * 2)) == (3.0, 1.0)  # all 4


def test_speed_up_lm_head_measures_once_caches_and_reuses(big_head, tmp_path):
    model, head = big_head
    timer = Timer(XEON)
    assert cpu.speed_up_lm_head(model, tmp_path, time_width=timer)
    wrapped = model.get_output_embeddings()
    assert isinstance(wrapped, cpu.RowAdaptiveLinear) and wrapped.linear is head
    assert timer.calls == list(range(1, cpu.MEASURED_ROWS + 1))
    report = cpu.head_kernel_report(model)
    assert [w["kernel"] for w in report["by_rows"]] == ["F.linear"] * 3 + ["oneDNN"] * (cpu.MEASURED_ROWS - 3)
    assert report["by_rows"][0] == {"rows": 1, "kernel": "F.linear", "f_linear_ms": 34.0, "onednn_ms": 44.0}
    assert report["wrapped"] and not report["cached"] and report["wider"] == "oneDNN"
    assert report["shape"] == list(head.weight.shape) and report["threads"] == torch.get_num_threads()
    line = kernel_words.describe_head_kernels(report)
    assert "F.linear at 1-3 rows (34 ms vs 44 ms for oneDNN)" in line and "oneDNN at 4-9 rows" in line
    json.dumps(report)

    cache = json.loads((tmp_path / cpu.CACHE_FILE).read_text())
    assert cache["format"] == cpu.CACHE_FORMAT and len(cache["entries"]) == 1
    (key,) = cache["entries"]
    assert cpu.machine_id() in key and torch.__version__ in key
    assert not cpu.speed_up_lm_head(model, tmp_path, time_width=timer)  # already wrapped: not twice

    model.set_output_embeddings(head)  # a second load of the same model: read, not measured
    again = Timer(XEON)
    assert cpu.speed_up_lm_head(model, tmp_path, time_width=again)
    assert again.calls == [] and cpu.head_kernel_report(model)["cached"]
    assert model.get_output_embeddings().onednn_at == wrapped.onednn_at
    assert json.loads((tmp_path / cpu.CACHE_FILE).read_text()) == cache  # written once

    model.set_output_embeddings(head)  # another thread count is another machine
    torch_threads = torch.get_num_threads()
    torch.set_num_threads(torch_threads + 1)
    try:
        cpu.speed_up_lm_head(model, tmp_path, time_width=again)
    finally:
        torch.set_num_threads(torch_threads)
    assert again.calls and len(json.loads((tmp_path / cpu.CACHE_FILE).read_text())["entries"]) == 2


def test_a_plan_measured_on_a_busy_machine_is_used_but_not_cached(big_head, tmp_path, monkeypatch):
    model, head = big_head
    monkeypatch.setattr(cpu, "load_average", lambda: (os.cpu_count() or 1) + 3.0)  # other jobs beside this one
    assert cpu.busy()
    timer = Timer(XEON)
    assert cpu.speed_up_lm_head(model, tmp_path, time_width=timer) and timer.calls  # measured and used
    assert not (tmp_path / cpu.CACHE_FILE).exists()  # not kept for the next load
    model.set_output_embeddings(head)
    monkeypatch.setattr(cpu, "load_average", lambda: 0.0)  # quiet again: measured again, then cached
    again = Timer(XEON)
    assert cpu.speed_up_lm_head(model, tmp_path, time_width=again) and again.calls
    assert len(json.loads((tmp_path / cpu.CACHE_FILE).read_text())["entries"]) == 1


def test_a_damaged_cache_is_measured_again(big_head, tmp_path):
    model, head = big_head
    (tmp_path / cpu.CACHE_FILE).write_text("{not json")
    timer = Timer(XEON)
    assert cpu.speed_up_lm_head(model, tmp_path, time_width=timer) and timer.calls
    assert len(json.loads((tmp_path / cpu.CACHE_FILE).read_text())["entries"]) == 1


def test_speed_up_lm_head_wraps_only_large_fp32_cpu_heads_where_onednn_wins(monkeypatch, tiny_target, tmp_path):
    model = tiny_target.model
    head = model.get_output_embeddings()
    timer = Timer({r: (2.0, 1.0) for r in range(1, 40)})
    assert not cpu.speed_up_lm_head(model, tmp_path, time_width=timer)  # a 37 x 32 head: nothing to gain
    assert timer.calls == [] and cpu.head_kernel_report(model) is None
    monkeypatch.setattr(cpu, "MIN_HEAD_ELEMENTS", 0)
    monkeypatch.setenv("SPECVIZ_CPU_HEAD", "0")
    assert not cpu.speed_up_lm_head(model, tmp_path, time_width=timer)
    assert timer.calls == [] and not (tmp_path / cpu.CACHE_FILE).exists()
    monkeypatch.delenv("SPECVIZ_CPU_HEAD")
    try:
        slower = Timer({r: (1.0, 2.0) for r in range(1, 40)})  # oneDNN slower everywhere: left alone
        assert not cpu.speed_up_lm_head(model, time_width=slower) and model.get_output_embeddings() is head
        report = cpu.head_kernel_report(model)
        assert not report["wrapped"] and {w["kernel"] for w in report["by_rows"]} == {"F.linear"}
        assert "F.linear at 1-9 rows" in kernel_words.describe_head_kernels(report)
    finally:
        model.set_output_embeddings(head)  # the fixture is shared
        cpu._PLANS.pop(model, None)


def test_a_sweep_names_every_kernel_it_chose_with_both_timings():
    """describe_kernels: the head's line and one per projection kind (its layers counted, ms to
    one decimal below 10); kernel_summary: the same choices in one short line, no timings."""
    def plan(choices, plain, onednn, shape, layers=1):
        rows = [{"rows": i + 1, "kernel": k, "f_linear_ms": plain, "onednn_ms": onednn} for i, k in enumerate(choices)]
        return {"by_rows": rows, "wider": choices[-1], "cached": True, "threads": 2, "shape": shape, "layers": layers}

    meta = {"lm_head": plan(["oneDNN"] * 3, 66.0, 32.0, [262144, 640]),
            "projections": {"o": plan(["F.linear", "oneDNN", "oneDNN"], 3.7, 3.5, [640, 1024], 18)}}
    head, o = kernel_words.describe_kernels(meta)
    assert head.startswith("LM head 262144x640, 2 threads: oneDNN at 1-3 rows (32 ms vs 66 ms for F.linear)")
    assert o.startswith("o projections 640x1024 x 18 layers, 2 threads: F.linear at 1 row (3.7 ms vs 3.5 ms for oneDNN)")
    assert kernel_words.kernel_summary(meta) == "LM head: oneDNN at 1-3 rows; o: F.linear at 1 row, oneDNN at 2-3 rows"
    assert kernel_words.describe_kernels({}) == [] and kernel_words.kernel_summary(None) == ""
    meta["int8_kernel"] = {"kernel": "blocked", "why": "specviz's own kernel, built for this CPU"}
    assert kernel_words.describe_kernels(meta)[-1] == "int8 products: blocked (specviz's own kernel, built for this CPU)"
    assert kernel_words.kernel_summary(meta).endswith("; int8: blocked")
    meta["argmax_head"] = {"widths": {"1": [20.6, 9.8], "17": [39.4, 41.5], "5": [15.4, 13.2]}, "used": [1, 2, 3, 4, 5, 9]}
    assert kernel_words.describe_kernels(meta)[-1] == (
        "greedy argmax: the LM head's bf16 screen at 1-5 rows, 9 rows (full head -> screened: "
        "1 row 20.6 -> 9.8 ms, 5 rows 15.4 -> 13.2 ms, 17 rows 39.4 -> 41.5 ms)")
    assert kernel_words.kernel_summary(meta).endswith("; int8: blocked; greedy argmax: bf16 screen at 1-5 rows, 9 rows")
    meta["sampled_head"] = {"widths": {"1": [20.8, 10.3], "9": [27.6, 16.3]}, "used": list(range(1, 10)), "kind": "bf16 bounds"}
    assert kernel_words.describe_kernels(meta)[-1] == (
        "sampled steps' logits bounded through the LM head's bf16 screen at 1-9 rows (full head -> screened: "
        "1 row 20.8 -> 10.3 ms, 9 rows 27.6 -> 16.3 ms)")
    assert kernel_words.kernel_summary(meta).endswith("; sampled steps: bf16 screen's bounds at 1-9 rows")
    del meta["sampled_head"]
    meta["static_decode_choices"] = [{"label": "Gemma3ForCausalLM (int8)", "kept": "fused", "width": 1,
                                      "ms": {"export": 6.02, "fused": 4.1, "eager": 9.4}, "wide": 5,
                                      "wide_ms": {"export": 8.0, "fused": 5.2, "eager": 12.0}}]
    assert kernel_words.describe_kernels(meta)[-1] == (
        "static decode step: Gemma3ForCausalLM (int8): fused (fused 4.1 ms, export 6.0 ms, eager 9.4 ms a call on 1 token; "
        "fused 5.2 ms, export 8.0 ms, eager 12.0 ms a call on 5 tokens)")
    assert kernel_words.kernel_summary(meta).endswith("; Gemma3ForCausalLM (int8) step: fused")


def test_a_copy_of_a_layer_with_a_packed_copy_drops_it_and_gives_the_same_products():
    """An opaque packed oneDNN tensor cannot be deep-copied (the int8 draft is a copy of the float
    target's modules): the copy leaves it out and its oneDNN reads the plain weight, same products."""
    import copy

    lin = torch.nn.Linear(32, 48, bias=False)
    planned = projections.PlannedLinear([torch.nn.Linear(32, 24, bias=False), torch.nn.Linear(32, 24, bias=False)])
    planned.onednn_at = (0, 2)
    wrapped = cpu.RowAdaptiveLinear(lin, (0, 2), cpu.pack(lin.weight))
    if planned.pack() is None:
        pytest.skip("this torch build cannot reorder weights for oneDNN")
    x = torch.randn(3, 32)
    for layer in (planned, wrapped):
        twin = copy.deepcopy(layer)
        assert twin.packed is None and layer.packed is not None
        with torch.inference_mode():
            torch.testing.assert_close(twin(x), layer(x), atol=1e-5, rtol=1e-5)
        assert getattr(twin, "kernel", lambda rows: "oneDNN packed")(3) == "oneDNN packed"


def test_the_k_major_copy_is_a_one_row_kernel_chosen_only_when_clearly_faster():
    """The fourth kernel: F.linear through an fp32 weight stored K-major ([in, out]). It wins a
    width only under FASTER of every other kernel timed there; it is timed at one row only (from
    two rows it is slower everywhere measured), so the timer gives None for a packed copy not timed."""
    assert cpu.choose_kernel(1.0, 1.2, None, 0.8) == "F.linear K-major"
    assert cpu.choose_kernel(1.0, 1.2, 0.85, 0.8) == "oneDNN packed"  # 0.8 is not under 0.9 x 0.85
    assert cpu.choose_kernel(1.0, 1.2, None, 0.95) == "F.linear"
    assert cpu.kmajor(torch.zeros(3, 2, dtype=torch.bfloat16)) is None
    w = torch.randn(48, 32)
    t = cpu.kmajor(w)
    assert t.shape == (32, 48) and t.is_contiguous() and torch.equal(t.t(), w)
    times = cpu.time_weights((w,), 1, 1, kmajor=[t])
    assert len(times) == 4 and times[2] is None and times[3] > 0  # (F.linear, oneDNN, packed: not timed, K-major)
    assert len(cpu.time_weights((w,), 1, 1)) == 2


@pytest.mark.parametrize("bias", [False, True])
def test_layers_on_the_k_major_copy_give_the_plain_products_and_copies_drop_it(bias):
    """RowAdaptiveLinear and PlannedLinear at code 3 (one row) read the K-major copy: the same
    products as F.linear to float rounding; a deep copy leaves the copy out and runs F.linear; the
    bytes a decode step reads count the weight once, not its copy."""
    import copy

    from specviz.analysis.hardware import decode_bytes

    torch.manual_seed(0)
    lin = torch.nn.Linear(32, 48, bias=bias)
    wrapped = cpu.RowAdaptiveLinear(lin, (0, 3, 0), kmajor=cpu.kmajor(lin.weight))
    planned = projections.PlannedLinear([torch.nn.Linear(32, 24, bias=bias), torch.nn.Linear(32, 24, bias=bias)])
    planned.onednn_at = (0, 3, 0)
    planned.kmajor = cpu.kmajor(planned.weight)
    for layer, plain in ((wrapped, lin), (planned, lambda x: torch.nn.functional.linear(x, planned.weight, planned.bias))):
        twin = copy.deepcopy(layer)
        assert twin.kmajor is None and layer.kmajor is not None
        with torch.inference_mode():
            for rows in (1, 2, 3):
                x = torch.randn(rows, 32)
                torch.testing.assert_close(layer(x), plain(x), atol=1e-5, rtol=1e-5)
                torch.testing.assert_close(twin(x), plain(x), atol=1e-5, rtol=1e-5)
    assert wrapped.kernel(1) == "F.linear K-major" and wrapped.kernel(2) == "F.linear"
    holder = torch.nn.Sequential(planned)
    assert decode_bytes(holder) == sum(p.numel() * 4 for p in planned.parameters())


def test_the_weight_first_kernel_wins_a_width_only_when_clearly_faster_and_needs_no_copy():
    """The fifth kernel: the weight as BLAS's left operand. It is timed where asked (fp32 only; the
    head and the body ask at 1-2 rows; time_head keeps its two kernels) and replaces F.linear or oneDNN only under
    FASTER of both; a copy-keeping kernel must still beat it by as much."""
    assert cpu.choose_kernel(1.0, 1.2, None, None, 0.8) == "weight-first"
    assert cpu.choose_kernel(1.0, 0.85, None, None, 0.8) == "oneDNN"  # 0.8 is not under 0.9 x 0.85
    assert cpu.choose_kernel(1.0, 1.2, 0.75, None, 0.8) == "weight-first"  # packed: a copy, not 10% faster
    assert cpu.choose_kernel(1.0, 1.2, 0.7, None, 0.8) == "oneDNN packed"
    assert cpu.choose_kernel(1.0, 1.2, None, 0.75, 0.8) == "weight-first"  # K-major: a copy, not 10% faster
    w = torch.randn(48, 32)
    times = cpu.time_weights((w,), 1, 1, weight_first=True)
    assert len(times) == 5 and times[2] is None and times[3] is None and times[4] > 0
    assert len(cpu.time_weights((w.bfloat16(),), 1, 1, weight_first=True)) == 2  # fp32 only
    assert len(cpu.time_head(w, 1, 1)) == 2
    assert len(cpu.time_weights((w,), cpu.WEIGHT_FIRST_ROWS + 1, 1, weight_first=True)) == 2  # not timed wider


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("out", [48, 50])  # 50: not a multiple of SPLIT, so one row takes the plain product
def test_layers_on_the_weight_first_kernel_give_the_plain_products(bias, out):
    """RowAdaptiveLinear and PlannedLinear at code 4 (here at 1 and 3 rows): the same products as
    F.linear to float rounding, [rows, out] and contiguous, at one row (the batched blocks) and
    wider (one product); no second copy of the weight is kept."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(32, out, bias=bias)
    wrapped = cpu.RowAdaptiveLinear(lin, (0, 4, 0, 4))
    planned = projections.PlannedLinear([torch.nn.Linear(32, out // 2, bias=bias), torch.nn.Linear(32, out // 2, bias=bias)])
    planned.onednn_at = (0, 4, 0, 4)
    assert not planned.uniform() and wrapped.kernel(1) == "weight-first" and wrapped.kernel(2) == "F.linear"
    for layer, plain in ((wrapped, lin), (planned, lambda x: torch.nn.functional.linear(x, planned.weight, planned.bias))):
        with torch.inference_mode():
            for rows in (1, 2, 3, 5):
                x = torch.randn(rows, 32)
                y = layer(x)
                assert y.shape == (rows, out) and y.is_contiguous()
                torch.testing.assert_close(y, plain(x), atol=1e-5, rtol=1e-5)
    assert wrapped.packed is None and wrapped.kmajor is None and planned.kmajor is None
    all_wfirst = projections.PlannedLinear([torch.nn.Linear(32, 8)])
    all_wfirst.onednn_at = (0, 4, 4)
    assert not all_wfirst.uniform()  # one row runs another product: its own graph


def test_the_inductor_gemm_wins_a_width_only_when_faster_than_every_other_kernel():
    """The sixth kernel keeps a second (blocked) copy of the weight, so it is weighed last: it must
    take under FASTER of every other kernel's time; time_weights times it for one weight only."""
    assert cpu.choose_kernel(1.0, 0.5, 0.45, None, 0.5, 0.4) == "Inductor GEMM"
    assert cpu.choose_kernel(1.0, 0.5, 0.4, None, 0.5, 0.37) == "oneDNN packed"  # not under 0.9 x 0.4
    assert cpu.choose_kernel(1.0, 1.2, None, None, 0.8, 0.75) == "weight-first"
    w = torch.randn(48, 32)
    calls = []

    def gemm(x):
        calls.append(x.shape[0])
        return torch.nn.functional.linear(x, w)

    times = cpu.time_weights((w,), 3, 1, inductor=gemm, early=False)
    assert len(times) == 6 and times[2:5] == (None, None, None) and times[5] > 0 and calls == [3]
    assert len(cpu.time_weights((w, w), 3, 1, inductor=gemm, early=False)) == 2  # a head's kernel: one weight


@pytest.mark.parametrize("bias", [False, True])
def test_a_head_on_the_inductor_gemm_gives_the_plain_products_and_copies_drop_it(bias):
    """RowAdaptiveLinear at code 5 runs its compiled kernel (a stand-in here) on [rows, in], the
    same shapes as the plain layer; a bias (never on an LM head) or a copy (no compiled kernel)
    falls back to F.linear with the same products."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(32, 48, bias=bias)
    calls = []

    def gemm(x):
        calls.append(tuple(x.shape))
        return torch.nn.functional.linear(x, lin.weight)

    wrapped = cpu.RowAdaptiveLinear(lin, (0, 4, 5, 5), gemm=gemm)
    assert wrapped.kernel(2) == wrapped.kernel(9) == "Inductor GEMM"
    twin = copy.deepcopy(wrapped)
    assert twin.gemm is None
    with torch.inference_mode():
        for rows in (1, 2, 3):
            x = torch.randn(1, rows, 32)
            for layer in (wrapped, twin):
                y = layer(x)
                assert y.shape == (1, rows, 48)
                torch.testing.assert_close(y, lin(x), atol=1e-5, rtol=1e-5)
    assert calls == ([] if bias else [(2, 32), (3, 32)])


def test_the_inductor_gemm_compiles_once_and_gives_f_linear_products():
    """The real compiled kernel on a small fp32 weight: F.linear's products at 1 to 5 rows, inside
    inference mode and outside it (an ordinary tensor back, as transformers' generate needs), no
    recompile after its warm-up (one graph for one row, one for wider); none for bf16."""
    from specviz.runtime import inductor_gemm

    torch.manual_seed(0)
    weight = torch.nn.Parameter(torch.randn(256, 64) * 0.1, requires_grad=False)
    gemm = inductor_gemm.frozen_gemm(weight)
    if gemm is None:
        pytest.skip("Inductor cannot compile here (no C++ compiler)")
    assert inductor_gemm.frozen_gemm(weight) is gemm  # built once per weight
    from torch._dynamo.utils import counters

    graphs = counters["stats"]["unique_graphs"]  # Dynamo's count of graphs compiled in this process
    for mode in (torch.inference_mode, torch.no_grad):
        with mode():
            for rows in (1, 2, 3, 5):
                x = torch.randn(rows, 64)
                y = gemm(x)
                assert y.is_inference() == (mode is torch.inference_mode)
                torch.testing.assert_close(y, torch.nn.functional.linear(x, weight), atol=1e-5, rtol=1e-5)
    assert counters["stats"]["unique_graphs"] == graphs  # both modes ran on the two warm graphs
    assert inductor_gemm.frozen_gemm(weight.detach().bfloat16()) is None


def test_a_plan_that_chose_the_inductor_gemm_runs_its_next_best_kernels_where_it_is_not_built(big_head, tmp_path, monkeypatch):
    """A cached plan keeps Inductor's GEMM at a width; on a load where it cannot be built (here
    turned off) the head runs the kernel that plan's other timings choose, not F.linear."""
    model, _ = big_head
    monkeypatch.setenv("SPECVIZ_INDUCTOR_GEMM", "0")
    timer = Timer({r: (1.0, 0.8, None, None, None, 0.1) for r in range(1, 40)})
    assert cpu.speed_up_lm_head(model, tmp_path, time_width=timer)
    head = model.get_output_embeddings()
    assert head.gemm is None and head.kernel(1) == head.kernel(3) == "oneDNN"
    report = cpu.head_kernel_report(model)
    assert report["by_rows"][0]["kernel"] == "oneDNN" and "inductor_ms" not in report["by_rows"][0]
