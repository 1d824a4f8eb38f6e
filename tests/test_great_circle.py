"""``great-circle``: pinned to a naive haversine loop; rotation invariant; the date line, poles and antipodes; units,
slopes, flex and errors."""
from __future__ import annotations

import math

import pytest
import torch

import ndpe
from ndpe.coords import latlon_grid, unit_vectors
from ndpe.kinds.alibi import alibi_slopes
from ndpe.kinds.great_circle import EARTH_RADIUS_KM
from tests.conftest import assert_tells_apart


def make(heads=4, **opts):
    return ndpe.make(dims=2, kind="great-circle", dim=8 * heads, heads=heads, **opts)


def haversine(p, q, radius):
    """The haversine formula on (lat, lon) degrees, in Python's float64 math: the reference."""
    lat1, lon1, lat2, lon2 = map(math.radians, (*p, *q))
    h = math.sin((lat2 - lat1) / 2) ** 2 + math.cos(lat1) * math.cos(lat2) * math.sin((lon2 - lon1) / 2) ** 2
    return radius * 2 * math.asin(math.sqrt(min(1.0, h)))


def naive(latlon, slopes, radius):
    """A per-pair loop: ``-slope * haversine(p_i, p_j)``, ``(heads, N, N)`` float64."""
    pts = latlon.double().tolist()
    d = torch.tensor([[haversine(p, q, radius) for q in pts] for p in pts], dtype=torch.float64)
    return -torch.tensor(slopes, dtype=torch.float64)[:, None, None] * d


def points(n=40, seed=0):
    """(lat, lon) degrees spread over the sphere, with poles, both sides of the date line and an antipodal pair."""
    g = torch.Generator().manual_seed(seed)
    lat = torch.rad2deg(torch.asin(torch.rand(n, generator=g) * 2 - 1))
    lon = torch.rand(n, generator=g) * 360 - 180
    edges = torch.tensor([[90.0, 0.0], [-90.0, 10.0], [0.0, 179.5], [0.0, -179.5], [30.0, 40.0], [-30.0, -140.0]])
    return torch.cat([torch.stack([lat, lon], -1), edges])


@pytest.mark.parametrize("unit,radius,atol", [("degree", 180 / math.pi, 1e-4), ("radian", 1.0, 2e-6),
                                              ("km", EARTH_RADIUS_KM, 2.0)])
def test_equals_naive_haversine(unit, radius, atol):
    """Every pair against the haversine formula in float64 (atol: float32 positions, about 2e-5 degrees of arc)."""
    x = points()
    ref = naive(x, alibi_slopes(4), radius).float()
    got = make(unit=unit)(positions=x).bias
    euclidean = ndpe.make(dims=2, kind="alibi", dim=32, heads=4)(positions=x).bias  # flat (lat, lon) distance
    assert_tells_apart(got, euclidean * radius * math.pi / 180, ref, rtol=1e-5, atol=atol)


def test_known_distances():
    """The date line, the poles and antipodes, in degrees of arc, and Paris-London in km."""
    pe = make(heads=1, slopes=[1.0])
    x = torch.tensor([[0.0, 179.5], [0.0, -179.5], [90.0, 0.0], [-90.0, 77.0], [30.0, 40.0], [-30.0, -140.0]])
    d = -pe(positions=x).bias[0]
    torch.testing.assert_close(d[0, 1], torch.tensor(1.0), atol=1e-4, rtol=0)  # across the date line: 1 degree
    torch.testing.assert_close(d[2, 3], torch.tensor(180.0), atol=1e-4, rtol=0)  # pole to pole
    torch.testing.assert_close(d[4, 5], torch.tensor(180.0), atol=1e-4, rtol=0)  # antipodes
    torch.testing.assert_close(d[2, 0], torch.tensor(90.0), atol=1e-4, rtol=0)  # pole to equator
    km = -make(heads=1, slopes=[1.0], unit="km")(positions=torch.tensor([[48.8566, 2.3522], [51.5074, -0.1278]])).bias
    assert 343 < float(km[0, 0, 1]) < 344  # Paris - London, about 343.5 km


