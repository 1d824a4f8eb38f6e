"""``spherical-harmonics``: real spherical harmonics of (latitude, longitude) positions (SatCLIP, Klemmer et al. 2023;
Russwurm et al. 2024, "Geographic Location Encoding with Spherical Harmonics and Sinusoidal Representation Networks").

Positions are (latitude, longitude) in degrees, ``(N, 2)`` or ``(B, N, 2)``, latitude in [-90, 90] and longitude in
[-180, 180] (other values raise). Without ``positions=``, a grid ``(H, W)`` is the equiangular grid of cell centres
over the whole sphere, row 0 the northernmost (:func:`ndpe.coords.latlon_grid`). Integer positions are whole
degrees (converted to float32, as every kind's positions). Position augmentation (CAPE,
randomized positions: made for grid coordinates) is refused; pass augmented ``positions=`` (:class:`OnTheSphere`, the
base of ``great-circle`` too).

Features, as SatCLIP's ``SphericalHarmonics`` (microsoft/satclip, ``positional_encoding/spherical_harmonics.py`` and
``spherical_harmonics_closed_form.py``; the same code in MarcCoru/locationencoder): the polar angle
``theta = radians(lat + 90)`` and the azimuth ``phi = radians(lon + 180)``, then for each degree ``l = 0 .. L`` and
order ``m = -l .. l`` (feature ``l * l + l + m``), with ``P_l^m`` the associated Legendre function (Condon-Shortley
phase) and ``N_l^m = sqrt((2l + 1) / (4 pi) (l - m)! / (l + m)!)``::

    Y_l^m = sqrt(2) N_l^m P_l^m(cos theta) cos(m phi)            m > 0
    Y_l^0 = N_l^0 P_l(cos theta)
    Y_l^m = sqrt(2) N_l^|m| P_l^|m|(cos theta) sin(|m| phi)      m < 0

orthonormal on the sphere: ``(L + 1) ** 2`` features. SatCLIP's ``legendre_polys=L + 1`` is ``max_degree=L`` here
(it counts the degrees 0 .. L); it takes (lon, lat), ndpe (lat, lon). Its angles are those of the antipode of the
textbook's (polar angle from the north pole, azimuth = longitude), so each feature is ``(-1) ** l`` times the
textbook's real harmonic. The functions come from the normalized recurrence in ``N_l^m P_l^m``, which stays finite in
float32 at any degree (SatCLIP's unnormalized one overflows float32 from degree 29).

A rotation of the sphere mixes the features of each degree among themselves (an orthogonal ``(2l + 1)``-square matrix
per degree): ``sum_m Y_l^m(x) ** 2 = (2l + 1) / (4 pi)`` everywhere, and ``sum_m Y_l^m(x) Y_l^m(y)`` depends only on
the angle between ``x`` and ``y`` (the addition theorem).

``combine="concat"`` (default) concatenates the features to the tokens (``cat`` ``(N, (L + 1) ** 2)``, ``pe.cat_dim``,
as ``coord``; the model's first layer mixes them, as SatCLIP's network does); ``combine="add"`` adds a learned linear
projection of them to ``dim`` (``pe.proj``, no bias).
"""
from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ..base import Encoding
from ..checks import check_choice, check_int
from ..contract import PosOut
from ..coords import check_grid_shape, check_latlon, latlon_grid
from ..registry import register

COMBINES = ("concat", "add")


def legendre_normalized(max_degree: int, x: Tensor) -> dict[tuple[int, int], Tensor]:
    """``N_l^m P_l^m(x)`` for ``0 <= m <= l <= max_degree`` (Condon-Shortley phase), keyed ``(l, m)``, each shaped as
    ``x``: the normalized recurrences (sectoral ``m = l``, then up in ``l``)."""
    s = (1 - x * x).clamp_min(0).sqrt()
    p = {(0, 0): torch.full_like(x, 1 / math.sqrt(4 * math.pi))}
    for m in range(1, max_degree + 1):
        p[m, m] = -math.sqrt((2 * m + 1) / (2 * m)) * s * p[m - 1, m - 1]
    for m in range(max_degree):
        p[m + 1, m] = math.sqrt(2 * m + 3) * x * p[m, m]
        for l in range(m + 2, max_degree + 1):
            a = math.sqrt((4 * l * l - 1) / (l * l - m * m))
            b = math.sqrt(((l - 1) ** 2 - m * m) / (4 * (l - 1) ** 2 - 1))
            p[l, m] = a * (x * p[l - 1, m] - b * p[l - 2, m])
    return p


