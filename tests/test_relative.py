"""``relative``: T5 buckets equal x-transformers, clip tables equal Swin (timm), invariance, range, errors."""
from __future__ import annotations

import pytest
import torch

import ndpe
from ndpe.kinds.relative import clip_index, t5_bucket
from tests.conftest import assert_tells_apart

x_transformers = pytest.importorskip("x_transformers.x_transformers")
swin = pytest.importorskip("timm.models.swin_transformer")


def make(dims=1, heads=4, **opts):
    return ndpe.make(dims=dims, kind="relative", dim=8 * heads, heads=heads, **opts)


OFFSETS = torch.arange(-300, 301)  # j - i, covering exact, log and saturated buckets on both sides


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("num_buckets,max_distance", [(32, 128), (8, 20), (4, 5), (64, 256)])
def test_t5_buckets_equal_x_transformers(bidirectional, num_buckets, max_distance):
    ref = x_transformers.RelativePositionBias._relative_position_bucket(
        OFFSETS, causal=not bidirectional, num_buckets=num_buckets, max_distance=max_distance)
    ours = t5_bucket(OFFSETS, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance)
    assert torch.equal(ours, ref)
    assert ours.min() >= 0 and ours.max() < num_buckets


@pytest.mark.parametrize("bidirectional", [True, False])
def test_t5_bias_equals_x_transformers_module(bidirectional):
    """Same table, same bias: x-transformers' causal = our not bidirectional; its scale = 1 here."""
    ref = x_transformers.RelativePositionBias(scale=1.0, causal=not bidirectional, num_buckets=16,
                                              max_distance=40, heads=3)
    pe = make(heads=3, mode="t5", num_buckets=16, max_distance=40, bidirectional=bidirectional)
    with torch.no_grad():
        pe.table.copy_(ref.relative_attention_bias.weight)
        other = pe.replace(bidirectional=not bidirectional)  # the same table, the other bucketing
        assert_tells_apart(pe((50,)).bias, other((50,)).bias, ref(50, 50), rtol=1.3e-6, atol=1e-5)


@pytest.mark.parametrize("window", [(7, 7), (3, 5), (5, 2)])
def test_clip_table_equals_swin(window):
    """max_distance = window - 1 is Swin's table: same index, same bias after copying timm's table."""
    h, w = window
    pe = make(dims=2, heads=3, max_distance=(h - 1, w - 1))
    assert torch.equal(pe.index(ndpe.grid_coords(window)), swin.get_relative_position_index(h, w))
    attn = swin.WindowAttention(dim=24, num_heads=3, window_size=window)
    with torch.no_grad():
        pe.table.copy_(attn.relative_position_bias_table)
        other = pe.replace()
        other.table.copy_(attn.relative_position_bias_table.flip(0))  # offsets j - i: the other sign convention
        assert_tells_apart(pe(window).bias, other(window).bias, attn._get_rel_pos_bias()[0], rtol=1.3e-6, atol=1e-5)


@pytest.mark.parametrize("grid,max_distance", [((9,), 3), ((4, 5), (1, 2)), ((3, 4, 2), (1, 2, 0))])
def test_clip_equals_naive_loop(grid, max_distance):
    """Shaw et al.: one table row per clipped offset vector clip(p_i - p_j, -M, M), row-major over axes."""
    pe = make(dims=len(grid), max_distance=max_distance)
    m = pe.max_distance
    coords = ndpe.grid_coords(grid).long()
    table = pe.table.reshape(*[2 * k + 1 for k in m], 4)  # one table axis per offset axis, row-major
    n = coords.shape[0]
    expected = torch.empty(4, n, n)
    for i in range(n):
        for j in range(n):
            off = tuple(int((coords[i, a] - coords[j, a]).clamp(-m[a], m[a])) + m[a] for a in range(len(grid)))
            expected[:, i, j] = table[off]
    torch.testing.assert_close(pe(grid).bias, expected)


@pytest.mark.parametrize("opts,grid", [
    ({"max_distance": 2}, (12,)), ({"mode": "t5", "num_buckets": 8, "max_distance": 9}, (30,)),
    ({"max_distance": (1, 3)}, (4, 6)), ({"max_distance": 1}, (3, 3, 4)),
])
def test_translation_invariant(opts, grid):
    """bias(i, j) depends only on the offset p_i - p_j, in 1D, 2D and 3D."""
    pe = make(dims=len(grid), **opts)
    coords = ndpe.grid_coords(grid)
    bias = pe(grid).bias.detach().reshape(4, -1)
    offsets = (coords[:, None] - coords[None]).reshape(-1, len(grid))
    for off in offsets.unique(dim=0):
        vals = bias[:, (offsets == off).all(-1)]
        torch.testing.assert_close(vals, vals[:, :1].expand_as(vals))


