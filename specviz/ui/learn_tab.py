"""The Learn tab: why speculative sampling is exact, and what it gains where, in five parts.

1. The rule on a toy vocabulary the user edits (p and q over 5 to 8 tokens), sampled N times.
2. The same at a real model's next-token position, with and without speculation.
3. An expected-speedup calculator, with the user's measured runs as points.
4. Several candidates per position (a token tree's siblings): :mod:`specviz.ui.learn_tree_tab`.
5. Why the best k on this CPU is not the best k on a GPU: :mod:`specviz.ui.learn_hardware_tab`.

Layout and event wiring only: the experiments live in :mod:`specviz.learn.chain`, the figures in
:mod:`specviz.viz.learn`. Every handler turns errors into a message in the page. The caller opens
the ``gr.Tab``; :func:`build_learn_tab` lays out its components in the current Blocks context.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

import gradio as gr

from .. import settings
from ..app.limits import check_prompt_chars, check_prompts_fit, load_checked
from ..core.bounds import THEORY_MAX_K
from ..core.records import Sampling
from ..learn import chain as learn
from ..viz import learn as vl
from ..viz import message_html
from . import zerogpu
from .handlers import engine_concurrency, friendly_error

LATEX = [{"left": "$$", "right": "$$", "display": True}, {"left": "$", "right": "$", "display": False}]
COLUMNS = ["token", "p (target)", "q (draft)"]
DEFAULT_PRESET = "draft too confident"
DRAFT_MODEL = "draft model"
NGRAM = "n-gram (point mass)"
PART2_RULES = [("exact", "exact"), (learn.RULES["typical"], "typical")]
DEFAULT_PREFIX = "The quick brown fox jumps over the"
# The n-gram drafts only where the prefix's last tokens occurred before: a prefix that repeats itself
# (any tokenizer splits both halves alike), for a start without a draft model.
NGRAM_PREFIX = "Roses are red, violets are blue. Roses are red, violets are"

INTRO = r"""
A draft model proposes a token $x \sim q$; the target model, which defines the distribution $p$ we
want, keeps it with probability $\min\!\left(1, \frac{p(x)}{q(x)}\right)$. When it says no, the
token is drawn from the **residual** $\dfrac{\max(0,\,p - q)}{\sum_y \max(0,\,p(y) - q(y))}$ instead.
This page shows, by sampling, that the result is exactly $p$, and what it costs and gains.
"""

WHY_EXACT = r"""
**Why the output is exactly p.** A token $x$ comes out either because it was drafted *and kept*, or
because the draft was rejected (chance $1 - \beta$) and the residual $r$ produced it:

$$\Pr[x] = q(x)\,\min\!\Big(1, \tfrac{p(x)}{q(x)}\Big) + (1 - \beta)\, r(x)$$

$$\beta = \textstyle\sum_y \min(p(y), q(y))$$

$$r(x) = \frac{\max(0,\,p(x) - q(x))}{\sum_y \max(0,\,p(y) - q(y))}$$

