"""Concurrent sessions: 8 gradio_client sessions press Step, then Play to the end, at once.

Each session has its own playground state (gr.State is per Gradio session); runs with the same
seed must produce exactly the tokens of that seed's run alone, and every run must finish.
The playground handlers are Gradio API endpoints named after their functions (/on_step, /on_play).
"""

from __future__ import annotations

import pytest

from tests.support import app_server

pytest.importorskip("gradio_client")


@pytest.mark.slow
def test_eight_concurrent_sessions_match_their_single_runs(tiny_env, tiny_app):
    """tiny_env / tiny_app (conftest.py): the tiny models as the app's defaults, and the app served on them."""
    from benchmarks import load_test

    env, url = tiny_env, tiny_app
    out = load_test.run_load(url, env["SPECVIZ_DEFAULT_TARGET"], env["SPECVIZ_DEFAULT_DRAFT"], sessions=8, seeds=2,
                             max_new_tokens=24, prompt=app_server.TINY_PROMPT)
    print(load_test.report(out))
    refs = out["refs"]
    assert all(r.finished for r in refs.values()), [r.status for r in refs.values()]
    assert refs[0].text and refs[0].text != refs[1].text  # the seed matters (temperature 1)
    assert out["unfinished"] == [], [out["results"][i].status for i in out["unfinished"]]
    assert out["mismatches"] == []
