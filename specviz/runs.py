"""From the app's choices to a decoder: proposer menus, model pairing, decoder construction.

The UI only wires: it shows what this module offers (menu labels, draft suggestions) and hands
the user's settings back to :func:`build_decoder` / :func:`build_proposers`. Proposers are named
by :mod:`specviz.proposers.registry`, so a new registry entry shows up in the menus here too.

Model pairing (the one place for it): a built-in target's natural draft is its own int8 copy;
for the re-tokenizing proposer it is the other family's model; hub targets (when the hub answers)
pair with :data:`specviz.models.HUB_PAIRS`.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Protocol, Sequence

from .algorithm import Acceptance
from .engine import SpeculativeDecoder
from .proposers.base import Proposer
from .proposers.registry import REGISTRY, from_spec, get_kind, syntax_list
from .prompts import PromptRow, bundled_path, read_jsonl
from .records import Sampling

Progress = Callable[[str], None]

# Same-tokenizer pairs among the built-ins, and the other-tokenizer pairs for ``xdraft``.
PAIRS = {"gemma-3-270m": "gemma-3-270m@int8", "smollm2-135m": "smollm2-135m@int8"}
CROSS_PAIRS = {"gemma-3-270m": "smollm2-135m", "smollm2-135m": "gemma-3-270m@int8"}

# -- proposer menus ----------------------------------------------------------------------------

MENU: tuple[str, ...] = tuple(k.label for k in REGISTRY)  # the playground's proposer menu, registry order
USES_DRAFT_MODEL: tuple[str, ...] = tuple(k.label for k in REGISTRY if k.needs_model)  # labels that need the draft box
TAKES_LAYERS: tuple[str, ...] = tuple(k.label for k in REGISTRY if k.arg_required and not k.needs_model)  # the layers box
LEGACY_NAMES = {"n-gram": "ngram", "hybrid": "ngram+draft", "cross": "xdraft", "early": "early-exit"}  # SPECVIZ_DEFAULT_PROPOSER


def label_of(prefix: str) -> str:
    """The menu label of a spec prefix ("draft" -> "draft model")."""
    return get_kind(prefix).label


def menu_label(name: str, default: str = "draft") -> str:
    """A proposer named by an env setting (a prefix, a label or a legacy short name) -> its menu
    label; unknown names fall back to ``default``."""
    key = (name or "").strip().lower()
    try:
        return get_kind(LEGACY_NAMES.get(key, key)).label
    except KeyError:
        return get_kind(default).label


def prefix_of(label: str) -> str:
    """A menu label (or prefix) -> its spec prefix, used in trace file names."""
    return get_kind(label).prefix


def spec_for(label: str, draft: str | None = None, layers: int | None = None) -> str:
    """The proposer spec of a playground choice: ("draft model", "m@int8") -> "draft:m@int8"."""
    kind = get_kind(label)
    if kind.needs_model:
        if not draft:
            raise ValueError("choose a draft model, or switch the proposer to n-gram")
        return kind.spec(draft)
    if kind.arg_required:
        if layers is None:
            raise ValueError(f"{kind.label} needs {kind.syntax}")
        return kind.spec(str(layers))
    return kind.spec()


def proposer_hint() -> str:
    """The Benchmark tab's hint under its proposer box."""
    return syntax_list(include_none=False).replace("NAME", "MODEL")


# -- example prompts ---------------------------------------------------------------------------

EXAMPLE_IDS = (134, 124, 82, 136, 164, 104, 144, 322, 114, 92)  # bundled Spec-Bench question ids


def example_prompts() -> list[tuple[str, str]]:
    """(label, prompt) pairs from the bundled Spec-Bench prompts, extraction-style ones first."""
    try:
        rows = read_jsonl(bundled_path())
    except (OSError, ValueError):
        return []
    by_id: dict[str, PromptRow] = {r.id: r for r in rows}
    picked = [by_id[str(i)] for i in EXAMPLE_IDS if str(i) in by_id] or rows[:8]
    out = []
    for r in picked:
        first = " ".join(r.prompt.split())
        out.append((f"{r.category}: {first[:70]}{'…' if len(first) > 70 else ''}", r.prompt))
    return out


# -- model pairing -----------------------------------------------------------------------------


def _hub_pairs() -> dict[str, str]:
    from .models import hub_pairs

    return hub_pairs()


def default_draft(target: str) -> str:
    """The draft a target starts with: its pair, else its own int8 copy."""
    from .models import HUB_PAIRS

    return {**PAIRS, **HUB_PAIRS}.get(target, f"{target}@int8")


