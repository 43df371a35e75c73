"""Guess first: before a draft's verdict is shown, the student bets accept or reject from its q and
p, then the page reveals u and the verdict and keeps score.

One guess is about the next draft to be judged in the shown step's phase (verify, or decide with
drafts still to judge): the exact rule's bet is "will u be <= min(1, p/q)?", greedy's (T = 0) "is
x_i the argmax of p?", typical acceptance's "is p above the threshold?". A tree is guessed along
its walked path (:func:`specviz.viz.tree.chain_view`'s drafts). The score counts guesses that
matched the verdict; under the exact rule the verdict also depends on the draw u, so the book
also counts *good bets* (accept when min(1, p/q) >= 1/2, reject below it): luck against judgement.

:class:`GuessBook` is the per-browser record (kept in the playground's state, reset with the run);
the rest are pure functions of records; no Gradio.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field

from ..core.records import DraftDecision, StepRecord
from .labels import token_label
from .numbers import Reveal, decision_line, fmt_prob, ratio_of, rule_of

__all__ = ["GUESSES", "Guess", "GuessBook", "guess_html", "guess_question", "judge_guess", "next_to_guess"]

GUESSES = ("accept", "reject")


@dataclass(frozen=True)
class Guess:
    """One judged guess: what was said, what happened, and whether it was the better bet."""

    step: int  # StepRecord.index
    position: int  # the draft's position in the (path of the) step
    said: str  # "accept" | "reject"
    verdict: str  # "accepted" | "rejected"
    good_bet: bool  # the likelier outcome (exact: min(1, p/q) >= 1/2 for accept)
    line: str  # the check that decided it, in numbers ("u = 0.170 <= 0.620 -> accepted")

    @property
    def right(self) -> bool:
        return (self.said == "accept") == (self.verdict == "accepted")


@dataclass
class GuessBook:
    """A session's guesses, at most one per (step, draft position); cleared with the run."""

    guesses: dict[tuple[int, int], Guess] = field(default_factory=dict)
    last: Guess | None = None  # the latest guess, told once under the question

    @property
    def total(self) -> int:
        return len(self.guesses)

    @property
    def right(self) -> int:
        return sum(g.right for g in self.guesses.values())

    @property
    def good_bets(self) -> int:
        return sum(g.good_bet for g in self.guesses.values())

    def add(self, guess: Guess) -> Guess:
        """Keep ``guess`` unless that draft was guessed already (the first guess counts); the kept one."""
        self.last = self.guesses.setdefault((guess.step, guess.position), guess)
        return self.last

    def of_step(self, step: int) -> list[Guess]:
        return [g for (s, _), g in sorted(self.guesses.items()) if s == step]


def next_to_guess(record: StepRecord | None, shown: Reveal | None) -> DraftDecision | None:
    """The draft whose verdict comes next in the shown phase (p known, verdict not yet), else None.
    ``record``: a chain, or a tree step as its walked path (chain_view)."""
    if record is None or shown is None or not shown.p:
        return None
    judged = [d for d in record.drafts if d.verdict != "discarded"]
    return judged[shown.judged] if shown.judged < len(judged) else None


def _good_bet(record: StepRecord, d: DraftDecision, said: str) -> bool:
    """Whether ``said`` was the likelier outcome before the draw (greedy and typical have no draw)."""
    if rule_of(record) == "exact":
        likely = "accept" if ratio_of(d) >= 0.5 else "reject"
    else:
        likely = "accept" if d.accepted else "reject"
    return said == likely


def judge_guess(record: StepRecord, d: DraftDecision, said: str) -> Guess:
    """The guess ``said`` ("accept" | "reject") on draft ``d`` of ``record``, judged."""
    if said not in GUESSES:
        raise ValueError(f"a guess is one of {', '.join(GUESSES)}; got {said!r}")
    if d.verdict not in ("accepted", "rejected"):
        raise ValueError(f"draft {d.position + 1} of step {record.index + 1} was never judged; nothing to guess")
    return Guess(record.index, d.position, said, d.verdict, _good_bet(record, d, said), decision_line(record, d))


