"""Token trees: the sibling rule on hand-written distributions, its statistical exactness (and a
wrong rule failing the same check), one target forward over a tree with the right logits (sliding
windows included), KV compaction, the tree proposers end to end, and bad input."""

import copy
import itertools
import re

import pytest
import torch

import specviz.core.algorithm as algorithm
from specviz import Proposal, Sampling, SpeculativeDecoder, TraceRecorder, load_trace
from specviz.analysis import checks
from specviz.app.runs import hosted_decoder
from specviz.core.algorithm import check_tree, logits_to_probs, tree_depths, verify_tree
from specviz.core.engine import encode_prompt
from specviz.proposers import DraftModel, DraftTree, NGram, NGramTree
from specviz.proposers.draft_tree import DRAFT_TREE_DEFAULTS, parse_draft_tree
from specviz.proposers.ngram_tree import NGRAM_TREE_DEFAULTS, ngram_trie, parse_ngram_tree
from specviz.runtime.kv import (
    cache_length,
    check_tree_support,
    forward_logits,
    keep_slots,
    new_cache,
    rollback,
    tree_attention,
    tree_forward_logits,
)
from tests.support import hf_greedy

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
    """At N = 5000 runs over 36 cells, exact TV ~ 0.020 (99.9%: 0.036), threshold 0.05; seen 0.022
    (point masses), 0.017 (sampled). Detects any deviation of the joint above ~0.09."""
    assert sample_joint(0, sampled) < 0.05


@pytest.mark.parametrize("sampled", [False, True], ids=["point-masses", "sampled"])
def test_wrong_sibling_rule_fails_the_same_check(sampled, monkeypatch):
    """Testing the second child against the original p instead of the residual gives TV ~ 0.17
    (0.171 / 0.173 at N = 5000, 0.176 / 0.168 at the N = 2000 used here, whose exact noise is 0.032,
    99.9%: 0.056): over both thresholds (0.05 and 0.08) with a margin of 0.09."""
    monkeypatch.setattr(algorithm, "sibling_residual", lambda r, q_j: r)
    assert sample_joint(0, sampled, n=2000) > 0.08


# -- 3. one forward over a tree: each node gets the logits of its own chain --------------------


@pytest.fixture(scope="module")
def gemma_sliding(tokenizer):
    """A tiny Gemma 3 whose sliding window (8) is far shorter than the contexts used here."""
    from specviz.analysis.checks import tiny_gemma3
    from tests.support.tiny import loaded

    # peaked, but not so much that sampling never rejects
    return loaded(tiny_gemma3(len(tokenizer), seed=3, window=8, sharpen=4.0), tokenizer, "tiny-gemma3-sliding")


@pytest.fixture(scope="module")
def gemma_near(gemma_sliding):
    from tests.support.tiny import loaded, perturbed

    return loaded(perturbed(gemma_sliding.model, 0.3, seed=1), gemma_sliding.tokenizer, "tiny-gemma3-near")


def _chain_logits(model, ctx, feed, par, i):
    chain = []
    while i >= 0:
        chain.append(int(feed[i]))
        i = int(par[i])
    return model(torch.cat([ctx, T(chain[::-1])])[None]).logits[0, -1]


@pytest.mark.parametrize("which", ["llama", "gemma-sdpa", "gemma-eager"])
@torch.no_grad()
def test_tree_forward_gives_each_node_its_chain_logits(tiny_target, gemma_sliding, which):
    model = tiny_target.model if which == "llama" else copy.deepcopy(gemma_sliding.model)
    if which == "gemma-eager":
        model.config._attn_implementation = "eager"
    check_tree_support(model)
    g = torch.Generator().manual_seed(0)
    ctx = torch.randint(4, 37, (21,), generator=g)  # longer than the 8-token window
    par = T([-1, 0, 0, 1, 1, 2, 5, 6, 7, 8, 3])  # slot 0 = the root (last context token)
    feed = torch.cat([ctx[-1:], torch.randint(4, 37, (10,), generator=g)])  # [11]
    depth = [0]
    for a in par[1:].tolist():
        depth.append(depth[a] + 1)
    cache = new_cache(model)
    forward_logits(model, ctx[:-1], cache, 1)
    rollback(cache, 20)
    pos = 20 + T(depth)
    logits = tree_forward_logits(model, cache, feed, pos, tree_attention(par), pos)  # [11, V]
    worst = max(float((_chain_logits(model, ctx[:-1], feed, par, i) - logits[i]).abs().max()) for i in range(11))
    assert worst < 1e-4
    # and the mask matters: plain causal attention over the same slots gives other logits
    other = new_cache(model)
    forward_logits(model, ctx[:-1], other, 1)
    rollback(other, 20)
    causal = tree_forward_logits(model, other, feed, pos, torch.tril(torch.ones(11, 11, dtype=torch.bool)), pos)
    assert float((causal - logits).abs().max()) > 1e-3
    # compaction: keep the root and the path 1 -> 3 -> 10; the cache then equals the chain's
    keep_slots(cache, 11, [0, 1, 3, 10])
    rollback(cache, cache_length(cache))
    assert cache_length(cache) == 24
    nxt = forward_logits(model, T([5]), cache, 1)[0]
    full = model(torch.cat([ctx, feed[[1, 3, 10]], T([5])])[None]).logits[0, -1]
    assert torch.allclose(nxt, full, atol=1e-4)


