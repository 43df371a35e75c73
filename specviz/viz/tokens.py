"""Token HTML, legend, metric cards and the draft table: pure functions of records (no Gradio).

Every token text goes through :func:`html.escape`, so a token such as ``<script>`` shows as text.
Whitespace stays readable: spaces are kept (the view uses ``white-space: pre-wrap``), a newline
shows a faint ``↵`` and then breaks the line, tabs and control characters get visible glyphs.

Markup contract (used by the CSS in ``specviz/assets/style.css``, the app's click handler and the
browser tests): every token is a ``<span class="tok tok-KIND">`` with ``data-step`` (0-based step
index), ``data-pos`` (position within the step) and ``data-tip`` (the tooltip text: p, q,
min(1, p/q), u and the verdict). KIND is one of accepted, resampled, bonus, target (committed) or
rejected, discarded (struck through, not part of the text).
"""

from __future__ import annotations

import html
import unicodedata
from typing import Sequence

from ..core.records import DraftDecision, Stats, StepRecord, TreeNode
from ..core.stepwords import StepCounts, run_counts, step_counts
from .labels import GLYPHS, token_label
from .numbers import Reveal, decision_cell, decision_line, draft_columns, fmt_pair, fmt_prob, ratio_note, rule_of
from .theme import COLORS, KIND_LABELS

__all__ = [
    "DRAFT_COLUMNS", "draft_table_html", "draft_table_rows", "is_greedy", "legend_html", "metrics_html", "message_html",
    "position_choices", "default_position", "token_label", "tokens_html", "step_summary", "step_summary_text",
    "phase_summary_text", "tree_rate_note",
]


# -- token text (labels: specviz.viz.labels) ---------------------------------------------------


def _token_inner(text: str) -> str:
    """Token text -> HTML for the flowing text view (escaped, whitespace visible but natural)."""
    if text == "":
        return '<span class="ws">∅</span>'
    out = []
    for ch in text:
        if ch == "\n":
            out.append('<span class="ws">↵</span>\n')
        elif ch == "\t":
            out.append('<span class="ws">⇥</span>\t')
        elif ch == "\r":
            out.append('<span class="ws">␍</span>')
        elif ch != " " and unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp"):
            code = f"\\x{ord(ch):02x}" if ord(ch) < 256 else f"\\u{ord(ch):04x}"
            out.append(f'<span class="ws">{code}</span>')
        else:
            out.append(html.escape(ch))
    inner = "".join(out)
    if text.strip(" ") == "":  # a token of only spaces: a faint ␣ per space, as the tables and charts write it
        inner = f'<span class="ws">{GLYPHS[" "] * len(text)}</span>'
    return inner


def _fmt(x: float | None) -> str:
    return fmt_prob(x)  # significant figures, never "0.000" (see viz.numbers)


def is_greedy(record: StepRecord) -> bool:
    """Greedy steps draw no u: every judged draft has ``u is None`` (the typical rule draws none
    either, but compares p with a threshold)."""
    judged = [d for d in record.drafts if d.verdict != "discarded"]
    return record.rule == "exact" and bool(judged) and all(d.u is None for d in judged)


def is_typical(record: StepRecord) -> bool:
    """Judged by LOSSY typical acceptance (p(x) > min(eps, delta * exp(-H(p))), argmax p after a rejection)."""
    return record.rule == "typical"


def _real_ratio(d: DraftDecision) -> float:
    return min(1.0, d.p / d.q) if d.q > 0 else 1.0


def _draft_tip(record: StepRecord, d: DraftDecision, greedy: bool) -> str:
    mark = {"accepted": "✓ accepted", "rejected": "✗ rejected", "discarded": "– discarded"}[d.verdict]
    lines = [
        f"step {record.index + 1} · draft {d.position + 1} of {record.k} · {mark}",
        f"token {token_label(d.text)!r}  (id {d.token_id})",
        f"p = {_fmt(d.p)}   q = {_fmt(d.q)}   min(1, p/q) = {_fmt(_real_ratio(d))}{ratio_note(rule_of(record))}",
        decision_line(record, d),
    ]
    return "\n".join(lines)


def _residual_of(record: StepRecord, token_id: int) -> float | None:
    for tid, _text, prob in record.top_residual:
        if tid == token_id:
            return prob
    return None


