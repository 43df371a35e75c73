"""The one place that names proposers: a spec string -> a Proposer.

A spec is ``PREFIX`` or ``PREFIX:ARG[,key=value...]``: the prefix picks a :class:`ProposerKind`,
ARG is its argument (an n-gram size, a model name such as ``smollm2-135m@int8``, a layer count)
and the comma-separated ``key=value`` options after it tune the proposer (each kind lists the
keys it accepts in ``options``; any other key is a ValueError). A kind without an argument takes
options as ``PREFIX:,key=value``. Examples::

    ngram   ngram:4   draft:smollm2-135m@int8   ngram+draft:gemma-3-270m@int8   early-exit:4
    xdraft:smollm2-135m   none

Everything that shows or checks proposers reads :data:`REGISTRY`: the CLI help, the app's
menus and hints, trace file names, the hosting limits and the README table
(:func:`markdown_table`). Adding a proposer = its class in its own file under
``specviz/proposers/`` + one :class:`ProposerKind` entry below (a builder, and ``check_arg`` when
the argument is not a model name), e.g.::

    def _build_draft_tree(arg, target, load):          # arg: "NAME@int8,nodes=16,width=3"
        from .draft_tree import DraftTree
        name, opts = split_options(arg, ("nodes", "width"))
        draft = _load_draft(name, target, load)
        return DraftTree(draft, nodes=int_option(opts, "nodes", 16, hi=64), width=int_option(opts, "width", 3))

    ProposerKind("draft-tree", "draft model, token tree", "draft-tree:NAME[@int8][,nodes=N,width=W]",
                 "a draft model's token tree ...", needs_model=True, hf_counterpart=False,
                 build=_build_draft_tree, arg_required=True, options=("nodes", "width"),
                 example="draft-tree:smollm2-135m")

The playground's menu, the Benchmark tab's menu, the CLI help, the limits and the README table
(regenerate it: a test compares) then offer the new kind: ``needs_model`` kinds use the draft
box, other kinds with ``arg_required`` the layers box, the rest the bare prefix. ``hint`` is that
box's hint in the app, ``tokenizer`` ("same" or "any") which drafts its menu offers, and ``note``
a sentence the speedup card adds for the kind.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ..core.proposer import Proposer

Loader = Callable[..., Any]  # specviz.models.load_model(name, device=..., dtype=...) -> LoadedModel
Builder = Callable[[str | None, Any, Loader], Proposer]  # (argument, target, load) -> Proposer


@dataclass(frozen=True)
class ProposerKind:
    """One kind of proposer, as the user names it."""

    prefix: str  # the spec's prefix: "ngram", "draft", ...
    label: str  # the human label in menus: "draft model"
    syntax: str  # how to write the spec: "draft:NAME[@int8]"
    help: str  # one line for help texts and the README table
    needs_model: bool  # the argument is a model name (loaded; checked by the hosting limits)
    hf_counterpart: bool  # transformers' generate() has the same method (bench --compare-hf)
    build: Builder | None  # (argument, target, load) -> Proposer; None only for target-only
    arg_required: bool = False  # the spec must have ":ARG"
    check_arg: Callable[[str, str], str] | None = None  # (spec, arg) -> normalised arg, ValueError if bad
    options: tuple[str, ...] = ()  # the option keys ARG may carry after commas (",key=value")
    aliases: tuple[str, ...] = ()  # other prefixes that mean the same ("target-only")
    example: str = ""  # a spec to show in messages and help; defaults to syntax
    validate: Callable[[str], Any] | None = None  # checks the whole argument (options' values too), loading nothing
    tree_nodes: Callable[[str], int] | None = None  # a token tree's nodes per step, read from the argument
    hint: str = ""  # the app's hint under the box that takes the argument (the draft model or the layers)
    tokenizer: str = ""  # a draft model's tokenizer: "same" (must share the target's) or "any" (re-tokenized)
    note: str = ""  # what the app's speedup card adds about this kind

    def spec(self, arg: str | None = None) -> str:
        """The spec of this kind with ``arg`` (None: the bare prefix)."""
        return self.prefix if arg is None else f"{self.prefix}:{arg}"


# -- options ---------------------------------------------------------------------------------


def split_options(arg: str, allowed: tuple[str, ...] = (), spec: str | None = None) -> tuple[str, dict[str, str]]:
    """'NAME@int8,nodes=16,width=3' -> ('NAME@int8', {'nodes': '16', 'width': '3'}).

    Keys are case-insensitive and must be in ``allowed``; values stay text (the builder converts
    them). Raises ValueError naming the unknown key and the accepted ones.
    """
    head, *rest = arg.split(",")
    opts: dict[str, str] = {}
    where = f"proposer {spec!r}" if spec else f"proposer argument {arg!r}"
    for item in rest:
        key, eq, value = item.partition("=")
        key, value = key.strip().lower(), value.strip()
        if not eq or not key or not value:
            raise ValueError(f"bad option {item.strip()!r} in {where}: write options as ,key=value")
        if key not in allowed:
            accepted = ", ".join(allowed) if allowed else "none"
            raise ValueError(f"unknown option {key!r} in {where}; accepted options: {accepted}")
        if key in opts:
            raise ValueError(f"option {key!r} given twice in {where}")
        opts[key] = value
    return head.strip(), opts


def int_option(opts: dict[str, str], key: str, default: int, lo: int = 1, hi: int | None = None) -> int:
    """A whole-number option from :func:`split_options`'s dict, with a ValueError naming the range."""
    if key not in opts:
        return default
    text = opts[key]
    if not text.isdigit() or int(text) < lo or (hi is not None and int(text) > hi):
        rng = f"from {lo} to {hi}" if hi is not None else f">= {lo}"
        raise ValueError(f"option {key} must be a whole number {rng}, got {text!r}")
    return int(text)


