"""The advisor: the tree-shape dynamic program, the cost model (a stand-in clock), the prediction
math on hand-made numbers, static tree shapes in the proposers, and `specviz advise` on tiny models."""

from __future__ import annotations

import itertools
import json
import random
from types import SimpleNamespace

import pytest
import torch

from specviz import cli
from specviz.analysis import advisor as A
from specviz.analysis import costmodel as C
from specviz.analysis import theory
from specviz.analysis.treeshape import (
    TreeShape,
    best_shape,
    best_trees,
    chain,
    decode,
    encode,
    expected_tokens,
    filled_at_least,
    node_reach,
    to_depth,
)
from specviz.core.engine import SpeculativeDecoder
from specviz.proposers.draft_tree import parse_draft_tree
from specviz.proposers.ngram_tree import parse_ngram_tree
from specviz.proposers.registry import check_spec, from_spec, shape_base, tree_nodes
from tests.support import loaded, make_char_tokenizer, make_llama, perturbed

# -- the dynamic program --------------------------------------------------------------------------


def brute_force(accept, n: int, depth: int) -> float:
    """The best expected tokens over every tree of at most n nodes and depth <= depth."""
    best = 1.0
    for length in range(1, n + 2):
        for digits in itertools.product(range(n + 1), repeat=length):
            try:
                shape = decode("".join(map(str, digits)))
            except ValueError:
                continue
            if shape.nodes <= n and shape.depth <= depth:
                best = max(best, expected_tokens(shape, accept))
    return best


@pytest.mark.parametrize("accept", [
    [[0.6, 0.3, 0.05]] * 4,
    [[0.4, 0.35, 0.2]] * 4,
    [[0.9, 0.05], [0.5, 0.4], [0.3, 0.3], [0.8, 0.1]],
])
def test_dp_matches_brute_force(accept):
    for depth in (1, 2, 4):
        trees = best_trees(accept, 4, depth)
        for n in range(5):
            assert trees[n].nodes <= n and trees[n].depth <= depth
            assert expected_tokens(trees[n], accept) == pytest.approx(brute_force(accept, n, depth), abs=1e-9)


def test_a_chain_is_optimal_when_the_first_candidate_dominates():
    accept = [[0.9, 0.05]] * 8
    trees = best_trees(accept, 8, 8)
    for n in range(1, 9):
        assert encode(trees[n]) == "1" * n
        assert expected_tokens(trees[n], accept) == pytest.approx(1 + sum(0.9 ** i for i in range(1, n + 1)))
    choice, _ = best_shape(accept, lambda s: 1.0 + 0.01 * s.nodes, max_nodes=8, max_depth=8)
    assert choice.shape == chain(8) and choice.shape.describe() == "chain of 8"


def test_no_speculation_is_optimal_when_drafts_are_rarely_kept():
    accept = [[0.05, 0.02]] * 8
    choice, cands = best_shape(accept, lambda s: 1.0 + 0.5 * s.nodes, max_nodes=16, max_depth=8)
    assert choice.shape.nodes == 0 and choice.tau == 1.0 and choice.text == "0"
    assert choice.tokens_per_s == max(c.tokens_per_s for c in cands)


def test_flat_costs_favour_a_wide_tree_and_a_steep_curve_a_small_one():
    accept = [[0.4, 0.3, 0.2]] * 3
    wide, _ = best_shape(accept, lambda s: 1.0, max_nodes=9, max_depth=3)
    assert wide.shape.nodes == 9 and wide.shape.branching[0] == 3  # every node is free: use them all
    steep, _ = best_shape(accept, lambda s: 1.0 + 0.3 * s.nodes, max_nodes=9, max_depth=3)
    assert 0 < steep.shape.nodes < 9
    # a known optimum: depth 1, two nodes -> both ranks of the root: 1 + 0.4 + 0.3
    assert encode(best_trees(accept, 2, 1)[2]) == "2"
    assert expected_tokens(decode("21"), [[0.5, 0.3]] * 2) == pytest.approx(1 + 0.5 + 0.3 + 0.25)


def test_shape_codec_round_trips_and_refuses_nonsense():
    for text in ("1", "1111", "21", "3111", "2101", "32"):
        assert encode(decode(text)) == text
    s = decode("21")
    assert s.parents == (-1, -1, 0) and s.ranks == (1, 2, 1) and s.depth == 2 and s.branching == (2, 1)
    assert s.level_widths() == (1,) and s.rank_paths() == {(1,), (2,), (1, 1)}
    assert encode(TreeShape()) == "0" and decode("0").nodes == 0
    for bad in ("", "x1", "1001", "2,1"):
        with pytest.raises(ValueError, match="BFS child counts|do not exist"):
            decode(bad)


# -- hand-made cost models and calibrations ----------------------------------------------------------


