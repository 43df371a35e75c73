"""The "why this speedup?" card: a run's own a, k, c, v and tau turned into plain words.

A speedup is a ratio of two rates, so one sentence cannot explain it: the card says what the
drafts bought (tokens per target pass) and what they cost (draft tokens and a wider verify pass,
in target steps), and divides one by the other, with the run's own numbers:

    drafts were accepted 96% of the time, so each target pass committed 4.6 tokens instead of 1;
    but one draft token costs 0.50 of a target step here and the 5-token verify pass 1.70 steps,
    so a step costs 3.70 target steps for 4.6 tokens: about 1.24x.

What limits a run is decided in one place, :func:`specviz.analysis.metrics.ideal_gains` /
:func:`~specviz.analysis.metrics.limit_of` (the benchmark's readout, ``explain_row``, asks the
same functions); this card words it for one run.

Notation (as in :mod:`specviz.analysis.metrics`): ``a`` = accepted / drafted, ``tau`` = committed tokens /
steps, ``c`` = one draft token's cost and ``v`` = one verify round's cost, both in target-only
decode steps (``T``, measured on the target-only run). Without a target-only run, c and v are
unknown and the card says so instead of guessing.

Pure functions of numbers and records; no Gradio.
"""

from __future__ import annotations

import html
import statistics
from dataclasses import dataclass, field, replace
from typing import Mapping, Sequence

from ..analysis.metrics import ideal_gains, limit_of
from ..analysis.noise import SpeedupInterval, speedup_interval, stall_free
from ..core.records import Stats, StepRecord
from ..core.stepwords import StepCounts, run_counts

__all__ = [
    "SpeedupStory", "explain_speedup", "explain_run", "run_costs", "drafted_fraction", "v_curve_from_rows",
    "run_interval", "FASTER", "SLOWER",
]

FASTER = 1.05  # a speedup above this is "faster"
SLOWER = 0.95  # below this "slower"; in between "about even"


@dataclass(frozen=True)
class SpeedupStory:
    """What the card shows. ``limit`` names the factor that costs the most speed."""

    verdict: str  # "faster" | "even" | "slower" | "unknown" (no baseline) | "nothing drafted"
    limit: str | None  # "a" acceptance | "c" draft cost | "v" verify cost | "coverage" (n-gram misses) | "overhead" | None
    headline: str  # one sentence
    sentences: tuple[str, ...]  # the story, in order
    advice: str  # what to change, or "" when nothing would help
    predicted: float | None  # tau / (k' c + v): the decode loop's speedup from a, c, v
    measured: float | None  # tokens/s over the target-only run's tokens/s
    numbers: dict = field(default_factory=dict)  # a, k, c, v, tau, tokens, forwards, f, k_eff
    band: SpeedupInterval | None = None  # the measured speedup's bootstrap interval over the steps' timings
    lossy: bool = False  # typical acceptance: every number is the LOSSY rule's, said in the headline
    judged: float | None = None  # the speedup the verdict reads: ``measured``, or with stalled steps at their median

    @property
    def text(self) -> str:
        return " ".join((self.headline, *self.sentences, self.advice)).strip()

    def html(self) -> str:
        """The card as HTML (classes sv-why*, styled by lesson.css); every number is escaped text."""
        body = "".join(f"<li>{html.escape(s)}</li>" for s in self.sentences)
        advice = f'<p class="sv-why-advice">{html.escape(self.advice)}</p>' if self.advice else ""
        limit = f' data-limit="{self.limit}"' if self.limit else ""
        limit += ' data-lossy="true"' if self.lossy else ""
        limit += f' data-best-k="{self.numbers["best_k"]}"' if "best_k" in self.numbers else ""  # the what-if's star
        if self.measured is not None:
            limit += f' data-measured="{self.measured:.4f}"'
        if self.judged is not None and self.judged != self.measured:
            limit += f' data-stall-adjusted="{self.judged:.4f}"'
        if self.band is not None:
            b = self.band
            limit += (f' data-noise="{"within" if b.within_noise else "clear"}" data-low="{b.low:.4f}"'
                      f' data-high="{b.high:.4f}"')
        return (
            f'<div class="sv-why sv-why-{self.verdict.replace(" ", "-")}" data-verdict="{self.verdict}"{limit}>'
            f'<div class="sv-why-head">{html.escape(self.headline)}</div><ul class="sv-why-list">{body}</ul>{advice}</div>'
        )


