"""Self-checks that need only torch and transformers: tiny models built from configs and the
statistics that show the engine is exact, shared by the tests and ``benchmarks/gpu_check.py``.

    tok = char_tokenizer()                                    # 37 ids, nothing downloaded
    target = loaded(tiny_llama(len(tok), 64, 2, seed=0, sharpen=30.0), tok, "tiny-target")
    tv1, tv2 = first_two_tv(SpeculativeDecoder(target, NGram(), k=3, sampling=Sampling(3.0)), prompt, n=1500)
    with wrong_rule():                                        # the control: this must be caught
        bad1, _ = first_two_tv(...)

Every function works on whatever device the models are on (tensors follow ``target.device``).
"""

from __future__ import annotations

import copy
import math
from contextlib import contextmanager
from typing import Iterable, Iterator, Sequence

import torch

from ..core import algorithm
from ..core.algorithm import logits_to_probs
from ..core.engine import encode_prompt
from ..core.records import Sampling
from ..runtime.kv import forward_logits, rollback

CHARS = "abcdefghijklmnopqrstuvwxyz .,!?'\n"
SPECIALS = ["<pad>", "<bos>", "<eos>", "<unk>"]  # ids 0-3
EOS = 2


# -- tiny models ---------------------------------------------------------------------------------


def char_tokenizer(chars: str = CHARS):
    """A character-level fast tokenizer: ids 0-3 special (<pad> <bos> <eos> <unk>), then one id
    per character of ``chars`` (another set, another vocabulary size); prepends <bos>."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIALS + list(chars))}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    tk.decoder = decoders.Fuse()
    tk.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 1)])
    return PreTrainedTokenizerFast(
        tokenizer_object=tk, bos_token="<bos>", eos_token="<eos>", unk_token="<unk>", pad_token="<pad>"
    )


def tiny_llama(vocab_size: int, hidden: int, layers: int, seed: int, sharpen: float = 1.0, **config_kwargs):
    """A random Llama (fp32, CPU, eval mode): the same weights for the same ``seed`` on every
    machine (built on the CPU; move it with ``.to(device)``). ``sharpen`` scales the LM head so
    its distributions are peaked, not flat. ``config_kwargs`` override LlamaConfig fields
    (defaults: bos 1, eos 2, pad 0, 1024 positions). The global RNG is left as it was."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(**dict(
        vocab_size=vocab_size, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
        bos_token_id=1, eos_token_id=2, pad_token_id=0, tie_word_embeddings=False,
    ) | config_kwargs)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        with torch.device("cpu"):
            model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(sharpen)
    model.generation_config.pad_token_id = cfg.pad_token_id
    return model


def tiny_gemma3(vocab_size: int, seed: int = 3, window: int = 8, sharpen: float = 20.0):
    """A tiny Gemma 3 whose first two of three layers use a ``window``-token sliding window (the
    built-in gemma-3-270m's is 512): rollback must restore those layers exactly."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    cfg = Gemma3TextConfig(
        vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, sliding_window=window,
        layer_types=["sliding_attention", "sliding_attention", "full_attention"],
        max_position_embeddings=1024, bos_token_id=1, eos_token_id=2, pad_token_id=0,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        with torch.device("cpu"):
            model = Gemma3ForCausalLM(cfg).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(sharpen)
    return model


def perturbed(model, scale: float, seed: int):
    """A copy of ``model`` with Gaussian noise on every weight: a draft that mostly agrees."""
    twin = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in twin.parameters():
            noise = torch.randn(p.shape, generator=g)  # on the CPU: the same noise on every device
            p.add_(noise.to(p.device, p.dtype) * scale * p.float().std().to(p.dtype))
    return twin


def loaded(model, tokenizer, name: str, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32):
    """``model`` moved to ``device`` and ``dtype``, wrapped as a specviz LoadedModel."""
    from ..models import LoadedModel

    device = torch.device(device)
    return LoadedModel(model=model.to(device=device, dtype=dtype), tokenizer=tokenizer, name=name,
                       device=device, dtype=dtype)


# -- greedy equality -----------------------------------------------------------------------------


def hf_greedy(target, prompt: str | Sequence[int], n: int) -> list[int]:
    """``model.generate(do_sample=False)``'s n new tokens: the reference the engine must equal."""
    ids = torch.tensor([encode_prompt(target.tokenizer, prompt)], device=target.device)  # [1, L]
    with torch.inference_mode():
        out = target.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, do_sample=False)
    return out[0, ids.shape[1]:].tolist()


