"""The floats a model computes do not depend on what a clock said (issue 52: the same seed gave
other tokens from one start to the next). The static step runs fused where it serves a body and
prefills every prompt through it, timing neither; here two clocks that make different things look
slow give the same logits, bit for bit, and the same sampled tokens."""

from __future__ import annotations

import copy
import itertools
import types

import pytest
import torch

from specviz import Sampling, SpeculativeDecoder
from specviz.models.int8 import Int8Options, quantize_int8
from specviz.proposers import DraftModel
from specviz.runtime import static_decode
from specviz.runtime.kv import forward_logits
from specviz.runtime.static_decode import static_cache
from tests.support.kernel import NEEDS_OP, share_built_ops
from tests.support.tiny import loaded
from tests.test_static_decode import tiny_gemma

pytestmark = NEEDS_OP


def _clock(deltas):
    """A stand-in ``time`` module whose perf_counter advances by ``deltas`` in turn: a clock that
    makes whatever is timed at some positions look slow."""
    steps, now = itertools.cycle(deltas), [0.0]

    def perf_counter():
        now[0] += next(steps)
        return now[0]

    return types.SimpleNamespace(perf_counter=perf_counter, sleep=lambda s: None, monotonic=perf_counter)


CLOCKS = {"the model's forward looks fast": (1.0, 1e-3, 1.0, 5.0), "the body looks fast": (1.0, 5.0, 1.0, 1e-3)}


@pytest.fixture(scope="module")
def gemma(tokenizer):
    return loaded(tiny_gemma(len(tokenizer), seed=5), tokenizer, "tiny-gemma-clock")


def _run(base, deltas, monkeypatch):
    """A fresh int8 copy (specviz's kernel: the fused runner serves it), the static step on a clock
    advancing by ``deltas``: a prompt and three decode steps -> their logits [4, V], the decoder."""
    monkeypatch.setattr(static_decode, "time", _clock(deltas))
    model = quantize_int8(copy.deepcopy(base.model), base.tokenizer, Int8Options(kernel="blocked"))
    cache = static_cache(model)
    rows = [forward_logits(model, torch.tensor([1, 5, 9, 12, 7, 5, 9, 30, 4, 8]), cache, 1)]
    for t in (6, 3, 11):
        rows.append(forward_logits(model, torch.tensor([t]), cache, 1))
    return torch.cat(rows), cache.decoder


def test_no_clock_changes_a_models_floats(gemma, monkeypatch, specviz_op):
    monkeypatch.delenv("SPECVIZ_STATIC_DECODE", raising=False)
    (a, da), (b, db) = (_run(gemma, d, monkeypatch) for d in CLOCKS.values())
    assert da.runner == db.runner == "fused"
    assert torch.equal(a, b)


def test_no_clock_changes_a_seeds_tokens(gemma, monkeypatch, specviz_op):
    """An int8 draft proposing for its float32 target at T = 0.8: the same seed, the same tokens,
    whichever way each clock would have timed the draft's runner and prompt."""
    monkeypatch.delenv("SPECVIZ_STATIC_DECODE", raising=False)
    runs = []
    for deltas in CLOCKS.values():
        monkeypatch.setattr(static_decode, "time", _clock(deltas))
        draft = loaded(quantize_int8(copy.deepcopy(gemma.model), gemma.tokenizer, Int8Options(kernel="blocked")),
                       gemma.tokenizer, "tiny-gemma-clock@int8")
        decoder = SpeculativeDecoder(gemma, DraftModel(draft), k=3, sampling=Sampling(temperature=0.8))
        runs.append(decoder.generate([1, 5, 9, 12, 7, 5, 9, 30], max_new_tokens=12, seed=0).token_ids)
    assert runs[0] == runs[1]


_START = """
import json, sys
from specviz import Sampling, SpeculativeDecoder, load_model
from specviz.app import warmup
from specviz.proposers import DraftModel

target_dir, draft_dir, order = sys.argv[1:4]
target = load_model(target_dir)
draft = load_model(draft_dir + "@int8")
if order == "prepared":  # the app's start-up preparation builds the draft's fast step before any run
    warmup.warm_static_steps([("draft", draft), ("target", target)], widths=(1, 5))
decoder = SpeculativeDecoder(target, DraftModel(draft), k=4, sampling=Sampling(temperature=1.0))
print(json.dumps(list(decoder.generate("The quick brown fox", max_new_tokens=24, seed=0).token_ids)))
"""


@pytest.mark.slow
def test_two_starts_in_either_order_give_a_seed_the_same_tokens(tmp_path, specviz_op):
    """Issue 52's report, end to end: one start whose first run loads the int8 draft itself, another whose
    start-up preparation builds the draft's fast step first; the same seed, the same tokens, each start a
    process of its own sharing the machine's cache."""
    import os
    import subprocess
    import sys

    from tests.support.tiny import make_tiny_models

    target, draft = make_tiny_models(tmp_path)
    share_built_ops(tmp_path / "cache")  # the ops this worker built: each start loads them, compiles nothing
    env = {**os.environ, "SPECVIZ_CACHE_DIR": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1"}
    env.pop("SPECVIZ_STATIC_DECODE", None)
    runs = [subprocess.run([sys.executable, "-c", _START, target, draft, order], env=env, capture_output=True,
                           text=True, timeout=600) for order in ("first-run", "prepared")]
    for r in runs:
        assert r.returncode == 0, r.stderr[-2000:]
    tokens = [r.stdout.strip().splitlines()[-1] for r in runs]
    assert tokens[0] == tokens[1]
