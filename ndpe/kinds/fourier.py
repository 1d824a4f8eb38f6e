"""``fourier``: random Fourier features (Tancik et al. 2020, "Fourier Features Let Networks Learn...").

For a coordinate ``v`` of shape ``(dims,)``::

    gamma(v) = [cos(2 pi B v), sin(2 pi B v)]        B ~ N(0, sigma^2), shape (dim / 2, dims)

so ``add`` is ``(N, dim)``: the ``dim / 2`` cosines, then the ``dim / 2`` sines (the paper's order),
values in [-1, 1]. ``sigma`` sets the bandwidth in cycles per coordinate unit: with the default
``"pixel"`` coordinates (each axis spans [-1, 1]) a grid of ``n`` points resolves up to ``(n - 1) / 4``
cycles per unit, so ``sigma <= (n - 1) / 8`` keeps most frequencies (``|B| < 2 sigma``) below that
limit; the paper tunes ``sigma`` per task.

``B`` is a persistent buffer (``learnable=False``: the draw survives ``state_dict``) or a Parameter
(``learnable=True``). ``seed`` draws it from a ``torch.Generator`` seeded with that value, so
construction is reproducible; ``seed=None`` uses the global RNG. Like any buffer, ``B`` follows
``module.half()``; keep the encoding in float32 and ask for ``dtype=`` on the call instead.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ..base import Encoding
from ..checks import check_bool, check_int, check_number
from ..contract import PosOut
from ..coords import FLOAT32_MAX
from ..registry import register


@register("fourier")
class Fourier(Encoding):
    """Random Fourier features added to tokens: ``add`` is ``(N, dim)`` (``(B, N, dim)`` for batched positions).

    Args:
        sigma: standard deviation of the frequencies ``B`` (cycles per coordinate unit).
        learnable: make ``B`` a trainable Parameter instead of a fixed buffer.
        seed: seed of the generator ``B`` is drawn from (``None``: the global RNG).
        coords: coordinate units, ``"pixel"`` ([-1, 1], default), ``"centered"`` or ``"index"``.

    >>> import ndpe
    >>> pe = ndpe.make(dims=2, kind="fourier", dim=64, sigma=2.0, seed=0)
    >>> pe.B.shape, pe((8, 8)).add.shape
    (torch.Size([32, 2]), torch.Size([64, 64]))
    """

    description = "random Fourier features (Tancik et al. 2020), fixed or learnable"
    colour, marker = "#bcbd22", "h"

    def __init__(self, *, dims: int, dim: int, heads: int = 1, sigma: float = 1.0, learnable: bool = False,
                 seed: int | None = None, coords: str = "pixel"):
        super().__init__(dims=dims, dim=dim, heads=heads)
        if dim % 2:
            raise ValueError(f"fourier features need an even dim (a cos and a sin per frequency), got dim={dim}")
        check_number(sigma, "sigma", low=0.0, inclusive=False, dtype=torch.float32)
        check_bool(learnable, "learnable")
        if seed is not None:
            check_int(seed, "seed", low=0)
        gen = None if seed is None else torch.Generator().manual_seed(seed)
        freqs = torch.randn(dim // 2, dims, generator=gen) * sigma  # (dim / 2, dims)
        if learnable:
            self.B = nn.Parameter(freqs)
        else:
            self.register_buffer("B", freqs)
        self.sigma, self.learnable, self.seed, self.coords_mode = float(sigma), bool(learnable), seed, coords

    def position_limit(self, dtype: torch.dtype = torch.float32) -> tuple[float, str] | None:
        """Coordinates whose float32 angles ``2 pi v`` and ``2 pi B v`` stay finite: ``|2 pi B_k v|`` is at most
        ``2 pi |coordinate| sum_a |B_ka|`` (reads ``B``: explicit positions only, which are read anyway)."""
        widest = max(float(self.B.detach().abs().sum(-1).amax()), 1.0)  # the largest row sum of |B|, and 2 pi v itself
        return FLOAT32_MAX / (2 * math.pi * widest), "where fourier's float32 angles 2 pi B v overflow"

    def encode(self, positions: Tensor, grid_shape) -> PosOut:
        angles = 2 * math.pi * positions @ self.B.to(positions.dtype).t()  # (*, N, dim / 2)
        return PosOut(add=torch.cat([angles.cos(), angles.sin()], dim=-1))