# -- the built-in kinds ----------------------------------------------------------------------


def _whole(what: str) -> Callable[[str, str], str]:
    def check(spec: str, arg: str) -> str:
        if not arg.isdigit() or int(arg) < 1:
            raise ValueError(f"bad proposer {spec!r}: {what}, got {arg!r}")
        return str(int(arg))

    return check


def _load_draft(arg: str, target, load: Loader | None):
    """Load a same-tokenizer draft on the target's device and dtype (int8: its own)."""
    if load is None:
        from ..models import load_model as load
    quantized = arg.lower().endswith("@int8")
    dtype = "auto" if quantized else target.dtype
    return load(arg, device=target.device, dtype=dtype)  # @int8 beside a GPU target: a clear ValueError


def _build_ngram(arg, target, load):
    from .ngram import NGram

    return NGram() if arg is None else NGram(max_ngram=int(arg), name=f"ngram:{arg}")


DRAFT_OPTIONS = ("policy", "vocab")


def _build_draft(arg, target, load):
    from .draft_model import DraftModel

    name, opts = split_options(arg, DRAFT_OPTIONS)
    policy = opts.get("policy", "sampled").lower()
    draft = _load_draft(name, target, load)
    if "vocab" in opts:
        from .vocab import with_vocab_subset

        draft = with_vocab_subset(draft, target, int_option(opts, "vocab", 0, lo=1))  # named NAME,vocab=N
    suffix = "" if policy == "sampled" else f",policy={policy}"
    proposer = DraftModel(draft, name=f"draft:{draft.name}{suffix}", policy=policy)
    proposer.init_state(target)  # raises ValueError when the tokenizers differ
    return proposer


def _build_hybrid(arg, target, load):
    from .hybrid import NGramOrDraft

    draft = _build_draft(arg, target, load)  # named draft:NAME[,vocab=N][,policy=argmax]
    return NGramOrDraft(draft, name=f"ngram+{draft.name}")


def _check_draft_options(prefix: str) -> Callable[[str], None]:
    """A validator of ``PREFIX:NAME[,policy=...][,vocab=N]`` (the draft model's options)."""

    def check(arg: str) -> None:
        from .draft_model import DRAFT_POLICIES

        _, opts = split_options(arg, DRAFT_OPTIONS)
        if "vocab" in opts:
            int_option(opts, "vocab", 0, lo=1)
        policy = opts.get("policy", "sampled").lower()
        if policy not in DRAFT_POLICIES:
            raise ValueError(f"bad proposer '{prefix}:{arg}': policy must be one of {', '.join(DRAFT_POLICIES)}, got "
                             f"{policy!r}; e.g. {prefix}:smollm2-135m,policy=argmax")

    return check


def _ngram_tree_nodes(arg: str) -> int:
    from .ngram_tree import parse_ngram_tree

    return parse_ngram_tree(arg)["nodes"]


def _draft_tree_nodes(arg: str) -> int:
    from .draft_tree import parse_draft_tree

    return parse_draft_tree(arg)[1]["nodes"]


