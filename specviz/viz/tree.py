"""Plotly figures of one token-tree step: the drafted tree with its verdicts, and the step's tree
attention mask. Pure functions of a StepRecord (``record.tree``, ``record.accepted_path``).

Tree: depth left to right (the root, the last committed token, at depth 0), one row per node top
to bottom (depth first, siblings in drafting order) with its label to its right, so no label meets
another at any width; the accepted path drawn thick in green, rejected nodes red, nodes never
tried grey, and the correction / bonus token as the last child of the last accepted node. Hover
shows p, q, r (the residual's probability when the node was tried), the acceptance probability, u,
and for a node tried after rejected siblings how much of p was left after each of those rejections.
"""

from __future__ import annotations

import html
import unicodedata

import plotly.graph_objects as go

from ..core.records import StepRecord, TreeNode
from ..core.stepwords import step_counts
from .figures import _BR, LEGEND_BELOW, MARGIN_BELOW, _figure, empty_figure
from .numbers import Reveal
from .theme import COLORS
from .tokens import token_label, tree_rate_note

__all__ = ["NEXT", "chain_view", "label_boxes", "tree_figure", "tree_layout", "tree_mask", "tree_mask_figure"]

VERDICT_COLORS = {"accepted": COLORS["accepted"], "rejected": COLORS["rejected"], "not reached": COLORS["muted"]}


def chain_view(record: StepRecord) -> StepRecord:
    """A tree step as the chain views (token markup, top-10 chart, step summary) expect it: ``k``
    becomes the length of ``record.drafts`` (the accepted path, plus the child rejected where the
    walk stopped). Chain steps come back unchanged."""
    if not record.tree:
        return record
    from dataclasses import replace

    return replace(record, k=len(record.drafts))


NEXT = -2  # the layout's key for the next token (the correction or the bonus)


def tree_layout(nodes: tuple[TreeNode, ...], next_after: int | None = None) -> dict[int, tuple[float, float]]:
    """Node index -> (x = depth, y = row). One row per node, depth first: the root (index -1) on
    row 0 at depth 0, each node on the row under its parent's earlier subtrees, siblings in the
    order they were drafted (and tried). With ``next_after``, the next token (key ``NEXT``) is the
    last child of that node: a correction on the row after its rejected siblings, a bonus after
    the node. No two nodes share a row, so a label written to the right of its node never meets
    another label or node, however narrow the picture."""
    children: dict[int, list[int]] = {-1: []}
    for nd in nodes:
        children.setdefault(nd.index, [])
        children.setdefault(nd.parent, []).append(nd.index)
    depth = {-1: 0, **{nd.index: nd.depth for nd in nodes}}
    if next_after is not None:
        children.setdefault(next_after, []).append(NEXT)
        depth[NEXT] = depth[next_after] + 1
    pos: dict[int, tuple[float, float]] = {}
    stack = [-1]
    while stack:  # preorder, children in drafting order
        v = stack.pop()
        pos[v] = (float(depth[v]), float(len(pos)))
        stack.extend(reversed(children.get(v, [])))
    return pos


ROW_PX = 28  # vertical room per row: a label (11 px type) and a node (14 px) with room to spare
LABEL_ROOM = 0.5  # rows of room above the top row and under the bottom one
MARKER_PX = 14
FONT_PX = 11  # the figures' type size (figures._spec)
LABEL_GAP_PX = 4  # between a node's edge and its label
MIN_WIDTH_PX = 300  # the narrowest the tree's plot is drawn (lesson_view: gr.Plot(min_width=300))
_LEFT_PX, _RIGHT_PX = 48, 16  # figures._spec's side margins
X_PAD = 0.35  # depth units left of the root and right of the deepest node


def label_px(text: str) -> float:
    """A generous width of ``text`` in the figures' type (checked against Chromium's DejaVu Sans,
    wider than Inter): wide (CJK, emoji) characters and @ % M W m w a little over an em, other
    capitals 0.85 em, the rest 0.66 em."""
    w = 0.0
    for ch in text:
        if unicodedata.east_asian_width(ch) in "WF" or ord(ch) > 0xFFFF or ch in "@%MWmw":
            w += 1.05
        elif ch.isupper() or ch == "…":
            w += 0.85
        else:
            w += 0.66
    return w * FONT_PX