The first term is $\min(p(x), q(x))$. Both sums measure the same gap,
$1 - \beta = \sum_y \max(0, p(y) - q(y))$, so they cancel and
$\Pr[x] = \min(p(x), q(x)) + \max(0, p(x) - q(x)) = p(x)$. Where the draft over-proposes a token
($q > p$) it is thinned out by the rejections; the residual refills exactly the tokens the draft
under-proposes ($p > q$). Draw from anything else after a rejection and the output drifts from $p$.
"""

RULE_NOTES = {
    "exact": "**Exact rule** (Leviathan et al. 2023): keep x with min(1, p(x)/q(x)), else draw from the residual "
             "max(0, p − q), normalised. The output is p, whatever q is.",
    "no-residual": "**Broken: no residual.** After a rejection draw from p itself. It looks harmless, but the tokens the "
                   "draft over-proposes were already kept min(p, q) of the time, so they come out too often: the output is "
                   "min(p, q) + (1 − Σ min(p, q)) · p.",
    "resample-q": "**Broken: resample from q.** After a rejection draw from the draft again. The output is "
                  "min(p, q) + (1 − Σ min(p, q)) · q: pulled towards the draft.",
    "typical": "**Typical acceptance (LOSSY)**, as in Medusa and vLLM: keep x when p(x) > min(ε, δ · exp(−H(p))), "
               "else take argmax p. It accepts more drafts (faster), but the output is not p: the page measures how far.",
}

SPEC_REAL = r"""
Here $p$ and $q$ are a real target's and draft's next-token distributions after your prefix (one
forward pass each, with the sampling settings below). *With speculation* applies the rule to them
N times (this is exactly the distribution a speculative step commits at that position); *without*
samples N times from $p$. With the exact rule both histograms agree with $p$ up to sampling noise.
The n-gram proposer has no distribution: its $q$ is a point mass on the token it copies, so a
draft is kept with probability $p(x)$ and the residual is $p$ without $x$, renormalised.
"""

SPEEDUP = r"""
If each drafted token is accepted with probability $a$ (independently), one step of $k$ drafts
commits on average $E = \dfrac{1 - a^{k+1}}{1 - a}$ tokens (between 1 and $k + 1$). One step costs
$k$ draft steps and one verify pass: in units of a target step, $k\,c + v$, where $c$ is a draft
step's cost and $v$ is a $(k+1)$-token verify pass's cost ($v = 1$ in the paper's idealisation,
more on a CPU). The expected speedup over target-only decoding is $\dfrac{E}{k\,c + v}$: more drafts
help while they are likely to be accepted and cheap, then the cost wins.
"""

RUNS_HELP = ("One run per line: a, k, measured speedup, then an optional # label (e.g. `0.62, 4, 1.35  # my run`). "
             "Or load the JSON that `specviz bench --json FILE` writes.")


# -- defaults -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class LearnDefaults:
    target: str
    draft: str
    proposer: str  # DRAFT_MODEL | NGRAM
    prefix: str
    target_choices: tuple[str, ...]
    draft_choices: tuple[str, ...]

    @classmethod
    def from_env(cls) -> "LearnDefaults":
        """The playground's starting models (SPECVIZ_DEFAULT_TARGET / _DRAFT / _PROMPT), set so that
        the first click on Sample shows the proof: the draft model whenever there is one (the
        playground's default n-gram has no distribution to compare, and after most prefixes it
        drafts nothing at all), else the n-gram on a prefix that repeats itself."""
        from .playground import Defaults, draft_choices, target_choices

        d = Defaults.from_env()
        proposer = DRAFT_MODEL if d.draft.strip() else NGRAM
        typed = settings.value("SPECVIZ_DEFAULT_PROMPT").strip()
        prefix = typed or (DEFAULT_PREFIX if proposer == DRAFT_MODEL else NGRAM_PREFIX)
        return cls(target=d.target, draft=d.draft, proposer=proposer, prefix=prefix,
                   target_choices=tuple(target_choices(d)), draft_choices=tuple(draft_choices(d)))


def preset_rows(name: str) -> list[list[Any]]:
    tokens, p, q = learn.PRESETS[name]
    return [[t, a, b] for t, a, b in zip(tokens, p, q)]


def _table(rows: Any) -> list[list[Any]]:
    """The Dataframe's value (a pandas DataFrame, a list of rows or a {"data": ...} dict) -> rows."""
    if rows is None:
        return []
    if hasattr(rows, "values") and hasattr(rows, "columns"):
        return rows.values.tolist()
    if isinstance(rows, dict):
        return list(rows.get("data") or [])
    return [list(r) for r in rows]


def _friendly(e: BaseException) -> str:
    return friendly_error(e, "the Learn tab")


def _num(value: Any, name: str) -> float:
    return learn._to_float(value, name)  # noqa: SLF001 - the one number parser of the module


# -- part 1 -----------------------------------------------------------------------------------


def on_inputs(rows: Any, rule: str, eps: float, delta: float) -> tuple[Any, str]:
    """Redraw p, q, the residual and min(1, p/q) when the table or the rule changes."""
    try:
        tokens, p, q = learn.parse_table(_table(rows))
        hint = f"Rule: {learn.RULES.get(rule, rule)}. Press “Sample N times” to test it on these p and q."
        return vl.rule_figure(tokens, p, q, rule, eps=eps, delta=delta), message_html(hint, "info")
    except Exception as e:  # noqa: BLE001 - shown in the page
        return gr.skip(), message_html(_friendly(e), "error")