def cost_model(t1=0.010, slope=0.001, overhead=0.0, draft_step=0.002, lookup=0.0, tree_extra=0.0) -> C.CostModel:
    ts = {n: t1 + slope * (n - 1) for n in range(1, 18)}
    draft = C.DraftCost("d", draft_step, {1: draft_step, 2: draft_step * 1.2, 3: draft_step * 1.4},
                        {m: draft_step * (1 + 0.1 * (m - 1)) for m in (1, 2, 3, 4)}, 0.01)
    return C.CostModel("key", "test machine", "t", "float32", torch.__version__, 1, 64, None, ts,
                       {n: ts[n] + tree_extra for n in (2, 5, 9, 17)}, overhead, 0.05,
                       {"ngram": lookup, "ngram-tree": lookup}, {"d": draft})


def step(k, n_acc, n_committed=None, draft_ms=1.0, committed=(), drafts=(), tree=(), path=()):
    return SimpleNamespace(k=k, n_accepted=n_acc, n_committed=n_acc + 1 if n_committed is None else n_committed,
                           draft_ms=draft_ms, committed=tuple(committed), drafts=tuple(drafts), tree=tuple(tree),
                           accepted_path=tuple(path))


def test_wilson_intervals():
    r = A.wilson(5, 10)
    assert (r.p, round(r.lo, 4), round(r.hi, 4)) == (0.5, 0.2366, 0.7634)
    assert (A.wilson(0, 0).lo, A.wilson(0, 0).hi) == (0.0, 1.0)
    assert A.wilson(10, 10).hi == 1.0 and A.wilson(10, 10).lo > 0.69
    with pytest.raises(ValueError):
        A.wilson(3, 2)


def test_chain_counts_and_the_per_position_prediction():
    # four steps at k = 2: kept 2, 1, 0 of 2 drafts; one n-gram step drafted a single token and kept it
    runs = [[step(2, 2), step(2, 1), step(2, 0), step(1, 1)]]
    cal = A.chain_calibration("ngram", runs, 2)
    assert cal.steps == 4 and cal.drafted == (4, 2) and cal.kept == (3, 1) and cal.reached == (4, 3)
    assert [a.p for a in cal.accept] == [0.75, 0.5] and [g.p for g in cal.carry_on] == [1.0, pytest.approx(2 / 3)]
    cost = cost_model()
    f1 = A.predict_chain(cal, cost, 1, "ngram")
    assert f1.tau == pytest.approx(1.75) and f1.drafted_per_step == 1.0
    f2 = A.predict_chain(cal, cost, 2, "ngram")
    assert f2.tau == pytest.approx(1 + 0.75 + 0.25)  # 1 + 3/4 + (3/4)(2/3)(1/2)
    assert f2.drafted_per_step == pytest.approx(1.75)
    # the verify pass scores what was drafted: 2 rows on every step, a third on the 3 of 4 that drafted 2
    assert f2.step_s == pytest.approx(0.010 + 1.0 * 0.001 + 0.75 * 0.001)
    assert f2.speedup == pytest.approx(2.0 * 0.010 / 0.01175)
    assert f2.speedup_lo < f2.speedup < f2.speedup_hi
    with pytest.raises(ValueError, match="calibrated"):
        A.predict_chain(cal, cost, 3, "ngram")


def test_a_perfect_draft_on_flat_costs_gains_k_plus_one_less_its_drafting():
    cal = A.chain_calibration("draft:d", [[step(4, 4)] * 20], 4)
    cost = cost_model(slope=0.0)
    f = A.predict_chain(cal, cost, 4, "draft", "d")
    assert f.tau == pytest.approx(5.0)
    # every step: the catch-up feed of x_k and the bonus (2 tokens), then k - 1 one-token steps
    assert f.draft_s == pytest.approx(0.0024 + 3 * 0.002)
    assert f.speedup == pytest.approx(5 * 0.010 / (0.0084 + 0.010))


def test_the_verify_pass_is_priced_at_what_was_drafted():
    t = {1: 1.0, 2: 1.5, 3: 1.7, 4: 2.5, 5: 2.6}.__getitem__
    assert A.mean_pass_s(t, [1.0] * 4) == 2.6  # every step drafted 4: t(5)
    assert A.mean_pass_s(t, []) == 1.0  # nothing drafted: a plain step
    assert A.mean_pass_s(t, [0.5, 0.5, 0.25, 0.0]) == pytest.approx(0.5 * 1.0 + 0.25 * 1.7 + 0.25 * 2.5)
    # an n-gram that finds nothing on half its steps costs a plain step there, not a k = 2 pass
    half = A.chain_calibration("ngram", [[step(2, 1), step(0, 0)] * 5], 2)
    cost = cost_model()
    assert A.predict_chain(half, cost, 2, "ngram").step_s == pytest.approx(0.010 + 0.5 * 0.001 + 0.5 * 0.001)
    full = A.chain_calibration("draft:d", [[step(2, 1)] * 10], 2)  # a draft model always drafts k: t(k + 1)
    f = A.predict_chain(full, cost, 2, "draft", "d")
    assert f.step_s - f.draft_s == pytest.approx(cost.t(3))


