"""The speculative decoding loop: Session.step() does one draft -> verify -> commit round.

Ladder (gpt-fast style): ``encode_prompt`` -> ``Session._prefill`` -> ``Session.step`` ->
``SpeculativeDecoder.generate``; ``autoregressive`` is the same loop with nothing drafted, so the
baseline pays exactly the same bookkeeping as the speculative path.
"""

from __future__ import annotations

import time
from typing import Any, Iterable, Sequence

import torch

from ..runtime.kv import context_window, forward_logits, keep_path, rollback, score_tree, session_cache
from .algorithm import EXACT, Acceptance, TreeVerification, Verification, verify, verify_tree
from .bounds import ENGINE_MAX_K as MAX_K  # the engine's hard limit on k; kept as engine.MAX_K
from .certified import bounded_sampling, plain_temperature, top_k_probs, verify_bounded
from .hooks import Hook, HookList
from .lazyrec import RECORD_MODES, LazyProbs, chain_record
from .logits import Want, greedy_argmax, is_bounded
from .proposer import Proposer, empty_proposal
from .records import GenerationResult, Proposal, Sampling, Stats, StepRecord, TopToken, evolve
from .schedules import changes_nothing, make_schedule, stops_early
from .stats import accepted_positions, drafted_positions, step_position_counts
from .trees import prune_tree, tree_record


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
    acceptance rule (exact by default; ``Acceptance("typical")`` is lossy). ``max_tree_nodes``
    caps a token tree's nodes per step (None: no cap beyond depth <= k; a host passes its limit)."""

    def __init__(
        self,
        target,
        proposer: Proposer | None,
        k: int = 4,
        sampling: Sampling = Sampling(),
        schedule: str | object | None = None,
        acceptance: Acceptance = EXACT,
        max_tree_nodes: int | None = None,
    ):
        self.target = target  # specviz.models.LoadedModel
        self.proposer = proposer
        self.k = _check_k(k) if proposer is not None else 0  # the first (and, by default, every) step's k
        self.schedule = make_schedule(schedule)  # constant | heuristic | confidence
        if (why := changes_nothing(self.schedule, proposer)) is not None:
            raise ValueError(why)
        if not isinstance(acceptance, Acceptance):
            raise ValueError("acceptance must be a specviz.core.algorithm.Acceptance('exact' | 'typical')")
        self.acceptance = acceptance
        if max_tree_nodes is not None and (isinstance(max_tree_nodes, bool) or not isinstance(max_tree_nodes, int)
                                           or max_tree_nodes < 1):
            raise ValueError(f"max_tree_nodes must be a whole number >= 1 (None = no cap), got {max_tree_nodes!r}")
        self.max_tree_nodes = max_tree_nodes  # the most nodes a token tree may have per step (None: any)
        if proposer is not None:
            if getattr(proposer, "max_nodes", None) is not None:
                check_tree_nodes(proposer.max_nodes, max_tree_nodes)  # before any forward
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
            forward_logits(self.target.model, self.context[:-1], self.cache, 1, lazy=True)  # logits unread: none computed where the head screens
            self.target_forwards += 1
            share = getattr(self.decoder.proposer, "share_prompt", None)  # a draft that is the target's copy
            if share is not None:  # takes these keys and values instead of computing its own
                share(self.proposer_state, self.target, self.cache, self.context[:-1].tolist())
        self._sync()
        self.prefill_ms = (time.perf_counter() - t0) * 1e3
        self._prefilled = True

    def _next_k(self) -> int:
        # Never draft past max_new_tokens: k drafts + 1 correction/bonus <= tokens left.
        if self.decoder.proposer is None:
            return 0
        return max(0, min(self.k_current, self.max_new_tokens - self.n_new - 1))

    def _propose(self) -> Proposal:
        """Up to k drafts after the context (none without a proposer or room left): a chain cut to
        k, or a token tree cut to depth k and held to the decoder's cap on nodes."""
        k = self._next_k()
        if k == 0:
            return empty_proposal(self.target.device)
        decoder = self.decoder
        proposal = decoder.proposer.propose(
            self.proposer_state, self.context, k, decoder.sampling, self.generator, stop=_stop_rule(decoder.schedule)
        )
        if not proposal.is_tree:
            return proposal.head(k)
        proposal = prune_tree(proposal, k)
        check_tree_nodes(proposal.k, decoder.max_tree_nodes)
        return proposal

    @torch.inference_mode()
    def step(self) -> StepRecord:
        """One round: draft, score the drafts in one target pass, verify, commit and roll back,
        record. A chain and a token tree are two strategies of this one path (``_CHAIN``, ``_TREE``)."""
        if self.done:
            raise RuntimeError("this session has finished; start a new one")
        if not self._prefilled:
            self._prefill()
        t_release = self._release()
        t0 = time.perf_counter()

        # 1. Propose up to k tokens after the context: a chain, or a token tree of depth <= k.
        proposal = self._propose()
        strategy = _TREE if proposal.is_tree else _CHAIN
        self.hooks.on_draft(self, proposal)
        self._sync()
        t1 = time.perf_counter()

        # 2. Score: one target forward over [last committed token, the drafts] -> one row of p per
        #    draft plus one; p itself is computed when the rule, a record or a hook reads it.
        logits = strategy.score(self, proposal)  # [k+1, V]
        p = LazyProbs(logits, self.decoder.sampling)  # [k+1, V], on first read
        self.target_forwards += 1
        self._sync()
        t2 = time.perf_counter()

        # 3. Verify: the longest accepted prefix (a tree: path), then a correction or bonus token.
        ver = strategy.verify(self, proposal, logits, p)
        self.hooks.on_verify(self, ver)

        # 4. Commit the accepted drafts and the next token (stopping at EOS / max_new_tokens), keep
        #    only those in the target's cache, then roll it back to all but the new last token.
        committed = self._commit(strategy.accepted(proposal, ver) + [ver.next_token])
        strategy.keep(self.cache, proposal, ver)
        rollback(self.cache, self.length - 1)

        # 5. Record (its costly fields computed when read), move k, tell the hooks.
        t3 = time.perf_counter()
        timings = ((t1 - t0) * 1e3, (t2 - t1) * 1e3, (t3 - t2 + t_release) * 1e3)  # draft, verify, other ms
        record, self._kept = strategy.record(self, proposal, p, ver, committed, timings)
        if self.eager_records:
            record.resolve()
        self.steps.append(record)
        if self.decoder.proposer is not None:
            self.k_current = self.decoder.schedule.next_k(self.k_current, MAX_K, strategy.as_chain(record))
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
    """The schedule's stop_drafting (it reads each draft's top probability), or None when it never
    stops."""
    return schedule.stop_drafting if stops_early(schedule) else None


