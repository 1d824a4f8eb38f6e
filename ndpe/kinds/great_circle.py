"""``great-circle``: ALiBi on the sphere, a per-head linear bias on the great-circle (haversine) distance.

Positions are (latitude, longitude) in degrees, ``(N, 2)`` or ``(B, N, 2)``, latitude in [-90, 90] and longitude in
[-180, 180] (other values raise). Without ``positions=``, a grid ``(H, W)`` is the equiangular grid of cell centres
over the whole sphere, row 0 the northernmost (:func:`ndpe.coords.latlon_grid`), as ``spherical-harmonics``.

``bias[h, i, j] = -slope[h] * d(p_i, p_j)``, with ``d`` the great-circle distance: the central angle the haversine
formula gives, ``2 asin(sqrt(sin^2(dlat / 2) + cos lat_i cos lat_j sin^2(dlon / 2)))``, times the radius of
``unit`` (``"degree"``: degrees of arc, default, so a 1-degree grid step weighs as ALiBi's token step;
``"radian"``; ``"km"``: the Earth's mean radius, 6371.0088 km). It is computed as ``atan2(|u_i x u_j|, u_i . u_j)`` of
the points' unit vectors, the same angle, which keeps float32 accurate at every distance (the haversine's ``asin``
loses half the digits near antipodes). The distance wraps at the date line and shrinks towards the poles, and any
rotation of the sphere leaves it unchanged: the bias is rotation invariant, as ALiBi's is translation invariant.

Slopes: ALiBi's (:func:`ndpe.kinds.alibi.alibi_slopes`, ``2 ** (-8 h / H)`` for 8 heads: 1/2 .. 1/256 per degree
with the default unit) or the caller's ``slopes=`` (one finite number per head; an output ``dtype`` whose range the
bias at the antipodes passes is refused). Parameter-free; the base caches the
bias per grid. Output ``(heads, N, N)`` float32 (``(B, heads, N, N)`` for batched positions); :mod:`ndpe.flex` gives
a ``score_mod`` from the same formula that never builds it.
"""
from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import Tensor

from ..checks import check_choice
from ..contract import PosOut
from ..coords import check_latlon, output_max, unit_vectors
from ..pairs import pair_axes, sum_of, token_axes
from ..registry import register
from .alibi import alibi_slopes, check_slopes
from .spherical_harmonics import OnTheSphere

EARTH_RADIUS_KM = 6371.0088  # IUGG mean radius
UNITS = {"degree": 180 / math.pi, "radian": 1.0, "km": EARTH_RADIUS_KM}  # radius of the sphere in each unit


def central_angle(u: list[Tensor], v: list[Tensor]) -> Tensor:
    """The angle (radians) between unit vectors given per component ``[x, y, z]`` (broadcasting):
    ``atan2(|u x v|, u . v)``."""
    cross = [u[1] * v[2] - u[2] * v[1], u[2] * v[0] - u[0] * v[2], u[0] * v[1] - u[1] * v[0]]
    return torch.atan2(sum_of(c * c for c in cross).sqrt(), sum_of(a * b for a, b in zip(u, v)))


@register("great-circle", dims=(2,))
class GreatCircle(OnTheSphere):
    """ALiBi bias ``-slope[h] * great-circle distance`` of (latitude, longitude) degrees; see the module doc.

    Args:
        unit: the distance's unit: ``"degree"`` (of arc, default), ``"radian"`` or ``"km"`` (Earth).
        slopes: one finite slope per head; default ALiBi's for ``heads``.

    >>> import ndpe, torch
    >>> pe = ndpe.make(dims=2, kind="great-circle", dim=64, heads=4, unit="km")
    >>> paris, london = [48.8566, 2.3522], [51.5074, -0.1278]
    >>> round(float(pe(positions=torch.tensor([paris, london])).bias[0, 0, 1] / -pe.slopes[0]))   # km
    344
    """

    description = "ALiBi on the great-circle (haversine) distance of (lat, lon) positions"
    colour, marker = "#0e7c7b", "H"

    slopes: Tensor  # (heads,) float32 buffer

    def __init__(self, *, dims: int, dim: int, heads: int = 1, unit: str = "degree",
                 slopes: Sequence[float] | None = None):
        super().__init__(dims=dims, dim=dim, heads=heads)
        self.unit = check_choice(unit, "unit", tuple(UNITS))
        chosen = alibi_slopes(heads) if slopes is None else check_slopes(slopes, heads)
        self.register_buffer("slopes", torch.tensor(chosen, dtype=torch.float32), persistent=False)
        self.steepest = max(abs(s) for s in chosen)  # the largest |slope|, for check_range without reading a buffer

    def check_range(self, positions: Tensor, dtype: torch.dtype) -> None:
        """Refuse (one line) slopes whose bias at the longest distance (half the circumference, ``pi`` radii) passes
        what ``dtype`` holds: ``+inf`` for a negative slope (then NaN out of the softmax), ``-inf`` for a positive."""
        longest = math.pi * UNITS[self.unit]
        if self.steepest * longest > output_max(dtype):
            name = str(dtype).removeprefix("torch.")
            raise ValueError(f"great-circle slopes up to {self.steepest:.3g} give biases up to "
                             f"{self.steepest * longest:.3g} at the antipodes ({longest:.5g} {self.unit}), past "
                             f"{name}'s {output_max(dtype):.3g}: use |slopes| <= {output_max(dtype) / longest:.3g} "
                             f"per {self.unit}, or return float32")

    def pair_words(self) -> int:
        """Float32 words per pair at the peak: the three components of the cross product, its norm and the dot
        product, then the bias next to the distance."""
        return max(5, self.heads + 1)

    def pair_bias(self, qu: list[Tensor], ku: list[Tensor], h: Tensor) -> Tensor:
        """``-slope[h] * radius * angle`` of query and key unit vectors per component: the one formula of the
        materialized bias and of the flex score_mod."""
        return -self.slopes[h] * (UNITS[self.unit] * central_angle(qu, ku))

    def encode(self, positions: Tensor, grid_shape) -> PosOut:
        check_latlon(positions)
        qu, ku = pair_axes(unit_vectors(positions.float())[..., None, :, :])  # (..., 1, N, 1), (..., 1, 1, N) each
        heads = torch.arange(self.heads, device=positions.device)[:, None, None]
        return PosOut(bias=self.pair_bias(qu, ku, heads))  # (..., heads, N, N)

    def score_bias(self, coords: Tensor, *, q: Tensor | None = None, k: Tensor | None = None):
        """``(b, h, i, j) -> -slope_h * distance(i, j)`` for flex attention (see :meth:`Encoding.score_bias`)."""
        check_latlon(coords)
        axes = token_axes(unit_vectors(coords.float()))
        return lambda b, h, i, j: self.pair_bias([ax[i] for ax in axes], [ax[j] for ax in axes], h)
