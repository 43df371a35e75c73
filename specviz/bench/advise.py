"""``specviz advise``: calibrate, predict every configuration's speedup on this machine, rank, and
(optionally) run the top few for real through the sweep to show predicted against measured.

    advice = advise(target, ["ngram", "draft:gemma-3-270m@int8", "ngram-tree:3"], prompts, cache_dir=...)
    print(format_advice(advice))  # specviz.bench.advice_out
    runs = run_top(target, advice, 3, prompts, BenchConfig(...))

Steps: the cost model (:mod:`specviz.analysis.costmodel`, cached per machine); acceptance; the
forecasts (:mod:`specviz.analysis.advisor`, trees shaped by :mod:`specviz.analysis.treeshape`); and
the shapes it chose, saved for ``shape=auto`` (``proposers.ngram_tree.advised_shapes_path``).

Acceptance, greedy (:func:`calibrate_by_replay`): each prompt is decoded once (an exact run of the
n-gram chain at k = 8, so the target's greedy output) and every proposer is replayed against that
decode (:mod:`specviz.analysis.replay`): chains at every k, ``ngram-tree`` at 64 nodes (its
per-depth/per-rank acceptance) and at every shape it forecasts, draft models through one
teacher-forced forward. Prompt lookup (``ngram``, ``ngram-tree``, ``ngram+draft``) is replayed on
the prompts that will run (``run_prompts``, else the prompts given), since what it accepts depends
on the prompt itself, so each of them is decoded (up to :data:`REPLAY_PROMPTS`), not only enough
of them for ``min_drafted`` drafts. Sampled (:func:`calibrate`): a calibration run of each
candidate at k = 8 on the prompts (prompt lookup on ``run_prompts``): chains, per-position acceptance; ``ngram-tree``, its own trees at 64
nodes; ``draft-tree:NAME``, the draft's argmax chain and the rank of the target's token in its
top-10.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

from ..analysis import advisor as A
from ..analysis import replay as R
from ..analysis import runcost
from ..analysis.costmodel import CostModel, context_for, load_or_measure
from ..analysis.treeshape import decode as decode_shape
from ..core.engine import SpeculativeDecoder, encode_prompt
from ..core.records import Sampling
from ..core.schedules import ConfidenceK, changes_nothing, make_schedule, stops_early
from ..prompts import PromptRow
from ..proposers.draft_model import same_weights
from ..proposers.hybrid import NGramOrDraft
from ..proposers.ngram import NGram
from ..proposers.ngram_tree import NGramTree
from ..proposers.registry import check_spec, from_spec, shape_base
from .config import TARGET_ONLY, BenchConfig
from .sweep import Sweep

__all__ = ["Candidate", "Advice", "plan", "calibrate", "calibrate_by_replay", "Replayed", "lookup_family", "advise", "run_top",
           "compare_run", "CALIBRATION_K", "CALIBRATION_TREE_NODES"]

CALIBRATION_K = 8  # drafts per step while calibrating (predictions cover k = 1..this)
CALIBRATION_TREE_NODES = 64  # an n-gram trie's budget while calibrating (its ranks, not its size, are measured)
MAX_TREE_NODES = 16  # the advisor's trees (its cost curve covers 17 positions)
# prompt lookup's greedy replay decodes every prompt that will run up to this many: what it accepts
# changes from one prompt to the next (tau 1.4 to 3.8 among four held-out prompts on a Zen 4),
# and stopping at min_drafted had left out the most repetitive one (ngram predicted 36% low)
REPLAY_PROMPTS = 16

Say = Callable[[str], None]


@dataclass
class Candidate:
    """A proposer spec the user asked about, and how it is calibrated and costed."""

    spec: str  # as given
    kind: str  # "ngram" | "draft" | "chain" | "ngram-tree" | "draft-tree"
    calibrate_spec: str  # the spec run during calibration
    proposer: Any = None  # the calibration proposer
    draft: Any = None  # the draft LoadedModel (draft, draft-tree)
    shares_prompt: bool = False  # its draft is the target's own weights: no prefill of its own (take_target_prompt)
    base: str = ""  # trees: the spec without its shape (what shape=auto looks up)
    schedule: str = "constant"  # the k schedule it runs under: constant, or confidence:T for a chain that stops on q

    @property
    def stop(self) -> float | None:
        """A confidence schedule's threshold where this candidate stops on it (None: constant k)."""
        return make_schedule(self.schedule).threshold if self.schedule != "constant" else None


