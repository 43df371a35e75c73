"""The structure the code promises: which layer may import which, module sizes, no import cycles."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from specviz.ui.handlers import friendly_error

ROOT = Path(__file__).resolve().parents[1] / "specviz"


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _top_level_imports(name: str, path: Path) -> set[str]:
    """Modules imported at module level (not inside functions), as absolute names."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            found.add(mod)
            found |= {f"{mod}.{a.name}" for a in node.names}
    return found


def test_gradio_only_in_ui_and_plotly_only_in_viz():
    for name, path in _modules().items():
        imports = _top_level_imports(name, path) | {
            n.module or "" for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))) if isinstance(n, ast.ImportFrom)
        } | {a.name for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))) if isinstance(n, ast.Import) for a in n.names}
        if any(i == "gradio" or i.startswith("gradio.") for i in imports):
            assert name.startswith("specviz.ui"), name
        if any(i == "plotly" or i.startswith("plotly.") for i in imports):
            assert name.startswith("specviz.viz"), name


def test_ui_imports_no_proposer_and_no_module_is_over_600_lines():
    for name, path in _modules().items():
        text = path.read_text(encoding="utf-8")
        assert len(text.splitlines()) <= 600, f"{name} has {len(text.splitlines())} lines"
        if name.startswith("specviz.ui"):
            assert "proposers" not in " ".join(i for i in _top_level_imports(name, path)), name
            assert "from ..proposers" not in text and "specviz.proposers import" not in text, name


def test_no_import_cycles_at_module_level():
    mods = _modules()
    graph = {n: {i for i in _top_level_imports(n, p) if i in mods and i != n} for n, p in mods.items()}
    # importing a package runs its __init__, so "a imports pkg.x" also means "a imports pkg"
    for n in graph:
        for i in list(graph[n]):
            parts = i.split(".")
            graph[n] |= {".".join(parts[:j]) for j in range(2, len(parts)) if ".".join(parts[:j]) in mods and ".".join(parts[:j]) != n
                         and not n.startswith(".".join(parts[:j]) + ".")}
    state: dict[str, int] = {}

    def visit(n: str, stack: list[str]) -> None:
        state[n] = 1
        for m in sorted(graph[n]):
            if state.get(m) == 1:
                pytest.fail("import cycle: " + " -> ".join(stack[stack.index(m):] + [m]))
            if m not in state:
                visit(m, stack + [m])
        state[n] = 2

    for n in sorted(graph):
        if n not in state:
            visit(n, [n])


def test_friendly_error_shows_input_errors_and_hides_nothing_else():
    assert friendly_error(ValueError("k must be from 1 to 8"), "the playground") == "k must be from 1 to 8"
    assert friendly_error(OSError("no such file\nmore"), "bench", expected=(OSError,), first_line=True) == "no such file"
    assert friendly_error(RuntimeError("the session has finished"), "x") == "the session has finished"
    msg = friendly_error(KeyError("boom"), "the playground", after=". Try Reset.")
    assert msg.startswith("unexpected error (KeyError)") and msg.endswith("Try Reset.")