def _next_tip(record: StepRecord, greedy: bool) -> str:
    label = repr(token_label(record.next_token_text))
    head = f"step {record.index + 1} · "
    if record.next_kind == "resampled":
        rejected = record.n_accepted + 1
        if greedy:
            how = "greedy correction: argmax p at the rejected position"
        else:
            how = "sampled from the residual norm(max(0, p − q))"
        lines = [head + f"correction after draft {rejected} was rejected", f"token {label}  (id {record.next_token_id})", how]
        r = _residual_of(record, record.next_token_id)
        lines.append(f"p = {_fmt(record.next_p)}" + (f"   residual = {_fmt(r)}" if r is not None else ""))
    elif record.next_kind == "bonus":
        lines = [
            head + f"bonus token: {_all_accepted(record.k)}",
            f"token {label}  (id {record.next_token_id})",
            ("argmax p" if greedy else "sampled from p") + f" at position {record.k + 1}",
            f"p = {_fmt(record.next_p)}",
        ]
    else:
        lines = [
            head + "target-only token (nothing drafted)",
            f"token {label}  (id {record.next_token_id})",
            f"p = {_fmt(record.next_p)}",
        ]
    return "\n".join(lines)


def _span(kind: str, text: str, step: int, pos: int, tip: str) -> str:
    return (
        f'<span class="tok tok-{kind}" data-step="{step}" data-pos="{pos}" '
        f'data-tip="{html.escape(tip, quote=True)}">{_token_inner(text)}</span>'
    )


def pending_tip(record: StepRecord, d: DraftDecision, shown: Reveal) -> str:
    """A draft's tooltip before its verdict: q, and p once verified."""
    return f"step {record.index + 1} · draft {d.position + 1} of {record.k}: q = {_fmt(d.q)}" + (
        f", p = {_fmt(d.p)}" if shown.p else "")


def _hidden_step_html(record: StepRecord, selected: bool, shown: Reveal) -> str:
    """A step before its commit: the drafts judged so far and the pending ones (a tree: one
    pending mark; its path is not known yet)."""
    cls = "sv-step sel" if selected else "sv-step"
    if record.tree:
        tip = f"step {record.index + 1} · {len(record.tree)} tree nodes drafted; not judged yet"
        return f'<span class="{cls}" data-step="{record.index}">{_span("pending", "⋯", record.index, 0, tip)}</span>'
    greedy = is_greedy(record)
    parts = [_span(d.verdict, d.text, record.index, d.position, _draft_tip(record, d, greedy)) if d.position < shown.judged
             else _span("pending", d.text, record.index, d.position, pending_tip(record, d, shown)) for d in record.drafts]
    return f'<span class="{cls}" data-step="{record.index}">{"".join(parts)}</span>'


def rejected_siblings(record: StepRecord) -> dict[int, list[TreeNode]]:
    """A tree step's rejected nodes that its chain view leaves out, by the path position they were
    tried at (0-based): at each depth the siblings tried and rejected before the path's node was
    accepted, and where the walk stopped every rejected child but the one the chain view shows as
    its rejected draft. A chain step: {}."""
    if not record.tree:
        return {}
    path = list(record.accepted_path)
    parent_at = [-1] + path  # the node whose children were tried at position j
    stop = record.drafts[len(path)] if len(record.drafts) > len(path) else None  # the chain view's rejected draft
    out: dict[int, list[TreeNode]] = {}
    for j, parent in enumerate(parent_at):
        tried = [nd for nd in record.tree if nd.parent == parent and nd.verdict == "rejected"]
        if j == len(path) and stop is not None:
            same = next((nd for nd in tried if nd.token_id == stop.token_id), None)
            tried = [nd for nd in tried if nd is not same]
        out[j] = tried
    return {j: nds for j, nds in out.items() if nds}


def _sibling_tip(record: StepRecord, nd: TreeNode) -> str:
    return "\n".join([
        f"step {record.index + 1} · tree node {nd.index + 1}, depth {nd.depth} · ✗ rejected (a sibling, tried before the "
        "token after it)",
        f"token {token_label(nd.text)!r}  (id {nd.token_id})",
        f"p = {_fmt(nd.p)}   q = {_fmt(nd.q)}   min(1, r/q) = {_fmt(nd.ratio)}   u = {_fmt(nd.u)}",
    ])


