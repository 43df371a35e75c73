"""The ``auto`` proposer: the advisor's saved pick for this target on this machine, through the
registry (API), ``specviz generate`` (CLI), the app's decoder (playground) and the Advisor panel;
and the one-line message when no advice is saved. Tiny models, costs from numbers."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from specviz import cli
from specviz.analysis import costmodel as C
from specviz.app.limits import Limits
from specviz.proposers.advised import AdvisedPick, advised_pick, advised_picks_path, save_pick
from specviz.proposers.registry import auto_pick, check_spec, from_spec
from tests.test_advisor import cost_model


@pytest.fixture()
def cache(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECVIZ_CACHE_DIR", str(tmp_path))
    return tmp_path


def test_auto_is_a_spec_without_argument():
    assert check_spec("auto") == ("auto", None)
    assert check_spec(" AUTO ") == ("auto", None)
    with pytest.raises(ValueError, match="auto takes no argument"):
        check_spec("auto:ngram")


def test_auto_without_advice_says_which_command_to_run(cache, tiny_target):
    with pytest.raises(ValueError) as info:
        from_spec("auto", tiny_target)
    msg = str(info.value)
    assert "\n" not in msg and "no advice is saved for tiny-target" in msg
    assert "`specviz advise --target tiny-target`" in msg
    assert auto_pick("ngram", tiny_target) is None  # only auto looks a pick up


def test_auto_builds_the_saved_pick_and_keeps_other_targets(cache, tiny_target):
    save_pick(AdvisedPick("tiny-target", "ngram-tree:3,shape=21", 3, 1.8, 2.4, "test machine"))
    save_pick(AdvisedPick("other", "ngram:2", 5, 1.3))
    p = from_spec("auto", tiny_target)
    assert p.name == "ngram-tree:3,shape=21" and p.shape == "21"
    pick = auto_pick("auto", tiny_target)
    assert (pick.spec, pick.k, pick.machine) == ("ngram-tree:3,shape=21", 3, "test machine") and pick.saved
    assert "auto: the advisor's pick for tiny-target on test machine is ngram-tree:3,shape=21 k=3" in pick.describe()
    assert advised_pick("other").spec == "ngram:2"
    data = json.loads(advised_picks_path().read_text())
    assert set(data) == {"tiny-target", "other"}


def test_a_pick_of_none_runs_the_target_alone(cache, tiny_target):
    save_pick(AdvisedPick("tiny-target", "none", 1, 1.0))
    assert from_spec("auto", tiny_target) is None
    assert "nothing that beats target-only" in auto_pick("auto", tiny_target).describe()


def test_a_damaged_picks_file_is_the_no_advice_message(cache, tiny_target):
    path = advised_picks_path()
    path.parent.mkdir(parents=True)
    path.write_text('{"tiny-target": {"spec": 3}}')
    with pytest.raises(ValueError, match="no advice is saved"):
        from_spec("auto", tiny_target)
    path.write_text("not json")
    with pytest.raises(ValueError, match="no advice is saved"):
        from_spec("auto", tiny_target)


def test_the_app_builds_auto_and_says_what_it_chose(cache, tiny_target):
    from specviz.app.runs import build_decoder
    from specviz.core.records import Sampling

    settings = SimpleNamespace(target="tiny-target", proposer="auto", k=2, schedule="constant", acceptance="exact",
                               prompt="the cat", chat=False, sampling=Sampling())
    load = lambda name, **kw: tiny_target  # noqa: E731
    with pytest.raises(ValueError, match="specviz advise --target tiny-target"):
        build_decoder(settings, lambda m: None, load=load)
    save_pick(AdvisedPick("tiny-target", "ngram:2", 6, 1.5, 2.0))
    said = []
    decoder = build_decoder(settings, said.append, load=load)
    assert decoder.name == "ngram:2" and decoder.k == 2  # the playground keeps its own k
    assert any("auto: the advisor's pick for tiny-target is ngram:2 k=6" in m and "k you chose (2)" in m for m in said)


def test_advise_refuses_auto(tiny_target):
    from specviz.bench.advise import plan

    with pytest.raises(ValueError, match="name the proposers to advise on"):
        plan(["auto"], tiny_target)


# -- the CLI: advise saves the pick, generate --proposer auto runs it ------------------------------


@pytest.fixture()
def fast_costs(monkeypatch, cache):
    def fake_measure(target, *, context=256, drafts=(), **kw):
        cost = cost_model(slope=0.0005, draft_step=0.002, overhead=0.001)
        return C.CostModel(**{**cost.__dict__, "key": C.cost_key(target, context), "target": str(target.name)})

    monkeypatch.setattr(C, "measure", fake_measure)


def test_generate_auto_without_advice_is_one_line(capsys, models_dir, cache):
    rc = cli.main(["generate", "--target", models_dir["target"], "--proposer", "auto", "--prompt", "abc", "--quiet",
                   "--max-new-tokens", "4"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert "no advice is saved for" in err and "run `specviz advise --target" in err


def test_advise_then_generate_auto_runs_the_pick_with_its_k(capsys, models_dir, fast_costs, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("\n".join(json.dumps({"prompt": p}) for p in ("abc abc abc abc abc", "the cat. the cat. the")))
    rc = cli.main(["advise", "--target", models_dir["target"], "--proposer", "ngram", "--proposer", "ngram:2",
                   "--prompts", str(prompts), "--max-new-tokens", "16", "--k-max", "4", "--calibrate-tokens", "30",
                   "--no-chat"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "saved the pick for the proposer auto" in err
    picks = json.loads(advised_picks_path().read_text())
    (name, entry), = picks.items()
    rc = cli.main(["generate", "--target", models_dir["target"], "--proposer", "auto", "--prompt", "abc abc abc",
                   "--max-new-tokens", "8", "--no-chat", "--json", "--quiet"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    data = json.loads(out)
    assert data["auto"]["spec"] == entry["spec"] and data["k"] == entry["k"]
    if entry["spec"] != "none":
        assert data["proposer"].startswith(entry["spec"].split(",")[0])
    rc = cli.main(["generate", "--target", models_dir["target"], "--proposer", "auto", "--k", "1", "--prompt", "abc abc",
                   "--max-new-tokens", "4", "--no-chat", "--color", "never"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "--- auto: the advisor" in out and "auto: the advisor" in err  # the run's header and the progress line


def test_the_advisor_panel_saves_the_pick(models_dir, allow_local, fast_costs):
    at = pytest.importorskip("specviz.ui.advisor_tab")
    state = at.AdvisorState()
    prompts = "abc abc abc abc abc\nthe cat. the cat. the"
    outs = list(at.on_calibrate(state, models_dir["target"], ["ngram"], at.CUSTOM, [], prompts, 2, 16, 30, 0.0))
    last = [o["advisor_msg"] for o in outs if "advisor_msg" in o][-1]
    assert "Saved the pick for the proposer auto" in last, last
    assert advised_picks_path().is_file()


def test_the_advisor_panel_does_not_offer_auto_and_refuses_it(models_dir, allow_local, fast_costs):
    gr = pytest.importorskip("gradio")
    at = pytest.importorskip("specviz.ui.advisor_tab")
    with gr.Blocks():
        view = at.build_advisor_panel("t", ["ngram"], ["t"], ["ngram", "auto", "ngram-tree"], ["coding"])
    choices = [c[1] if isinstance(c, (tuple, list)) else c for c in view.controls[1].choices]
    assert "auto" not in choices and "ngram-tree" in choices
    outs = list(at.on_calibrate(at.AdvisorState(), models_dir["target"], ["auto"], at.CUSTOM, [], "abc abc abc", 1, 8,
                                20, 0.0))
    last = [o["advisor_msg"] for o in outs if "advisor_msg" in o][-1]
    assert "name the proposers to advise on" in last and "Traceback" not in last


def test_choosing_auto_in_the_playground_sets_k_to_the_picks(cache):
    """The k slider follows the saved pick when the proposer turns to auto (capped by the hosting
    limit); any other proposer, or no pick saved, leaves it where it was."""
    from specviz.ui.playground import on_auto_k

    assert on_auto_k("tiny-target", "auto", 4) == {"__type__": "update"}  # nothing saved yet
    save_pick(AdvisedPick("tiny-target", "ngram:3", 6, 1.7, 3.1, "test machine"))
    assert on_auto_k("tiny-target", "auto", 4)["value"] == 6
    assert on_auto_k("tiny-target", "ngram", 4) == {"__type__": "update"}
    assert on_auto_k("other-target", "auto", 4) == {"__type__": "update"}
    save_pick(AdvisedPick("tiny-target", "ngram:3", 99, 1.7, 3.1, "test machine"))
    assert on_auto_k("tiny-target", "auto", 4)["value"] == Limits.from_env().max_k
