"""A remote run's verification steps as verdict strips, for the playground's replay.

Only vLLM's ``--per-request-spec-decode-metrics detailed`` gives the per-step counts
(``per_step_accepted`` / ``per_step_drafted``); a prompt row of :class:`~specviz.remote.run.RemoteSweep`
keeps them. Each step becomes its accepted drafts, then (when a draft was rejected) the rejected
one and the drafts after it that were never checked, then the target's own token: the correction
after a rejection, the bonus when every draft was kept. The engines do not expose p, q or u, nor
the token ids per step, so a strip shows counts, not tokens: say so next to it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

__all__ = ["RemoteStep", "remote_steps", "NOT_EXPOSED"]

NOT_EXPOSED = ("replayed from the engine's per-step counts: it does not expose p, q or u, nor which tokens "
               "were drafted, so each cell is a verdict, not a token")


@dataclass(frozen=True)
class RemoteStep:
    index: int
    drafted: int
    accepted: int
    verdicts: tuple[str, ...]  # "accepted" x accepted, then "rejected", "unchecked" x ..., then "correction" or "bonus"

    @property
    def committed(self) -> int:
        return self.accepted + 1


def remote_steps(per_step_accepted: Sequence[int], per_step_drafted: Sequence[int]) -> list[RemoteStep]:
    """Per-step counts -> verdict strips. Raises ValueError when the arrays do not fit together."""
    if len(per_step_accepted) != len(per_step_drafted):
        raise ValueError(f"per_step_accepted has {len(per_step_accepted)} steps but per_step_drafted has {len(per_step_drafted)}")
    steps = []
    for i, (a, n) in enumerate(zip(per_step_accepted, per_step_drafted)):
        if not 0 <= a <= n:
            raise ValueError(f"step {i}: {a} accepted of {n} drafted is impossible")
        v = ["accepted"] * a
        if a < n:
            v += ["rejected"] + ["unchecked"] * (n - a - 1) + ["correction"]
        else:
            v.append("bonus")
        steps.append(RemoteStep(i, n, a, tuple(v)))
    return steps


def steps_of_row(row: Mapping[str, Any]) -> list[RemoteStep]:
    """The verdict strips of a remote prompt row ([] when the engine gave no per-step counts)."""
    return remote_steps(row.get("per_step_accepted") or [], row.get("per_step_drafted") or [])