def _siblings_html(record: StepRecord, nodes: Sequence[TreeNode], pos: int) -> list[str]:
    return [f'<span class="sv-sibling">{_span("rejected", nd.text, record.index, pos, _sibling_tip(record, nd))}</span>'
            for nd in nodes]


def _step_html(record: StepRecord, selected: bool, shown: Reveal | None = None) -> str:
    if shown is not None:
        return _hidden_step_html(record, selected, shown)
    greedy = is_greedy(record)
    n, c = record.n_accepted, record.n_committed
    siblings = rejected_siblings(record)  # a tree: the rejected siblings, struck through where they were tried
    parts: list[str] = []
    # 1. the accepted prefix (only what was committed: EOS / max tokens may cut it)
    for d in record.drafts[: min(n, c)]:
        parts += _siblings_html(record, siblings.get(d.position, ()), d.position)
        parts.append(_span("accepted", d.text, record.index, d.position, _draft_tip(record, d, greedy)))
    # 2. the rejected draft and the discarded ones after it, struck through in place
    if n < record.k and c > n:
        for d in record.drafts[n:]:
            parts.append(_span(d.verdict, d.text, record.index, d.position, _draft_tip(record, d, greedy)))
    if c > n:
        parts += _siblings_html(record, siblings.get(n, ()), n)
    # 3. the correction / bonus / target token, if it was committed
    if c > n:
        parts.append(_span(record.next_kind, record.next_token_text, record.index, n, _next_tip(record, greedy)))
    cls = "sv-step sel" if selected else "sv-step"
    return f'<span class="{cls}" data-step="{record.index}">{"".join(parts)}</span>'


def tokens_html(
    prompt_text: str,
    steps: Sequence[StepRecord],
    selected_step: int | None = None,
    *,
    empty_hint: str = "Press <b>Step</b> to draft, verify and commit the first tokens, or <b>Play</b> to run to the end.",
    max_prompt_chars: int = 4000,
    shown: Reveal | None = None,
) -> str:
    """The prompt (muted) and every committed token coloured by how it got there, with the
    rejected drafts of each step struck through right after that step's accepted prefix (a tree
    step: every rejected sibling too, struck through before the token accepted in its place).
    ``shown``: the selected step (else the last) at a phase before its commit: only what is known."""
    prompt = prompt_text if len(prompt_text) <= max_prompt_chars else "…" + prompt_text[-max_prompt_chars:]
    prompt_html = html.escape(prompt).replace("\n", '<span class="ws">↵</span>\n')
    head = f'<div class="sv-prompt" title="the prompt">{prompt_html}</div>' if prompt_text else ""
    if not steps:
        body = f'<div class="sv-empty">{empty_hint}</div>'
    else:
        hidden = (steps[-1].index if selected_step is None else selected_step) if shown is not None else None
        body = "".join(_step_html(s, s.index == selected_step, shown if s.index == hidden else None) for s in steps)
        last = steps[-1]
        if last.finished and hidden != last.index:
            why = "end of sequence" if last.finished == "eos" else "max new tokens reached"
            body += f'<span class="sv-end" title="the run finished: {why}">■ {why}</span>'
        body = f'<div class="sv-out">{body}</div>'
    return f'<div class="sv-tokens" data-steps="{len(steps)}">{head}{body}</div>'


def legend_html() -> str:
    """Swatches for each token kind, using the same classes as the token view."""
    items = [
        ("accepted", "the draft", "accepted draft"),
        ("resampled", "fix", "resampled correction"),
        ("bonus", "extra", "bonus token"),
        ("target", "plain", "target-only"),
        ("rejected", "wrong", "rejected draft"),
        ("discarded", "later", "discarded (after a rejection)"),
    ]
    chips = "".join(
        f'<span class="sv-legend-item"><span class="tok tok-{kind}">{sample}</span>{html.escape(label)}</span>'
        for kind, sample, label in items
    )
    return f'<div class="sv-legend">{chips}<span class="sv-legend-hint">hover or tap a token for p, q, u · click it to inspect its step</span></div>'


