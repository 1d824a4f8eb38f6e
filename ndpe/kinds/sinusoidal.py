"""``sinusoidal``: the fixed sin/cos encoding of "Attention Is All You Need", per axis, added to tokens.

For one axis with ``d`` channels and coordinate ``p`` (Vaswani et al. 2017)::

    PE(p, 2i)   = sin(p * w_i)        w_i = 1 / temperature ** (2i / d),   i = 0 .. d/2 - 1
    PE(p, 2i+1) = cos(p * w_i)

N-D (``combine``):
    ``"concat"`` (default; timm / MAE / DeiT-3): axis ``a`` gets its own ``d_a = axis_dims[a]`` channels,
        ``[axis 0 | axis 1 | ...]`` in ``ij`` order, each axis with its own frequencies
        ``w_i = temperature ** (-2i / d_a)``. Values in [-1, 1]. ``axis_dims`` (like rope's) is a tuple
        of even channel counts, one per axis, summing to ``dim``. Its default is the equal split
        ``dim / dims`` when ``dim % (2 * dims) == 0`` (the layout of timm and positional-encodings);
        any other even ``dim >= 2 * dims`` is split into sin/cos pairs as evenly as possible, the
        earlier axes taking the extra pairs: 2D ``dim=10`` -> ``(6, 4)``, 3D ``dim=16`` -> ``(6, 6, 4)``.
    ``"add"``: every axis spans all ``d = dim`` channels and the per-axis tables are summed. Needs
        ``dim % 2 == 0``. Values in [-dims, dims]. The axes share their frequencies, so the encoding is
        symmetric: ``(i, j)`` and ``(j, i)`` get the same vector (use ``"concat"`` to tell them apart).

Channel order (``layout``) inside the output:
    ``"interleaved"`` (default): ``sin w_0, cos w_0, sin w_1, cos w_1, ...`` per axis (the formula above).
    ``"blocks"``: ``sin w_0 .. sin w_{d/2-1}, cos w_0 .. cos w_{d/2-1}`` per axis (MAE, timm 1D).
    ``"sin_cos"``: the sines of every axis, then the cosines of every axis:
        ``[sin axis 0, sin axis 1, ..., cos axis 0, cos axis 1, ...]``. With ``"add"`` equal to ``"blocks"``.
All layouts are the same encoding up to a fixed channel permutation.

Added or concatenated to the tokens (``cat_dim``): by default (``cat_dim=0``) the table has ``dim`` channels and is
added (``add``). ``cat_dim=c`` builds a ``c``-channel table instead (``axis_dims`` then sum to ``c``) and concatenates it
(``cat``), as ``coord`` does its coordinates: a model embeds its tokens to ``dim - c`` channels and
:func:`ndpe.apply_tokens` brings them to ``dim``, so token and position keep channels of their own.

Peers (tested in ``tests/test_sinusoidal.py``):
    * timm ``build_sincos2d_pos_embed(feat_shape=(H, W), dim)`` == ``combine="concat", layout="sin_cos"``
      (its default ``interleave_sin_cos=False``), and ``layout="blocks"`` with ``interleave_sin_cos=True``.
      Keep timm's ``reverse_coord=False``: with ``True`` it encodes ``(W, H)`` and its tokens come out
      column-major. MAE's ``get_2d_sincos_pos_embed`` puts the column (w) half first.
    * positional-encodings ``PositionalEncoding1D/2D/3D(dim)`` == ``combine="concat", layout="interleaved"``
      when ``dim % (2 * dims) == 0``. Otherwise they round each axis up to
      ``ceil(dim / (2 * dims)) * 2`` channels and truncate the last axis (2D ``dim=6``: rows get 4 channels,
      cols 2, at frequencies meant for 4); ndpe's default then gives cols a 2-channel table of their own
      (``axis_dims=(4, 2)``), so it does not match there.
"""
from __future__ import annotations

from typing import Sequence

import torch
from einops import rearrange
from torch import Tensor

from ..base import Encoding
from ..checks import check_cat_dim, check_choice, check_number
from ..contract import PosOut
from ..registry import register