def test_models_that_cannot_take_a_tree_mask_fail_at_start(tiny_target, monkeypatch):
    import specviz.runtime.kv as kv

    monkeypatch.setattr(kv, "TREE_ATTENTION", ("eager",))  # as if sdpa could not take the mask
    with pytest.raises(ValueError, match="cannot take a token tree"):
        SpeculativeDecoder(tiny_target, NGramTree(), k=3)
    monkeypatch.setattr(kv, "_takes_mask_per_layer_type", lambda model: False)
    monkeypatch.setattr(kv, "TREE_ATTENTION", ("sdpa", "eager"))


def test_sliding_model_without_per_layer_masks_is_refused(gemma_sliding, monkeypatch):
    import specviz.runtime.kv as kv

    monkeypatch.setattr(kv, "_takes_mask_per_layer_type", lambda model: False)
    with pytest.raises(ValueError, match="sliding-window"):
        SpeculativeDecoder(gemma_sliding, NGramTree(), k=3)


# -- 4. the engine: greedy equality, KV after tree steps, sampling exactness -------------------

PROMPTS = [
    "the cat sat on the mat. the cat sat on the hat. the cat sat on the",
    "hello world, hello again. hello",
    "a quick brown fox jumps over the lazy dog",
]




@pytest.mark.parametrize("shape", ["ngram-tree", "ngram-tree,nodes=3", "draft-tree", "draft-tree,nodes=5,width=3",
                                   "draft-tree,nodes=1,width=1"])
@pytest.mark.parametrize("k", [1, 4])
def test_greedy_tree_output_equals_target_greedy(tiny_target, tiny_draft, near_draft, shape, k):
    kind, _, opts = shape.partition(",")
    for prompt in PROMPTS:
        ref = hf_greedy(tiny_target, prompt, 30)
        if kind == "ngram-tree":
            proposers = [NGramTree(**parse_ngram_tree(opts and "," + opts))]
        else:
            args = parse_draft_tree("x," + opts if opts else "x")[1]
            proposers = [DraftTree(near_draft, **args), DraftTree(tiny_draft, **args)]
        for proposer in proposers:
            res = SpeculativeDecoder(tiny_target, proposer, k=k).generate(prompt, max_new_tokens=30)
            assert list(res.token_ids) == ref, proposer.name
            assert res.stats.new_tokens == len(ref) == sum(s.n_committed for s in res.steps)
    chain = SpeculativeDecoder(tiny_target, NGram(), k=k).generate(PROMPTS[0], max_new_tokens=30)
    assert list(chain.token_ids) == hf_greedy(tiny_target, PROMPTS[0], 30)


def test_trees_really_branch_and_accept_more_than_chains(tiny_target, near_draft):
    tree = SpeculativeDecoder(tiny_target, DraftTree(near_draft), k=4).generate(PROMPTS[0], max_new_tokens=40)
    chain = SpeculativeDecoder(tiny_target, DraftModel(near_draft), k=4).generate(PROMPTS[0], max_new_tokens=40)
    assert tree.token_ids == chain.token_ids
    assert any(len({n.depth for n in s.tree}) < len(s.tree) for s in tree.steps)  # siblings exist
    assert tree.stats.mean_acceptance_length >= chain.stats.mean_acceptance_length
    s = tree.steps[0]
    assert s.k == len(s.tree) and tree.stats.drafted == sum(len(x.tree) for x in tree.steps)
    assert [s.tree[i].verdict for i in s.accepted_path] == ["accepted"] * len(s.accepted_path)


