"""``spherical-harmonics``: pinned to scipy's spherical harmonics and to SatCLIP's code; the rotation property (a
rotation mixes the features within each degree only); grids, positions, projection and errors."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import ndpe
from ndpe.coords import latlon_grid, unit_vectors
from ndpe.kinds.spherical_harmonics import spherical_harmonics
from tests.conftest import assert_tells_apart

special = pytest.importorskip("scipy.special")


def make(max_degree=4, **opts):
    return ndpe.make(dims=2, kind="spherical-harmonics", dim=(max_degree + 1) ** 2 + 8, max_degree=max_degree, **opts)


def points(n=64, seed=0, dtype=torch.float64):
    """``n`` (lat, lon) degrees spread over the sphere, with the poles, the date line and the equator among them."""
    g = torch.Generator().manual_seed(seed)
    z = torch.rand(n, generator=g, dtype=dtype) * 2 - 1  # uniform on the sphere
    lat, lon = torch.rad2deg(torch.asin(z)), torch.rand(n, generator=g, dtype=dtype) * 360 - 180
    edges = torch.tensor([[90.0, 0.0], [-90.0, 37.0], [0.0, 180.0], [0.0, -180.0], [0.0, 0.0]], dtype=dtype)
    return torch.cat([torch.stack([lat, lon], -1), edges])


def scipy_real(latlon, max_degree):
    """SatCLIP's real harmonics from scipy's complex ``sph_harm_y(l, m, theta, phi)`` (Condon-Shortley phase,
    orthonormal): ``sqrt(2) Re Y_l^m`` for m > 0, ``sqrt(2) Im Y_l^|m|`` for m < 0, at SatCLIP's angles."""
    theta = torch.deg2rad(latlon[:, 0] + 90).numpy()
    phi = torch.deg2rad(latlon[:, 1] + 180).numpy()
    cols = []
    for l in range(max_degree + 1):
        for m in range(-l, l + 1):
            y = special.sph_harm_y(l, abs(m), theta, phi)
            cols.append(y.real if m == 0 else math.sqrt(2) * (y.real if m > 0 else y.imag))
    return torch.from_numpy(np.stack(cols, -1))


# Ported from microsoft/satclip, satclip/positional_encoding/spherical_harmonics_closed_form.py (the same file in
# MarcCoru/locationencoder, locationencoder/pe/), with SphericalHarmonics.forward's angles (spherical_harmonics.py).
def satclip_legendre(l, m, x):
    pmm = torch.ones_like(x)
    if m > 0:
        somx2 = torch.sqrt((1 - x) * (1 + x))
        fact = 1.0
        for _ in range(1, m + 1):
            pmm = pmm * (-fact) * somx2
            fact += 2.0
    if l == m:
        return pmm
    pmmp1 = x * (2.0 * m + 1.0) * pmm
    if l == m + 1:
        return pmmp1
    pll = torch.zeros_like(x)
    for ll in range(m + 2, l + 1):
        pll = ((2.0 * ll - 1.0) * x * pmmp1 - (ll + m - 1.0) * pmm) / (ll - m)
        pmm = pmmp1
        pmmp1 = pll
    return pll


def satclip_renormalization(l, m):
    return math.sqrt((2.0 * l + 1.0) * math.factorial(l - m) / (4 * math.pi * math.factorial(l + m)))


def satclip_sh(m, l, phi, theta):
    norm = satclip_renormalization
    if m == 0:
        return norm(l, m) * satclip_legendre(l, m, torch.cos(theta))
    if m > 0:
        return math.sqrt(2.0) * norm(l, m) * torch.cos(m * phi) * satclip_legendre(l, m, torch.cos(theta))
    return math.sqrt(2.0) * norm(l, -m) * torch.sin(-m * phi) * satclip_legendre(l, -m, torch.cos(theta))


def satclip_forward(lonlat, legendre_polys):
    lon, lat = lonlat[:, 0], lonlat[:, 1]
    phi, theta = torch.deg2rad(lon + 180), torch.deg2rad(lat + 90)
    return torch.stack([satclip_sh(m, l, phi, theta) * torch.ones_like(phi)
                        for l in range(legendre_polys) for m in range(-l, l + 1)], dim=-1)