def on_sample(rows: Any, rule: str, n: Any, seed: Any, eps: Any, delta: Any) -> tuple[Any, str, Any]:
    """Sample N times with the chosen rule -> (histogram, verdict, p/q figure)."""
    try:
        tokens, p, q = learn.parse_table(_table(rows))
        n_i, seed_i = _num(n, "N (samples)"), _num(seed, "seed")
        if n_i != int(n_i) or seed_i != int(seed_i) or seed_i < 0:
            raise ValueError("N and the seed must be whole numbers (the seed >= 0)")
        eps_f, delta_f = _num(eps, "ε"), _num(delta, "δ")
        exp = learn.run_rule(tokens, p, q, rule, int(n_i), int(seed_i), eps=eps_f, delta=delta_f)
        kept = f" Drafts kept: {exp.accepted / exp.n:.0%} of the tries."
        return (vl.histogram_figure(exp), vl.verdict_html(exp.message + kept, exp.kind, exp.matches),
                vl.rule_figure(tokens, p, q, rule, eps=eps_f, delta=delta_f))
    except Exception as e:  # noqa: BLE001
        return gr.skip(), message_html(_friendly(e), "error"), gr.skip()


def on_rule(rule: str) -> tuple[Any, str]:
    return gr.update(visible=rule == "typical"), RULE_NOTES.get(rule, "")


# -- part 2 -----------------------------------------------------------------------------------


def _decode(tokenizer, i: int | None) -> str:
    if i is None:
        return "(others)"
    return tokenizer.decode([i], skip_special_tokens=False)


def compare_on_model(target: str, draft: str | None, prefix: str, sampling: Sampling, n: int, seed: int,
                     rule: str) -> tuple[str, Any]:
    """Part 2's work, pure (plain arguments in, the page's HTML and figure out), so that on
    ZeroGPU it runs in the GPU worker: p and q after the prefix, then N samples both ways."""
    tm = load_checked(target)  # hosting limits: no local paths unless allowed
    check_prompts_fit(tm.tokenizer, [prefix], chat=False)  # the prefix is used as typed
    dm = load_checked(draft) if draft else None
    nt = learn.next_token_distributions(tm, dm, prefix, sampling)
    cmp = learn.compare_with_speculation(nt.p, nt.q, n, seed, rule)
    ids, p, q, spec, plain = learn.comparison_rows(nt.p, nt.q, cmp)
    labels = vl.unique_labels([_decode(tm.tokenizer, i) for i in ids], [-1 if i is None else i for i in ids])
    fig = vl.comparison_figure(labels, p, q, spec, plain, n=cmp.n, tv_spec=cmp.tv_spec, tv_plain=cmp.tv_plain,
                               q_name="q (n-gram point mass)" if dm is None else "q (draft)", rule=rule)
    extra = ""
    if nt.draft_token is not None:
        extra = f" The n-gram drafts “{_decode(tm.tokenizer, nt.draft_token)}” (p = {float(nt.p[nt.draft_token]):.3f})."
    return vl.model_comparison_html(cmp.message + extra, cmp.kind, cmp.tv_spec, cmp.tv_plain, cmp.tv_between), fig


def on_model_sample(target: str, proposer: str, draft: str, prefix: str, rule: str, temperature: Any, top_p: Any,
                    n: Any, seed: Any) -> Iterator[tuple[str, Any]]:
    """Load the models (cached), get p and q after the prefix, sample N times both ways."""
    try:
        t = _num(temperature, "temperature")
        tp = _num(top_p, "top-p")
        if not 0 < tp <= 1:
            raise ValueError(f"top-p must be in (0, 1] (1 = off), got {tp:g}")
        sampling = Sampling(temperature=t, top_p=None if tp >= 1 else tp)
        if sampling.greedy:
            raise ValueError("temperature 0 is greedy: both ways always give argmax p. Choose a temperature above 0")
        n_i, seed_i = _num(n, "N (samples)"), _num(seed, "seed")
        if n_i != int(n_i) or not 1 <= n_i <= learn.MAX_SAMPLES or seed_i != int(seed_i) or seed_i < 0:
            raise ValueError(f"N must be a whole number from 1 to {learn.MAX_SAMPLES:,} and the seed a whole number >= 0")
        target = (target or "").strip()
        if not target:
            raise ValueError("choose a target model (a built-in name, a Hugging Face id or a local directory)")
        if not isinstance(prefix, str) or not prefix.strip():
            raise ValueError("the prefix is empty: type the text whose next token to sample")
        check_prompt_chars(prefix)  # hosting limit, before any model loads
        use_draft = proposer != NGRAM
        if use_draft and not (draft or "").strip():
            raise ValueError("choose a draft model, or switch the proposer to n-gram")
        yield message_html(f"Loading {target}{' and ' + draft.strip() if use_draft else ''} (cached after the first time)…",
                           "info"), gr.skip()
        yield zerogpu.on_gpu(compare_on_model, target, draft.strip() if use_draft else None, prefix, sampling,
                             int(n_i), int(seed_i), rule)
    except Exception as e:  # noqa: BLE001
        yield message_html(_friendly(e), "error"), gr.skip()


