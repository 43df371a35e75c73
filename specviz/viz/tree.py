"""Plotly figures of one token-tree step: the drafted tree with its verdicts, and the step's tree
attention mask. Pure functions of a StepRecord (``record.tree``, ``record.accepted_path``).

Tree: depth left to right (the root, the last committed token, at depth 0), leaves spread top to
bottom, the accepted path drawn thick in green, rejected nodes red, nodes never tried grey, and the
correction / bonus token hanging off the last accepted node. Hover shows p, q, r (the residual's
probability when the node was tried), the acceptance probability, u, and for a node tried after
rejected siblings how much of p was left after each of those rejections.
"""

from __future__ import annotations

import html

import plotly.graph_objects as go

from ..core.records import StepRecord, TreeNode
from ..core.stepwords import step_counts
from .figures import LEGEND_BELOW, MARGIN_BELOW, _figure, empty_figure
from .numbers import Reveal
from .theme import COLORS
from .tokens import token_label, tree_rate_note

__all__ = ["chain_view", "tree_figure", "tree_layout", "tree_mask", "tree_mask_figure"]

VERDICT_COLORS = {"accepted": COLORS["accepted"], "rejected": COLORS["rejected"], "not reached": COLORS["muted"]}


def chain_view(record: StepRecord) -> StepRecord:
    """A tree step as the chain views (token markup, top-10 chart, step summary) expect it: ``k``
    becomes the length of ``record.drafts`` (the accepted path, plus the child rejected where the
    walk stopped). Chain steps come back unchanged."""
    if not record.tree:
        return record
    from dataclasses import replace

    return replace(record, k=len(record.drafts))


def tree_layout(nodes: tuple[TreeNode, ...]) -> dict[int, tuple[float, float]]:
    """Node index -> (x = depth, y = row); leaves take rows 0, 1, 2, ... in depth-first order and a
    parent sits at the mean of its children. The root is index -1 at depth 0."""
    children: dict[int, list[int]] = {-1: []}
    for nd in nodes:
        children.setdefault(nd.index, [])
        children.setdefault(nd.parent, []).append(nd.index)
    depth = {-1: 0, **{nd.index: nd.depth for nd in nodes}}
    pos: dict[int, tuple[float, float]] = {}
    next_row = [0.0]

    def place(v: int) -> float:
        kids = children.get(v, [])
        if not kids:
            y = next_row[0]
            next_row[0] += 1
        else:
            y = sum(place(c) for c in kids) / len(kids)
        pos[v] = (float(depth[v]), y)
        return y

    place(-1)
    return pos


ROW_PX = 40  # vertical room per leaf row: a label above each node clears the node one row up
LABEL_ROOM = 0.75  # rows of room above the top row, so its labels are not clipped


def _tree_frame(pos: dict[int, tuple[float, float]], last_depth: int) -> dict:
    """Height and axes of a tree figure: depth from 0 to ``last_depth`` (the deepest node, or the
    bonus / correction hanging off the path), leaf rows top to bottom with room for the labels."""
    rows = max(y for _, y in pos.values())
    return dict(height=max(260, int(ROW_PX * (rows + 1 + LABEL_ROOM)) + 112),
                xaxis=dict(title=dict(text="depth"), dtick=1, range=[-0.6, last_depth + 0.5]),
                yaxis=dict(visible=False, range=[rows + 0.5, -LABEL_ROOM]))


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


def _pending_tree(record: StepRecord, shown: Reveal) -> go.Figure:
    """The tree before its commit: every node drafted, none judged (q, and p once verified)."""
    nodes, c = record.tree, step_counts(record)
    pos = tree_layout(nodes)
    xs: list[float | None] = []
    ys: list[float | None] = []
    for nd in nodes:
        (x0, y0), (x1, y1) = pos[nd.parent], pos[nd.index]
        xs += [x0, x1, None]
        ys += [y0, y1, None]
    hover = [f"<b>{html.escape(token_label(nd.text))}</b> (node {nd.index}, depth {nd.depth})<br>q = {_fmt(nd.q)}"
             + (f"  p = {_fmt(nd.p)}" if shown.p else "") for nd in nodes]
    traces = [dict(type="scatter", x=xs, y=ys, mode="lines", hoverinfo="skip", showlegend=False,
                   line=dict(color=COLORS["grid"], width=1.5)),
              dict(type="scatter", mode="markers+text", name="drafted", x=[pos[nd.index][0] for nd in nodes],
                   y=[pos[nd.index][1] for nd in nodes], text=[html.escape(_short(token_label(nd.text))) for nd in nodes],
                   textposition="top center", cliponaxis=False, marker=dict(color=COLORS["q"], size=14, line=dict(width=1, color="white")),
                   hovertext=hover, hoverinfo="text"),
              dict(type="scatter", mode="markers+text", name="root", x=[0.0], y=[pos[-1][1]], text=["root"],
                   textposition="middle left", cliponaxis=False, marker=dict(color=COLORS["target"], size=12, symbol="square"),
                   hoverinfo="skip", showlegend=False)]
    title = (f"Step {record.index + 1}: {c.nodes_drafted} tree nodes drafted (depth {c.depth}); "
             + ("scored by one target pass, not judged yet" if shown.p else "not scored yet"))
    return _figure(traces, title, **_tree_frame(pos, c.depth))