@dataclass
class Advice:
    target: str
    cost: CostModel
    cost_cached: bool
    candidates: list[Candidate]
    calibrations: dict[str, Any]  # spec -> ChainCalibration | RankCalibration
    forecasts: list[A.Forecast]  # ranked
    verdicts: list[str]
    notes: list[str] = field(default_factory=list)
    shapes: dict[str, str] = field(default_factory=dict)  # tree base spec -> the best shape ("0": none pays)
    budgets: dict[str, A.TreeBudget] = field(default_factory=dict)  # tree spec -> its tree-budget curve
    prompts: int = 0
    prompt_tokens: float = 0.0  # mean prompt length of the prompts the configurations run
    max_new_tokens: int = 64
    by_k: dict[str, dict[int, A.ChainCalibration]] = field(default_factory=dict)  # replay: a chain's counts at each k
    method: str = "runs"  # "replay" (greedy: every proposer replayed on one decode) or "runs" (a calibration run each)
    replay: dict[str, Any] = field(default_factory=dict)  # the replay's decodes: proposer, prompts, seconds, self-check
    tree_replay: Callable[[Candidate, str, int], A.Replayed | None] | None = None  # replay: (tree, shape, k) -> its exact run
    schedule: str = "constant"  # the k schedule the draft chains were advised under

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target, "machine": self.cost.machine, "cost": self.cost.to_dict(), "curves": self.cost.curves(),
            "cost_cached": self.cost_cached, "calibration": {s: c.to_dict() for s, c in self.calibrations.items()},
            "calibration_method": self.method, "replay": self.replay,
            "calibration_by_k": {s: {k: c.to_dict() for k, c in by.items()} for s, by in self.by_k.items()},
            "forecasts": [f.to_dict() for f in self.forecasts], "verdicts": self.verdicts, "notes": self.notes,
            "shapes": self.shapes, "prompts": self.prompts, "max_new_tokens": self.max_new_tokens,
            "tree_budgets": {s: b.to_dict() for s, b in self.budgets.items()}, "schedule": self.schedule,
        }


def plan(specs: Sequence[str], target, load=None, schedule: str = "constant") -> list[Candidate]:
    """Each spec as a Candidate with its calibration proposer built (ValueError for a bad spec,
    a draft with another tokenizer, a target that cannot take trees, a schedule the advisor cannot
    price). ``schedule``: ``constant`` or ``confidence:T``, the latter for the chains that stop on
    the draft's q (a draft model, ``ngram+draft``); the rest run constant k under it anyway."""
    schedule = advisable_schedule(schedule)
    out: list[Candidate] = []
    for spec in specs:
        prefix, arg = check_spec(spec)
        if prefix == "none":
            continue
        if prefix == "auto":
            raise ValueError("auto is the advisor's own pick: name the proposers to advise on (e.g. ngram, draft:NAME)")
        if prefix == "ngram-tree":
            base = shape_base(spec)
            cand = Candidate(spec, "ngram-tree", f"{base},nodes={CALIBRATION_TREE_NODES}", base=base)
        elif prefix == "draft-tree":
            base = shape_base(spec)
            name_opts = base.removeprefix("draft-tree:")
            cand = Candidate(spec, "draft-tree", f"draft:{name_opts},policy=argmax", base=base)
        else:
            cand = Candidate(spec, {"ngram": "ngram", "draft": "draft"}.get(prefix, "chain"), spec)
        cand.proposer = from_spec(cand.calibrate_spec, target, load=load)
        cand.draft = getattr(cand.proposer, "model", None) if cand.kind in ("draft", "draft-tree") else None
        cand.shares_prompt = _shares_prompt(cand.proposer, target)
        if cand.kind in ("draft", "chain") and changes_nothing(make_schedule(schedule), cand.proposer) is None:
            cand.schedule = schedule
        if prefix == "draft-tree":  # a tree target must take a tree mask (the draft's own check comes at run time)
            from ..runtime.kv import check_tree_support

            check_tree_support(target.model)
        out.append(cand)
    if not out:
        raise ValueError("give at least one proposer to advise on (--proposer SPEC), e.g. ngram or draft:NAME")
    return out