def shape_base(spec: str) -> str:
    """A token-tree spec without its ``shape=`` option, normalised: what ``shape=auto`` looks its
    advised shape up by ("ngram-tree:3", "draft-tree:NAME[,vocab=V]")."""
    from .draft_tree import parse_draft_tree
    from .ngram_tree import parse_ngram_tree

    prefix, arg = check_spec(spec)
    if prefix == "ngram-tree":
        return f"ngram-tree:{parse_ngram_tree(arg)['max_ngram']}"
    if prefix == "draft-tree":
        name, opts = parse_draft_tree(arg)
        return f"draft-tree:{name}" + (f",vocab={opts['vocab']}" if "vocab" in opts else "")
    raise ValueError(f"only token trees (ngram-tree, draft-tree) take a shape, not {spec!r}")


def _auto_shape(spec: str, target, nodes: int) -> str:
    from .ngram_tree import advised_shape, cap_shape

    return cap_shape(advised_shape(str(target.name), shape_base(spec)), nodes)


def _build_ngram_tree(arg, target, load):
    from .ngram_tree import NGramTree, parse_ngram_tree

    opts = parse_ngram_tree(arg)
    label = arg
    if opts.get("shape") == "auto":  # the shape specviz advise chose here
        opts["shape"] = _auto_shape(f"ngram-tree:{arg}", target, opts["nodes"])
        label = f"{opts['max_ngram']},shape={opts['shape']}"
    return NGramTree(**opts, name="ngram-tree" + (f":{label}" if label else ""))


def _build_draft_tree(arg, target, load):
    from .draft_tree import DraftTree, parse_draft_tree

    name, opts = parse_draft_tree(arg)
    if opts.get("shape") == "auto":  # the shape specviz advise chose here
        opts["shape"] = _auto_shape(f"draft-tree:{arg}", target, opts["nodes"])
    draft = _load_draft(name, target, load)
    if "vocab" in opts:
        from .vocab import with_vocab_subset

        draft = with_vocab_subset(draft, target, opts.pop("vocab"))  # named NAME,vocab=N
    shown = {k: v for k, v in opts.items() if not ("shape" in opts and k == "nodes")}
    proposer = DraftTree(draft, **opts, name=f"draft-tree:{draft.name}" + "".join(f",{k}={v}" for k, v in shown.items()))
    proposer.init_state(target)  # raises ValueError when the tokenizers differ or the model cannot take a tree mask
    return proposer


def _build_early_exit(arg, target, load):
    from .early_exit import EarlyExit

    return EarlyExit(target, int(arg))


def _build_xdraft(arg, target, load):
    from .cross_tokenizer import CrossTokenizerDraft

    if load is None:
        from ..models import load_model as load
    draft = load(arg, device=target.device)
    return CrossTokenizerDraft(draft, name=f"xdraft:{draft.name}")


def _no_argument(spec: str, arg: str) -> str:
    raise ValueError(f"bad proposer {spec!r}: auto takes no argument; it runs the pick `specviz advise` saved for the target")


def _build_auto(arg, target, load):
    pick = auto_pick("auto", target)
    if check_spec(pick.spec)[0] in ("none", "auto"):  # the advisor found that nothing pays: target-only
        return None
    return from_spec(pick.spec, target, load)


def auto_pick(spec: str, target):
    """The advisor's saved pick (``proposers.advised.AdvisedPick``: spec, k, predicted speedup)
    when ``spec`` is ``auto``, else None; ValueError in one sentence when no pick is saved for
    ``target`` (a LoadedModel or its name)."""
    if check_spec(spec)[0] != "auto":
        return None
    from .advised import advised_pick

    return advised_pick(str(getattr(target, "name", target)))


NONE = ProposerKind(
    "none", "target only", "none", "target-only decoding (no proposer)", needs_model=False, hf_counterpart=True,
    build=None, aliases=("target-only",),
)