def test_a_tree_forecast_takes_its_replayed_tau_and_tree_sizes():
    cal = A.RankCalibration("ngram-tree:3", (100, 50, 25), ((50, 20), (25, 5), (10, 2)))
    cost = cost_model(slope=0.001)
    f = A.predict_tree(cal, cost, decode("211"), "ngram-tree", "ngram-tree:3,shape=211")
    assert f.step_s == pytest.approx(cost.t_tree(5))  # the whole shape, 4 nodes
    assert A.with_replay(f, None, cost) == f
    # the trie offered 4 nodes on one step, 2 on two, none on one: the pass is priced on those
    g = A.with_replay(f, A.Replayed(2.0, (4, 2, 2, 0)), cost)
    want = (cost.t_tree(5) + 2 * cost.t_tree(3) + cost.t(1)) / 4
    assert g.step_s == pytest.approx(want) and g.step_s < f.step_s
    assert g.tau == 2.0 and g.speedup == pytest.approx(2.0 * cost.base_step_s / want)
    assert g.extra["tau_model"] == f.tau and g.extra["step_model_s"] == f.step_s
    assert g.tau_lo <= 2.0 <= g.tau_hi


def test_a_tree_run_cuts_the_tree_to_the_tokens_left():
    assert encode(to_depth(decode("2111"), 1)) == "2" and encode(to_depth(decode("2111"), 2)) == "211"
    assert to_depth(decode("21"), 0).nodes == 0
    cal = A.RankCalibration("ngram-tree:3", (100, 50, 25), ((50, 20), (25, 5), (10, 2)))
    cost = cost_model(slope=0.001)
    f = A.predict_tree(cal, cost, decode("2111"), "ngram-tree", "ngram-tree:3,shape=2111")
    law = A.chain_advance(f.extra["continue_rates"], 3)  # the path's length: one node per depth at most
    assert sum(m * p for m, p in enumerate(law, start=1)) == pytest.approx(f.tau)
    assert f.extra["step_ms_by_k"] == pytest.approx([1e3 * x for x in (cost.base_step_s, cost.t_tree(3), cost.t_tree(5), cost.t_tree(6))])
    # the replay's own path lengths replace the model's; its cut steps are priced at the replay's ratio
    g = A.with_replay(f, A.Replayed(2.0, (5, 5, 5, 5), (0, 1, 2, 1)), cost)
    law = A.chain_advance(g.extra["continue_rates"], 3)
    assert sum(m * p for m, p in enumerate(law, start=1)) == pytest.approx(g.tau)
    assert g.extra["step_ms_by_k"][0] == pytest.approx(1e3 * cost.base_step_s)
    assert g.extra["step_ms_by_k"][-1] == pytest.approx(1e3 * g.step_s)
    # every draft kept: 9 tokens at depth 4 (5 a step) are one full step and a cut one of depth 3
    full = A.RankCalibration("ngram-tree:3", (10, 10, 10, 10), ((10,), (10,), (10,), (10,)))
    h = A.predict_tree(full, cost, decode("1111"), "ngram-tree", "ngram-tree:3,shape=1111")
    assert A.run_steps_s([x / 1e3 for x in h.extra["step_ms_by_k"]], h.extra["continue_rates"], 9) == pytest.approx(
        cost.t_tree(5) + cost.t_tree(4))


def test_steps_cut_short_by_the_end_of_the_run_are_left_out():
    runs = [[step(4, 4), step(4, 4), step(2, 2)]]  # max_new_tokens 13: the third step could draft only 2
    cal = A.chain_calibration("ngram", runs, 4, max_new_tokens=13)
    assert cal.steps == 2