def _n(count: int, one: str, many: str | None = None) -> str:
    """A whole count with its noun: "1 token", "2 tokens"."""
    return f"{count} {one if count == 1 else (many or one + 's')}"


def _tokens(tau: float) -> str:
    """tau tokens in words: "4.6 tokens", "1 token" (never "1.0 tokens")."""
    s = f"{tau:.1f}"
    if s.endswith(".0"):
        s = s[:-2]
    return f"{s} token" + ("" if s == "1" else "s")


def _x(v: float) -> str:
    return f"{v:.2f}x"


def _verdict(speed: float | None) -> str:
    if speed is None:
        return "unknown"
    return "faster" if speed >= FASTER else "slower" if speed < SLOWER else "even"


def explain_speedup(*, a: float | None, k: int, tau: float, tokens: int, target_forwards: int,
                    c: float | None = None, v: float | None = None, speedup: float | None = None,
                    drafted_fraction: float = 1.0, drafted_per_step: float | None = None,
                    proposer: str = "draft model", prefill_forwards: int = 1,
                    k_curve: Sequence[tuple[int, float]] = (), counts: StepCounts | None = None, band: SpeedupInterval | None = None,
                    temperature: float | None = None, lossy: bool = False) -> SpeedupStory:
    """The story of one run's speedup, in plain words.

    a: acceptance rate (accepted / drafted; None when nothing was drafted); k: the draft length
    asked for; tau: committed tokens / steps; tokens: committed tokens; target_forwards: target
    passes (prefill included); c, v: costs in target steps (None without a target-only run);
    speedup: measured tokens/s ratio against target-only (None if not measured yet);
    drafted_fraction: steps that drafted anything / steps (an n-gram misses some); drafted_per_step:
    drafted tokens / steps (default k x drafted_fraction); proposer: a short name ("int8 draft",
    "ngram") used in the advice; k_curve: [(k', predicted speedup)], the what-if chart's curve at
    this run's own a, c and f on this machine's measured v(k' + 1) (:func:`specviz.viz.whatif.whatif_curve`,
    the curve Learn part 5 draws at the same a, c and f): the card's best k is that curve's, so the
    card, the chart and Learn tell one story (issue 52), empty when v(k + 1) is not measured; band: the measured speedup's
    interval (:func:`specviz.analysis.noise.speedup_interval`): when it contains 1.0x the card says
    "within noise" and calls the run even; temperature: the run's (None: not known), so that a
    greedy run is never told to lower it; lossy: typical acceptance (LOSSY), said in the headline,
    since its speedup is not the exact rule's.
    """
    if k < 0 or tau < 0 or tokens < 0 or target_forwards < 0:
        raise ValueError("k, tau, tokens and target_forwards must be >= 0; pass the run's own Stats values")
    if not 0.0 <= drafted_fraction <= 1.0:
        raise ValueError(f"drafted_fraction (steps that drafted / steps) must be from 0 to 1, got {drafted_fraction!r}")
    plain = tokens + prefill_forwards  # target-only needs one pass per token (plus prefill)
    k_eff = k * drafted_fraction if drafted_per_step is None else drafted_per_step
    nums = dict(a=a, k=k, c=c, v=v, tau=tau, tokens=tokens, forwards=target_forwards, f=drafted_fraction, k_eff=k_eff)

    if k == 0 or a is None or k_eff == 0:
        head = ("Nothing was drafted, so every target pass committed exactly 1 token: this is target-only decoding"
                + (f" ({_x(speedup)} of the baseline: timing noise)." if speedup is not None else "."))
        return SpeedupStory("nothing drafted", None, head, (), "Choose a proposer and k >= 1 to speculate.",
                            None, speedup, nums)

    accepted = f"Drafts were accepted {a:.0%} of the time"
    if counts is not None and counts.tree and counts.depth:  # a tree: the path against the depth, as the chart
        accepted = (f"The accepted path covered {counts.rate:.0%} of the trees' depth (over the {counts.nodes_drafted} "
                    f"nodes drafted the rate is {counts.rate_over_nodes:.0%})")
    per_pass = (f"only {_tokens(tau)}, as a target-only step does" if round(tau, 1) <= 1.0
                else f"{_tokens(tau)} instead of 1")
    gained = (f"{accepted}, so each target pass committed {per_pass} ({_n(target_forwards, 'target pass', 'target passes')} "
              f"for {_n(tokens, 'token')}, where target-only needs {plain}).")
    sentences = [gained]
    if drafted_fraction < 0.999:
        sentences.append(
            f"The {proposer} drafted on only {drafted_fraction:.0%} of the steps; the others found nothing to "
            "propose and were plain target steps that commit 1 token.")
    if c is None or v is None:
        head = (f"{_tokens(tau)} per target pass; the speedup needs a target-only run."
                if speedup is None else f"Measured {_x(speedup)}; the cost of a step is unknown without target-only timings.")
        sentences.append("Whether that is faster depends on what drafting and the wider verify pass cost in target "
                         "steps; run target-only on the same prompt and settings to measure them.")
        limit = "coverage" if drafted_fraction < 0.5 else ("a" if a < 0.5 else None)
        return SpeedupStory("unknown" if speedup is None else _verdict(speedup), limit, _lossy_head(head, lossy),
                            tuple(sentences), "Press “Run target-only” to measure the speedup.", None, speedup, nums,
                            lossy=lossy)

    step_cost = k_eff * c + v
    if step_cost <= 0:
        raise ValueError(f"a step must cost > 0 target steps, got k' c + v = {step_cost!r}; check c and v")
    predicted = tau / step_cost
    draft_cost = (f"one draft token costs {c:.2f} of a target step here" if c >= 0.005
                  else "drafting costs next to nothing here")
    drafts = f"{k_eff:.1f} drafted tokens per step" if abs(k_eff - k) > 1e-9 else f"{k}"
    sentences.append(
        f"But {draft_cost} and the {k + 1}-token verify pass {v:.2f} steps, so a step costs "
        f"{drafts} x {c:.2f} + {v:.2f} = {step_cost:.2f} target steps for {_tokens(tau)}: "
        f"{tau:.2f} / {step_cost:.2f} = {_x(predicted)} in the decode loop.")

    # which factor, made ideal, would gain the most: a = 1, c = 0, v = 1, every step drafting
    gains = ideal_gains(tau, k_eff, c, v, drafted_fraction)
    limit = limit_of(gains)
    measured = speedup
    judged = _judged(measured, band)  # the measured ratio, or with stalled steps at their kind's median
    verdict = _verdict(judged if judged is not None else predicted)
    noisy = judged is not None and band is not None and band.within_noise
    if judged is not None and band is not None and band.stalled:
        sentences.append(_stall_sentence(measured, judged, band.stalled))
    said = _speedup_words(measured, judged, band.stalled if band is not None else 0)
    if noisy:
        verdict = "even"
        head = (f"{said}, within noise ({band.words()} over the steps' own timings): not told apart "
                "from target-only on this run.")
    elif judged is not None:
        spread = f" ({band.words()})" if band is not None else ""
        head = f"{said}{spread}: " + {"faster": "speculation pays here.", "even": "about even with target-only.",
                                      "slower": "slower than target-only."}[verdict]
        if predicted is not None and abs(judged - predicted) > 0.1 * predicted:
            sentences.append(_gap_sentence(judged, predicted, proposer))
    else:
        head = f"Expected about {_x(predicted)} (decode loop only); run target-only to measure it."
    head = _lossy_head(head, lossy)
    if judged is not None and judged < SLOWER and predicted >= FASTER:
        limit = "overhead"  # the decode loop pays; what is lost is outside it
    larger = bool(k_curve) and max(k_curve, key=lambda t: (t[1], -t[0]))[0] > k  # the what-if's star past this k
    advice = _advice(limit, verdict, a=a, k=k, c=c, v=v, proposer=proposer, gains=gains, tau=tau,
                     f=drafted_fraction, predicted=predicted, greedy=temperature is not None and temperature <= 0,
                     larger_k_pays=larger)
    advice = _best_k_advice(advice, limit, k, k_curve, nums)
    return SpeedupStory(verdict, limit, head, tuple(sentences), advice, predicted, measured, nums, band, lossy, judged)