REGISTRY: tuple[ProposerKind, ...] = (
    ProposerKind(
        "ngram", "n-gram (prompt lookup)", "ngram[:N]", "prompt lookup, copying what followed the last match of the "
        "context's final n-gram, at most N tokens long (default 3)", needs_model=False, hf_counterpart=True,
        build=_build_ngram, check_arg=_whole("'ngram:N' needs a whole number N >= 1"), example="ngram",
    ),
    ProposerKind(
        "draft", "draft model", "draft:NAME[@int8][,policy=argmax][,vocab=N]", "a smaller model with the target's "
        "tokenizer: a built-in such as smollm2-135m, a local directory or a hub id, @int8 to quantize it to int8; "
        "drafts sampled from q (policy=sampled, the default) or argmax q (policy=argmax, point masses as in vLLM); "
        "vocab=N scores only the N tokens the target uses most (FR-Spec), a smaller head", needs_model=True,
        hf_counterpart=True, build=_build_draft, arg_required=True, options=DRAFT_OPTIONS, example="draft:smollm2-135m",
        hint="must share the target's tokenizer", tokenizer="same",
        validate=_check_draft_options("draft"),
    ),
    ProposerKind(
        "ngram+draft", "n-gram, else draft model", "ngram+draft:NAME[@int8][,policy=argmax][,vocab=N]", "prompt lookup "
        "when it matches, the draft model (with the draft's options) otherwise", needs_model=True, hf_counterpart=False,
        build=_build_hybrid, arg_required=True, options=DRAFT_OPTIONS, example="ngram+draft:smollm2-135m",
        hint="drafts only when the n-gram finds no match; must share the target's tokenizer", tokenizer="same",
        validate=_check_draft_options("ngram+draft"),
    ),
    ProposerKind(
        "xdraft", "draft model, other tokenizer", "xdraft:NAME", "a draft with a different tokenizer, its text "
        "re-tokenized for the target (q = 1)", needs_model=True, hf_counterpart=False, build=_build_xdraft,
        arg_required=True, example="xdraft:smollm2-135m", hint="any tokenizer: its text is re-tokenized (q = 1)",
        tokenizer="any",
    ),
    ProposerKind(
        "early-exit", "early exit (first layers)", "early-exit:L", "the target's own first L layers and its head draft",
        needs_model=False, hf_counterpart=True, build=_build_early_exit, arg_required=True,
        check_arg=_whole("'early-exit:L' needs a whole number of layers L >= 1"), example="early-exit:4",
        hint="the target's first L layers draft",
        note="Early exit drafts with the target's own first layers and its output head; this model was not trained "
             "for that (LayerSkip-style models are), so its drafts are mostly junk: the struck-through text shows it.",
    ),
    ProposerKind(
        "ngram-tree", "n-gram token tree", "ngram-tree[:N][,nodes=M][,shape=S]", "every distinct prompt-lookup continuation "
        "(n-grams up to N, default 3) merged into one token tree of at most M nodes (default 16), depth k; "
        "shape=S keeps a static tree (BFS child counts such as 2111; auto: the one specviz advise chose); "
        "point masses", needs_model=False, hf_counterpart=False, build=_build_ngram_tree,
        check_arg=_whole("'ngram-tree:N' needs a whole number N >= 1"), options=("nodes", "shape"),
        example="ngram-tree:3,nodes=16",
        validate=_ngram_tree_nodes, tree_nodes=_ngram_tree_nodes,
    ),
    ProposerKind(
        "draft-tree", "draft model, token tree", "draft-tree:NAME[@int8][,nodes=N,width=W][,vocab=V][,shape=S]",
        "EAGLE-2-style dynamic tree: the draft expands the W (default 2) most likely children of the best paths at each "
        "depth, keeping the N (default 12) best nodes by path probability; shape=S grows a static (Sequoia) tree "
        "instead (BFS child counts such as 2111, the draft's top-r tokens; auto: the one specviz advise chose); depth k; "
        "point masses; vocab=V as for draft", needs_model=True,
        hf_counterpart=False, build=_build_draft_tree, arg_required=True, options=("nodes", "width", "vocab", "shape"),
        example="draft-tree:gemma-3-270m@int8,nodes=12,width=2", validate=_draft_tree_nodes, tree_nodes=_draft_tree_nodes,
        hint="must share the target's tokenizer; the tree's size goes in Proposer options", tokenizer="same",
    ),
    ProposerKind(
        "auto", "auto (the advisor's pick)", "auto", "the configuration `specviz advise` (or the Advisor panel) ranked "
        "first for this target on this machine (generate also takes its k unless --k is given); until one is saved, "
        "an error saying to run the advisor",
        needs_model=False, hf_counterpart=False, build=_build_auto, check_arg=_no_argument, example="auto",
    ),
)


def kinds(include_none: bool = False) -> tuple[ProposerKind, ...]:
    """Every proposer kind, in menu order (``include_none``: target-only first)."""
    return ((NONE,) if include_none else ()) + REGISTRY