def test_tree_and_draft_rank_counts():
    nodes = [SimpleNamespace(index=i, parent=p, depth=d) for i, (p, d) in enumerate([(-1, 1), (-1, 1), (0, 2), (1, 2)])]
    runs = [[step(4, 2, tree=nodes, path=(1, 3)), step(4, 0, tree=nodes, path=())]]
    cal = A.rank_calibration_from_tree("ngram-tree:3", runs, 3, ranks=3)
    assert cal.trials == (2, 1, 1) and cal.kept[0] == (0, 1, 0) and cal.kept[1] == (1, 0, 0)
    assert cal.matrix("p")[0][1] == 0.5
    # drafted children: the root had two on both steps, each depth-1 node one, the depth-2 nodes none
    assert cal.seen == (2, 4, 4) and cal.has == ((2, 2, 0), (4, 0, 0), (0, 0, 0))
    assert cal.fill() == [[1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
    tops = [SimpleNamespace(top_q=((7, "a", 0.6), (8, "b", 0.3))), SimpleNamespace(top_q=((9, "c", 0.5), (5, "d", 0.4)))]
    chain_runs = [[step(2, 1, committed=(7, 5), drafts=tops), step(2, 0, committed=(8,), drafts=tops)]]
    cal = A.rank_calibration_from_chain("draft-tree:d", chain_runs, 2, ranks=2)
    assert cal.trials == (2, 1) and cal.kept == ((1, 1), (0, 1))


def test_a_tree_is_priced_on_the_nodes_it_drafts():
    """An n-gram trie often fills fewer nodes than the shape has room for: the distribution of the
    nodes drafted, and the pass priced on it as a chain's is (the DP's choice sees the same)."""
    assert filled_at_least(decode("111"), None) == [1.0, 1.0, 1.0]
    assert filled_at_least(decode("111"), [[0.5], [0.5], [0.5]]) == pytest.approx([0.5, 0.25, 0.125])
    assert filled_at_least(decode("2"), [[1.0, 0.5]]) == pytest.approx([1.0, 0.5])
    shape, fill = decode("2121"), [[0.9, 0.4], [0.7, 0.3], [0.5]]
    assert sum(filled_at_least(shape, fill)) == pytest.approx(sum(node_reach(shape, fill)))  # E[nodes]
    at_least = filled_at_least(shape, fill)
    assert all(a >= b for a, b in zip(at_least, at_least[1:])) and 0 <= at_least[-1] <= at_least[0] <= 1
    # rank-2 children of the root drafted half the time, everything else always
    cal = A.RankCalibration("ngram-tree:3", (100, 50, 25), ((50, 20), (25, 5), (10, 2)),
                            seen=(10, 15, 10), has=((10, 5), (15, 0), (0, 0)))
    cost = cost_model(slope=0.001)
    f = A.predict_tree(cal, cost, decode("21"), "ngram-tree", "ngram-tree:3,shape=21")
    assert f.step_s == pytest.approx(cost.t_tree(3) + 0.5 * (cost.t_tree(4) - cost.t_tree(3)))
    assert f.drafted_per_step == pytest.approx(2.5) and f.tau == pytest.approx(1 + 0.5 + 0.2 + 0.5 * 0.5)
    full = A.RankCalibration("ngram-tree:3", cal.trials, cal.kept)
    assert A.predict_tree(full, cost, decode("21"), "ngram-tree", "x").step_s == pytest.approx(cost.t_tree(4))


def test_tree_forecast_and_verdicts():
    cal = A.RankCalibration("ngram-tree:3", (100, 50, 25), ((50, 20), (25, 5), (10, 2)))
    cost = cost_model(slope=0.0005)
    fs, best = A.forecast_trees(cal, cost, "ngram-tree", lambda s: f"ngram-tree:3,shape={s}", range(1, 4))
    assert fs and best.nodes and all(f.speedup > 1 for f in fs)
    f = A.predict_tree(cal, cost, decode("21"), "ngram-tree", "ngram-tree:3,shape=21")
    assert f.tau == pytest.approx(1 + 0.5 + 0.2 + 0.5 * 0.5) and f.k == 2 and f.shape == "21"
    assert f.step_s == pytest.approx(cost.t_tree(4))
    lines = A.verdicts(A.rank(fs))
    assert lines[-1].startswith("Pick ngram-tree:3,shape=")
    slow = cost_model(draft_step=0.05)
    bad = [A.predict_chain(A.chain_calibration("draft:d", [[step(4, 1)] * 10], 4), slow, k, "draft", "d") for k in (1, 2, 3, 4)]
    lines = A.verdicts(bad)
    assert "draft:d does not pay on this machine" in lines[0] and "below target-only decoding at every k" in lines[0]
    assert lines[-1].startswith("Does not pay")


def test_run_speedup_counts_prefill():
    f = A.predict_chain(A.chain_calibration("ngram", [[step(2, 2)] * 10], 2), cost_model(slope=0.0), 2, "ngram")
    loop = f.speedup
    whole = A.run_speedup(f, cost_model(slope=0.0), 64, 30)
    assert 1 < whole < loop  # the same prefill on both sides pulls the ratio towards 1


def test_chain_advance_is_a_law_whose_mean_is_tau():
    rates = [0.9, 0.7, 0.5, 0.2]
    law = A.chain_advance(rates, 4)
    assert len(law) == 5 and abs(sum(law) - 1) < 1e-12
    assert abs(sum(m * p for m, p in enumerate(law, start=1)) - theory.expected_tokens_per_step_per_position(rates)) < 1e-12
    assert A.chain_advance(rates, 0) == [1.0]


def test_run_steps_price_the_cut_short_end():
    steps = [1.0, 2.0, 3.0, 4.0]  # a step that drafts j costs j + 1
    # every draft kept: 8 tokens are two full steps; a 9th costs a target-only step, not a third full step
    assert A.run_steps_s(steps, [1.0] * 3, 8) == 8.0 and A.run_steps_s(steps, [1.0] * 3, 9) == 9.0
    # nothing kept: one token a step, drafting 0, 1, 2, 3, 3 as the end allows
    assert A.run_steps_s(steps, [0.0] * 3, 5) == 1 + 2 + 3 + 4 + 4
    # against the engine's rule simulated draw by draw
    rng, rates, n, runs = random.Random(0), [0.8, 0.6, 0.5], 20, 40_000
    total = 0.0
    for _ in range(runs):
        left = n
        while left:
            kk = min(3, left - 1)
            kept = 0
            while kept < kk and rng.random() < rates[kept]:
                kept += 1
            total += steps[kk]
            left -= kept + 1
    assert abs(total / runs - A.run_steps_s(steps, rates, n)) < 0.01 * total / runs


def test_a_chain_run_is_not_charged_a_full_last_step():
    cal = A.chain_calibration("draft:d", [[step(4, 4)] * 10], 4)  # every draft kept: 5 tokens a step
    cost = cost_model(slope=0.0)
    f = A.predict_chain(cal, cost, 4, "draft", "d")
    assert len(f.extra["step_ms_by_k"]) == 5 and f.extra["step_ms_by_k"][0] == pytest.approx(1e3 * cost.base_step_s)
    full = A.run_speedup(f, cost, 1, 11)  # two full steps, then one token: a plain step, not a third full one
    pre = cost.prefill(1)
    assert full == pytest.approx((pre + 11 * cost.base_step_s) / (pre + 2 * f.step_s + cost.base_step_s))
    half = A.run_speedup(f, cost, 1, 10.5)  # a mean run length between two whole ones
    assert min(full, A.run_speedup(f, cost, 1, 10)) <= half <= max(full, A.run_speedup(f, cost, 1, 10))


# -- the cost model with a stand-in clock -----------------------------------------------------------


@pytest.fixture(scope="module")
def tiny():
    tok = make_char_tokenizer()
    target = make_llama(len(tok), 32, 2, seed=0, sharpen=30.0)
    draft = perturbed(target, 0.1, seed=2)
    return loaded(target, tok, "tiny-target"), loaded(draft, tok, "tiny-draft")


class Clock:
    """Every reading is 1 ms after the last: each timed interval (two readings) is 1 ms."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 0.001
        return self.now


def test_cost_model_with_a_stand_in_clock(tiny, tmp_path):
    target, draft = tiny
    cost = C.measure(target, context=32, repeats=2, clock=Clock(), drafts=[draft])
    assert cost.target_s == {n: pytest.approx(0.001) for n in range(1, 18)}
    assert set(cost.tree_s) == set(C.TREE_NS) and 0.0 <= cost.step_overhead_s < 0.05  # the engine's own clock
    assert cost.drafts["tiny-draft"].step_s == pytest.approx(0.001) and cost.lookup_s["ngram"] == pytest.approx(0.001)
    assert cost.context == 32 and cost.machine
    assert C.CostModel.from_dict(json.loads(json.dumps(cost.to_dict()))) == cost
    assert "t(n) ms" in cost.table() and cost.curves()["n"] == list(range(1, 18))
    # cached per key: a second call reads it; a new draft is measured and added
    first, cached = C.load_or_measure(target, tmp_path, context=32, clock=Clock(), repeats=1)
    again, cached2 = C.load_or_measure(target, tmp_path, context=32, clock=Clock(), repeats=1)
    assert (cached, cached2) == (False, True) and again == first
    more, cached3 = C.load_or_measure(target, tmp_path, context=32, drafts=[draft], clock=Clock(), repeats=1)
    assert not cached3 and "tiny-draft" in more.drafts and more.target_s == first.target_s


class DriftingClock:
    """Each reading adds 1 ms times the speed of its round (``per_round`` readings a round after the
    prefill's two): a host that slows down and speeds up between rounds."""

    def __init__(self, speeds, per_round=6):
        self.now, self.reads, self.speeds, self.per_round = 0.0, 0, speeds, per_round

    def __call__(self) -> float:
        rnd = max(0, self.reads - 2) // self.per_round
        self.reads += 1
        self.now += 0.001 * self.speeds[min(rnd, len(self.speeds) - 1)]
        return self.now


def test_a_draft_is_measured_against_the_target_round_by_round(tiny):
    """The host's drift moves the draft and the target's one-token pass alike, so the draft's cost
    is its ratio to that pass in the same round, times t(1); measured alone it takes the drift."""
    _, draft = tiny
    speeds = [1, 3, 3, 1, 3, 3, 1, 3]
    alone = C.measure_draft(draft, context=32, repeats=8, clock=DriftingClock(speeds), levels=False)
    assert alone.step_s == pytest.approx(0.003)  # the median of its rounds after the first: the drift in it
    ours = C.measure_draft(draft, context=32, repeats=8, clock=DriftingClock(speeds, per_round=12), levels=False,
                           reference=lambda: None, reference_s=0.005)  # a round: 3 feeds, a step, 2 target passes
    assert ours.step_s == pytest.approx(0.005) and ours.feed_s == {n: pytest.approx(0.005) for n in (1, 2, 3)}
    assert ours.switch_s == pytest.approx(0.0)


class CacheClock:
    """Virtual seconds that pass only as passes run: a target pass 10 ms, a draft forward 2 ms, and
    each 3 ms (target) or 1 ms (draft) more right after the other kind ran (its weights evicted)."""

    COST = {"target": (0.010, 0.003), "draft": (0.002, 0.001)}

    def __init__(self):
        self.now, self.last = 0.0, None

    def run(self, kind: str) -> None:
        base, switch = self.COST[kind]
        self.now += base + (switch if self.last not in (None, kind) else 0.0)
        self.last = kind

    def __call__(self) -> float:
        return self.now


def test_a_draft_is_priced_as_a_step_alternates_it_with_the_target(tiny, monkeypatch):
    """issue 51: the advisor erred high, most at small k: the draft's feeds were timed back to back
    (warm) against a target pass timed after them (cold), and the target's pass after a draft was
    priced as one after a target pass. Now the first forward of a step follows a target pass, the
    later ones the draft's own, and the target's slower pass after the draft is a cost of its own."""
    from specviz.runtime import kv

    _, draft = tiny
    clock, real = CacheClock(), kv.forward_logits

    def forward(*a, **kw):
        out = real(*a, **kw)
        clock.run("draft")
        return out

    monkeypatch.setattr(kv, "forward_logits", forward)
    d = C.measure_draft(draft, context=32, repeats=4, clock=clock, levels=False, reference=lambda: clock.run("target"),
                        reference_s=0.020)  # this host's t(1): twice the virtual 10 ms
    assert d.feed_s == {n: pytest.approx(2 * 0.003) for n in (1, 2, 3)}  # after a target pass
    assert d.step_s == pytest.approx(2 * 0.002)  # after the draft's own forward
    assert d.switch_s == pytest.approx(2 * 0.003)  # the target's pass after the draft's
    assert C.CostModel.from_dict(json.loads(json.dumps(with_d(d).to_dict()))).drafts["d"].switch_s == d.switch_s
    # the forecast pays it once a step: at k = 1 the step is the feed, the switch and t(2)
    cal = A.chain_calibration("draft:d", [[step(1, 1), step(1, 0)]], 1)
    f = A.predict_chain(cal, with_d(d), 1, "draft", "d")
    all_kept = 0.5
    assert f.draft_s == pytest.approx((1 - all_kept) * d.feed(1) + all_kept * d.feed(2) + d.switch_s)
    assert f.step_s == pytest.approx(f.draft_s + with_d(d).t(2))


def with_d(d: C.DraftCost) -> C.CostModel:
    cost = cost_model()
    return C.with_draft(cost, C.DraftCost("d", d.step_s, d.feed_s, d.level_s, d.prefill_s, d.switch_s))


def test_draft_tree_levels_only_when_asked(tiny, tmp_path):
    """A draft's tree levels are measured only for the drafts named in ``levels``; one cached
    without them is measured again when a draft tree asks for them."""
    target, draft = tiny
    chain, cached = C.load_or_measure(target, tmp_path, context=32, drafts=[draft], levels=set(), clock=Clock(), repeats=2)
    assert not cached and chain.drafts["tiny-draft"].level_s == {} and chain.drafts["tiny-draft"].step_s > 0
    again, cached = C.load_or_measure(target, tmp_path, context=32, drafts=[draft], levels=set(), clock=Clock(), repeats=2)
    assert cached and again == chain
    tree, cached = C.load_or_measure(target, tmp_path, context=32, drafts=[draft], levels={"tiny-draft"}, clock=Clock(),
                                     repeats=2)
    assert not cached and set(tree.drafts["tiny-draft"].level_s) == set(C.LEVEL_MS) and tree.target_s == chain.target_s


def test_every_point_is_the_median_of_the_rounds_after_the_first():
    """No warm-up round: the first round's extra cost (a first call) is left out, the others'
    median kept (a lucky round does not set the cost); a spent budget stops the rounds only after
    the second."""
    calls: list[int] = []
    slow_first = {1: [5.0, 1.0, 1.0, 1.0], 2: [7.0, 2.0, 2.0, 2.0]}
    now = [0.0]

    def run(n: int) -> None:
        calls.append(n)
        now[0] += slow_first[n][calls.count(n) - 1]

    times = C._interleaved([(run, (1, 2))], 4, lambda: now[0], stop=lambda: True, min_rounds=2)
    assert calls == [1, 2, 1, 2] and {n: C._typical(v) for n, v in times[0].items()} == {1: 1.0, 2: 2.0}
    assert C._typical([5.0, 3.0, 1.0, 2.0]) == 2.0 and C._typical([4.0]) == 4.0


def test_a_busy_machine_is_said():
    from dataclasses import replace

    assert cost_model().busy is None
    assert "the machine was busy while measuring (load 9.0 on 2 cores)" in replace(cost_model(), load=9.0, cores=2).table()


def test_curves_are_monotone_and_interpolated():
    assert C.monotone({1: 1.0, 2: 3.0, 3: 2.0, 4: 5.0}) == {1: 1.0, 2: 2.5, 3: 2.5, 4: 5.0}
    assert C.interpolate({2: 1.0, 4: 3.0}, 3) == 2.0 and C.interpolate({2: 1.0, 4: 3.0}, 6) == 5.0


def test_a_tree_pass_follows_the_chain_curve_across_a_kernel_jump():
    """The chain's t(n) is measured at every width, trees at a few: a head kernel switching at 6
    rows makes t(6) jump, and a tree of 5 nodes (6 positions) pays that jump too."""
    ts = {n: 0.010 + 0.001 * (n - 1) + (0.004 if n >= 6 else 0.0) for n in range(1, 18)}
    trees = {n: ts[n] + 0.002 for n in (2, 3, 5, 9, 13, 17)}
    cost = C.CostModel("key", "test machine", "t", "float32", torch.__version__, 1, 64, None, ts, trees, 0.0, 0.05,
                       {}, {})
    assert cost.t_tree(6) == pytest.approx(ts[6] + 0.002) and cost.t_tree(5) == pytest.approx(trees[5])
    assert C.interpolate(trees, 6) < cost.t_tree(6)  # the tree's own points alone miss the jump
    assert cost.t_tree(1) == cost.t(1)


def test_a_model_the_static_step_cannot_serve_is_said(monkeypatch, tiny):
    monkeypatch.setenv("SPECVIZ_STATIC_DECODE", "0")
    assert "static decode step is off" in C._why_not_static(tiny[0].model)


# -- static shapes in the proposers --------------------------------------------------------------------


def test_ngram_tree_keeps_only_the_shape(tiny):
    target, _ = tiny
    ctx = torch.tensor(target.tokenizer("the cat sat. the cat ran. the cat sat. the cat")["input_ids"])
    free = from_spec("ngram-tree:3,nodes=16", target)
    for shape in ("1", "111", "21", "3"):
        p = from_spec(f"ngram-tree:3,shape={shape}", target)
        assert p.max_nodes == decode(shape).nodes and p.name == f"ngram-tree:3,shape={shape}"
        prop = p.propose(None, ctx, 4, None, None)
        got = TreeShape(tuple(prop.parents.tolist()), tuple([0] * prop.k))
        assert prop.k <= decode(shape).nodes and got.depth <= decode(shape).depth
    assert free.propose(None, ctx, 4, None, None).k >= from_spec("ngram-tree:3,shape=21", target).propose(None, ctx, 4, None, None).k
    assert parse_ngram_tree("3,nodes=2,shape=2111")["shape"] == "2"  # the shape's first two nodes
    assert parse_draft_tree("m,shape=3111,width=2")[1] == {"shape": "211", "nodes": 4}
    assert check_spec("ngram-tree:3,shape=auto") == ("ngram-tree", "3,shape=auto")
    assert tree_nodes("ngram-tree:3,shape=auto") == 16 and tree_nodes("draft-tree:x,shape=211") == 4
    assert shape_base("draft-tree:m@int8,shape=auto,vocab=9") == "draft-tree:m@int8,vocab=9"


def test_draft_tree_grows_the_static_shape_and_stays_exact(tiny):
    target, draft = tiny
    load = lambda name, **kw: draft  # noqa: E731
    p = from_spec("draft-tree:tiny-draft,shape=2111", target, load=load)
    assert p.max_nodes == 5 and p.name == "draft-tree:tiny-draft,shape=2111"
    dec = SpeculativeDecoder(target, p, k=3)
    res = dec.generate("the cat sat on the", max_new_tokens=24)
    want = decode("2111")
    for s in res.steps:
        if s.tree:
            parents = [n.parent for n in s.tree]
            ranks = [parents[:i].count(a) + 1 for i, a in enumerate(parents)]
            assert TreeShape(tuple(parents), tuple(ranks)).rank_paths() <= want.rank_paths()
    assert any(len(s.tree) == want.nodes for s in res.steps if s.tree)
    plain = SpeculativeDecoder(target, None).generate("the cat sat on the", max_new_tokens=24)
    assert res.token_ids == plain.token_ids


def test_shape_auto_reads_the_advised_shape(tiny, tmp_path, monkeypatch):
    from specviz.proposers.ngram_tree import advised_shapes_path

    monkeypatch.setenv("SPECVIZ_CACHE_DIR", str(tmp_path))
    target, _ = tiny
    with pytest.raises(ValueError, match="specviz advise"):
        from_spec("ngram-tree:3,shape=auto", target)
    path = advised_shapes_path()
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"tiny-target|ngram-tree:3": {"shape": "21"}, "tiny-target|ngram-tree:2": {"shape": "0"}}))
    p = from_spec("ngram-tree:3,shape=auto", target)
    assert p.shape == "21" and p.name == "ngram-tree:3,shape=21"
    with pytest.raises(ValueError, match="does not pay"):
        from_spec("ngram-tree:2,shape=auto", target)


