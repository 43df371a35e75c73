"""The README and docs/ stay true to the code: the settings table is generated, every setting is
registered and read, the README stays short, the two requirement lists agree, every relative link
resolves, and the Python examples of the README and docs/api.md run (on tiny models in place
of the built-ins)."""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

import pytest

from specviz import settings

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
MAX_README_LINES = 300
NAME = re.compile(r"\bSPECVIZ_[A-Z0-9_]*[A-Z0-9]\b")  # SPECVIZ_MAX_* (a family in prose) is no name
# where a setting may be read: the package, the benchmark scripts, the app, the tests' helpers
READERS = [*sorted((ROOT / "specviz").rglob("*.py")), *sorted((ROOT / "benchmarks").glob("*.py")), ROOT / "app.py",
           *sorted((ROOT / "tests" / "support").glob("*.py"))]
SETTINGS_FILE = ROOT / "specviz" / "settings.py"


# -- (a) the settings table ------------------------------------------------------------------


def test_hosting_page_holds_the_generated_settings_table():
    text = (ROOT / "docs" / "hosting.md").read_text(encoding="utf-8")
    assert settings.markdown_table() in text, (
        "paste specviz.settings.markdown_table() into docs/hosting.md (python -c "
        "\"from specviz.settings import markdown_table; print(markdown_table())\")")


def test_settings_are_frozen_unique_and_well_formed():
    names = settings.names()
    assert len(names) == len(set(names)), "a setting is registered twice"
    for s in settings.SETTINGS:
        assert NAME.fullmatch(s.name), s.name
        assert s.default and s.meaning and s.applies and s.read_in, s
        with pytest.raises(AttributeError):
            s.name = "SPECVIZ_OTHER"  # frozen
    assert settings.by_name("SPECVIZ_MAX_K").default == "16"
    with pytest.raises(KeyError, match="SPECVIZ_MAX_K"):
        settings.by_name("SPECVIZ_NOT_A_SETTING")


