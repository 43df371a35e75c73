"""One command that proves the engine on a GPU and records what speculation costs there.

    make gpu-check                                      # = python3 benchmarks/gpu_check.py
    python3 benchmarks/gpu_check.py --device cuda --out gpu_check.json
    python3 benchmarks/gpu_check.py --device cpu --tiny  # what CI runs: tiny sizes, 1-2 minutes on 2 busy cores

Needs only torch, transformers and this source tree (run from a copy of the repository; nothing
is installed, downloaded or read from a model package; gradio and plotly are never imported).
Sections, all on the chosen device:

  1. loading choices: device "auto" -> the GPU, dtype "auto" -> bfloat16, @int8 refused there;
  2. exactness in float32 (tiny random models built from configs):
     - sampled first-two-token test: the output law of the first two tokens is the target's
       (TV distance within sampling noise), and a wrong rule (resampling from p instead of the
       residual) fails the same check;
     - greedy output == model.generate for NGram and DraftModel at k = 1, 3, 8;
     - KV rollback: logits through the rolled-back cache == a fresh forward (Llama, and a Gemma 3
       with sliding-window layers);
  3. bfloat16 greedy divergence: tokens equal to model.generate's before the first difference;
  4. the verify-cost curve t(n), n = 1..64, for a ~1.2B-parameter random Llama in bfloat16;
  5. the engine's own per-step cost (proposal, verify rule, records) beside its forward pass;
  6. the static decode step three ways (SPECVIZ_STATIC_DECODE): "graphs" (the body replayed from
     CUDA graphs, specviz.runtime.cuda_step; on a CPU its stand-in, which replays eagerly),
     "eager" (the same body op by op) and "transformers" (the model's own forward, generate()'s):
     t(n) for n = 1..17 on the big model, and a step's cost per proposer kind;
  7. bfloat16 exactness through the graphed step: greedy output of every proposer equal to the
     same model's own bf16 target-only decoding through that step (not to generate()'s: its
     kernels round apart; docs/gpu.md).

Writes a JSON report (--out) and prints a summary. Exit status 1 if an exactness check fails
(sections 1, 2 or 7); timings and bfloat16 divergence from generate() never fail it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this source tree's specviz, installed or not

import torch  # noqa: E402
import transformers  # noqa: E402
from packaging.version import Version  # noqa: E402

from specviz import Sampling, SpeculativeDecoder  # noqa: E402
from specviz.analysis import checks  # noqa: E402
from specviz.models import load_model, resolve_device, resolve_dtype  # noqa: E402
from specviz.proposers import DraftModel, DraftTree, EarlyExit, NGram, NGramTree  # noqa: E402
from specviz.runtime import cuda_step, state  # noqa: E402
from specviz.runtime.kv import forward_logits, new_cache, rollback, session_cache  # noqa: E402

SCHEMA = "specviz.gpu_check/1"
MIN_TRANSFORMERS = (5, 18)  # as pyproject.toml
PROMPTS = [
    "the cat sat on the mat. the cat sat on the",
    "hello world, hello again. hello",
    "a quick brown fox jumps over the lazy dog",
]
KS = (1, 3, 8)
NOISE_MULTIPLE = 1.75  # pass: TV < 1.75 x the TV that exact sampling shows on average at this n
ROLLBACK_TOL = 1e-4  # max |cached - fresh| / max |fresh| logits, float32
TIE_TOL = 1e-5  # a greedy divergence where the top-2 logit gap / max |logit| is below this is a tie

# a Llama-3.2-1B-shaped model (1.24B parameters); --tiny: a small one with the same structure
BIG = dict(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
           num_attention_heads=32, num_key_value_heads=8, head_dim=64, tie_word_embeddings=True)
SMALL = dict(vocab_size=4096, hidden_size=256, intermediate_size=1024, num_hidden_layers=4,
             num_attention_heads=8, num_key_value_heads=2, head_dim=32, tie_word_embeddings=True)
# seconds each section should take on one data-centre GPU (full sizes): 285 s in all, under 5 minutes; the
# sections of 6 and 7 stop early (and say so) past theirs. Guesses: no GPU run is recorded yet (docs/gpu.md).
BUDGET_S = dict(models=10, loading=10, statistical=80, greedy=15, rollback=15, bf16_divergence=15, big_model=15,
                bf16_divergence_big=10, verify_cost=20, engine_overhead=15, step_curve=25, proposer_cost=35,
                bf16_exactness=20)
FULL = dict(samples=1500, greedy_prompts=3, greedy_tokens=40, bf16_tokens=64, big=BIG, max_n=64, context=256,
            warmup=3, reps=10, overhead_tokens=48, step_n=17, cost_tokens=48, exact_prompts=3)
TINY = dict(samples=400, greedy_prompts=2, greedy_tokens=24, bf16_tokens=16, big=SMALL, max_n=8, context=64,
            warmup=1, reps=3, overhead_tokens=12, step_n=3, cost_tokens=6, exact_prompts=1)
# the static step's ways (SPECVIZ_STATIC_DECODE): CUDA graphs of the body (a stand-in on a CPU), the
# same body op by op, and the model's own transformers forward (no static step: generate()'s)
WAYS = {"graphs": "cuda", "eager": "eager", "transformers": "0"}
DRAFT = dict(hidden_size=256, intermediate_size=1024, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, head_dim=64, tie_word_embeddings=True)  # a small draft for the big model


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_ms(fn, device: torch.device, warmup: int, reps: int) -> float:
    """Median wall time of ``fn()`` in ms, synchronised before and after each call, after warm-up."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        sync(device)
        t0 = time.perf_counter()
        fn()
        sync(device)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


