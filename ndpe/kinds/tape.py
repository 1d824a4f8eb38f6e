"""``tape``: time Absolute Position Encoding (tAPE, Foumani et al. 2023, ConvTran), added to tokens, 1D.

The sinusoids of "Attention Is All You Need" with every frequency scaled by ``d / L`` (``d = dim``, ``L`` the
series length), so that a series of any length spans the same range of angles::

    PE(p, 2i)   = sin(p * w_i * d / L)        w_i = 10000 ** (-2i / d),   i = 0 .. d/2 - 1
    PE(p, 2i+1) = cos(p * w_i * d / L)

Conventions (ConvTran's ``Models/AbsolutePositionalEncoding.py``, class ``tAPE``, ported in ``tests/test_tape.py``):
- ``L``: ``length=None`` (default) takes each call's series length (``grid_shape[0]``, or the number of positions),
  as ConvTran builds its table for the series it is given (``max_len=seq_len``); ``length=L`` fixes it, so a model
  trained on series of length ``L`` keeps its frequencies on others. The angle ``p * d / L`` makes ``p / L`` the
  position: a longer series is stretched into the same angles (a zoom), not continued.
- Channels interleaved as ConvTran's table: ``sin w_0, cos w_0, sin w_1, ...``; ``dim`` even. Positions in
  ``index`` units (0 .. L - 1); ConvTran's ``scale_factor`` (1 by default) and dropout belong to its model, not here.
- Decoding with a KV cache needs ``length=``: with ``length=None`` the series grows with every new token and would
  move every earlier position.

>>> import ndpe
>>> pe = ndpe.make(dims=1, kind="tape", dim=16)
>>> pe((10,)).add.shape
torch.Size([10, 16])
"""
from __future__ import annotations

import torch
from einops import rearrange
from torch import Tensor

from ..base import Encoding
from ..checks import check_int, check_number
from ..contract import PosOut
from ..coords import FLOAT32_MAX
from ..registry import register


def tape_table(positions: Tensor, dim: int, length: float, temperature: float = 10000.0) -> Tensor:
    """The tAPE table ``(*, N, dim)`` of positions ``(*, N, 1)``: sin / cos of ``p * w_i * dim / length``, interleaved.

    >>> tape_table(torch.arange(3.0)[:, None], dim=4, length=4).shape
    torch.Size([3, 4])
    """
    inv_freq = temperature ** (-torch.arange(0, dim, 2, device=positions.device, dtype=torch.float32) / dim)
    angles = positions * (inv_freq * (dim / length))  # (*, N, dim / 2)
    return rearrange(torch.stack([angles.sin(), angles.cos()]), "s ... f -> ... (f s)")


@register("tape", dims=(1,))
class TimeAPE(Encoding):
    """tAPE: sinusoids with frequencies scaled by ``dim / length``, added to tokens; see the module docstring.

    Args:
        length: the series length ``L`` of the scale ``dim / L``; None (default): each call's series length.
        temperature: the base of the wavelengths (10000, as ConvTran).
    """

    takes_key_positions = True  # decodes only with a fixed length (refused otherwise)
    description = "tAPE (ConvTran, Foumani et al. 2023): sinusoids scaled by dim / series length"

    def __init__(self, *, dims: int, dim: int, heads: int = 1, length: int | None = None,
                 temperature: float = 10000.0):
        super().__init__(dims=dims, dim=dim, heads=heads)
        if dim % 2:
            raise ValueError(f"tape needs an even dim (a sin and a cos per frequency), got dim={dim}; nearest valid: "
                             f"{dim - 1} or {dim + 1}")
        if length is not None:
            check_int(length, "length", low=1)
        check_number(temperature, "temperature", low=0.0, inclusive=False)
        self.length, self.temperature = length, float(temperature)

    def position_limit(self, dtype: torch.dtype = torch.float32) -> tuple[float, str] | None:
        """Coordinates whose float32 angles ``p * w_i * dim / L`` stay finite: the fastest ``w_i`` is ``w_0 = 1`` (or
        ``w_{d/2-1}`` for a temperature below 1), and ``L >= 1`` (``length=None``: each call's length)."""
        fastest = max(1.0, self.temperature ** (-(self.dim - 2) / self.dim)) * self.dim / (self.length or 1)
        return FLOAT32_MAX / fastest, "where tape's float32 angles p * w * dim / L overflow"

    def encode(self, positions: Tensor, grid_shape, key_positions: Tensor | None = None) -> PosOut:
        if key_positions is not None and self.length is None:
            raise ValueError("tape with length=None scales by the series length, which grows while decoding: build "
                             "it with length= (the training length) to decode with a KV cache")
        length = self.length or (grid_shape[0] if grid_shape is not None else positions.shape[-2])
        return PosOut(add=tape_table(positions, self.dim, length, self.temperature))
