"""The proposer registry: specs, options and the texts generated from it."""

from __future__ import annotations

import pytest

from specviz.proposers import REGISTRY, check_spec, from_spec, get_kind, split_options
from specviz.proposers.registry import help_text, int_option, markdown_table, syntax_list


def test_check_spec_normalises_without_loading():
    assert check_spec(" NGram:05 ") == ("ngram", "5")
    assert check_spec("draft:smollm2-135m@int8") == ("draft", "smollm2-135m@int8")
    assert check_spec("target-only") == ("none", None)
    assert check_spec("early-exit:3") == ("early-exit", "3")


def test_every_valid_form_is_listed_in_the_error():
    with pytest.raises(ValueError) as info:
        check_spec("eagle:3")
    for kind in REGISTRY:
        assert kind.syntax in str(info.value)
    assert "none" in str(info.value)


def test_options_parse_and_unknown_keys_are_named():
    assert split_options("m@int8,nodes=16, width=3", ("nodes", "width")) == ("m@int8", {"nodes": "16", "width": "3"})
    with pytest.raises(ValueError, match="unknown option 'depth'.*nodes, width"):
        split_options("m,depth=2", ("nodes", "width"))
    with pytest.raises(ValueError, match="key=value"):
        split_options("m,nodes", ("nodes",))
    with pytest.raises(ValueError, match="unknown option 'x'.*policy"):
        check_spec("draft:m,x=1")
    with pytest.raises(ValueError, match="unknown option 'x'.*none"):
        check_spec("early-exit:4,x=1")
    assert int_option({"nodes": "16"}, "nodes", 8, hi=64) == 16
    assert int_option({}, "nodes", 8) == 8
    with pytest.raises(ValueError, match="nodes must be a whole number from 1 to 64"):
        int_option({"nodes": "99"}, "nodes", 8, hi=64)


def test_kinds_by_prefix_alias_and_label():
    assert get_kind("target-only").prefix == "none"
    assert get_kind("draft model").prefix == "draft"
    with pytest.raises(KeyError):
        get_kind("eagle")
    labels = [k.label for k in REGISTRY]
    assert len(set(labels)) == len(labels) and len({k.prefix for k in REGISTRY}) == len(REGISTRY)


def test_texts_come_from_the_registry():
    table = markdown_table()
    for kind in REGISTRY:
        assert f"`{kind.syntax}`" in table and kind.prefix in syntax_list() and kind.help in help_text()


def test_early_exit_and_cross_tokenizer_builders(tiny_target, near_draft):
    p = from_spec("early-exit:1", tiny_target)
    assert p.name == "early-exit:1"
    p = from_spec("xdraft:x", tiny_target, load=lambda *a, **k: near_draft)
    assert p.name == f"xdraft:{near_draft.name}"


def test_the_readme_table_is_the_generated_one():
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    assert markdown_table() in readme, "paste specviz.proposers.registry.markdown_table() into README.md"


def test_playground_choices_map_to_specs():
    from specviz.app import runs

    assert runs.spec_for(runs.label_of("draft"), "m@int8") == "draft:m@int8"
    assert runs.spec_for(runs.label_of("early-exit"), layers=3) == "early-exit:3"
    assert runs.spec_for(runs.label_of("ngram")) == "ngram"
    assert runs.menu_prefix("hybrid") == "ngram+draft" and runs.menu_prefix("bogus") == "draft"
    assert runs.menu_prefix(runs.label_of("early-exit")) == "early-exit"
    assert runs.MENU == tuple((k.label, k.prefix) for k in REGISTRY)
    for label, prefix in runs.MENU:  # every menu entry (label, value) parses back to its kind
        spec = runs.spec_for(prefix, "m", 2)
        assert check_spec(spec)[0] == get_kind(label).prefix == prefix == runs.prefix_of(spec)
    with pytest.raises(ValueError, match="choose a draft model"):
        runs.spec_for(runs.label_of("xdraft"), "")


def test_ui_imports_no_proposer_module():
    from pathlib import Path

    ui = Path(__file__).resolve().parents[1] / "specviz" / "ui"
    for path in ui.glob("*.py"):
        text = path.read_text(encoding="utf-8")
        assert "from ..proposers" not in text and "specviz.proposers import" not in text, path.name


def test_a_new_kind_with_options_plugs_in(monkeypatch, tiny_target):
    """What a later proposer does: one entry with options, and from_spec hands them to its builder."""
    from specviz.proposers import NGram, registry

    def build(arg, target, load):
        _, opts = split_options(arg or "", ("width",))
        return NGram(max_ngram=int_option(opts, "width", 3, hi=8), name=f"demo-kind:{arg or ''}")

    kind = registry.ProposerKind("demo-kind", "demo kind", "demo-kind[:,width=W]", "test kind", needs_model=False,
                                 hf_counterpart=False, build=build, options=("width",))
    monkeypatch.setattr(registry, "REGISTRY", registry.REGISTRY + (kind,))
    assert check_spec("demo-kind") == ("demo-kind", None)
    assert check_spec("demo-kind:,WIDTH=5") == ("demo-kind", ",width=5")
    assert from_spec("demo-kind:,width=5", tiny_target).max_ngram == 5
    with pytest.raises(ValueError, match="unknown option 'depth'.*width"):
        check_spec("demo-kind:,depth=2")
    with pytest.raises(ValueError, match="from 1 to 8"):
        from_spec("demo-kind:,width=9", tiny_target)
    assert "demo-kind[:,width=W]" in registry.help_text()


def test_every_option_has_an_example_the_registry_accepts():
    from specviz.app.runs import OPTION_EXAMPLES, options_example, spec_for
    from specviz.proposers.registry import REGISTRY, check_spec

    for kind in REGISTRY:
        for key in kind.options:
            assert key in OPTION_EXAMPLES, f"add an example value for option {key!r} to specviz.app.runs.OPTION_EXAMPLES"
        if kind.options:
            check_spec(spec_for(kind.label, "m", 4, options_example(kind.label)))


def test_options_without_the_optional_argument():
    """`ngram-tree[:N][,nodes=M]`, as the help writes it: options may follow the bare prefix."""
    from specviz.proposers.registry import tree_nodes

    for spec in ("ngram-tree,nodes=8", "ngram-tree:,nodes=8"):
        assert check_spec(spec) == ("ngram-tree", ",nodes=8") and tree_nodes(spec) == 8
        assert from_spec(spec, None).max_nodes == 8
    assert check_spec("ngram-tree:3,nodes=8") == ("ngram-tree", "3,nodes=8")
    with pytest.raises(ValueError, match="whole number"):
        check_spec("ngram-tree:")  # an empty argument with no options is still refused
    with pytest.raises(ValueError, match="needs a model name"):
        check_spec("draft-tree,nodes=4")  # a required argument stays required