def tree_figure(record: StepRecord, title: str | None = None, shown: Reveal | None = None) -> go.Figure:
    """The step's tree: nodes by depth, accepted path highlighted, verdict colours, hover numbers
    (``shown``: a phase before commit: the nodes only, no verdicts)."""
    nodes = record.tree
    if shown is not None and nodes:
        return _pending_tree(record, shown)
    title = title or f"Step {record.index + 1}: {tree_rate_note(step_counts(record))}"
    if not nodes:
        return empty_figure(title, "This step drafted no tree")
    greedy = all(nd.u is None for nd in nodes)
    pos = tree_layout(nodes)
    on_path = set(record.accepted_path)
    traces: list[dict] = []
    for accepted in (False, True):  # grey edges first, the accepted path on top
        xs: list[float | None] = []
        ys: list[float | None] = []
        for nd in nodes:
            if (nd.index in on_path) == accepted:
                (x0, y0), (x1, y1) = pos[nd.parent], pos[nd.index]
                xs += [x0, x1, None]
                ys += [y0, y1, None]
        traces.append(dict(type="scatter", x=xs, y=ys, mode="lines", hoverinfo="skip", showlegend=False,
                           line=dict(color=COLORS["accepted"] if accepted else COLORS["grid"], width=4 if accepted else 1.5)))
    # the next token: correction (amber) or bonus (violet) below the last accepted node
    last = record.accepted_path[-1] if record.accepted_path else -1
    lx, ly = pos[last]
    kind = record.next_kind if record.next_kind in ("resampled", "bonus") else "target"
    traces.append(dict(type="scatter", x=[lx, lx + 1], y=[ly, ly], mode="lines", hoverinfo="skip", showlegend=False,
                       line=dict(color=COLORS[kind], width=2, dash="dot")))
    for verdict, color in VERDICT_COLORS.items():
        group = [nd for nd in nodes if nd.verdict == verdict]
        if not group:
            continue
        traces.append(dict(
            type="scatter", mode="markers+text", name=verdict,
            x=[pos[nd.index][0] for nd in group], y=[pos[nd.index][1] for nd in group],
            text=[html.escape(_short(token_label(nd.text))) for nd in group], textposition="top center", cliponaxis=False,
            marker=dict(color=color, size=14, line=dict(width=1, color="white")),
            hovertext=[_hover(nd, nodes, greedy) for nd in group], hoverinfo="text",
        ))
    traces.append(dict(type="scatter", mode="markers+text", name="root", x=[0.0], y=[pos[-1][1]], text=["root"],
                       textposition="middle left", cliponaxis=False, marker=dict(color=COLORS["target"], size=12, symbol="square"),
                       hovertext=["the last committed token: every node sees the context and its ancestors"],
                       hoverinfo="text", showlegend=False))
    residual = ""
    if record.top_residual:
        residual = "<br>drawn from the residual: " + ", ".join(
            f"{html.escape(token_label(t))} {v:.2f}" for _, t, v in record.top_residual[:5])
    traces.append(dict(
        type="scatter", mode="markers+text", name="resampled" if kind == "resampled" else kind,
        x=[lx + 1], y=[ly], text=[html.escape(_short(token_label(record.next_token_text)))], textposition="top center", cliponaxis=False,
        marker=dict(color=COLORS[kind], size=14, symbol="diamond"),
        hovertext=[f"<b>{html.escape(token_label(record.next_token_text))}</b>: {kind} token, p = {record.next_p:.3g}{residual}"],
        hoverinfo="text",
    ))
    frame = _tree_frame(pos, max(max(nd.depth for nd in nodes), int(lx) + 1))
    frame["height"] += MARGIN_BELOW - 48  # the legend under the depth axis (a phone wraps it onto two rows)
    return _figure(traces, title, legend=LEGEND_BELOW, margin=dict(b=MARGIN_BELOW), **frame)


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
