"""``coord``: CoordConv coordinate channels concatenated to tokens (Liu et al. 2018, "An intriguing failing...").

Each token gets its coordinates ``x_a`` in [-1, 1] (``"pixel"`` mode: -1 .. 1 inclusive, 0 for a
size-1 axis), one channel per axis in ``ij`` order, plus with ``with_r`` the distance to the grid
centre ``r = sqrt(sum_a x_a ** 2)`` (in [0, sqrt(dims)]). ``cat`` is ``(N, dims + with_r)``;
``pe.cat_dim`` holds that width. A model embeds tokens to ``dim - pe.cat_dim`` channels and
``ndpe.apply_tokens`` concatenates the coordinates, giving ``dim`` channels.

The popular CoordConv port (``AddCoords`` in mkocabas/CoordConv-pytorch, after the paper's TF code)
computes ``r = sqrt((x - 0.5) ** 2 + (y - 0.5) ** 2)`` on coordinates already in [-1, 1], so its
radius is centred at (0.5, 0.5), not at the centre of the image; here ``r`` is centred.

:class:`AddCoords` does the same for convolutional feature maps ``(B, C, *spatial)``.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ..base import Encoding
from ..checks import check_bool, check_float_tensor
from ..contract import PosOut
from ..coords import FLOAT32_MAX, axis_coords, output_max, tightest
from ..registry import register


def with_radius(coords: Tensor, dim: int = -1) -> Tensor:
    """Append ``r = sqrt(sum x_a ** 2)`` along ``dim`` to coordinates that hold one axis per entry of ``dim``."""
    return torch.cat([coords, coords.square().sum(dim, keepdim=True).sqrt()], dim)


@register("coord")
class Coord(Encoding):
    """Coordinate channels concatenated to tokens: ``cat`` is ``(N, dims + with_r)`` (``(B, N, .)`` batched).

    Args:
        with_r: add the radius channel ``sqrt(sum x_a ** 2)`` (distance to the grid centre).
        coords: coordinate units, ``"pixel"`` ([-1, 1], default), ``"centered"`` or ``"index"``.

    >>> import ndpe, torch
    >>> pe = ndpe.make(dims=2, kind="coord", dim=64, with_r=True)
    >>> pos = pe((4, 6)); pos.cat.shape, pe.cat_dim
    (torch.Size([24, 3]), 3)
    >>> ndpe.apply_tokens(torch.randn(2, 24, 64 - pe.cat_dim), pos).shape
    torch.Size([2, 24, 64])
    """

    description = "CoordConv coordinate channels (+ radius); `ndpe.AddCoords` for conv maps"
    colour, marker = "#8c564b", "X"

    def __init__(self, *, dims: int, dim: int, heads: int = 1, with_r: bool = False, coords: str = "pixel"):
        super().__init__(dims=dims, dim=dim, heads=heads)
        self.with_r, self.coords_mode = check_bool(with_r, "with_r"), coords
        self.cat_dim = dims + int(self.with_r)
        if dim <= self.cat_dim:
            raise ValueError(f"coord appends {self.cat_dim} channels, leaving dim - {self.cat_dim} for the tokens; "
                             f"dim={dim} leaves none, use dim > {self.cat_dim}")

    def position_limit(self, dtype: torch.dtype = torch.float32) -> tuple[float, str] | None:
        """Coordinates the ``cat`` channels (the coordinates themselves) hold in ``dtype``; with ``with_r``, also its
        radius (at most ``sqrt(dims) |coordinate|``) and the radius' float32 squares."""
        name = str(dtype).removeprefix("torch.")
        values = (output_max(dtype), f"the largest {name}, which coord's channels (the coordinates) hold")
        if not self.with_r:
            return values
        root = math.sqrt(self.dims)
        return tightest(values, (output_max(dtype) / root, f"where coord's radius overflows {name}"),
                        (math.sqrt(FLOAT32_MAX / self.dims), "where coord's squared float32 coordinates overflow"))

    def encode(self, positions: Tensor, grid_shape) -> PosOut:
        return PosOut(cat=with_radius(positions) if self.with_r else positions)


class AddCoords(nn.Module):
    """CoordConv's layer: ``(B, C, *spatial) -> (B, C + dims + with_r, *spatial)``.

    Appends one [-1, 1] coordinate channel per spatial axis (``ij`` order: for 2D the row coordinate,
    then the column one) and, with ``with_r``, the centred radius ``sqrt(sum x_a ** 2)``.
    Coordinates are built in float32 and cast to the input's dtype.

    >>> AddCoords(2, with_r=True)(torch.randn(8, 16, 5, 7)).shape
    torch.Size([8, 19, 5, 7])
    """

    def __init__(self, dims: int, with_r: bool = False):
        super().__init__()
        if dims not in (1, 2, 3):
            raise ValueError(f"AddCoords supports dims 1, 2 or 3, got dims={dims!r}")
        self.dims, self.with_r = dims, check_bool(with_r, "with_r")

    def forward(self, x: Tensor) -> Tensor:
        """``x`` ``(B, C, *spatial)`` with the coordinate channels (and the radius) appended after its ``C``."""
        check_float_tensor(x, "AddCoords input")  # coordinates in [-1, 1] cast to an integer dtype would be -1, 0, 1
        if x.ndim != self.dims + 2:
            raise ValueError(f"AddCoords(dims={self.dims}) expects (B, C, {', '.join('*' * self.dims)}) "
                             f"= {self.dims + 2}-D input, got shape {tuple(x.shape)}")
        spatial = x.shape[2:]
        axes = [axis_coords(n, "pixel", device=x.device) for n in spatial]
        coords = torch.stack(torch.meshgrid(*axes, indexing="ij"))  # (dims, *spatial)
        if self.with_r:
            coords = with_radius(coords, 0)
        coords = coords.to(x.dtype).expand(x.shape[0], *coords.shape)  # (B, dims + with_r, *spatial)
        return torch.cat([x, coords], dim=1)

    def extra_repr(self) -> str:
        return f"dims={self.dims}, with_r={self.with_r}"