@pytest.mark.parametrize("dims,max_distance", [(1, 4), (2, (2, 3)), (3, 1)])
def test_larger_grid_never_out_of_range(dims, max_distance):
    """Evaluating far beyond the training extent clips: every row is inside the table, edges saturate."""
    pe = make(dims=dims, max_distance=max_distance)
    grid = {1: (300,), 2: (20, 17), 3: (6, 7, 5)}[dims]
    index = pe.index(ndpe.grid_coords(grid))
    assert index.min() == 0 and index.max() == pe.table.shape[0] - 1
    far = pe(grid).bias[:, -1, 0]  # the largest offset: the all-max corner of the table
    torch.testing.assert_close(far, pe.table[-1].detach())


def test_t5_long_sequence_saturates():
    pe = make(mode="t5", num_buckets=8, max_distance=16)
    index = pe.index(ndpe.grid_coords((500,)))
    assert index.max() == 7 and index.min() == 0


def test_index_cached_gather_per_forward_carries_gradients():
    pe = make(dims=2, max_distance=2)
    a = pe._cached_index(pe.coords((3, 4)), (3, 4))
    assert pe._cached_index(pe.coords((3, 4)), (3, 4)) is a
    shifted = pe.coords((3, 4)) * 2  # same grid, other positions: not served from the cache
    assert not torch.equal(pe._cached_index(shifted, (3, 4)), a)
    pe((3, 4)).bias.sum().backward()
    counts = torch.bincount(a.flatten(), minlength=pe.table.shape[0]).float()
    torch.testing.assert_close(pe.table.grad, counts[:, None].expand_as(pe.table))  # d(sum)/d(row) = uses


def test_batched_integer_positions_and_fractional_refused():
    pe = make(max_distance=3)
    pos = torch.stack([torch.arange(6.0), torch.tensor([0.0, 2, 3, 7, 8, 20])])[..., None]  # (2, 6, 1)
    out = pe(positions=pos).bias
    assert out.shape == (2, 4, 6, 6)
    torch.testing.assert_close(out[1], pe(positions=pos[1]).bias)
    with pytest.raises(ValueError, match="fractional positions"):
        pe(positions=torch.arange(6.0)[:, None] * 0.5)


def test_init_is_swin_trunc_normal():
    torch.manual_seed(0)
    table = make(dims=2, max_distance=16).table
    assert 0.018 < table.std() < 0.022 and table.mean().abs() < 0.003  # timm's cut is at +-2 (absolute)


@pytest.mark.parametrize("dims,opts,exc,fragment", [
    (1, {"max_distance": -1}, ValueError, "max_distance must be >= 0"),
    (2, {"max_distance": (2, -1)}, ValueError, "max_distance must be >= 0"),
    (2, {"max_distance": (2, 2, 2)}, ValueError, "one per axis"),
    (2, {"max_distance": 2.5}, TypeError, "max_distance must hold ints"),
    (1, {"mode": "t5", "num_buckets": 0}, ValueError, "num_buckets must be >= 4"),
    (1, {"mode": "t5", "num_buckets": 1, "bidirectional": False}, ValueError, "num_buckets must be >= 2"),
    (1, {"mode": "t5", "num_buckets": 32, "max_distance": 8}, ValueError, "max_distance must exceed"),
    (2, {"mode": "t5"}, ValueError, "1D only"),
    (1, {"mode": "shaw"}, ValueError, "mode must be one of"),
    (1, {"num_buckets": 8}, ValueError, "apply to mode='t5'"),
    (1, {"bidirectional": False}, ValueError, "apply to mode='t5'"),
])
def test_bad_options(dims, opts, exc, fragment):
    with pytest.raises(exc, match=fragment):
        make(dims=dims, **opts)


def test_clip_index_helper_row_major():
    """Offsets (p_0 - p_1) = (-5, 5) clip to (-1, 2): row (0, 4) of a 3 x 5 table = 4; (p_1 - p_0) -> (2, 0) = 10."""
    index = clip_index(torch.tensor([[0, 7], [5, 2]]), (1, 2))
    assert index.tolist() == [[1 * 5 + 2, 0 * 5 + 4], [2 * 5 + 0, 1 * 5 + 2]]
