"""``point-transformer``: Point Transformer's learned MLP of relative positions (Zhao et al. 2021) as an attention bias.

Points need no grid: positions are any coordinates ``(N, dims)`` (LiDAR, molecules; 3D usually), passed as
``positions=``. The paper's position encoding is ``delta_ij = theta(p_i - p_j)``, ``theta`` "two linear layers with one
ReLU nonlinearity"; here it gives one logit term per head:

    bias[h, i, j] = W2[h] . relu(W1 (p_i - p_j) + b1) + b2[h]        (W1: hidden x dims, W2: heads x hidden)

so the bias depends on the offset alone: a shared translation of the points leaves it unchanged (rotations do not:
the offsets are read in the points' own frame, as the paper's). ``neighbors=k`` keeps the paper's local attention: each
query attends to its ``k`` nearest points (itself included, Euclidean; ties broken by ``topk``), the other keys get
``-inf``. ``offset="j-i"`` reads ``p_j - p_i`` instead, as the official code's ``queryandgroup`` groups neighbours
(its ``linear_p`` is ``Linear(3, 3)``, ``BatchNorm1d(3)``, ReLU, ``Linear(3, out_planes)``; in eval mode the batch
norm is an affine map, folded into ``W1, b1``: ``tests/test_point_transformer.py`` ports it). ``hidden=3`` is that
code's width.

What does not fit: the paper's vector attention (a softmax per channel of ``gamma(q_i - k_j + delta_ij)``, and
``delta_ij`` added to each value) replaces the dot product, and no field of the contract carries a term per pair and
channel; the scalar per-head bias is its part that acts on the attention logits. Materialized ``(heads, Nq, Nk)``
float32 after the ``(Nq, Nk, hidden)`` hidden layer (:meth:`pair_words`). Decoding with a KV cache is exact without
``neighbors`` (the term pairs each new query with every cached key) and refused with it (the nearest points of a
query in a full causal sequence include later ones).

>>> import ndpe, torch
>>> pe = ndpe.make(dims=3, kind="point-transformer", dim=64, heads=4, neighbors=8)
>>> points = torch.randn(100, 3)
>>> bias = pe(positions=points).bias
>>> bias.shape, int(torch.isfinite(bias[0, 0]).sum())        # 8 neighbours per query
(torch.Size([4, 100, 100]), 8)
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..base import Encoding
from ..checks import check_choice, check_int
from ..contract import PosOut
from ..coords import FLOAT32_MAX, output_max, pair_limit, tightest
from ..registry import register

OFFSETS = ("i-j", "j-i")


@register("point-transformer", dims=(1, 2, 3))
class PointTransformerBias(Encoding):
    """A bias per head from an MLP of the offset ``p_i - p_j`` (Point Transformer); see the module docstring.

    Args:
        hidden: width of the MLP's hidden layer (the official code's 3).
        neighbors: each query attends to its ``k`` nearest points only (None: to every point).
        offset: ``"i-j"`` (the paper's ``p_i - p_j``) or ``"j-i"`` (the official code's grouping).
    """

    has_parameters = True
    takes_key_positions = True  # decodes its pairwise term against cached keys (without neighbors)
    description = "Point Transformer's MLP of relative positions (Zhao et al. 2021) as a bias per head; k nearest points"
    colour, marker = "#6a3d9a", "p"

    def __init__(self, *, dims: int, dim: int, heads: int = 1, hidden: int = 3, neighbors: int | None = None,
                 offset: str = "i-j"):
        super().__init__(dims=dims, dim=dim, heads=heads)
        self.hidden = check_int(hidden, "hidden", low=1)
        self.neighbors = None if neighbors is None else check_int(neighbors, "neighbors", low=1)
        self.offset = check_choice(offset, "offset", OFFSETS)
        self.first = nn.Linear(dims, hidden)
        self.second = nn.Linear(hidden, heads)

    def pair_words(self) -> int:
        """Float32 words per pair at the peak: the offsets, the hidden layer and its ReLU, the heads' bias."""
        return self.dims + 2 * self.hidden + self.heads + 1

    def position_limit(self, dtype: torch.dtype = torch.float32) -> tuple[float, str] | None:
        """Offsets (up to twice a coordinate per axis) stay finite, and so do the hidden layer in float32 and the bias
        in ``dtype``, bounded from the weights' absolute sums (reads the parameters)."""
        w1, b1 = self.first.weight.detach().abs().float(), self.first.bias.detach().abs().float()
        w2, b2 = self.second.weight.detach().abs().float(), self.second.bias.detach().abs().float()
        per_unit = 2 * w1.sum(1)  # |hidden_k| <= per_unit_k * L + |b1_k|
        slope, floor = float((w2 * per_unit).sum(1).max()), float((w2 @ b1 + b2).max())
        name = str(dtype).removeprefix("torch.")
        hidden = (FLOAT32_MAX / 2 / max(float(per_unit.max()), 1e-30), "where point-transformer's hidden layer "
                  "overflows float32")
        bias = None if slope == 0 else (max(output_max(dtype) / 2 - floor, 0.0) / slope,
                                        f"where point-transformer's bias overflows {name}")
        return tightest(pair_limit(self.kind, self.dims, self.neighbors is not None), hidden, bias)

    def pair_bias(self, offsets: Tensor) -> Tensor:
        """``(..., heads, Nq, Nk)`` of offsets ``p_i - p_j`` ``(..., Nq, Nk, dims)``: the MLP, then the heads first."""
        if self.offset == "j-i":
            offsets = -offsets
        weight = self.first.weight
        bias = self.second(F.relu(self.first(offsets.to(weight.dtype)))).float()
        return bias.movedim(-1, -3)

    def encode(self, positions: Tensor, grid_shape, key_positions: Tensor | None = None) -> PosOut:
        if key_positions is not None and self.neighbors is not None:
            raise ValueError("point-transformer with neighbors= cannot decode with a KV cache: a query's nearest points "
                             "in the full sequence may come after it; build it without neighbors to decode")
        keys = positions if key_positions is None else key_positions
        offsets = positions.float()[..., :, None, :] - keys.float()[..., None, :, :]  # (..., Nq, Nk, dims)
        bias = self.pair_bias(offsets)
        if self.neighbors is not None:
            k = min(self.neighbors, offsets.shape[-2])
            nearest = offsets.square().sum(-1).topk(k, dim=-1, largest=False).indices  # (..., Nq, k)
            near = torch.zeros(offsets.shape[:-1], dtype=torch.bool, device=offsets.device).scatter_(-1, nearest, True)
            bias = bias.masked_fill(~near[..., None, :, :], float("-inf"))
        return PosOut(bias=bias)