def _right_margin(labels: dict[int, str], pos: dict[int, tuple[float, float]], x0: float, x1: float,
                  width: int = MIN_WIDTH_PX) -> int:
    """The right margin (px) that keeps every label inside a picture ``width`` px wide: the labels
    run to the right of their nodes, the deepest ones past the last depth into the margin."""
    right = _RIGHT_PX
    for _ in range(4):  # a wider margin narrows the plot; settles in two or three rounds
        plot = width - _LEFT_PX - right
        need = max(MARKER_PX / 2 + LABEL_GAP_PX + label_px(text) - (x1 - pos[i][0]) * plot / (x1 - x0)
                   for i, text in labels.items())
        new = max(_RIGHT_PX, int(need) + 4)
        if new <= right:
            break
        right = new
    return right


def _tree_frame(pos: dict[int, tuple[float, float]], last_depth: int, labels: dict[int, str]) -> dict:
    """Height, margins and axes of a tree figure: depth from 0 to ``last_depth`` (the deepest
    node, or the bonus / correction hanging off the path) with no tick past it, a row per node top
    to bottom, and a right margin wide enough for the deepest labels."""
    rows = max(y for _, y in pos.values()) + 1
    x0, x1 = -X_PAD, last_depth + X_PAD
    return dict(height=max(260, int(ROW_PX * (rows + 2 * LABEL_ROOM - 1)) + 112),
                margin=dict(r=_right_margin(labels, pos, x0, x1)),
                xaxis=dict(title=dict(text="depth"), dtick=1, range=[x0, x1]),
                yaxis=dict(visible=False, range=[rows - 1 + LABEL_ROOM, -LABEL_ROOM]))


def label_boxes(fig: dict | go.Figure, width: int) -> list[tuple[str, tuple[float, float, float, float]]]:
    """Every text label and node marker of a tree figure drawn ``width`` px wide, as (what, (left,
    top, right, bottom)) in px from the figure's top left corner: what is "label:TEXT" or
    "node". The geometry the layout is sized by, for checking that nothing overlaps."""
    spec = fig.to_plotly_json() if isinstance(fig, go.Figure) else fig
    lay = spec["layout"]
    m = lay["margin"]
    (x0, x1), (yb, yt) = lay["xaxis"]["range"], lay["yaxis"]["range"]
    pw, ph = width - m["l"] - m["r"], lay["height"] - m["t"] - m["b"]
    boxes = []
    for tr in spec["data"]:
        mode = tr.get("mode") or ""
        if "markers" not in mode:
            continue
        for j, (x, y) in enumerate(zip(tr["x"], tr["y"])):
            if x is None:
                continue
            px, py = m["l"] + (x - x0) / (x1 - x0) * pw, m["t"] + (y - yt) / (yb - yt) * ph
            r = MARKER_PX / 2
            boxes.append(("node", (px - r, py - r, px + r, py + r)))
            if "text" in mode:
                text = html.unescape(tr["text"][j])
                w, h = label_px(text), FONT_PX * 1.3
                where = tr.get("textposition", "middle center")
                left = (px + r + LABEL_GAP_PX if where.endswith("right") else px - r - LABEL_GAP_PX - w
                        if where.endswith("left") else px - w / 2)
                top = py - r - h if where.startswith("top") else py + r if where.startswith("bottom") else py - h / 2
                boxes.append((f"label:{text}", (left, top, left + w, top + h)))
    return boxes


def _short(label: str, width: int = 10) -> str:
    """A token's label on the picture, cut to ``width`` characters (the hover has it whole)."""
    return label if len(label) <= width else label[: width - 1] + "…"


def _fmt(v: float | None, digits: int = 3) -> str:
    return "–" if v is None else f"{v:.{digits}g}"


def _hover(nd: TreeNode, nodes: tuple[TreeNode, ...], greedy: bool) -> str:
    lines = [
        f"<b>{html.escape(token_label(nd.text))}</b> (node {nd.index}, depth {nd.depth}): {nd.verdict}",
        f"p = {_fmt(nd.p)}  q = {_fmt(nd.q)}",
    ]
    if greedy:
        lines.append("greedy: kept iff it is argmax p")
    elif nd.ratio is not None:
        lines.append(f"r(x) = {_fmt(nd.r)}  accept prob = {_fmt(nd.ratio)}  u = {_fmt(nd.u)}")
    before = [s for s in nodes if s.parent == nd.parent and s.index < nd.index and s.verdict == "rejected"]
    if before and nd.ratio is not None and not greedy:
        lines.append("p left after each rejected sibling: " + ", ".join(
            f"{html.escape(token_label(s.text))} → {_fmt(s.residual_mass)}" for s in before))
    if nd.residual_mass is not None:
        lines.append(f"after its rejection {_fmt(nd.residual_mass)} of p is left")
    return "<br>".join(lines)