def _judged(measured: float | None, band: SpeedupInterval | None) -> float | None:
    """The speedup the verdict reads: the band's (stalled steps at their kind's median) where steps
    stalled and it differs from the measured ratio as shown (two decimals), else the measured one."""
    if measured is None or band is None or not band.stalled or f"{band.speedup:.2f}" == f"{measured:.2f}":
        return measured
    return band.speedup


def _speedup_words(measured: float | None, judged: float | None, stalled: int) -> str:
    """The headline's speedup: the Speedup card's measured number first, then (where steps stalled
    and it differs) the stall-adjusted one the verdict reads: two numbers on one page, each named
    (issue 52: the card and the metric showed two speedups and never said why)."""
    if judged is None or judged == measured:
        return f"Speedup {_x(measured)}" if measured is not None else ""
    return (f"Speedup {_x(measured)} measured (the Speedup card); {_x(judged)} with the "
            f"{_n(stalled, 'stalled step')} counted at {'its' if stalled == 1 else 'their'} kind's median time")


def _stall_sentence(measured: float, judged: float, stalled: int) -> str:
    """How many steps stalled and what that did to the number the card judges by."""
    what = (f"{_n(stalled, 'step')} stalled (over twice the time of the run's other steps of its kind: the machine, "
            "not the method)")
    if judged == measured:
        return f"{what}; counted at {'its' if stalled == 1 else 'their'} kind's median time, the speedup is the same to two decimals."
    return (f"{what}. The Speedup card divides the two runs' tokens/s as they ran ({_x(measured)}); this card counts "
            f"{'that step' if stalled == 1 else 'each stalled step'} at its kind's median time ({_x(judged)}), and its "
            "verdict and interval are that number's.")