def message_html(text: str, kind: str = "error", arrive: tuple[str, ...] = (), visit: int = 0) -> str:
    """A status box: kind is "error", "info" or "ok". The text is escaped. ``arrive``: element
    ids, the moment first, that the page scrolls into view and focuses when this message appears
    (a guided tour that has arrived; :data:`specviz.viz.scripts.ARRIVE_JS`); ``visit`` tells one
    arrival from the next (Gradio updates the status box's element in place, so the page cannot)."""
    if not text:
        return ""
    icon = {"error": "⚠", "info": "ℹ", "ok": "✓"}.get(kind, "ℹ")
    where = f' data-arrive="{html.escape(" ".join(arrive))}" data-visit="{visit}"' if arrive else ""
    return (f'<div class="sv-msg sv-msg-{kind}" role="{"alert" if kind == "error" else "status"}"{where}>'
            f'<span class="sv-msg-icon">{icon}</span><span class="sv-msg-text">{html.escape(text)}</span></div>')


# -- metrics ---------------------------------------------------------------------------------


# the label is uppercased by CSS; τ must not become "T" (a Greek capital tau)
_TAU = '<span class="sv-sym" style="text-transform:none">τ</span>'


LOSSY_TAG = ('<span class="sv-lossy-tag" title="typical acceptance: the output is not exactly the target\'s '
             'distribution">LOSSY</span>')


def _card(key: str, label: str, value: str, sub: str = "", cls: str = "") -> str:
    sub_html = f'<div class="sv-card-sub">{sub}</div>' if sub else ""
    return (
        f'<div class="sv-card {cls}" data-metric="{key}"><div class="sv-card-label">{label}</div>'
        f'<div class="sv-card-value">{value}</div>{sub_html}</div>'
    )


def metrics_html(stats: Stats | None, baseline_stats: Stats | None = None, *, engine_ms: float | None = None,
                 steps: Sequence[StepRecord] | None = None, lossy: bool | None = None) -> str:
    """Metric cards: steps, drafted, accepted, acceptance rate, tau, tokens/s, target forward
    passes vs target-only, and the speedup against ``baseline_stats`` (pass a finished
    target-only run on the same target, prompt and settings, else None). ``steps`` (the run's
    records) let a token-tree run say what its rate divides by (:func:`run_counts`). ``lossy``
    (default: any of ``steps`` judged by typical acceptance) tags every card LOSSY: each number
    is the typical rule's, not the exact rule's."""
    if lossy is None:
        lossy = any(getattr(r, "rule", "exact") == "typical" for r in steps or ())
    s = stats
    c = run_counts(steps) if steps else None
    if s is None:
        s = Stats(0, 0, 0, 0, 0.0, 0.0, (), 0.0, 0.0, 0, 0.0, 0.0, 0.0, 0.0)
    prefill_forwards = max(0, s.target_forwards - s.steps)
    plain_forwards = s.new_tokens + prefill_forwards  # target-only: one forward per token
    saved = (1 - s.target_forwards / plain_forwards) if plain_forwards and s.steps else None
    cards = [
        _card("steps", "Steps", f"{s.steps}", "target verify passes"),
        _card("drafted", "Drafted", f"{s.drafted}", "draft tokens proposed"),
        _card("accepted", "Accepted", f"{s.accepted}", "drafts kept"),
        _card("acceptance", "Acceptance rate", f"{s.acceptance_rate:.0%}" if s.drafted else "—", "accepted / drafted"),
    ]
    if c is not None and c.tree and c.depth:  # a tree: the path against the depth, as the per-position chart
        cards[1:4] = [
            _card("drafted", "Drafted", f"{c.nodes_drafted}", f"tree nodes proposed (depth {c.depth} in all)"),
            _card("accepted", "Accepted", f"{c.path_accepted}", "accepted path tokens"),
            _card("acceptance", "Acceptance rate", f"{c.rate:.0%}",
                  f"accepted path / depth; over the {c.nodes_drafted} nodes: {c.rate_over_nodes:.0%}"),
        ]
    cards += [
        _card("tau", f"Mean accept. length {_TAU}", f"{s.mean_acceptance_length:.2f}" if s.steps else "—", "tokens per step"),
        _card("tps", "Tokens / s", f"{s.tokens_per_s:.1f}" if s.steps else "—", f"{s.new_tokens} token{'' if s.new_tokens == 1 else 's'} · engine time"),
        _card(
            "forwards", "Target forwards", f"{s.target_forwards}" if s.steps else "—",
            f"vs {plain_forwards} target-only" + (f" (−{saved:.0%})" if saved and saved > 0 else ""),
        ),
    ]
    if baseline_stats is not None and baseline_stats.tokens_per_s > 0 and s.tokens_per_s > 0:
        speedup = s.tokens_per_s / baseline_stats.tokens_per_s
        cls = "sv-good" if speedup >= 1.0 else "sv-bad"
        cards.append(_card("speedup", "Speedup", f"{speedup:.2f}×", f"vs target-only {baseline_stats.tokens_per_s:.1f} tok/s", cls))
    else:
        hint = "run target-only to compare" if baseline_stats is None else "needs a speculative run"
        cards.append(_card("speedup", "Speedup", "—", hint, "sv-pending"))
    extra = f' data-engine-ms="{engine_ms:.3f}"' if engine_ms is not None else ""
    if lossy:
        extra += ' data-lossy="true"'
        cards = [c.replace('<div class="sv-card-value">', LOSSY_TAG + '<div class="sv-card-value">', 1) for c in cards]
    return f'<div class="sv-metrics"{extra}>{"".join(cards)}</div>'