def _elbows(pos: dict[int, tuple[float, float]], pairs: list[tuple[int, int]]) -> tuple[list, list]:
    """Edges parent -> child as elbows (down the parent's depth, then across to the child), so an
    edge never runs through a label written to the right of a node."""
    xs: list[float | None] = []
    ys: list[float | None] = []
    for a, b in pairs:
        (x0, y0), (x1, y1) = pos[a], pos[b]
        xs += [x0, x0, x1, None]
        ys += [y0, y1, y1, None]
    return xs, ys


def _label(text: str) -> str:
    return html.escape(_short(token_label(text)))


def _root_trace(hover: str | None) -> dict:
    return dict(type="scatter", mode="markers+text", name="root", x=[0.0], y=[0.0], text=["root"],
                textposition="middle right", cliponaxis=False, marker=dict(color=COLORS["target"], size=12, symbol="square"),
                hovertext=[hover] if hover else None, hoverinfo="text" if hover else "skip", showlegend=False)


def _pending_tree(record: StepRecord, shown: Reveal) -> go.Figure:
    """The tree before its commit: every node drafted, none judged (q, and p once verified)."""
    nodes, c = record.tree, step_counts(record)
    pos = tree_layout(nodes)
    xs, ys = _elbows(pos, [(nd.parent, nd.index) for nd in nodes])
    hover = [f"<b>{html.escape(token_label(nd.text))}</b> (node {nd.index}, depth {nd.depth})<br>q = {_fmt(nd.q)}"
             + (f"  p = {_fmt(nd.p)}" if shown.p else "") for nd in nodes]
    traces = [dict(type="scatter", x=xs, y=ys, mode="lines", hoverinfo="skip", showlegend=False,
                   line=dict(color=COLORS["grid"], width=1.5)),
              dict(type="scatter", mode="markers+text", name="drafted", x=[pos[nd.index][0] for nd in nodes],
                   y=[pos[nd.index][1] for nd in nodes], text=[_label(nd.text) for nd in nodes],
                   textposition="middle right", cliponaxis=False, marker=dict(color=COLORS["q"], size=MARKER_PX, line=dict(width=1, color="white")),
                   hovertext=hover, hoverinfo="text"),
              _root_trace(None)]
    title = (f"Step {record.index + 1}: {c.nodes_drafted} tree nodes drafted (depth {c.depth}){_BR}"
             + ("scored by one target pass, not judged yet" if shown.p else "not scored yet") + "</span>")
    labels = {-1: "root", **{nd.index: _short(token_label(nd.text)) for nd in nodes}}
    return _figure(traces, title, **_tree_frame(pos, c.depth, labels))


def tree_figure(record: StepRecord, title: str | None = None, shown: Reveal | None = None) -> go.Figure:
    """The step's tree: nodes by depth, one row each, accepted path highlighted, verdict colours,
    hover numbers, the correction or bonus as the last child of the last accepted node
    (``shown``: a phase before commit: the nodes only, no verdicts)."""
    nodes = record.tree
    if shown is not None and nodes:
        return _pending_tree(record, shown)
    if title is None:  # two lines, each narrower than a phone
        head, _, tail = tree_rate_note(step_counts(record)).partition(" (")
        title = f"Step {record.index + 1}: {head}" + (f"{_BR}({tail}</span>" if tail else "")
    if not nodes:
        return empty_figure(title, "This step drafted no tree")
    greedy = all(nd.u is None for nd in nodes)
    last = record.accepted_path[-1] if record.accepted_path else -1
    pos = tree_layout(nodes, next_after=last)
    on_path = set(record.accepted_path)
    traces: list[dict] = []
    for accepted in (False, True):  # grey edges first, the accepted path on top
        xs, ys = _elbows(pos, [(nd.parent, nd.index) for nd in nodes if (nd.index in on_path) == accepted])
        traces.append(dict(type="scatter", x=xs, y=ys, mode="lines", hoverinfo="skip", showlegend=False,
                           line=dict(color=COLORS["accepted"] if accepted else COLORS["grid"], width=4 if accepted else 1.5)))
    # the next token: correction (amber) or bonus (violet), the last child of the last accepted node
    kind = record.next_kind if record.next_kind in ("resampled", "bonus") else "target"
    xs, ys = _elbows(pos, [(last, NEXT)])
    traces.append(dict(type="scatter", x=xs, y=ys, mode="lines", hoverinfo="skip", showlegend=False,
                       line=dict(color=COLORS[kind], width=2, dash="dot")))
    for verdict, color in VERDICT_COLORS.items():
        group = [nd for nd in nodes if nd.verdict == verdict]
        if not group:
            continue
        traces.append(dict(
            type="scatter", mode="markers+text", name=verdict,
            x=[pos[nd.index][0] for nd in group], y=[pos[nd.index][1] for nd in group],
            text=[_label(nd.text) for nd in group], textposition="middle right", cliponaxis=False,
            marker=dict(color=color, size=MARKER_PX, line=dict(width=1, color="white")),
            hovertext=[_hover(nd, nodes, greedy) for nd in group], hoverinfo="text",
        ))
    traces.append(_root_trace("the last committed token: every node sees the context and its ancestors"))
    residual = ""
    if record.top_residual:
        residual = "<br>drawn from the residual: " + ", ".join(
            f"{html.escape(token_label(t))} {v:.2f}" for _, t, v in record.top_residual[:5])
    nx, ny = pos[NEXT]
    traces.append(dict(
        type="scatter", mode="markers+text", name="resampled" if kind == "resampled" else kind,
        x=[nx], y=[ny], text=[_label(record.next_token_text)], textposition="middle right", cliponaxis=False,
        marker=dict(color=COLORS[kind], size=MARKER_PX, symbol="diamond"),
        hovertext=[f"<b>{html.escape(token_label(record.next_token_text))}</b>: {kind} token, p = {record.next_p:.3g}{residual}"],
        hoverinfo="text",
    ))
    labels = {-1: "root", NEXT: _short(token_label(record.next_token_text)),
              **{nd.index: _short(token_label(nd.text)) for nd in nodes}}
    frame = _tree_frame(pos, int(max(x for x, _ in pos.values())), labels)
    frame["height"] += MARGIN_BELOW - 48  # the legend under the depth axis (a phone wraps it onto two rows)
    frame["margin"]["b"] = MARGIN_BELOW
    return _figure(traces, title, legend=LEGEND_BELOW, **frame)


