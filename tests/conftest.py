"""Shared fixtures: tiny random models (built in tests/support/tiny.py), the app and the browser."""

from __future__ import annotations

import collections
import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("SPECVIZ_ALLOW_LOCAL_PATHS", "1")  # tests serve tiny models from local directories
torch.set_num_threads(1)  # tiny models: one thread is fastest and leaves a core free

from tests.support.tiny import (  # noqa: E402
    loaded,
    make_bpe_tokenizer,
    make_char_tokenizer,
    make_llama,
    make_tiny_models,
    perturbed,
)


@pytest.hookimpl(trylast=True)  # after -m has deselected what does not run
def pytest_collection_modifyitems(config, items):
    """On an xdist worker (``make test``: ``--dist loadfile --no-loadscope-reorder``), the files that
    hold a ``slow`` or ``remote`` test first, then the rest, each group most tests first (xdist's own
    order). xdist hands out files in this order as workers free up; by test count alone the one-test
    files that load the built-in models, build the kernels, start two app processes or a real engine
    came last, one of them running alone at the end."""
    if not hasattr(config, "workerinput"):
        return

    def file_of(item) -> str:
        return item.nodeid.split("::", 1)[0]

    count = collections.Counter(file_of(item) for item in items)
    slow = {file_of(item) for item in items if item.get_closest_marker("slow") or item.get_closest_marker("remote")}
    items.sort(key=lambda item: (file_of(item) not in slow, -count[file_of(item)]))  # stable: a file stays whole


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A browser test that failed gets the stacks of this process's threads inside specviz (the
    served app runs here): a handler that waits on a lock or a queue shows where; and each page still
    open as a reader sees it (its status and summary lines, each chart drawn or not with its title,
    its JavaScript and console errors): a chart that never drew says so."""
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.failed and "app_url" in getattr(item, "fixturenames", ()):
        import sys
        import traceback

        stacks = ["".join(traceback.format_stack(frame)) for frame in sys._current_frames().values()]
        report.sections.append(("the app's threads when the test failed",
                                "\n".join(s for s in stacks if "specviz" in s) or "no thread inside specviz"))
        from tests.support.browser import OPENED, page_report

        open_pages = [page for page in OPENED if not page.is_closed()]
        report.sections.append(("the open pages when the test failed",
                                "\n\n".join(page_report(page) for page in open_pages) or "none"))


@pytest.fixture(autouse=True)
def quiet_machine(monkeypatch):
    """The tests' own workers keep the load average up: kernel plans are cached as on a quiet
    machine (specviz.runtime.cpu.busy; tests/test_cpu.py checks the busy case itself)."""
    from specviz.runtime import cpu

    monkeypatch.setattr(cpu, "load_average", lambda: 0.0)


@pytest.fixture(scope="session")
def specviz_op():
    """specviz's C++ ops built (once per machine) and loaded (tests.support.kernel.NEEDS_OP)."""
    from specviz.runtime import int8_kernel

    why = int8_kernel.load()
    assert why is None, why


@pytest.fixture(scope="session")
def tokenizer():
    return make_char_tokenizer()


@pytest.fixture(scope="session")
def tiny_target(tokenizer):
    return loaded(make_llama(len(tokenizer), 64, 2, seed=0, sharpen=30.0), tokenizer, "tiny-target")


@pytest.fixture(scope="session")
def tiny_draft(tokenizer):
    """A smaller, unrelated random model on the same vocabulary: mostly rejected."""
    return loaded(make_llama(len(tokenizer), 32, 2, seed=1, sharpen=30.0), tokenizer, "tiny-draft")


@pytest.fixture(scope="session")
def near_draft(tiny_target):
    """The target with noise on its weights: accepted often, rejected sometimes."""
    return loaded(perturbed(tiny_target.model, 0.1, seed=2), tiny_target.tokenizer, "tiny-near")


@pytest.fixture(scope="session")
def bpe_draft():
    """A random model over a different (BPE) tokenizer."""
    tok = make_bpe_tokenizer()
    return loaded(make_llama(len(tok), 32, 2, seed=4, sharpen=30.0), tok, "tiny-bpe")


# -- tiny checkpoints on disk, as the app loads them -----------------------------------------


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory):
    """Local checkpoints: a tiny target, its noisy draft, a draft with another tokenizer (bpe) and one
    with a smaller vocabulary (small), as {"target", "draft", "bpe", "small"} paths."""
    root = tmp_path_factory.mktemp("hosting-models")
    target, draft = make_tiny_models(root)
    bpe = make_bpe_tokenizer()
    for name, tok in (("bpe-draft", bpe), ("small-vocab-draft", make_char_tokenizer("abcdefghij .,"))):
        make_llama(len(tok), 32, 2, seed=5, sharpen=30.0).save_pretrained(str(root / name))
        tok.save_pretrained(str(root / name))
    return {"target": target, "draft": draft, "bpe": str(root / "bpe-draft"), "small": str(root / "small-vocab-draft")}


@pytest.fixture
def allow_local(monkeypatch):
    """Local model paths allowed, every hosting limit at its default, no hub."""
    monkeypatch.setenv("SPECVIZ_ALLOW_LOCAL_PATHS", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for var in ("SPECVIZ_MAX_PROMPT_TOKENS", "SPECVIZ_MAX_NEW_TOKENS", "SPECVIZ_MAX_K", "SPECVIZ_MODEL_MEMORY_GB"):
        monkeypatch.delenv(var, raising=False)


# -- the app and the browser (tests/support), for the browser and load tests --------------------


@pytest.fixture(scope="session")
def tiny_app_env(tmp_path_factory):
    """The tiny models saved once per run (per xdist worker) and the app's defaults naming them.
    One set of paths for every module: the app's model cache, keyed by path, loads them once."""
    from tests.support import app_server

    return app_server.tiny_env(tmp_path_factory.mktemp("tiny-models"))


@pytest.fixture(scope="module")
def tiny_env(tiny_app_env):
    """The app's defaults naming tiny local models, set in os.environ for the module, then restored."""
    from tests.support import app_server

    with app_server.patched_environ(dict(tiny_app_env)) as env:
        yield env


@pytest.fixture(scope="session")
def tiny_app(tiny_app_env):
    """The whole app served in this process on the tiny models, once per run: its URL. Building and
    launching it took seconds per module; its defaults are set only while it starts (each module that
    talks to it holds them in os.environ through ``tiny_env``, as a request may read them)."""
    from tests.support import app_server

    with app_server.patched_environ(dict(tiny_app_env)) as env:
        demo, url = app_server.start(env)
    yield url
    demo.close()


@pytest.fixture(scope="module")
def needs_browser():
    """Skips the test where Chromium or Playwright is missing."""
    from tests.support import browser

    reason = browser.missing_browser()
    if reason:
        pytest.skip(reason)


@pytest.fixture(scope="module")
def app_url(needs_browser, tiny_env, tiny_app):
    """The served app's URL, for tests that open it in the browser (skipped, and nothing served, without
    one), with its defaults in os.environ for the module."""
    return tiny_app


@pytest.fixture(scope="session")
def chromium():
    """Debian's headless Chromium driven by Playwright, started once per run (a start is seconds)."""
    from playwright.sync_api import sync_playwright

    from tests.support.browser import launch_chromium

    with sync_playwright() as p:
        b = launch_chromium(p)
        yield b
        b.close()


@pytest.fixture(scope="module")
def browser(needs_browser, chromium):
    """The run's Chromium for one test module; the pages the module opened are closed after it (as a
    browser of its own would be), so no page of one module keeps running beside the next."""
    yield chromium
    for context in list(chromium.contexts):
        context.close()
