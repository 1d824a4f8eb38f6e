"""``alibi``: the paper's slopes, equal to x-transformers ``AlibiPositionalBias``, translation invariance, errors."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import ndpe
from ndpe.kinds.alibi import alibi_slopes
from tests.conftest import assert_tells_apart

x_transformers = pytest.importorskip("x_transformers.x_transformers")


def make(dims=1, heads=8, **opts):
    return ndpe.make(dims=dims, kind="alibi", dim=8 * heads, heads=heads, **opts)


def test_slopes_8_heads_are_the_papers():
    """Press et al. 2022, section 3: 8 heads get 1/2, 1/4, ..., 1/256."""
    assert alibi_slopes(8) == [2.0 ** -k for k in range(1, 9)]


@pytest.mark.parametrize("heads", [6, 12])
def test_slopes_non_power_of_two_rule(heads):
    """Closest power of two P below, then every other slope of 2P (odd powers of 2**(-8/(2P)))."""
    p = 2 ** math.floor(math.log2(heads))
    expected = [2.0 ** (-8 * h / p) for h in range(1, p + 1)]
    expected += [2.0 ** (-8 * h / (2 * p)) for h in range(1, 2 * p + 1, 2)][: heads - p]
    assert alibi_slopes(heads) == pytest.approx(expected, rel=1e-12)
    if heads == 6:  # written out: 4-head slopes, then 1/sqrt(2), 1/2**1.5 ... from the 8-head sequence
        assert alibi_slopes(6) == pytest.approx([1 / 4, 1 / 16, 1 / 64, 1 / 256, 2 ** -1, 2 ** -3])


@pytest.mark.parametrize("heads", [1, 3, 6, 8, 12, 16])
def test_slopes_equal_x_transformers(heads):
    assert alibi_slopes(heads) == pytest.approx(x_transformers.AlibiPositionalBias._get_slopes(heads), rel=1e-12)
    torch.testing.assert_close(make(heads=heads).slopes, torch.tensor(alibi_slopes(heads)))


@pytest.mark.parametrize("heads", [4, 6])
def test_bidirectional_bias_equals_x_transformers(heads):
    """x-transformers builds the symmetric -slope * |i - j| for every head (total_heads = heads)."""
    ref = x_transformers.AlibiPositionalBias(heads=heads, total_heads=heads)(10, 10)  # (heads, 10, 10)
    causal = make(heads=heads, causal=True)((10,)).bias  # the wrong option: the causal form
    assert_tells_apart(make(heads=heads)((10,)).bias, causal, ref.float(), rtol=1.3e-6, atol=1e-5)


def test_causal_form_equals_x_transformers_under_the_causal_mask():
    """x-transformers relies on its causal mask; ours is -slope * (i - j) below the diagonal, 0 above."""
    n = 9
    ref = x_transformers.AlibiPositionalBias(heads=4)(n, n).float()
    ours = make(heads=4, causal=True)((n,)).bias
    lower = torch.ones(n, n, dtype=torch.bool).tril()
    i, j = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
    slopes = torch.tensor(alibi_slopes(4))[:, None, None]
    torch.testing.assert_close(ours, torch.where(lower, -slopes * (i - j), 0.0))
    mask = ndpe.causal_mask(n)
    torch.testing.assert_close((ours + mask).softmax(-1), (ref + mask).softmax(-1))
    q, k, v = (torch.randn(2, 4, n, 8) for _ in range(3))
    attn = F.scaled_dot_product_attention(q, k, v, attn_mask=ours + mask)
    torch.testing.assert_close(attn, F.scaled_dot_product_attention(q, k, v, attn_mask=ref + mask))


@pytest.mark.parametrize("alibi_heads,slopes", [(2, None), (3, None), (5, None), (3, [0.9, 0.05, 0.3]),
                                                (6, [2.0 ** -k for k in range(6)])])
def test_head_subset_and_slopes_equal_x_transformers(alibi_heads, slopes):
    """x-transformers' ``alibi_num_heads=n`` (``AlibiPositionalBias(heads=n, total_heads=H, slopes=)``): the first n
    heads biased with the paper's slopes for n heads (or the given ones), the others 0; also its causal use."""
    total = 6
    ref = x_transformers.AlibiPositionalBias(heads=alibi_heads, total_heads=total, slopes=slopes)
    pe = make(heads=total, alibi_heads=alibi_heads, slopes=slopes)
    torch.testing.assert_close(pe((9,)).bias, ref(9, 9).float())
    expected = alibi_slopes(alibi_heads) if slopes is None else slopes
    torch.testing.assert_close(pe.slopes, torch.tensor(expected + [0.0] * (total - alibi_heads)))
    mask = ndpe.causal_mask(9)
    causal = make(heads=total, alibi_heads=alibi_heads, slopes=slopes, causal=True)((9,)).bias
    torch.testing.assert_close((causal + mask).softmax(-1), (ref(9, 9).float() + mask).softmax(-1))