def spherical_harmonics(latlon: Tensor, max_degree: int) -> Tensor:
    """Real spherical harmonics ``(..., (max_degree + 1) ** 2)`` of (latitude, longitude) degrees ``(..., 2)``, in
    SatCLIP's convention (see the module doc), computed in the positions' dtype.

    >>> y = spherical_harmonics(torch.tensor([[10.0, 20.0]]), 2)
    >>> y.shape, round(float(y[0, 0]), 4)            # Y_0^0 = 1 / sqrt(4 pi)
    (torch.Size([1, 9]), 0.2821)
    """
    theta, phi = torch.deg2rad(latlon[..., 0] + 90), torch.deg2rad(latlon[..., 1] + 180)
    p = legendre_normalized(max_degree, theta.cos())
    orders = torch.arange(1, max_degree + 1, device=latlon.device, dtype=latlon.dtype)
    angles = phi[..., None] * orders  # (..., L): m phi for m = 1 .. L
    cos, sin = math.sqrt(2) * angles.cos(), math.sqrt(2) * angles.sin()
    features = []
    for l in range(max_degree + 1):
        features += [p[l, -m] * sin[..., -m - 1] for m in range(-l, 0)]
        features += [p[l, 0]] + [p[l, m] * cos[..., m - 1] for m in range(1, l + 1)]
    return torch.stack(features, dim=-1)


class OnTheSphere(Encoding):
    """Base of the kinds whose positions are (latitude, longitude) degrees: a grid is the globe's equiangular grid,
    and position augmentation (made for grid coordinates) is refused."""

    def coords(self, grid_shape) -> Tensor:
        """(latitude, longitude) degrees ``(H * W, 2)`` of an equiangular grid's cell centres (row 0 north)."""
        return latlon_grid(check_grid_shape(grid_shape, self.dims), device=self.device)

    def set_augment(self, augment: nn.Module | None) -> None:
        if augment is not None:
            raise ValueError(f"kind {self.kind!r} takes (latitude, longitude) positions on the sphere; position "
                             "augmentation shifts grid coordinates: pass augmented positions= instead (e.g. a rotation "
                             "of the globe)")
        super().set_augment(augment)


@register("spherical-harmonics", dims=(2,))
class SphericalHarmonics(OnTheSphere):
    """Real spherical harmonics up to degree ``max_degree`` of (latitude, longitude) degrees; see the module doc.

    Args:
        max_degree: the largest degree ``L``: ``(L + 1) ** 2`` features (SatCLIP's ``legendre_polys = L + 1``).
        combine: ``"concat"`` (default): ``cat`` ``(N, (L + 1) ** 2)``; ``"add"``: ``add`` ``(N, dim)``, a learned
            projection of the features.

    >>> import ndpe, torch
    >>> pe = ndpe.make(dims=2, kind="spherical-harmonics", dim=64, max_degree=3)
    >>> pe((8, 16)).cat.shape, pe.cat_dim
    (torch.Size([128, 16]), 16)
    >>> pe(positions=torch.tensor([[48.85, 2.35], [-33.87, 151.21]])).cat.shape   # Paris, Sydney
    torch.Size([2, 16])
    """

    description = "real spherical harmonics of (lat, lon) up to degree L (SatCLIP); concat or projected"
    colour, marker = "#1f3a93", "8"

    def __init__(self, *, dims: int, dim: int, heads: int = 1, max_degree: int = 4, combine: str = "concat"):
        super().__init__(dims=dims, dim=dim, heads=heads)
        self.max_degree = check_int(max_degree, "max_degree", low=0)
        self.combine = check_choice(combine, "combine", COMBINES)
        features = (max_degree + 1) ** 2
        if combine == "add":
            self.proj = nn.Linear(features, dim, bias=False)
        elif dim <= features:
            raise ValueError(f"spherical-harmonics max_degree={max_degree} concatenates {features} channels, leaving "
                             f"dim - {features} for the tokens: use dim > {features}, a smaller max_degree or "
                             "combine='add'")
        else:
            self.cat_dim = features

    @classmethod
    def example_options(cls, dims: int) -> dict[str, int]:
        return {"max_degree": 2}  # 9 channels: a small example's width (24) keeps room for the tokens

    def encode(self, positions: Tensor, grid_shape) -> PosOut:
        check_latlon(positions)
        features = spherical_harmonics(positions, self.max_degree)  # (*, N, (L + 1) ** 2)
        if self.combine == "add":
            return PosOut(add=self.proj(features.to(self.proj.weight.dtype)))
        return PosOut(cat=features)
