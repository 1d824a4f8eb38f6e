"""``relative-proj``: a relative bias projected from a learned bank of distance curves (x-transformers'
``RelativeProjPositionalBias``, the "Inkling" bias).

A bank holds ``num_distance_basis`` curves over the distances ``0 .. max_dist - 1``; each query token mixes them with
weights of its own state ``x_i`` (a linear map to ``heads * num_distance_basis``), so the bias on a key ``d = i - j``
tokens back is that query's curve at ``d``:

    bias[h, i, j] = sum_r (W x_i + b)[h, r] * bank[r, i - j]      for 0 <= i - j < max_dist,     0 otherwise

Keys after the query and beyond ``max_dist`` get no bias (in causal attention the former are masked anyway). Equal to
x-transformers 2.31.10's ``RelativeProjPositionalBias`` with its weights copied, decoding included (its ``seq_len_k``;
``tests/test_relative_proj.py``). One projection per encoding (x-transformers has one per layer: build one encoding
per block for that).

The term reads the query tokens' states, so it travels as a ``logits`` term with ``uses_states`` (``ndpe.Attention``
hands it the tokens it attends over); it decodes with a KV cache, the new tokens' states being all it reads. Positions
are integer token indices (offsets look a curve up); the term is materialized ``(B, heads, Nq, Nk)`` float32, after
the curves ``(B, heads, Nq, max_dist)``.

>>> import ndpe, torch
>>> pe = ndpe.make(dims=1, kind="relative-proj", dim=32, heads=4, max_dist=64)
>>> attn = ndpe.Attention(32, heads=4, causal=True)
>>> attn(torch.randn(2, 10, 32), pe((10,))).shape
torch.Size([2, 10, 32])
"""
from __future__ import annotations

import torch
from einops import rearrange
from torch import Tensor, nn

from ..base import Encoding
from ..checks import check_int
from ..contract import LogitsTerm, PosOut
from ..registry import register
from .dd_alibi import check_states


@register("relative-proj", dims=(1,))
class RelativeProjBias(Encoding):
    """A relative bias mixed per query from a learned bank of distance curves; see the module docstring.

    Args:
        num_distance_basis: curves in the bank (the weights per head and query).
        max_dist: distances the curves cover (``0 .. max_dist - 1`` back from the query).
    """

    has_parameters = True
    takes_key_positions = True  # decodes: the new queries' states against every cached key's offset
    integer_positions = True  # offsets look a curve up
    description = ("relative bias mixed per query from a learned bank of distance curves (x-transformers' "
                   "RelativeProjPositionalBias)")
    colour, marker = "#b2182b", "d"

    def __init__(self, *, dims: int, dim: int, heads: int = 1, num_distance_basis: int = 16, max_dist: int = 1024):
        super().__init__(dims=dims, dim=dim, heads=heads)
        self.num_distance_basis = check_int(num_distance_basis, "num_distance_basis", low=1)
        self.max_dist = check_int(max_dist, "max_dist", low=1)
        self.to_weights = nn.Linear(dim, heads * num_distance_basis)
        self.distance_bank = nn.Parameter(torch.randn(num_distance_basis, max_dist) * 0.02)  # as the reference

    def encode(self, positions: Tensor, grid_shape, key_positions: Tensor | None = None) -> PosOut:
        if not torch.compiler.is_compiling() and not bool((positions == positions.round()).all()):
            raise ValueError("relative-proj looks integer offsets up in its distance curves but got fractional "
                             "positions; pass integer (index) positions")
        keys = positions if key_positions is None else key_positions
        distance = positions.float()[..., :, None, 0] - keys.float()[..., None, :, 0]  # (..., Nq, Nk): i - j
        valid = (distance >= 0) & (distance < self.max_dist)
        index = distance.clamp(0, self.max_dist - 1).long()
        nq, nk = distance.shape[-2:]

        def term(q: Tensor, k: Tensor, x: Tensor) -> Tensor:
            check_states(self, x, k, nq, nk, self.max_dist + 3 * nk)  # the curves, then the gathered term
            weights = rearrange(self.to_weights(x.to(self.to_weights.weight.dtype)), "b n (h r) -> b h n r",
                                h=self.heads)
            curves = (weights @ self.distance_bank).float()  # (B, heads, Nq, max_dist)
            rows = index.expand(*curves.shape[:-1], nk) if index.ndim == 2 else index[:, None].expand(
                *curves.shape[:-1], nk)
            return curves.gather(-1, rows).masked_fill(~valid if valid.ndim == 2 else ~valid[:, None], 0.0)

        return PosOut(logits=LogitsTerm(fn=term, uses_states=True))
