"""``fire``: the paper's formula as a per-pair loop, interpolation in [0, 1], translation, decoding, flex, errors."""
from __future__ import annotations

import math

import pytest
import torch

import ndpe
from ndpe import flex


def make(dims=1, heads=3, seed=0, **opts):
    """A fire encoding with every parameter moved off its init (so a wrong sign or index shows)."""
    torch.manual_seed(seed)
    pe = ndpe.make(dims=dims, kind="fire", dim=8 * heads, heads=heads, **opts)
    with torch.no_grad():
        for p in pe.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return pe


def mlp(pe, x: float) -> torch.Tensor:
    """f(x) (heads,) written out: W2 relu(W1 x + b1) + b2."""
    w1, b1 = pe.mlp[0].weight[:, 0], pe.mlp[0].bias
    w2, b2 = pe.mlp[2].weight, pe.mlp[2].bias
    return w2 @ torch.relu(w1 * x + b1) + b2


def naive(pe, coords, keys=None):
    """The formula per pair: f(psi(d) / psi(max(L, r))), psi(x) = log(c x + 1), c and L positive.

    Causal: d = i - j, r = i (keys after the query: 0). Bidirectional: d = ||p_i - p_j||, r = the longest
    distance from the query to a key (a full grid: the farthest corner).
    """
    keys = coords if keys is None else keys
    c = abs(float(pe.c))
    big_l = abs(float(pe.L_multiplier) * pe.init_L)
    out = torch.zeros(pe.heads, len(coords), len(keys))
    for i, p in enumerate(coords.tolist()):
        if pe.causal:
            r = p[0]
        else:
            r = max(math.dist(p, kk) for kk in keys.tolist())
        for j, kk in enumerate(keys.tolist()):
            d = p[0] - kk[0] if pe.causal else math.dist(p, kk)
            if d < 0:
                continue  # a key after the query: 0, masked by the attention
            x = math.log(c * d + 1) / (math.log(c * max(big_l, r) + 1) + 1e-6)
            out[:, i, j] = mlp(pe, x)
    return out


@pytest.mark.parametrize("grid,opts", [
    ((12,), {"causal": True, "init_L": 5.0}),     # queries below and beyond L
    ((12,), {"causal": True}),                    # all below the paper's L = 512
    ((9,), {"init_L": 3.0}),
    ((3, 4), {"init_L": 2.0}),
    ((4, 3), {}),
    ((2, 3, 2), {"init_L": 1.5, "mlp_width": 5}),
])
def test_equals_naive_formula(grid, opts):
    pe = make(dims=len(grid), **opts)
    with torch.no_grad():
        torch.testing.assert_close(pe(grid).bias, naive(pe, ndpe.grid_coords(grid)), rtol=1e-5, atol=1e-5)


def test_defaults_and_parameters_are_the_papers():
    """MLP 1 -> 32 -> heads with ReLU, c = 0.1, L = |1 * 512|; parameter names as the paper's code."""
    pe = ndpe.make(dims=1, kind="fire", dim=64, heads=8, causal=True)
    assert [type(m).__name__ for m in pe.mlp] == ["Linear", "ReLU", "Linear"]
    assert pe.mlp[0].weight.shape == (32, 1) and pe.mlp[2].weight.shape == (8, 32)
    assert pe.c.item() == pytest.approx(0.1) and pe.threshold.item() == 512.0
    assert set(pe.state_dict()) == {"mlp.0.weight", "mlp.0.bias", "mlp.2.weight", "mlp.2.bias", "c", "L_multiplier"}


def test_c_and_threshold_enter_as_absolute_values():
    """A negative c or L multiplier (reachable by gradient steps) acts as its absolute value, as the paper's code."""
    a, b = make(causal=True, init_L=4.0), make(causal=True, init_L=4.0)
    with torch.no_grad():
        b.c.neg_()
        b.L_multiplier.neg_()
        torch.testing.assert_close(a((10,)).bias, b((10,)).bias)


def test_causal_future_keys_are_zero_and_diagonal_is_f0():
    pe = make(causal=True, init_L=3.0)
    bias = pe((8,)).bias.detach()
    upper = torch.ones(8, 8, dtype=torch.bool).triu(1)
    assert (bias[:, upper] == 0).all()
    torch.testing.assert_close(bias[:, torch.arange(8), torch.arange(8)], mlp(pe, 0.0).detach()[:, None].expand(3, 8))


