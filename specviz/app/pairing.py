"""Model pairing, the one place for it: which draft a target starts with and which models each
menu offers. A built-in target's natural draft is its own int8 copy; for the re-tokenizing
proposer it is the other family's model; hub targets (when the hub answers) pair with
:data:`specviz.models.HUB_PAIRS`. Names only: nothing here loads a model (a tokenizer's family is
known from the names)."""

from __future__ import annotations

from typing import Sequence

from ..proposers.registry import REGISTRY, get_kind

# Same-tokenizer pairs among the built-ins, and the other-tokenizer pairs for ``xdraft``.
PAIRS = {"gemma-3-270m": "gemma-3-270m@int8", "smollm2-135m": "smollm2-135m@int8"}
CROSS_PAIRS = {"gemma-3-270m": "smollm2-135m", "smollm2-135m": "gemma-3-270m@int8"}


def _hub_pairs() -> dict[str, str]:
    from ..models import hub_pairs

    return hub_pairs()


BF16 = "@bf16"  # a model name's bf16 suffix (specviz.models): the same model, the same tokenizer


def base_name(name: str) -> str:
    """A model name without its @bf16 suffix ("gemma-3-270m@bf16" -> "gemma-3-270m")."""
    return name[: -len(BF16)] if name.endswith(BF16) else name


def native_bf16() -> bool:
    """Whether this machine runs bf16 natively on its CPU (AVX512-BF16 or AMX), with no GPU: then
    the target menus offer each built-in in bf16 too (on a GPU, "auto" loads bf16 anyway)."""
    import torch

    try:
        return not torch.cuda.is_available() and bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def default_draft(target: str) -> str:
    """The draft a target starts with: its pair, else its own int8 copy (a bf16 target's: its base's)."""
    from ..models import HUB_PAIRS

    target = base_name(target)
    return {**PAIRS, **HUB_PAIRS}.get(target, f"{target}@int8")


def auto_draft(target: str, proposer: str, current: str) -> str | None:
    """The draft to switch to when the target or proposer (a spec prefix) changes, unless the user typed one."""
    pairs = {**PAIRS, **_hub_pairs()}
    auto = set(pairs.values()) | set(CROSS_PAIRS.values())
    if current and current not in auto:
        return None
    table = CROSS_PAIRS if get_kind(proposer.partition(":")[0]).prefix == "xdraft" else pairs
    return table.get(base_name(target))


def target_choices(default: str) -> list[str]:
    """The default, the built-ins (and each in bf16 where the CPU runs bf16 natively), and the hub
    pairs' targets when the hub answers (a Space)."""
    from ..models import list_models

    names = [m["name"] for m in list_models()]
    bf16 = [f"{n}{BF16}" for n in names] if native_bf16() else []
    return list(dict.fromkeys([default, *names, *bf16, *_hub_pairs()]))


def draft_choices(default: str) -> list[str]:
    from ..models import list_models

    names = [m["name"] for m in list_models()]
    return list(dict.fromkeys([default, *(PAIRS.get(n, f"{n}@int8") for n in names), *names, *_hub_pairs().values()]))


def tokenizer_family(name: str, known: tuple[set[str], dict[str, str]] | None = None) -> str | None:
    """Which tokenizer a model name has, where that is known without loading it: a built-in and its
    @int8 copy share their base name's; a hub pair's target and draft share the draft's. None: unknown
    (a typed hub id or a local directory). ``known``: :func:`_known_families`, when asking often."""
    builtins, pairs = known or _known_families()
    base = base_name((name or "").strip())
    base = base[: -len("@int8")] if base.endswith("@int8") else base
    if base in builtins:
        return base
    if base in pairs:
        return pairs[base]
    return base if base in pairs.values() else None


def _known_families() -> tuple[set[str], dict[str, str]]:
    from ..models import HUB_PAIRS, list_models

    return {m["name"] for m in list_models()}, {**HUB_PAIRS, **_hub_pairs()}


def draft_menu(target: str, prefix: str, default: str) -> list[str]:
    """The draft menu for a target and proposer kind: a kind whose draft must share the target's
    tokenizer (the registry's ``tokenizer="same"``) is offered only drafts known to share it (the
    ones whose tokenizer is unknown stay); a re-tokenizing kind ("any") is offered every draft,
    the other tokenizers first. An unknown target keeps the whole menu."""
    choices = draft_choices(default)
    try:
        need = get_kind(prefix).tokenizer
    except KeyError:
        need = ""
    known = _known_families()
    fam = tokenizer_family(target, known)
    if fam is None or not need:
        return choices
    other = [c for c in choices if tokenizer_family(c, known) not in (None, fam)]
    if need == "any":
        return list(dict.fromkeys([*other, *choices]))
    return [c for c in choices if c not in other]


def specs_for_target(target: str, specs: Sequence[str]) -> list[str]:
    """The specs whose draft can serve ``target`` (for a menu): a spec whose kind needs the target's
    tokenizer (``tokenizer="same"``) and names a draft known to have another one is left out; specs
    without a draft model, re-tokenizing ones and unknown tokenizers stay."""
    known = _known_families()
    fam = tokenizer_family(target, known)
    out = []
    for spec in specs:
        prefix, _, arg = spec.partition(":")
        try:
            kind = get_kind(prefix)
        except KeyError:
            out.append(spec)
            continue
        other = tokenizer_family(arg.partition(",")[0], known) if kind.tokenizer == "same" and arg else None
        if fam is None or other is None or other == fam:
            out.append(spec)
    return out


def bench_proposer_choices(defaults: Sequence[str], targets: Sequence[str]) -> list[str]:
    """The Benchmark tab's proposer menu: the defaults, then every kind for the listed targets."""
    from ..models import HUB_PAIRS

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