def matching_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many tokens agree before the first divergence."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def top2_margin(target, ids: Sequence[int]) -> float:
    """The gap between the target's two largest next-token logits after ``ids`` (full forward),
    over the largest |logit|: a divergence where this is ~1e-7 is a rounding tie, not a wrong rule."""
    x = torch.tensor([list(ids)], device=target.device)  # [1, L]
    with torch.inference_mode():
        logits = target.model(x).logits[0, -1].float()  # [V]
    top = logits.topk(2).values  # [2]
    return float((top[0] - top[1]) / logits.abs().max().clamp_min(1e-30))


# -- KV rollback ---------------------------------------------------------------------------------


def rollback_error(model, context: torch.Tensor, cache) -> float:
    """Max |logits via a copy of ``cache`` (holding context[:-1]) - logits of a fresh forward over
    ``context``| at the last position, divided by max |fresh logits| (a relative error)."""
    cache = copy.deepcopy(cache)
    with torch.inference_mode():
        via_cache = forward_logits(model, context[-1:], cache, 1)[0]  # [V]
        full = model(context[None]).logits[0, -1].float()  # [V]
    return float((via_cache - full).abs().max() / full.abs().max().clamp_min(1e-30))


def draft_rollback_error(draft_model, state) -> float:
    """The same for a DraftModel's state: its cache holds ``state.ids``; recompute the last one."""
    cache = copy.deepcopy(state.cache)
    rollback(cache, len(state.ids) - 1)
    ids = torch.tensor(state.ids, device=next(draft_model.parameters()).device)  # [n]
    return rollback_error(draft_model, ids, cache)


# -- the statistical first-two-token test --------------------------------------------------------


def exact_first_two(target, prompt_ids: Sequence[int], sampling: Sampling, eos: int = EOS):
    """P(t1) and P(t2) of target-only sampling, computed exactly from the model. -> two [V+1]
    CPU tensors; the last slot is "no such token" (t1 was EOS)."""
    ids = torch.tensor(list(prompt_ids), device=target.device)  # [n]
    with torch.inference_mode():
        p1 = logits_to_probs(target.model(ids[None]).logits[0, -1], sampling)  # [V]
        V = p1.shape[0]
        batch = torch.cat([ids.repeat(V, 1), torch.arange(V, device=ids.device)[:, None]], dim=1)  # [V, n+1]
        p2 = logits_to_probs(target.model(batch).logits[:, -1], sampling)  # [V, V] rows: t1
    p1, p2 = p1.double().cpu(), p2.double().cpu()
    p2[eos] = 0.0
    t2 = torch.cat([p1 @ p2, p1[eos: eos + 1]])  # [V+1]
    return torch.cat([p1, torch.zeros(1, dtype=p1.dtype)]), t2


def tv(counts: torch.Tensor, p: torch.Tensor) -> float:
    """Total-variation distance between the empirical distribution of ``counts`` and ``p``."""
    return 0.5 * float((counts / counts.sum() - p).abs().sum())


def tv_noise(p: torch.Tensor, n: int) -> float:
    """The expected TV distance of n exact samples from ``p``: 0.5 sum sqrt(2 p (1 - p) / (pi n))."""
    return 0.5 * float(torch.sqrt(2 * p * (1 - p) / (math.pi * n)).sum())


def _carries_state(proposer) -> bool:
    """A chain draft model's state (its KV cache and the ids it holds) may pass from one run on the
    same prompt to the next: its next proposal rolls the cache back to the prefix it shares with
    the new context (a cross-tokenizer draft's too, in its own ids)."""
    from ..proposers.cross_tokenizer import CrossTokenizerDraft
    from ..proposers.draft_model import DraftModel
    from ..proposers.hybrid import NGramOrDraft

    return isinstance(proposer, (DraftModel, NGramOrDraft, CrossTokenizerDraft))


