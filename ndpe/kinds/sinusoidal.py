"""``sinusoidal``: the fixed sin/cos encoding of "Attention Is All You Need", per axis, added to tokens.

For one axis with ``d`` channels and coordinate ``p`` (Vaswani et al. 2017)::

    PE(p, 2i)   = sin(p * w_i)        w_i = 1 / temperature ** (2i / d),   i = 0 .. d/2 - 1
    PE(p, 2i+1) = cos(p * w_i)

N-D (``combine``):
    ``"concat"`` (default; timm / MAE / DeiT-3): axis ``a`` gets its own ``d = dim / dims`` channels,
        ``[axis 0 | axis 1 | ...]`` in ``ij`` order. Needs ``dim % (2 * dims) == 0``. Values in [-1, 1].
    ``"add"``: every axis spans all ``d = dim`` channels and the per-axis tables are summed. Needs
        ``dim % 2 == 0``. Values in [-dims, dims]. The axes share their frequencies, so the encoding is
        symmetric: ``(i, j)`` and ``(j, i)`` get the same vector (use ``"concat"`` to tell them apart).

Channel order (``layout``) inside the output:
    ``"interleaved"`` (default): ``sin w_0, cos w_0, sin w_1, cos w_1, ...`` per axis (the formula above).
    ``"blocks"``: ``sin w_0 .. sin w_{d/2-1}, cos w_0 .. cos w_{d/2-1}`` per axis (MAE, timm 1D).
    ``"sin_cos"``: the sines of every axis, then the cosines of every axis:
        ``[sin axis 0, sin axis 1, ..., cos axis 0, cos axis 1, ...]``. With ``"add"`` equal to ``"blocks"``.
All layouts are the same encoding up to a fixed channel permutation.

Peers (tested in ``tests/test_sinusoidal.py``):
    * timm ``build_sincos2d_pos_embed(feat_shape=(H, W), dim)`` == ``combine="concat", layout="sin_cos"``
      (its default ``interleave_sin_cos=False``), and ``layout="blocks"`` with ``interleave_sin_cos=True``.
      Keep timm's ``reverse_coord=False``: with ``True`` it encodes ``(W, H)`` and its tokens come out
      column-major. MAE's ``get_2d_sincos_pos_embed`` puts the column (w) half first.
    * positional-encodings ``PositionalEncoding1D/2D/3D(dim)`` == ``combine="concat", layout="interleaved"``
      when ``dim % (2 * dims) == 0``. Otherwise they round each axis up to
      ``ceil(dim / (2 * dims)) * 2`` channels and truncate the last axis (2D ``dim=6``: rows get 4 channels,
      cols 2, at frequencies meant for 4); ndpe raises instead.
"""
from __future__ import annotations

import torch
from einops import rearrange
from torch import Tensor

from ..base import Encoding
from ..checks import check_choice, check_number
from ..contract import PosOut
from ..registry import register

COMBINES = ("concat", "add")
# (sin|cos) s, axis a, frequency f -> channels; "add" sums over axes first (a = 1).
LAYOUTS = {
    "interleaved": "s ... a f -> ... (a f s)",
    "blocks": "s ... a f -> ... (a s f)",
    "sin_cos": "s ... a f -> ... (s a f)",
}


@register("sinusoidal")
class Sinusoidal(Encoding):
    """Fixed sin/cos table added to tokens: ``add`` is ``(N, dim)`` (``(B, N, dim)`` for batched positions).

    Args:
        combine: ``"concat"`` (each axis its share of channels) or ``"add"`` (tables summed).
        temperature: the base of the wavelengths (10000 in the paper).
        layout: channel order, ``"interleaved"`` (paper), ``"blocks"`` or ``"sin_cos"`` (timm 2D).
        coords: coordinate units, ``"index"`` (0..n-1, default), ``"pixel"`` or ``"centered"``.

    >>> import ndpe
    >>> pe = ndpe.make(dims=2, kind="sinusoidal", dim=64)
    >>> pe((14, 14)).add.shape
    torch.Size([196, 64])
    """

    def __init__(self, *, dims: int, dim: int, heads: int = 1, combine: str = "concat",
                 temperature: float = 10000.0, layout: str = "interleaved", coords: str = "index"):
        super().__init__(dims=dims, dim=dim, heads=heads)
        check_choice(combine, "combine", COMBINES)
        check_choice(layout, "layout", tuple(LAYOUTS))
        check_number(temperature, "temperature", low=0.0, inclusive=False)
        chunks = dims if combine == "concat" else 1
        if dim % (2 * chunks):
            need = f"2 * dims = {2 * dims}" if combine == "concat" else "2"
            raise ValueError(f"sinusoidal combine={combine!r} needs dim divisible by {need} (a sin and a cos "
                             f"per frequency{', per axis' if combine == 'concat' else ''}), got dim={dim}")
        self.combine, self.temperature, self.layout = combine, float(temperature), layout
        self.axis_dim = dim // chunks  # channels of one axis table
        self.coords_mode = coords

    def inv_freq(self, device=None) -> Tensor:
        """Angular frequencies ``w_i = temperature ** (-2i / d)``, ``(d / 2,)`` float32."""
        half = self.axis_dim // 2
        exponent = torch.arange(half, device=device, dtype=torch.float32) / half  # 2i / d
        return 1.0 / self.temperature ** exponent

    def encode(self, positions: Tensor, grid_shape) -> PosOut:
        angles = positions[..., None] * self.inv_freq(positions.device).to(positions.dtype)  # (*, N, dims, d/2)
        table = torch.stack([angles.sin(), angles.cos()])  # (2, *, N, dims, d/2)
        if self.combine == "add":
            table = table.sum(-2, keepdim=True)  # (2, *, N, 1, d/2)
        return PosOut(add=rearrange(table, LAYOUTS[self.layout]))

    def extra_repr(self) -> str:
        return (f"{super().extra_repr()}, combine={self.combine!r}, temperature={self.temperature}, "
                f"layout={self.layout!r}, coords={self.coords_mode!r}")