# -- the step inspector ------------------------------------------------------------------------

DRAFT_COLUMNS = ["#", "token", "q(x)", "p(x)", "min(1,p/q)", "u", "verdict"]


def _pending_row(d: DraftDecision, shown: Reveal) -> list[str]:
    """A draft's row before its verdict: q, and p once verified."""
    p = _fmt(d.p) if shown.p else ""
    return [str(d.position + 1), token_label(d.text), _fmt(d.q), p, "", "", "… to verify" if not shown.p else "… to judge"]


def draft_table_rows(record: StepRecord | None, shown: Reveal | None = None) -> list[list[str]]:
    """Rows for the draft table of one step: each draft x_i (token, q, p, min(1, p/q), u,
    verdict), then the token sampled after them (correction, bonus or target-only). ``shown``
    (:func:`specviz.viz.numbers.reveal`): only what is known at a phase, no token after them."""
    if record is None:
        return []
    greedy = is_greedy(record)
    rows: list[list[str]] = []
    if shown is not None and record.tree and shown.judged == 0:  # a tree before decide: its nodes, not its path
        return [[f"{nd.index + 1}", f"{token_label(nd.text)} (depth {nd.depth})", _fmt(nd.q),
                 _fmt(nd.p) if shown.p else "", "", "", "… to verify" if not shown.p else "… to judge"] for nd in record.tree]
    for d in record.drafts:
        if shown is not None and d.position >= shown.judged:
            if not record.tree:  # a tree's pending path nodes would tell the path
                rows.append(_pending_row(d, shown))
            continue
        if d.verdict == "accepted":
            verdict = "✓ = argmax p" if greedy else "✓ accepted"
        elif d.verdict == "rejected":
            verdict = "✗ ≠ argmax p" if greedy else "✗ rejected"
        else:
            verdict = "– discarded"
        if d.accepted and d.position >= record.n_committed:
            verdict += " · cut off"
        # typical: the threshold replaces min(1, p/q); greedy: "argmax p?" replaces u (viz.numbers)
        ratio = _fmt(d.threshold) if is_typical(record) else _fmt(_real_ratio(d))
        cell = decision_cell(record, d)
        if d.u is not None and not is_typical(record) and d.verdict != "discarded":
            # u against min(1, p/q) as the chart title, the phase box and the guess print them (viz.numbers.fmt_pair):
            # two different numbers never print the same beside a verdict that tells them apart
            cell, ratio = fmt_pair(d.u, d.ratio)
        rows.append([str(d.position + 1), token_label(d.text), _fmt(d.q), _fmt(d.p), ratio, cell, verdict])
    if shown is not None:
        return rows
    how = {
        "resampled": "↻ argmax p" if greedy or is_typical(record) else "↻ resampled",
        "bonus": "★ bonus",
        "target": "target-only",
    }[record.next_kind]
    if record.n_committed <= record.n_accepted:
        how += " · cut off"
    rows.append([f"→{record.n_accepted + 1}", token_label(record.next_token_text), "", _fmt(record.next_p), "", "", how])
    return rows