# -- the CLI on tiny models ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("advise-models")
    tok = make_char_tokenizer()
    target = make_llama(len(tok), 64, 2, seed=0, sharpen=30.0)
    draft = perturbed(target, 0.1, seed=2)
    paths = []
    for name, model in (("target", target), ("draft", draft)):
        model.save_pretrained(str(root / name))
        tok.save_pretrained(str(root / name))
        paths.append(str(root / name))
    prompts = root / "prompts.jsonl"
    prompts.write_text("\n".join(json.dumps({"prompt": p}) for p in (
        "the cat sat on the mat. the cat sat on the", "abc abc abc abc abc", "hello there. hello there. hello")))
    return paths[0], paths[1], str(prompts)


@pytest.fixture()
def fast_costs(monkeypatch, tmp_path):
    """The cost model from numbers (no timing), the caches under tmp_path."""
    monkeypatch.setenv("SPECVIZ_CACHE_DIR", str(tmp_path))
    state = {"draft_step": 0.002}

    def fake_measure(target, *, context=256, drafts=(), **kw):
        cost = cost_model(slope=0.0005, draft_step=state["draft_step"], overhead=0.001)
        return C.CostModel(**{**cost.__dict__, "key": C.cost_key(target, context), "target": str(target.name), "drafts": {
            str(d.name): C.DraftCost(str(d.name), *[getattr(cost.drafts["d"], f) for f in ("step_s", "feed_s", "level_s", "prefill_s")])
            for d in drafts}})

    monkeypatch.setattr(C, "measure", fake_measure)
    return state


