"""Run slow work (model loading) off the Gradio handler's thread while it streams progress."""

from __future__ import annotations

import queue
import threading
import time
from typing import Any, Callable, Generator, Iterator

__all__ = ["STOPPED", "LoadProgress", "Every", "in_thread", "loading"]

STOPPED = object()  # what loading() returns when should_stop() said so


def in_thread(
    fn: Callable[[Callable[[str], None]], Any],
    on_progress: Callable[[str], None] | None = None,
    poll_s: float = 0.25,
    name: str = "specviz-load",
) -> Iterator[Any]:
    """Run ``fn(report)`` in a daemon thread; yield each message it reports, then ``(result,)``.

    Messages are collected every ``poll_s`` seconds while ``fn`` runs; ``on_progress`` (if given)
    sees each one just before it is yielded, and also those reported after the last poll (which
    are not yielded). ``fn``'s exception is re-raised in the caller's thread.
    """
    messages: queue.Queue[str] = queue.Queue()
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["result"] = fn(messages.put)
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = e

    thread = threading.Thread(target=work, daemon=True, name=name)
    thread.start()
    while thread.is_alive():
        thread.join(poll_s)
        while not messages.empty():
            msg = messages.get()
            if on_progress is not None:
                on_progress(msg)
            yield msg
    while on_progress is not None and not messages.empty():
        on_progress(messages.get())
    if "error" in box:
        raise box["error"]
    yield (box.get("result"),)


def loading(
    fn: Callable[[Callable[[str], None]], Any],
    frame: Callable[[str], Any],
    on_progress: Callable[[str], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    name: str = "specviz-load",
) -> Generator[Any, None, Any]:
    """A handler's loading loop: run ``fn(report)`` in a thread (:func:`in_thread`), yield
    ``frame(message)`` for each progress message, and return ``fn``'s result (``x = yield from
    loading(...)``), or :data:`STOPPED` as soon as ``should_stop()`` is true after a message."""
    for item in in_thread(fn, on_progress, name=name):
        if isinstance(item, tuple):
            return item[0]
        yield frame(item)
        if should_stop is not None and should_stop():
            return STOPPED
    raise AssertionError("in_thread ends with the result")  # pragma: no cover


class LoadProgress:
    """The cold start's status line: what is loading, which model of how many, and for how long."""

    def __init__(self, models: int) -> None:
        self._clock = time.perf_counter
        self.t0, self.models, self.ready = self._clock(), max(1, models), 0

    def line(self, msg: str) -> str:
        if msg.endswith(" ready"):
            self.ready += 1
        at = min(self.ready + (not msg.endswith(" ready")), self.models)
        return f"Model {at} of {self.models}: {msg} ({self._clock() - self.t0:.0f} s)"


class Every:
    """A redraw throttle: ``due()`` is true at most once per ``seconds`` (or when forced), and
    then starts the next interval."""

    def __init__(self, seconds: float) -> None:
        self.seconds, self.last = seconds, 0.0

    def due(self, force: bool = False) -> bool:
        now = time.perf_counter()
        if force or now - self.last >= self.seconds:
            self.last = now
            return True
        return False