def tree_mask(record: StepRecord) -> list[list[bool]]:
    """The step's tree attention among [root, node_0..node_{n-1}]: row i sees column j iff j is i
    itself or an ancestor (the root is everyone's ancestor). Context columns, all visible, left out."""
    n = len(record.tree)
    sees = [[False] * (n + 1) for _ in range(n + 1)]
    sees[0][0] = True
    for nd in record.tree:
        row = sees[nd.index + 1]
        row[nd.index + 1] = True
        for j, v in enumerate(sees[nd.parent + 1]):
            row[j] = row[j] or v
    return sees


MASK_KEY = (("masked", "rgba(148,163,184,0.12)"), ("sees it", COLORS["p"]), ("sees it, on the accepted path", COLORS["accepted"]))


def tree_mask_figure(record: StepRecord, title: str | None = None) -> go.Figure:
    """The attention mask of the step's verify pass as a heatmap (rows: queries, columns: keys):
    a first column for the committed context (every query sees all of it), then the root and the
    nodes; a colour key in the legend."""
    title = title or "Tree attention mask (each node sees the context, the root and its ancestors)"
    if not record.tree:
        return empty_figure(title, "This step drafted no tree")
    labels = ["root"] + [f"{nd.index}:{_short(token_label(nd.text))}" for nd in record.tree]
    columns = ["context"] + labels
    on_path = {0} | {i + 1 for i in record.accepted_path}
    mask = tree_mask(record)
    z = [[2 if i in on_path else 1] + [(2 if (i in on_path and v) else 1) if v else 0 for v in row]
         for i, row in enumerate(mask)]  # [n + 1 queries, 1 + n + 1 keys]
    words = {0: "masked", 1: "sees it", 2: "sees it (accepted path)"}
    trace = dict(
        type="heatmap", z=z, x=columns, y=labels, zmin=0, zmax=2, showscale=False, xgap=1, ygap=1,
        colorscale=[[0, MASK_KEY[0][1]], [0.5, MASK_KEY[1][1]], [1, MASK_KEY[2][1]]],
        text=[[("the committed context: " if j == 0 else "") + words[v] for j, v in enumerate(row)] for row in z],
        hovertemplate="query %{y}<br>key %{x}: %{text}<extra></extra>",
    )
    key = [dict(type="scatter", x=[None], y=[None], mode="markers", name=name, hoverinfo="skip",
                marker=dict(symbol="square", size=11, color=color, line=dict(width=1, color=COLORS["muted"])))
           for name, color in MASK_KEY]
    size = max(280, 22 * len(labels) + 150)
    return _figure([trace, *key], title, height=size, margin=dict(t=112),
                   xaxis=dict(side="top", tickangle=-60), yaxis=dict(autorange="reversed"),
                   legend=dict(orientation="h", x=0, xanchor="left", y=-0.02, yanchor="top", font=dict(size=10),
                               bgcolor="rgba(0,0,0,0)"))