def random_rotation(seed):
    q, r = torch.linalg.qr(torch.randn(3, 3, generator=torch.Generator().manual_seed(seed), dtype=torch.float64))
    q = q * torch.sign(torch.diagonal(r))
    return q if torch.det(q) > 0 else -q


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rotation_invariant(seed):
    """Rotating every position by the same rotation of the sphere leaves the bias unchanged."""
    x = points(seed=seed).double()
    v = unit_vectors(x) @ random_rotation(seed).T
    rotated = torch.stack([torch.rad2deg(torch.asin(v[:, 2].clamp(-1, 1))),
                           torch.rad2deg(torch.atan2(v[:, 1], v[:, 0]))], -1)
    pe = make()
    moved = rotated.float()
    assert (moved - x.float()).abs().max() > 10
    torch.testing.assert_close(pe(positions=moved).bias, pe(positions=x.float()).bias, rtol=1e-5, atol=2e-4)


def test_grid_wraps_at_the_date_line_and_narrows_at_the_poles():
    """On the default equiangular grid, the first and last column are neighbours, and a row step near the pole is
    shorter than at the equator."""
    grid = (7, 12)  # row 3 is the equator
    pe = make(heads=1, slopes=[1.0])
    torch.testing.assert_close(pe.coords(grid), latlon_grid(grid))
    d = -pe(grid).bias[0]
    torch.testing.assert_close(d[0, 11], d[0, 1])  # column 0 to column 11 = to column 1: 30 degrees of longitude
    assert float(d[0, 1]) < float(d[36, 37]) == pytest.approx(30.0, abs=1e-3)  # near the pole vs by the equator


def test_slopes_and_units():
    x = points(8)
    base = make(heads=3)(positions=x).bias
    torch.testing.assert_close(make(heads=3).slopes, torch.tensor(alibi_slopes(3)))
    own = make(heads=3, slopes=[1.0, 0.5, 0.0])(positions=x).bias
    torch.testing.assert_close(own[0] * alibi_slopes(3)[0], base[0])
    assert (own[2] == 0).all()
    torch.testing.assert_close(make(heads=3, unit="radian")(positions=x).bias * 180 / math.pi, base, rtol=1e-5,
                               atol=1e-4)


def test_flex_score_mod_equals_the_bias():
    pe, grid = make(heads=4), (4, 6)
    full = pe(grid).bias
    mod = pe.score_bias(pe.coords(grid))
    b, h, i, j = (t.reshape(-1) for t in torch.meshgrid(torch.zeros(1, dtype=torch.long), torch.arange(4),
                                                         torch.arange(24), torch.arange(24), indexing="ij"))
    torch.testing.assert_close(mod(b, h, i, j).reshape(4, 24, 24), full)


def test_batched_positions_and_prefix():
    pe, x = make(heads=2), points(6)
    out = pe(positions=torch.stack([x, x.flip(0)]), num_prefix=1).bias
    assert out.shape == (2, 2, len(x) + 1, len(x) + 1)
    assert (out[:, :, 0] == 0).all() and (out[:, :, :, 0] == 0).all()
    torch.testing.assert_close(out[1, :, 1:, 1:], pe(positions=x.flip(0)).bias)


@pytest.mark.parametrize("positions,fragment", [
    (torch.tensor([[-90.5, 0.0], [0.0, 0.0]]), "latitude in [-90, 90]"),
    (torch.tensor([[0.0, 0.0], [0.0, 181.0]]), "longitude in [-180, 180]"),
    (torch.tensor([[1.2, 3.1], [0.0, 6.3]]) * 100, "(lon, lat) order?"),
    (torch.zeros(3, 1), "shape (N, 2)"),
])
def test_bad_positions(positions, fragment):
    with pytest.raises(ValueError) as info:
        make()(positions=positions)
    assert fragment in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("opts,exc,fragment", [
    ({"dims": 1}, ValueError, "dims"),
    ({"unit": "mile"}, ValueError, "unit must be one of"),
    ({"slopes": [1.0]}, ValueError, "slopes must be a list of 4 finite numbers"),
    ({"slopes": [1.0, math.inf, 0.0, 0.0]}, ValueError, "finite numbers"),
    ({"slope": 1.0}, TypeError, "valid options"),
    ({"augment": "random"}, ValueError, "pass augmented positions= instead"),
])
def test_bad_options(opts, exc, fragment):
    options = {"dims": 2, "dim": 32, "heads": 4, **opts}
    with pytest.raises(exc) as info:
        ndpe.make(kind="great-circle", **options)
    assert fragment in str(info.value) and "\n" not in str(info.value)