def guess_question(record: StepRecord, d: DraftDecision) -> str:
    """What to bet on for draft ``d``, from the numbers known before its verdict."""
    what = f"Draft {d.position + 1} {token_label(d.text)!r}"
    if record.tree:
        what = f"Path node {d.position + 1} (depth {d.position + 1}) {token_label(d.text)!r}"
    rule = rule_of(record)
    if rule == "greedy":
        return (f"{what}: p = {fmt_prob(d.p)}. Greedy (T = 0) keeps it only if it is the argmax of p (its row charts "
                f"p's top 10 at position {d.position + 1}). Is it?")
    if rule == "typical":
        thr = f" against the threshold {fmt_prob(d.threshold)}" if d.threshold is not None else ""
        return f"{what}: p = {fmt_prob(d.p)}{thr}. Typical acceptance (LOSSY) keeps it if p is above it. Will it?"
    pq = d.p / d.q if d.q > 0 else float("inf")
    return (f"{what}: q = {fmt_prob(d.q)}, p = {fmt_prob(d.p)}, p/q = {fmt_prob(pq)}. It is kept if a uniform draw "
            "u is at most min(1, p/q). Accept or reject?")


def verdict_words(g: Guess) -> str:
    """One sentence on a judged guess: "You said accept: right. u = 0.170 <= 0.620 -> accepted."."""
    luck = "" if g.right or not g.good_bet else " (the better bet; the draw went the other way)"
    return f"You said {g.said}: {'right' if g.right else 'wrong'}{luck}. {g.line}."


def _score(book: GuessBook) -> str:
    if not book.total:
        return "no guesses yet"
    return f"score {book.right} of {book.total} right · {book.good_bets} of {book.total} good bets"


def guess_html(record: StepRecord | None, shown: Reveal | None, book: GuessBook, lesson: bool = False) -> str:
    """The guess panel: the latest judged guess (on the shown step), the question on the next draft
    (when one can be guessed), this step's guesses and the session's score. ``data-open`` is 1 while a guess
    can be made, ``data-right`` / ``data-total`` carry the score. ``lesson``: lesson mode is on (the hint
    at commit then points to the next step, not to the switch)."""
    d = next_to_guess(record, shown)
    parts = []
    last = book.last if record is not None and book.last is not None and book.last.step == record.index else None
    if last is not None:
        cls = "sv-guess-right" if last.right else "sv-guess-wrong"
        parts.append(f'<div class="sv-guess-last {cls}">{html.escape(verdict_words(last))}</div>')
    if d is not None:
        parts.append(f'<div class="sv-guess-q">{html.escape(guess_question(record, d))}</div>')
    elif record is None:
        parts.append('<div class="sv-muted">Run a step, then guess each draft\'s verdict before it is revealed.</div>')
    elif shown is None or not shown.p:
        why = ("press phase ▶: the guess needs the target's p" if shown is not None
               else "phase ▶ opens the next step in its draft phase, or step back with ◀ phase" if lesson
               else "step back with ◀ phase (or turn on lesson mode)")
        parts.append(f'<div class="sv-muted">Guess first: before a verdict is shown, bet accept or reject from q and '
                     f'p ({why}).</div>')
    mine = book.of_step(record.index) if record is not None else []
    if mine:
        marks = " ".join(f'<span class="sv-guess-mark {"sv-guess-right" if g.right else "sv-guess-wrong"}">'
                         f'{g.position + 1}: {g.said} {"✓" if g.right else "✗"}</span>' for g in mine)
        parts.append(f'<div class="sv-guess-step">this step: {marks}</div>')
    parts.append(f'<div class="sv-guess-score">{html.escape(_score(book))}</div>')
    return (f'<div class="sv-guess" data-open="{int(d is not None)}" data-right="{book.right}" '
            f'data-total="{book.total}">{"".join(parts)}</div>')
