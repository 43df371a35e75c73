"""The advisor's pick, saved and read back: what the proposer spec ``auto`` runs.

``specviz advise`` (and the Advisor panel) rank every configuration on this machine; the first
of the ranking, its proposer spec (a tree with its shape spelled out: ``ngram-tree:3,shape=1111``)
and its k, is saved per target under ``<models cache dir>/advisor/picks.json``, beside the tree
shapes that ``shape=auto`` reads (:func:`specviz.proposers.ngram_tree.advised_shapes_path`).
When the advisor found that nothing beats target-only decoding, the pick is ``none``.

``auto`` without a saved pick for the target is a ValueError in one sentence naming the
``specviz advise`` command to run: no silent fallback, since a guessed proposer could be slower
than the target alone on this machine. The cache directory belongs to the machine
(``SPECVIZ_CACHE_DIR`` moves it), so a pick follows the machine it was measured on.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

__all__ = ["AdvisedPick", "advised_picks_path", "advised_pick", "save_pick", "no_pick_message"]


@dataclass(frozen=True)
class AdvisedPick:
    """The advisor's first choice for one target on this machine."""

    target: str
    spec: str  # the proposer spec that runs it ("none": nothing pays here)
    k: int  # tokens drafted per step (a tree: its depth)
    speedup: float  # the predicted decode-loop speedup (1.0 for "none")
    tau: float = 1.0  # predicted tokens per step
    machine: str = ""  # where the costs were measured (the cost model's words)
    saved: str = ""  # when (local time, ISO 8601)

    @property
    def pays(self) -> bool:
        return self.spec != "none"

    def describe(self) -> str:
        """One line for a run's header: what auto chose, from what, and when."""
        where = f" on {self.machine}" if self.machine else ""
        when = f", saved {self.saved}" if self.saved else ""
        if not self.pays:
            return (f"auto: the advisor found nothing that beats target-only decoding for {self.target}{where}{when}, "
                    "so this runs the target alone")
        return (f"auto: the advisor's pick for {self.target}{where} is {self.spec} k={self.k}, predicted "
                f"{self.speedup:.2f}x (tau {self.tau:.2f}){when}")


def advised_picks_path() -> Path:
    """Where the picks live: ``<models cache dir>/advisor/picks.json``."""
    from ..models import cache_dir

    return cache_dir() / "advisor" / "picks.json"


def no_pick_message(target: str) -> str:
    """The one sentence ``auto`` raises when no pick is saved for ``target``."""
    return (f"proposer auto: no advice is saved for {target} on this machine yet; run `specviz advise --target {target}` "
            "(or the Benchmark tab's Advisor) first, or name a proposer")


def _read(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def advised_pick(target: str, path: Path | None = None) -> AdvisedPick:
    """The pick saved for ``target`` (its name as loaded); ValueError (:func:`no_pick_message`) if none."""
    entry = _read(path or advised_picks_path()).get(str(target))
    try:
        pick = AdvisedPick(**{**entry, "target": str(target)})
        if not isinstance(pick.spec, str) or not pick.spec or int(pick.k) < 1:
            raise ValueError
    except (TypeError, ValueError):  # absent, or written by something else
        raise ValueError(no_pick_message(str(target))) from None
    return pick


def save_pick(pick: AdvisedPick, path: Path | None = None) -> Path:
    """Record ``pick`` for its target (the others' picks kept); -> the file written."""
    path = Path(path or advised_picks_path())
    data = _read(path)
    entry = asdict(pick)
    entry["saved"] = entry["saved"] or time.strftime("%Y-%m-%dT%H:%M:%S")
    data[pick.target] = {k: v for k, v in entry.items() if k != "target"}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1), encoding="utf-8")
    return path