class Models:
    """The tiny float32 models of the exactness checks, on the device."""

    def __init__(self, device: torch.device, dtype: torch.dtype = torch.float32):
        tok = checks.char_tokenizer()
        target = checks.tiny_llama(len(tok), 64, 2, seed=0, sharpen=30.0)
        self.target = checks.loaded(target, tok, "tiny-target", device, dtype)
        self.draft = checks.loaded(checks.tiny_llama(len(tok), 32, 2, seed=1, sharpen=30.0), tok, "tiny-draft", device, dtype)
        self.near = checks.loaded(checks.perturbed(target, 0.1, seed=2), tok, "tiny-near", device, dtype)


# -- 1. loading choices ----------------------------------------------------------------------


def check_loading(device: torch.device, models: Models) -> dict:
    """What load_model picks on this machine, and that @int8 is refused on a GPU."""
    out: dict = {"auto_device": str(resolve_device("auto")), "auto_dtype": str(resolve_dtype("auto", device))}
    ok = True
    if device.type == "cuda":
        ok = out["auto_device"].startswith("cuda") and out["auto_dtype"] == "torch.bfloat16"
        with tempfile.TemporaryDirectory() as d:
            models.target.model.save_pretrained(d)
            models.target.tokenizer.save_pretrained(d)
            for dev in ("auto", str(device)):
                try:
                    load_model(f"{d}@int8", device=dev)
                    out[f"int8_on_{dev}"], ok = "loaded (expected a ValueError)", False
                except ValueError as e:
                    out[f"int8_on_{dev}"] = f"ValueError: {e}".replace(d, "DIR")
    out["ok"] = ok
    return out


# -- 2. exactness in float32 -----------------------------------------------------------------


def check_statistical(models: Models, n: int) -> list[dict]:
    """The first two sampled tokens follow the target's law; the wrong rule is caught."""
    rows = []
    sampling = Sampling(3.0)  # flat enough that p and q differ a lot: a wrong rule shows
    t = models.target
    for kind, proposer, prompt in [
        ("draft", DraftModel(models.draft), "hello hello hello hel"),
        ("ngram", NGram(), checks.ngram_friendly_prompt(t, sampling)),
    ]:
        decoder = SpeculativeDecoder(t, proposer, k=3, sampling=sampling)
        noise1, noise2 = checks.first_two_noise(decoder, prompt, n)
        tv1, tv2 = checks.first_two_tv(decoder, prompt, n)
        with checks.wrong_rule():
            bad1, _ = checks.first_two_tv(decoder, prompt, n)
        limit1, limit2 = NOISE_MULTIPLE * noise1, NOISE_MULTIPLE * noise2
        rows.append(dict(
            proposer=kind, k=3, temperature=3.0, samples=n, tv_first=tv1, tv_second=tv2,
            limit_first=limit1, limit_second=limit2, tv_first_wrong_rule=bad1,
            ok=tv1 < limit1 and tv2 < limit2, control_caught=bad1 > limit1,
        ))
    return rows