def draft_table_html(record: StepRecord | None, selected_pos: int | None = None, shown: Reveal | None = None) -> str:
    """The draft table as HTML: one row per draft x_i and one for the token sampled after them,
    each row coloured by its verdict and carrying ``data-pos`` (the chart position it selects),
    each cell its column's name (``data-label``: a phone shows the rows stacked, the verdict on a line
    of its own). ``shown``: only what is known at a phase (drafts not judged yet are ``pending``)."""
    if record is None:
        return '<div class="sv-table-empty sv-muted">The drafts of the selected step appear here.</div>'
    rows = draft_table_rows(record, shown)
    kinds = [d.verdict if shown is None or d.position < shown.judged else "pending" for d in record.drafts]
    kinds += [record.next_kind] if shown is None else []
    # the row of the sampled token charts the position it was sampled at: n (rejected) or k (bonus)
    positions = [d.position for d in record.drafts] + [record.n_accepted]
    if shown is not None and record.tree and shown.judged == 0:
        kinds, positions = ["pending"] * len(rows), [0] * len(rows)
    sel = default_position(record, shown) if selected_pos is None else selected_pos
    columns = draft_columns(record)
    head = "".join(f'<th title="{html.escape(tip, quote=True)}">{html.escape(c)}</th>' for c, tip in columns)
    labels = [f' data-label="{html.escape(c, quote=True)}"' for c, _tip in columns]  # a phone stacks each row under these
    body = []
    for i, (row, kind, pos) in enumerate(zip(rows, kinds, positions)):
        last = i == len(rows) - 1
        cells = [html.escape(c) for c in row]
        cells[1] = f'<code class="tok tok-{kind}">{cells[1]}</code>'
        cells[6] = f'<span class="sv-v sv-v-{kind}">{cells[6]}</span>'
        cls = f"sv-row sv-row-{kind}" + (" sv-next" if last else "") + (" sel" if pos == sel else "")
        tds = "".join(f"<td{label}>{c}</td>" for c, label in zip(cells, labels))
        body.append(f'<tr class="{cls}" data-pos="{pos}">{tds}</tr>')
    return (
        f'<div class="sv-table-wrap"><table class="sv-table sv-drafts" data-step="{record.index}"><thead><tr>{head}</tr></thead>'
        f'<tbody>{"".join(body)}</tbody></table></div>'
    )


def position_choices(record: StepRecord | None, shown: Reveal | None = None) -> list[str]:
    """Labels for the positions of a step that have distributions to chart: each draft, and the
    bonus position when every draft was accepted (or the only position of a target-only step).
    ``shown``: the verdicts known at a phase only (no bonus position before commit)."""
    if record is None:
        return []
    marks = {"accepted": "✓", "rejected": "✗", "discarded": "–"}
    drafts = [d for d in record.drafts if shown is None or not record.tree or d.position < shown.judged]
    out = [f"{d.position + 1}: {token_label(d.text)}"
           + (f" {marks[d.verdict]}" if shown is None or d.position < shown.judged else "") for d in drafts]
    if shown is not None:
        return out
    if record.n_accepted == record.k:
        mark = "★ bonus" if record.k else "target"
        out.append(f"{record.k + 1}: {token_label(record.next_token_text)} {mark}")
    return out


def default_position(record: StepRecord | None, shown: Reveal | None = None) -> int:
    """Where the step was decided: the rejected draft, else the bonus position (before commit:
    the draft judged last, else the first)."""
    if record is None:
        return 0
    if shown is not None:
        return max(0, min(shown.judged - 1, record.k - 1))
    return record.n_accepted


def _all_accepted(n: int) -> str:
    """"all 4 drafts accepted"; one draft: "the 1 draft accepted" (never "all 1 drafts")."""
    return "the 1 draft accepted" if n == 1 else f"all {n} drafts accepted"


def tree_rate_note(c: StepCounts) -> str:
    """What a tree's acceptance divides by: "accepted path 4 of depth 4 (12 nodes drafted: the rate
    over nodes is 33%)"; a chain: "4 of 5 drafts accepted"."""
    if not c.tree:
        return f"{c.path_accepted} of {c.nodes_drafted} draft{'' if c.nodes_drafted == 1 else 's'} accepted"
    rate = f"{c.rate_over_nodes:.0%}" if c.nodes_drafted else "—"
    return (f"accepted path {c.path_accepted} of depth {c.depth} ({c.nodes_drafted} nodes drafted: "
            f"the rate over nodes is {rate})")


