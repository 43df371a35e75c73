"""The additive attention masks of one static decode step (:mod:`specviz.runtime.static_decode`).

n new tokens go to slots p..p+n-1; attention reads the first S >= p + n slots. A chain's token
sits at its slot's position and sees every slot up to its own; a tree's node sits at its depth's
position and sees the context and the tree slots ``visible`` allows, the last T slots before p
holding nodes fed earlier this step at positions ``fed``. A sliding window applies by position.
"""

from __future__ import annotations

import torch


def step_masks(p: int, n: int, span: int, window: int | None, positions: torch.Tensor | None = None,
               visible: torch.Tensor | None = None, fed: torch.Tensor | None = None,
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """-> (slots [n], positions [n], mask [n, S], mask_local [n, S]): 0 where a token sees a slot,
    -inf elsewhere; mask_local adds the sliding ``window`` (the same tensor without one).
    positions [n] (a tree's, by depth; None: a chain's, its slots), visible [n, T + n] bool,
    fed [T] (the positions held by the T tree slots before p; None: none)."""
    fed = torch.zeros(0, dtype=torch.long) if fed is None else fed
    c = p - int(fed.shape[0])  # the context's slots: 0..c-1
    slots = torch.arange(p, p + n)  # [n]
    index = torch.arange(span)  # [S]
    if positions is None:
        positions = slots
        seen = index[None, :] <= slots[:, None]  # [n, S] causal
    else:
        seen = torch.zeros(n, span, dtype=torch.bool)
        seen[:, :c] = True  # the context
        seen[:, c : p + n] = visible  # the tree slots: ancestors and itself
    mask = torch.zeros(n, span).masked_fill_(~seen, float("-inf"))  # [n, S]
    if not window:
        return slots, positions, mask, mask
    where = torch.cat([index[:c], fed, positions, index[p + n :]])  # [S] the position held in each slot
    local = seen & (positions[:, None] - where[None, :] < window)
    return slots, positions, mask, torch.zeros(n, span).masked_fill_(~local, float("-inf"))