def check_greedy(models: Models, n_prompts: int, n_tokens: int, dtype_name: str = "float32") -> list[dict]:
    """Greedy speculative output against model.generate: equal (float32), or how long equal (bf16).
    A float32 difference counts as a pass only where the target's top two logits tie to rounding."""
    t = models.target
    refs = {p: checks.hf_greedy(t, p, n_tokens) for p in PROMPTS[:n_prompts]}
    rows = []
    for kind, make, k in [("ngram", NGram, k) for k in KS] + [("draft", lambda: DraftModel(models.near), k) for k in KS] \
            + [("target-only", lambda: None, 0)]:
        decoder = SpeculativeDecoder(t, make(), k=max(k, 1))
        matched, ties, diverged = [], 0, 0
        for prompt, ref in refs.items():
            out = list(decoder.generate(prompt, max_new_tokens=n_tokens).token_ids)
            m = checks.matching_prefix(out, ref)
            matched.append(m)
            if out != ref:
                diverged += 1
                if dtype_name == "float32" and m < len(ref):
                    ties += checks.top2_margin(t, t.tokenizer(prompt)["input_ids"] + ref[:m]) < TIE_TOL
        rows.append(dict(model="tiny llama", proposer=kind, k=k, dtype=dtype_name, tokens=n_tokens, matched=matched,
                         first_divergence=min(matched) if diverged else None, rounding_ties=ties,
                         ok=diverged == ties))
    return rows


def check_rollback(models: Models, device: torch.device) -> list[dict]:
    """After every step the target's (and draft's) rolled-back cache gives a fresh forward's logits."""
    rows = []
    session = SpeculativeDecoder(models.target, DraftModel(models.near), k=4, sampling=Sampling(1.0)).start(
        PROMPTS[0], max_new_tokens=40, seed=1)
    errs, derrs, rejected = [], [], 0
    while not session.done:
        rec = session.step()
        rejected += rec.n_accepted < rec.k
        errs.append(checks.rollback_error(models.target.model, session.context, session.cache))
        derrs.append(checks.draft_rollback_error(models.near.model, session.proposer_state))
    rows.append(dict(model="llama target", steps=len(errs), rejections=rejected, max_rel_err=max(errs),
                     ok=max(errs) < ROLLBACK_TOL and rejected > 0))
    rows.append(dict(model="llama draft", steps=len(derrs), rejections=rejected, max_rel_err=max(derrs),
                     ok=max(derrs) < ROLLBACK_TOL))
    tok = models.target.tokenizer
    gemma = checks.loaded(checks.tiny_gemma3(len(tok)), tok, "tiny-gemma3-sliding", device)
    session = SpeculativeDecoder(gemma, NGram(), k=4, sampling=Sampling(1.0)).start(PROMPTS[0], max_new_tokens=30)
    errs, rejected = [], 0
    while not session.done:
        rec = session.step()
        rejected += rec.n_accepted < rec.k
        errs.append(checks.rollback_error(gemma.model, session.context, session.cache))
    rows.append(dict(model="gemma3 sliding window 8", steps=len(errs), rejections=rejected, max_rel_err=max(errs),
                     ok=max(errs) < ROLLBACK_TOL and rejected > 0))
    return rows


# -- 3-5. bfloat16 and timings on a ~1B model -------------------------------------------------


def build_big(config: dict, device: torch.device, dtype: torch.dtype):
    """A random-weight Llama from a config, initialised directly on the device in ``dtype``."""
    from transformers import AutoModelForCausalLM, LlamaConfig

    cfg = LlamaConfig(max_position_embeddings=4096, bos_token_id=1, eos_token_id=2, pad_token_id=0, **config)
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype).eval()
    model.generation_config.pad_token_id = 0
    return checks.loaded(model, checks.char_tokenizer(), "random-llama", device, dtype)


