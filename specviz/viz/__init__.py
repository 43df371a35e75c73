"""Pure renderers for the app: token HTML and Plotly figures built from records (no Gradio).

Every function here takes plain records (StepRecord, Stats) and returns an HTML string or a
``plotly.graph_objects.Figure`` (the per-step figures also as plain dicts, ``f.spec(...)``, and
their JSON, :func:`figure_json`), so it is tested without a server and reused by notebooks.
"""

from .figures import (
    acceptance_by_position_figure,
    empty_figure,
    figure_json,
    timeline_figure,
    tokens_per_step_figure,
    topk_figure,
)
from .theme import COLORS, KIND_LABELS
from .tokens import (
    DRAFT_COLUMNS,
    default_position,
    draft_table_html,
    draft_table_rows,
    legend_html,
    message_html,
    metrics_html,
    position_choices,
    step_summary,
    step_summary_text,
    token_label,
    tokens_html,
)

__all__ = [
    "COLORS", "DRAFT_COLUMNS", "KIND_LABELS", "acceptance_by_position_figure", "default_position",
    "draft_table_html", "draft_table_rows", "empty_figure", "figure_json", "legend_html", "message_html", "metrics_html",
    "position_choices", "step_summary", "step_summary_text", "timeline_figure", "token_label", "tokens_html",
    "tokens_per_step_figure", "topk_figure",
]
