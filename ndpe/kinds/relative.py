"""``relative``: learned relative-position attention biases, clipped tables (Shaw / Swin) or T5 buckets.

Conventions:
- Offset. ``offset = p_i - p_j`` (query minus key), per axis, as Swin's
  ``relative_position_index``; T5 buckets ``memory - context = j - i`` like the T5 code, so
  its "positive" side (second half of the buckets when bidirectional) is keys after the query.
- ``mode="clip"`` (dims 1, 2, 3; Shaw et al. 2018, Swin): each axis offset is clipped to
  ``[-M_a, M_a]`` (``max_distance`` an int or one int per axis, default 16), and one bias per
  head is learned per clipped offset vector: a table ``(prod(2 M_a + 1), heads)`` indexed
  row-major over axes. With ``M_a = window_a - 1`` it is exactly Swin's table and index. A
  grid larger than training never indexes out of range: clipping is explicit.
- ``mode="t5"`` (dims 1): T5 log-spaced buckets, ``num_buckets`` (default 32), ``max_distance``
  (default 128), ``bidirectional`` (True) or causal (keys after the query share bucket 0);
  bucket function identical to x-transformers ``RelativePositionBias._relative_position_bucket``
  (its ``causal`` = our ``not bidirectional``; it multiplies the bias by ``scale``, we do not).
- Positions must be integers (index units): offsets look up a table. Fractional positions
  raise (no silent rounding); batched integer positions (randomized positions, packed
  sequences) are fine, so CAPE's continuous shifts are not usable here but ``"random"`` is.
- Init: ``trunc_normal_(std=0.02)`` exactly as Swin / timm (cut at +-2 absolute, so in effect
  N(0, 0.02^2); T5 inits its embedding with a normal too); not zeros, so gradients flow from the
  first step even through a squared loss.
- Caching: the integer index ``(N, N)`` is cached per grid (and checked against the positions);
  the gather from the learned table runs every forward, since it carries gradients.

>>> import ndpe
>>> pe = ndpe.make(dims=2, kind="relative", dim=64, heads=4, max_distance=6)   # Swin window 7
>>> pe.table.shape, pe((7, 7)).bias.shape
(torch.Size([169, 4]), torch.Size([4, 49, 49]))
"""
from __future__ import annotations

import math
from typing import cast

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor, nn

from ..base import Encoding
from ..cache import TensorCache
from ..checks import check_bool, check_choice, per_axis
from ..contract import PosOut
from ..memory import check_tables
from ..pairs import pair_axes, token_axes
from ..registry import register

MODES = ("clip", "t5")
_CLIP_DEFAULT, _T5_DEFAULT, _T5_BUCKETS = 16, 128, 32


def t5_bucket(relative_position: Tensor, *, bidirectional: bool = True, num_buckets: int = 32,
              max_distance: int = 128) -> Tensor:
    """T5 bucket of integer offsets ``memory - context`` (``j - i``), any shape, as T5 / x-transformers.

    Offsets below ``max_exact`` (half the one-sided buckets) get their own bucket, larger ones share
    log-spaced buckets up to ``max_distance``; bidirectional uses the upper half for keys after the query.

    >>> t5_bucket(torch.tensor([-3, 0, 3]), num_buckets=8, max_distance=16).tolist()
    [2, 0, 6]
    """
    n = -relative_position.long()
    ret = torch.zeros_like(n)
    if bidirectional:
        num_buckets //= 2
        ret = ret + (n < 0).long() * num_buckets
        n = n.abs()
    else:
        n = n.clamp(min=0)
    max_exact = num_buckets // 2
    # log of n >= max_exact only (the where below discards the rest): no log(0) cast to long
    scaled = torch.log(n.clamp(min=max_exact).float() / max_exact) / math.log(max_distance / max_exact)
    large = (max_exact + (scaled * (num_buckets - max_exact)).long()).clamp(max=num_buckets - 1)
    return ret + torch.where(n < max_exact, n, large)


