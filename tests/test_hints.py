"""Hints and menus from the registry: each proposer's box hint, draft menu and card note come from
its ProposerKind entry (specviz.proposers.registry) and replace the last proposer's, whatever was
visited before (specviz.ui.playground.on_proposer_change, specviz.app.runs.draft_menu)."""

from __future__ import annotations

import pytest

from specviz.app import runs
from specviz.proposers.registry import REGISTRY
from specviz.ui import playground as pg
from specviz.ui.state import PROPOSERS, TAKES_LAYERS, USES_DRAFT_MODEL

TARGET, DRAFT = "gemma-3-270m", "gemma-3-270m@int8"
MENU = [k.prefix for k in REGISTRY if k.prefix in PROPOSERS]


def _boxes(prefix: str, draft: str = DRAFT) -> tuple[dict, dict, dict]:
    return pg.on_proposer_change(TARGET, prefix, draft)


@pytest.mark.parametrize("prefix", MENU)
def test_each_hint_is_its_registry_entry_after_every_other(prefix):
    kind = next(k for k in REGISTRY if k.prefix == prefix)
    for other in [p for p in MENU if p != prefix]:  # every other proposer first: nothing of theirs stays
        _boxes(other)
    draft, layers, options = _boxes(prefix)
    assert draft["visible"] == (prefix in USES_DRAFT_MODEL)
    assert draft["info"] == (kind.hint if prefix in USES_DRAFT_MODEL else "")
    assert layers["visible"] == (prefix in TAKES_LAYERS)
    if prefix in TAKES_LAYERS:  # (the layers box belongs to early exit alone: hidden, its hint stays)
        assert layers["info"] == kind.hint
    assert options["info"] == (runs.options_hint(prefix) or "")
    if prefix in USES_DRAFT_MODEL:
        assert draft["info"], f"{prefix}: a kind with a draft box says which drafts fit"


def test_the_draft_menus_follow_the_tokenizer_rule():
    same = runs.draft_menu(TARGET, "draft", DRAFT)
    assert DRAFT in same and not any(c.startswith("smollm2") for c in same)  # another tokenizer cannot serve gemma
    assert runs.draft_menu(TARGET, "draft-tree", DRAFT) == same and runs.draft_menu(TARGET, "ngram+draft", DRAFT) == same
    cross = runs.draft_menu(TARGET, "xdraft", "smollm2-135m")
    assert cross[0].startswith("smollm2") and DRAFT in cross  # re-tokenized: any, the other tokenizers first
    assert runs.draft_menu("smollm2-135m", "draft", "smollm2-135m@int8")[0] == "smollm2-135m@int8"
    assert not any(c.startswith("gemma") for c in runs.draft_menu("smollm2-135m", "draft", "smollm2-135m@int8"))
    unknown = runs.draft_menu("/some/local/dir", "draft", DRAFT)  # an unknown tokenizer: the whole menu
    assert unknown == runs.draft_choices(DRAFT)
    assert runs.tokenizer_family("gemma-3-270m@int8") == "gemma-3-270m" and runs.tokenizer_family("/x/y") is None
    assert runs.tokenizer_family("gemma-3-270m@bf16") == "gemma-3-270m"  # the same model in bf16
    assert runs.draft_menu("gemma-3-270m@bf16", "draft", DRAFT) == same
    assert runs.default_draft("gemma-3-270m@bf16") == "gemma-3-270m@int8"
    assert runs.auto_draft("gemma-3-270m@bf16", "draft", "smollm2-135m@int8") == "gemma-3-270m@int8"
    update = pg.on_target_change("smollm2-135m", "draft", DRAFT)  # the target changes: the menu and draft follow
    assert update["value"] == "smollm2-135m@int8" and "gemma-3-270m@int8" not in update["choices"]


def test_the_card_note_comes_from_the_registry():
    assert runs.card_note("early-exit") == next(k for k in REGISTRY if k.prefix == "early-exit").note
    assert "not trained" in runs.card_note("early-exit") and runs.card_note("ngram") == ""


# -- in the browser ----------------------------------------------------------------------------


@pytest.mark.browser
def test_each_hint_in_the_page_after_every_other_proposer(browser, app_url):
    """Two rounds through the proposer menu: in the second, each proposer comes after every other
    one, and its draft (or layers) box shows its registry hint and no other kind's."""
    page = browser.new_context(viewport={"width": 1280, "height": 800}).new_page()
    page.set_default_timeout(60_000)
    page.goto(app_url)
    page.wait_for_selector("#sv-step-btn")
    hints = {k.hint for k in REGISTRY if k.hint}
    for round_ in (1, 2):
        for kind in [k for k in REGISTRY if k.prefix in PROPOSERS]:
            page.locator("#sv-proposer").get_by_label(kind.label, exact=True).check()
            box = "#sv-draft" if kind.prefix in USES_DRAFT_MODEL else "#sv-layers" if kind.prefix in TAKES_LAYERS else None
            if box is None:
                page.wait_for_function("['#sv-draft', '#sv-layers'].every((sel) => !document.querySelector(sel)?.offsetParent)")
                continue
            page.wait_for_function("([sel, hint]) => !!document.querySelector(sel)?.offsetParent"
                                   " && document.querySelector(sel).innerText.includes(hint)", arg=[box, kind.hint])
            if round_ == 2:
                text = page.inner_text(box)
                assert [h for h in hints if h in text and h != kind.hint and h not in kind.hint] == [], (kind.prefix, text)
    page.context.close()


def test_the_benchmark_menu_offers_the_drafts_that_serve_the_target():
    menu = runs.bench_proposer_choices(["ngram"], ["gemma-3-270m", "smollm2-135m"])
    assert "draft:smollm2-135m@int8" in menu  # every target's drafts
    gemma = runs.specs_for_target("gemma-3-270m", menu)
    assert "draft:gemma-3-270m@int8" in gemma and "ngram" in gemma and "early-exit:4" in gemma
    assert not [s for s in gemma if s.split(":")[0] in ("draft", "ngram+draft", "draft-tree") and "smollm2" in s]
    assert [s for s in gemma if s.startswith("xdraft:")] == [s for s in menu if s.startswith("xdraft:")]  # re-tokenized
    assert runs.specs_for_target("/a/local/dir", menu) == menu  # an unknown tokenizer: everything stays


def test_targets_in_bf16_are_offered_where_the_cpu_runs_bf16(monkeypatch):
    from specviz.app import pairing

    monkeypatch.setattr(pairing, "native_bf16", lambda: True)  # where the menus' pairing asks
    assert "gemma-3-270m@bf16" in runs.target_choices(TARGET)
    monkeypatch.setattr(pairing, "native_bf16", lambda: False)
    assert not any(c.endswith("@bf16") for c in runs.target_choices(TARGET))
