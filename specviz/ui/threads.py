"""Run slow work (model loading) off the Gradio handler's thread while it streams progress."""

from __future__ import annotations

import queue
import threading
from typing import Any, Callable, Iterator

__all__ = ["in_thread"]


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