def clip_rows(qc: list[Tensor], kc: list[Tensor], max_distance: tuple[int, ...]) -> Tensor:
    """Table rows of integer per-axis query and key coordinates (broadcasting, :mod:`ndpe.pairs`): per-axis offsets
    ``p_i - p_j`` clipped to ``[-M_a, M_a]``, combined row-major over axes."""
    index = None
    for q, k, m in zip(qc, kc, max_distance):
        row = (q - k).clamp(-m, m) + m
        index = row if index is None else index * (2 * m + 1) + row
    return cast(Tensor, index)  # max_distance has one entry per axis


def clip_index(positions: Tensor, max_distance: tuple[int, ...], key_positions: Tensor | None = None) -> Tensor:
    """Table rows ``(..., N, M)`` of integer query positions ``(..., N, dims)`` and key positions ``(..., M, dims)``
    (default: the queries'): :func:`clip_rows` of every pair (one ``(N, M)`` temporary per axis).

    >>> clip_index(torch.tensor([[0], [1], [5]]), (2,)).tolist()
    [[2, 1, 0], [3, 2, 0], [4, 4, 2]]
    """
    return clip_rows(*pair_axes(positions, key_positions), max_distance)


@register("relative", dims=(1, 2, 3))
class RelativeBias(Encoding):
    """Learned relative-position bias per head; see the module docstring for conventions.

    Args:
        mode: ``"clip"`` (per-axis clipped offset table, dims 1-3) or ``"t5"`` (log buckets, dims 1).
        max_distance: clip: int or per-axis tuple (default 16); t5: int (default 128).
        num_buckets: t5 only (default 32).
        bidirectional: t5 only; False is the causal (decoder) bucketing.
    """

    takes_key_positions = True  # decodes its pairwise term against cached keys
    has_parameters = True
    description = "learned relative bias: clipped offsets (Shaw, Swin) or T5 buckets"
    colour, marker = "#17becf", "*"
    causal_options = {"mode": "t5", "bidirectional": False}  # T5's one-sided buckets (its decoder)

    integer_positions = True  # offsets index a table

    def __init__(self, *, dims: int, dim: int, heads: int = 1, mode: str = "clip",
                 max_distance: int | tuple[int, ...] | None = None, num_buckets: int | None = None,
                 bidirectional: bool = True):
        super().__init__(dims=dims, dim=dim, heads=heads)
        check_choice(mode, "mode", MODES)
        check_bool(bidirectional, "bidirectional")
        self.mode, self.bidirectional = mode, bidirectional
        if mode == "clip":
            if num_buckets is not None or not bidirectional:
                raise ValueError("num_buckets and bidirectional=False apply to mode='t5'; mode='clip' learns "
                                 "one bias per clipped offset in both directions")
            self.max_distance = per_axis(_CLIP_DEFAULT if max_distance is None else max_distance,
                                              dims, "max_distance", low=0, integer=True)
            size = math.prod(2 * m + 1 for m in self.max_distance)
        else:
            if dims != 1:
                raise ValueError(f"relative mode='t5' is 1D only, got dims={dims}; use mode='clip' for 2D/3D")
            self.max_distance = per_axis(_T5_DEFAULT if max_distance is None else max_distance, 1,
                                              "max_distance", low=0, integer=True)
            self.num_buckets = size = _T5_BUCKETS if num_buckets is None else num_buckets
            self._check_buckets()
        check_tables("relative", {"table": (size, heads)}, "use a smaller max_distance (offsets beyond it share the "
                     "edge rows)" if mode == "clip" else "use fewer num_buckets")
        self.table = nn.Parameter(torch.empty(size, heads))  # (entries, heads)
        nn.init.trunc_normal_(self.table, std=0.02)
        self._index_cache = TensorCache()  # the integer index per grid; the table gather runs every forward

    def _check_buckets(self) -> None:
        nb = self.num_buckets
        if isinstance(nb, bool) or not isinstance(nb, int):
            raise TypeError(f"num_buckets must be an int, got {nb!r}")
        low = 4 if self.bidirectional else 2
        if nb < low:
            raise ValueError(f"num_buckets must be >= {low} for bidirectional={self.bidirectional} "
                             f"(at least one exact and one log bucket per side), got {nb}")
        max_exact = (nb // 2 if self.bidirectional else nb) // 2
        if self.max_distance[0] <= max_exact:
            raise ValueError(f"max_distance must exceed the exact buckets ({max_exact}) for num_buckets={nb}, "
                             f"got max_distance={self.max_distance[0]}")

    def pair_words(self) -> int:
        """Float32 words per pair at the peak: the int64 index with its per-axis temporaries, then the gather
        ``(N, N, heads)`` next to the index."""
        return max(8, 2 + self.heads)

    def pair_index(self, qc: list[Tensor], kc: list[Tensor]) -> Tensor:
        """Table rows of integer per-axis query and key coordinates (:mod:`ndpe.pairs`): the one formula of both the
        materialized bias (``table[row]``) and the flex score_mod (``table[row, h]``)."""
        if self.mode == "clip":
            return clip_rows(qc, kc, self.max_distance)
        return t5_bucket(kc[0] - qc[0], bidirectional=self.bidirectional, num_buckets=self.num_buckets,
                         max_distance=self.max_distance[0])  # memory - context = j - i

    def index(self, positions: Tensor, key_positions: Tensor | None = None) -> Tensor:
        """Table rows ``(..., N, M)`` (long) of integer query positions ``(..., N, dims)`` and key positions
        ``(..., M, dims)`` (default: the queries')."""
        keys = None if key_positions is None else key_positions.round().long()
        return self.pair_index(*pair_axes(positions.round().long(), keys))

    def _cached_index(self, positions: Tensor, grid_shape) -> Tensor:
        if torch.compiler.is_compiling() or grid_shape is None or positions.ndim != 2:
            return self.index(positions)
        key = (grid_shape, positions.device)
        hit = self._index_cache.get(key)
        if hit is not None and torch.equal(hit[0], positions):
            return hit[1]
        index = self.index(positions)
        self._index_cache.put(key, (positions.clone(), index), (index,))
        return index

    def encode(self, positions: Tensor, grid_shape, key_positions: Tensor | None = None) -> PosOut:
        if not torch.compiler.is_compiling() and not bool((positions == positions.round()).all()):
            raise ValueError("relative looks integer offsets up in a table but got fractional positions; "
                             "pass integer (index) positions, round them yourself, or use alibi/rope for "
                             "continuous positions")
        if key_positions is None:
            index = self._cached_index(positions, grid_shape)  # (..., N, N)
        else:  # decoding: new queries against every cached key
            index = self.index(positions, key_positions)  # (..., n, M)
        return PosOut(bias=gather_heads_first(index, self.table))

    def clear_cache(self) -> None:
        super().clear_cache()
        if hasattr(self, "_index_cache"):
            self._index_cache.clear()

    def score_bias(self, coords: Tensor, *, q: Tensor | None = None, k: Tensor | None = None):
        """``(b, h, i, j) -> table[row(i, j), h]`` for flex attention (see :meth:`Encoding.score_bias`)."""
        table, axes = self.table, token_axes(coords.round().long())  # (entries, heads), per-axis (N,)
        return lambda b, h, i, j: table[self.pair_index([ax[i] for ax in axes], [ax[j] for ax in axes]), h]


def gather_heads_first(index: Tensor, table: Tensor) -> Tensor:
    """``table[index]`` moved to ``(..., heads, i, j)`` and contiguous (``index`` ``(..., i, j)``, ``table``
    ``(rows, heads)``): SDPA reads a mask row by row, and a heads-last one (strides ``(h, 1, j h, h)``) strides
    across memory on every read. One gather for one grid; per-sample indices gather and then lay the heads out."""
    if index.dim() == 2:
        return table.t().contiguous().index_select(1, index.flatten()).view(table.shape[1], *index.shape)
    return heads_first(F.embedding(index, table))


def heads_first(bias: Tensor) -> Tensor:
    """A pair bias ``(..., i, j, heads)`` as the contiguous ``(..., heads, i, j)`` attention masks take."""
    return rearrange(bias, "... i j h -> ... h i j").contiguous()