def test_settings_module_imports_nothing_from_specviz():
    tree = ast.parse(SETTINGS_FILE.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            assert not node.level and not (node.module or "").startswith("specviz"), ast.unparse(node)
        elif isinstance(node, ast.Import):
            assert not any(a.name.startswith("specviz") for a in node.names), ast.unparse(node)


def test_the_readers_parse_as_the_runtime_did_and_refuse_unregistered_names(monkeypatch):
    """settings.value / word / turned_off: what the runtime's own parsing gave (unset or blank: the
    default; case and spaces ignored for a word; 0, false, no, off turn a setting off), and a name
    the register lacks is a KeyError, not a silent default."""
    monkeypatch.delenv("SPECVIZ_ARGMAX_HEAD", raising=False)
    assert settings.word("SPECVIZ_ARGMAX_HEAD", "auto") == "auto"
    monkeypatch.setenv("SPECVIZ_ARGMAX_HEAD", "  INT8 ")
    assert settings.word("SPECVIZ_ARGMAX_HEAD", "auto") == "int8" and settings.value("SPECVIZ_ARGMAX_HEAD") == "  INT8 "
    for raw, off in (("", False), ("1", False), ("Off", True), (" no ", True), ("0", True), ("auto", False)):
        monkeypatch.setenv("SPECVIZ_CPU_HEAD", raw)
        assert settings.turned_off("SPECVIZ_CPU_HEAD") is off, raw
    monkeypatch.setenv("SPECVIZ_CACHE_DIR", "")
    assert settings.value("SPECVIZ_CACHE_DIR", "home") == "home"
    with pytest.raises(KeyError, match="SPECVIZ_NOT_A_SETTING"):
        settings.value("SPECVIZ_NOT_A_SETTING")


ENV_READERS = ("specviz/settings.py", "specviz/app/", "specviz/cli")  # where os.environ may be read (issue 48)
ENV_READ = re.compile(r"os\.environ|os\.getenv|getenv\(|os\.putenv")


def env_readers(root: Path) -> list[str]:
    """The modules under ``root``/specviz that read the environment themselves."""
    found = []
    for path in sorted((root / "specviz").rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if not rel.startswith(ENV_READERS) and ENV_READ.search(path.read_text(encoding="utf-8")):
            found.append(rel)
    return found


def test_the_environment_is_read_only_through_settings():
    """No os.environ / os.getenv under specviz/ but in settings.py, specviz/app and specviz/cli*
    (issue 48): the UI, the remote servers and the runtime ask specviz.settings (the native build
    puts ninja on PATH through settings.put_on_path, a vLLM server's env is settings.child_env)."""
    readers = env_readers(ROOT)
    assert not readers, f"read the environment through specviz.settings: {readers}"


def test_a_new_environment_read_is_caught(tmp_path):
    for rel, text in (("specviz/ui/x.py", "import os\nA = os.environ.get('X')\n"),
                      ("specviz/runtime/y.py", "from os import getenv\nB = getenv('Y')\n"),
                      ("specviz/app/z.py", "import os\nC = os.environ['Z']\n"),
                      ("specviz/settings.py", "import os\nD = os.environ\n")):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text, encoding="utf-8")
    assert env_readers(tmp_path) == ["specviz/runtime/y.py", "specviz/ui/x.py"]


# -- (b) every name registered, every registered name read -----------------------------------


def _names_in(path: Path) -> set[str]:
    return set(NAME.findall(path.read_text(encoding="utf-8")))


def test_every_setting_named_in_the_package_is_registered():
    registered = set(settings.names())
    missing = {}
    for path in sorted((ROOT / "specviz").rglob("*.py")):
        if path == SETTINGS_FILE:
            continue
        for name in _names_in(path) - registered:
            missing.setdefault(name, []).append(path.relative_to(ROOT).as_posix())
    assert not missing, f"register these in specviz/settings.py (and paste the table into docs/hosting.md): {missing}"


def test_every_registered_setting_is_read_where_it_says():
    """A setting read by name is named in each file ``read_in`` lists; one carried by
    ``settings.Options`` is read there as ``.<field>`` (the register's ``option``)."""
    for s in settings.SETTINGS:
        for rel in s.read_in:
            path = ROOT / rel
            assert path.is_file(), f"{s.name}: {rel} does not exist"
            text = path.read_text(encoding="utf-8")
            if s.option:  # ``options.field`` or ``(... options()).field``, not another object's field of that name
                assert re.search(rf"(options|\))\.{s.option}\b", text), f"{rel} does not read {s.name} (options.{s.option})"
            else:
                assert f'"{s.name}"' in text, f"{rel} does not read {s.name}"


def test_options_hold_every_engine_setting_and_are_read_from_the_environment(monkeypatch):
    """settings.options(): one field per setting the register says it carries, each parsed as the
    runtime did (blank: the default; words stripped and lower-cased; OFF turns a switch off)."""
    from dataclasses import fields

    carried = {s.option for s in settings.SETTINGS if s.option}
    assert carried == {f.name for f in fields(settings.Options)}
    for s in settings.SETTINGS:
        if s.option:
            monkeypatch.delenv(s.name, raising=False)
    assert settings.options() == settings.Options()
    monkeypatch.setenv("SPECVIZ_ARGMAX_HEAD", " INT8 ")
    monkeypatch.setenv("SPECVIZ_CPU_KERNELS", "off")
    monkeypatch.setenv("SPECVIZ_CPU_HEAD", "1")
    monkeypatch.setenv("SPECVIZ_CACHE_DIR", "~/Somewhere")
    monkeypatch.setenv("SPECVIZ_STATIC_DECODE", "")
    got = settings.options()
    assert got == settings.Options(argmax_head="int8", cpu_kernels=False, cache_dir="~/Somewhere")
    with pytest.raises(AttributeError):
        got.argmax_head = "0"  # frozen: a value


def test_every_registered_setting_is_read_somewhere():
    read = set()
    for path in READERS:
        if path != SETTINGS_FILE and path.is_file():
            read |= set(re.findall(r"[\"'](SPECVIZ_[A-Z0-9_]+)[\"']", path.read_text(encoding="utf-8")))
    unread = [n for n in settings.names() if n not in read and not settings.by_name(n).option]  # Options: read by settings.options
    assert not unread, f"registered in specviz/settings.py but read nowhere: {unread}"


# -- (c) a short README ------------------------------------------------------------------------


def test_readme_is_short_and_keeps_its_front_matter():
    text = README.read_text(encoding="utf-8")
    lines = text.splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines; move detail to docs/"
    assert lines[0] == "---" and "app_file: app.py" in lines[:12] and "sdk: gradio" in lines[:12]
    assert "docs/architecture.md" in text


# -- (d) requirements.txt and pyproject.toml agree ----------------------------------------------


def _normalized(requirement: str) -> str:
    """PEP 503: the distribution name, lower case, runs of -_. as one -."""
    name = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement).group(1)
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirements_txt() -> set[str]:
    out = set()
    for line in (ROOT / "requirements.txt").read_text(encoding="utf-8").splitlines():
        line = line.split(" #", 1)[0].strip()
        if line and not line.startswith("#"):
            out.add(_normalized(line))
    return out


