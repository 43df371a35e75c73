"""The kernel table and its plans: every kernel gives the plain product at every width, a plan runs
each width on its kernel, ``specviz tune`` measures once and writes the plan file that loading
reads, and loading and a model's first steps time nothing, with a plan or without one (stand-in
timers that fail when called: no timed assertions)."""

from __future__ import annotations

import copy
import json
import logging

import pytest
import torch

from specviz import Sampling, SpeculativeDecoder, tuning
from specviz.bench import kernel_words
from specviz.core.bounds import ENGINE_MAX_K
from specviz.runtime import argmax_head, cpu, projections, state
from specviz.runtime import plan as kernel_plan
from specviz.runtime.kernels import DEFAULT, TABLE, PlannedLinear
from tests.support import make_char_tokenizer, make_llama

HERE = [name for name, k in TABLE.items() if k.runs(torch.float32)]  # the float32 kernels that run on this machine
PROMPT = "the cat sat on the mat. the cat"


def _no_timing(*_a, **_k):
    raise AssertionError("timed outside specviz tune")


@pytest.fixture
def no_timers(monkeypatch):
    """Every timer a plan is measured with, failing if called."""
    for module, name in ((tuning, "time_kernels"), (tuning, "time_widths")):
        monkeypatch.setattr(module, name, _no_timing)


@pytest.fixture
def tiny_dir(tmp_path, monkeypatch):
    """A tiny llama saved as a local checkpoint, its head and projections counted as large, a fresh cache."""
    from specviz.models.cache import clear_model_cache

    monkeypatch.setattr(cpu, "MIN_HEAD_ELEMENTS", 0)
    monkeypatch.setattr(projections, "MIN_BODY_ELEMENTS", 0)
    monkeypatch.setenv("SPECVIZ_ALLOW_LOCAL_PATHS", "1")
    monkeypatch.setenv("SPECVIZ_CACHE_DIR", str(tmp_path / "cache"))
    for name in ("SPECVIZ_CPU_HEAD", "SPECVIZ_CPU_KERNELS", "SPECVIZ_ARGMAX_HEAD", "SPECVIZ_SAMPLED_HEAD"):
        monkeypatch.delenv(name, raising=False)
    tok = make_char_tokenizer()
    make_llama(len(tok), 64, 2, seed=0, sharpen=30.0).save_pretrained(str(tmp_path / "tiny"))
    tok.save_pretrained(str(tmp_path / "tiny"))
    clear_model_cache()
    yield str(tmp_path / "tiny")
    clear_model_cache()


def _tokens(loaded, sampling=Sampling(0.0)):
    session = SpeculativeDecoder(loaded, None, k=3, sampling=sampling).start(PROMPT, max_new_tokens=6, seed=0,
                                                                           records="lean")
    while not session.done:
        session.step()
    return session.result().token_ids


def test_the_measured_widths_are_engine_widths():
    assert 2 <= cpu.MEASURED_ROWS <= ENGINE_MAX_K + 1 and kernel_plan.WIDTHS == tuple(range(1, cpu.MEASURED_ROWS + 1))


@pytest.mark.parametrize("name", HERE)
@pytest.mark.parametrize("bias", [False, True])
def test_every_kernel_in_the_table_gives_the_plain_product_at_every_width(name, bias):
    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 3000, bias=bias)
    fast = PlannedLinear(lin, [name])
    assert fast.weight is lin.weight and fast.bias is lin.bias and fast.kernels == (name,)
    with torch.inference_mode():
        for rows in range(1, 12):  # the planned widths and beyond them
            x = torch.randn(1, rows, 64)  # [batch, rows, in] as a causal LM's head sees it
            torch.testing.assert_close(fast(x), lin(x), rtol=1e-4, atol=1e-4)
            assert fast(x).shape == (1, rows, 3000) and fast.kernel(rows) == name


def test_a_plan_runs_each_width_on_its_kernel_and_keeps_only_the_copies_it_reads():
    torch.manual_seed(1)
    lin = torch.nn.Linear(32, 48, bias=False)
    fast = PlannedLinear(lin)
    assert fast.kernels == (DEFAULT,) and all(getattr(fast, k.copy) is None for k in TABLE.values() if k.copy)
    wanted = [HERE[i % len(HERE)] for i in range(9)]
    fast.use(wanted)
    assert [fast.kernel(r) for r in range(1, 10)] == wanted and fast.kernel(40) == wanted[-1]
    for k in TABLE.values():
        if k.copy:
            assert (getattr(fast, k.copy) is not None) is (k.name in wanted)
    twin = copy.deepcopy(fast)  # a copy carries no copy of the weight: F.linear until use() prepares them
    assert all(getattr(twin, k.copy) is None for k in TABLE.values() if k.copy)
    with torch.inference_mode():
        for rows in (1, 2, 5, 9):
            x = torch.randn(rows, 32)
            torch.testing.assert_close(fast(x), lin(x), rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(twin(x), lin(x), rtol=1e-5, atol=1e-5)
    fast.use([DEFAULT])
    assert all(getattr(fast, k.copy) is None for k in TABLE.values() if k.copy)
    fast.use(["no such kernel"])  # a plan naming a kernel that is gone (or not built here): F.linear
    assert fast.kernels == (DEFAULT,)


def test_the_batch_invariant_kernels_give_a_row_the_same_bits_at_every_width():
    invariant = [n for n in HERE if TABLE[n].batch_invariant]
    if not invariant:
        pytest.skip("specviz's native ops are not built here")
    g = torch.Generator().manual_seed(2)
    lin = torch.nn.Linear(640, 300, bias=False)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(300, 640, generator=g))
    x = torch.randn(9, 640, generator=g)
    for name in invariant:
        fast = PlannedLinear(lin, [name])
        with torch.inference_mode():
            alone = torch.cat([fast(x[r : r + 1]) for r in range(9)])
            assert all(torch.equal(fast(x[:rows]), alone[:rows]) for rows in range(2, 10)), name