# -- part 3 -----------------------------------------------------------------------------------


def on_calc(a: Any, k: Any, c: Any, v: Any, runs_text: str) -> tuple[str, Any, str]:
    """(cards, figure, message) for the calculator's sliders and the pasted runs."""
    try:
        a_f, c_f, v_f = _num(a, "a"), _num(c, "c"), _num(v, "v")
        k_f = _num(k, "k")
        if k_f != int(k_f) or not 1 <= k_f <= THEORY_MAX_K:
            raise ValueError(f"k must be a whole number from 1 to {THEORY_MAX_K}, got {k_f:g}")
        k_i = int(k_f)
        curve = learn.speedup_curve(a_f, c_f, v_f, max(learn.K_MAX, k_i))
        _, e, s = curve[k_i - 1]
        kb, sb = learn.best_k(a_f, c_f, v_f, max(learn.K_MAX, k_i))
        msg = ""
        try:
            runs = learn.parse_measured_runs(runs_text or "")
        except ValueError as err:
            runs, msg = [], message_html(f"measured runs: {err}", "error")
        cards = vl.calc_cards_html(k_i, e, s, kb, sb, k_i * c_f + v_f)
        return cards, vl.speedup_figure(a_f, c_f, v_f, k_i, runs, learn.K_MAX), msg
    except Exception as e:  # noqa: BLE001
        return gr.skip(), gr.skip(), message_html(_friendly(e), "error")


def _set_from_run(run: learn.MeasuredRun) -> tuple[Any, Any, Any, Any]:
    """Slider updates for a, k, c and v from one measured run (k only where the slider reaches)."""
    upd = lambda x, lo, hi: gr.update(value=round(min(max(x, lo), hi), 3)) if x is not None else gr.skip()  # noqa: E731
    k = gr.update(value=run.k) if run.k <= learn.K_MAX else gr.skip()
    return upd(run.a, 0, 0.99), k, upd(run.c, 0, 1.5), upd(run.v, 0.5, 4)


def _run_note(run: learn.MeasuredRun) -> str:
    costs = "".join(f", {n} = {x:.3f}" for n, x in (("c", run.c), ("v", run.v)) if x is not None)
    return f"a, k, c and v set from {run.label or 'the best run'} (a = {run.a:.3f}, k = {run.k}{costs}; measured {run.speedup:.2f}x)"


def on_load_runs(path: Any, runs_text: str) -> tuple[Any, ...]:
    """A bench JSON -> its runs appended to the text box, the run picker filled, and a, k, c, v
    set from ONE run (the best measured speedup; pick another in the menu): never averaged
    across proposers. Returns (runs text, picker, loaded runs, a, k, c, v, message)."""
    try:
        if not path:
            return (gr.skip(),) * 7 + (message_html("no file was uploaded", "error"),)
        runs = learn.load_bench_runs(path if isinstance(path, str) else getattr(path, "name", str(path)))
        text = "\n".join(filter(None, [(runs_text or "").rstrip(), *(r.line() for r in runs)]))
        best = learn.pick_run(runs)
        groups = learn.runs_by_proposer(runs)
        picker = gr.update(choices=[r.label for r in runs], value=best.label, visible=True)
        note = (f"Loaded {len(runs)} run(s) of {len(groups)} proposer(s); {_run_note(best)}. "
                "Pick another run in the menu: a, c and v are never averaged across proposers.")
        return (text, picker, list(runs), *_set_from_run(best), message_html(note, "ok"))
    except Exception as e:  # noqa: BLE001
        return (gr.skip(),) * 7 + (message_html(_friendly(e), "error"),)