def test_requirements_match_the_project_dependencies():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    deps = {_normalized(d) for d in project["dependencies"]}
    models = {_normalized(d) for d in project["optional-dependencies"]["models"]}
    got = _requirements_txt()
    assert deps <= got, f"requirements.txt lacks {sorted(deps - got)} (pyproject.toml's [project] dependencies)"
    extra = got - deps
    assert extra <= models, f"requirements.txt names {sorted(extra - models)}, which pyproject.toml does not"


def test_requirement_names_are_normalized():
    assert _normalized("prometheus_client>=0.20") == _normalized("Prometheus.Client") == "prometheus-client"


# -- (e) every relative link resolves ----------------------------------------------------------

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    return {_slug(m) for m in re.findall(r"^#+\s+(.*)$", text, flags=re.M)}


def _links(path: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    return [t for t in LINK.findall(text) if not re.match(r"[a-z][a-z0-9+.-]*:", t)]  # no http:, mailto:


@pytest.mark.parametrize("page", [README, *DOCS], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_points_to_a_file_that_exists(page):
    broken = []
    for target in _links(page):
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        if not dest.exists():
            broken.append(target)
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(f"{target} (no such heading)")
    assert not broken, f"{page.name}: broken links {broken}"


def test_reference_pages_are_short_and_the_results_log_is_dated_newest_first():
    """docs/benchmarks.md and docs/advisor.md say what, how, the current result and how to read it;
    the measurements go to docs/results-log.md, one dated section each, newest first."""
    for name in ("benchmarks.md", "advisor.md"):
        n = len((ROOT / "docs" / name).read_text(encoding="utf-8").splitlines())
        assert n <= 250, f"docs/{name} has {n} lines: move the measurements to docs/results-log.md"
    text = re.sub(r"```.*?```", "", (ROOT / "docs" / "results-log.md").read_text(encoding="utf-8"), flags=re.S)
    heads = re.findall(r"^## (.*)$", text, flags=re.M)
    dates = [re.match(r"(\d{4}-\d{2}-\d{2})", h) for h in heads]
    assert len(heads) > 10 and all(dates), [h for h, d in zip(heads, dates) if not d]
    days = [d.group(1) for d in dates]
    assert days == sorted(days, reverse=True), "results-log.md: newest first"


def test_assets_holds_only_what_the_readme_and_the_docs_show():
    """Bench records live in benchmarks/results/; assets/ keeps what a page shows or links."""
    pages = "".join(p.read_text(encoding="utf-8") for p in [README, *DOCS])
    unshown = [p.name for p in (ROOT / "assets").iterdir() if f"assets/{p.name}" not in pages]
    assert not unshown, f"nothing shows these: move bench records to benchmarks/results/ ({unshown})"


def test_slugs_follow_github():
    assert _slug("A forward's cost (the static decode step)") == "a-forwards-cost-the-static-decode-step"
    assert _slug("llama.cpp through `specviz bench --remote`") == "llamacpp-through-specviz-bench---remote"


def test_docs_exist():
    names = {p.name for p in DOCS}
    assert {"architecture.md", "api.md", "benchmarks.md", "gpu.md", "hosting.md", "remote.md"} <= names


# -- the README's example runs ------------------------------------------------------------------


@pytest.mark.parametrize("page", [README, ROOT / "docs" / "api.md"], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_python_example_runs_on_tiny_models(page, tmp_path, monkeypatch):
    """The page's first Python block, with tiny local models in place of gemma-3-270m (same calls)."""
    from tests.support.tiny import make_tiny_models

    target, draft = make_tiny_models(tmp_path / "models")
    block = re.search(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), flags=re.S).group(1)
    assert '"gemma-3-270m"' in block and '"gemma-3-270m@int8"' in block
    block = block.replace("gemma-3-270m@int8", f"{draft}@int8").replace("gemma-3-270m", target)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SPECVIZ_ALLOW_LOCAL_PATHS", "1")
    with open(os.devnull, "w") as sink:
        exec(compile(block, page.name, "exec"), {"print": lambda *a, **k: print(*a, **k, file=sink)})
    assert (tmp_path / "run.jsonl").is_file()