def advise(capsys, *argv):
    rc = cli.main(["advise", *argv, "--no-chat", "--quiet"])
    out, err = capsys.readouterr()
    return rc, out, err


def test_advise_ranks_runs_the_top_and_writes_json(capsys, models, fast_costs, tmp_path):
    target, draft, prompts = models
    out_json = tmp_path / "advice.json"
    rc, out, err = advise(capsys, "--target", target, "--proposer", "ngram", "--proposer", f"draft:{draft}",
                          "--proposer", "ngram-tree:3", "--prompts", prompts, "--max-new-tokens", "16", "--k-max", "4",
                          "--calibrate-tokens", "40", "--run-top", "2", "--json", str(out_json))
    assert rc == 0, err
    assert "Costs on test machine" in out and "Predicted on" in out and "Predicted vs measured" in out
    data = json.loads(out_json.read_text())
    assert data["forecasts"] and len(data["runs"]) == 2 and data["curves"]["n"] == list(range(1, 18))
    assert {f["proposer"] for f in data["forecasts"]} >= {"ngram", f"draft:{draft}"}
    speeds = [f["run_speedup"] for f in data["forecasts"]]  # ranked by the whole run's prediction
    assert speeds == sorted(speeds, reverse=True)
    assert all(f["speedup_lo"] <= f["speedup"] <= f["speedup_hi"] for f in data["forecasts"])
    assert all(r["measured_speedup"] is not None and r["error"] is not None for r in data["runs"])
    for r in data["runs"]:  # the median over prompts beside the total, and the error against it
        low, high = r["measured_interval"]
        assert low <= r["measured_median"] <= high
        assert r["error_median"] == pytest.approx((r["measured_median"] - r["predicted_speedup"]) / r["predicted_speedup"])
    assert "median" in out.split("Predicted vs measured")[1].splitlines()[1]
    assert f"{target}|ngram-tree:3" in json.loads((tmp_path / "advisor" / "shapes.json").read_text())