def advisable_schedule(schedule: str | None) -> str:
    """``constant`` or ``confidence:T`` as the advisor prices them (a ValueError for another
    schedule: the heuristic's k moves with the last step, which the forecasts do not model)."""
    sched = make_schedule(schedule or "constant")
    if isinstance(sched, ConfidenceK):
        return f"confidence:{sched.threshold:g}"
    if stops_early(sched) or sched.name != "constant":
        raise ValueError(f"the advisor prices the constant and confidence:T schedules, not {schedule!r}")
    return "constant"


def lookup_family(cand: Candidate) -> bool:
    """Prompt lookup (``ngram``, ``ngram-tree``, ``ngram+draft``): what it accepts depends on how much
    the prompt itself repeats, so it is calibrated on the prompts that will run."""
    return cand.kind in ("ngram", "ngram-tree") or isinstance(cand.proposer, NGramOrDraft)


def _prompts_for(cand: Candidate, prompts, run_prompts):
    return run_prompts if run_prompts is not None and lookup_family(cand) else prompts


def calibrate(target, candidates: Sequence[Candidate], prompts: Sequence[PromptRow], *, k: int = CALIBRATION_K,
              min_drafted: int = 300, max_new_tokens: int = 64, sampling: Sampling = Sampling(), chat: bool = True,
              seed: int = 0, say: Say | None = None, run_prompts: Sequence[PromptRow] | None = None) -> dict[str, Any]:
    """spec -> its calibration counts: each candidate's calibration proposer at ``k`` on the
    prompts in turn until it has drafted ``min_drafted`` positions (a tree: its depth per step)
    on every kind (category) of prompt given, or the prompts run out; prompt lookup on
    ``run_prompts`` when given."""
    runs_by: dict[tuple[str, int], tuple[list[list[Any]], float]] = {}
    out: dict[str, Any] = {}
    for cand in candidates:
        rows = _prompts_for(cand, prompts, run_prompts)
        key = (cand.calibrate_spec, cand.schedule, id(rows))
        if key not in runs_by:
            t0 = time.perf_counter()
            records = "full" if cand.kind == "draft-tree" else "lean"  # a draft tree's ranks read the draft's top-10 of q
            runs, _, drafted = _run(target, cand.proposer, rows, k, min_drafted, max_new_tokens, sampling, chat, seed, records,
                                    cand.schedule)
            runs_by[key] = (runs, time.perf_counter() - t0)
            if say:
                under = "" if cand.schedule == "constant" else f" under {cand.schedule}"
                say(f"calibrated {cand.calibrate_spec}{under}: {drafted} positions drafted on {len(runs)} prompts "
                    f"in {runs_by[key][1]:.1f} s")
        out[cand.spec] = _counts(cand, runs_by[key][0], k, max_new_tokens)
    return out


def _counts(cand: Candidate, runs, k: int, max_new_tokens: int):
    """The advisor's counts from a candidate's step records (the engine's or a replay's) at k."""
    if cand.kind == "ngram-tree":
        return A.rank_calibration_from_tree(cand.spec, runs, k, max_new_tokens=max_new_tokens)
    if cand.kind == "draft-tree":
        return A.rank_calibration_from_chain(cand.spec, runs, k, max_new_tokens=max_new_tokens)
    return A.chain_calibration(cand.spec, runs, k, max_new_tokens=max_new_tokens)


def _run(target, proposer, prompts, k, min_drafted, max_new_tokens, sampling, chat, seed, records="lean",
         schedule="constant"):
    """``proposer`` at k (under ``schedule``) on the prompts in turn until it has drafted
    ``min_drafted`` positions and seen every kind of prompt; -> (step records per prompt, the
    finished sessions, positions drafted)."""
    decoder = SpeculativeDecoder(target, proposer, k=k, sampling=sampling, schedule=schedule)
    runs, sessions, drafted = [], [], 0
    kinds, seen = {row.category for row in prompts}, set()
    for row in prompts:
        session = decoder.start(row.prompt, max_new_tokens=max_new_tokens, seed=seed, chat=chat, records=records)
        while not session.done:
            session.step()
        runs.append(list(session.steps))
        sessions.append((session, row.category))
        drafted += sum(_positions(s) for s in session.steps)
        seen.add(row.category)
        if drafted >= min_drafted and seen >= kinds:  # enough drafts, and every kind of prompt at least once
            break
    return runs, sessions, drafted


# -- greedy: one decode, every proposer replayed -------------------------------------------------


