"""Token trees: the sibling rule on hand-written distributions, its statistical exactness (and a
wrong rule failing the same check), one target forward over a tree with the right logits (sliding
windows included), KV compaction, the tree proposers end to end, and bad input."""

import copy
import itertools

import pytest
import torch

import specviz.algorithm as algorithm
from specviz import Sampling, SpeculativeDecoder, TraceRecorder, load_trace
from specviz.algorithm import check_tree, logits_to_probs, tree_depths, verify_tree
from specviz.engine import encode_prompt
from specviz.kv import (
    cache_length, check_tree_support, forward_logits, keep_slots, new_cache, rollback, tree_attention, tree_forward_logits,
)
from specviz.proposers import DraftModel, DraftTree, NGram, NGramTree
from specviz.proposers.draft_tree import DRAFT_TREE_DEFAULTS, parse_draft_tree
from specviz.proposers.ngram_tree import NGRAM_TREE_DEFAULTS, ngram_trie, parse_ngram_tree

T = torch.tensor


def pm(*xs):
    return T([list(x) for x in xs], dtype=torch.float32)


# -- 1. the rule on hand-written distributions -------------------------------------------------


def test_point_mass_siblings_exact_numbers():
    # root children: tokens 0 and 1 (point masses); p at the root = [.5, .3, .2, 0]
    p = pm([0.5, 0.3, 0.2, 0.0], [1, 0, 0, 0], [0, 1, 0, 0])
    tokens, parents = T([0, 1]), T([-1, -1])
    # u = .9 rejects child 0 (ratio .5), u = .9 rejects child 1 (ratio .3 / .5 = .6): correction = 2
    v = verify_tree(p, None, tokens, parents, generator=None, uniforms=[0.9, 0.9])
    assert v.path == () and v.next_token == 2 and v.resampled
    assert v.ratio == pytest.approx((0.5, 0.6)) and v.r_x == pytest.approx((0.5, 0.6))
    assert v.residual_mass == pytest.approx((0.5, 0.2))  # p-mass left after each rejection
    assert v.verdict == ("rejected", "rejected")
    assert torch.allclose(v.residual, T([0.0, 0.0, 1.0, 0.0]))
    # u = .9 then .5: child 1 kept (a leaf) -> bonus from p after node 1 = token 1
    v = verify_tree(p, None, tokens, parents, generator=None, uniforms=[0.9, 0.5])
    assert v.path == (1,) and v.next_token == 1 and not v.resampled and v.verdict == ("rejected", "accepted")
    # u = .1: child 0 kept at once, child 1 never tried
    v = verify_tree(p, None, tokens, parents, generator=None, uniforms=[0.1])
    assert v.path == (0,) and v.verdict == ("accepted", "not reached") and v.u[1] is None


def test_sampled_siblings_follow_rsd_numbers():
    # q = [.2, .5, .3]: children 1 then 2 (drawn without replacement); p = [.5, .3, .2]
    p = pm([0.5, 0.3, 0.2], [1, 0, 0], [1, 0, 0])
    q = pm([0.2, 0.5, 0.3], [0.2, 0.5, 0.3])
    v = verify_tree(p, q, T([1, 2]), T([-1, -1]), generator=None, uniforms=[0.99, 0.0])
    # child 1: min(1, .3/.5) = .6, rejected; r_2 = norm(max(0, p - q)) = [1, 0, 0];
    # q_2 = q without 1 = [.4, 0, .6]; child 2: min(1, 0 / .6) = 0, rejected (even with u = 0? u <= 0)
    assert v.ratio[0] == pytest.approx(0.6) and v.r_x[1] == pytest.approx(0.0) and v.ratio[1] == pytest.approx(0.0)
    assert v.residual_mass[0] == pytest.approx(0.3)
    # u = 0 <= 0 accepts a zero-probability child: never happens with real draws (u > 0 a.s.);
    # with u = 0.5 it is rejected and the correction is token 0
    v = verify_tree(p, q, T([1, 2]), T([-1, -1]), generator=None, uniforms=[0.99, 0.5])
    assert v.path == () and v.next_token == 0 and torch.allclose(v.residual, T([1.0, 0.0, 0.0]))


