"""Speculative-decoding counters from a Prometheus ``/metrics`` text, and their difference.

vLLM (``vllm/v1/spec_decode/metrics.py``) and llama.cpp's server (``tools/server/server-task.cpp``)
export the same counter names under their own prefix:

- ``<prefix>:spec_decode_num_drafts``: verification steps that had a draft
- ``<prefix>:spec_decode_num_draft_tokens``: drafted tokens
- ``<prefix>:spec_decode_num_accepted_tokens``: accepted draft tokens (the bonus not included)
- ``<prefix>:spec_decode_num_accepted_tokens_per_pos{position="i"}``: steps whose draft i
  (0-based) was accepted

each with the ``_total`` suffix on the samples (vLLM also labels them per engine / model: the
samples of one name are summed). Parsing uses ``prometheus_client``'s text parser.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["SpecCounters", "parse_spec_counters", "engine_from_metrics"]

_NAMES = {
    "spec_decode_num_drafts": "drafts",
    "spec_decode_num_draft_tokens": "draft_tokens",
    "spec_decode_num_accepted_tokens": "accepted",
}
_PER_POS = "spec_decode_num_accepted_tokens_per_pos"
PREFIXES = {"vllm": "vllm", "llamacpp": "llama.cpp", "sglang": "sglang"}


@dataclass(frozen=True)
class SpecCounters:
    """The spec-decode counters of one scrape (or the difference of two)."""

    prefix: str | None = None  # "vllm", "llamacpp", ... (None: none found)
    drafts: float | None = None
    draft_tokens: float | None = None
    accepted: float | None = None
    per_pos: tuple[float, ...] = ()  # accepted count at draft position 0, 1, ...
    names: tuple[str, ...] = field(default=(), compare=False)  # the sample names read

    @property
    def present(self) -> bool:
        """True when the engine exports the spec-decode counters at all."""
        return self.drafts is not None or self.draft_tokens is not None

    def minus(self, before: "SpecCounters") -> "SpecCounters":
        """self - before, counter by counter (a counter missing on either side stays None)."""
        def d(a, b):
            return None if a is None or b is None else a - b

        width = max(len(self.per_pos), len(before.per_pos))
        a = list(self.per_pos) + [0.0] * (width - len(self.per_pos))
        b = list(before.per_pos) + [0.0] * (width - len(before.per_pos))
        return SpecCounters(
            self.prefix or before.prefix, d(self.drafts, before.drafts), d(self.draft_tokens, before.draft_tokens),
            d(self.accepted, before.accepted), tuple(x - y for x, y in zip(a, b)), self.names,
        )


def _split(name: str) -> tuple[str | None, str]:
    """'vllm:spec_decode_num_drafts_total' -> ('vllm', 'spec_decode_num_drafts')."""
    prefix, _, base = name.rpartition(":")
    for suffix in ("_total", "_created"):
        if base.endswith(suffix):
            return (prefix or None), base[: -len(suffix)] + ("#created" if suffix == "_created" else "")
    return (prefix or None), base


def parse_spec_counters(text: str) -> SpecCounters:
    """The spec-decode counters in a Prometheus text exposition (absent ones stay None).

    Raises ValueError when the text is not in the Prometheus format.
    """
    from prometheus_client.parser import text_string_to_metric_families

    values: dict[str, float] = {}
    per_pos: dict[int, float] = {}
    prefix = None
    names: list[str] = []
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                pre, base = _split(sample.name)
                if base in _NAMES:
                    values[_NAMES[base]] = values.get(_NAMES[base], 0.0) + float(sample.value)
                elif base == _PER_POS and "position" in sample.labels:
                    pos = int(sample.labels["position"])
                    per_pos[pos] = per_pos.get(pos, 0.0) + float(sample.value)
                else:
                    continue
                prefix = prefix or pre
                if sample.name not in names:
                    names.append(sample.name)
    except (ValueError, TypeError, IndexError) as exc:
        raise ValueError(f"not a Prometheus metrics text ({exc})") from None
    width = max(per_pos) + 1 if per_pos else 0
    return SpecCounters(
        prefix, values.get("drafts"), values.get("draft_tokens"), values.get("accepted"),
        tuple(per_pos.get(i, 0.0) for i in range(width)), tuple(names),
    )


def engine_from_metrics(text: str) -> str | None:
    """The engine whose metric prefix appears in a ``/metrics`` text ("vllm", "sglang", "llama.cpp")."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        for family in text_string_to_metric_families(text):
            pre = family.name.partition(":")[0] if ":" in family.name else ""
            if pre in PREFIXES:
                return PREFIXES[pre]
    except (ValueError, TypeError, IndexError):
        return None
    return None