def test_advise_says_when_nothing_pays(capsys, models, fast_costs):
    target, draft, prompts = models
    fast_costs["draft_step"] = 0.05  # five target steps per draft token
    rc, out, err = advise(capsys, "--target", target, "--proposer", f"draft:{draft}", "--prompts", prompts,
                          "--max-new-tokens", "12", "--k-max", "3", "--calibrate-tokens", "20")
    assert rc == 0, err
    assert "does not pay on this machine" in out and "too slow to pay at any k" in out
    assert "Does not pay: no configuration is predicted to beat target-only decoding" in out


def test_advise_says_when_the_calibration_drafts_nothing(capsys, models, fast_costs):
    target, _, prompts = models
    rc, out, err = advise(capsys, "--target", target, "--proposer", "ngram", "--prompts", prompts,
                          "--max-new-tokens", "1", "--k-max", "2")
    assert rc == 0, err
    assert "the calibration drafted nothing" in out and "Does not pay" in out


def test_advise_bad_input_is_one_line(capsys, models, fast_costs):
    target, _, prompts = models
    rc, _, err = advise(capsys, "--target", target, "--proposer", "nonsense", "--prompts", prompts)
    assert rc == 2 and "unknown proposer" in err and "Traceback" not in err
    rc, _, err = advise(capsys, "--target", target, "--prompts", prompts, "--limit", "3", "--heldout", "3")
    assert rc == 2 and "leaves no prompts" in err


def test_the_cost_model_times_a_target_on_text(tiny):
    """With a tokenizer the cost model's tokens are text (the bundled prompts run together, from an
    offset the seed picks), the same for the same seed and inside the vocabulary; without one,
    uniform ids as before."""
    from specviz.analysis import costmodel
    from specviz.runtime.kv import vocab_size

    target = tiny[0]
    a = costmodel._tokens(target.model, 300, 0, target.tokenizer)
    assert a.shape == (300,) and torch.equal(a, costmodel._tokens(target.model, 300, 0, target.tokenizer))
    assert not torch.equal(a, costmodel._tokens(target.model, 300, 1, target.tokenizer))
    assert int(a.max()) < vocab_size(target.model)
    text = target.tokenizer.decode(a[:40].tolist())
    assert sum(ch.isalpha() or ch.isspace() for ch in text) > 0.6 * len(text)  # words, not noise
    assert costmodel._tokens(target.model, 5, 0).shape == (5,)
