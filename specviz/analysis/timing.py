"""How a cost is timed (:mod:`specviz.analysis.costmodel`): every size once per round so drift
hits them alike, the typical round rather than the fastest, and inputs that price what a run
pays (text for a target, a context that repeats for the n-gram lookups)."""

from __future__ import annotations

import statistics
from typing import Callable, Iterable, Sequence

import torch

__all__ = ["interleaved", "lookups", "median", "tokens", "typical"]


def median(xs: Sequence[float]) -> float:
    return statistics.median(xs) if xs else 0.0


def interleaved(passes: Sequence[tuple[Callable[[int], None], Iterable[int]]], repeats: int, clock: Callable[[], float],
                 stop: Callable[[], bool] = lambda: False, min_rounds: int = 1) -> list[dict[int, list[float]]]:
    """Time every pass at every size, all of them once per round, for ``repeats`` rounds (a round
    after the first ``min_rounds`` only while ``stop()`` is false), so drift hits every size alike.
    -> per pass, {size: [seconds per round]}."""
    passes = [(run, list(sizes)) for run, sizes in passes]
    times: list[dict[int, list[float]]] = [{n: [] for n in sizes} for _, sizes in passes]
    for rep in range(max(1, repeats)):
        if rep >= min_rounds and stop():
            break
        for (run, sizes), out in zip(passes, times):
            for n in sizes:
                t0 = clock()
                run(n)
                out[n].append(clock() - t0)
    return times


def typical(xs: Sequence[float]) -> float:
    """The median of the rounds after the first (the first pays first calls: a graph's build, a
    kernel's plan). A run's tokens per second average over its steps, so the typical pass predicts
    them; the fastest one does not (gemma-3-270m's one-token step on the Zen 4: fastest 50 ms,
    median 62 ms in one session, and the advisor's predictions erred 10-23% low with the fastest)."""
    rounds = list(xs[1:]) if len(xs) > 1 else list(xs)
    return statistics.median(rounds) if rounds else 0.0


def tokens(model, n: int, seed: int, tokenizer=None) -> torch.Tensor:
    """n token ids [n]: text where ``tokenizer`` is given (the bundled prompts, tokenized and run
    together, from an offset the seed picks), else uniform ones. A target is timed on text: after
    uniform tokens its next-token rows are nearly flat, and an int8 argmax screen's bound then keeps
    most of the vocabulary and falls back to the full head (gemma-3-270m: 2 rows of 9), a cost text
    rarely pays, which priced its wide verify passes ~10 ms high."""
    from ..runtime.kv import vocab_size

    gen = torch.Generator().manual_seed(seed)
    if tokenizer is not None:
        from ..prompts import load_prompts

        vocab = vocab_size(model)
        ids = [t for r in load_prompts() for t in tokenizer(r.prompt, add_special_tokens=False)["input_ids"] if t < vocab]
        if ids:
            start = int(torch.randint(0, len(ids), (1,), generator=gen))
            ids = (ids[start:] + ids[:start]) * (n // len(ids) + 1)
            return torch.tensor(ids[:n], dtype=torch.long)  # [n]
    return torch.randint(3, min(vocab_size(model), 32_000), (n,), generator=gen)  # [n]


def lookups(context: int, clock, repeats: int = 20) -> dict[str, float]:
    """One n-gram chain lookup and one n-gram trie (budget 64, depth 8) on a context that repeats."""
    from ..proposers.ngram import ngram_lookup
    from ..proposers.ngram_tree import ngram_trie

    gen = torch.Generator().manual_seed(3)
    block = torch.randint(3, 1000, (48,), generator=gen)  # [48]
    ctx = block.repeat(context // 48 + 1)[:context]  # [context] every 3-gram repeats
    out = {}
    for name, fn in (("ngram", lambda: ngram_lookup(ctx, 8, 3, 1)), ("ngram-tree", lambda: ngram_trie(ctx, 8, 3, 1, 64))):
        fn()
        times = []
        for _ in range(repeats):
            t0 = clock()
            fn()
            times.append(clock() - t0)
        out[name] = median(times)
    return out