def on_pick_run(label: str, loaded: Any) -> tuple[Any, ...]:
    """The run picker -> (a, k, c, v, message) from the chosen one of the loaded runs."""
    try:
        runs = list(loaded or [])
        if not runs or not label:
            return (gr.skip(),) * 5
        run = learn.pick_run(runs, label)
        return (*_set_from_run(run), message_html(_run_note(run) + ".", "ok"))
    except Exception as e:  # noqa: BLE001
        return (gr.skip(),) * 4 + (message_html(_friendly(e), "error"),)


def run_from_playground(state: Any) -> learn.MeasuredRun:
    """The playground's current run as a measured point (needs a finished target-only baseline)."""
    stats = state.stats() if state is not None else None
    if stats is None or state.settings is None:
        raise ValueError("no playground run yet: run one in the Playground tab (Play, then Run target-only)")
    base = state.comparable_baseline()
    if base is None or base.tokens_per_s <= 0:
        raise ValueError("the playground run has no finished target-only baseline: press 'Run target-only' there first")
    label = f"playground: {state.settings.describe()}"
    return learn.MeasuredRun(stats.acceptance_rate, state.settings.k, stats.tokens_per_s / base.tokens_per_s, label)


def on_add_playground(state: Any, runs_text: str) -> tuple[Any, str]:
    try:
        run = run_from_playground(state)
        return "\n".join(filter(None, [(runs_text or "").rstrip(), run.line()])), message_html("Added the playground run.", "ok")
    except Exception as e:  # noqa: BLE001
        return gr.skip(), message_html(_friendly(e), "error")


# -- layout -----------------------------------------------------------------------------------


@dataclass
class LearnView:
    """The Learn tab's components (for tests)."""

    table: gr.Dataframe
    rule: gr.Radio
    sample_btn: gr.Button
    verdict: gr.HTML
    model_btn: gr.Button
    model_status: gr.HTML
    calc_sliders: list[gr.Slider]
    calc_cards: gr.HTML