def test_greedy_follows_argmax_depth_by_depth():
    V = 5
    # tree: 0:'1'(root) 1:'2'(root) 2:'3'(0) 3:'4'(0) 4:'0'(3)
    tokens, parents = T([1, 2, 3, 4, 0]), T([-1, -1, 0, 0, 3])
    argmax_after = {0: 1, 1: 4, 2: 0, 3: 0, 4: 0, 5: 2}  # row -> argmax (row 0 = root, row i+1 = node i)
    p = torch.full((6, V), 0.1)
    for row, a in argmax_after.items():
        p[row, a] = 0.6
    v = verify_tree(p, None, tokens, parents, generator=None, greedy=True)
    assert v.path == (0, 3, 4) and v.next_token == 2 and not v.resampled  # leaf kept: bonus argmax
    assert v.verdict == ("accepted", "rejected", "rejected", "accepted", "accepted")
    p[4, 0], p[4, 3] = 0.1, 0.9  # after node 3 the target wants 3: no child matches
    v = verify_tree(p, None, tokens, parents, generator=None, greedy=True)
    assert v.path == (0, 3) and v.next_token == 3 and v.resampled and v.verdict[4] == "rejected"


def test_trees_must_be_well_formed():
    with pytest.raises(ValueError, match="merge duplicate siblings"):
        check_tree(T([5, 5]), T([-1, -1]))
    with pytest.raises(ValueError, match="earlier node"):
        check_tree(T([5, 6]), T([1, -1]))
    assert check_tree(T([5, 5, 7]), T([-1, 0, 0])) == [[0], [1, 2], [], []]
    assert tree_depths(T([-1, 0, 0, 2, -1])) == [1, 2, 2, 3, 1]


# -- 2. statistical exactness on a toy "model" (p depends on the last token) -------------------

V = 6
N = 5_000  # TV noise over the 36 cells is ~0.02-0.03 here; a wrong sibling rule gives > 0.1


def toy_model(seed: int):
    g = torch.Generator().manual_seed(seed)
    p1 = torch.softmax(torch.randn(V, generator=g) * 1.5, -1)  # [V] first token
    p2 = torch.softmax(torch.randn(V, V, generator=g) * 1.5, -1)  # [V, V] second | first
    q1 = torch.softmax(torch.randn(V, generator=g) * 1.5, -1)
    q2 = torch.softmax(torch.randn(V, V, generator=g) * 1.5, -1)
    return p1, p2, q1, q2


def two_level_tree(first: list[int], second: dict[int, list[int]]):
    tokens, parents = [], []
    for a in first:
        tokens.append(a)
        parents.append(-1)
        me = len(tokens) - 1
        for b in second.get(a, []):
            tokens.append(b)
            parents.append(me)
    return T(tokens), T(parents)


def sample_joint(seed: int, sampled: bool, width: int = 2, n: int = N):
    """Counts of (t1, t2) over n runs of verify_tree on a two-level tree (t2 drawn from p2[t1] when
    the step stopped after one token, as the next step would)."""
    p1, p2, q1, q2 = toy_model(seed)
    g = torch.Generator().manual_seed(seed + 100)
    counts = torch.zeros(V, V)
    for _ in range(n):
        if sampled:  # children drawn from q without replacement (distinct siblings)
            first = torch.multinomial(q1, width, replacement=False, generator=g).tolist()
            second = {a: torch.multinomial(q2[a], width, replacement=False, generator=g).tolist() for a in first}
        else:  # deterministic: the top-w of q (point masses)
            first = torch.topk(q1, width).indices.tolist()
            second = {a: torch.topk(q2[a], width).indices.tolist() for a in first}
        tokens, parents = two_level_tree(first, second)
        rows = [p1] + [p2[t] if a < 0 else p2[t] for t, a in zip(tokens.tolist(), parents.tolist())]
        p = torch.stack(rows)  # [n+1, V]: row i+1 = after node i (depth-2 rows: any p, only bonus)
        q = torch.stack([q1 if a < 0 else q2[int(tokens[a])] for a in parents.tolist()]) if sampled else None
        v = verify_tree(p, q, tokens, parents, generator=g)
        out = tokens[list(v.path)].tolist() + [v.next_token]
        if len(out) == 1:
            out.append(int(torch.multinomial(p2[out[0]], 1, generator=g)))
        counts[out[0], out[1]] += 1
    exact = p1[:, None] * p2  # [V, V]
    return 0.5 * float((counts / n - exact).abs().sum())


@pytest.mark.parametrize("sampled", [False, True], ids=["point-masses", "sampled"])
def test_tree_rule_keeps_the_joint_of_the_first_two_tokens(sampled):
    assert sample_joint(0, sampled) < 0.05


@pytest.mark.parametrize("sampled", [False, True], ids=["point-masses", "sampled"])
def test_wrong_sibling_rule_fails_the_same_check(sampled, monkeypatch):
    # the second child tested against the original p instead of the residual
    monkeypatch.setattr(algorithm, "sibling_residual", lambda r, q_j: r)
    assert sample_joint(0, sampled) > 0.08