def test_a_batch_invariant_kernel_runs_every_width_else_the_first_unless_another_is_clearly_faster():
    assert list(TABLE)[0] == "specviz blocked" and TABLE["specviz blocked"].batch_invariant  # batch-invariant first
    assert tuning.choose({"specviz blocked": 1.0, "F.linear": 0.95, "oneDNN packed": 0.92}) == "specviz blocked"
    # however much faster another is: a mixed plan would give a verify pass's rows other bits than the step's
    assert tuning.choose({"specviz blocked": 1.0, "F.linear": 0.5, "oneDNN packed": 0.4}) == "specviz blocked"
    assert tuning.choose({"F.linear": 1.0, "oneDNN packed": 0.95}) == "F.linear"
    assert tuning.choose({"F.linear": 1.0, "oneDNN packed": 0.8}) == "oneDNN packed"
    assert tuning.choose({"F.linear": 1.0}) == "F.linear" and tuning.choose({}) == DEFAULT
    plan = kernel_plan.KindPlan({1: "F.linear", 3: "oneDNN packed"})
    assert plan.by_width(5) == ("F.linear", "F.linear", "oneDNN packed", "oneDNN packed", "oneDNN packed")


def test_the_default_comes_from_cpu_features():
    want = next((n for n in TABLE if n != DEFAULT and TABLE[n].runs(torch.float32)), DEFAULT)
    assert kernel_plan.default_kernel("qkv") == want == kernel_plan.default_kernel("head")
    assert kernel_plan.default_kernel("argmax") == "bf16" and kernel_plan.Plan("m").kind("o").kernels == {1: want}


def _stand_in_timers(monkeypatch, calls):
    """Timers that record their calls: oneDNN packed fastest from 3 rows, screens faster everywhere."""
    def time_kernels(weights, rows, repeats, clock=None):
        calls.append(rows)
        return {n: (0.5 if n == "oneDNN packed" and rows >= 3 else 1.0) for n in HERE}

    monkeypatch.setattr(tuning, "time_kernels", time_kernels)
    monkeypatch.setattr(tuning, "time_widths", lambda head, screen, fast=None: {
        r: (10.0, 2.0 if isinstance(screen, argmax_head.Screen) else 1.0) for r in argmax_head.WIDTHS})


def test_tune_writes_one_plan_file_that_loading_reads(tiny_dir, monkeypatch, no_timers):
    from specviz.models import cache_dir, load_model

    loaded = load_model(tiny_dir)
    assert state.of(loaded.model).plan.path is None  # no plan yet: feature defaults
    calls = []
    _stand_in_timers(monkeypatch, calls)
    plan, measured = tuning.tune(loaded.model)
    assert measured and plan.path.exists() and plan.path.parent == cache_dir() / "plans"
    assert len(calls) == 5 * cpu.MEASURED_ROWS  # the head and four projection kinds, every width once
    saved = json.loads(plan.path.read_text())
    assert saved["machine"] == cpu.machine_id() and saved["torch"] == torch.__version__
    assert saved["kinds"]["head"]["kernels"]["1"] == tuning.choose({n: 1.0 for n in HERE})
    assert tuning.tune(loaded.model) == (plan, False) and len(calls) == 5 * cpu.MEASURED_ROWS  # once
    monkeypatch.setattr(tuning, "time_kernels", _no_timing)
    monkeypatch.setattr(tuning, "time_widths", _no_timing)
    from specviz.models.cache import clear_model_cache

    clear_model_cache()
    again = load_model(tiny_dir)  # read, not measured
    head = again.model.get_output_embeddings()
    assert state.of(again.model).plan.path == plan.path
    want = plan.kinds["head"].by_width(cpu.MEASURED_ROWS)
    assert isinstance(head, PlannedLinear) and head.kernels == want
    assert argmax_head.screen_of(again.model).kind == "int8"  # the smaller share of the full head's time
    assert kernel_words.describe_head_kernels(kernel_words.head_report(again.model)).endswith("(tuned)")
    assert _tokens(again) == _tokens(loaded)


