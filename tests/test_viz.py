"""The app's pure renderers (specviz.viz) and per-session state (specviz.ui.state), no server."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from specviz import Sampling, SpeculativeDecoder, compute_stats, load_trace, viz
from specviz.core.records import DraftDecision, StepRecord
from specviz.proposers import DraftModel, NGram

ROOT = Path(__file__).resolve().parents[1]


# -- hand-made records -------------------------------------------------------------------------


def _draft(i, tid, text, q, p, u, verdict, top_q=None):
    top_p = ((tid, text, p), (99, "zz", max(0.0, 1 - p)))
    return DraftDecision(
        position=i, token_id=tid, text=text, q=q, p=p, ratio=min(1.0, p / q), u=u, verdict=verdict,
        top_p=top_p, top_q=top_q if top_q is not None else ((tid, text, q), (98, "yy", 1 - q)),
    )


def rejected_step(index=0):
    """k=3: draft 1 accepted, draft 2 rejected, draft 3 discarded; correction 'X' resampled."""
    drafts = (
        _draft(0, 10, " the", 0.8, 0.9, 0.2, "accepted"),
        _draft(1, 11, "<script>", 0.7, 0.1, 0.6, "rejected"),
        _draft(2, 12, "\n", 0.5, 0.3, None, "discarded"),
    )
    return StepRecord(
        index=index, k=3, drafts=drafts, n_accepted=1, next_token_id=13, next_token_text="X", next_kind="resampled",
        next_p=0.5, top_next=((13, "X", 0.5), (11, "<script>", 0.1)), top_residual=((13, "X", 0.8), (14, "Y", 0.2)),
        committed=(10, 13), committed_text=(" the", "X"), draft_ms=5.0, verify_ms=20.0, other_ms=1.0,
    )


def bonus_step(index=1, finished=None):
    drafts = (_draft(0, 20, "a", 1.0, 0.95, 0.5, "accepted", top_q=()), _draft(1, 21, "b", 1.0, 0.9, 0.1, "accepted", top_q=()))
    return StepRecord(
        index=index, k=2, drafts=drafts, n_accepted=2, next_token_id=22, next_token_text="c", next_kind="bonus",
        next_p=0.7, top_next=((22, "c", 0.7), (23, "d", 0.2)), top_residual=(), committed=(20, 21, 22),
        committed_text=("a", "b", "c"), draft_ms=1.0, verify_ms=15.0, other_ms=1.0, finished=finished,
    )


def greedy_step(index=0):
    drafts = (
        _draft(0, 30, "x", 1.0, 0.6, None, "accepted", top_q=()),
        _draft(1, 31, "y", 1.0, 0.2, None, "rejected", top_q=()),
    )
    return StepRecord(
        index=index, k=2, drafts=drafts, n_accepted=1, next_token_id=32, next_token_text="z", next_kind="resampled",
        next_p=0.7, top_next=((32, "z", 0.7),), top_residual=((32, "z", 0.9),), committed=(30, 32),
        committed_text=("x", "z"), draft_ms=0.5, verify_ms=9.0, other_ms=0.5,
    )


def target_step(index=0):
    return StepRecord(
        index=index, k=0, drafts=(), n_accepted=0, next_token_id=40, next_token_text="q", next_kind="target",
        next_p=0.4, top_next=((40, "q", 0.4),), top_residual=(), committed=(40,), committed_text=("q",),
        draft_ms=0.0, verify_ms=10.0, other_ms=0.2,
    )


def _spans(html_text):
    return re.findall(r'<span class="tok tok-(\w+)" data-step="(\d+)" data-pos="(\d+)" data-tip="([^"]*)">', html_text)


# -- token HTML --------------------------------------------------------------------------------


def test_tokens_html_marks_each_kind_in_order():
    h = viz.tokens_html("Prompt <b>", [rejected_step(0), bonus_step(1)])
    kinds = [(k, int(s), int(p)) for k, s, p, _tip in _spans(h)]
    # step 0: accepted prefix, the rejected and discarded drafts struck in place, then the correction
    assert kinds == [
        ("accepted", 0, 0), ("rejected", 0, 1), ("discarded", 0, 2), ("resampled", 0, 1),
        ("accepted", 1, 0), ("accepted", 1, 1), ("bonus", 1, 2),
    ]
    assert 'data-steps="2"' in h
    assert "Prompt &lt;b&gt;" in h  # the prompt is escaped too


def test_tokens_html_escapes_token_text():
    h = viz.tokens_html("", [rejected_step()])
    assert "<script>" not in h
    assert "&lt;script&gt;" in h


def test_tokens_html_shows_whitespace_visibly():
    h = viz.tokens_html("", [rejected_step()])
    assert '<span class="ws">↵</span>\n' in h  # the discarded newline token shows a glyph and breaks
    assert viz.token_label(" the") == "␣the"
    assert viz.token_label("\n\t") == "↵⇥"
    assert viz.token_label("") == "∅"
    assert viz.token_label("\x00") == "\\x00"
    from specviz.viz.tokens import _token_inner

    assert _token_inner("    ") == f'<span class="ws">{viz.token_label("    ")}</span>'  # spaces as the table writes them


def test_tooltips_carry_p_q_ratio_u_and_verdict():
    tips = {(k, int(p)): tip for k, _s, p, tip in _spans(viz.tokens_html("", [rejected_step()]))}
    acc = tips[("accepted", 0)]
    assert "p = 0.900" in acc and "q = 0.800" in acc and "min(1, p/q) = 1.000" in acc
    assert "u = 0.200" in acc and "accepted" in acc
    rej = tips[("rejected", 1)]
    assert "u = 0.600 &gt; 0.143" in rej and "rejected" in rej
    assert "residual" in tips[("resampled", 1)]
    assert "never judged" in tips[("discarded", 2)]


def test_greedy_tooltips_explain_argmax():
    tips = [tip for *_x, tip in _spans(viz.tokens_html("", [greedy_step()]))]
    assert "argmax p" in tips[0] and "accepted" in tips[0]
    assert "x ≠ argmax p" in tips[1]


def test_selected_step_and_finished_marker():
    h = viz.tokens_html("", [rejected_step(0), bonus_step(1, finished="length")], selected_step=0)
    assert '<span class="sv-step sel" data-step="0">' in h
    assert '<span class="sv-step" data-step="1">' in h
    assert "max new tokens reached" in h


def test_tokens_cut_by_max_tokens_are_not_shown_as_committed():
    rec = rejected_step()
    from dataclasses import replace

    cut = replace(rec, committed=(10,), committed_text=(" the",))  # max_new_tokens stopped after draft 1
    kinds = [k for k, *_ in _spans(viz.tokens_html("", [cut]))]
    assert kinds == ["accepted"]


def test_empty_view_and_legend():
    assert "Press <b>Step</b>" in viz.tokens_html("hi", [])
    legend = viz.legend_html()
    for kind in ("accepted", "resampled", "bonus", "target", "rejected", "discarded"):
        assert f"tok-{kind}" in legend
    assert "hover or tap a token" in legend


def test_message_html_escapes():
    h = viz.message_html("bad <model>", "error")
    assert "&lt;model&gt;" in h and "sv-msg-error" in h and 'role="alert"' in h
    assert viz.message_html("") == ""


# -- metrics -----------------------------------------------------------------------------------


def _card_value(h, key):
    m = re.search(rf'data-metric="{key}"><div class="sv-card-label">(?:[^<]|<span class="sv-sym"[^>]*>[^<]*</span>)*</div><div class="sv-card-value">([^<]*)</div>', h)
    assert m, key
    return m.group(1)


def test_metrics_html_values_and_speedup():
    steps = [rejected_step(0), bonus_step(1)]
    stats = compute_stats(steps, prefill_ms=4.0, target_forwards=3)
    h = viz.metrics_html(stats)
    assert _card_value(h, "steps") == "2"
    assert _card_value(h, "drafted") == "5"
    assert _card_value(h, "accepted") == "3"
    assert _card_value(h, "acceptance") == "60%"
    assert _card_value(h, "tau") == "2.50"
    assert _card_value(h, "forwards") == "3"
    assert "vs 6 target-only" in h  # 5 tokens + 1 prefill forward
    assert _card_value(h, "speedup") == "—"
    base = compute_stats([target_step(i) for i in range(5)], prefill_ms=4.0, target_forwards=6)
    h2 = viz.metrics_html(stats, base, engine_ms=12.5)
    want = stats.tokens_per_s / base.tokens_per_s
    assert _card_value(h2, "speedup") == f"{want:.2f}×"
    assert 'data-engine-ms="12.500"' in h2


def test_metrics_html_before_any_step():
    h = viz.metrics_html(None)
    assert _card_value(h, "steps") == "0"
    assert _card_value(h, "tau") == "—"


# -- the step inspector ------------------------------------------------------------------------


def test_draft_table_rows():
    rows = viz.draft_table_rows(rejected_step())
    assert len(viz.DRAFT_COLUMNS) == 7 and all(len(r) == 7 for r in rows)
    assert rows[0] == ["1", "␣the", "0.800", "0.900", "1.000", "0.200", "✓ accepted"]
    assert rows[1][1] == "<script>" and rows[1][4] == "0.143" and rows[1][6] == "✗ rejected"
    assert rows[2][6] == "– discarded" and rows[2][5] == "—"
    assert rows[3][0] == "→2" and rows[3][1] == "X" and rows[3][6] == "↻ resampled"
    assert viz.draft_table_rows(None) == []
    g = viz.draft_table_rows(greedy_step())
    assert g[0][5] == "yes" and g[0][6] == "✓ = argmax p" and g[1][6] == "✗ ≠ argmax p" and g[2][6] == "↻ argmax p"
    assert g[1][5].startswith("no: argmax is")  # greedy: "argmax p?" replaces u
    assert "bonus" in viz.draft_table_rows(bonus_step())[-1][6]


def test_draft_table_html():
    h = viz.draft_table_html(rejected_step())
    rows = re.findall(r'<tr class="([^"]*)" data-pos="(\d+)">', h)
    assert [(c.split()[1], int(p)) for c, p in rows] == [
        ("sv-row-accepted", 0), ("sv-row-rejected", 1), ("sv-row-discarded", 2), ("sv-row-resampled", 1)]
    assert [int(p) for c, p in rows if "sel" in c.split()] == [1, 1]  # the deciding position, by default
    assert "&lt;script&gt;" in h and "<script>" not in h
    assert "sel" in re.findall(r'<tr class="([^"]*)" data-pos="0">', viz.draft_table_html(rejected_step(), 0))[0]
    assert re.findall(r'data-pos="(\d+)"', viz.draft_table_html(bonus_step()))[-1] == "2"  # the bonus position
    assert "appear here" in viz.draft_table_html(None)


def test_positions_and_summary():
    assert viz.position_choices(rejected_step()) == ["1: ␣the ✓", "2: <script> ✗", "3: ↵ –"]
    assert viz.default_position(rejected_step()) == 1
    assert viz.position_choices(bonus_step())[-1] == "3: c ★ bonus"
    assert viz.default_position(bonus_step()) == 2
    assert viz.position_choices(target_step()) == ["1: q target"]
    assert "rejected" in viz.step_summary(rejected_step()) and "Step 1" in viz.step_summary(rejected_step())
    assert "No step" in viz.step_summary(None)


def _trace(fig, name_start):
    return [t for t in fig.data if (t.name or "").startswith(name_start)]


def test_topk_figure_at_the_rejected_position_shows_the_residual():
    fig = viz.topk_figure(rejected_step(), 1)
    (p,) = _trace(fig, "p (target)")
    (q,) = _trace(fig, "q (draft)")
    (r,) = _trace(fig, "residual")
    (star,) = _trace(fig, "resampled token")
    labels = list(p.x)
    assert "&lt;script&gt;" in labels and "X" in labels  # the drafted and the resampled token
    i = labels.index("&lt;script&gt;")
    assert p.y[i] == pytest.approx(0.1) and q.y[i] == pytest.approx(0.7)
    assert r.y[labels.index("X")] == pytest.approx(0.8)
    assert list(star.x) == ["X"]
    assert "rejected" in fig.layout.title.text and "u 0.60 &gt;" not in fig.layout.title.text
    (mark,) = _trace(fig, "drafted x")  # a trace on the bar's own category, not an annotation (see figures.py)
    assert list(mark.x) == ["&lt;script&gt;"]


def test_topk_figure_other_positions():
    fig = viz.topk_figure(rejected_step(), 0)  # an accepted draft: p and q, no residual
    assert not _trace(fig, "residual") and _trace(fig, "q (draft)")
    fig = viz.topk_figure(bonus_step(), 2)  # the bonus position: p only, a star on the bonus token
    assert _trace(fig, "bonus token") and not _trace(fig, "q")
    fig = viz.topk_figure(bonus_step(), 0)  # n-gram: q is a point mass on the draft
    (q,) = _trace(fig, "q (point mass)")
    assert max(v for v in q.y if v is not None) == 1.0
    assert viz.topk_figure(target_step(), None).data  # target-only step
    assert viz.topk_figure(None, None).layout.annotations  # placeholder
    assert viz.topk_figure(rejected_step(), 99).layout.title.text.startswith("Step 1 · position 3")  # clamped


def test_run_figures():
    steps = [rejected_step(0), bonus_step(1), target_step(2)]
    stats = compute_stats(steps)
    acc = viz.acceptance_by_position_figure(stats)
    assert list(acc.data[0].y) == list(stats.per_position)
    assert acc.data[0].marker.color == viz.COLORS["accepted"]
    tl = viz.timeline_figure(steps)
    bars = [t for t in tl.data if t.type == "bar"]
    assert [t.name for t in bars] == ["draft", "verify", "other"] and tl.layout.barmode == "stack"
    assert list(bars[1].y) == [20.0, 15.0, 10.0]
    (k,) = [t for t in tl.data if t.type == "scatter"]
    assert list(k.y) == [3, 2, 0] and k.yaxis == "y2"
    tps = viz.tokens_per_step_figure(steps)
    names = [t.name for t in tps.data]
    assert names[:4] == ["accepted", "resampled", "bonus", "target"]
    assert list(tps.data[0].y) == [1, 2, 0]
    assert "τ = 2.00" in tps.layout.title.text
    for fig in (viz.acceptance_by_position_figure(None), viz.timeline_figure([]), viz.tokens_per_step_figure([])):
        assert fig.layout.annotations[0].text  # "No steps yet"
        json.loads(fig.to_json())
    # whole steps on the step axis: one step ticks 1 only (not 0.5, 1, 1.5); a long run about 8 round ticks
    from specviz.viz.figures import _step_axis

    assert tl.layout.xaxis.dtick == tps.layout.xaxis.dtick == 1 and tl.layout.xaxis.tick0 == 1
    assert [_step_axis(n)["dtick"] for n in (1, 8, 9, 16, 17, 64, 400)] == [1, 1, 2, 2, 5, 10, 50]
    # a long note breaks into lines a phone's plot holds (one line ran off both sides at 390 px)
    from specviz.viz.figures import EMPTY_LINE_CHARS

    note = viz.empty_figure("t", "Run a few steps: the curve starts from this run's own a, k and c").layout.annotations[0].text
    lines = note.split("<br>")
    assert len(lines) > 1 and max(map(len, lines)) <= EMPTY_LINE_CHARS and " ".join(lines).startswith("Run a few steps: the curve")


def test_palette_matches_the_stylesheet():
    css = (ROOT / "specviz" / "assets" / "style.css").read_text()
    for kind in ("accepted", "resampled", "bonus", "target", "rejected", "discarded", "p", "q"):
        assert f"--sv-{kind}: {viz.COLORS[kind]};" in css, kind


def test_viz_does_not_import_gradio():
    code = "import sys, specviz.viz; assert 'gradio' not in sys.modules, 'viz imported gradio'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


# -- real records from tiny models -------------------------------------------------------------


@pytest.fixture(scope="module")
def real_run(tiny_target, near_draft):
    dec = SpeculativeDecoder(tiny_target, DraftModel(near_draft), k=4, sampling=Sampling(temperature=1.0))
    return dec.generate("the cat sat on the mat", max_new_tokens=40, seed=3)


def test_renderers_on_a_real_run(real_run):
    steps = real_run.steps
    h = viz.tokens_html("the cat sat on the mat", steps)
    spans = _spans(h)
    committed = [s for s in spans if s[0] in ("accepted", "resampled", "bonus", "target")]
    assert len(committed) == real_run.stats.new_tokens
    for rec in steps:
        rows = viz.draft_table_rows(rec)
        assert len(rows) == rec.k + 1
        for pos in range(len(viz.position_choices(rec))):
            fig = viz.topk_figure(rec, pos)
            assert fig.data
    assert viz.acceptance_by_position_figure(real_run.stats).data
    assert viz.timeline_figure(steps).data and viz.tokens_per_step_figure(steps).data


def test_ngram_records_render(tiny_target):
    dec = SpeculativeDecoder(tiny_target, NGram(), k=3)
    res = dec.generate("abc abc abc abc", max_new_tokens=12)
    h = viz.tokens_html("abc abc abc abc", res.steps)
    assert len([s for s in _spans(h) if s[0] != "rejected" and s[0] != "discarded"]) == res.stats.new_tokens
    for rec in res.steps:
        viz.topk_figure(rec, None)


# -- settings and per-session state ------------------------------------------------------------


def test_parse_settings_accepts_and_normalises():
    from specviz.ui.state import parse_settings

    s = parse_settings("gemma-3-270m", "ngram", "ignored", 4, 0, 1.0, 0, 0, 64, "hi")
    assert s.proposer == "ngram" and s.top_p is None and s.top_k is None and s.sampling == Sampling()
    s = parse_settings(" t ", "draft", "d@int8", 16.0, 0.7, 0.9, 50, 7, 1, "hi", False)
    assert (s.target, s.proposer, s.k, s.top_p, s.top_k, s.seed, s.max_new_tokens, s.chat) == ("t", "draft:d@int8", 16, 0.9, 50, 7, 1, False)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"target": ""}, "choose a target model"),
        ({"proposer": "magic"}, "unknown proposer"),
        ({"draft": " "}, "choose a draft model"),
        ({"k": 0}, "k (tokens drafted per step) must be from 1 to 16"),
        ({"k": 17}, "from 1 to 16"),
        ({"k": 2.5}, "whole number"),
        ({"temperature": -1}, "temperature"),
        ({"temperature": float("nan")}, "finite"),
        ({"top_p": 0}, "top-p"),
        ({"top_k": -3}, "top-k"),
        ({"seed": None}, "seed is empty"),
        ({"max_new_tokens": 0}, "max new tokens"),
        ({"prompt": "   "}, "the prompt is empty"),
    ],
)
def test_parse_settings_errors(change, message):
    from specviz.ui.state import parse_settings

    args = dict(target="t", proposer="draft", draft="d", k=4, temperature=0, top_p=1, top_k=0, seed=0, max_new_tokens=8, prompt="hi")
    args.update(change)
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_settings(**args)


def test_state_runs_writes_a_trace_and_replays_it(tiny_target, near_draft, tmp_path):
    from specviz.ui.state import PlaygroundState, parse_settings

    st = PlaygroundState()
    settings = parse_settings("tiny", "draft", "near", 3, 1.0, 1.0, 0, 5, 20, "the cat")
    dec = SpeculativeDecoder(tiny_target, DraftModel(near_draft), k=3, sampling=settings.sampling)
    st.start(settings, dec)
    st.step()
    st.step()
    assert len(st.steps) == 2 and st.stats().steps == 2 and st.last_engine_ms > 0
    trace = load_trace(st.trace_path)  # readable mid-run (line-buffered)
    assert [r.to_dict() for r in trace.steps] == [r.to_dict() for r in st.steps]
    while not st.done:
        st.step()
    live = st.stats()
    path = tmp_path / "t.jsonl"
    path.write_text(Path(st.trace_path).read_text())

    other = PlaygroundState()  # another browser: loads the trace, no model needed
    other.load_trace(str(path))
    assert other.mode == "trace" and other.done and other.stats().new_tokens == live.new_tokens
    other.rewind_trace()
    assert not other.steps
    other.step()
    assert len(other.steps) == 1
    assert st.steps and len(st.steps) >= 2  # untouched by the other session

    old = st.trace_path
    st.reset()
    assert st.session is None and not st.steps and st.epoch == 1 and not Path(old).exists()
    st.close()


def test_state_is_not_copied_between_sessions():
    import copy

    from specviz.ui.state import PlaygroundState

    a = PlaygroundState()
    assert copy.deepcopy(a) is a  # a handle, never duplicated
    assert PlaygroundState() is not PlaygroundState()


def test_baseline_compares_only_when_finished_on_the_same_settings(tiny_target):
    from specviz.ui.state import PlaygroundState, parse_settings

    st = PlaygroundState()
    s = parse_settings("tiny", "ngram", None, 3, 0, 1, 0, 0, 6, "abc abc abc")
    st.start(s, SpeculativeDecoder(tiny_target, NGram(), k=3))
    st.step()
    st.start_baseline(s, SpeculativeDecoder(tiny_target, None))
    st.baseline_session.step()
    assert st.comparable_baseline() is None  # not finished yet
    while not st.baseline_session.done:
        st.baseline_session.step()
    assert st.comparable_baseline() is not None
    st.settings = parse_settings("tiny", "ngram", None, 3, 0, 1, 0, 0, 6, "another prompt")
    assert st.comparable_baseline() is None
    st.close()


def test_step_summary_shows_a_re_tokenized_draft():
    from dataclasses import replace

    rec = replace(rejected_step(), info={"draft_tokens": [" Comp", "any"], "target_tokens": [" Company", "<x>"]})
    h = viz.step_summary(rec)
    assert "<code>␣Comp</code> <code>any</code>" in h and "<code>&lt;x&gt;</code>" in h


def test_parse_settings_new_proposers():
    from specviz.ui.state import parse_settings

    s = parse_settings("t", "early-exit", "", 4, 0, 1, 0, 0, 8, "hi", True, "heuristic", 3)
    assert s.proposer == "early-exit:3" and s.schedule == "heuristic"
    s = parse_settings("t", "xdraft", "smollm2-135m", 4, 0, 1, 0, 0, 8, "hi", True, "confidence", 3)
    assert s.proposer == "xdraft:smollm2-135m"
    with pytest.raises(ValueError, match="unknown k schedule"):
        parse_settings("t", "xdraft", "d", 4, 0, 1, 0, 0, 8, "hi", True, "sometimes", 3)
    with pytest.raises(ValueError, match="early-exit layers"):
        parse_settings("t", "early-exit", "", 4, 0, 1, 0, 0, 8, "hi", True, "constant", 0)


def test_unvalidated_figures_are_the_validated_ones(real_run, monkeypatch):
    """The app skips Plotly's validation (10 ms a figure); with it on, each figure is the same JSON
    and valid (an unknown property or a bad value would raise here)."""
    from specviz.viz import figures

    steps = real_run.steps
    builders = [
        lambda: viz.topk_figure(steps[0], 0), lambda: viz.topk_figure(steps[-1], None), lambda: viz.topk_figure(None, None),
        lambda: viz.acceptance_by_position_figure(real_run.stats), lambda: viz.timeline_figure(steps),
        lambda: viz.tokens_per_step_figure(steps), lambda: viz.acceptance_by_position_figure(None),
        lambda: viz.topk_figure(rejected_step(), 1), lambda: viz.tokens_per_step_figure([rejected_step(0), bonus_step(1)]),
    ]
    assert figures.VALIDATE is False
    fast = [json.loads(b().to_json()) for b in builders]
    monkeypatch.setattr(figures, "VALIDATE", True)
    checked = [json.loads(b().to_json()) for b in builders]
    assert fast == checked


def test_playground_plot_payloads_are_the_figures_json(real_run):
    """The playground serializes each per-step figure's plain spec (``f.spec``) without building a
    Figure; the browser must get the same JSON as ``Figure.to_json()`` (what gr.Plot sends)."""
    from specviz.ui.handlers import plot

    steps = real_run.steps
    cases = [
        (viz.topk_figure, (steps[0], 0)), (viz.topk_figure, (steps[-1], None)), (viz.topk_figure, (None, None)),
        (viz.topk_figure, (rejected_step(), 1)), (viz.acceptance_by_position_figure, (real_run.stats,)),
        (viz.acceptance_by_position_figure, (None,)), (viz.timeline_figure, (steps,)), (viz.timeline_figure, ([],)),
        (viz.tokens_per_step_figure, ([rejected_step(0), bonus_step(1)],)),
    ]
    for figure, args in cases:
        payload = plot(figure.spec(*args))
        assert payload.type == "plotly"
        assert json.loads(payload.plot) == json.loads(figure(*args).to_json()), figure.__name__


def test_topk_figure_draws_a_token_outside_a_top_list_as_absent_not_zero():
    """Issue 52: a token in only one top list lost its other bar (read as p = 0), and a token only the
    residual lists showed neither. Each missing value is a hatched stub in its series' slot, named
    "not in this top list"; a value known to be 0 (an n-gram's q, a residual where p <= q) stays 0."""
    fig = viz.topk_figure(rejected_step(), 1)
    labels = list(_trace(fig, "p (target)")[0].x)
    absent = {t.meta: t for t in fig.data if t.name == "not in this top list"}
    assert set(absent) == {"p", "q", "residual"}
    assert sum(bool(t.showlegend) for t in absent.values()) == 1  # one legend entry
    stub = lambda what, label: absent[what].y[labels.index(label)] is not None  # noqa: E731
    assert stub("p", "Y") and stub("q", "Y")  # residual-only: neither p nor q is in its top list
    assert stub("p", "yy") and not stub("q", "yy")  # only in q's list
    assert not stub("p", "&lt;script&gt;") and not stub("q", "&lt;script&gt;")  # both known
    (r,) = _trace(fig, "residual")
    assert r.y[labels.index("&lt;script&gt;")] == 0.0 and not stub("residual", "&lt;script&gt;")  # p <= q: exactly 0
    assert stub("residual", "yy")  # p unknown there: the residual is not known to be 0
    for t in fig.data:  # each stub shares its series' slot (offsetgroup), so the bars stay in line
        if t.name == "not in this top list":
            assert t.offsetgroup == t.meta and "not in this top list" in t.hovertemplate
    fig = viz.topk_figure(bonus_step(), 0)  # an n-gram: q is exactly 0 off its token, never "absent"
    assert not any(t.name == "not in this top list" and t.meta == "q" for t in fig.data)
    (q,) = _trace(fig, "q (point mass)")
    assert all(v is not None for v in q.y)


def test_a_typical_acceptance_run_is_marked_lossy_on_every_number():
    """Issue 52: the metric cards, the acceptance and tokens-per-step charts of a typical-acceptance run
    say LOSSY; an exact run's never do."""
    from dataclasses import replace

    steps = [replace(rejected_step(0), rule="typical"), replace(rejected_step(1), rule="typical")]
    stats = compute_stats(steps, 1.0, 2)
    html = viz.metrics_html(stats, steps=steps)
    assert 'data-lossy="true"' in html and html.count(">LOSSY<") == html.count('class="sv-card ')
    assert "LOSSY" in viz.acceptance_by_position_figure(stats, lossy=True).layout.title.text
    assert "LOSSY" in viz.tokens_per_step_figure(steps).layout.title.text
    exact = [rejected_step(0), rejected_step(1)]
    assert "LOSSY" not in viz.metrics_html(compute_stats(exact, 1.0, 2), steps=exact)
    assert "LOSSY" not in viz.tokens_per_step_figure(exact).layout.title.text
    assert "LOSSY" not in viz.acceptance_by_position_figure(compute_stats(exact, 1.0, 2)).layout.title.text
