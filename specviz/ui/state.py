"""Per-browser-session state of the playground, and the settings that define a run.

Nothing here imports Gradio: :class:`PlaygroundState` is a plain object that the app keeps in a
``gr.State`` (one per browser session), so one user's run never touches another's. All changes go
through its ``lock`` so a Step pressed while Play is running cannot corrupt the session.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import IO, Any

from ..app.limits import Limits, check_k, check_max_new_tokens, check_model_name, check_prompt_chars
from ..app.parsing import finite_number
from ..app.replay import Replay
from ..app.runs import MENU, TAKES_LAYERS, TAKES_OPTIONS, USES_DRAFT_MODEL, check_options, prefix_of, spec_for
from ..core.engine import Session, SpeculativeDecoder
from ..core.hooks import TraceRecorder
from ..core.records import Sampling, Stats, StepRecord
from ..models import pin, unpin
from ..viz.guess import GuessBook

MAX_TEMPERATURE = 5.0

# The proposer menu: (label, spec prefix) pairs from the proposer registry (through specviz.app.runs);
# the controls carry the prefix, a run carries the whole spec.
PROPOSERS: tuple[str, ...] = tuple(prefix for _, prefix in MENU)
SCHEDULES = ("constant", "heuristic", "confidence")
RULES = {"exact": "exact", "typical (LOSSY)": "typical"}  # the menu's labels -> Acceptance.rule
RULE_LABELS = {rule: label for label, rule in RULES.items()}  # Acceptance.rule -> the menu's label
# How describe() says what drafts, for the kinds whose spec reads better in words ({arg}: the spec's argument)
HOW = {"ngram": "n-gram", "draft": "draft {arg}", "ngram+draft": "n-gram, else draft {arg}",
       "xdraft": "re-tokenized draft {arg}", "early-exit": "its first {arg} layers"}


# -- settings --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    """Everything that defines a run; two runs with equal settings are the same run."""

    target: str
    proposer: str  # the proposer spec ("draft:gemma-3-270m@int8"; specviz.proposers.registry.from_spec)
    k: int
    temperature: float
    top_p: float | None
    top_k: int | None
    seed: int
    max_new_tokens: int
    prompt: str
    chat: bool = True
    schedule: str = "constant"  # how k moves between steps (specviz.core.schedules)
    acceptance: str = "exact"  # the acceptance rule: "exact" or "typical" (LOSSY; specviz.core.algorithm.Acceptance)

    @property
    def sampling(self) -> Sampling:
        return Sampling(temperature=self.temperature, top_k=self.top_k, top_p=self.top_p)

    def baseline_key(self) -> tuple:
        """What a target-only run must share with this run for its speed to compare."""
        return (self.target, self.temperature, self.top_p, self.top_k, self.seed, self.max_new_tokens, self.prompt, self.chat)

    def describe(self) -> str:
        prefix, _, arg = self.proposer.partition(":")
        how = HOW[prefix].format(arg=arg) if prefix in HOW and "," not in arg else self.proposer  # options: the spec
        mode = "greedy" if self.temperature == 0 else f"T={self.temperature:g}"
        sched = "" if self.schedule == "constant" else f" ({self.schedule})"
        rule = ", typical acceptance (LOSSY)" if self.acceptance == "typical" and self.temperature > 0 else ""
        return f"{self.target} + {how}, k={self.k}{sched}, {mode}{rule}"


def _number(value: Any, name: str) -> float:
    if value is None or (isinstance(value, str) and not value.strip()):
        raise ValueError(f"{name} is empty: enter a number")
    return finite_number(value, name)


def _whole(value: Any, name: str, lo: int | None, hi: int | None = None) -> int:
    """A whole number in [lo, hi] (``lo=None``: any whole number; the caller checks the range)."""
    x = _number(value, name)
    if x != int(x):
        raise ValueError(f"{name} must be a whole number, got {value!r}")
    if lo is not None and (x < lo or (hi is not None and x > hi)):
        rng = f"from {lo} to {hi}" if hi is not None else f">= {lo}"
        raise ValueError(f"{name} must be {rng}, got {int(x)}")
    return int(x)


def parse_settings(
    target: Any, proposer: Any, draft: Any, k: Any, temperature: Any, top_p: Any, top_k: Any,
    seed: Any, max_new_tokens: Any, prompt: Any, chat: Any = True, schedule: Any = "constant", layers: Any = 4,
    acceptance: Any = "exact", options: Any = "",
) -> Settings:
    """The raw control values (``proposer``: a spec prefix, the menu's value) -> Settings, or a
    ValueError that says what to fix."""
    target = (target or "").strip() if isinstance(target, str) else ""
    if not target:
        raise ValueError("choose a target model (a built-in name, a Hugging Face id or a local directory)")
    if proposer not in PROPOSERS:
        raise ValueError(f"unknown proposer {proposer!r}; choose one of: {', '.join(PROPOSERS)}")
    draft_name = (draft or "").strip() if isinstance(draft, str) else ""
    if proposer in USES_DRAFT_MODEL and not draft_name:
        raise ValueError("choose a draft model, or switch the proposer to n-gram")
    rule = RULES.get(acceptance, acceptance)
    if rule not in RULES.values():
        raise ValueError(f"unknown acceptance rule {acceptance!r}; choose one of: {', '.join(RULES)}")
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown k schedule {schedule!r}; choose one of: {', '.join(SCHEDULES)}")
    n_layers = _whole(layers, "early-exit layers", 1) if proposer in TAKES_LAYERS else None
    lim = Limits.from_env()  # the host's caps (SPECVIZ_MAX_K, SPECVIZ_MAX_NEW_TOKENS, ...), read per request
    k = _whole(k, "k (tokens drafted per step)", None)
    check_k(k, lim)  # the host's range, named in the message
    t = _number(temperature, "temperature")
    if not 0 <= t <= MAX_TEMPERATURE:
        raise ValueError(f"temperature must be from 0 (greedy) to {MAX_TEMPERATURE:g}, got {t:g}")
    tp = _number(top_p, "top-p")
    if not 0 < tp <= 1:
        raise ValueError(f"top-p must be in (0, 1] (1 = off), got {tp:g}")
    tk = _whole(top_k, "top-k", 0)
    seed = _whole(seed, "seed", 0, 2**63 - 1)
    n = _whole(max_new_tokens, "max new tokens", None)
    check_max_new_tokens(n, lim)
    if not isinstance(prompt, str) or not prompt.strip():
        raise ValueError("the prompt is empty: type some text or pick an example")
    check_model_name(target, lim)  # hosting limits: names (no local paths unless allowed), prompt length
    if proposer in USES_DRAFT_MODEL:
        check_model_name(draft_name, lim)
    check_prompt_chars(prompt, lim)
    opts = options.strip() if isinstance(options, str) and proposer in TAKES_OPTIONS else ""
    draft_name = draft_name if proposer in USES_DRAFT_MODEL else None
    if opts:
        check_options(proposer, draft_name, n_layers, opts)  # names a bad key or value
    return Settings(
        target=target, proposer=spec_for(proposer, draft_name, n_layers, opts), k=k,
        temperature=t, top_p=None if tp >= 1 else tp, top_k=tk or None, seed=seed, max_new_tokens=n,
        prompt=prompt, chat=bool(chat), schedule=schedule, acceptance=rule,
    )


# -- the state -------------------------------------------------------------------------------


class PlaygroundState:
    """One browser session: the live run (or a loaded trace), the baseline, the selection."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.epoch = 0  # bumped by reset(): a Play loop from an older epoch stops quietly
        self.stop = threading.Event()  # set by Pause
        self.mode = "live"  # "live" | "trace" (an uploaded trace)
        self.settings: Settings | None = None  # the live run's (None for an uploaded trace)
        self.session: Session | Replay | None = None  # live, recorded (ZeroGPU) or uploaded: all step alike
        self.steps: list[StepRecord] = []  # what the view shows (the session's own list)
        self.prompt_text = ""
        self.last_engine_ms: float | None = None  # engine time of the latest step (prefill included)
        # the target-only baseline
        self.baseline_key: tuple | None = None
        self.baseline_session: Session | Replay | None = None
        self.baseline_steps: list[StepRecord] = []
        # the step inspector (None = follow the latest step / the deciding position)
        self.selected_step: int | None = None
        self.selected_pos: int | None = None
        self.phase: tuple[str, int] | None = None  # the shown step's phase (None: committed)
        self.play_delay_s = 0.0  # Play's pause between steps (the speed control)
        self.lesson_mode = False  # each new step opens in its draft phase; "phase ▶" at commit moves on
        self.guesses = GuessBook()  # "guess first": the student's bets and score, cleared with the run
        self.whatif: tuple[float, int, float] | None = None  # the what-if panel's a, k, c once the user set them
        self.message: tuple[str, str] = ("", "info")  # (text, kind)
        self.note = ""  # said once, before the next step's message (e.g. "settings changed")
        # the trace of the live run
        self._dir: str | None = None
        self._trace_fh: IO[str] | None = None
        self.trace_path: str | None = None

    @classmethod
    def lesson_first(cls) -> "PlaygroundState":
        """A page's first state: lesson mode on, so a student's first Step opens in its draft phase
        (q only) and walks to the verdict; the teacher's quick mode (each Step committed) is the
        box at the top of the step inspector. The Python API's state starts in quick mode."""
        state = cls()
        state.lesson_mode = True
        return state

    def __deepcopy__(self, memo) -> "PlaygroundState":
        # gr.State copies its value; a session handle must not be copied (it owns a lock and
        # model caches). The app passes the class itself, so every browser gets a fresh one.
        return self

    # -- derived ---------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return self.session is not None and self.session.done

    def stats(self) -> Stats | None:
        if not self.steps or self.session is None:
            return None
        return self.session.stats()

    def baseline_stats(self) -> Stats | None:
        if self.baseline_session is None or not self.baseline_steps:
            return None
        return self.baseline_session.stats()

    def comparable_baseline(self) -> Stats | None:
        """The baseline's stats once it has finished on this run's target, prompt and sampling."""
        if self.settings is None or self.baseline_key != self.settings.baseline_key():
            return None
        if self.baseline_session is None or not self.baseline_session.done:
            return None
        return self.baseline_stats()

    def shown_step(self) -> StepRecord | None:
        if not self.steps:
            return None
        i = self.selected_step
        if i is None or not 0 <= i < len(self.steps):
            return self.steps[-1]
        return self.steps[i]

    def hides_latest(self) -> bool:
        """Whether the latest step is shown at a phase before its commit (its outcome not told yet)."""
        return bool(self.steps) and self.phase is not None and self.phase[0] != "commit" \
            and self.shown_step() is self.steps[-1] and self.steps[-1].k > 0

    def visible_steps(self) -> list[StepRecord]:
        """The steps whose outcome the page may tell: all but a latest step not committed yet."""
        return self.steps[:-1] if self.hides_latest() else self.steps

    def visible_stats(self) -> Stats | None:
        """:meth:`stats` over :meth:`visible_steps` (the run's cards before the latest step's commit)."""
        if not self.hides_latest():
            return self.stats()
        shown = self.steps[:-1]
        if not shown or self.session is None:
            return None
        from ..core.engine import compute_stats

        forwards = getattr(self.session, "target_forwards", len(self.steps))
        return compute_stats(shown, getattr(self.session, "prefill_ms", 0.0), max(len(shown), forwards - 1))

    # -- the live run ----------------------------------------------------------------------
    def start(self, settings: Settings, decoder: SpeculativeDecoder) -> None:
        """A fresh live session (the old one, and its trace, are dropped)."""
        self._close_trace()
        path = self.new_trace_path(settings)
        self._trace_fh = open(path, "w", encoding="utf-8", buffering=1)  # line-buffered
        session = decoder.start(
            settings.prompt, max_new_tokens=settings.max_new_tokens, seed=settings.seed,
            hooks=[TraceRecorder(self._trace_fh)], chat=settings.chat,
        )
        self._begin(settings, session, path, decoder)

    def start_recorded(self, settings: Settings, session: Any) -> None:
        """A run recorded in one go elsewhere (on ZeroGPU: a ``specviz.app.replay.Replay``), stepped
        like a live one; its trace file is the download."""
        self._close_trace()
        self._begin(settings, session, session.path, None)

    def _begin(self, settings: Settings, session: Any, trace_path: str, decoder: SpeculativeDecoder | None) -> None:
        """Make ``session`` the live run; ``decoder``'s models stay cached while it lives."""
        self.mode = "live"
        self.trace_path = trace_path
        self.settings, self.session = settings, session
        self._hold(decoder)
        self.steps = session.steps  # the session appends to it
        self.prompt_text = settings.prompt
        self.selected_step = self.selected_pos = self.phase = None
        self.last_engine_ms = None
        self.guesses = GuessBook()
        self.whatif = None

    def step(self) -> StepRecord:
        """One step of the live run, or the next record of a loaded trace."""
        assert self.session is not None
        first = not self.session.steps and self.mode == "live"
        record = self.session.step()
        if self.selected_step is None:  # following the latest step: committed, or its draft phase in a lesson
            self.phase = ("draft", -1) if self.lesson_mode and record.k > 0 else None
        self.last_engine_ms = record.total_ms + (self.session.prefill_ms if first else 0.0)
        return record

    # -- a loaded trace --------------------------------------------------------------------
    def load_trace(self, path: str) -> None:
        """An uploaded trace, every step shown; Play replays it from the start."""
        replay = Replay(path, shown="all", empty_message="this trace has no steps to replay",
                        end_message="the end of the trace: press Play to replay it from the start, or Reset for live mode")
        self._close_trace()
        self.mode = "trace"
        self._hold(None)
        self.session = replay
        self.settings = None
        self.trace_path = path
        self.steps = replay.steps
        self.prompt_text = str(replay.header.get("prompt", "") or "")
        self.selected_step = self.selected_pos = self.phase = None
        self.last_engine_ms = None
        self.guesses = GuessBook()

    def rewind_trace(self) -> None:
        assert isinstance(self.session, Replay)
        self.session.rewind()
        self.selected_step = self.selected_pos = None

    # -- the baseline ----------------------------------------------------------------------
    def start_baseline(self, settings: Settings, decoder: SpeculativeDecoder | None, session: Any = None) -> None:
        """The target-only run: a live session of ``decoder``, or a recorded ``session``."""
        self.baseline_session = session if session is not None else decoder.start(
            settings.prompt, max_new_tokens=settings.max_new_tokens, seed=settings.seed, chat=settings.chat
        )
        self.baseline_steps = self.baseline_session.steps
        self.baseline_key = settings.baseline_key()

    # -- housekeeping ----------------------------------------------------------------------
    def reset(self) -> None:
        """Back to an empty live playground (models stay cached); a running Play stops."""
        self._close_trace()
        self._hold(None)
        lock, epoch, directory, delay, lesson = self.lock, self.epoch + 1, self._dir, self.play_delay_s, self.lesson_mode
        PlaygroundState.__init__(self)
        self.lock, self.epoch, self._dir, self.play_delay_s, self.lesson_mode = lock, epoch, directory, delay, lesson

    def select(self, step: int | None, pos: int | None = None) -> None:
        """Select a step (None, or the latest one: follow the latest) and a position in it."""
        n = len(self.steps)
        self.selected_step = None if step is None or n == 0 or step >= n - 1 else max(0, int(step))
        self.selected_pos = pos
        self.phase = None

    def close(self) -> None:
        """Free the session's temp files (gr.State's delete_callback)."""
        self._close_trace()
        self._hold(None)
        if self._dir:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def _hold(self, decoder: SpeculativeDecoder | None) -> None:
        """Pin the live run's models in the model cache (specviz.models.pin); release the old ones."""
        old = getattr(self, "_pinned", ())
        models = () if decoder is None else (decoder.target, getattr(decoder.proposer, "model", None))
        self._pinned = tuple(m for m in models if m is not None)
        pin(*self._pinned)
        unpin(*old)

    def new_trace_path(self, settings: Settings, target_only: bool = False) -> str:
        """A fresh file in this session's temp folder for a run's trace."""
        if self._dir is None or not os.path.isdir(self._dir):
            self._dir = tempfile.mkdtemp(prefix="specviz-session-")
        slug = "".join(c if c.isalnum() or c in "-_." else "-" for c in settings.target.split("/")[-1])[:40]
        how = "target-only" if target_only else (
            prefix_of(settings.proposer) + f"-k{settings.k}")
        fd, path = tempfile.mkstemp(prefix=f"specviz-trace-{slug}-{how}-{time.strftime('%H%M%S')}-", suffix=".jsonl",
                                    dir=self._dir)
        os.close(fd)
        return path

    def _close_trace(self) -> None:
        fh, self._trace_fh = self._trace_fh, None
        if fh is not None:
            try:
                fh.close()
            except OSError:
                pass
        if self.mode == "live" and self.trace_path and self._dir and self.trace_path.startswith(self._dir):
            try:
                os.remove(self.trace_path)
            except OSError:
                pass
        self.trace_path = None


__all__ = [
    "MENU", "PROPOSERS", "RULE_LABELS", "RULES", "SCHEDULES", "TAKES_LAYERS", "TAKES_OPTIONS", "USES_DRAFT_MODEL",
    "PlaygroundState", "Settings", "parse_settings",
]