@dataclass
class Replayed:
    """The greedy decodes the replay reads, per prompt set, and the drafts' teacher-forced rows."""

    target: Any
    runs: dict[int, list[R.Decoded]] = field(default_factory=dict)  # id(prompt set) -> its decodes
    rows: dict[tuple[str, int], list[R.DraftRows]] = field(default_factory=dict)  # (draft, id(prompt set)) -> rows
    info: list[dict[str, Any]] = field(default_factory=list)  # per decode: proposer, prompts, seconds, self-check
    steps: list[tuple[bool, list]] = field(default_factory=list)  # per decode: (drafted with n-grams, step records per prompt)
    cost: Any = None  # the cost model anchored to these decodes (_anchored), which every replayed price uses
    ratios: dict[int, float] = field(default_factory=dict)  # width -> the decodes' pass over the cost model's

    def draft_rows(self, draft, key: int) -> list[R.DraftRows]:
        if (str(draft.name), key) not in self.rows:
            self.rows[(str(draft.name), key)] = R.draft_rows(draft, self.runs[key], R.vocab_of(self.target), target=self.target)
        return self.rows[(str(draft.name), key)]


def _draft_of(proposer):
    """The draft LoadedModel a replay of ``proposer`` teacher-forces (None: an n-gram)."""
    return getattr(proposer, "model", None) if not isinstance(proposer, (NGram, NGramTree)) else None


def _shares_prompt(proposer, target) -> bool:
    """Whether ``proposer``'s draft starts from the target's prompt states, as the engine starts it
    (a draft of the target's own weights: ``draft_model.take_target_prompt``)."""
    draft = _draft_of(proposer)
    return draft is not None and hasattr(proposer, "share_prompt") and same_weights(draft, target)


def calibrate_by_replay(target, candidates: Sequence[Candidate], prompts: Sequence[PromptRow], cost: CostModel, *,
                        ks: Sequence[int], min_drafted: int = 300, max_new_tokens: int = 64, chat: bool = True, seed: int = 0,
                        say: Say | None = None, run_prompts: Sequence[PromptRow] | None = None):
    """Greedy acceptance from one decode per prompt: -> (spec -> counts at max k, chain spec -> {k:
    counts}, the :class:`Replayed` decodes). Each prompt set (``run_prompts`` for prompt lookup,
    ``prompts`` for the rest) is decoded by an exact greedy run (the first n-gram or draft chain
    asked about, else the plain n-gram) at max k: a set prompt lookup reads, every prompt (up to
    :data:`REPLAY_PROMPTS`); another, until it has drafted ``min_drafted`` positions on every kind
    of prompt. The replay of that proposer must give back the decode's own steps (the
    self-check in ``info``). A proposer the replay cannot follow is run as :func:`calibrate` does."""
    k = max(ks)
    rep = Replayed(target)
    fallback = [c for c in candidates if not R.replayable(c.proposer)]
    sets: dict[int, Sequence[PromptRow]] = {}
    for cand in candidates:
        if cand not in fallback:
            rows = _prompts_for(cand, prompts, run_prompts)
            sets.setdefault(id(rows), rows)
    for key, rows in sets.items():
        group = [c for c in candidates if c not in fallback and id(_prompts_for(c, prompts, run_prompts)) == key]
        chains = [c.proposer for c in group if c.kind in ("ngram", "draft") and R.replayable(c.proposer)]
        chains.sort(key=lambda p: not isinstance(p, NGram))  # the n-gram first: it needs no draft model
        decoder = chains[0] if chains else NGram()
        every = any(lookup_family(c) for c in group)  # prompt lookup: each prompt that runs, up to REPLAY_PROMPTS
        t0 = time.perf_counter()
        records, sessions, _ = _run(target, decoder, rows[:REPLAY_PROMPTS] if every else rows, k,
                                    float("inf") if every else min_drafted, max_new_tokens, R.GREEDY, chat, seed)
        rep.runs[key] = [R.decoded(sess, cat) for sess, cat in sessions]
        rep.steps.append((isinstance(decoder, NGram), records))
        seconds = time.perf_counter() - t0
        draft = _draft_of(decoder)
        again = R.replay(decoder, rep.runs[key], k, rep.draft_rows(draft, key) if draft is not None else None,
                         shared_prompt=_shares_prompt(decoder, target))
        same = sum(R.summary([a]) == R.summary([b]) for a, b in zip(again, records))
        rep.info.append({"decoded_with": getattr(decoder, "name", "ngram"), "k": k, "prompts": len(records),
                         "new_tokens": sum(len(r.new_ids) for r in rep.runs[key]), "seconds": seconds,
                         "replay_reproduced": same, "for": [c.spec for c in group]})
        if say:
            say(f"decoded {len(records)} prompts greedily with {rep.info[-1]['decoded_with']} k={k} in {seconds:.1f} s "
                f"(its replay gave back {same} of {len(records)} decodes step for step)")
    cost = rep.cost = _anchored(cost, rep)  # before ngram+draft's replayed steps are priced with it
    cals: dict[str, Any] = {}
    by_k: dict[str, dict[int, A.ChainCalibration]] = {}
    if fallback:
        cals.update(calibrate(target, fallback, prompts, k=k, min_drafted=min_drafted, max_new_tokens=max_new_tokens,
                              sampling=R.GREEDY, chat=chat, seed=seed, say=say, run_prompts=run_prompts))
    t0 = time.perf_counter()
    for cand in candidates:
        if cand in fallback:
            continue
        key = id(_prompts_for(cand, prompts, run_prompts))
        draft = _draft_of(cand.proposer)
        rows = rep.draft_rows(draft, key) if draft is not None else None
        if cand.kind in ("ngram-tree", "draft-tree"):
            cals[cand.spec] = _counts(cand, R.replay(cand.proposer, rep.runs[key], k, rows), k, max_new_tokens)
            continue
        by_k[cand.spec] = {}
        for kk in ks:
            steps = R.replay(cand.proposer, rep.runs[key], kk, rows, shared_prompt=cand.shares_prompt, stop=cand.stop)
            if isinstance(cand.proposer, NGramOrDraft):
                steps = _hybrid_costed(steps, cost, draft, cand.shares_prompt)
            by_k[cand.spec][kk] = _counts(cand, steps, kk, max_new_tokens)
        cals[cand.spec] = by_k[cand.spec][k]
    if say:
        say(f"replayed {len(candidates) - len(fallback)} proposers at k = {min(ks)}..{k} in {time.perf_counter() - t0:.1f} s")
    return cals, by_k, rep


