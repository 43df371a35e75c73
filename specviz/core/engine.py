"""The speculative decoding loop: Session.step() does one draft -> verify -> commit round.

Ladder (gpt-fast style): ``encode_prompt`` -> ``Session._prefill`` -> ``Session.step`` ->
``SpeculativeDecoder.generate``; ``autoregressive`` is the same loop with nothing drafted, so the
baseline pays exactly the same bookkeeping as the speculative path.
"""

from __future__ import annotations

import time
from typing import Any, Iterable, Sequence

import torch

from ..app.limits import check_tree_nodes
from ..runtime.kv import context_window, forward_logits, keep_path, rollback, score_tree, session_cache
from .algorithm import EXACT, Acceptance, argmax, logits_to_probs, verify, verify_tree
from .bounds import ENGINE_MAX_K as MAX_K  # the engine's hard limit on k; kept as engine.MAX_K
from .hooks import Hook, HookList
from .lazyrec import RECORD_MODES, LazyProbs, chain_record
from .proposer import Proposer, empty_proposal
from .records import Deferred, GenerationResult, Proposal, Sampling, Stats, StepRecord, TopToken, evolve
from .schedules import ConstantK, HeuristicK, make_schedule


def encode_prompt(tokenizer, prompt: str | Sequence[int], chat: bool = False) -> list[int]:
    """Prompt text (or ready token ids) -> token ids; ``chat`` wraps it in the chat template."""
    if not isinstance(prompt, str):
        ids = [int(t) for t in prompt]
    elif not prompt.strip():
        raise ValueError("the prompt is empty: type some text to continue")
    elif chat and getattr(tokenizer, "chat_template", None):
        out = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=True
        )
        ids = list(out["input_ids"] if hasattr(out, "keys") else out)
    else:
        ids = tokenizer(prompt, add_special_tokens=True)["input_ids"]
    if not ids:
        raise ValueError("the prompt is empty: type some text to continue")
    return [int(t) for t in ids]


def eos_token_ids(target) -> frozenset[int]:
    """The ids that end generation: the generation config's, else the tokenizer's."""
    eos = getattr(getattr(target.model, "generation_config", None), "eos_token_id", None)
    if eos is None:
        eos = target.tokenizer.eos_token_id
    if eos is None:
        return frozenset()
    return frozenset([eos] if isinstance(eos, int) else eos)


class TokenTexts:
    """Token id -> display text, memoised (decoding is the hot part of building records)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self._cache: dict[int, str] = {}

    def __call__(self, token_id: int) -> str:
        text = self._cache.get(token_id)
        if text is None:
            text = self.tokenizer.decode([token_id], skip_special_tokens=False)
            self._cache[token_id] = text
        return text

    def tops(self, values: list[float], ids: list[int]) -> tuple[TopToken, ...]:
        return tuple((i, self(i), v) for v, i in zip(values, ids))


def _check_k(k: int) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
        raise ValueError(f"k (tokens drafted per step) must be a whole number from 1 to {MAX_K}, got {k!r}; try 4")
    return k


def _check_max_new_tokens(n: int) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"max_new_tokens must be a whole number >= 1, got {n!r}")
    return n


def check_context_window(n_prompt: int, max_new_tokens: int, window: int | None, name: str) -> None:
    """ValueError unless the prompt and max_new_tokens fit the model's context window (None: no limit)."""
    if window is None:
        return
    if n_prompt >= window:
        raise ValueError(
            f"the prompt has {n_prompt} tokens, but {name}'s context window is {window} tokens; shorten the "
            f"prompt to at most {max(1, window - max_new_tokens)} tokens (leaving room for max_new_tokens={max_new_tokens})"
        )
    if n_prompt + max_new_tokens > window:
        raise ValueError(
            f"the prompt has {n_prompt} tokens and max_new_tokens={max_new_tokens}, but {name}'s context window is "
            f"{window} tokens; lower max_new_tokens to at most {window - n_prompt} or shorten the prompt"
        )


