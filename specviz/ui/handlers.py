"""Helpers the tabs' handlers share: turning an exception into the one line the page shows, and
a figure spec into gr.Plot's payload."""

from __future__ import annotations

import logging

from gradio.components.plot import PlotData

from .. import viz

log = logging.getLogger("specviz.ui")


def friendly_error(e: BaseException, where: str, *, expected: tuple[type[BaseException], ...] = (ValueError,),
                   first_line: bool = False, after: str = "") -> str:
    """The message a handler shows for ``e``.

    ``expected`` errors (bad input: their text says what to change) and a finished session's
    RuntimeError are shown as they are (``first_line``: only their first line); anything else is
    logged with its traceback under ``where`` ("the playground") and shown as an unexpected
    error, followed by ``after`` (what the user can do next).
    """
    if isinstance(e, expected) or (isinstance(e, RuntimeError) and "finished" in str(e)):
        text = str(e).strip()
        if first_line:
            return text.splitlines()[0] if text else type(e).__name__
        return str(e)
    log.exception("unexpected error in %s", where)
    return f"unexpected error ({type(e).__name__}): {e}{after}"


def plot(spec: dict) -> PlotData:
    """A figure spec (``viz.topk_figure.spec(...)``) as gr.Plot's payload: the JSON
    ``Figure.to_json()`` gives, without building the Figure (the playground's four per-step
    figures cost ~5 ms a Step as Figure objects, ~0.5 ms as dicts)."""
    return PlotData(type="plotly", plot=viz.figure_json(spec))


__all__ = ["friendly_error", "plot"]
