"""specviz.app.replay.Replay: a recorded run steps like the live session that wrote it."""

from __future__ import annotations

import json

import pytest

from specviz import Sampling, SpeculativeDecoder, TraceRecorder, load_trace
from specviz.app.replay import Replay
from specviz.core.hooks import TRACE_VERSION
from specviz.proposers import DraftModel


@pytest.fixture()
def recorded(tiny_target, near_draft, tmp_path):
    path = tmp_path / "run.jsonl"
    dec = SpeculativeDecoder(tiny_target, DraftModel(near_draft), k=3, sampling=Sampling(0.7))
    res = dec.generate("the cat sat on the mat", max_new_tokens=16, seed=5, hooks=[TraceRecorder(path)])
    return str(path), dec, res


def test_replay_steps_like_the_live_session(recorded):
    path, dec, res = recorded
    live = dec.start("the cat sat on the mat", max_new_tokens=16, seed=5)
    replay = Replay(path)
    assert replay.steps == [] and not replay.done and replay.target_forwards == 0
    while not live.done:
        assert replay.step().committed == live.step().committed  # timings differ, decisions do not
        assert replay.target_forwards == live.target_forwards
    assert replay.done and replay.steps == list(res.steps)
    assert replay.stats() == res.stats
    with pytest.raises(ValueError, match="no more steps"):
        replay.step()


def test_an_uploaded_trace_shows_every_step_then_rewinds(recorded):
    path, _, res = recorded
    replay = Replay(path, shown="all", end_message="the end of the trace")
    shown = replay.steps
    assert shown == list(res.steps) and replay.done and replay.header["k"] == 3
    replay.rewind()
    assert replay.steps is shown and shown == [] and not replay.done  # the same list, emptied
    replay.step()
    assert len(shown) == 1
    with pytest.raises(ValueError, match="shown must be"):
        Replay(path, shown="some")


def test_a_trace_without_steps_is_refused(tmp_path, recorded):
    path, _, _ = recorded
    header_only = tmp_path / "empty.jsonl"
    header_only.write_text(open(path, encoding="utf-8").readline(), encoding="utf-8")
    with pytest.raises(ValueError, match="no steps"):
        Replay(str(header_only))


def test_traces_of_this_and_older_versions_load_and_newer_ones_are_refused(tmp_path, recorded):
    path, _, res = recorded
    lines = open(path, encoding="utf-8").read().splitlines()
    header = json.loads(lines[0])
    assert header["version"] == TRACE_VERSION

    def write(name, **changes):
        out = tmp_path / name
        head = {k: v for k, v in {**header, **changes}.items() if v is not None}
        out.write_text("\n".join([json.dumps(head)] + lines[1:]) + "\n", encoding="utf-8")
        return out

    assert load_trace(write("same.jsonl")).steps == res.steps
    assert load_trace(write("unversioned.jsonl", version=None)).steps == res.steps  # no version: the first one
    with pytest.raises(ValueError, match=rf"^newer\.jsonl, line 1: a trace of version {TRACE_VERSION + 1}, newer than "
                                         rf"this specviz reads \(versions 1 to {TRACE_VERSION}\); upgrade specviz"):
        load_trace(write("newer.jsonl", version=TRACE_VERSION + 1))
    for bad in ("1", 0, 1.5, True):
        with pytest.raises(ValueError, match=r"^odd\.jsonl, line 1: the header's trace version .* is not one specviz knows"):
            load_trace(write("odd.jsonl", version=bad))
    with pytest.raises(ValueError, match="newer than this specviz reads"):
        Replay(str(write("newer.jsonl", version=TRACE_VERSION + 1)))