def _lossy_head(head: str, lossy: bool) -> str:
    """The headline of a typical-acceptance run: LOSSY first, since no number on the card is the exact rule's."""
    return f"LOSSY (typical acceptance, not the target's distribution): {head[0].lower()}{head[1:]}" if lossy else head


def _gap_sentence(measured: float, predicted: float, proposer: str) -> str:
    """Why the measured speedup is not the decode loop's: below it, the costs outside the loop; above
    it, those same costs and the noise happened to favour speculation (never told as a loss)."""
    if measured < predicted:
        return (f"Measured {_x(measured)}, below the {_x(predicted)} of the decode loop: the measurement also counts "
                f"{_prefill_words(proposer)}, the time between steps and timing noise.")
    return (f"Measured {_x(measured)}, above the {_x(predicted)} of the decode loop: what the two runs spend outside "
            f"it ({_prefill_words(proposer)}, the time between steps) and timing noise came out in speculation's "
            "favour this time.")


def _advice(limit: str, verdict: str, *, a: float, k: int, c: float, v: float, proposer: str, gains: dict,
            tau: float, f: float = 1.0, predicted: float | None = None, greedy: bool = False,
            larger_k_pays: bool = False) -> str:
    # greedy (T = 0) keeps a draft when it is the target's argmax: no temperature to lower; a smaller k keeps a
    # larger share but is not offered where the what-if's curve peaks at a larger k (the card would advise both ways)
    smaller_k = k > 1 and not larger_k_pays
    ways = ["a draft closer to the target"] + ([] if greedy else ["a lower temperature"]) + (["a smaller k"] if smaller_k else [])
    closer = ", ".join(ways[:-1]) + " or " + ways[-1] if len(ways) > 1 else ways[0]
    closer = f"{closer[0].upper()}{closer[1:]} keeps more of them."
    smaller = "Lower k or use" if smaller_k else "Use"  # at k = 1 there is no smaller k to take
    what = {
        "a": f"The limit is acceptance: {1 - a:.0%} of the drafts are thrown away. {closer}",
        "c": (f"The limit is the draft's cost: {_n(k, 'draft token')} cost{'s' if k == 1 else ''} {k * c:.2f} target steps a round (free drafts "
              f"would give {_x(gains['c'])}). {smaller} a cheaper proposer (ngram drafts for free)."),
        "v": (f"The limit is the verify pass: scoring {k + 1} tokens costs {v:.2f} decode steps on this machine "
              f"(at v = 1 it would give {_x(gains['v'])}). "
              + ("A smaller k keeps the pass narrow" if k > 1 else "At k = 1 the pass is as narrow as it gets")
              + "; a GPU makes it nearly free."),
        "coverage": (f"The limit is coverage: {1 - f:.0%} of the steps drafted nothing. Text that repeats itself "
                     "(code, extraction, quoting the prompt) gives the n-gram lookup more to draft, or use a draft model."),
        "overhead": (f"The limit is outside the decode loop, which alone runs at {_x(predicted or 0.0)}: "
                     f"{_overhead_costs(proposer)}. A longer generation amortizes them."),
    }[limit]
    if verdict == "faster":
        return f"It pays. {what.replace('The limit is', 'What limits it most is', 1)}"
    return what