@pytest.mark.parametrize("which", ["llama", "gemma"])
def test_kv_after_tree_steps_matches_full_recompute(tiny_target, near_draft, gemma_sliding, gemma_near, which):
    target, draft = (tiny_target, near_draft) if which == "llama" else (gemma_sliding, gemma_near)
    for proposer in [DraftTree(draft, nodes=8, width=2), NGramTree()]:
        session = SpeculativeDecoder(target, proposer, k=4, sampling=Sampling(2.0)).start(PROMPTS[0], max_new_tokens=40, seed=1)
        rejected = 0
        while not session.done:
            rec = session.step()
            rejected += any(n.verdict == "rejected" for n in rec.tree)
            ctx = session.context
            cache = copy.deepcopy(session.cache)
            via_cache = forward_logits(target.model, ctx[-1:], cache, 1)[0]
            assert torch.allclose(via_cache, target.model(ctx[None]).logits[0, -1], atol=1e-4)
            st = session.proposer_state
            if isinstance(proposer, DraftTree) and not session.done:
                # the draft's cache after the next propose's catch-up: ids then nothing else
                from specviz.proposers.draft_tree import _reconcile

                st = copy.deepcopy(st)
                _reconcile(st, ctx.tolist())
                rollback(st.cache, len(st.ids) - 1)
                ids = T(st.ids)
                assert ctx.tolist()[: len(ids)] == st.ids
                via, want = forward_logits(draft.model, ids[-1:], st.cache, 1)[0], draft.model(ids[None]).logits[0, -1]
                assert torch.allclose(via, want, atol=1e-4), (via - want).abs().max()
        assert rejected > 0


def test_draft_tree_keeps_the_accepted_path_in_the_draft_cache(tiny_target, near_draft):
    session = SpeculativeDecoder(tiny_target, DraftTree(near_draft), k=4).start(PROMPTS[0], max_new_tokens=20)
    session.step()
    from specviz.proposers.draft_tree import _reconcile

    st = session.proposer_state
    before = len(st.ids)
    _reconcile(st, session.context.tolist())
    assert len(st.ids) > before  # the accepted path's slots were kept, not recomputed


def test_a_draft_tree_grows_no_deeper_than_its_node_budget(tiny_target, near_draft):
    """N kept nodes are at most N deep: with k far past N the tree is the one k = N grows, from
    fewer draft forwards than k - 1 levels would take."""
    for nodes in (1, 3):
        props = []
        for k in (nodes, 8):
            proposer = DraftTree(near_draft, nodes=nodes, width=2)
            state = proposer.init_state(tiny_target)
            ctx = torch.tensor(tiny_target.tokenizer.encode(PROMPTS[0]))
            props.append(proposer.propose(state, ctx, k, Sampling(), None))
        assert torch.equal(props[0].tokens, props[1].tokens) and torch.equal(props[0].parents, props[1].parents)
        assert props[1].info["expanded"] == props[0].info["expanded"] <= 2 * (nodes - 1)
        assert max(tree_depths(props[1].parents)) <= nodes


def test_max_new_tokens_and_eos_are_exact_with_trees(tiny_target, near_draft):
    from dataclasses import replace

    for n in [1, 2, 5, 13]:
        res = SpeculativeDecoder(tiny_target, DraftTree(near_draft), k=6).generate(PROMPTS[0], max_new_tokens=n)
        assert len(res.token_ids) == n and res.finished == "length"
        assert all(max((x.depth for x in s.tree), default=0) + 1 + sum(x.n_committed for x in res.steps[: s.index]) <= n
                   for s in res.steps)
    eos = 2
    ref = hf_greedy(tiny_target, PROMPTS[2], 40)
    usual = max(set(ref), key=ref.count)
    model = copy.deepcopy(tiny_target.model)
    with torch.no_grad():
        model.lm_head.weight[eos] = model.lm_head.weight[usual] * 1.01
    target = replace(tiny_target, model=model)
    ref = hf_greedy(target, PROMPTS[2], 40)
    assert eos in ref
    for proposer in [DraftTree(near_draft), NGramTree()]:
        res = SpeculativeDecoder(target, proposer, k=4).generate(PROMPTS[2], max_new_tokens=40)
        assert list(res.token_ids) == ref[: ref.index(eos) + 1] and res.finished == "eos"


