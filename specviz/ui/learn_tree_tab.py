"""The Learn tab's part 4: several candidates for one position (a token tree's siblings), the
exact multi-candidate rule against a broken one, and the residual shrinking as candidates fail.

Layout and wiring only; the experiment is :mod:`specviz.learn.tree`, the figures
:mod:`specviz.viz.learn`. ``build_tree_section()`` lays out its components in the current Blocks
context (``build_learn_tab`` calls it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr

from ..learn import chain as learn
from ..learn import tree as learn_tree
from ..viz import learn as vl
from ..viz import message_html
from .handlers import friendly_error

PRESET = "draft too confident"
DEFAULT_CANDIDATES = "the, a"
DEFAULT_N = 4_000

TREE_TEXT = r"""
A token tree offers several candidates for the same position (an n-gram's distinct continuations,
a draft's top-w tokens). The exact rule tries them **one after another, each against the residual
left by the ones that failed**: accept $c_j$ with probability $\min\!\big(1, r_j(c_j)/q_j(c_j)\big)$
($r_j(c_j)$ for a point mass), and after a rejection $r_{j+1} = \mathrm{norm}(\max(0, r_j - q_j))$;
when none is kept, the token is drawn from the last residual. Below, $N$ tries with these $p$, $q$ and
candidates run `specviz.core.algorithm.verify_tree` itself. The broken rule tests every candidate against
the original $p$: the mass of the rejected candidates is counted twice, and the output drifts from $p$.
"""


@dataclass
class TreeSectionView:
    button: gr.Button
    verdict: gr.HTML
    residual_plot: gr.Plot
    histogram: gr.Plot


def _table() -> tuple[list[str], Any, Any]:
    tokens, p, q = learn.PRESETS[PRESET]
    import torch

    return list(tokens), torch.tensor(p, dtype=torch.float64), torch.tensor(q, dtype=torch.float64)


def _inputs(mode: str, candidates: str, m: Any):
    tokens, p, q = _table()
    if mode == "point":
        cands = learn_tree.parse_candidates(candidates or "", tokens)
        return tokens, p, q, cands, len(cands)
    m_f = learn._to_float(m, "m (candidates per try)")  # noqa: SLF001 - the module's number parser
    if m_f != int(m_f):
        raise ValueError(f"m (candidates per try) must be a whole number, got {m_f:g}")
    return tokens, p, q, [], int(m_f)


def on_tree_inputs(mode: str, candidates: str, m: Any) -> tuple[Any, str]:
    """Redraw the residual steps for the named candidates (sampled mode: q's likeliest m)."""
    try:
        tokens, p, q, cands, m_i = _inputs(mode, candidates, m)
        shown = cands or sorted(range(len(tokens)), key=lambda i: -float(q[i]))[:m_i]
        steps = learn_tree.residual_steps(p, shown, None if mode == "point" else q)
        note = ("Point masses: each failed candidate is removed from p and the rest renormalised."
                if mode == "point" else f"Sampled: shown for q's {m_i} likeliest tokens in turn; each try draws its own.")
        return vl.residual_steps_figure(tokens, steps, shown), message_html(note + " Press “Try N times”.", "info")
    except Exception as e:  # noqa: BLE001 - shown in the page
        return gr.skip(), message_html(friendly_error(e, "the Learn tab"), "error")


def on_tree_sample(mode: str, candidates: str, m: Any, rule: str, n: Any, seed: Any) -> tuple[Any, str, Any]:
    """N tries with the chosen rule -> (histogram, verdict, residual figure)."""
    try:
        tokens, p, q, cands, m_i = _inputs(mode, candidates, m)
        n_f, seed_f = learn._to_float(n, "N (tries)"), learn._to_float(seed, "seed")  # noqa: SLF001
        if n_f != int(n_f) or seed_f != int(seed_f) or seed_f < 0:
            raise ValueError("N and the seed must be whole numbers (the seed >= 0)")
        exp = learn_tree.run_tree_rule(tokens, p, None if mode == "point" else q, mode=mode, candidates=cands, m=m_i,
                                       rule=rule, n=int(n_f), seed=int(seed_f))
        fig, _ = on_tree_inputs(mode, candidates, m)
        return vl.tree_histogram_figure(exp), vl.tree_verdict_html(exp), fig
    except Exception as e:  # noqa: BLE001
        return gr.skip(), message_html(friendly_error(e, "the Learn tab"), "error"), gr.skip()


def build_tree_section() -> TreeSectionView:
    tokens, p, q = _table()
    with gr.Accordion("4 · Several candidates per position (token trees)", open=True, elem_id="sv-learn-tree"):
        gr.Markdown(TREE_TEXT, latex_delimiters=[{"left": "$$", "right": "$$", "display": True},
                                                 {"left": "$", "right": "$", "display": False}])
        gr.Markdown("Toy vocabulary (the “draft too confident” preset): "
                    + ", ".join(f"{t} p={float(a):.2f} q={float(b):.2f}" for t, a, b in zip(tokens, p, q)),
                    elem_id="sv-learn-tree-vocab")
        with gr.Row(equal_height=False):
            mode = gr.Radio([(label, key) for key, label in learn_tree.TREE_MODES.items()], value="point",
                            label="Candidates", elem_id="sv-learn-tree-mode", min_width=240)
            cands = gr.Textbox(DEFAULT_CANDIDATES, label="Point masses, in the order tried", elem_id="sv-learn-tree-cands",
                               min_width=160)
            m = gr.Number(2, label="m (sampled candidates per try)", minimum=1, maximum=len(tokens) - 1, precision=0,
                          elem_id="sv-learn-tree-m", min_width=120)
        with gr.Row(equal_height=False):
            rule = gr.Radio([(label, key) for key, label in learn_tree.TREE_RULES.items()], value="exact",
                            label="Rule", elem_id="sv-learn-tree-rule", min_width=240)
            n = gr.Number(DEFAULT_N, label="N (tries)", minimum=1, maximum=learn_tree.MAX_TREE_SAMPLES, precision=0,
                          elem_id="sv-learn-tree-n", min_width=100)
            seed = gr.Number(0, label="Seed", minimum=0, precision=0, elem_id="sv-learn-tree-seed", min_width=80)
            button = gr.Button("Try N times", variant="primary", elem_id="sv-learn-tree-sample", min_width=140)
        fig0, _ = on_tree_inputs("point", DEFAULT_CANDIDATES, 2)
        residual_plot = gr.Plot(fig0, show_label=False, elem_id="sv-learn-tree-residual")
        verdict = gr.HTML(message_html("Press “Try N times” to run the rule with these candidates.", "info"),
                          elem_id="sv-learn-tree-verdict")
        histogram = gr.Plot(vl.empty_learn_figure("Output of N tries vs p", "Press “Try N times”"), show_label=False,
                            elem_id="sv-learn-tree-hist")
    toy = dict(concurrency_id="specviz-learn-tree", concurrency_limit=1, show_progress="hidden")
    for comp in (mode, cands, m):
        comp.change(on_tree_inputs, [mode, cands, m], [residual_plot, verdict], trigger_mode="always_last", **toy)
    button.click(on_tree_sample, [mode, cands, m, rule, n, seed], [histogram, verdict, residual_plot], **toy)
    return TreeSectionView(button, verdict, residual_plot, histogram)


__all__ = ["TreeSectionView", "build_tree_section", "on_tree_inputs", "on_tree_sample"]
