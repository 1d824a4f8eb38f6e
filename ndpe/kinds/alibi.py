"""``alibi``: Attention with Linear Biases (Press et al. 2022), on 1, 2 or 3 positional axes.

Conventions:
- Slopes. Head ``h = 1..H`` gets ``2 ** (-8 h / H)`` when ``H`` is a power of two (8 heads:
  1/2, 1/4, ..., 1/256). Otherwise the paper's rule (official code, x-transformers
  ``AlibiPositionalBias._get_slopes``): the slopes of the closest power of two ``P < H``, then
  every other slope of ``2P`` for the remaining ``H - P`` heads.
- Bias. ``bias[h, i, j] = -slope[h] * dist(p_i, p_j)``: it depends only on the offset length, so
  it is translation invariant. 1D bidirectional is the symmetric ``-slope * |i - j|`` (what
  x-transformers builds); ``distance`` picks the N-D length, ``"euclidean"`` (default) or
  ``"manhattan"`` (sum of per-axis ``|offset|``; equal in 1D).
- Causal (1D only). ``causal=True`` is the paper's causal form ``-slope * (i - j)`` for keys
  ``j <= i``; the upper triangle (future keys) is 0 and must be masked by the attention
  (``ndpe.Attention(causal=True)`` adds the ``-inf`` triangle). On ``j <= i`` both forms agree,
  so a causal model gets the same logits either way; with ``causal=True`` the tensor itself
  says the future carries no distance penalty, and ``dims > 1`` is refused (no token order).
- Coordinates are ``index`` units (token steps); fractional or augmented positions are fine.
- Parameter-free: the base caches the bias per grid. Output ``(heads, N, N)`` float32, or
  ``(B, heads, N, N)`` for batched positions. Memory: ``heads * N * N * 4`` bytes (docs/bias.md);
  :mod:`ndpe.flex` gives a ``score_mod`` that never builds it.

>>> import ndpe
>>> pe = ndpe.make(dims=1, kind="alibi", dim=64, heads=8)
>>> pe.slopes[:3].tolist()
[0.5, 0.25, 0.125]
>>> pe((5,)).bias.shape
torch.Size([8, 5, 5])
"""
from __future__ import annotations

import math
from typing import cast

import torch
from einops import rearrange
from torch import Tensor

from ..base import Encoding
from ..checks import check_bool, check_choice, check_int
from ..contract import PosOut
from ..registry import register

DISTANCES = ("euclidean", "manhattan")


def alibi_slopes(heads: int) -> list[float]:
    """The paper's per-head slopes ``(heads,)``: geometric ``2 ** (-8 h / heads)`` for powers of two.

    >>> alibi_slopes(4)
    [0.25, 0.0625, 0.015625, 0.00390625]
    """
    check_int(heads, "heads", low=1)

    def power_of_two(n: int) -> list[float]:
        return [2.0 ** (-8.0 * h / n) for h in range(1, n + 1)]

    closest = 2 ** math.floor(math.log2(heads))
    if closest == heads:
        return power_of_two(heads)
    return power_of_two(closest) + power_of_two(2 * closest)[0::2][: heads - closest]


def offset_length(positions: Tensor, distance: str = "euclidean", key_positions: Tensor | None = None) -> Tensor:
    """Pairwise offset lengths ``(..., N, M)`` of query positions ``(..., N, dims)`` and key positions
    ``(..., M, dims)`` (default: the queries'): ``||p_i - p_j||``."""
    keys = positions if key_positions is None else key_positions
    offsets = positions[..., :, None, :] - keys[..., None, :, :]  # (..., N, M, dims): p_i - p_j
    if distance == "euclidean":
        return offsets.square().sum(-1).sqrt()
    if distance == "manhattan":
        return offsets.abs().sum(-1)
    raise ValueError(f"distance must be one of {DISTANCES}, got {distance!r}")


@register("alibi", dims=(1, 2, 3))
class ALiBi(Encoding):
    """ALiBi attention bias ``-slope[h] * ||p_i - p_j||``; see the module docstring for conventions.

    Args:
        causal: 1D only; the paper's causal form (0 above the diagonal, to be masked).
        distance: ``"euclidean"`` (default) or ``"manhattan"`` offset length for dims > 1.
    """

    takes_key_positions = True  # decodes its pairwise term against cached keys

    slopes: Tensor  # (heads,) float32 buffer

    def __init__(self, *, dims: int, dim: int, heads: int = 1, causal: bool = False, distance: str = "euclidean"):
        super().__init__(dims=dims, dim=dim, heads=heads)
        check_bool(causal, "causal")
        if causal and dims != 1:
            raise ValueError(f"alibi causal=True needs dims=1 (a token order), got dims={dims}; "
                             "use the symmetric N-D form (causal=False)")
        check_choice(distance, "distance", DISTANCES)
        self.causal, self.distance = causal, distance
        self.register_buffer("slopes", torch.tensor(alibi_slopes(heads), dtype=torch.float32), persistent=False)

    def bias_bytes(self, batch: int, num_grid: int, num_prefix: int) -> int:
        """Peak bytes: offsets and their squares ``(N, N, dims)`` then the bias ``(heads, N, N)`` next to the
        lengths ``(N, N)``, plus the padded copy ``(heads, T, T)`` with a prefix; all float32."""
        n2, t2 = num_grid * num_grid, (num_grid + num_prefix) ** 2
        floats = max((2 * self.dims + 1) * n2, (self.heads + 1) * n2 + (self.heads * t2 if num_prefix else 0))
        return 4 * batch * floats

    def encode(self, positions: Tensor, grid_shape, key_positions: Tensor | None = None) -> PosOut:
        keys = positions if key_positions is None else key_positions
        length = offset_length(positions.float(), self.distance, keys.float())  # (..., N, M)
        if self.causal:  # keys after the query: 0, masked by the attention
            length = torch.where(keys[..., None, :, 0] > positions[..., :, None, 0], 0.0, length)
        slopes = rearrange(self.slopes, "h -> h 1 1")
        bias = -slopes * length.unsqueeze(-3)  # (..., heads, N, N)
        return PosOut(bias=bias)

    def score_bias(self, coords: Tensor, *, q: Tensor | None = None, k: Tensor | None = None):
        """``(b, h, i, j) -> -slope_h * distance(i, j)`` for flex attention (see :meth:`Encoding.score_bias`)."""
        axes, slopes = [coords[:, a].contiguous() for a in range(coords.shape[1])], self.slopes

        def bias(b, h, i, j):
            offsets = [ax[i] - ax[j] for ax in axes]
            if self.distance == "manhattan" or len(axes) == 1:
                length = sum(o.abs() for o in offsets)
            else:
                length = cast(Tensor, sum(o * o for o in offsets)).sqrt()
            if self.causal:
                length = torch.where(j > i, 0.0, length)
            return -slopes[h] * length

        return bias
