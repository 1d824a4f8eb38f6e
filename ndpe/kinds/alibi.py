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
- Head-level control (x-transformers ``AlibiPositionalBias(heads, total_heads, slopes=)``, its
  ``alibi_num_heads``): ``alibi_heads=n`` biases the first ``n`` heads, ``alibi_heads=[h, ...]`` those heads, in
  that order; the other heads get no bias (0: they attend by content alone). ``slopes=`` gives the biased heads'
  slopes, one each, in place of the paper's (e.g. a tensor-parallel shard's share of the full model's slopes);
  by default they are the paper's slopes for that many heads (as x-transformers: ``alibi_slopes(n)``).
  ``pe.slopes`` holds every head's slope, 0 for the unbiased ones.
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
from typing import Sequence, cast

import torch
from torch import Tensor

from ..base import Encoding
from ..checks import check_bool, check_choice, check_int, is_int, is_number, shown
from ..contract import PosOut
from ..coords import FLOAT32_MAX, output_max, pair_limit, tightest
from ..pairs import pair_axes, sum_of, token_axes
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


def biased_heads(alibi_heads: int | Sequence[int] | None, heads: int) -> tuple[int, ...]:
    """The indices of the heads ALiBi biases: all, the first ``n``, or the listed ones (checked, distinct).

    >>> biased_heads(2, 4), biased_heads([3, 1], 4)
    ((0, 1), (3, 1))
    """
    if alibi_heads is None:
        return tuple(range(heads))
    if is_int(alibi_heads):
        alibi_heads = int(cast(int, alibi_heads))
        if not 1 <= alibi_heads <= heads:
            raise ValueError(f"alibi_heads must be a number of heads in 1..heads={heads} or a list of head indices, "
                             f"got {alibi_heads}")
        return tuple(range(alibi_heads))
    if isinstance(alibi_heads, (str, bytes)) or not isinstance(alibi_heads, Sequence) or not alibi_heads:
        raise TypeError(f"alibi_heads must be a number of heads or a non-empty list of head indices, got {alibi_heads!r}")
    if not all(is_int(h) and 0 <= h < heads for h in alibi_heads) or len(set(alibi_heads)) != len(alibi_heads):
        raise ValueError(f"alibi_heads must list distinct head indices in 0..{heads - 1}, got {alibi_heads!r}")
    return tuple(alibi_heads)


def check_slopes(slopes: Sequence[float] | Tensor, n: int) -> tuple[float, ...]:
    """Caller-supplied slopes: a list (or 1-D tensor) of ``n`` finite numbers, one per biased head."""
    values = slopes.tolist() if isinstance(slopes, Tensor) else slopes
    if (not isinstance(values, (list, tuple)) or len(values) != n
            or not all(is_number(v) and math.isfinite(v) for v in values)):
        raise ValueError(f"slopes must be a list of {n} finite numbers, one per biased head (alibi_heads), or a 1-D "
                         f"tensor of them, got {shown(slopes)}")
    return tuple(float(v) for v in values)


