"""coord: CoordConv channels for tokens (cat) and conv maps (AddCoords), against naive loops and the paper's code."""
from __future__ import annotations

import itertools
import math

import pytest
import torch

import ndpe
from ndpe.kinds.coord import AddCoords


def make(dims, dim=16, **opts):
    return ndpe.make(dims=dims, kind="coord", dim=dim, **opts)


def pixel(i: int, n: int) -> float:
    return 0.0 if n == 1 else -1.0 + 2.0 * i / (n - 1)


def naive(grid, with_r=False):
    """Row-major loop over the grid: [x_0, .., x_{dims-1}(, r)] per token."""
    rows = []
    for idx in itertools.product(*[range(n) for n in grid]):
        x = [pixel(i, n) for i, n in zip(idx, grid)]
        rows.append(x + [math.sqrt(sum(v * v for v in x))] if with_r else x)
    return torch.tensor(rows)


def coordconv_port(x: torch.Tensor, with_r: bool) -> torch.Tensor:
    """AddCoords of the popular CoordConv port (mkocabas/CoordConv-pytorch), following the paper's TF code."""
    batch_size, _, x_dim, y_dim = x.size()
    xx_channel = torch.arange(x_dim).repeat(1, y_dim, 1)
    yy_channel = torch.arange(y_dim).repeat(1, x_dim, 1).transpose(1, 2)
    xx_channel = xx_channel.float() / (x_dim - 1) * 2 - 1
    yy_channel = yy_channel.float() / (y_dim - 1) * 2 - 1
    xx_channel = xx_channel.repeat(batch_size, 1, 1, 1).transpose(2, 3)
    yy_channel = yy_channel.repeat(batch_size, 1, 1, 1).transpose(2, 3)
    ret = torch.cat([x, xx_channel, yy_channel], dim=1)
    if with_r:
        rr = torch.sqrt(torch.pow(xx_channel - 0.5, 2) + torch.pow(yy_channel - 0.5, 2))
        ret = torch.cat([ret, rr], dim=1)
    return ret


@pytest.mark.parametrize("grid", [(7,), (1,), (2, 8), (8, 2), (1, 3), (2, 3, 4), (3, 1, 2)])
@pytest.mark.parametrize("with_r", [False, True])
def test_cat_is_pixel_coords_and_radius(grid, with_r):
    pe = make(len(grid), with_r=with_r)
    out = pe(grid).cat
    assert pe.cat_dim == len(grid) + with_r and out.shape == (math.prod(grid), pe.cat_dim)
    assert pe(grid).add is None
    torch.testing.assert_close(out, naive(grid, with_r))
    assert out[:, :len(grid)].abs().max() <= 1.0


def test_non_square_grids_differ():
    pe = make(2)
    assert not torch.equal(pe((2, 8)).cat, pe((8, 2)).cat)
    torch.testing.assert_close(pe((2, 8)).cat[9], torch.tensor([1.0, pixel(1, 8)]))  # token (1, 1): row first


@pytest.mark.parametrize("coords", ["index", "centered"])
def test_other_coordinate_modes(coords):
    pe = make(2, coords=coords, with_r=True)
    assert pe.coords_mode == coords
    expected = ndpe.grid_coords((3, 4), coords)
    out = pe((3, 4)).cat
    torch.testing.assert_close(out[:, :2], expected)
    torch.testing.assert_close(out[:, 2], expected.norm(dim=-1))


def test_model_embeds_to_dim_minus_cat_dim():
    pe = make(2, dim=32, with_r=True)
    pos = pe((3, 5), num_prefix=1)
    x = torch.randn(2, 16, 32 - pe.cat_dim)
    y = ndpe.apply_tokens(x, pos)
    assert y.shape == (2, 16, 32)
    torch.testing.assert_close(y[:, 1:, -3:], naive((3, 5), True).expand(2, -1, -1))
    assert (y[:, 0, -3:] == 0).all()  # the cls token gets zero coordinates


def test_batched_positions_and_fixed():
    pe = make(1, with_r=True)
    pos = torch.tensor([[[-0.5], [0.25]], [[1.0], [0.0]]])
    out = pe(positions=pos).cat
    assert out.shape == (2, 2, 2)
    torch.testing.assert_close(out, torch.cat([pos, pos.abs()], -1))
    assert list(pe.parameters()) == [] and pe((4,)) is pe((4,))


@pytest.mark.parametrize("shape", [(2, 3, 5), (1, 2, 4, 1), (2, 1, 3, 4), (1, 2, 2, 3, 4)])
@pytest.mark.parametrize("with_r", [False, True])
def test_addcoords_matches_naive_loop(shape, with_r):
    x = torch.randn(shape)
    spatial = shape[2:]
    y = AddCoords(len(spatial), with_r=with_r)(x)
    extra = len(spatial) + with_r
    assert y.shape == (shape[0], shape[1] + extra, *spatial)
    torch.testing.assert_close(y[:, :shape[1]], x)
    ref = naive(spatial, with_r)  # (N, extra), row-major
    for n, idx in enumerate(itertools.product(*[range(s) for s in spatial])):
        for b in range(shape[0]):
            torch.testing.assert_close(y[(b, slice(shape[1], None), *idx)], ref[n])


def test_addcoords_agrees_with_token_kind():
    x = torch.randn(1, 4, 3, 5)
    y = AddCoords(2, with_r=True)(x)[0, 4:]  # (3, 3, 5)
    torch.testing.assert_close(y.flatten(1).t(), make(2, with_r=True)((3, 5)).cat)


@pytest.mark.parametrize("hw", [(4, 6), (7, 3), (5, 5)])
def test_addcoords_versus_coordconv_paper_code(hw):
    """Same x (row) and y (column) channels as the paper's construction; its radius is centred at (0.5, 0.5)."""
    x = torch.randn(2, 3, *hw)
    ours, port = AddCoords(2, with_r=True)(x), coordconv_port(x, with_r=True)
    torch.testing.assert_close(ours[:, :5], port[:, :5])
    xy = ours[:, 3:5]
    torch.testing.assert_close(port[:, 5], (xy - 0.5).norm(dim=1))  # off-centre radius in the port
    torch.testing.assert_close(ours[:, 5], xy.norm(dim=1))
    r = ours[0, 5]
    if hw[0] % 2 and hw[1] % 2:  # odd sizes: the centre pixel is at r = 0, the corners at sqrt(2)
        assert r[hw[0] // 2, hw[1] // 2] == 0
    torch.testing.assert_close(r[0, 0], torch.tensor(math.sqrt(2)))
    torch.testing.assert_close(r, r.flip(0).flip(1))  # centred: symmetric under a 180 degree turn


def test_addcoords_dtype_and_size_one():
    y = AddCoords(2)(torch.randn(1, 1, 1, 4, dtype=torch.bfloat16))
    assert y.dtype == torch.bfloat16 and (y[0, 1] == 0).all()  # a single row sits at 0, not NaN


@pytest.mark.parametrize("build,match", [
    (lambda: make(2, dim=2), "use dim > 2"),
    (lambda: make(3, dim=4, with_r=True), "use dim > 4"),
    (lambda: make(2, coords="pixels"), "coords must be one of"),
    (lambda: AddCoords(4), "dims 1, 2 or 3"),
    (lambda: AddCoords(2)(torch.randn(1, 2, 3)), "4-D input"),
])
def test_errors(build, match):
    with pytest.raises(ValueError, match=match):
        build()
