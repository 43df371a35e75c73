"""The app's ``gr.Blocks``: Gradio's, with outputs a frame leaves out passed over instead of rebuilt.

A handler returns ``{name: value}`` and a name left out keeps its component as it is
(:func:`specviz.ui.handlers.by_name`); Gradio fills those outputs with ``gr.skip()``. Gradio 6
treats a skip as a property update: it constructs the component anew from its arguments and
recomputes its config (``inspect.signature`` of its constructor, a Plot's JSON schema) for every
output left out, in every frame. A Step's two frames leave out about 30 of the playground's 46
outputs each. :class:`Blocks` hands Gradio only the outputs a frame sets and gives each of the
others the update Gradio's rebuild would have sent (``postprocess_update_dict`` of the skip; a
``gr.State`` left out stays Gradio's): the page receives the same data, the server does less work
(a Step's server CPU 25-35% lower on the tiny test models, 2026-12-07; ``tests/test_blocks.py``).
"""

from __future__ import annotations

import copy
from typing import Any

import gradio as gr
from gradio.blocks import convert_component_dict_to_list, postprocess_update_dict

__all__ = ["Blocks"]

_SKIP = {"__type__": "update"}  # what gr.skip() is


def _is_skip(value: Any) -> bool:
    return isinstance(value, dict) and value == _SKIP


class Blocks(gr.Blocks):
    async def postprocess_data(self, block_fn, predictions, state):  # noqa: D102 - Gradio's, minus the skips
        outputs = list(block_fn.outputs)
        if isinstance(predictions, dict) and predictions and all(isinstance(k, gr.blocks.Block) for k in predictions):
            predictions = convert_component_dict_to_list(outputs, predictions)
        if block_fn.batch or len(outputs) < 2 or not isinstance(predictions, (list, tuple)) or len(predictions) != len(outputs):
            return await super().postprocess_data(block_fn, predictions, state)
        kept = [i for i, value in enumerate(predictions) if not _is_skip(value) or outputs[i].stateful]  # a gr.State: Gradio's
        if not kept or len(kept) == len(outputs):  # nothing set, or nothing left out: Gradio's own path
            return await super().postprocess_data(block_fn, predictions, state)
        fn = copy.copy(block_fn)  # the same event, with only the outputs this frame sets
        fn.outputs = [outputs[i] for i in kept]
        values = [predictions[i] for i in kept]
        done = await super().postprocess_data(fn, values[0] if len(kept) == 1 else values, state)
        out: list[Any] = [postprocess_update_dict(block, dict(_SKIP), postprocess=False) for block in outputs]
        for i, value in zip(kept, done):
            out[i] = value
        return out