@register("alibi", dims=(1, 2, 3))
class ALiBi(Encoding):
    """ALiBi attention bias ``-slope[h] * ||p_i - p_j||``; see the module docstring for conventions.

    Args:
        causal: 1D only; the paper's causal form (0 above the diagonal, to be masked).
        distance: ``"euclidean"`` (default) or ``"manhattan"`` offset length for dims > 1.
        alibi_heads: the heads that get a bias: a number ``n`` (the first ``n``, x-transformers'
            ``alibi_num_heads``) or a list of head indices; default every head.
        slopes: the biased heads' slopes, one per head in ``alibi_heads`` (finite numbers); default the paper's.
    """

    takes_key_positions = True  # decodes its pairwise term against cached keys
    description = "ALiBi (Press et al. 2022); N-D by Euclidean / Manhattan distance"
    colour, marker = "#2ca02c", "^"
    causal_options = {"causal": True}  # the paper's causal form

    slopes: Tensor  # (heads,) float32 buffer

    def __init__(self, *, dims: int, dim: int, heads: int = 1, causal: bool = False, distance: str = "euclidean",
                 alibi_heads: int | Sequence[int] | None = None, slopes: Sequence[float] | None = None):
        super().__init__(dims=dims, dim=dim, heads=heads)
        check_bool(causal, "causal")
        if causal and dims != 1:
            raise ValueError(f"alibi causal=True needs dims=1 (a token order), got dims={dims}; "
                             "use the symmetric N-D form (causal=False)")
        check_choice(distance, "distance", DISTANCES)
        self.causal, self.distance = causal, distance
        self.alibi_heads = biased_heads(alibi_heads, heads)
        n = len(self.alibi_heads)
        chosen = alibi_slopes(n) if slopes is None else check_slopes(slopes, n)
        every = torch.zeros(heads, dtype=torch.float32)  # unbiased heads: slope 0
        every[list(self.alibi_heads)] = torch.tensor(chosen, dtype=torch.float32)
        self.register_buffer("slopes", every, persistent=False)
        self.steepest = max(abs(s) for s in chosen)  # the largest |slope|, for position_limit without reading a buffer

    def position_limit(self, dtype: torch.dtype = torch.float32) -> tuple[float, str] | None:
        """Coordinates whose offsets and lengths stay finite in float32 and whose bias ``slope * length`` in ``dtype``:
        a length is at most ``2 |coordinate|`` per axis, times ``sqrt(dims)`` (euclidean) or ``dims`` (manhattan)."""
        squared = self.distance == "euclidean" and self.dims > 1
        per_unit = 2 * (math.sqrt(self.dims) if squared else self.dims)  # the longest length per unit of |coordinate|
        name = str(dtype).removeprefix("torch.")
        bias = None if not self.steepest else (
            output_max(dtype) / (self.steepest * per_unit),
            f"where alibi's bias (steepest slope {self.steepest:.3g}) overflows {name}")
        return tightest(pair_limit(self.kind, self.dims, squared), (FLOAT32_MAX / per_unit, "where alibi's float32 "
                        "distances overflow"), bias)

    def pair_words(self) -> int:
        """Float32 words per pair at the peak: the offsets and their squares per axis and the length, then the
        bias next to the length."""
        return max(2 * self.dims + 1, self.heads + 1)

    def pair_bias(self, qc: list[Tensor], kc: list[Tensor], h: Tensor) -> Tensor:
        """``-slope[h] * dist(p_i, p_j)`` of per-axis query and key coordinates (:mod:`ndpe.pairs`), heads ``h``: the
        one formula of both the materialized bias and the flex score_mod."""
        offsets = [q - k for q, k in zip(qc, kc)]  # p_i - p_j per axis
        if self.distance == "manhattan" or len(offsets) == 1:
            length = sum_of(o.abs() for o in offsets)
        else:
            length = sum_of(o * o for o in offsets).sqrt()
        if self.causal:  # keys after the query: 0, masked by the attention
            length = torch.where(kc[0] > qc[0], 0.0, length)
        return -self.slopes[h] * length

    def encode(self, positions: Tensor, grid_shape, key_positions: Tensor | None = None) -> PosOut:
        qc, kc = pair_axes(positions.float()[..., None, :, :], None if key_positions is None
                           else key_positions.float()[..., None, :, :])  # (..., 1, Nq, 1), (..., 1, 1, Nk): a heads axis
        heads = torch.arange(self.heads, device=positions.device)[:, None, None]
        return PosOut(bias=self.pair_bias(qc, kc, heads))  # (..., heads, Nq, Nk)

    def score_bias(self, coords: Tensor, *, q: Tensor | None = None, k: Tensor | None = None):
        """``(b, h, i, j) -> -slope_h * distance(i, j)`` for flex attention (see :meth:`Encoding.score_bias`)."""
        axes = token_axes(coords.float())
        return lambda b, h, i, j: self.pair_bias([ax[i] for ax in axes], [ax[j] for ax in axes], h)