class _PendingQ:
    """A proposal's q, read (and so computed) only when asked for."""

    def __init__(self, proposal: Proposal):
        self.proposal = proposal

    def get(self) -> torch.Tensor:
        return self.proposal.q


def check_tree_nodes(n: int, most: int | None) -> None:
    """ValueError when a token tree of ``n`` nodes per step is over the decoder's cap (None: no cap)."""
    if most is not None and n > most:
        raise ValueError(
            f"a token tree of {n} nodes per step is more than this decoder allows (max_tree_nodes={most}); "
            f"ask the proposer for fewer nodes, e.g. nodes={min(12, most)}"
        )


def _argmax_only(session: Session) -> bool:
    """Whether a step's target pass may leave its logits unmade: a greedy step decides on the argmax
    alone, and lean records read p only if asked (then the logits are computed when read)."""
    return session.decoder.sampling.greedy and session.records == "lean"


def _lazy_chain(session: Session) -> bool | str:
    """How a chain's target pass may leave its logits: unmade for a greedy step (:func:`_argmax_only`),
    bounded for a sampled one at a plain temperature or a top-k under the exact rule (``Want.BOUNDS``:
    :mod:`specviz.core.certified`), else computed."""
    if _argmax_only(session):
        return Want.ARGMAX
    bounded = bounded_sampling(session.decoder.sampling)
    return Want.BOUNDS if bounded and session.records == "lean" and not session.decoder.acceptance.lossy else Want.FULL


def _check_q_width(q, logits: torch.Tensor) -> None:
    if isinstance(q, torch.Tensor) and q.shape[-1] != logits.shape[-1]:
        raise ValueError(f"the proposer's q has {q.shape[-1]} columns but the target's vocabulary has {logits.shape[-1]}")


