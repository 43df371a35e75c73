"""Lazy step records: the fields computed on first read equal an eager build, traces are unchanged."""

import io
import json
import pickle

import pytest

from specviz import Hook, Sampling, SpeculativeDecoder, TraceRecorder
from specviz.proposers import DraftModel, DraftTree, NGram, NGramTree

PROMPT = "the cat sat on the mat. the cat sat on the"
TIMINGS = ("draft_ms", "verify_ms", "other_ms", "wall_s", "tokens_per_s", "prefill_ms")


def _trace(decoder, eager: bool, records: str = "full", seed: int = 3) -> list[dict]:
    fh = io.StringIO()
    session = decoder.start(PROMPT, max_new_tokens=24, seed=seed, hooks=[TraceRecorder(fh)], records=records)
    session.eager_records = eager
    while not session.done:
        session.step()
    return [_strip(json.loads(line)) for line in fh.getvalue().splitlines()]


def _strip(obj):
    if isinstance(obj, dict):
        return {key: _strip(v) for key, v in obj.items() if key not in TIMINGS}
    if isinstance(obj, list):
        return [_strip(v) for v in obj]
    return obj


def _decoders(tiny_target, tiny_draft):
    for sampling in (Sampling(), Sampling(0.8, top_p=0.95)):
        yield SpeculativeDecoder(tiny_target, None, sampling=sampling)
        yield SpeculativeDecoder(tiny_target, NGram(), k=3, sampling=sampling)
        yield SpeculativeDecoder(tiny_target, DraftModel(tiny_draft), k=3, sampling=sampling)
        yield SpeculativeDecoder(tiny_target, DraftModel(tiny_draft, policy="argmax"), k=2, sampling=sampling)
        yield SpeculativeDecoder(tiny_target, NGramTree(), k=3, sampling=sampling)
        yield SpeculativeDecoder(tiny_target, DraftTree(tiny_draft, nodes=6, width=2), k=3, sampling=sampling)


def test_lazy_fields_equal_eager_and_traces_match(tiny_target, tiny_draft):
    for decoder in _decoders(tiny_target, tiny_draft):
        eager = _trace(decoder, eager=True)
        lazy = _trace(decoder, eager=False)
        assert lazy == eager, decoder.name
        steps = [x for x in lazy if x["type"] == "step"]
        assert all(len(s["top_next"]) == 10 for s in steps)
        if decoder.proposer is not None:
            assert any(d["top_p"] for s in steps for d in s["drafts"])


def test_records_read_after_the_run_equal_records_read_during_it(tiny_target, tiny_draft):
    """records="full": fields nobody read during the step are computed at release, same values."""
    for decoder in _decoders(tiny_target, tiny_draft):
        seen = []

        class Reader(Hook):
            def on_step(self, session, record):
                seen.append(_strip(record.to_dict()))

        during = decoder.start(PROMPT, max_new_tokens=24, seed=3, hooks=[Reader()])
        while not during.done:
            during.step()
        after = decoder.start(PROMPT, max_new_tokens=24, seed=3)
        while not after.done:
            after.step()
        assert after._kept is None  # nothing kept once the run is over
        assert [_strip(s.to_dict()) for s in after.steps] == seen
        # records cross a pickle boundary (ZeroGPU) with every field
        assert [_strip(s.to_dict()) for s in pickle.loads(pickle.dumps(after.steps))] == seen


def test_lean_records_release_their_tensors(tiny_target, tiny_draft):
    decoder = SpeculativeDecoder(tiny_target, DraftModel(tiny_draft), k=3)
    session = decoder.start(PROMPT, max_new_tokens=12, seed=0, records="lean")
    first = session.step()
    assert len(first.top_next) == 10  # readable during its step
    session.step()
    assert session.steps[0].top_next == first.top_next  # read before: kept
    with pytest.raises(ValueError, match="released"):
        session.steps[0].drafts[0].top_q  # never read, released when the next step started
    assert session.steps[1].n_accepted >= 0 and session.steps[1].committed  # plain fields always there
    with pytest.raises(ValueError, match="records must be"):
        decoder.start(PROMPT, records="some")