def _hybrid_costed(runs, cost: CostModel, draft, shares_prompt: bool = False):
    """ngram+draft's replayed steps with their drafting time from the cost model: the n-gram lookup
    as timed in the replay, and on a draft step the draft's catch-up feed (the first: its prefill,
    as a calibration run's draft time has it, unless the draft starts from the target's prompt
    states) and k - 1 one-token steps (an estimate: the cost model's feeds are of 1-3 tokens, longer
    ones extrapolated)."""

    d = cost.drafts.get(str(draft.name))
    if d is None:
        return runs
    out = []
    for steps in runs:
        first, new = not shares_prompt, []
        for s in steps:
            ms = s.draft_ms
            if s.source == "draft" and s.k:
                feed = d.prefill_s * s.feed / max(1, cost.context) if first else d.feed(s.feed)
                ms += 1e3 * (feed + (s.k - 1) * d.step_s + d.switch_s)  # and the target's pass after it
                first = False
            new.append(replace(s, draft_ms=ms))
        out.append(new)
    return out


def _exact_tree_replay(target, rep: Replayed, prompts, run_prompts, max_new_tokens: int, load=None):
    """(candidate, shape, k) -> a static tree of that shape replayed on the decodes (exact for
    greedy): its tau and the nodes each step offered; None where the replay has no decodes for it."""

    def run(cand: Candidate, shape: str, k: int) -> A.Replayed | None:
        key = id(_prompts_for(cand, prompts, run_prompts))
        if key not in rep.runs or not R.replayable(cand.proposer):
            return None
        if cand.kind == "ngram-tree":
            steps = R.replay(from_spec(_shape_spec(cand, shape), target, load=load), rep.runs[key], k)
        else:
            steps = R.replay_draft_tree(rep.draft_rows(cand.proposer.model, key), rep.runs[key],
                                        decode_shape(shape).rank_paths(), k)
        return A.replayed(steps, k, max_new_tokens)

    return run


def _positions(s) -> int:
    """Draft positions a step offered: its drafts (a chain) or its depth (a tree: 64 nodes are not 64 positions)."""
    return max((x.depth for x in s.tree), default=0) if s.tree else s.k


def _shape_spec(cand: Candidate, shape: str) -> str:
    return f"{cand.base},shape={shape}"