def test_loading_and_first_steps_time_nothing_with_or_without_a_plan(tiny_dir, monkeypatch, no_timers):
    from specviz.models import load_model
    from specviz.models.cache import clear_model_cache

    for tuned in (False, True):
        loaded = load_model(tiny_dir)
        assert (state.of(loaded.model).plan.path is not None) is tuned
        _tokens(loaded)  # a first greedy step (the certified screen) and a first sampled one (its bounds)
        _tokens(loaded, Sampling(0.8))
        assert kernel_words.sampled_report(loaded.model) is not None
        with monkeypatch.context() as m:
            _stand_in_timers(m, [])
            tuning.tune(loaded.model)
        clear_model_cache()


def test_a_missing_or_damaged_plan_gives_feature_defaults_and_says_so_once(tiny_dir, caplog, no_timers):
    from specviz.models import cache_dir, load_model
    from specviz.models.cache import clear_model_cache

    key = kernel_plan.key_of(tiny_dir, torch.float32)
    projections._said.discard(key)
    with caplog.at_level(logging.INFO, logger="specviz.runtime"):
        load_model(tiny_dir)
        clear_model_cache()
        load_model(tiny_dir)
    assert sum("no tuned kernel plan" in r.getMessage() for r in caplog.records) == 1
    path = kernel_plan.path_of(key, cache_dir())
    path.parent.mkdir(parents=True)
    for text in ("{not json", json.dumps({"format": 0}), json.dumps({"format": kernel_plan.FORMAT, "kinds": {"head": {}}})):
        path.write_text(text)
        caplog.clear()
        clear_model_cache()
        with caplog.at_level(logging.INFO, logger="specviz.runtime"):
            loaded = load_model(tiny_dir)
        assert [r.getMessage() for r in caplog.records if "unreadable" in r.getMessage()], text
        head = loaded.model.get_output_embeddings()
        assert set(head.kernels) == {kernel_plan.default_kernel("head")} if isinstance(head, PlannedLinear) else True


def test_the_cpu_head_setting_keeps_the_heads_own_layer(tiny_dir, monkeypatch, no_timers):
    from specviz.models import load_model

    monkeypatch.setenv("SPECVIZ_CPU_HEAD", "0")
    loaded = load_model(tiny_dir)
    assert type(loaded.model.get_output_embeddings()) is torch.nn.Linear and kernel_words.head_report(loaded.model) is None


def test_the_kernel_lines_read_a_plans_report_and_an_older_sweeps():
    new = {"by_rows": [{"rows": 1, "kernel": "specviz blocked", "ms": {"specviz blocked": 20.0, "F.linear": 30.0}},
                       {"rows": 2, "kernel": "oneDNN packed", "ms": {"specviz blocked": 40.0, "oneDNN packed": 30.0}}],
           "wider": "oneDNN packed", "source": "tuned", "threads": 2, "shape": [262144, 640]}
    line = kernel_words.describe_head_kernels(new)
    assert line == ("LM head 262144x640, 2 threads: specviz blocked at 1 row (20 ms vs 30 ms for F.linear), oneDNN "
                    "packed at 2 rows (30 ms vs 40 ms for specviz blocked); oneDNN packed above 2 rows (tuned)")
    old = {"by_rows": [{"rows": 1, "kernel": "weight-first", "f_linear_ms": 64.1, "wfirst_ms": 20.8}], "wider": "x",
           "cached": True, "threads": 2, "shape": [8, 4]}
    assert "weight-first at 1 row (21 ms vs 64 ms for F.linear)" in kernel_words.describe_head_kernels(old)
    assert kernel_words.kernel_summary({"lm_head": new}) == "LM head: specviz blocked at 1 row, oneDNN packed at 2 rows"


def test_each_width_takes_its_fastest_screen_and_a_model_keeps_both_where_each_wins():
    # As tune measured gemma-3-270m's head on a Zen 3 (ms: full, bf16, int8 by width): the int8 screen
    # wins one to three rows, the bf16 one from five; a median over widths picked one screen for all
    # and cost target-only decoding 18% when it picked bf16.
    times = {1: {"full": 28.2, "bf16": 15.9, "int8": 10.3}, 2: {"full": 30.9, "bf16": 17.1, "int8": 13.0},
             3: {"full": 39.4, "bf16": 19.2, "int8": 16.7}, 5: {"full": 29.3, "bf16": 19.4, "int8": 23.7},
             9: {"full": 33.5, "bf16": 27.0, "int8": 45.8}, 17: {"full": 59.7, "bf16": 46.3, "int8": 84.9}}
    chosen = tuning.screen_kind(times, argmax_head.KINDS)
    assert chosen.by_width(9) == ("int8",) * 4 + ("bf16",) * 5
    times[17]["bf16"] = 58.0  # under 10% faster than the full head: the full head there
    assert tuning.screen_kind(times, argmax_head.KINDS).kernel(17) == "full"
    assert tuning.screen_kind({1: {"full": 1.0, "bf16": 0.95}}, ("bf16",)) is None