def test_listed_heads_take_the_slopes_in_order():
    """``alibi_heads=[3, 0]``: head 3 takes the first slope, head 0 the second; heads 1, 2 are unbiased. Equal to
    x-transformers' first-n layout with its heads permuted, in 2D (Manhattan) as in 1D."""
    pe = make(dims=2, heads=4, alibi_heads=[3, 0], slopes=[0.25, 0.75], distance="manhattan")
    bias = pe((3, 4)).bias
    assert (bias[[1, 2]] == 0).all() and (bias[[0, 3]] < 0).any()
    full = make(dims=2, heads=2, slopes=[0.25, 0.75], distance="manhattan")((3, 4)).bias  # every head biased
    torch.testing.assert_close(bias[[3, 0]], full)
    ref = x_transformers.AlibiPositionalBias(heads=2, total_heads=4, slopes=[0.25, 0.75])(7, 7).float()
    ours = make(heads=4, alibi_heads=[3, 0], slopes=[0.25, 0.75])((7,)).bias
    torch.testing.assert_close(ours[[3, 0, 1, 2]], ref)


def test_head_subset_in_flex_score_mod_and_decoding():
    """The flex score_mod and KV-cache decoding read the same per-head slopes (0 for unbiased heads)."""
    pe = make(heads=4, alibi_heads=[1, 2], slopes=[0.5, 0.125])
    full = pe((6,)).bias
    mod = pe.score_bias(ndpe.grid_coords((6,)))
    b, h, i, j = (t.reshape(-1) for t in torch.meshgrid(torch.zeros(1, dtype=torch.long), torch.arange(4),
                                                         torch.arange(6), torch.arange(6), indexing="ij"))
    torch.testing.assert_close(mod(b, h, i, j).reshape(4, 6, 6), full)
    torch.testing.assert_close(pe((2,), past=4).bias, full[:, 4:])


def naive(coords, slopes, distance):
    """A per-pair loop: -slope * ||p_i - p_j|| (euclidean or manhattan)."""
    n = coords.shape[0]
    out = torch.zeros(len(slopes), n, n)
    for i in range(n):
        for j in range(n):
            d = coords[i] - coords[j]
            length = d.abs().sum() if distance == "manhattan" else d.pow(2).sum().sqrt()
            out[:, i, j] = -torch.tensor(slopes) * length
    return out


@pytest.mark.parametrize("grid,distance", [((3, 4), "euclidean"), ((4, 3), "manhattan"), ((2, 3, 2), "euclidean"),
                                           ((2, 2, 3), "manhattan")])
def test_nd_bias_equals_naive_loop(grid, distance):
    pe = make(dims=len(grid), heads=4, distance=distance)
    torch.testing.assert_close(pe(grid).bias, naive(ndpe.grid_coords(grid), alibi_slopes(4), distance))


@pytest.mark.parametrize("grid", [(12,), (4, 5), (3, 2, 4)])
def test_translation_invariant(grid):
    """bias(i, j) depends only on p_i - p_j: every pair with the same offset has the same bias."""
    pe = make(dims=len(grid), heads=2)
    coords = ndpe.grid_coords(grid)
    bias = pe(grid).bias
    offsets = (coords[:, None] - coords[None]).reshape(-1, len(grid))
    flat = bias.reshape(2, -1)
    for off in offsets.unique(dim=0):
        vals = flat[:, (offsets == off).all(-1)]
        torch.testing.assert_close(vals, vals[:, :1].expand_as(vals))
    shifted = pe(positions=coords + torch.tensor([0.5 * (a + 1) for a in range(len(grid))]))
    torch.testing.assert_close(shifted.bias, bias)


def test_larger_grid_extends_training_grid():
    """ALiBi extrapolates: the 8-token bias is the top-left block of the 32-token one."""
    pe = make(heads=4)
    torch.testing.assert_close(pe((32,)).bias[:, :8, :8], pe((8,)).bias)


def test_cached_and_prefix_zero():
    pe = make(dims=2, heads=2)
    assert pe((3, 3)) is pe((3, 3))
    out = pe((3, 3), num_prefix=1).bias
    assert out.shape == (2, 10, 10) and (out[:, 0] == 0).all() and (out[:, :, 0] == 0).all()


@pytest.mark.parametrize("opts,dims,exc,fragment", [
    ({"causal": True}, 2, ValueError, "causal=True needs dims=1"),
    ({"causal": True}, 3, ValueError, "causal=True needs dims=1"),
    ({"distance": "chebyshev"}, 2, ValueError, "distance must be one of"),
    ({"causal": "yes"}, 1, TypeError, "causal must be a bool"),
    ({"slope": [1.0]}, 1, TypeError, "valid options"),
    ({"slopes": [1.0]}, 1, ValueError, "slopes must be a list of 4 finite numbers"),
    ({"slopes": 0.5}, 1, ValueError, "slopes must be a list of 4"),
    ({"slopes": [0.5, math.nan, 0.1, 0.1]}, 1, ValueError, "finite numbers"),
    ({"alibi_heads": 2, "slopes": [0.5, 0.2, 0.1]}, 1, ValueError, "list of 2 finite numbers"),
    ({"alibi_heads": 0}, 1, ValueError, r"number of heads in 1..heads=4"),
    ({"alibi_heads": 5}, 1, ValueError, r"number of heads in 1..heads=4"),
    ({"alibi_heads": [0, 4]}, 2, ValueError, r"distinct head indices in 0..3"),
    ({"alibi_heads": [1, 1]}, 1, ValueError, "distinct head indices"),
    ({"alibi_heads": "0"}, 1, TypeError, "list of head indices"),
    ({"alibi_heads": []}, 1, TypeError, "non-empty list"),
])
def test_bad_options(opts, dims, exc, fragment):
    with pytest.raises(exc, match=fragment):
        make(dims=dims, heads=4, **opts)


def test_bad_heads():
    with pytest.raises(ValueError, match="heads must be a positive int"):
        alibi_slopes(0)
