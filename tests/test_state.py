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
