"""One runtime object per model (specviz.runtime.state): a copy of a model is another model."""

import copy
import pickle

import torch

from specviz.runtime import state


def test_one_runtime_per_model_and_a_shallow_copy_gets_its_own():
    model = torch.nn.Linear(2, 2)
    runtime = state.of(model)
    runtime.decoder, runtime.plan, runtime.cache_dir = "the model's step", "a plan", "/cache"
    assert state.of(model) is runtime and state.peek(model) is runtime

    view = copy.copy(model)  # as a cut-vocabulary draft or an early-exit twin is made: the attribute comes along
    assert state.peek(view) is None
    own = state.of(view)
    assert own is not runtime and own.decoder is None  # never the original's step (it computes the original's outputs)
    assert (own.plan, own.cache_dir) == ("a plan", "/cache")  # what belongs to the shared weights is kept
    assert state.of(model) is runtime and state.of(view) is own


def test_a_deep_copied_or_pickled_model_starts_empty():
    model = torch.nn.Linear(2, 2)
    state.of(model).decoder = "step"
    for other in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
        assert state.peek(other) is None and state.of(other).decoder is None
    assert list(model.state_dict()) == ["weight", "bias"]  # not a parameter, buffer or submodule


def test_options_are_the_ones_loaded_with_else_the_environments(monkeypatch):
    """A model's options (issue 48): those pinned at load, else the environment's when read; a
    shallow copy keeps its original's (they describe the shared weights' runtime)."""
    from specviz import settings

    monkeypatch.setenv("SPECVIZ_ARGMAX_HEAD", "0")
    model = torch.nn.Linear(2, 2)
    assert state.of(model).options == settings.options() and state.of(model).options.argmax_head == "0"
    monkeypatch.setenv("SPECVIZ_ARGMAX_HEAD", "on")
    assert state.of(model).options.argmax_head == "on"  # not pinned: follows the process's settings
    pinned = settings.Options(argmax_head="int8", static_decode="0")
    state.of(model).pinned = pinned
    assert state.of(model).options is pinned and state.options_of(model) is pinned
    assert state.of(copy.copy(model)).options is pinned
    assert state.options_of(None) == settings.options()
    monkeypatch.setenv("SPECVIZ_CACHE_DIR", "/from/env")
    assert str(state.cache_home()) == "/from/env" and str(state.cache_home(settings.Options(cache_dir="/given"))) == "/given"


def test_load_model_keeps_the_options_it_is_given_and_the_runtime_reads_them(tmp_path, monkeypatch):
    """load_model(..., options=...) pins them on the model: its static step follows them, not the
    environment (the CLI and the app build them once and pass them down)."""
    from specviz import settings
    from specviz.models import load_model
    from specviz.runtime import static_decode
    from tests.support.tiny import make_tiny_model

    monkeypatch.delenv("SPECVIZ_STATIC_DECODE", raising=False)
    make_tiny_model(tmp_path, seed=3)
    lm = load_model(str(tmp_path), device="cpu", options=settings.Options(static_decode="0"))
    assert state.of(lm.model).pinned == settings.Options(static_decode="0")
    assert static_decode.static_cache(lm.model) is None  # off, as the options say, with the environment unset
    state.of(lm.model).pinned = settings.Options()
    assert static_decode.supports(lm.model) is not None or static_decode.static_cache(lm.model) is not None


def test_the_apps_loads_keep_the_options_read_at_load(tmp_path, monkeypatch):
    """The app's loader (app.limits.load_checked) reads the options once and the model keeps
    them: a later change to the environment does not reach a loaded model's runtime."""
    from specviz.app.limits import load_checked
    from tests.support.tiny import make_tiny_model

    monkeypatch.setenv("SPECVIZ_ALLOW_LOCAL_PATHS", "1")
    monkeypatch.setenv("SPECVIZ_SAMPLED_HEAD", "0")
    make_tiny_model(tmp_path, seed=4)
    lm = load_checked(str(tmp_path), device="cpu")
    monkeypatch.setenv("SPECVIZ_SAMPLED_HEAD", "on")
    assert state.of(lm.model).options.sampled_head == "0"