def _exact_joint(target, prompt_ids, sampling, eos=2):
    """P(t1, t2) of target-only sampling, exactly: [V, V+1], the last column "no t2" (t1 was EOS)."""
    ids = torch.tensor(prompt_ids)
    with torch.no_grad():
        p1 = logits_to_probs(target.model(ids[None]).logits[0, -1], sampling)  # [V]
        V = p1.shape[0]
        batch = torch.cat([ids.repeat(V, 1), torch.arange(V)[:, None]], dim=1)  # [V, n+1]
        p2 = logits_to_probs(target.model(batch).logits[:, -1], sampling)  # [V, V]
    joint = torch.cat([p1[:, None] * p2, torch.zeros(V, 1)], dim=1)  # [V, V+1]
    joint[eos] = 0.0
    joint[eos, -1] = p1[eos]
    return joint


def _tv_joint(decoder, prompt, n):
    """TV between the first two tokens of n seeded runs and the exact target joint, and the TV that
    n samples drawn straight from the exact joint get (the sampling noise, averaged over 5 draws)."""
    exact = _exact_joint(decoder.target, encode_prompt(decoder.target.tokenizer, prompt), decoder.sampling)
    counts = torch.zeros_like(exact)
    for t1, t2 in checks.first_two_tokens(decoder, prompt, range(n), max_new_tokens=2):  # = generate(..., 2, seed)'s
        counts[t1, t2] += 1
    g = torch.Generator().manual_seed(0)
    noise = sum(
        0.5 * float((torch.bincount(torch.multinomial(exact.flatten(), n, replacement=True, generator=g),
                                    minlength=exact.numel()) / n - exact.flatten()).abs().sum())
        for _ in range(5)
    ) / 5
    return 0.5 * float((counts / n - exact).abs().sum()), noise


