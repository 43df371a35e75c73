"""CSS for the lesson pieces (speedup card, step phases, race, phone width, the τ label), as text.

The app's stylesheet is assembled by the UI; it appends :func:`lesson_css` after the base sheet.
:data:`PLOT_CONFIG` is the Plotly config for pages that call Plotly themselves (the HTML report):
the toolbar only on hover, so it does not sit on a chart's title.
"""

from __future__ import annotations

from importlib import resources

__all__ = ["PLOT_CONFIG", "lesson_css"]

PLOT_CONFIG = {"displayModeBar": "hover", "displaylogo": False, "responsive": True}


def lesson_css() -> str:
    """The text of specviz/viz/assets/lesson.css."""
    return (resources.files("specviz.viz") / "assets" / "lesson.css").read_text(encoding="utf-8")