@pytest.mark.parametrize("causal", [True, False])
def test_normalized_distance_interpolates_in_unit_interval(causal):
    """Beyond L the inputs stay in [0, 1]: the farthest key maps to 1 and a fixed offset shrinks as i grows."""
    pe = make(causal=causal, init_L=8.0)
    with torch.no_grad():
        x = pe.normalized_distance(pe.coords((200,)))
    seen = x.tril() if causal else x
    assert seen.min() >= 0 and seen.max() <= 1 + 1e-6
    if causal:
        big_l = pe.threshold.item()
        start = math.ceil(big_l)
        torch.testing.assert_close(x[start:, 0], torch.ones(200 - start), atol=1e-4, rtol=0)  # d = i = r beyond L
        offset3 = torch.stack([x[i, i - 3] for i in range(start, 200)])
        assert (offset3.diff() < 0).all()  # progressive interpolation: the same offset gets closer
        within = torch.stack([x[i, i - 3] for i in range(3, math.floor(big_l) + 1)])  # r_i = i <= L: psi(L)
        assert len(within) >= 2
        torch.testing.assert_close(within, within[:1].expand_as(within))
    else:
        torch.testing.assert_close(x[0, -1], torch.tensor(1.0), atol=1e-4, rtol=0)
        torch.testing.assert_close(x[-1, 0], torch.tensor(1.0), atol=1e-4, rtol=0)


@pytest.mark.parametrize("grid", [(3, 5), (2, 3, 4)])
def test_nd_normalized_distance_in_unit_interval(grid):
    pe = make(dims=len(grid), init_L=0.5)
    with torch.no_grad():
        x = pe.normalized_distance(pe.coords(grid))
    assert x.min() >= 0 and x.max() <= 1 + 1e-6
    torch.testing.assert_close(x.amax(-1), torch.ones(x.shape[0]), atol=1e-4, rtol=0)  # each query's farthest key


def test_causal_below_threshold_depends_on_offset_only():
    """Every query below L shares the normaliser psi(L): the bias is a function of i - j, so shifting all
    positions (still below L) changes nothing; past L the same offsets give other biases."""
    pe = make(causal=True, init_L=20.0)
    coords = ndpe.grid_coords((10,))
    with torch.no_grad():
        bias = pe(positions=coords).bias
        torch.testing.assert_close(pe(positions=coords + 7).bias, bias)
        assert not torch.allclose(pe(positions=coords + 30).bias, bias, atol=1e-4)
    for off in range(10):
        band = bias.diagonal(-off, dim1=-2, dim2=-1)  # (heads, 10 - off): pairs with i - j = off
        torch.testing.assert_close(band, band[:, :1].expand_as(band))


@pytest.mark.parametrize("grid", [(9,), (3, 4), (2, 3, 2)])
def test_bidirectional_translation_invariant(grid):
    """r and d are differences of positions: moving every position together leaves the bias unchanged,
    whatever L (here below the grid's extent, so the normaliser varies per query)."""
    pe = make(dims=len(grid), init_L=1.0)
    coords = ndpe.grid_coords(grid)
    with torch.no_grad():
        shift = torch.tensor([3.5, -2.0, 11.0][: len(grid)])
        torch.testing.assert_close(pe(positions=coords + shift).bias, pe(grid).bias, rtol=1e-5, atol=1e-5)


def test_bidirectional_below_threshold_depends_on_distance_only():
    pe = make(dims=2, init_L=100.0)
    coords = ndpe.grid_coords((4, 5))
    with torch.no_grad():
        bias = pe((4, 5)).bias.reshape(3, -1)
    dist = torch.cdist(coords, coords).flatten()
    for d in dist.unique():
        vals = bias[:, (dist - d).abs() < 1e-5]
        torch.testing.assert_close(vals, vals[:, :1].expand_as(vals))


def test_bidirectional_form_refuses_to_decode():
    """An early query's normalizer sees later keys in the full sequence, so cached decoding would differ."""
    with pytest.raises(ValueError, match="needs fire causal=True"):
        make(causal=False, init_L=3.0).eval()((1,), past=5)