class _Chain:
    """A chain x_1..x_k: one forward over the sequence, the prefix rule, rollback drops the rest."""

    @staticmethod
    def score(session: Session, proposal: Proposal) -> torch.Tensor:
        feed = torch.cat([session.context[-1:], proposal.tokens])  # [k+1]
        return forward_logits(session.target.model, feed, session.cache, proposal.k + 1, lazy=_lazy_chain(session))  # [k+1, V]

    @staticmethod
    def verify(session: Session, proposal: Proposal, logits: torch.Tensor, p: LazyProbs) -> Verification:
        sampling = session.decoder.sampling
        if proposal.deterministic:
            q = None  # point masses (argmax drafts): q is only shown
        elif sampling.greedy and proposal.pending():
            q = _PendingQ(proposal)  # greedy: q(x_i) only for the record
        else:
            q = proposal.q  # None for point masses (n-gram)
        _check_q_width(q, logits)
        if is_bounded(logits) and not sampling.greedy:  # bounded logits: the rule on their bounds
            if plain_temperature(sampling):
                return verify_bounded(logits, sampling.temperature, q, proposal.tokens, p.get, session.generator)
            exact = top_k_probs(logits, sampling)  # [k+1, V] a top-k p, exact from a few exact logits a row
            if exact is not None:
                p.known(exact)
        # greedy decides on argmax alone: p is computed only if a record or hook reads it
        return verify(
            p if sampling.greedy else p.get(), q, proposal.tokens, generator=session.generator, greedy=sampling.greedy,
            target_argmax=greedy_argmax(logits) if sampling.greedy else None, acceptance=session.decoder.acceptance,
        )

    @staticmethod
    def accepted(proposal: Proposal, ver: Verification) -> list[int]:
        return proposal.tokens[: ver.n_accepted].tolist()

    @staticmethod
    def keep(cache, proposal: Proposal, ver: Verification) -> None:
        """Nothing to compact: the rejected drafts are past the rollback point."""

    @staticmethod
    def record(session, proposal, p, ver, committed, timings):
        return chain_record(session, proposal, p, ver, committed, timings)

    @staticmethod
    def as_chain(record: StepRecord) -> StepRecord:
        return record


class _Tree:
    """A token tree: one forward over every node (tree attention mask), the sibling rule walked
    from the root, only the accepted path kept in the cache."""

    @staticmethod
    def score(session: Session, proposal: Proposal) -> torch.Tensor:
        return score_tree(session.target.model, session.cache, session.context[-1:], proposal.tokens, proposal.parents,
                          lazy=_argmax_only(session))  # [n+1, V]

    @staticmethod
    def verify(session: Session, proposal: Proposal, logits: torch.Tensor, p: LazyProbs) -> TreeVerification:
        sampling = session.decoder.sampling
        q = proposal.q_for_rule
        _check_q_width(q, logits)
        # greedy walks on argmax alone: p is computed only if a record or hook reads it
        return verify_tree(
            p if sampling.greedy else p.get(), q, proposal.tokens, proposal.parents, generator=session.generator,
            greedy=sampling.greedy, target_argmax=greedy_argmax(logits) if sampling.greedy else None,
        )

    @staticmethod
    def accepted(proposal: Proposal, ver: TreeVerification) -> list[int]:
        return proposal.tokens[list(ver.path)].tolist()

    @staticmethod
    def keep(cache, proposal: Proposal, ver: TreeVerification) -> None:
        keep_path(cache, proposal.k, ver.path)  # the root and the accepted path

    @staticmethod
    def record(session, proposal, p, ver, committed, timings):
        return tree_record(session, proposal, p, ver, committed, timings)

    @staticmethod
    def as_chain(record: StepRecord) -> StepRecord:
        """What the k schedule sees: a tree's k is its depth budget, so the path against the deepest node."""
        return evolve(record, k=drafted_positions(record))


_CHAIN, _TREE = _Chain(), _Tree()


def compute_stats(steps: Sequence[StepRecord], prefill_ms: float = 0.0, target_forwards: int | None = None) -> Stats:
    """Metrics from step records (docs/architecture.md, "Metrics"); usable on a trace loaded back from disk."""
    n_steps = len(steps)
    drafted = sum(s.k for s in steps)
    accepted = sum(accepted_positions(s) for s in steps)  # drafts cut off by EOS / max_new_tokens do not count
    new_tokens = sum(s.n_committed for s in steps)
    hits, trials = step_position_counts(steps)  # a tree's positions are its depths
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
        per_position=tuple(h / max(1, t) for h, t in zip(hits, trials)),
        wall_s=wall_s,
        tokens_per_s=new_tokens / wall_s if wall_s > 0 else 0.0,
        target_forwards=target_forwards if target_forwards is not None else n_steps,
        draft_ms=draft_ms,
        verify_ms=verify_ms,
        other_ms=other_ms,
        prefill_ms=prefill_ms,
    )