def _forecast(cand: Candidate, cal, cost: CostModel, ks: Sequence[int], notes: list[str], shapes: dict[str, str],
              budgets: dict[str, A.TreeBudget], by_k: dict[int, A.ChainCalibration] | None = None,
              tree_replay=None) -> list[A.Forecast]:
    draft = str(cand.draft.name) if cand.draft is not None else None
    if cand.kind in ("ngram-tree", "draft-tree"):
        if not any(any(row) for row in cal.kept):
            notes.append(f"{cand.spec}: the calibration kept no tree node (nothing drafted matched the target), "
                         "so it predicts no tokens beyond the target's own.")
        lookup = (cal.draft_ms / 1e3 / cal.steps) if cand.kind == "ngram-tree" and cal.steps else None
        fs, best = A.forecast_trees(cal, cost, cand.kind, lambda s: _shape_spec(cand, s), ks, MAX_TREE_NODES, draft, lookup)
        if tree_replay is not None:  # greedy replay: each shape's own tau and tree sizes on the decodes, not the models'
            fs = [A.with_replay(f, tree_replay(cand, f.shape, f.k), cost) for f in fs]
            top = A.rank(fs)[0] if fs else None  # shape=auto: the fastest of them, if it beats target-only
            best = decode_shape(top.shape) if top is not None and top.speedup > 1.0 else decode_shape("0")
        shapes[cand.base] = best.text if best.nodes else "0"
        budgets[cand.spec] = A.tree_budget(cal, cost, cand.kind, cand.spec, MAX_TREE_NODES, max(ks), draft, lookup)
        if not best.nodes:
            notes.append(f"{cand.spec}: no tree shape beats target-only decoding here (the dynamic program's best is "
                         "the empty tree).")
        return fs
    if not cal.drafted_tokens:
        why = " (no n-gram of the context repeated)" if cand.kind == "ngram" else ""
        notes.append(f"{cand.spec}: the calibration drafted nothing on {cal.steps} steps{why}; "
                     "give prompts where it can draft (--prompts FILE) or drop it.")
    kind = cand.kind if cand.kind != "draft" or draft in cost.drafts else "chain"
    by_k = by_k or {}
    fs = [A.predict_chain(by_k.get(k, cal), cost, k, kind, draft, spec=cal.proposer) for k in ks if k <= cal.k]
    if cand.schedule != "constant":  # run under a confidence stop: the sweep and the ranking say so
        fs = [replace(f, extra={**f.extra, "schedule": cand.schedule}) for f in fs]
    if kind == "draft" and fs and cost.drafts[draft].step_s >= cost.t(1):
        notes.append(f"{cand.spec}: one draft step costs {cost.drafts[draft].step_s / cost.t(1):.2f} target steps "
                     "here, too slow to pay at any k whatever it accepts.")
    return fs