@pytest.mark.parametrize("past,n,prefix", [(5, 1, 0), (4, 3, 0), (6, 2, 1)])
def test_decoding_rows_equal_full_sequence(past, n, prefix):
    pe = make(causal=True, init_L=3.0).eval()
    with torch.no_grad():
        step = pe((n,), past=past, num_prefix=prefix).bias
        full = pe((past + n,), num_prefix=prefix).bias
    assert step.shape == (3, n, prefix + past + n)
    torch.testing.assert_close(step, full[:, prefix + past:, :], rtol=1e-6, atol=1e-6)


def test_batched_positions_equal_one_by_one():
    pe = make(causal=True, init_L=4.0)
    pos = torch.stack([torch.arange(6.0), torch.tensor([0.0, 2, 3, 7, 8, 20])])[..., None]
    with torch.no_grad():
        out = pe(positions=pos).bias
        assert out.shape == (2, 3, 6, 6)
        for b in range(2):
            torch.testing.assert_close(out[b], naive(pe, pos[b]), rtol=1e-5, atol=1e-5)


def evaluate(fn, heads, n):
    """A score_bias function evaluated at every (h, i, j), as flex would."""
    t = torch.tensor
    return torch.tensor([[[float(fn(t(0), t(h), t(i), t(j))) for j in range(n)] for i in range(n)]
                         for h in range(heads)])


@pytest.mark.parametrize("grid,opts", [((10,), {"causal": True, "init_L": 4.0}), ((7,), {"init_L": 2.0}),
                                       ((3, 4), {"init_L": 2.0}), ((2, 2, 3), {})])
def test_score_bias_equals_materialized(grid, opts):
    pe = make(dims=len(grid), **opts)
    with torch.no_grad():
        got = evaluate(pe.score_bias(pe.coords(grid)), 3, math.prod(grid))
        torch.testing.assert_close(got, pe(grid).bias, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(not flex.flex_available()[0], reason=flex.flex_available()[1])
@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
@pytest.mark.parametrize("grid,opts,causal", [((9,), {"causal": True, "init_L": 3.0}, True),
                                              ((3, 4), {"init_L": 2.0}, False)])
def test_flex_attention_equals_sdpa(grid, opts, causal):
    pe = make(dims=len(grid), **opts)
    n = 1 + math.prod(grid)
    q, k, v = (torch.randn(2, 3, n, 8) for _ in range(3))
    with torch.no_grad():
        out = flex.attention(q, k, v, pe, grid, num_prefix=1, causal=causal, compiled=False)
        mask = pe(grid, num_prefix=1).bias + (ndpe.causal_mask(n) if causal else 0)
        ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


def test_memory_budget_refuses_large_grids():
    pe = ndpe.make(dims=1, kind="fire", dim=32, heads=4)
    assert pe.bias_bytes(1, 1000, 0) == 4 * 1000 ** 2 * (1 + 3 + 64 + 8)
    previous = ndpe.set_bias_budget(10 ** 6)
    try:
        with pytest.raises(MemoryError, match="fire bias"):
            pe((1000,))
    finally:
        ndpe.set_bias_budget(previous)


@pytest.mark.parametrize("dims,opts,exc,fragment", [
    (2, {"causal": True}, ValueError, "causal=True needs dims=1"),
    (1, {"causal": "yes"}, TypeError, "causal must be a bool"),
    (1, {"mlp_width": 0}, ValueError, "mlp_width must be a positive int"),
    (1, {"mlp_width": 8.0}, TypeError, "mlp_width must be a positive int"),
    (1, {"init_c": 0.0}, ValueError, "init_c must be > 0.0"),
    (1, {"init_L": -1.0}, ValueError, "init_L must be > 0.0"),
    (1, {"init_L": float("inf")}, ValueError, "init_L must be finite"),
    (1, {"threshold": 3}, TypeError, "valid options"),
])
def test_bad_options(dims, opts, exc, fragment):
    with pytest.raises(exc, match=fragment):
        ndpe.make(dims=dims, kind="fire", dim=16, heads=2, **opts)