def step_summary_text(record: StepRecord) -> str:
    """What a step did, in words (:func:`specviz.core.stepwords.step_counts`): drafted, kept,
    rejected, and the token chosen after."""
    c = step_counts(record)
    nxt = repr(token_label(record.next_token_text))
    if c.next_kind == "target":
        return f"nothing drafted, one target-only token {nxt}"
    lossy = " (typical acceptance, LOSSY)" if c.rule == "typical" else ""
    how = "taken as argmax p" if c.next_how == "argmax p" else c.next_how
    if c.tree:
        head = tree_rate_note(c)
        if c.next_kind == "bonus":
            return f"{head}, a leaf reached + bonus token {nxt}{lossy}"
        return f"{head}, a node at depth {c.path_accepted + 1} rejected, correction {nxt} {how}{lossy}"
    if c.next_kind == "bonus":
        return f"{_all_accepted(c.nodes_drafted)} + bonus token {nxt}{lossy}"
    return f"{tree_rate_note(c)}, draft {c.path_accepted + 1} rejected, correction {nxt} {how}{lossy}"


def phase_summary_text(record: StepRecord, shown: Reveal) -> str:
    """What is known of a step before its commit (``shown``: :func:`specviz.viz.numbers.reveal`)."""
    c = step_counts(record)
    what = (f"{c.nodes_drafted} tree nodes drafted (depth {c.depth})" if c.tree
            else f"{c.nodes_drafted} draft{'s' if c.nodes_drafted != 1 else ''}")
    if not shown.p:
        return f"{what}, each with its q; the target has not scored them yet (phase ▶: verify)"
    if shown.judged == 0:
        return f"{what}; one target pass gave p at every position; none judged yet (phase ▶: decide)"
    return f"{what}; {shown.judged} judged so far, left to right (phase ▶: the next one, then commit)"


def step_summary(record: StepRecord | None, shown: Reveal | None = None) -> str:
    """One line (HTML) about a step: what was drafted, kept and sampled, and its timings
    (``shown``: only what is known at a phase before commit)."""
    if record is None:
        return '<div class="sv-step-summary sv-muted">No step yet.</div>'
    if shown is not None:
        ms = f"draft {record.draft_ms:.0f} ms" + (f" · verify {record.verify_ms:.0f} ms" if shown.p else "")
        return (f'<div class="sv-step-summary" data-phase="{shown.phase}"><b>Step {record.index + 1}</b>: '
                f'{html.escape(phase_summary_text(record, shown))}. <span class="sv-muted">{ms}</span></div>')
    ms = f"draft {record.draft_ms:.0f} ms · verify {record.verify_ms:.0f} ms · other {record.other_ms:.0f} ms"
    mapping = ""
    source = record.info.get("source")  # NGramOrDraft: which proposer drafted this step
    if source in ("ngram", "draft") and record.k:
        ms = ("drafted by the n-gram lookup (free) · " if source == "ngram" else "drafted by the draft model · ") + ms
    stopped = record.info.get("stopped")  # a confidence schedule ended the draft early
    if isinstance(stopped, dict) and "top" in stopped:
        n = stopped.get("after", record.k)
        mapping += (f'<div class="sv-muted sv-stopped">The draft stopped after {n} token{"s" if n != 1 else ""}: '
                    f'its top probability for the last one was {stopped["top"]:.2f}, under the confidence '
                    "schedule's threshold, so it drafted no further and the target decided from there.</div>")
    d_toks, t_toks = record.info.get("draft_tokens"), record.info.get("target_tokens")
    if isinstance(d_toks, list) and isinstance(t_toks, list):  # a re-tokenizing proposer
        show = lambda toks: " ".join(f"<code>{html.escape(token_label(str(t)))}</code>" for t in toks) or "∅"
        mapping += (f'<div class="sv-muted sv-mapping">draft model tokens {show(d_toks)} → re-tokenized for the '
                   f"target {show(t_toks)}</div>")
    return (
        f'<div class="sv-step-summary"><b>Step {record.index + 1}</b>: {html.escape(step_summary_text(record))}; '
        f"committed {record.n_committed} token{'s' if record.n_committed != 1 else ''}. "
        f'<span class="sv-muted">{ms}</span>{mapping}</div>'
    )


# Keep the palette importable from here too (the CSS test checks it against style.css).
PALETTE = COLORS
LABELS = KIND_LABELS