def advise(target, specs: Sequence[str], prompts: Sequence[PromptRow], *, cache_dir=None, load=None, ks: Sequence[int] = tuple(range(1, 9)),
           min_drafted: int = 300, max_new_tokens: int = 64, sampling: Sampling = Sampling(), chat: bool = True,
           seed: int = 0, refresh: bool = False, say: Say | None = None, cost_options: dict[str, Any] | None = None,
           run_prompts: Sequence[PromptRow] | None = None, replay: bool | None = None, schedule: str = "constant") -> Advice:
    """Calibrate ``specs`` on ``prompts``, measure (or read) the cost model, forecast every
    configuration at every k in ``ks`` and rank them. ``run_prompts``: the prompts the
    configurations will run on, when not ``prompts`` (prompt lookup is calibrated on them).
    ``replay`` (default: under greedy decoding): acceptance from one greedy decode per prompt,
    every proposer replayed on it (:func:`calibrate_by_replay`); else a calibration run each.
    ``schedule``: ``constant`` or ``confidence:T``, under which the draft chains are calibrated
    (replayed with the stop, or run with it) and priced at the drafts they make."""
    if not prompts:
        raise ValueError("no prompts to calibrate on: give --prompts FILE or a --category with prompts")
    if run_prompts is not None and not run_prompts:
        run_prompts = None
    replay = sampling.greedy if replay is None else replay
    if replay and not sampling.greedy:
        raise ValueError("the replay calibration needs greedy decoding (temperature 0)")
    schedule = advisable_schedule(schedule)  # "constant" or "confidence:T", as the ranking and the sweep name it
    candidates = plan(specs, target, load, schedule)
    ran = run_prompts if run_prompts is not None else prompts
    lengths = [len(encode_prompt(target.tokenizer, p.prompt, chat=chat)) for p in ran]
    context = context_for(lengths, max_new_tokens)
    drafts = {str(c.draft.name): c.draft for c in candidates if c.draft is not None}
    drafts.update({str(c.proposer.model.name): c.proposer.model for c in candidates if isinstance(c.proposer, NGramOrDraft)})
    t0 = time.perf_counter()
    tree_drafts = {str(c.draft.name) for c in candidates if c.kind == "draft-tree"}  # only these need level costs
    cost, cached = load_or_measure(target, cache_dir, context=context, drafts=list(drafts.values()), refresh=refresh,
                                   sampling=sampling, levels=tree_drafts, **(cost_options or {}))
    if say:
        say(f"cost model {'read from the cache' if cached else 'measured'} in {time.perf_counter() - t0:.1f} s")
    notes: list[str] = [n for n in (cost.static_decode, cost.busy) if n]
    if any(c.schedule != "constant" for c in candidates):
        notes.append(f"the draft chains ({', '.join(c.spec for c in candidates if c.schedule != 'constant')}) are advised "
                     f"under {schedule}: each step stops drafting after the first draft whose top "
                     "probability is below the threshold; the pick saved for auto is the best at constant k.")
    by_k: dict[str, dict[int, A.ChainCalibration]] = {}
    tree_replay, info = None, []
    if replay:
        cals, by_k, rep = calibrate_by_replay(target, candidates, prompts, cost, ks=ks, min_drafted=min_drafted,
                                              max_new_tokens=max_new_tokens, chat=chat, seed=seed, say=say,
                                              run_prompts=run_prompts)
        tree_replay, info = _exact_tree_replay(target, rep, prompts, run_prompts, max_new_tokens, load), rep.info
        notes += [_replay_note(i) for i in info]
        if rep.ratios:
            notes.append(runcost.words(rep.ratios, sum(len(r) for _, d in rep.steps for r in d)))
        cost = rep.cost or cost
    else:
        cals = calibrate(target, candidates, prompts, k=max(ks), min_drafted=min_drafted, max_new_tokens=max_new_tokens,
                         sampling=sampling, chat=chat, seed=seed, say=say, run_prompts=run_prompts)
    shapes: dict[str, str] = {}
    budgets: dict[str, A.TreeBudget] = {}
    forecasts: list[A.Forecast] = []
    for cand in candidates:
        forecasts += _forecast(cand, cals[cand.spec], cost, ks, notes, shapes, budgets, by_k.get(cand.spec), tree_replay)
    mean_prompt = statistics.mean(lengths)
    forecasts = [replace(f, extra={**f.extra, "run_speedup": A.run_speedup(
        f, cost, mean_prompt, max_new_tokens, draft_prefill_s(candidates, cost, f.proposer, mean_prompt))}) for f in forecasts]
    ranked = A.rank(forecasts)  # by the whole run's prediction: a draft's own prefill is the user's cost too
    return Advice(str(target.name), cost, cached, candidates, cals, ranked, A.verdicts(ranked), notes, shapes, budgets,
                  len(ran), mean_prompt, max_new_tokens, by_k, "replay" if replay else "runs",
                  {"decodes": info}, tree_replay, schedule)


def _anchored(cost: CostModel, rep: Replayed) -> CostModel:
    """The cost model with the target's passes priced as the replay's decodes ran them
    (:mod:`specviz.analysis.runcost`: a pass timed alone is not the pass a run makes; the ratios
    go to ``rep.ratios``). A cost model of given numbers (``measured_s`` 0: not timed on this
    machine, as tests give it) is used as given."""
    if not cost.measured_s:
        return cost
    runs = [steps for _, decode in rep.steps for steps in decode]
    lookups = [x for ngram, decode in rep.steps if ngram for x in runcost.draft_samples(decode)]
    anchored, rep.ratios = runcost.anchored(cost, runcost.pass_samples(runs), lookups)
    return anchored


def _replay_note(info: dict[str, Any]) -> str:
    same = info["replay_reproduced"] == info["prompts"]
    return (f"{', '.join(info['for'])}: acceptance replayed from one greedy decode of {info['prompts']} prompts "
            f"({info['decoded_with']} at k = {info['k']}, {info['seconds']:.1f} s), exact for greedy decoding of these "
            "prompts; " + ("its replay gave that decode back step for step." if same else
                           f"its replay gave back only {info['replay_reproduced']} of {info['prompts']} decodes step for "
                           "step (a near-tie in an argmax rounds differently between a batched and a one-token "
                           "forward), so read these as estimates."))