class SpeculativeDecoder:
    """A target model and a proposer, with k, the sampling settings, a k schedule and the
    acceptance rule (exact by default; ``Acceptance("typical")`` is lossy)."""

    def __init__(
        self,
        target,
        proposer: Proposer | None,
        k: int = 4,
        sampling: Sampling = Sampling(),
        schedule: str | object | None = None,
        acceptance: Acceptance = EXACT,
    ):
        self.target = target  # specviz.models.LoadedModel
        self.proposer = proposer
        self.k = _check_k(k) if proposer is not None else 0  # the first (and, by default, every) step's k
        self.schedule = make_schedule(schedule)  # constant | heuristic | confidence
        if not isinstance(acceptance, Acceptance):
            raise ValueError("acceptance must be a specviz.core.algorithm.Acceptance('exact' | 'typical')")
        self.acceptance = acceptance
        if proposer is not None:
            if getattr(proposer, "max_nodes", None) is not None:
                check_tree_nodes(proposer.max_nodes)  # the hosting limit, before any forward
            proposer.init_state(target)  # fail now, not mid-run, if it cannot draft for this target
        if not isinstance(sampling, Sampling):
            raise ValueError("sampling must be a specviz.Sampling(temperature=..., top_k=..., top_p=...)")
        self.sampling = sampling
        self.texts = TokenTexts(target.tokenizer)
        self.eos = eos_token_ids(target)

    @property
    def name(self) -> str:
        return self.proposer.name if self.proposer is not None else "target-only"

    @property
    def label(self) -> str:
        """The proposer with its schedule and rule, e.g. "ngram k=4 heuristic (typical, LOSSY)"."""
        if self.proposer is None:
            return "target-only"
        label = f"{self.name} k={self.k}"
        if self.schedule.name != "constant":
            label += f" {self.schedule.name}"
        if self.acceptance.lossy:
            label += f" ({self.acceptance.rule}, LOSSY)"
        return label

    def start(
        self,
        prompt: str | Sequence[int],
        max_new_tokens: int = 64,
        seed: int = 0,
        hooks: Iterable[Hook] = (),
        chat: bool = False,
        records: str = "full",
    ) -> "Session":
        """A Session on ``prompt``; ValueError before any forward pass for bad input, including a prompt
        and max_new_tokens that do not fit the target's context window."""
        ids = encode_prompt(self.target.tokenizer, prompt, chat=chat)
        max_new_tokens = _check_max_new_tokens(max_new_tokens)
        check_context_window(len(ids), max_new_tokens, context_window(self.target.model), self.target.name)
        return Session(self, ids, max_new_tokens, seed, hooks, prompt if isinstance(prompt, str) else "", records)

    def generate(self, prompt: str | Sequence[int], *args: Any, **options: Any) -> GenerationResult:
        """``start(prompt, ...)`` (same arguments, defaults and checks), stepped until done."""
        session = self.start(prompt, *args, **options)
        while not session.done:
            session.step()
        return session.result()


def autoregressive(
    target,
    prompt: str | Sequence[int],
    max_new_tokens: int = 64,
    sampling: Sampling = Sampling(),
    seed: int = 0,
    hooks: Iterable[Hook] = (),
    chat: bool = False,
    records: str = "full",
) -> GenerationResult:
    """Target-only KV-cached decoding: the baseline, one target forward per token."""
    decoder = SpeculativeDecoder(target, None, sampling=sampling)
    return decoder.generate(prompt, max_new_tokens=max_new_tokens, seed=seed, hooks=hooks, chat=chat, records=records)