def get_kind(prefix_or_label: str) -> ProposerKind:
    """The kind with this prefix, alias or menu label (KeyError if none)."""
    key = prefix_or_label.strip().lower()
    for kind in kinds(include_none=True):
        if key in (kind.prefix, kind.label.lower(), *kind.aliases):
            return kind
    raise KeyError(prefix_or_label)


def syntax_list(include_none: bool = True) -> str:
    """'ngram, ngram:N, draft:NAME, ...' for short help texts (from the registry)."""
    forms: list[str] = []
    for kind in kinds():
        forms.append(kind.syntax.replace("[:N]", "").replace("[@int8]", ""))
        if "[:N]" in kind.syntax:
            forms.append(kind.syntax.replace("[:N]", ":N"))
        if "[@int8]" in kind.syntax:
            forms.append(kind.syntax.replace("[@int8]", "@int8"))
    text = ", ".join(forms)
    return f"{text} or none" if include_none else text


def help_text() -> str:
    """Every valid form with what it means (ValueError messages and the CLI's help)."""
    parts = [f"'{k.syntax}': {k.help}" for k in kinds()]
    parts.append("'none' or 'target-only': target-only decoding")
    return "proposer specs: " + "; ".join(parts)


def markdown_table() -> str:
    """The README's proposer table (paste the output into README.md when the registry changes)."""
    lines = ["| spec | menu label | what drafts | `--compare-hf` counterpart |", "|---|---|---|---|"]
    for k in kinds():
        lines.append(f"| `{k.syntax}` | {k.label} | {k.help} | {'yes' if k.hf_counterpart else '-'} |")
    return "\n".join(lines)


# -- parsing -----------------------------------------------------------------------------------


def check_spec(spec: str) -> tuple[str, str | None]:
    """Syntax check of a proposer spec, loading nothing: -> (prefix, argument).

    The prefix is "none" for target-only; the argument is the normalised text after the colon
    (options included) or None. Raises ValueError listing the valid forms for anything else.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"empty proposer spec; {help_text()}")
    head, sep, arg = spec.strip().partition(":")
    if not sep and "," in head:  # "ngram-tree,nodes=8": options without the optional argument
        head, _, rest = head.partition(",")
        sep, arg = ":", "," + rest
    head, arg = head.strip().lower(), arg.strip()
    try:
        kind = get_kind(head)
    except KeyError:
        kind = None
    if kind is None or kind.label.lower() == head != kind.prefix or (kind is NONE and sep):
        raise ValueError(f"unknown proposer {spec!r}; {help_text()}")
    if kind is NONE:
        return "none", None
    if not sep:
        if kind.arg_required:
            if kind.check_arg is not None:
                kind.check_arg(spec, "")
            raise ValueError(f"bad proposer {spec!r}: '{kind.prefix}:NAME' needs a model name, e.g. {kind.example}")
        return kind.prefix, None
    main, opts = split_options(arg, kind.options, spec)
    if kind.check_arg is not None and (main or kind.arg_required or not opts):
        main = kind.check_arg(spec, main)
    elif not main and kind.needs_model:
        raise ValueError(f"bad proposer {spec!r}: '{kind.prefix}:NAME' needs a model name, e.g. {kind.example}")
    full = main + "".join(f",{k}={v}" for k, v in opts.items())
    if kind.validate is not None:
        kind.validate(full)  # ValueError showing the valid syntax
    return kind.prefix, full


def tree_nodes(spec: str) -> int | None:
    """How many nodes per step a token-tree spec asks for (None for a chain), loading nothing: the
    caller holds it against its own cap (the hosted app: ``specviz.app.limits.check_tree_nodes``)."""
    prefix, arg = check_spec(spec)
    kind = get_kind(prefix)
    return None if kind.tree_nodes is None else kind.tree_nodes(arg or "")


def from_spec(spec: str, target, load: Loader | None = None) -> Proposer | None:
    """A proposer spec -> a Proposer (None for target-only). Raises ValueError for a bad spec.

    ``load`` is ``specviz.models.load_model`` (injectable for tests and progress reports); a
    same-tokenizer draft is loaded on the target's device and dtype and checked against the
    target's tokenizer.
    """
    prefix, arg = check_spec(spec)
    kind = get_kind(prefix)
    if kind.build is None:
        return None
    return kind.build(arg, target, load)


__all__ = [
    "NONE", "REGISTRY", "ProposerKind", "auto_pick", "check_spec", "from_spec", "get_kind", "help_text", "int_option", "kinds",
    "markdown_table", "shape_base", "split_options", "syntax_list", "tree_nodes",
]