def _branching_ngram_prompt(target, sampling, stem="ab c"):
    """"stem x stem y stem": two continuations (y, then x) at the root; picks x, y the target
    gives the most probability to both (where a wrong sibling rule shows most)."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    ids = torch.tensor(encode_prompt(target.tokenizer, stem + "x" + stem + "y" + stem))
    with torch.no_grad():  # p at the root barely depends on x, y: score pairs on one forward
        p = logits_to_probs(target.model(ids[None]).logits[0, -1], sampling)
    tid = target.tokenizer.convert_tokens_to_ids
    x, y = max(itertools.permutations(letters, 2), key=lambda xy: min(float(p[tid(xy[0])]), float(p[tid(xy[1])])))
    return stem + x + stem + y + stem


BRANCHY = "hello world, hello again. hello"  # near_draft's top-2 there get p ~0.4 and ~0.55 from the target


@pytest.mark.parametrize("kind", ["ngram-tree", "draft-tree"])
def test_sampled_first_two_tokens_follow_the_target_joint(tiny_target, near_draft, kind, monkeypatch):
    """Joint TV of (t1, t2) over 37 x 38 cells, N = 800 runs. ngram-tree: exact TV ~ 0.079 (99.9%:
    0.116), seen 0.069 < noise + 0.03; the wrong sibling rule 0.272 > noise + 0.06 = 0.142. draft-tree:
    exact ~ 0.034 (99.9%: 0.074), seen 0.040 < 0.058; wrong 0.106 > 0.088 (a thin margin, 0.018)."""
    sampling = Sampling(1.0)
    if kind == "ngram-tree":
        proposer, prompt = NGramTree(), _branching_ngram_prompt(tiny_target, sampling)
    else:
        proposer, prompt = DraftTree(near_draft, nodes=6, width=3), BRANCHY
    decoder = SpeculativeDecoder(tiny_target, proposer, k=2, sampling=sampling)
    s = decoder.start(prompt, max_new_tokens=2).step()
    root_kids = [x for x in s.tree if x.depth == 1]
    assert len(root_kids) >= 2 and 0.05 < max(x.p for x in root_kids) < 0.95  # really branches, a likely child
    n = 800
    ok, noise = _tv_joint(decoder, prompt, n)
    monkeypatch.setattr(algorithm, "sibling_residual", lambda r, q_j: r)  # the wrong sibling rule
    bad, _ = _tv_joint(decoder, prompt, n)
    assert ok < noise + 0.03 and bad > noise + 0.06, (ok, bad, noise)  # seen: ~0.03-0.04 vs >= 0.1


# -- 5. the draft policy of the chain draft model ----------------------------------------------


@pytest.mark.parametrize("k", [1, 4])
def test_argmax_policy_greedy_equals_target_greedy(tiny_target, tiny_draft, near_draft, k):
    for draft in (tiny_draft, near_draft):
        for prompt in PROMPTS:
            res = SpeculativeDecoder(tiny_target, DraftModel(draft, policy="argmax"), k=k).generate(prompt, max_new_tokens=30)
            assert list(res.token_ids) == hf_greedy(tiny_target, prompt, 30)


def test_argmax_policy_is_exact_when_sampling(tiny_target, near_draft, monkeypatch):
    """Joint TV, N = 800: exact ~ 0.033 (99.9%: 0.073), seen 0.039 < noise + 0.03 = 0.058; resampling
    the correction from p gives 0.254 > noise + 0.06 = 0.088 (margin 0.17)."""
    decoder = SpeculativeDecoder(tiny_target, DraftModel(near_draft, policy="argmax"), k=2, sampling=Sampling(1.0))
    rec = decoder.start(BRANCHY, max_new_tokens=3).step()
    assert all(d.q == 1.0 for d in rec.drafts) and rec.drafts[0].top_q  # point masses; q still shown
    n = 800
    ok, noise = _tv_joint(decoder, BRANCHY, n)
    monkeypatch.setattr(algorithm, "point_mass_residual", lambda p, x: p)  # correction from p: wrong
    bad, _ = _tv_joint(decoder, BRANCHY, n)
    assert ok < noise + 0.03 and bad > noise + 0.06, (ok, bad, noise)  # seen: ~0.03-0.04 vs >= 0.1


# -- 6. specs, limits, records -----------------------------------------------------------------


def test_option_parsers_and_defaults():
    assert parse_ngram_tree(None) == NGRAM_TREE_DEFAULTS == {"max_ngram": 3, "nodes": 16}
    assert parse_ngram_tree("4,nodes=24") == {"max_ngram": 4, "nodes": 24}
    assert parse_ngram_tree(",nodes=8") == {"max_ngram": 3, "nodes": 8}
    assert parse_draft_tree("smollm2-135m@int8") == ("smollm2-135m@int8", DRAFT_TREE_DEFAULTS)
    assert parse_draft_tree("m,width=3,nodes=20") == ("m", {"nodes": 20, "width": 3})


@pytest.mark.parametrize("bad, match", [
    ("0", "whole number >= 1"), ("x", "whole number >= 1"), ("3,nodes=0", "whole number >= 1"),
    ("3,nodes=-2", "whole number >= 1"), ("3,width=2", "unknown option"), ("3,nodes", "unknown option"),
])
def test_bad_ngram_tree_specs(bad, match):
    with pytest.raises(ValueError, match=match) as e:
        parse_ngram_tree(bad)
    assert "ngram-tree[:N][,nodes=M]" in str(e.value)


@pytest.mark.parametrize("bad, match", [
    ("", "needs a draft model"), (",nodes=3", "needs a draft model"), ("m,nodes=0", "whole number >= 1"),
    ("m,width=-1", "whole number >= 1"), ("m,depth=3", "unknown option"), ("m,nodes=3,nodes=4", "twice"),
])
def test_bad_draft_tree_specs(bad, match):
    with pytest.raises(ValueError, match=match) as e:
        parse_draft_tree(bad)
    assert "draft-tree:NAME[@int8][,nodes=N,width=W]" in str(e.value)


def test_bad_constructor_arguments(near_draft):
    for kwargs in ({"nodes": 0}, {"max_ngram": 0}, {"nodes": -3}):
        with pytest.raises(ValueError, match=">= 1"):
            NGramTree(**kwargs)
    for kwargs in ({"nodes": 0}, {"width": 0}, {"width": -1}):
        with pytest.raises(ValueError, match=">= 1"):
            DraftTree(near_draft, **kwargs)
    with pytest.raises(ValueError, match="sampled, argmax"):
        DraftModel(near_draft, policy="greedy")


def test_hosting_limit_on_tree_nodes(tiny_target, near_draft, monkeypatch):
    monkeypatch.setenv("SPECVIZ_MAX_TREE_NODES", "8")
    with pytest.raises(ValueError, match=r"SPECVIZ_MAX_TREE_NODES.*draft-tree:NAME\[@int8\]\[,nodes=N,width=W\]"):
        hosted_decoder(tiny_target, DraftTree(near_draft, nodes=12), k=4)
    assert hosted_decoder(tiny_target, DraftTree(near_draft, nodes=8), k=4).max_tree_nodes == 8  # at the limit: fine


class _WideTree:
    """A tree proposer that states no max_nodes: three children of the root, whatever k is."""

    name = "wide-tree"

    def init_state(self, target):
        return None

    def propose(self, state, context, k, sampling, generator, stop=None):
        return Proposal(tokens=T([5, 6, 7]), q=None, parents=T([-1, -1, -1]), deterministic=True)


def test_the_decoder_takes_its_cap_on_tree_nodes_as_an_argument(tiny_target, near_draft, monkeypatch):
    monkeypatch.setenv("SPECVIZ_MAX_TREE_NODES", "8")
    assert SpeculativeDecoder(tiny_target, DraftTree(near_draft, nodes=12), k=4).max_tree_nodes is None  # core reads no env
    with pytest.raises(ValueError, match=r"a token tree of 12 nodes per step is more than this decoder allows "
                                         r"\(max_tree_nodes=8\); ask the proposer for fewer nodes"):
        SpeculativeDecoder(tiny_target, DraftTree(near_draft, nodes=12), k=4, max_tree_nodes=8)
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="max_tree_nodes must be a whole number >= 1"):
            SpeculativeDecoder(tiny_target, NGram(), k=4, max_tree_nodes=bad)
    session = SpeculativeDecoder(tiny_target, _WideTree(), k=2, max_tree_nodes=2).start(PROMPTS[0], max_new_tokens=8)
    with pytest.raises(ValueError, match=r"a token tree of 3 nodes per step .*max_tree_nodes=2"):
        session.step()  # checked on every step, before the target's forward
    assert session.target_forwards == 1 and not session.steps  # the prefill only
    free = SpeculativeDecoder(tiny_target, _WideTree(), k=2).generate(PROMPTS[0], max_new_tokens=8)
    assert all(len(s.tree) == 3 for s in free.steps[:-1])


def test_ngram_trie_merges_every_distinct_continuation():
    ctx = T([1, 2, 3, 1, 2, 4, 5, 1, 2, 3, 6, 1, 2])  # "1 2" was followed by 3 1 / 4 5 / 3 6
    tokens, parents = ngram_trie(ctx, 2, 2, 2, budget=16)
    assert tokens == [3, 6, 4, 5, 1] and parents == [-1, 0, -1, 2, 0]  # most recent first, merged
    assert ngram_trie(ctx, 2, 2, 2, budget=3) == ([3, 6, 4], [-1, 0, -1])
    check_tree(T(tokens), T(parents))


def test_tree_steps_round_trip_through_traces(tiny_target, near_draft, tmp_path):
    path = tmp_path / "tree.jsonl"
    dec = SpeculativeDecoder(tiny_target, DraftTree(near_draft), k=3, sampling=Sampling(1.0))
    res = dec.generate(PROMPTS[0], max_new_tokens=15, seed=2, hooks=[TraceRecorder(path)])
    trace = load_trace(path)
    assert trace.steps == res.steps and trace.stats == res.stats
    assert all(s.tree and s.accepted_path == tuple(i for i, n in enumerate(s.tree) if n.accepted) for s in trace.steps)


# -- 7. the pure figure builders ---------------------------------------------------------------


def test_tree_figures_show_verdicts_path_and_mask(tiny_target, near_draft):
    from specviz.viz.tree import tree_figure, tree_layout, tree_mask, tree_mask_figure

    res = SpeculativeDecoder(tiny_target, DraftTree(near_draft), k=4, sampling=Sampling(2.0)).generate(
        BRANCHY, max_new_tokens=40, seed=3)
    step = next(s for s in res.steps if any(n.verdict == "rejected" for n in s.tree))
    fig = tree_figure(step)
    names = {t.name for t in fig.data if t.name}
    assert {"accepted", "rejected", "not reached"} <= names
    hover = " ".join(h for t in fig.data if t.hovertext for h in t.hovertext)
    assert "accept prob" in hover and "u = " in hover
    tried_after_rejection = [n for n in step.tree if n.ratio is not None and any(
        s.parent == n.parent and s.index < n.index and s.verdict == "rejected" for s in step.tree)]
    if tried_after_rejection:
        assert "p left after each rejected sibling" in hover
    pos = tree_layout(step.tree)
    assert all(pos[n.index][0] == n.depth for n in step.tree) and pos[-1][0] == 0
    par = T([-1] + [n.parent + 1 for n in step.tree])  # slot 0 = the root
    assert tree_mask(step) == tree_attention(par).tolist()
    heat = tree_mask_figure(step).data[0]
    assert len(heat.z) == len(step.tree) + 1
    chain = SpeculativeDecoder(tiny_target, DraftModel(near_draft), k=2).generate(BRANCHY, max_new_tokens=3).steps[0]
    assert len(tree_figure(chain).data) == 0  # a chain step: an empty figure with a note


def test_tree_picture_ends_at_the_next_token_and_keys_its_mask(tiny_target, near_draft):
    """The axis ends at the deepest node or the bonus/correction (not one depth past), labels are
    not clipped at the top, and the mask has a context column and a colour key."""
    from specviz.viz.tree import LABEL_ROOM, tree_figure, tree_layout, tree_mask_figure

    res = SpeculativeDecoder(tiny_target, DraftTree(near_draft), k=4, sampling=Sampling(2.0)).generate(
        BRANCHY, max_new_tokens=40, seed=3)
    for step in res.steps[:4]:
        fig = tree_figure(step)
        last = step.accepted_path[-1] if step.accepted_path else -1
        next_depth = int(tree_layout(step.tree)[last][0]) + 1
        deepest = max(next_depth, max(n.depth for n in step.tree))
        assert fig.layout.xaxis.range[1] < deepest + 1
        assert deepest in [x for t in fig.data for x in (t.x or ()) if x is not None]
        assert fig.layout.yaxis.range[1] == -LABEL_ROOM  # room above the top row for its labels
        assert all(t.cliponaxis is False for t in fig.data if t.mode and "text" in t.mode)
        heat, *key = tree_mask_figure(step).data
        assert heat.x[0] == "context" and len(heat.x) == len(step.tree) + 2
        assert all(row[0] > 0 for row in heat.z)  # every query sees the whole context
        assert [k.name for k in key] == ["masked", "sees it", "sees it, on the accepted path"]


def _crowded_tree_step(next_kind: str):
    """A crowded tree by hand: the root's child "Wonderful" accepted, then four children at depth 2
    with wide labels, all rejected (a correction) or the last accepted with a child of its own (a
    bonus), and a second branch of the root never reached."""
    from specviz.core.records import StepRecord, TreeNode

    words = [" Wonderful", " MMMMMMMMMM", " wwwwwwwwww", " 你好世界你好", " @@@@@@@@@", " Q", " never", " reached"]
    shape = [(-1, 1), (0, 2), (0, 2), (0, 2), (0, 2), (4, 3), (-1, 1), (6, 2)]
    bonus = next_kind == "bonus"
    path = (0, 4, 5) if bonus else (0,)
    verdicts = ["accepted" if i in path else "rejected" if 1 <= i <= 4 else "not reached" for i in range(8)]
    if not bonus:
        verdicts[5] = "not reached"
    nodes = tuple(TreeNode(index=i, token_id=300 + i, text=w, parent=par, depth=d, q=0.4, p=0.3, r=0.3, ratio=0.75,
                           u=None if v == "not reached" else 0.5, residual_mass=None, verdict=v, top_q=())
                  for i, (w, (par, d), v) in enumerate(zip(words, shape, verdicts)))
    committed = tuple(words[i] for i in path) + (" Mmmmmmmmmmmmmm",)
    return StepRecord(index=3, k=len(path), drafts=(), n_accepted=len(path), next_token_id=13,
                      next_token_text=committed[-1], next_kind=next_kind, next_p=0.5, top_next=((13, committed[-1], 0.5),),
                      top_residual=((13, committed[-1], 0.8),), committed=tuple(range(len(committed))),
                      committed_text=committed, draft_ms=1.0, verify_ms=2.0, other_ms=0.1, tree=nodes, accepted_path=path)


@pytest.mark.parametrize("next_kind", ["resampled", "bonus"])
def test_tree_labels_never_overlap_or_leave_the_picture(next_kind):
    """Four wide siblings at one depth plus the correction (or a bonus under the last of them):
    at a phone's width and a desktop's, no two labels (and no label and node) overlap, and every
    label lies inside the picture, under the title and above the axis."""
    from specviz.viz.figures import _spec
    from specviz.viz.numbers import Reveal
    from specviz.viz.tree import NEXT, label_boxes, tree_figure, tree_layout

    rec = _crowded_tree_step(next_kind)
    pos = tree_layout(rec.tree, next_after=rec.accepted_path[-1])
    assert len({y for _, y in pos.values()}) == len(pos)  # a row per node
    assert pos[NEXT][0] == pos[rec.accepted_path[-1]][0] + 1
    siblings = [pos[i][1] for i in (1, 2, 3, 4)]
    assert siblings == sorted(siblings)  # in drafting order
    if next_kind == "resampled":
        assert pos[NEXT][1] > max(siblings)  # the correction after the siblings it replaced
    for fig in (tree_figure(rec), tree_figure(rec, shown=Reveal(True, 0, False, "verify"))):
        lay = fig.layout
        for width in (300, 358, 640, 1100):
            boxes = label_boxes(fig, width)
            labels = [(w, b) for w, b in boxes if w.startswith("label:")]
            assert len(labels) == len([t for t in fig.data if t.text for _ in t.text])
            for (wa, a), (wb, b) in itertools.combinations(boxes, 2):
                if wa == wb == "node":
                    continue
                apart = a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1]
                assert apart, f"{wa} {a} meets {wb} {b} at {width} px"
            for w, (left, top, right, bottom) in labels:
                assert left >= 0 and right <= width, f"{w} clipped at {width} px"
                assert top >= lay.margin.t and bottom <= lay.height - lay.margin.b, f"{w} outside the plot at {width} px"
        assert max(lay.xaxis.range) < max(x for x, _ in pos.values()) + 1  # no depth past the next token
        first, second = (re.sub(r"<[^>]+>", "", line) for line in lay.title.text.split("<br>"))
        for line, size in ((first, 13), (second, 11.5)):  # prose: about 0.51 em a character in Chromium (measured)
            assert len(line) * 0.55 * size <= 296, f"title line {line!r} wider than a phone's picture"
    old = _spec([dict(type="scatter", mode="markers+text", x=[1.0, 2.0, 2.0], y=[0.0, 0.0, 0.1], text=["a", "b", "c"],
                      textposition="top center")], "t", height=300, xaxis=dict(range=[0, 3]), yaxis=dict(range=[1, -1]))
    boxes = [b for w, b in label_boxes(old, 300) if w != "node"]  # the check sees an overlap where there is one
    assert not (boxes[1][3] <= boxes[2][1] or boxes[2][3] <= boxes[1][1])


def test_chain_views_read_tree_steps_through_chain_view(tiny_target, near_draft):
    from specviz.viz import position_choices, step_summary_text, topk_figure
    from specviz.viz.tree import chain_view

    for temperature in (0.0, 2.0):
        res = SpeculativeDecoder(tiny_target, DraftTree(near_draft), k=4, sampling=Sampling(temperature)).generate(
            BRANCHY, max_new_tokens=20, seed=3)
        for s in map(chain_view, res.steps):
            assert s.k == len(s.drafts) and s.n_accepted <= s.k
            topk_figure(s)
            assert step_summary_text(s) and position_choices(s)


def test_traces_written_before_trees_still_load(tiny_target, near_draft):
    from specviz.core.records import StepRecord

    step = SpeculativeDecoder(tiny_target, DraftModel(near_draft), k=2).generate(BRANCHY, max_new_tokens=3).steps[0]
    old = step.to_dict()
    del old["tree"], old["accepted_path"]  # what a trace from before token trees holds
    back = StepRecord.from_dict(old)
    assert back == step and back.tree == () and back.accepted_path == ()