COMBINES = ("concat", "add")
# (sin|cos) s, axis a, frequency f -> channels; "add" sums over axes first (a = 1).
LAYOUTS = {
    "interleaved": "s ... a f -> ... (a f s)",
    "blocks": "s ... a f -> ... (a s f)",
    "sin_cos": "s ... a f -> ... (s a f)",
}


def _nearest_valid(dim: int, dims: int) -> str:
    """The even dims closest to ``dim`` that give every one of ``dims`` axes at least one sin/cos pair."""
    low = 2 * dims
    if dim < low:
        return f"dim >= {low}, e.g. {low}"
    below, above = (dim - 1, dim + 1) if dim % 2 else (dim, dim)
    return f"{below} or {above}"


def resolve_axis_dims(dim: int, dims: int, axis_dims: Sequence[int] | None) -> tuple[int, ...]:
    """Channels per axis for ``combine="concat"``: checked ``axis_dims`` or the default split of ``dim``.

    The default is ``(dim // dims,) * dims`` when ``dim % (2 * dims) == 0``; otherwise ``dim // 2`` sin/cos
    pairs shared as evenly as possible, the first axes taking one extra pair each.

    >>> resolve_axis_dims(24, 3, None), resolve_axis_dims(16, 3, None), resolve_axis_dims(10, 2, None)
    ((8, 8, 8), (6, 6, 4), (6, 4))
    """
    if axis_dims is None:
        if dim % 2 or dim < 2 * dims:
            also = "" if dim % 2 else " (or combine='add': every axis spans all channels)"
            raise ValueError(f"sinusoidal combine='concat' needs an even dim with at least one sin/cos pair per "
                             f"axis (dim >= 2 * dims = {2 * dims}), got dim={dim}; nearest valid: "
                             f"{_nearest_valid(dim, dims)}{also}")
        pairs, extra = divmod(dim // 2, dims)
        return tuple(2 * (pairs + (a < extra)) for a in range(dims))
    if isinstance(axis_dims, (int, str)) or not all(isinstance(d, int) and not isinstance(d, bool)
                                                    for d in axis_dims):
        raise TypeError(f"sinusoidal axis_dims must be a tuple of {dims} ints (channels per axis), "
                        f"got {axis_dims!r}")
    axis_dims = tuple(axis_dims)
    if len(axis_dims) != dims:
        raise ValueError(f"sinusoidal axis_dims must have one entry per axis ({dims}), got {axis_dims}")
    if any(d < 2 or d % 2 for d in axis_dims):
        raise ValueError(f"sinusoidal axis_dims entries must be even and >= 2 (sin/cos pairs), got {axis_dims}")
    if sum(axis_dims) != dim:
        raise ValueError(f"sinusoidal axis_dims {axis_dims} sum to {sum(axis_dims)} channels but dim is {dim}")
    return axis_dims


@register("sinusoidal")
class Sinusoidal(Encoding):
    """Fixed sin/cos table added to tokens: ``add`` is ``(N, dim)`` (``(B, N, dim)`` for batched positions).

    Args:
        combine: ``"concat"`` (each axis its share of channels) or ``"add"`` (tables summed).
        temperature: the base of the wavelengths (10000 in the paper).
        layout: channel order, ``"interleaved"`` (paper), ``"blocks"`` or ``"sin_cos"`` (timm 2D).
        coords: coordinate units, ``"index"`` (0..n-1, default), ``"pixel"`` or ``"centered"``.
        axis_dims: ``combine="concat"`` only: channels per axis (even, >= 2, summing to ``dim``, or to ``cat_dim``);
            default the equal split, or the even-pair split with the extra pairs on the first axes.
        cat_dim: 0 (default): the table is added to the tokens; ``c`` in ``1 .. dim - 1``: a ``c``-channel table
            concatenated to tokens of ``dim - c`` channels (``pe.cat_dim``, as ``coord``).

    >>> import ndpe
    >>> pe = ndpe.make(dims=2, kind="sinusoidal", dim=64)
    >>> pe((14, 14)).add.shape
    torch.Size([196, 64])
    """

    description = "Vaswani et al. 2017 per axis"
    colour, marker = "#ff7f0e", "D"

    def __init__(self, *, dims: int, dim: int, heads: int = 1, combine: str = "concat",
                 temperature: float = 10000.0, layout: str = "interleaved", coords: str = "index",
                 axis_dims: Sequence[int] | None = None, cat_dim: int = 0):
        super().__init__(dims=dims, dim=dim, heads=heads)
        self.cat_dim = check_cat_dim(cat_dim, dim, "sinusoidal")
        width = cat_dim or dim  # the table's channels
        check_choice(combine, "combine", COMBINES)
        check_choice(layout, "layout", tuple(LAYOUTS))
        check_number(temperature, "temperature", low=0.0, inclusive=False)
        if combine == "add":
            if axis_dims is not None:
                raise ValueError('sinusoidal axis_dims applies to combine="concat" only (with "add" every axis '
                                 f"spans all dim={dim} channels), got axis_dims={axis_dims!r}")
            if width % 2:
                raise ValueError(f"sinusoidal combine='add' needs {'cat_dim' if cat_dim else 'dim'} divisible by 2 (a "
                                 f"sin and a cos per frequency), got {width}; nearest valid: {width - 1} or {width + 1}")
            self.axis_dims: tuple[int, ...] = (width,)
        else:
            self.axis_dims = resolve_axis_dims(width, dims, axis_dims)
        self.combine, self.temperature, self.layout = combine, float(temperature), layout
        self.axis_dim = self.axis_dims[0]  # channels of the first axis table (of every axis when split evenly)
        self.coords_mode = coords

    def inv_freq(self, device=None, axis_dim: int | None = None) -> Tensor:
        """Angular frequencies ``w_i = temperature ** (-2i / d)``, ``(d / 2,)`` float32 (``d``: ``axis_dim``,
        default the first axis's channels)."""
        half = (self.axis_dim if axis_dim is None else axis_dim) // 2
        exponent = torch.arange(half, device=device, dtype=torch.float32) / half  # 2i / d
        return 1.0 / self.temperature ** exponent

    def encode(self, positions: Tensor, grid_shape) -> PosOut:
        table = self.table(positions)  # (*, N, dim), or (*, N, cat_dim)
        return PosOut(cat=table) if self.cat_dim else PosOut(add=table)

    def table(self, positions: Tensor) -> Tensor:
        """The sin/cos table of ``positions`` ``(*, N, dims)``: ``(*, N, sum(axis_dims))`` in ``layout`` order."""
        if len(set(self.axis_dims)) > 1:
            return self._encode_uneven(positions)
        angles = positions[..., None] * self.inv_freq(positions.device).to(positions.dtype)  # (*, N, dims, d/2)
        table = torch.stack([angles.sin(), angles.cos()])  # (2, *, N, dims, d/2)
        if self.combine == "add":
            table = table.sum(-2, keepdim=True)  # (2, *, N, 1, d/2)
        return rearrange(table, LAYOUTS[self.layout])

    def _encode_uneven(self, positions: Tensor) -> Tensor:
        """``concat`` with axes of different widths: each axis its own table, joined in ``layout`` order."""
        parts = []  # per axis: (2, *, N, d_a / 2)
        for a, d in enumerate(self.axis_dims):
            angles = positions[..., a, None] * self.inv_freq(positions.device, d).to(positions.dtype)
            parts.append(torch.stack([angles.sin(), angles.cos()]))
        if self.layout == "interleaved":  # per axis: sin w_0, cos w_0, sin w_1, ...
            return torch.cat([rearrange(p, "s ... f -> ... (f s)") for p in parts], dim=-1)
        if self.layout == "blocks":  # per axis: sines, then cosines
            return torch.cat([rearrange(p, "s ... f -> ... (s f)") for p in parts], dim=-1)
        return torch.cat([p[0] for p in parts] + [p[1] for p in parts], dim=-1)  # sin_cos
