"""CSS and the keyboard script for the lesson pieces, as text for the UI to include.

- :func:`lesson_css`: speedup card, step phases, race, phone width, the τ label (appended after
  the base stylesheet);
- :func:`lesson_js`: keyboard shortcuts that click the playground's buttons by element id
  (:data:`KEYS`), ignored while typing in a field;
- :func:`keys_help_html`: the shortcuts, for a line under the buttons;
- :data:`PLOT_CONFIG`: the Plotly config for pages that call Plotly themselves (the HTML report):
  the toolbar only on hover, so it does not sit on a chart's title.
"""

from __future__ import annotations

import html
import json
from importlib import resources

__all__ = ["KEYS", "PLOT_CONFIG", "keys_help_html", "lesson_css", "lesson_js"]

PLOT_CONFIG = {"displayModeBar": "hover", "displaylogo": False, "responsive": True}

# key (as KeyboardEvent.key, "Shift+" for shifted arrows) -> (element ids to try in order, what it does).
# The first id whose button is visible and enabled is clicked (Space: Play, else Pause).
KEYS: dict[str, tuple[tuple[str, ...], str]] = {
    "ArrowLeft": (("sv-prev-step",), "previous step"),
    "ArrowRight": (("sv-next-step",), "next step"),
    "Shift+ArrowLeft": (("sv-prev-rejection",), "previous rejection"),
    "Shift+ArrowRight": (("sv-next-rejection",), "next rejection"),
    "[": (("sv-prev-rejection",), "previous rejection"),
    "]": (("sv-next-rejection",), "next rejection"),
    ",": (("sv-prev-phase",), "previous phase (draft, verify, decide, commit)"),
    ".": (("sv-next-phase",), "next phase"),
    "s": (("sv-step-btn",), "run one more step"),
    " ": (("sv-play-btn", "sv-pause-btn"), "play / pause"),
}

_JS = """() => {
  if (window.__svLessonKeys) return;
  window.__svLessonKeys = true;
  const KEYS = %s;
  const usable = (id) => {
    const el = document.getElementById(id);
    const btn = el && (el.tagName === "BUTTON" ? el : el.querySelector("button"));
    return btn && !btn.disabled && btn.offsetParent !== null ? btn : null;
  };
  document.addEventListener("keydown", (e) => {
    const t = e.target;
    if (e.ctrlKey || e.metaKey || e.altKey || e.isComposing) return;
    if (t && (t.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(t.tagName))) return;  // typing
    if (t && t.tagName === "BUTTON" && e.key === " ") return;  // Space on a focused button clicks it
    const key = (e.shiftKey && e.key.startsWith("Arrow") ? "Shift+" : "") + e.key;
    const ids = KEYS[key];
    if (!ids) return;
    for (const id of ids) {
      const btn = usable(id);
      if (btn) { e.preventDefault(); btn.click(); return; }
    }
  });
}"""


def lesson_css() -> str:
    """The text of specviz/viz/assets/lesson.css."""
    return (resources.files("specviz.viz") / "assets" / "lesson.css").read_text(encoding="utf-8")


def lesson_js() -> str:
    """A JS function (for Gradio's ``js=``/``head``) that installs the keyboard shortcuts once."""
    return _JS % json.dumps({k: list(ids) for k, (ids, _what) in KEYS.items()})


def keys_help_html() -> str:
    """One muted line listing the shortcuts."""
    names = {"ArrowLeft": "←", "ArrowRight": "→", "Shift+ArrowLeft": "⇧←", "Shift+ArrowRight": "⇧→", " ": "Space"}
    seen, parts = set(), []
    for key, (_ids, what) in KEYS.items():
        if what in seen:
            continue
        seen.add(what)
        keys = " / ".join(f"<kbd>{html.escape(names.get(k, k))}</kbd>" for k, (_i, w) in KEYS.items() if w == what)
        parts.append(f"{keys} {html.escape(what)}")
    return f'<div class="sv-keys sv-muted">{" · ".join(parts)}</div>'