def run_top(target, advice: Advice, n: int, prompts: Sequence[PromptRow], config: BenchConfig, *, load=None,
            say: Say | None = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Run the ``n`` best forecasts (those that drafted anything) for real in one sweep beside
    target-only; -> (predicted vs measured per configuration, the sweep's report)."""
    picks = [f for f in advice.forecasts if f.tau > 1.0][:n]
    if not picks:
        raise ValueError("nothing to run: no configuration is predicted to commit more than the target's own token")
    proposers, wanted = {}, {}
    for f in picks:
        p = from_spec(f.spec, target, load=load)
        proposers[p.name] = p
        sched = f.extra.get("schedule", "constant")
        wanted[(p.name if sched == "constant" else f"{p.name} [{sched}]", f.k)] = f
    schedules = tuple(dict.fromkeys(["constant", *(f.extra["schedule"] for f in picks if "schedule" in f.extra)]))
    cfg = BenchConfig(**{**config.__dict__, "ks": tuple(sorted({f.k for f in picks})), "schedules": schedules})
    sweep = Sweep(target, proposers, prompts, cfg, prompt_source="specviz advise")
    sweep.runs = [r for r in sweep.runs if r.proposer == TARGET_ONLY or (r.proposer, r.k) in wanted]
    if say:
        say(f"running the top {len(picks)} for real: {len(prompts)} prompts x {len(sweep.runs)} configurations")
    for _ in sweep.events():
        pass
    report = sweep.report()
    out = []
    rows = {(r["proposer"], r["k"]): r for r in report["rows"] if r.get("impl") == "specviz"}
    mean_prompt = statistics.mean(r.prompt_tokens for r in sweep.prompt_rows) if sweep.prompt_rows else 0
    for (name, k), f in wanted.items():
        out.append(compare_run(advice, f, rows.get((name, k)) or {}, mean_prompt, name))
    return out, report


def draft_prefill_s(candidates, cost, proposer: str, prompt_tokens: float) -> float:
    """The prefill of ``proposer``'s draft model (0 without one) at ``prompt_tokens`` tokens, from
    the cost model's prefill of its context."""
    cand = next((c for c in candidates if c.spec == proposer), None)
    draft = cand.draft if cand is not None else None
    if draft is None or cand.shares_prompt or str(draft.name) not in cost.drafts:
        return 0.0
    return cost.drafts[str(draft.name)].prefill_s * prompt_tokens / max(1, cost.context)


def compare_run(advice: Advice, f: A.Forecast, row: dict[str, Any], mean_prompt: float, name: str = "") -> dict[str, Any]:
    """A forecast against a sweep's summary row of the same configuration (``row``: {} if it did
    not run): the whole-run prediction (both prefills, for the row's mean new tokens and the
    sweep's mean prompt length), the measured speedup and the error (measured - predicted) / predicted;
    beside them the measured median over prompts, its interval and the error against it (one stalled
    run moves the total, not the median: specviz.bench.summary)."""
    mean_new = (row.get("new_tokens") or 0) / max(1, row.get("prompts") or 1)
    drafts = draft_prefill_s(advice.candidates, advice.cost, f.proposer, mean_prompt)
    predicted = A.run_speedup(f, advice.cost, mean_prompt, mean_new, drafts)
    measured = row.get("speedup")
    return {
        "spec": f.spec, "k": f.k, "name": name or f.spec, "proposer": f.proposer, "schedule": f.extra.get("schedule"),
        "nodes": int(f.drafted_per_step) if f.shape else None,
        "predicted_speedup_loop": f.speedup, "predicted_speedup": predicted,
        "interval": [f.speedup_lo, f.speedup_hi], "measured_speedup": measured,
        "error": (measured - predicted) / predicted if measured is not None and predicted else None,
        "measured_median": (median := row.get("speedup_median")),
        "measured_interval": [row.get("speedup_low"), row.get("speedup_high")],
        "error_median": (median - predicted) / predicted if median is not None and predicted else None,
        "predicted_tau": f.tau, "measured_tau": row.get("mean_acceptance_length"),
        "measured_step_ms": row.get("step_ms"), "predicted_step_ms": 1e3 * f.step_s,
    }
