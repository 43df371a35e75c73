"""From the app's choices to a decoder: proposer menus, model pairing, decoder construction.

The UI only wires: it shows what this module offers (menu labels, draft suggestions) and hands
the user's settings back to :func:`build_decoder` / :func:`build_proposers`. Proposers are named
by :mod:`specviz.proposers.registry`, so a new registry entry shows up in the menus here too.

Model pairing (which draft a target starts with, what each menu offers) is
:mod:`specviz.app.pairing`'s; its names are re-exported here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Protocol, Sequence

import torch

from ..core.algorithm import Acceptance
from ..core.engine import SpeculativeDecoder
from ..core.proposer import Proposer
from ..core.records import Sampling
from ..prompts import PromptRow, bundled_path, read_jsonl
from ..proposers.registry import REGISTRY, auto_pick, from_spec, get_kind, syntax_list
from . import warmup
from .limits import check_proposer, check_tree_nodes, max_tree_nodes
from .pairing import (  # re-exported (__all__): the menus' model pairing lives there
    CROSS_PAIRS,
    PAIRS,
    auto_draft,
    base_name,
    bench_proposer_choices,
    default_draft,
    draft_choices,
    draft_menu,
    native_bf16,
    specs_for_target,
    target_choices,
    tokenizer_family,
)
from .warmup import STARTUP

Progress = Callable[[str], None]


# -- proposer menus ----------------------------------------------------------------------------

# The playground names a proposer kind by its spec prefix; the menu shows the registry's label.
MENU: tuple[tuple[str, str], ...] = tuple((k.label, k.prefix) for k in REGISTRY)  # (label, prefix), registry order
USES_DRAFT_MODEL: tuple[str, ...] = tuple(k.prefix for k in REGISTRY if k.needs_model)  # prefixes that need the draft box
TAKES_LAYERS: tuple[str, ...] = tuple(k.prefix for k in REGISTRY if k.arg_required and not k.needs_model)  # the layers box
LEGACY_NAMES = {"n-gram": "ngram", "hybrid": "ngram+draft", "cross": "xdraft", "early": "early-exit"}  # SPECVIZ_DEFAULT_PROPOSER


def label_of(prefix: str) -> str:
    """The menu label of a spec prefix ("draft" -> "draft model")."""
    return get_kind(prefix).label


def menu_prefix(name: str, default: str = "draft") -> str:
    """A proposer named by an env setting (a prefix, a label or a legacy short name) -> its spec
    prefix (the menu's value); unknown names fall back to ``default``."""
    key = (name or "").strip().lower()
    try:
        return get_kind(LEGACY_NAMES.get(key, key)).prefix
    except KeyError:
        return get_kind(default).prefix


def prefix_of(name: str) -> str:
    """A spec ("draft:m@int8"), a prefix or a menu label -> its spec prefix ("draft")."""
    return get_kind(name.partition(":")[0]).prefix


TAKES_OPTIONS: tuple[str, ...] = tuple(k.prefix for k in REGISTRY if k.options)  # prefixes with ",key=value" options
NGRAM_TREE_N = 3  # the n-gram length ngram-tree uses without ":N" (the registry's default)


OPTION_EXAMPLES = {"policy": "argmax", "vocab": "16384", "nodes": "8", "width": "2", "shape": "2111"}  # a value to show for each option key


def options_example(prefix: str) -> str:
    """An options text for a kind (a spec prefix or menu label: "nodes=8,width=2"), "" when it takes none."""
    return ",".join(f"{o}={OPTION_EXAMPLES.get(o, '…')}" for o in get_kind(prefix).options)


def options_hint(prefix: str) -> str | None:
    """The options box's hint for a kind (a spec prefix or menu label), or None when it takes none."""
    kind = get_kind(prefix)
    return f"{kind.syntax} · e.g. {options_example(prefix)}" if kind.options else None


def spec_for(label: str, draft: str | None = None, layers: int | None = None, options: str = "") -> str:
    """The proposer spec of a playground choice (a spec prefix or menu label): ("draft", "m@int8") -> "draft:m@int8";
    ``options`` ("nodes=8,width=2") is appended for the kinds that take options (the registry
    checks the keys and values)."""
    kind = get_kind(label)
    opts = ",".join(o.strip() for o in (options or "").split(",") if o.strip()) if kind.options else ""
    tail = f",{opts}" if opts else ""
    if kind.needs_model:
        if not draft:
            raise ValueError("choose a draft model, or switch the proposer to n-gram")
        return kind.spec(draft + tail)
    if kind.arg_required:
        if layers is None:
            raise ValueError(f"{kind.label} needs {kind.syntax}")
        return kind.spec(str(layers) + tail)
    if opts:  # "ngram-tree" with options needs its N first: "ngram-tree:3,nodes=8"
        return kind.spec(f"{NGRAM_TREE_N}{tail}")
    return kind.spec()


def check_options(label: str, draft: str | None, layers: int | None, options: str) -> None:
    """A ValueError naming a bad option key or value of a playground choice, or a model name or
    tree size this server refuses (loads nothing)."""
    check_proposer(spec_for(label, draft, layers, options))


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


def box_hint(prefix: str) -> str:
    """The hint under the box that takes a kind's argument (the registry's ``hint``; "" for none), so
    that switching proposers always replaces the last kind's hint."""
    try:
        return get_kind(prefix).hint
    except KeyError:
        return ""


def card_note(prefix: str) -> str:
    """What the speedup card adds about a kind (the registry's ``note``; "" for none)."""
    try:
        return get_kind(prefix).note
    except KeyError:
        return ""


@dataclass(frozen=True)
class SavedAdvice:
    """The advisor's saved pick for a target on this machine, and whether a chosen configuration is it."""

    target: str
    spec: str  # the pick's proposer spec ("none": nothing pays here)
    k: int
    speedup: float  # predicted (the decode loop: prefill left out)
    tau: float
    machine: str
    saved: str
    matches: bool  # the chosen proposer spec and k are the pick (or the proposer is auto)


def saved_advice(target: str, spec: str, k: int) -> SavedAdvice | None:
    """The advisor's saved pick for ``target`` (specviz advise, the Advisor panel) beside the chosen
    spec and k; None when no pick is saved for it. Reads one small file, loads nothing."""
    from ..proposers.advised import advised_pick

    try:
        pick = advised_pick(target)
    except ValueError:
        return None
    chosen = (spec or "").strip()
    matches = chosen.partition(":")[0] == "auto" or (chosen == pick.spec and int(k) == pick.k)
    return SavedAdvice(target=pick.target, spec=pick.spec, k=pick.k, speedup=pick.speedup, tau=pick.tau,
                       machine=pick.machine, saved=pick.saved, matches=matches)


# -- construction ------------------------------------------------------------------------------


class RunSettings(Protocol):
    """What :func:`build_decoder` reads (``specviz.ui.state.Settings`` has these fields)."""

    target: str
    proposer: str  # the proposer spec ("draft:m@int8"; specviz.proposers.registry.from_spec)
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

    if load is None:  # the app's loader: the engine's options read once for this run, passed to every load
        from .. import settings as engine_settings  # (``settings`` here is the run's)
        from ..models import load_model

        options = engine_settings.options()

        def load(name: str, **kw: Any):
            return load_model(name, options=options, **kw)
    STARTUP.wait([settings.target, draft_name(settings.proposer)], progress)  # the start-up preparation, said
    target = load(settings.target, progress=progress)
    check_prompts_fit(target.tokenizer, [settings.prompt], chat=settings.chat)  # hosting limit
    if target_only:
        warm_static_steps(target, None, progress)
        return SpeculativeDecoder(target, None, sampling=settings.sampling)
    pick = auto_pick(settings.proposer, target)  # "auto": the advisor's saved pick (a ValueError when none)
    if pick:
        progress(f"{pick.describe()}; k is the k you chose ({settings.k})")
    proposer = from_spec(settings.proposer, target, load=lambda name, **kw: load(name, progress=progress, **kw))
    warm_static_steps(target, proposer, progress)
    return hosted_decoder(target, proposer, k=settings.k, sampling=settings.sampling, schedule=settings.schedule,
                          acceptance=Acceptance(settings.acceptance))


def warm_static_steps(target, proposer: Proposer | None, progress: Progress | None = None) -> float:
    """Build the static decode step of the target and of the proposer's draft model now, while
    the page says so (``progress``: "Preparing NAME's fast decode step…" for a step not built yet),
    so that a run's first timed step does not pay that one-off cost (and its speedup card does
    not blame the algorithm for it). -> seconds spent."""
    draft = getattr(proposer, "model", None)  # a draft model's LoadedModel, where the proposer has one
    spent = warmup.warm_static_steps([(target.name, target)], progress)
    if isinstance(getattr(draft, "model", None), torch.nn.Module):  # its steps: one token, and the catch-up
        spent += warmup.warm_static_steps([(draft.name, draft)], progress, widths=(1, 2))  # [x_k, bonus] after a full accept
    return spent


def draft_name(spec: str) -> str | None:
    """The draft model a proposer spec names ("draft:m@int8,vocab=8" -> "m@int8"), else None."""
    prefix, _, arg = (spec or "").partition(":")
    try:
        needs = get_kind(prefix).needs_model
    except KeyError:
        return None
    return arg.split(",")[0].strip() or None if needs else None


def hosted_decoder(target, proposer: Proposer | None, **options: Any) -> SpeculativeDecoder:
    """``SpeculativeDecoder(target, proposer, **options)`` under the hosting limits: a token tree's
    nodes against SPECVIZ_MAX_TREE_NODES, before any forward (the message shows the tree syntax)
    and, as the decoder's ``max_tree_nodes``, on every step."""
    nodes = getattr(proposer, "max_nodes", None)
    if nodes is not None:
        check_tree_nodes(nodes)
    return SpeculativeDecoder(target, proposer, max_tree_nodes=max_tree_nodes(), **options)


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
    from ..proposers.registry import check_spec

    return check_spec(spec)[0] == "none"


# -- the playground's defaults and guided tours -------------------------------------------------

# Measured on a busy 2-core CPU with gemma-3-270m, greedy, chat template, 64 new tokens, three
# interleaved rounds (provisional; speedup over target-only in the same round): on the coding
# example the answer quotes the code, so prompt lookup (free drafts) commits 4.0 tokens per target
# pass: 1.66x / 1.38x / 2.64x; the int8 draft (tau 4.6, but each token costs about half a target
# step here) 2.40x / 1.03x / 1.63x; early exit (4 layers) 0.37x / 0.34x / 0.26x. The n-gram needs no
# second model (fast cold start; an @int8 draft is refused beside a GPU).
DEFAULT_PROPOSER = "ngram"
DEFAULT_K = 4
DEFAULT_CATEGORY = "coding"  # the default prompt: the first bundled example of this Spec-Bench category


def default_prompt() -> str:
    """The first example prompt of DEFAULT_CATEGORY (code under review: the answer quotes it)."""
    examples = example_prompts()
    for label, prompt in examples:
        if label.startswith(DEFAULT_CATEGORY + ":"):
            return prompt
    return examples[0][1] if examples else "Explain speculative decoding."


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


@dataclass(frozen=True)
class Defaults:
    """The playground's starting settings (SPECVIZ_DEFAULT_* overrides each)."""

    target: str
    draft: str
    proposer: str  # a spec prefix (the menu's value)
    k: int = DEFAULT_K
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int = 0
    max_new_tokens: int = 64
    prompt: str = ""

    @classmethod
    def from_env(cls) -> "Defaults":
        """SPECVIZ_DEFAULT_TARGET / _DRAFT / _PROPOSER (ngram, draft, hybrid, cross, early) / _PROMPT /
        _MAX_NEW_TOKENS / _TEMPERATURE / _K."""
        import os

        from .limits import Limits

        target = os.environ.get("SPECVIZ_DEFAULT_TARGET", "").strip() or "gemma-3-270m"
        draft = os.environ.get("SPECVIZ_DEFAULT_DRAFT", "").strip() or default_draft(target)
        if draft.endswith("@int8") and _cuda():  # int8 quantization is CPU-only: refused beside a GPU
            draft = draft[: -len("@int8")]
        proposer = menu_prefix(os.environ.get("SPECVIZ_DEFAULT_PROPOSER", DEFAULT_PROPOSER))
        prompt = os.environ.get("SPECVIZ_DEFAULT_PROMPT") or default_prompt()
        lim = Limits.from_env()
        try:
            max_new = int(os.environ.get("SPECVIZ_DEFAULT_MAX_NEW_TOKENS", "64"))
            temperature = float(os.environ.get("SPECVIZ_DEFAULT_TEMPERATURE", "0"))
            k = int(os.environ.get("SPECVIZ_DEFAULT_K", str(DEFAULT_K)))
        except ValueError:
            max_new, temperature, k = 64, 0.0, DEFAULT_K
        return cls(target=target, draft=draft, proposer=proposer, prompt=prompt, temperature=max(0.0, min(temperature, 2.0)),
                   k=max(1, min(k, lim.max_k)), max_new_tokens=max(1, min(max_new, lim.max_new_tokens)))


# The no-pay tour runs early exit and then target-only; each early-exit token costs about half a target
# step here (the layer is cheap, gemma-3-270m's 262k-row output head is not) and commits about one
# token, so 64 tokens made a ~55 s wait on a 2-core CPU and 16 tokens at k = 2 still 39-65 s on a shared
# one (benchmarks/tour_waits.py). 8 tokens at k = 2 show the same verdict: every draft rejected, slower,
# its 90% band well under 1x (docs/playground.md).
NO_PAY_TOKENS = 8


@dataclass(frozen=True)
class Tour:
    """A guided tour: the settings it sets, and the moment it walks to."""

    key: str  # "speedup" | "rejection" | "no-pay" | "tree"
    button: str  # the button's text
    moment: str  # what the page shows at the end, said in the status line


TOURS: tuple[Tour, ...] = (
    Tour("speedup", "Show me a speedup",
         "the run and a target-only run on the same prompt: the race and the card say why it is faster"),
    Tour("rejection", "Show me a rejection",
         "a step where a draft gets rejected, from its start: q, then p, then u against min(1, p/q) and the "
         "resample"),
    Tour("no-pay", "Show me a pair that does not pay",
         "a proposer whose drafts are rarely right (the target's first layer, but its whole output head): the card "
         "says what limits it"),
    Tour("tree", "Show me a tree",
         "a step whose drafted tree branches: the accepted path in green, the attention mask beside it"),
)


def tour_settings(key: str, d: Defaults, cuda: bool = False) -> dict[str, Any]:
    """The control values a tour sets (names as in the playground's controls)."""
    draft = d.draft[: -len("@int8")] if cuda and d.draft.endswith("@int8") else d.draft  # int8 is CPU-only
    base = dict(target=d.target, draft=draft, k=d.k, temperature=0.0, top_p=1.0, top_k=0, seed=0,
                max_new_tokens=d.max_new_tokens, prompt=d.prompt, schedule="constant", rule="exact", options="",
                layers=4)
    if key == "speedup":
        return {**base, "proposer": d.proposer}
    if key == "rejection":  # sampling: a draft model's drafts get rejected now and then
        return {**base, "proposer": "draft", "temperature": 1.0, "k": 4}
    if key == "no-pay":  # the target's first layer as the draft: rarely right; a short run shows it (NO_PAY_TOKENS)
        return {**base, "proposer": "early-exit", "layers": 1, "k": 2,
                "max_new_tokens": min(d.max_new_tokens, NO_PAY_TOKENS)}
    if key == "tree":
        return {**base, "proposer": "draft-tree", "options": "nodes=8,width=2", "k": 3}
    raise ValueError(f"unknown tour {key!r}; choose one of: {', '.join(t.key for t in TOURS)}")


def trace_settings(header: dict[str, Any]) -> dict[str, Any]:
    """The control values (names as in the playground's controls; the proposer a spec prefix) of
    the run a trace header describes: target, proposer, draft, layers, options (a tree's shape),
    k, schedule, rule, temperature, top-p, top-k, seed, max new tokens and prompt. Values the
    header lacks are left out."""
    out: dict[str, Any] = {}
    if isinstance(header.get("target"), str) and header["target"]:
        out["target"] = header["target"]
    spec = header.get("proposer")
    if isinstance(spec, str) and spec and spec != "target-only":
        try:
            prefix = prefix_of(spec)
        except KeyError:
            prefix = None
        if prefix is not None:
            arg = spec.partition(":")[2]
            head, _, opts = arg.partition(",")
            out["proposer"] = prefix
            if prefix in USES_DRAFT_MODEL and head:
                out["draft"] = head
            elif prefix in TAKES_LAYERS and head.isdigit():
                out["layers"] = int(head)
            elif head and "=" in head:  # no model or N first: every part is an option
                opts = arg
            out["options"] = opts if prefix in TAKES_OPTIONS else ""
    for name in ("k", "seed", "max_new_tokens"):
        if isinstance(header.get(name), int) and not isinstance(header.get(name), bool):
            out[name] = header[name]
    if isinstance(header.get("schedule"), str):
        out["schedule"] = header["schedule"].partition(":")[0]
    if header.get("acceptance") in ("exact", "typical"):
        out["rule"] = header["acceptance"]
    sampling = header.get("sampling") or {}
    if isinstance(sampling.get("temperature"), (int, float)):
        out["temperature"] = float(sampling["temperature"])
    out["top_p"] = float(sampling["top_p"]) if isinstance(sampling.get("top_p"), (int, float)) else 1.0
    out["top_k"] = int(sampling["top_k"]) if isinstance(sampling.get("top_k"), int) else 0
    if isinstance(header.get("prompt"), str) and header["prompt"]:
        out["prompt"] = header["prompt"]
    return out


__all__: Sequence[str] = [
    "CROSS_PAIRS", "Defaults", "MENU", "TAKES_OPTIONS", "Tour", "TOURS", "options_hint", "tour_settings", "PAIRS", "TAKES_LAYERS", "USES_DRAFT_MODEL", "auto_draft", "bench_proposer_choices",
    "box_hint", "card_note", "build_decoder", "build_proposers", "check_options", "default_draft", "draft_choices", "draft_menu",
    "SavedAdvice", "saved_advice", "specs_for_target", "tokenizer_family", "example_prompts", "is_target_only", "label_of", "menu_prefix",
    "prefix_of", "proposer_hint", "spec_for", "target_choices", "trace_settings", "base_name", "native_bf16",
]