class Session:
    """One prompt being decoded: owns the target's KV cache, the proposer's state and the RNG."""

    def __init__(self, decoder: SpeculativeDecoder, prompt_ids: list[int], max_new_tokens: int, seed: int, hooks, prompt: str,
                 records: str = "full"):
        self.decoder = decoder
        self.target = decoder.target
        self.prompt = prompt
        self.prompt_ids = prompt_ids
        self.max_new_tokens = max_new_tokens
        self.seed = int(seed)
        self.hooks = HookList(hooks)
        device = self.target.device
        self.generator = torch.Generator(device=device).manual_seed(self.seed)
        # context buffer: prompt + committed tokens; [: self.length] is live
        self._buf = torch.zeros(len(prompt_ids) + max_new_tokens + 1, dtype=torch.long, device=device)
        self._buf[: len(prompt_ids)] = torch.tensor(prompt_ids, dtype=torch.long)
        self.length = len(prompt_ids)
        self.cache = session_cache(self.target.model)  # the model's static step where it has one
        self.proposer_state = decoder.proposer.init_state(self.target) if decoder.proposer is not None else None
        self.steps: list[StepRecord] = []
        self.finished: str | None = None
        self.prefill_ms = 0.0
        self.target_forwards = 0
        self.k_current = decoder.k  # the schedule moves it between steps
        self._prefilled = False
        self._result: GenerationResult | None = None
        if records not in RECORD_MODES:
            raise ValueError(f"records must be one of {', '.join(RECORD_MODES)}, got {records!r}")
        # "full": every record field stays readable; "lean": costly fields only until the next step
        self.records = records
        self.eager_records = False  # tests: build every field at once (the pre-lazy behaviour)
        self._kept = None  # the last step's tensors its record's pending fields are computed from
        self.hooks.on_start(self)

    # -- state -------------------------------------------------------------------------------
    @property
    def context(self) -> torch.Tensor:
        return self._buf[: self.length]  # [n] long

    @property
    def new_token_ids(self) -> list[int]:
        return self._buf[len(self.prompt_ids) : self.length].tolist()

    @property
    def n_new(self) -> int:
        return self.length - len(self.prompt_ids)

    @property
    def done(self) -> bool:
        return self.finished is not None

    @property
    def text(self) -> str:
        return self.target.tokenizer.decode(self.new_token_ids, skip_special_tokens=True)

    def describe(self) -> dict[str, Any]:
        d = self.decoder
        return {
            "target": self.target.name,
            "proposer": d.name,
            "k": d.k,
            "schedule": d.schedule.name,
            "acceptance": d.acceptance.rule,
            "sampling": {"temperature": d.sampling.temperature, "top_k": d.sampling.top_k, "top_p": d.sampling.top_p},
            "seed": self.seed,
            "max_new_tokens": self.max_new_tokens,
            "prompt": self.prompt,
            "prompt_ids": list(self.prompt_ids),
            "device": str(self.target.device),
            "dtype": str(getattr(self.target, "dtype", "")),
        }

    # -- the loop ----------------------------------------------------------------------------
    def _sync(self) -> None:
        if self.target.device.type == "cuda":
            torch.cuda.synchronize(self.target.device)

    @torch.inference_mode()
    def _prefill(self) -> None:
        """Fill the target's cache with all but the last prompt token (each step feeds that one)."""
        t0 = time.perf_counter()
        if self.length > 1:
            forward_logits(self.target.model, self.context[:-1], self.cache, 1)
            self.target_forwards += 1
        self._sync()
        self.prefill_ms = (time.perf_counter() - t0) * 1e3
        self._prefilled = True

    def _next_k(self) -> int:
        # Never draft past max_new_tokens: k drafts + 1 correction/bonus <= tokens left.
        if self.decoder.proposer is None:
            return 0
        return max(0, min(self.k_current, self.max_new_tokens - self.n_new - 1))

    @torch.inference_mode()
    def step(self) -> StepRecord:
        """One round: draft k tokens, score them in one target pass, verify, commit, roll back."""
        if self.done:
            raise RuntimeError("this session has finished; start a new one")
        if not self._prefilled:
            self._prefill()
        t_release = self._release()
        decoder, target, sampling = self.decoder, self.target, self.decoder.sampling
        t0 = time.perf_counter()

        # 1. Draft up to k tokens after the context.
        k = self._next_k()
        if k > 0:
            proposal = decoder.proposer.propose(
                self.proposer_state, self.context, k, sampling, self.generator, stop=_stop_rule(decoder.schedule)
            )
            if proposal.parents is not None:
                from .trees import prune_tree  # token trees: depth <= k, at most the hosting limit of nodes

                proposal = prune_tree(proposal, k)
                check_tree_nodes(proposal.k)
            elif proposal.k > k:
                full = proposal
                q = None if full.__dict__["_lazy_q"] is None else Deferred(lambda: full.q[:k])  # [k, V]
                proposal = evolve(full, tokens=full.tokens[:k], q=q)
        else:
            proposal = empty_proposal(target.device)
        if proposal.parents is not None:
            return self._step_tree(proposal, t0, t_release)
        drafts = proposal.tokens  # [k]
        k = proposal.k
        self.hooks.on_draft(self, proposal)
        self._sync()
        t1 = time.perf_counter()

        # 2. Score: one target forward over [last committed token, x_1..x_k] -> k+1 rows of p.
        feed = torch.cat([self.context[-1:], drafts])  # [k+1]
        logits = forward_logits(target.model, feed, self.cache, k + 1)  # [k+1, V]
        # greedy decides on argmax alone: p is computed only if a record or hook reads it
        p = LazyProbs(logits, sampling)
        lazy = sampling.greedy
        self.target_forwards += 1
        self._sync()
        t2 = time.perf_counter()

        # 3. Verify: the longest accepted prefix, then a correction or bonus token.
        if proposal.deterministic:
            q = None  # point masses (argmax drafts): q is only shown
        elif lazy and proposal.pending():
            q = _PendingQ(proposal)  # greedy: q(x_i) only for the record
        else:
            q = proposal.q  # None for point masses (n-gram)
        if isinstance(q, torch.Tensor) and q.shape[-1] != logits.shape[-1]:
            raise ValueError(f"the proposer's q has {q.shape[-1]} columns but the target's vocabulary has {logits.shape[-1]}")
        ver = verify(
            p if lazy else p.get(), q, drafts, generator=self.generator, greedy=sampling.greedy,
            target_argmax=argmax(logits) if sampling.greedy else None, acceptance=decoder.acceptance,
        )
        self.hooks.on_verify(self, ver)

        # 4. Commit x_1..x_n and the next token (stopping at EOS / max_new_tokens), then roll the
        #    target's cache back to everything but the new last token.
        committed = self._commit(drafts[: ver.n_accepted].tolist() + [ver.next_token])
        rollback(self.cache, self.length - 1)

        # 5. Record: the costly fields are computed when something reads them.
        t3 = time.perf_counter()
        record, self._kept = chain_record(self, proposal, p, ver, committed, k, ((t1 - t0) * 1e3, (t2 - t1) * 1e3, (t3 - t2 + t_release) * 1e3))
        if self.eager_records:
            record.resolve()
        self.steps.append(record)
        if decoder.proposer is not None:
            self.k_current = decoder.schedule.next_k(self.k_current, MAX_K, record)
        self.hooks.on_step(self, record)
        if self.done:
            self.hooks.on_finish(self, self.result())
            self._release()
        return record

    def _release(self) -> float:
        """Drop the previous step's kept tensors (records="full": compute its pending fields
        first, so they stay readable); -> seconds spent."""
        if self._kept is None:
            return 0.0
        t = time.perf_counter()
        self._kept.release(resolve=self.records == "full")
        self._kept = None
        return time.perf_counter() - t

    @torch.inference_mode()
    def _step_tree(self, proposal: Proposal, t0: float, t_release: float = 0.0) -> StepRecord:
        """A tree round: one target forward over every node (tree attention mask), verify_tree,
        commit the accepted path and the correction / bonus, keep only that path in the cache."""
        from .trees import tree_record

        decoder, target, sampling = self.decoder, self.target, self.decoder.sampling
        tokens, parents, n = proposal.tokens, proposal.parents, proposal.k  # [n], [n]
        self.hooks.on_draft(self, proposal)
        self._sync()
        t1 = time.perf_counter()

        # 2. Score: one forward over [last committed token, node_1..node_n] -> n+1 rows of p.
        logits = score_tree(target.model, self.cache, self.context[-1:], tokens, parents)  # [n+1, V]
        p = logits_to_probs(logits, sampling)  # [n+1, V]
        self.target_forwards += 1
        self._sync()
        t2 = time.perf_counter()

        # 3. Verify: walk down the tree keeping one child per depth, then a correction or bonus.
        q = proposal.q_for_rule
        if q is not None and q.shape[-1] != p.shape[-1]:
            raise ValueError(f"the proposer's q has {q.shape[-1]} columns but the target's vocabulary has {p.shape[-1]}")
        ver = verify_tree(
            p, q, tokens, parents, generator=self.generator, greedy=sampling.greedy,
            target_argmax=argmax(logits) if sampling.greedy else None,
        )
        self.hooks.on_verify(self, ver)

        # 4. Commit the path and the next token (EOS / max_new_tokens as for chains), keep only the
        #    root and the accepted path in the cache, then roll back to all but the new last token.
        committed = self._commit(tokens[list(ver.path)].tolist() + [ver.next_token])
        keep_path(self.cache, n, ver.path)
        rollback(self.cache, self.length - 1)

        # 5. Record.
        record, self._kept = tree_record(self, proposal, p, ver, committed)
        t3 = time.perf_counter()
        record = evolve(record, draft_ms=(t1 - t0) * 1e3, verify_ms=(t2 - t1) * 1e3, other_ms=(t3 - t2 + t_release) * 1e3)
        self._kept.records[0] = record
        if self.eager_records:
            record.resolve()
        self.steps.append(record)
        # a tree's k is its depth budget: the schedule sees the path against the deepest node
        self.k_current = decoder.schedule.next_k(self.k_current, MAX_K, evolve(record, k=max(x.depth for x in record.tree)))
        self.hooks.on_step(self, record)
        if self.done:
            self.hooks.on_finish(self, self.result())
            self._release()
        return record

    def _commit(self, new: list[int]) -> list[int]:
        """Append ``new`` to the context, stopping at EOS and at max_new_tokens; -> what was kept."""
        committed: list[int] = []
        for t in new:
            if self.n_new + len(committed) >= self.max_new_tokens:
                break
            committed.append(t)
            if t in self.decoder.eos:
                self.finished = "eos"
                break
        self._buf[self.length : self.length + len(committed)] = torch.tensor(committed, dtype=torch.long)
        self.length += len(committed)
        if self.finished is None and self.n_new >= self.max_new_tokens:
            self.finished = "length"
        return committed

    # -- results -----------------------------------------------------------------------------
    def stats(self) -> Stats:
        return compute_stats(self.steps, self.prefill_ms, self.target_forwards)

    def result(self) -> GenerationResult:
        if self._result is not None and self._result.stats.steps == len(self.steps):
            return self._result
        ids = self.new_token_ids
        self._result = GenerationResult(
            text=self.target.tokenizer.decode(ids, skip_special_tokens=True),
            token_ids=tuple(ids),
            steps=tuple(self.steps),
            stats=self.stats(),
            prompt=self.prompt,
            finished=self.finished,
        )
        return self._result