def _overhead_costs(proposer: str) -> str:
    """The costs outside the decode loop that ``proposer`` has (an n-gram has no model to prefill)."""
    name = proposer.partition(":")[0].strip().lower()
    if (name.startswith(("ngram", "n-gram")) and "draft" not in name) or name in ("prompt lookup", "lookup"):
        return "the target's prefill and the time between steps (the n-gram lookup has no model to prefill)"
    if name in ("early-exit", "early exit", "layerskip"):
        return "the target's prefill and the time between steps (early exit drafts with the target's own layers)"
    return "the prefill (a draft model reads the prompt too) and the time between steps"


def _prefill_words(proposer: str) -> str:
    return "the prefill (the draft's too)" if _overhead_costs(proposer).startswith("the prefill (a draft") else "the prefill"


def _best_k_advice(advice: str, limit: str, k: int, k_curve: Sequence[tuple[int, float]], nums: dict) -> str:
    """The advice with the what-if curve's best k (``k_curve``, see :func:`explain_speedup`) in it:
    a verify-limited run is told to lower k only where that curve says a smaller k pays; without a
    measured curve the card says v(k + 1) is unmeasured rather than promise a narrower pass that the
    chart (one v at every k) cannot show."""
    if not k_curve:
        if limit == "v" and k > 1:
            advice = advice.replace("A smaller k keeps the pass narrow", "A smaller k may keep the pass narrower, but how "
                                    "v grows with k is not measured here (the Benchmark tab's Advisor measures it; "
                                    "until then the what-if below holds this run's v at every k)")
        return advice
    kb, sb = max(k_curve, key=lambda t: (t[1], -t[0]))
    now = dict(k_curve).get(k)
    nums["best_k"] = kb
    if limit == "v" and kb >= k:  # this machine's v(k + 1): a smaller k would not pay more
        advice = advice.replace("A smaller k keeps the pass narrow", f"On this machine's v(k + 1), k = {kb} is "
                                "still the best k for these drafts (the what-if's star)")
    if kb != k and now is not None and sb > now * 1.05:
        advice += (f" The what-if below (this run's a, c and drafting share on this machine's measured v(k + 1), "
                   f"as Learn part 5 draws it) peaks at k = {kb}: about {_x(sb)} (k = {k}: {_x(now)}).")
    elif kb != k:
        advice += f" The what-if below peaks at k = {kb}, within 5% of k = {k}."
    return advice


def v_curve_from_rows(rows: Sequence[Mapping]) -> dict[int, float]:
    """The machine's verify cost per k (median v over a bench report's specviz summary rows at
    that k): what a (k+1)-token pass costs in target steps, whatever proposed the drafts."""
    by_k: dict[int, list[float]] = {}
    for r in rows:
        if r.get("impl") == "specviz" and r.get("k") and isinstance(r.get("v"), (int, float)):
            by_k.setdefault(int(r["k"]), []).append(float(r["v"]))
    return {k: statistics.median(vs) for k, vs in sorted(by_k.items())}