def build_learn_tab(defaults: LearnDefaults | None = None, playground_state: gr.State | None = None) -> LearnView:
    """Lay out the Learn tab in the current Blocks context and wire its events.

    ``playground_state``: the playground's gr.State, if the caller has it: then a button adds the
    user's own playground run to the calculator's measured points.
    """
    d = defaults or LearnDefaults.from_env()
    gr.Markdown(INTRO, latex_delimiters=LATEX, elem_id="sv-learn-intro")

    # 1 -- the rule on a toy vocabulary
    with gr.Accordion("1 · The rule on a toy vocabulary", open=True, elem_id="sv-learn-rule"):
        with gr.Row(equal_height=False):
            with gr.Column(scale=3, min_width=300):
                preset = gr.Radio(list(learn.PRESETS), value=DEFAULT_PRESET, label="Start from",
                                  elem_id="sv-learn-preset")
                table = gr.Dataframe(preset_rows(DEFAULT_PRESET), headers=COLUMNS, datatype=["str", "number", "number"],
                                     type="array", interactive=True,
                                     label=f"Edit p and q ({learn.MIN_TOKENS} to {learn.MAX_TOKENS} tokens; weights, "
                                           "normalised for you)", elem_id="sv-learn-table", max_height=340,
                                     column_widths=["34%", "33%", "33%"])
            with gr.Column(scale=2, min_width=260):
                rule = gr.Radio([(label, key) for key, label in learn.RULES.items()], value="exact",
                                label="What to do after a rejection", elem_id="sv-learn-rule-choice")
                rule_note = gr.Markdown(RULE_NOTES["exact"], elem_id="sv-learn-rule-note")
                with gr.Group(visible=False) as typical_box:
                    eps = gr.Slider(0.01, 1.0, value=learn.DEFAULT_EPS, step=0.01, label="ε (hard threshold)",
                                    elem_id="sv-learn-eps")
                    delta = gr.Slider(0.01, 1.0, value=learn.DEFAULT_DELTA, step=0.01,
                                      label="δ (entropy-adaptive threshold scale)", elem_id="sv-learn-delta")
                with gr.Row():
                    n = gr.Number(10_000, label="N (samples)", minimum=1, maximum=learn.MAX_SAMPLES, precision=0,
                                  min_width=100, elem_id="sv-learn-n")
                    seed = gr.Number(0, label="Seed", minimum=0, precision=0, min_width=80, elem_id="sv-learn-seed")
                sample_btn = gr.Button("Sample N times", variant="primary", elem_id="sv-learn-sample")
        tokens0, p0, q0 = learn.parse_table(preset_rows(DEFAULT_PRESET))
        rule_plot = gr.Plot(vl.rule_figure(tokens0, p0, q0), show_label=False, elem_id="sv-learn-rule-plot")
        verdict = gr.HTML(message_html("Press “Sample N times” to draw x ~ q, apply the rule, and histogram the result.",
                                       "info"), elem_id="sv-learn-verdict")
        hist_plot = gr.Plot(vl.empty_learn_figure("Sampled histogram vs p", "Press “Sample N times”"), show_label=False,
                            elem_id="sv-learn-hist")
        gr.Markdown(WHY_EXACT, latex_delimiters=LATEX, elem_id="sv-learn-why")

    # 2 -- a real model
    with gr.Accordion("2 · The same on a real model", open=True, elem_id="sv-learn-model"):
        gr.Markdown(SPEC_REAL, latex_delimiters=LATEX)
        with gr.Row(equal_height=False):
            with gr.Column(scale=1, min_width=260):
                target = gr.Dropdown(list(d.target_choices), value=d.target, label="Target model (p)",
                                     allow_custom_value=True, elem_id="sv-learn-target")
                proposer = gr.Radio([DRAFT_MODEL, NGRAM], value=d.proposer, label="Proposer (q)",
                                    elem_id="sv-learn-proposer")
                draft = gr.Dropdown(list(d.draft_choices), value=d.draft, label="Draft model", allow_custom_value=True,
                                    visible=d.proposer == DRAFT_MODEL, elem_id="sv-learn-draft",
                                    info="must share the target's tokenizer")
            with gr.Column(scale=2, min_width=300):
                prefix = gr.Textbox(d.prefix, label="Prefix (the next token after it is sampled)", lines=2, max_lines=6,
                                    elem_id="sv-learn-prefix")
                with gr.Row():
                    model_rule = gr.Radio(PART2_RULES, value="exact", label="Rule", elem_id="sv-learn-model-rule",
                                          min_width=200)
                    temperature = gr.Slider(0.05, 2.0, value=1.0, step=0.05, label="Temperature",
                                            elem_id="sv-learn-temperature", min_width=160)
                    top_p = gr.Number(1.0, label="Top-p", info="1 = off", minimum=0, maximum=1, step=0.05, min_width=80,
                                      elem_id="sv-learn-top-p")
                with gr.Row():
                    model_n = gr.Number(10_000, label="N (samples)", minimum=1, maximum=learn.MAX_SAMPLES, precision=0,
                                        min_width=100, elem_id="sv-learn-model-n")
                    model_seed = gr.Number(0, label="Seed", minimum=0, precision=0, min_width=80,
                                           elem_id="sv-learn-model-seed")
                    model_btn = gr.Button("Sample the next token N times", variant="primary", elem_id="sv-learn-model-btn",
                                          min_width=200)
        model_status = gr.HTML(message_html("Type a prefix and press Sample: the first run loads the models.", "info"),
                               elem_id="sv-learn-model-status")
        model_plot = gr.Plot(vl.empty_learn_figure("Next-token histograms", "Press Sample to compare"), show_label=False,
                             elem_id="sv-learn-model-plot")

    # 3 -- the speedup calculator
    with gr.Accordion("3 · Expected speedup", open=True, elem_id="sv-learn-speedup"):
        gr.Markdown(SPEEDUP, latex_delimiters=LATEX)
        with gr.Row(equal_height=False):
            with gr.Column(scale=1, min_width=260):
                a = gr.Slider(0.0, 0.99, value=0.7, step=0.01, label="a: acceptance rate", elem_id="sv-learn-a")
                k = gr.Slider(1, learn.K_MAX, value=4, step=1, label="k: tokens drafted per step", elem_id="sv-learn-k")
                c = gr.Slider(0.0, 1.5, value=0.1, step=0.01, label="c: draft step cost / target step cost",
                              elem_id="sv-learn-c")
                v = gr.Slider(0.5, 4.0, value=1.0, step=0.05, label="v: verify pass cost / target step cost",
                              elem_id="sv-learn-v")
            with gr.Column(scale=2, min_width=300):
                cards0, fig0, _ = on_calc(0.7, 4, 0.1, 1.0, "")
                cards = gr.HTML(cards0, elem_id="sv-learn-calc")
                calc_plot = gr.Plot(fig0, show_label=False, elem_id="sv-learn-calc-plot")
        with gr.Accordion("Your measured runs", open=False, elem_id="sv-learn-runs-box"):
            runs = gr.Textbox("", label="Measured runs", info=RUNS_HELP, lines=3, max_lines=12,
                              placeholder="0.62, 4, 1.35  # my run", elem_id="sv-learn-runs")
            with gr.Row():
                upload = gr.UploadButton("⤒ Load a specviz bench JSON", file_types=[".json"], type="filepath",
                                         elem_id="sv-learn-runs-upload", size="md")
                add_pg = gr.Button("Add my playground run", elem_id="sv-learn-add-playground", size="md",
                                   visible=playground_state is not None)
            pick = gr.Dropdown([], value=None, label="Set a, k, c and v from this run (one proposer at a time)",
                               visible=False, elem_id="sv-learn-runs-pick")
            loaded = gr.State([])
            runs_msg = gr.HTML("", elem_id="sv-learn-runs-msg")

    # 4 -- several candidates per position (token trees)
    from .learn_tree_tab import build_tree_section

    build_tree_section()

    # 5 -- the best k on this CPU and on a GPU
    from .learn_hardware_tab import build_hardware_section

    build_hardware_section(playground_state)

    # -- wiring
    fast = dict(concurrency_limit=None, show_progress="hidden")
    # Redraws and samples of part 1 take milliseconds; one queue keeps them in order, so a redraw
    # for an edit never lands after the Sample that followed it.
    toy = dict(concurrency_id="specviz-learn-toy", concurrency_limit=1, show_progress="hidden")
    preset.input(preset_rows, [preset], [table], **fast)
    rule_inputs = [table, rule, eps, delta]
    rule.change(on_rule, [rule], [typical_box, rule_note], **fast)
    for comp in (table, rule, eps, delta):
        comp.change(on_inputs, rule_inputs, [rule_plot, verdict], trigger_mode="always_last", **toy)
    sample_btn.click(on_sample, [table, rule, n, seed, eps, delta], [hist_plot, verdict, rule_plot], **toy)

    proposer.change(lambda p: gr.update(visible=p == DRAFT_MODEL), [proposer], [draft], queue=False)
    model_btn.click(on_model_sample, [target, proposer, draft, prefix, model_rule, temperature, top_p, model_n, model_seed],
                    [model_status, model_plot], concurrency_id="specviz-engine", concurrency_limit=engine_concurrency(),
                    show_progress="hidden")

    calc_inputs = [a, k, c, v, runs]
    for comp in (a, k, c, v):
        comp.change(on_calc, calc_inputs, [cards, calc_plot, runs_msg], trigger_mode="always_last", **fast)
    runs.change(on_calc, calc_inputs, [cards, calc_plot, runs_msg], trigger_mode="always_last", **fast)
    upload.upload(on_load_runs, [upload, runs], [runs, pick, loaded, a, k, c, v, runs_msg], **fast)
    pick.input(on_pick_run, [pick, loaded], [a, k, c, v, runs_msg], **fast)
    if playground_state is not None:
        add_pg.click(on_add_playground, [playground_state, runs], [runs, runs_msg], **fast)
    return LearnView(table, rule, sample_btn, verdict, model_btn, model_status, [a, k, c, v], cards)


__all__ = ["LearnDefaults", "LearnView", "build_learn_tab", "on_calc", "on_inputs", "on_load_runs", "on_model_sample",
           "on_pick_run", "on_sample", "preset_rows", "run_from_playground"]