def textbook(latlon, max_degree):
    """The textbook's angles (polar angle from the north pole, azimuth = longitude): the wrong convention here."""
    return spherical_harmonics(torch.stack([-latlon[:, 0], latlon[:, 1] - 180], -1), max_degree)


@pytest.mark.parametrize("max_degree", [0, 1, 4, 10])
def test_equals_scipy(max_degree):
    """float64 positions: scipy's harmonics to 1e-12; float32 (the default) to 1e-5 at degree 10."""
    x = points()
    ref = scipy_real(x, max_degree)
    torch.testing.assert_close(spherical_harmonics(x, max_degree), ref, rtol=0, atol=1e-12)
    got = make(max_degree)(positions=x.float()).cat
    other = textbook(x.float(), max_degree)  # (-1) ** l apart: tells odd degrees apart
    if max_degree:
        assert_tells_apart(got, other, ref.float(), rtol=0, atol=1e-5)
    else:
        torch.testing.assert_close(got, ref.float(), rtol=0, atol=1e-5)


def test_equals_satclip_code():
    """SatCLIP's SphericalHarmonics(legendre_polys=L + 1) on (lon, lat) equals max_degree=L on (lat, lon)."""
    x = points()
    ref = satclip_forward(x.flip(-1), legendre_polys=9)
    torch.testing.assert_close(spherical_harmonics(x, 8), ref, rtol=0, atol=1e-11)
    assert_tells_apart(make(8)(positions=x.float()).cat, textbook(x.float(), 8), ref.float(), rtol=0, atol=1e-5)


def test_textbook_convention_is_the_antipode():
    """The module doc's claim: each feature is (-1) ** l times the textbook's real harmonic."""
    x, L = points(), 6
    signs = torch.tensor([(-1.0) ** l for l in range(L + 1) for _ in range(2 * l + 1)], dtype=torch.float64)
    torch.testing.assert_close(spherical_harmonics(x, L), signs * textbook(x, L), rtol=0, atol=1e-12)


def random_rotation(seed):
    q, r = torch.linalg.qr(torch.randn(3, 3, generator=torch.Generator().manual_seed(seed), dtype=torch.float64))
    q = q * torch.sign(torch.diagonal(r))
    return q if torch.det(q) > 0 else -q


def rotate(latlon, rotation):
    v = unit_vectors(latlon) @ rotation.T
    return torch.stack([torch.rad2deg(torch.asin(v[:, 2].clamp(-1, 1))), torch.rad2deg(torch.atan2(v[:, 1], v[:, 0]))],
                       -1)


def degree_blocks(max_degree):
    return [slice(l * l, (l + 1) ** 2) for l in range(max_degree + 1)]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_rotation_mixes_features_within_each_degree(seed):
    """F(R x) = F(x) M for all x with M block diagonal, one orthogonal (2l + 1)-square block per degree."""
    L, x = 6, points(200, seed)
    f, f_rot = spherical_harmonics(x, L), spherical_harmonics(rotate(x, random_rotation(seed)), L)
    m = torch.linalg.lstsq(f, f_rot).solution  # (K, K)
    torch.testing.assert_close(f @ m, f_rot, rtol=0, atol=1e-10)
    for a, rows in enumerate(degree_blocks(L)):
        for b, cols in enumerate(degree_blocks(L)):
            block = m[rows, cols]
            if a != b:
                assert block.abs().max() < 1e-9
            else:
                torch.testing.assert_close(block @ block.T, torch.eye(2 * a + 1, dtype=torch.float64), atol=1e-9,
                                           rtol=0)
    assert (m[degree_blocks(L)[2], degree_blocks(L)[2]] - torch.eye(5, dtype=torch.float64)).abs().max() > 0.1


def test_per_degree_norm_is_the_same_everywhere():
    """sum_m Y_l^m(x) ** 2 = (2l + 1) / (4 pi) at every point, also at degree 60 in float32 (no overflow)."""
    for L, dtype, tol in ((8, torch.float64, 1e-12), (60, torch.float32, 1e-4)):
        f = spherical_harmonics(points(dtype=dtype), L)
        assert torch.isfinite(f).all()
        norms = torch.stack([f[:, s].square().sum(-1) for s in degree_blocks(L)], -1)
        expected = torch.tensor([(2 * l + 1) / (4 * math.pi) for l in range(L + 1)], dtype=dtype)
        torch.testing.assert_close(norms, expected.expand_as(norms), rtol=tol, atol=tol)


