"""One palette for token markup, legend, CSS and every chart, so a colour means one thing.

green = accepted draft, amber = correction resampled after a rejection (and the residual it is
drawn from), violet = bonus token, slate = target-only token, red = rejected draft;
indigo = the target's p (and its verify pass), teal = the draft's q (and its drafting time).
"""

from __future__ import annotations

COLORS = {
    "accepted": "#16a34a",
    "resampled": "#d97706",
    "bonus": "#7c3aed",
    "target": "#64748b",
    "rejected": "#dc2626",
    "discarded": "#f87171",
    "p": "#4f46e5",
    "q": "#0d9488",
    "residual": "#d97706",
    "draft_ms": "#0d9488",
    "verify_ms": "#4f46e5",
    "other_ms": "#cbd5e1",
    "ink": "#64748b",  # chart text: mid slate, readable on the light and the dark theme
    "muted": "#94a3b8",
    "grid": "rgba(148, 163, 184, 0.28)",
    "track": "#e5e7eb",  # the empty part of a progress bar
}

# What each token kind is called in the legend, tooltips and charts.
KIND_LABELS = {
    "accepted": "accepted draft",
    "resampled": "resampled correction",
    "bonus": "bonus token",
    "target": "target-only token",
    "rejected": "rejected draft",
    "discarded": "discarded draft",
}

FONT = "Inter, ui-sans-serif, system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif"
MONO = "ui-monospace, 'JetBrains Mono', 'SFMono-Regular', Menlo, Consolas, monospace"
