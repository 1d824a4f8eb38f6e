"""One formula per pairwise kind: its term is a function of per-axis query and key coordinates.

A bias kind writes its formula once, on per-axis coordinates that broadcast against each other. ``encode``
evaluates it on every pair at once (queries ``(..., Nq, 1)`` against keys ``(..., 1, Nk)``, from
:func:`pair_axes`); :meth:`ndpe.base.Encoding.score_bias` evaluates the same function per logit for flex
attention, on the coordinates of grid tokens ``i`` and ``j`` (``[ax[i] for ax in token_axes(coords)]``).

>>> q, k = pair_axes(torch.tensor([[0.0], [1.0], [3.0]]))
>>> (q[0] - k[0]).tolist()                              # p_i - p_j of every pair
[[0.0, -1.0, -3.0], [1.0, 0.0, -2.0], [3.0, 2.0, 0.0]]
>>> [ax[2] - ax[0] for ax in token_axes(torch.tensor([[0.0], [1.0], [3.0]]))]   # one pair, as flex sees it
[tensor(3.)]
"""
from __future__ import annotations

import torch
from torch import Tensor


def pair_axes(queries: Tensor, keys: Tensor | None = None) -> tuple[list[Tensor], list[Tensor]]:
    """Per-axis coordinates of queries ``(..., Nq, dims)`` as ``(..., Nq, 1)`` and of keys ``(..., Nk, dims)``
    (default: the queries) as ``(..., 1, Nk)``: a formula of them broadcasts to every pair ``(..., Nq, Nk)``."""
    keys = queries if keys is None else keys
    return ([queries[..., :, None, a] for a in range(queries.shape[-1])],
            [keys[..., None, :, a] for a in range(keys.shape[-1])])


def token_axes(coords: Tensor) -> list[Tensor]:
    """Per-axis coordinates ``(N,)`` of grid tokens ``(N, dims)``, indexed by flex attention's token indices."""
    return [coords[:, a].contiguous() for a in range(coords.shape[-1])]


def sum_of(terms) -> Tensor:
    """The sum of per-axis tensors, left to right (``sum()`` typed as a tensor)."""
    it = iter(terms)
    total = next(it)
    for t in it:
        total = total + t
    return total


def euclidean(offsets: list[Tensor]) -> Tensor:
    """``||o||`` of per-axis offsets: ``torch.linalg.vector_norm`` on pairs' grids, its formula ``sqrt(sum o^2)`` on
    one logit's 0-d offsets (flex attention cannot lower a stack there); equal up to the last bit."""
    if offsets[0].dim() == 0:
        return sum_of(o * o for o in offsets).sqrt()
    return torch.linalg.vector_norm(torch.stack(offsets, -1), dim=-1)