def big_divergence(big, n_tokens: int, context: int) -> list[dict]:
    """bf16 greedy on the big model: target-only and NGram k=4 against model.generate."""
    g = torch.Generator().manual_seed(1)
    stem = torch.randint(3, big.model.config.vocab_size, (context // 2,), generator=g).tolist()
    prompt = stem + stem  # repeated: the n-gram proposer finds drafts
    ref = checks.hf_greedy(big, prompt, n_tokens)
    rows = []
    for kind, proposer, k in [("target-only", None, 0), ("ngram", NGram(), 4)]:
        out = list(SpeculativeDecoder(big, proposer, k=max(k, 1)).generate(prompt, max_new_tokens=n_tokens).token_ids)
        m = checks.matching_prefix(out, ref)
        rows.append(dict(model=f"random llama {num_params(big) / 1e6:.0f}M", proposer=kind, k=k, dtype="bfloat16",
                         tokens=n_tokens, matched=[m], first_divergence=None if out == ref else m))
    return rows


def num_params(lm) -> int:
    return sum(p.numel() for p in lm.model.parameters())


def pass_times(model, ids, cache, context: int, max_n: int, device, warmup: int, reps: int) -> dict[int, float]:
    """Median ms of one pass of n = 1..max_n new tokens after ``context`` cached ones, rolled back each time."""
    t_ms = {}
    for n in range(1, max_n + 1):
        def once(n=n):
            forward_logits(model, ids[context: context + n], cache, n)  # [n, V]
            rollback(cache, context)
        t_ms[n] = median_ms(once, device, warmup, reps)
    return t_ms


def verify_curve(big, max_n: int, context: int, warmup: int, reps: int) -> dict:
    """t(n): one forward of n new positions on top of a ``context``-token cache, then the rollback
    the engine does; v(n) = t(n) / t(1)."""
    model, device = big.model, big.device
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(3, model.config.vocab_size, (context + max_n,), generator=g).to(device)  # [L + max_n]
    cache = new_cache(model)
    with torch.inference_mode():
        forward_logits(model, ids[:context], cache, 1)
        rollback(cache, context)
        t_ms = pass_times(model, ids, cache, context, max_n, device, warmup, reps)
    return dict(context=context, warmup=warmup, reps=reps, t_ms=t_ms, v={n: t / t_ms[1] for n, t in t_ms.items()})


def engine_overhead(big, n_tokens: int, context: int) -> list[dict]:
    """Per step: wall time of Session.step, the target forward inside it (hooked, synchronised),
    and the rest: proposal, the verify rule, commit, rollback and the StepRecord. The hooks time the
    model's own forward, so on the CPU (the tiny run) the static decode step, which runs the body
    without it, is switched off for this section; a GPU never uses that step."""
    previous = os.environ.get("SPECVIZ_STATIC_DECODE")
    os.environ["SPECVIZ_STATIC_DECODE"] = "0"
    try:
        return _engine_overhead(big, n_tokens, context)
    finally:
        if previous is None:
            os.environ.pop("SPECVIZ_STATIC_DECODE", None)
        else:
            os.environ["SPECVIZ_STATIC_DECODE"] = previous


def _engine_overhead(big, n_tokens: int, context: int) -> list[dict]:
    model, device = big.model, big.device
    forward_ms: list[float] = []
    t0 = [0.0]

    def pre(_m, _a, _kw):
        sync(device)
        t0[0] = time.perf_counter()

    def post(_m, _a, _kw, _out):
        sync(device)
        forward_ms.append((time.perf_counter() - t0[0]) * 1e3)

    g = torch.Generator().manual_seed(3)
    stem = torch.randint(3, model.config.vocab_size, (context // 2,), generator=g).tolist()
    rows = []
    handles = [model.register_forward_pre_hook(pre, with_kwargs=True), model.register_forward_hook(post, with_kwargs=True)]
    try:
        for kind, proposer, k in [("target-only", None, 1), ("ngram", NGram(), 4)]:
            decoder = SpeculativeDecoder(big, proposer, k=k)
            decoder.generate(stem + stem, max_new_tokens=4)  # warm-up
            session = decoder.start(stem + stem, max_new_tokens=n_tokens)
            session.step()  # prefill + first step: not a steady-state step
            steps, fwd, rest, draft, other = [], [], [], [], []
            while not session.done:
                forward_ms.clear()
                sync(device)
                s0 = time.perf_counter()
                rec = session.step()
                sync(device)
                wall = (time.perf_counter() - s0) * 1e3
                steps.append(wall)
                fwd.append(sum(forward_ms))
                rest.append(wall - sum(forward_ms))
                draft.append(rec.draft_ms)
                other.append(rec.other_ms)
            if not steps:  # ended at EOS on its first step: nothing to report
                continue
            res = session.result()
            mean = statistics.fmean  # means, so that step = forward + engine exactly
            rows.append(dict(
                proposer=kind, k=0 if proposer is None else k, steps=len(steps),
                tokens_per_step=res.stats.mean_acceptance_length,
                step_ms=mean(steps), forward_ms=mean(fwd), engine_ms=mean(rest), engine_share=sum(rest) / sum(steps),
                draft_ms=mean(draft), verify_rule_and_record_ms=mean(other),
            ))
    finally:
        for h in handles:
            h.remove()
    return rows


# -- 6-7. the static step three ways: CUDA graphs, eager, transformers ------------------------


@contextlib.contextmanager
def static_way(way: str, *models):
    """``SPECVIZ_STATIC_DECODE`` set for ``way`` (:data:`WAYS`) and each model's static step built
    afresh under it (a model keeps the runner it first built), then dropped again."""
    previous = os.environ.get("SPECVIZ_STATIC_DECODE")
    os.environ["SPECVIZ_STATIC_DECODE"] = WAYS[way]
    for model in models:
        state.of(model).decoder = None
    try:
        yield
    finally:
        for model in models:
            state.of(model).decoder = None
        if previous is None:
            os.environ.pop("SPECVIZ_STATIC_DECODE", None)
        else:
            os.environ["SPECVIZ_STATIC_DECODE"] = previous


def step_facts(model) -> dict:
    """The runner ``model``'s static step runs (None: the transformers forward) and, for graphs,
    how many it holds and whether they gave way to eager (why)."""
    decoder = state.of(model).decoder
    if decoder is None:
        return dict(runner=None)
    step = getattr(decoder, "_step", None)
    facts = dict(runner=decoder.runner)
    if hasattr(step, "graphs"):
        facts.update(graphs=len(step.graphs), capture=step.note, width=step.width, fell_back=step.failed)
    return facts


def step_curve(big, max_n: int, context: int, warmup: int, reps: int, budget_s: float) -> dict:
    """t(n), n = 1..max_n new positions on a ``context``-token cache and the rollback after, each
    way of :data:`WAYS`; a way not reached within ``budget_s`` is listed as skipped."""
    model, device = big.model, big.device
    g = torch.Generator().manual_seed(4)
    ids = torch.randint(3, model.config.vocab_size, (context + max_n,), generator=g).to(device)  # [L + max_n]
    out: dict = dict(context=context, warmup=warmup, reps=reps, ways={}, skipped=[])
    deadline = time.perf_counter() + budget_s
    for way in WAYS:
        if time.perf_counter() > deadline:
            out["skipped"].append(way)
            continue
        with static_way(way, model), torch.inference_mode():
            cache = session_cache(model)
            sync(device)
            t0 = time.perf_counter()
            forward_logits(model, ids[:context], cache, 1)  # the prompt, then the first step builds
            forward_logits(model, ids[context: context + 1], cache, 1)  # the step (graphs: its capture)
            sync(device)
            first_s = time.perf_counter() - t0
            rollback(cache, context)
            t_ms = pass_times(model, ids, cache, context, max_n, device, warmup, reps)
            out["ways"][way] = dict(t_ms=t_ms, v={n: t / t_ms[1] for n, t in t_ms.items()},
                                    first_call_s=round(first_s, 3), **step_facts(model))
    return out


def proposer_kinds(big, draft, tiny: bool) -> list:
    """(name, k, a new proposer) for each proposer kind the step's cost is measured for (--tiny:
    one chain, one tree and target-only, to keep CI short)."""
    kinds = [("target-only", 1, lambda: None), ("ngram", 4, NGram), ("draft", 4, lambda: DraftModel(draft)),
            ("ngram-tree", 1, lambda: NGramTree(nodes=16)), ("draft-tree", 1, lambda: DraftTree(draft, nodes=12)),
            ("early-exit", 4, lambda: EarlyExit(big, max(1, big.model.config.num_hidden_layers // 4)))]
    return [kind for kind in kinds if not tiny or kind[0] in ("target-only", "ngram", "draft-tree")]


def proposer_cost(big, draft, n_tokens: int, context: int, budget_s: float, tiny: bool = False) -> list[dict]:
    """A step's wall time (synchronised) and tokens per step for each proposer kind, each way;
    greedy, after a warm-up generation (graphs captured, kernels loaded)."""
    device = big.device
    g = torch.Generator().manual_seed(5)
    stem = torch.randint(3, big.model.config.vocab_size, (context // 2,), generator=g).tolist()
    prompt = stem + stem  # repeated: the n-gram proposers find drafts
    rows, deadline = [], time.perf_counter() + budget_s
    for way in WAYS:
        with static_way(way, big.model, draft.model):
            for kind, k, make in proposer_kinds(big, draft, tiny):
                if time.perf_counter() > deadline:
                    rows.append(dict(way=way, proposer=kind, k=k, skipped="over the section's time budget"))
                    continue
                try:
                    decoder = SpeculativeDecoder(big, make(), k=k)
                    decoder.generate(prompt, max_new_tokens=4)  # warm-up
                    session = decoder.start(prompt, max_new_tokens=n_tokens)
                    session.step()  # prefill + first step: not a steady-state step
                    steps = []
                    while not session.done:
                        sync(device)
                        t0 = time.perf_counter()
                        session.step()
                        sync(device)
                        steps.append((time.perf_counter() - t0) * 1e3)
                except Exception as e:  # noqa: BLE001 - a timing never fails the check: say what broke
                    rows.append(dict(way=way, proposer=kind, k=k, error=f"{type(e).__name__}: {e}"))
                    continue
                if not steps:
                    continue
                res = session.result()
                tokens = len(res.token_ids) - 1  # the first step's token is not timed
                rows.append(dict(way=way, proposer=kind, k=k, steps=len(steps), step_ms=statistics.fmean(steps),
                                 tokens_per_step=res.stats.mean_acceptance_length,
                                 ms_per_token=sum(steps) / max(tokens, 1), **step_facts(big.model)))
    return rows


def bf16_exactness(bf16: Models, big, n_prompts: int, n_tokens: int, context: int, budget_s: float) -> list[dict]:
    """Through the graphed step in bfloat16: each proposer's greedy output equal to the same model's
    own target-only decoding through that step (ok), and how many tokens of it equal
    model.generate's (information only: generate() runs other kernels)."""
    rows, deadline = [], time.perf_counter() + budget_s
    g = torch.Generator().manual_seed(1)
    stem = torch.randint(3, big.model.config.vocab_size, (context // 2,), generator=g).tolist()
    cases = [(bf16.target, "tiny llama", p, [("ngram", NGram, k) for k in KS] + [("draft", lambda: DraftModel(bf16.near), 3)],
              (bf16.target.model, bf16.near.model)) for p in PROMPTS[:n_prompts]]
    cases.append((big, f"random llama {num_params(big) / 1e6:.0f}M", stem + stem, [("ngram", NGram, 4)], (big.model,)))
    for lm, name, prompt, proposers, models in cases:
        if time.perf_counter() > deadline:
            rows.append(dict(model=name, skipped="over the section's time budget"))
            continue
        with static_way("graphs", *models):
            rows += against_target_only(lm, name, prompt, proposers, n_tokens)
    return rows


def against_target_only(lm, name: str, prompt, proposers, n_tokens: int) -> list[dict]:
    """Each of ``proposers`` ((kind, make, k)) decoding greedily with ``lm``, against ``lm``'s own
    target-only decoding through the same static step (ok: equal), and that one against generate()."""
    alone = list(SpeculativeDecoder(lm, None).generate(prompt, max_new_tokens=n_tokens).token_ids)
    facts = step_facts(lm.model)
    generated = checks.matching_prefix(alone, checks.hf_greedy(lm, prompt, n_tokens))
    rows = []
    for kind, make, k in proposers:
        out = list(SpeculativeDecoder(lm, make(), k=k).generate(prompt, max_new_tokens=n_tokens).token_ids)
        rows.append(dict(model=name, proposer=kind, k=k, dtype=str(lm.dtype).removeprefix("torch."), tokens=n_tokens,
                         matched_target_only=checks.matching_prefix(out, alone),
                         target_only_matched_generate=generated, ok=out == alone, **facts))
    return rows


def build_draft(big, device: torch.device, dtype: torch.dtype):
    """A small random Llama on the big model's vocabulary, its draft in the step-cost section."""
    from transformers import AutoModelForCausalLM, LlamaConfig

    cfg = LlamaConfig(vocab_size=big.model.config.vocab_size, max_position_embeddings=4096, bos_token_id=1,
                      eos_token_id=2, pad_token_id=0, **DRAFT)
    torch.manual_seed(1)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype).eval()
    return checks.loaded(model, big.tokenizer, "random-llama-draft", device, dtype)


# -- the run ---------------------------------------------------------------------------------


def environment(device: torch.device) -> dict:
    env = dict(
        device=str(device), python=platform.python_version(), torch=torch.__version__,
        transformers=transformers.__version__, platform=platform.platform(),
        date=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        exact_dtype="float32", fast_dtype="bfloat16", threads=torch.get_num_threads(),
    )
    if device.type == "cuda":
        env.update(device_name=torch.cuda.get_device_name(device), cuda=torch.version.cuda,
                   capability=".".join(map(str, torch.cuda.get_device_capability(device))),
                   tf32_matmul=torch.backends.cuda.matmul.allow_tf32)
    return env


def run(device: torch.device, tiny: bool) -> dict:
    sizes = TINY if tiny else FULL
    report: dict = dict(schema=SCHEMA, tiny=tiny, sizes={k: v for k, v in sizes.items() if k != "big"}, budget_s=BUDGET_S,
                        environment=environment(device), seconds={})

    def section(name, fn, *args):
        t0 = time.perf_counter()
        report[name] = fn(*args)
        report["seconds"][name] = round(time.perf_counter() - t0, 2)
        return report[name]

    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False  # float32 means float32 in the exactness checks
    else:  # the graphs' CPU stand-in (the same code, replayed eagerly) on fewer rows: bf16 products here cost by the row
        cuda_step.WIDTH, cuda_step.CAPACITY = 8, 128
    report["environment"].update(graph_width=cuda_step.WIDTH, graph_capacity=cuda_step.CAPACITY)
    models = section("models", Models, device)
    del report["models"]
    section("loading", check_loading, device, models)
    section("statistical", check_statistical, models, sizes["samples"])
    section("greedy", check_greedy, models, sizes["greedy_prompts"], sizes["greedy_tokens"])
    section("rollback", check_rollback, models, device)
    bf16 = Models(device, torch.bfloat16)
    section("bf16_divergence", check_greedy, bf16, sizes["greedy_prompts"], sizes["bf16_tokens"], "bfloat16")
    big = section("big_model", build_big, sizes["big"], device, torch.bfloat16)
    report["big_model"] = dict(config=sizes["big"], parameters=num_params(big), dtype="bfloat16")
    report["bf16_divergence"] += section("bf16_divergence_big", big_divergence, big, sizes["bf16_tokens"], sizes["context"])
    del report["bf16_divergence_big"]
    section("verify_cost", verify_curve, big, sizes["max_n"], sizes["context"], sizes["warmup"], sizes["reps"])
    section("engine_overhead", engine_overhead, big, sizes["overhead_tokens"], sizes["context"])
    section("step_curve", step_curve, big, sizes["step_n"], sizes["context"], sizes["warmup"], sizes["reps"],
            BUDGET_S["step_curve"])
    draft = build_draft(big, device, torch.bfloat16)
    section("proposer_cost", proposer_cost, big, draft, sizes["cost_tokens"], sizes["context"], BUDGET_S["proposer_cost"], tiny)
    section("bf16_exactness", bf16_exactness, bf16, big, sizes["exact_prompts"], sizes["bf16_tokens"], sizes["context"],
            BUDGET_S["bf16_exactness"])

    failures = [f"loading: {report['loading']}"] if not report["loading"]["ok"] else []
    for r in report["statistical"]:
        if not r["ok"]:
            failures.append(f"statistical {r['proposer']}: TV {r['tv_first']:.3f}/{r['tv_second']:.3f} over the limit")
        if not r["control_caught"]:
            failures.append(f"statistical {r['proposer']}: the wrong rule was not caught (TV {r['tv_first_wrong_rule']:.3f})")
    failures += [f"greedy {r['proposer']} k={r['k']}: matched {r['matched']} of {r['tokens']}"
                 for r in report["greedy"] if not r["ok"]]
    failures += [f"rollback {r['model']}: relative error {r['max_rel_err']:.2e}" for r in report["rollback"] if not r["ok"]]
    failures += [f"bf16 graphed step, {r['model']} {r['proposer']} k={r['k']}: matched target-only's for "
                 f"{r['matched_target_only']} of {r['tokens']}" for r in report["bf16_exactness"] if r.get("ok") is False]
    report["failures"] = failures
    report["ok"] = not failures
    return report


def summary(report: dict) -> str:
    env = report["environment"]
    lines = [f"specviz gpu check on {env.get('device_name', env['device'])} (torch {env['torch']}, "
             f"transformers {env['transformers']}){' [tiny sizes]' if report['tiny'] else ''}"]
    lo = report["loading"]
    lines.append(f"  loading: auto -> {lo['auto_device']}, {lo['auto_dtype']}"
                 + ("; @int8 refused on the GPU" if any(k.startswith("int8_on") for k in lo) else ""))
    for r in report["statistical"]:
        lines.append(f"  sampled {r['proposer']:6s} k=3, {r['samples']} runs: TV first {r['tv_first']:.3f} second "
                     f"{r['tv_second']:.3f} (limit {r['limit_first']:.3f}); wrong rule {r['tv_first_wrong_rule']:.3f} "
                     f"{'caught' if r['control_caught'] else 'NOT CAUGHT'}")
    ok = [r for r in report["greedy"] if r["ok"]]
    lines.append(f"  greedy fp32 == model.generate: {len(ok)}/{len(report['greedy'])} configs (ngram, draft x k=1,3,8; target-only)")
    lines.append("  rollback: " + ", ".join(f"{r['model']} {r['max_rel_err']:.1e}" for r in report["rollback"]))
    for model in dict.fromkeys(r["model"] for r in report["bf16_divergence"]):
        div = [f"{r['proposer']} k={r['k']} {min(r['matched'])}/{r['tokens']}" for r in report["bf16_divergence"] if r["model"] == model]
        lines.append(f"  bf16 greedy, {model}, tokens equal to model.generate's (worst prompt): " + ", ".join(div))
    vc, big = report["verify_cost"], report["big_model"]
    ns = [n for n in (1, 2, 4, 8, 16, 32, 64) if n in vc["t_ms"]]
    lines.append(f"  verify cost, {big['parameters'] / 1e6:.0f}M-parameter llama, bf16, context {vc['context']}: "
                 + ", ".join(f"t({n})={vc['t_ms'][n]:.2f}ms" for n in ns) + f"; v({ns[-1]})={vc['v'][ns[-1]]:.2f}")
    for r in report["engine_overhead"]:
        lines.append(f"  engine per step, {r['proposer']} k={r['k']}: {r['step_ms']:.2f} ms = forward {r['forward_ms']:.2f} "
                     f"+ engine {r['engine_ms']:.2f} ({100 * r['engine_share']:.0f}%)")
    curve = report["step_curve"]
    for way, row in curve["ways"].items():
        ns = [n for n in (1, 2, 4, 8, 16, 17) if n in row["t_ms"]]
        how = f"{row['runner'] or 'transformers forward'}" + (f", {row['graphs']} graph(s) ({row['capture']})" if "graphs" in row else "")
        fell = f"; FELL BACK to eager: {row['fell_back']}" if row.get("fell_back") else ""
        lines.append(f"  static step {way} [{how}]: " + ", ".join(f"t({n})={row['t_ms'][n]:.2f}ms" for n in ns)
                     + f"; first call {row['first_call_s']:.2f} s{fell}")
    if curve["skipped"]:
        lines.append("  static step ways skipped (time budget): " + ", ".join(curve["skipped"]))
    for way in WAYS:
        done = [r for r in report["proposer_cost"] if r["way"] == way and "step_ms" in r]
        lines.append(f"  step cost, {way}: " + ", ".join(f"{r['proposer']} {r['step_ms']:.1f} ms/step {r['ms_per_token']:.1f} ms/token"
                                                         for r in done))
    for r in report["proposer_cost"]:
        if "error" in r or "skipped" in r:
            lines.append(f"  step cost, {r['way']} {r['proposer']}: {r.get('error') or r.get('skipped')}")
    exact = [r for r in report["bf16_exactness"] if "ok" in r]
    lines.append(f"  bf16 greedy through the graphed step == its own target-only: {sum(r['ok'] for r in exact)}/{len(exact)}"
                 f" configs (runner {', '.join(sorted({str(r['runner']) for r in exact}))}); target-only == generate() for "
                 + ", ".join(sorted({f"{r['model']} {r['target_only_matched_generate']}/{r['tokens']}" for r in exact})))
    lines.append("  seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in report["seconds"].items()))
    over = [k for k, v in report["seconds"].items() if not report["tiny"] and v > BUDGET_S.get(k, float("inf"))]
    if over:
        lines.append("  over the time budget: " + ", ".join(f"{k} ({report['seconds'][k]:.0f} s > {BUDGET_S[k]} s)" for k in over))
    lines.append("PASS" if report["ok"] else "FAIL: " + "; ".join(report["failures"]))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="auto", help="auto (the GPU when there is one), cuda, cuda:N or cpu")
    ap.add_argument("--tiny", action="store_true", help="small sizes (the default on a CPU; CI)")
    ap.add_argument("--full", action="store_true", help="full sizes even on a CPU (slow)")
    ap.add_argument("--out", default="gpu_check.json", help="where to write the JSON report")
    ap.add_argument("--threads", type=int, default=None, help="CPU threads (default: 1 on a CPU run, else torch's)")
    args = ap.parse_args(argv)
    if not MIN_TRANSFORMERS <= Version(transformers.__version__).release < (6,):
        # before 5.18 a sliding-window layer that records its past hands attention more keys than
        # its mask covers, and a Gemma 3 verify pass fails
        print(f"specviz needs transformers >=5.18,<6 (found {transformers.__version__}); carry a wheel or "
              "pip install 'transformers>=5.18,<6'")
        return 2
    device = resolve_device(args.device)
    if args.threads or device.type == "cpu":
        torch.set_num_threads(args.threads or 1)  # tiny models: one thread is fastest, and CI shares cores
    tiny = args.tiny or (device.type != "cuda" and not args.full)
    t0 = time.perf_counter()
    report = run(device, tiny)
    report["seconds"]["total"] = round(time.perf_counter() - t0, 2)
    Path(args.out).write_text(json.dumps(report, indent=1, default=str) + "\n", encoding="utf-8")
    print(summary(report))
    print(f"report: {args.out}")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