def first_two_tokens(decoder, prompt: str | Sequence[int], seeds: Iterable[int],
                     max_new_tokens: int = 3) -> Iterator[tuple[int, int]]:
    """(t1, t2) of ``decoder.generate(prompt, max_new_tokens, seed=s)`` for each seed (t2 = -1 when
    t1 ended the run): the same steps, stopped once two tokens are committed. The target's prompt
    cache is filled once and rolled back to the prompt after each run, and a chain draft model's
    state is carried over (its context rows, vocab=N, start afresh), so a run costs its steps only."""
    from ..proposers.vocab import context_rows_for

    carry = _carries_state(decoder.proposer)
    ids = encode_prompt(decoder.target.tokenizer, prompt)  # tokenized once
    cache = state = None
    for seed in seeds:
        session = decoder.start(ids, max_new_tokens=max_new_tokens, seed=seed, records="lean")
        if cache is not None:  # the prompt (all but its last token) is already in this cache
            session.cache, session._prefilled = cache, True
        if state is not None:
            if hasattr(state, "context_rows"):  # a fresh session's: the prompt's tokens (the last comes with the proposal)
                state.context_rows = rows = context_rows_for(decoder.proposer.model.model)
                if rows is not None:
                    rows.add(ids[:-1])
            session.proposer_state = state
        while not session.done and session.n_new < 2:
            session.step()
        t = session.new_token_ids
        yield t[0], (t[1] if len(t) > 1 else -1)
        rollback(session.cache, len(session.prompt_ids) - 1)
        cache = session.cache
        state = session.proposer_state if carry else None


def first_two_counts(decoder, prompt: str | Sequence[int], n: int, size: int):
    """Counts of the first and second generated token over seeds 0..n-1 (-> two [size] tensors;
    slot -1 counts runs that ended after one token)."""
    c1, c2 = torch.zeros(size, dtype=torch.float64), torch.zeros(size, dtype=torch.float64)
    for t1, t2 in first_two_tokens(decoder, prompt, range(n)):
        c1[t1] += 1
        c2[t2] += 1
    return c1, c2


def first_two_tv(decoder, prompt: str | Sequence[int], n: int) -> tuple[float, float]:
    """TV distance of the sampled first and second tokens from their exact target-only law."""
    target = decoder.target
    exact1, exact2 = exact_first_two(target, encode_prompt(target.tokenizer, prompt), decoder.sampling)
    c1, c2 = first_two_counts(decoder, prompt, n, exact1.shape[0])
    return tv(c1, exact1), tv(c2, exact2)


def first_two_noise(decoder, prompt: str | Sequence[int], n: int) -> tuple[float, float]:
    """``tv_noise`` of the exact first- and second-token laws at n samples."""
    target = decoder.target
    exact1, exact2 = exact_first_two(target, encode_prompt(target.tokenizer, prompt), decoder.sampling)
    return tv_noise(exact1, n), tv_noise(exact2, n)


@contextmanager
def wrong_rule() -> Iterator[None]:
    """Within the block the rule resamples a rejected position from p instead of the residual
    (both for draft distributions and point masses): the control a statistical test must catch."""
    saved = algorithm.residual_distribution, algorithm.point_mass_residual
    algorithm.residual_distribution = lambda p, q: p
    algorithm.point_mass_residual = lambda p, x: p
    try:
        yield
    finally:
        algorithm.residual_distribution, algorithm.point_mass_residual = saved


def ngram_friendly_prompt(target, sampling: Sampling, stem: str = "ab cd ") -> str:
    """A prompt "stem y stem" whose n-gram draft (y, copied from the first occurrence) the target
    gives a probability near 1/2: where a wrong residual shows most."""
    best = None
    for y in "abcdefghijklmnopqrstuvwxyz":
        prompt = stem + y + stem
        ids = torch.tensor(encode_prompt(target.tokenizer, prompt), device=target.device)
        with torch.inference_mode():
            p = logits_to_probs(target.model(ids[None]).logits[0, -1], sampling)
        score = abs(float(p[target.tokenizer.convert_tokens_to_ids(y)]) - 0.5)
        best = min(best or (score, prompt), (score, prompt))
    return best[1]
