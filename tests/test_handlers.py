"""The UI's shared handler helpers (the layering rules themselves are in test_structure.py)."""

from __future__ import annotations

from specviz.ui.handlers import friendly_error


def test_friendly_error_shows_input_errors_and_hides_nothing_else():
    assert friendly_error(ValueError("k must be from 1 to 8"), "the playground") == "k must be from 1 to 8"
    assert friendly_error(OSError("no such file\nmore"), "bench", expected=(OSError,), first_line=True) == "no such file"
    assert friendly_error(RuntimeError("the session has finished"), "x") == "the session has finished"
    msg = friendly_error(KeyError("boom"), "the playground", after=". Try Reset.")
    assert msg.startswith("unexpected error (KeyError)") and msg.endswith("Try Reset.")
