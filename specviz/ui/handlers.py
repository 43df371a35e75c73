"""Helpers the tabs' handlers share: turning an exception into the one line the page shows, a
figure spec into gr.Plot's payload, outputs by name, and the engine queue's concurrency."""

from __future__ import annotations

import functools
import inspect
import logging
from typing import Any, Callable, Mapping

import gradio as gr
from gradio.components.plot import PlotData

from .. import settings, viz

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


def by_name(fn: Callable[..., Any], components: Mapping[str, Any]) -> Callable[..., Any]:
    """``fn`` (a handler, or a generator handler, returning ``{name: value}``) as an event's function
    whose outputs are ``components.values()``: each name becomes its component (Gradio takes such a
    dict); a name left out keeps its component as it is. The wrapper keeps ``fn``'s name (the API
    name) and signature (gr.EventData parameters)."""

    def to_components(out: Mapping[str, Any]) -> Any:
        if not out:
            return gr.skip()  # nothing changes (Gradio refuses an empty dict)
        return {components[name]: value for name, value in out.items()}

    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def stream(*args: Any, **kwargs: Any):
            for out in fn(*args, **kwargs):
                yield to_components(out)

        return stream

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        return to_components(fn(*args, **kwargs))

    return call


def engine_concurrency() -> int:
    """Model runs at once across all users (``SPECVIZ_CONCURRENCY``, default 2): the shared
    "specviz-engine" queue's limit."""
    try:
        return max(1, int(settings.value("SPECVIZ_CONCURRENCY", "2")))
    except ValueError:
        return 2


__all__ = ["by_name", "engine_concurrency", "friendly_error", "plot"]
