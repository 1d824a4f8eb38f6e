"""fourier: Tancik et al.'s gamma(v) against a naive loop, the draw (seed, sigma, state_dict), learnable B."""
from __future__ import annotations

import itertools
import math

import pytest
import torch

import ndpe
from ndpe.coords import grid_coords


def make(dims, dim=16, **opts):
    return ndpe.make(dims=dims, kind="fourier", dim=dim, **opts)


def naive_gamma(B: torch.Tensor, coords: torch.Tensor) -> torch.Tensor:
    """[cos(2 pi B v), sin(2 pi B v)], one token and one frequency at a time, float64."""
    out = torch.empty(coords.shape[0], 2 * B.shape[0], dtype=torch.float64)
    for n, k in itertools.product(range(coords.shape[0]), range(B.shape[0])):
        phase = 2 * math.pi * sum(B[k, a].item() * coords[n, a].item() for a in range(B.shape[1]))
        out[n, k], out[n, B.shape[0] + k] = math.cos(phase), math.sin(phase)
    return out


@pytest.mark.parametrize("grid", [(9,), (2, 8), (8, 2), (2, 3, 4)])
@pytest.mark.parametrize("coords", ["pixel", "centered", "index"])
def test_matches_formula(grid, coords):
    pe = make(len(grid), sigma=1.5, seed=0, coords=coords)
    assert pe.coords_mode == coords and pe.B.shape == (8, len(grid))
    out = pe(grid).add
    torch.testing.assert_close(out.double(), naive_gamma(pe.B, grid_coords(grid, coords)), atol=5e-5, rtol=0)


@pytest.mark.parametrize("dims", [1, 2, 3])
def test_bounded_unit_pairs_and_shapes(dims):
    grid = (5,) * dims
    out = make(dims, dim=24, sigma=2.0, seed=1)(grid).add
    assert out.shape == (5 ** dims, 24) and out.abs().max() <= 1.0
    torch.testing.assert_close(out[:, :12] ** 2 + out[:, 12:] ** 2, torch.ones(5 ** dims, 12))  # cos^2 + sin^2


def test_non_square_grids_differ():
    pe = make(2, seed=0)
    assert not torch.allclose(pe((2, 8)).add, pe((8, 2)).add)


def test_seed_makes_construction_reproducible():
    a, b, c = make(2, seed=7), make(2, seed=7), make(2, seed=8)
    torch.testing.assert_close(a.B, b.B, atol=0, rtol=0)
    assert not torch.equal(a.B, c.B)
    torch.manual_seed(3)
    d = make(2)
    torch.manual_seed(3)
    torch.testing.assert_close(make(2).B, d.B, atol=0, rtol=0)  # seed=None: the global RNG


def test_seed_does_not_touch_global_rng():
    torch.manual_seed(0)
    make(2, seed=5)
    after = torch.rand(1)
    torch.manual_seed(0)
    assert torch.equal(after, torch.rand(1))


@pytest.mark.parametrize("sigma", [0.5, 10.0])
def test_frequencies_are_normal_with_std_sigma(sigma):
    B = make(2, dim=4000, sigma=sigma, seed=0).B
    assert abs(B.std().item() / sigma - 1) < 0.05 and abs(B.mean().item()) < 0.05 * sigma


def test_fixed_draw_is_a_persistent_buffer():
    a, b = make(2, seed=0), make(2, seed=1)
    assert list(a.parameters()) == [] and set(a.state_dict()) == {"B"}
    stale = b((3, 4)).add  # cached for b's own draw
    b.load_state_dict(a.state_dict())
    torch.testing.assert_close(b((3, 4)).add, a((3, 4)).add)
    assert not torch.allclose(b((3, 4)).add, stale)  # loading cleared the cache
    assert a((3, 4)) is a((3, 4))


def test_learnable_gets_gradient():
    pe = make(3, learnable=True, seed=0)
    assert isinstance(pe.B, torch.nn.Parameter)
    pe((2, 3, 2), num_prefix=1).add.sum().backward()
    assert pe.B.grad is not None and pe.B.grad.abs().sum() > 0


def test_batched_positions():
    pe = make(1, seed=0)
    pos = torch.rand(3, 5, 1) * 2 - 1
    out = pe(positions=pos).add
    assert out.shape == (3, 5, 16)
    torch.testing.assert_close(out[2], pe(positions=pos[2]).add)


@pytest.mark.parametrize("opts,match", [
    ({"dim": 15}, "even dim"),
    ({"sigma": 0.0}, "sigma must be > 0"),
    ({"coords": "pixels"}, "coords must be one of"),
])
def test_bad_options(opts, match):
    with pytest.raises(ValueError, match=match):
        make(2, **opts)