def _stop_rule(schedule):
    """The schedule's stop_drafting, or None when it never stops (then a greedy draft need not
    compute q per token)."""
    if type(schedule).stop_drafting in (ConstantK.stop_drafting, HeuristicK.stop_drafting):
        return None
    return schedule.stop_drafting


class _PendingQ:
    """A proposal's q, read (and so computed) only when asked for."""

    def __init__(self, proposal: Proposal):
        self.proposal = proposal

    def get(self) -> torch.Tensor:
        return self.proposal.q


def compute_stats(steps: Sequence[StepRecord], prefill_ms: float = 0.0, target_forwards: int | None = None) -> Stats:
    """Metrics from step records (docs/architecture.md, "Metrics"); usable on a trace loaded back from disk."""
    n_steps = len(steps)
    drafted = sum(s.k for s in steps)
    # drafts cut off by EOS / max_new_tokens were never committed, so they are not counted
    accepted = sum(min(s.n_accepted, s.n_committed) for s in steps)
    new_tokens = sum(s.n_committed for s in steps)
    # a tree's positions are its depths: position i was reached by steps with a node at depth i+1
    depth = [max((x.depth for x in s.tree), default=0) if s.tree else s.k for s in steps]
    max_k = max(depth, default=0)
    per_position = tuple(
        sum(1 for s, d in zip(steps, depth) if d > i and min(s.n_accepted, s.n_committed) > i)
        / max(1, sum(1 for d in depth if d > i))
        for i in range(max_k)
    )
    draft_ms = sum(s.draft_ms for s in steps)
    verify_ms = sum(s.verify_ms for s in steps)
    other_ms = sum(s.other_ms for s in steps)
    wall_s = (draft_ms + verify_ms + other_ms + prefill_ms) / 1e3
    return Stats(
        steps=n_steps,
        drafted=drafted,
        accepted=accepted,
        new_tokens=new_tokens,
        acceptance_rate=accepted / drafted if drafted else 0.0,
        mean_acceptance_length=new_tokens / n_steps if n_steps else 0.0,
        per_position=per_position,
        wall_s=wall_s,
        tokens_per_s=new_tokens / wall_s if wall_s > 0 else 0.0,
        target_forwards=target_forwards if target_forwards is not None else n_steps,
        draft_ms=draft_ms,
        verify_ms=verify_ms,
        other_ms=other_ms,
        prefill_ms=prefill_ms,
    )