@pytest.mark.parametrize("seed", [0, 1])
def test_degree_kernel_depends_only_on_the_angle(seed):
    """sum_m Y_l^m(x) Y_l^m(y) = (2l + 1) / (4 pi) P_l(x . y) (addition theorem), unchanged by a rotation."""
    L, x, y = 7, points(50, seed), points(50, seed + 10)
    cos = (unit_vectors(x) * unit_vectors(y)).sum(-1)
    rotation = random_rotation(seed)
    for a, b in ((x, y), (rotate(x, rotation), rotate(y, rotation))):
        fa, fb = spherical_harmonics(a, L), spherical_harmonics(b, L)
        for l, s in enumerate(degree_blocks(L)):
            kernel = (fa[:, s] * fb[:, s]).sum(-1)
            ref = torch.from_numpy((2 * l + 1) / (4 * math.pi) * special.eval_legendre(l, cos.numpy()))
            torch.testing.assert_close(kernel, ref, rtol=0, atol=1e-10)


def test_grid_is_the_equiangular_cell_centres():
    pe = make(3)
    grid = (6, 12)
    coords = pe.coords(grid)
    torch.testing.assert_close(coords, latlon_grid(grid))
    assert coords[0].tolist() == [75.0, -165.0] and coords[-1].tolist() == [-75.0, 165.0]  # row 0 is north
    torch.testing.assert_close(pe(grid).cat, spherical_harmonics(coords, 3))
    assert pe(grid).cat.shape == (72, 16) and pe.cat_dim == 16


def test_add_projects_the_features():
    pe = make(3, combine="add")
    x = points(10).float()
    out = pe(positions=x, num_prefix=1).add
    assert out.shape == (1 + len(x), pe.dim) and pe.cat_dim == 0 and (out[0] == 0).all()
    torch.testing.assert_close(out[1:], spherical_harmonics(x, 3) @ pe.proj.weight.T)
    out.sum().backward()
    assert pe.proj.weight.grad is not None and pe.proj.weight.grad.abs().sum() > 0


def test_batched_positions_are_per_sample():
    pe, x = make(2), points(9).float()
    batched = torch.stack([x, x.flip(0)])
    out = pe(positions=batched).cat
    torch.testing.assert_close(out[1], pe(positions=x.flip(0)).cat)


@pytest.mark.parametrize("call,exc,fragment", [
    (lambda pe: pe(positions=torch.tensor([[91.0, 0.0]])), ValueError, "latitude in [-90, 90]"),
    (lambda pe: pe(positions=torch.tensor([[10.0, 200.0]])), ValueError, "longitude in [-180, 180]"),
    (lambda pe: pe(positions=torch.tensor([[[0.0, 0.0], [0.0, 360.0]]])), ValueError, "(lon, lat) order?"),
    (lambda pe: pe(positions=torch.zeros(4, 3)), ValueError, "shape (N, 2)"),
    (lambda pe: pe(positions=torch.tensor([[math.nan, 0.0]])), ValueError, "finite"),
])
def test_bad_positions(call, exc, fragment):
    with pytest.raises(exc) as info:
        call(make(2))
    assert fragment in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("opts,exc,fragment", [
    ({"dims": 1}, ValueError, "dims"),
    ({"dims": 3}, ValueError, "dims"),
    ({"max_degree": -1}, ValueError, "max_degree must be"),
    ({"max_degree": 2.5}, TypeError, "max_degree must be"),
    ({"max_degree": 7}, ValueError, "concatenates 64 channels"),
    ({"combine": "sum"}, ValueError, "combine must be one of"),
    ({"augment": "cape"}, ValueError, "pass augmented positions= instead"),
    ({"augment": "random"}, ValueError, "takes (latitude, longitude) positions on the sphere"),
])
def test_bad_options(opts, exc, fragment):
    options = {"dims": 2, "dim": 48, **opts}
    with pytest.raises(exc) as info:
        ndpe.make(kind="spherical-harmonics", **options)
    assert fragment in str(info.value) and "\n" not in str(info.value)