def auto_draft(target: str, proposer: str, current: str) -> str | None:
    """The draft to switch to when the target or proposer (a label) changes, unless the user typed one."""
    pairs = {**PAIRS, **_hub_pairs()}
    auto = set(pairs.values()) | set(CROSS_PAIRS.values())
    if current and current not in auto:
        return None
    table = CROSS_PAIRS if prefix_of(proposer) == "xdraft" else pairs
    return table.get(target)


def target_choices(default: str) -> list[str]:
    """The default, the built-ins, and the hub pairs' targets when the hub answers (a Space)."""
    from .models import list_models

    names = [m["name"] for m in list_models()]
    return list(dict.fromkeys([default, *names, *_hub_pairs()]))


def draft_choices(default: str) -> list[str]:
    from .models import list_models

    names = [m["name"] for m in list_models()]
    return list(dict.fromkeys([default, *(PAIRS.get(n, f"{n}@int8") for n in names), *names, *_hub_pairs().values()]))


def bench_proposer_choices(defaults: Sequence[str], targets: Sequence[str]) -> list[str]:
    """The Benchmark tab's proposer menu: the defaults, then every kind for the listed targets."""
    from .models import HUB_PAIRS

    extra = ["ngram", "ngram:2", "ngram:4"]
    for kind in REGISTRY:
        if kind.prefix == "ngram":
            continue
        if kind.needs_model:
            drafts = [HUB_PAIRS[t] for t in targets if t in HUB_PAIRS]
            if kind.prefix == "xdraft":
                drafts = [CROSS_PAIRS[t] for t in targets if t in CROSS_PAIRS]
            else:
                drafts += [f"{t}@int8" for t in targets if "@" not in t and t not in HUB_PAIRS]
                if kind.prefix == "draft":
                    drafts += [t for t in targets if t not in HUB_PAIRS]
            extra += [kind.spec(d) for d in drafts]
        elif kind.arg_required:
            extra.append(kind.example or kind.spec("4"))
        else:
            extra.append(kind.spec())
    return list(dict.fromkeys([*defaults, *extra]))


# -- construction ------------------------------------------------------------------------------


class RunSettings(Protocol):
    """What :func:`build_decoder` reads (``specviz.ui.state.Settings`` has these fields)."""

    target: str
    proposer: str  # a menu label
    draft: str | None
    layers: int | None
    k: int
    schedule: str
    acceptance: str
    prompt: str
    chat: bool

    @property
    def sampling(self) -> Sampling: ...


def build_decoder(settings: RunSettings, progress: Progress, *, target_only: bool = False,
                  load: Callable[..., Any] | None = None) -> SpeculativeDecoder:
    """Load the models (cached, through the hosting limits) and make the decoder; ValueError for
    anything the user can fix."""
    from .limits import check_prompts_fit

    if load is None:
        from .models import load_model as load
    target = load(settings.target, progress=progress)
    check_prompts_fit(target.tokenizer, [settings.prompt], chat=settings.chat)  # hosting limit
    if target_only:
        return SpeculativeDecoder(target, None, sampling=settings.sampling)
    spec = spec_for(settings.proposer, settings.draft, settings.layers)
    proposer = from_spec(spec, target, load=lambda name, **kw: load(name, progress=progress, **kw))
    return SpeculativeDecoder(target, proposer, k=settings.k, sampling=settings.sampling, schedule=settings.schedule,
                              acceptance=Acceptance(settings.acceptance))


def build_proposers(specs: Iterable[str], target, load: Callable[..., Any]) -> dict[str, Proposer]:
    """Benchmark specs -> {name: proposer} (target-only specs dropped: it is always measured)."""
    out: dict[str, Proposer] = {}
    for spec in specs:
        p = from_spec(spec, target, load=load)
        if p is not None:
            out[p.name] = p
    return out


def is_target_only(spec: str) -> bool:
    """True for 'none' / 'target-only' (ValueError for a bad spec)."""
    from .proposers.registry import check_spec

    return check_spec(spec)[0] == "none"


__all__: Sequence[str] = [
    "CROSS_PAIRS", "MENU", "PAIRS", "TAKES_LAYERS", "USES_DRAFT_MODEL", "auto_draft", "bench_proposer_choices",
    "build_decoder", "build_proposers", "default_draft", "draft_choices", "example_prompts", "is_target_only", "label_of", "menu_label",
    "prefix_of", "proposer_hint", "spec_for", "target_choices",
]