def _budget_cut(s: StepRecord) -> bool:
    """A last step that could not draft: one token was left before max new tokens (k was cut to 0)."""
    return s.k == 0 and s.finished == "length"


def drafted_fraction(steps: Sequence[StepRecord]) -> float:
    """Steps that drafted at least one token / steps that could draft (1.0 for a draft model; less
    for an n-gram). A last step with one token left before max new tokens could not draft and is
    not counted."""
    could = [s for s in steps if not _budget_cut(s)]
    if not could:
        return 0.0 if not steps else 1.0
    return sum(1 for s in could if s.k > 0) / len(could)


def run_costs(stats: Stats, baseline: Stats | None) -> tuple[float | None, float | None]:
    """(c, v) of a run against a target-only run: c = draft ms per drafted token / T,
    v = (verify + other) ms per step / T, T = target-only ms per step. (None, None) without one."""
    if baseline is None or baseline.steps <= 0 or stats.steps <= 0:
        return None, None
    t = (baseline.draft_ms + baseline.verify_ms + baseline.other_ms) / baseline.steps
    if t <= 0:
        return None, None
    c = (stats.draft_ms / stats.drafted) / t if stats.drafted else None
    v = ((stats.verify_ms + stats.other_ms) / stats.steps) / t
    return c, v


def run_interval(steps: Sequence[StepRecord], stats: Stats, baseline_steps: Sequence[StepRecord],
                 baseline: Stats | None) -> SpeedupInterval | None:
    """The run's speedup over its target-only run with a bootstrap interval over both runs' steps
    (:func:`specviz.analysis.noise.speedup_interval`, prefill held fixed); None without both. A
    step a stall hit (over twice its kind's other steps, :func:`specviz.analysis.noise.stall_free`,
    the bench's rule per step) counts at its kind's median time, and ``stalled`` says how many."""
    if baseline is None or not steps or not baseline_steps:
        return None
    spec_ms, spec_hit = stall_free([s.total_ms for s in steps], [s.k for s in steps])
    base_ms, base_hit = stall_free([s.total_ms for s in baseline_steps], [s.k for s in baseline_steps])
    try:
        band = speedup_interval([s.n_committed for s in steps], spec_ms, [s.n_committed for s in baseline_steps], base_ms,
                                spec_fixed_ms=stats.prefill_ms, base_fixed_ms=baseline.prefill_ms)
    except ValueError:
        return None
    return replace(band, stalled=len(spec_hit) + len(base_hit))


def explain_run(steps: Sequence[StepRecord], stats: Stats, baseline: Stats | None = None, *, k: int,
                proposer: str = "draft model", k_curve: Sequence[tuple[int, float]] = (),
                baseline_steps: Sequence[StepRecord] = (), temperature: float | None = None,
                lossy: bool = False) -> SpeedupStory:
    """The card for a playground run: its steps and Stats, and a finished target-only run's Stats
    (same target, prompt and settings) if there is one; with its steps (``baseline_steps``) the
    speedup gets its noise band (:func:`run_interval`). ``k_curve``: the what-if chart's curve for this
    run on this machine's measured v(k' + 1) (see :func:`explain_speedup`): the card's best k is its."""
    c, v = run_costs(stats, baseline)
    speed = None
    if baseline is not None and baseline.tokens_per_s > 0 and stats.tokens_per_s > 0:
        speed = stats.tokens_per_s / baseline.tokens_per_s
    prefill = max(1, stats.target_forwards - stats.steps)
    band = run_interval(steps, stats, baseline_steps, baseline) if speed is not None else None
    return explain_speedup(
        a=stats.acceptance_rate if stats.drafted else None, k=k, tau=stats.mean_acceptance_length,
        tokens=stats.new_tokens, target_forwards=stats.target_forwards, c=c, v=v, speedup=speed,
        drafted_fraction=drafted_fraction(steps) if steps else 1.0,
        drafted_per_step=(stats.drafted / stats.steps) if stats.steps else None, proposer=proposer,
        prefill_forwards=prefill, k_curve=k_curve, counts=run_counts(steps),
        band=band, temperature=temperature, lossy=lossy,
    )
