"""``rope``: a naive per-pair reference, the relative-position property, conventions and errors."""
from __future__ import annotations

import itertools
import math

import pytest
import torch

import ndpe

torch.manual_seed(0)


def naive_rope(q: torch.Tensor, grid, axis_dims, theta, pairing) -> torch.Tensor:
    """Rotate ``q`` ``(N, head_dim)`` pair by pair with python floats: the textbook definition."""
    out = q.clone()
    half = sum(axis_dims) // 2
    for n, coord in enumerate(itertools.product(*[range(s) for s in grid])):  # ij, row-major
        p = 0  # global frequency (pair) index
        for a, d in enumerate(axis_dims):
            for j in range(d // 2):
                angle = coord[a] * theta[a] ** (-2 * j / d)
                i1, i2 = (p, p + half) if pairing == "half" else (2 * p, 2 * p + 1)
                x1, x2 = q[n, i1].item(), q[n, i2].item()
                out[n, i1] = x1 * math.cos(angle) - x2 * math.sin(angle)
                out[n, i2] = x2 * math.cos(angle) + x1 * math.sin(angle)
                p += 1
    return out


def rotate(pe, q, grid=None, positions=None):
    """Apply ``pe`` to ``q`` ``(..., N, head_dim)`` through the public API (q and k alike)."""
    pos = pe(grid, positions=positions)
    if q.ndim == 2:  # cos/sin carry a heads axis: (1, N, r)
        return ndpe.apply_qk(q[None], q[None], pos)[0][0]
    return ndpe.apply_qk(q, q, pos)[0]


CASES = [  # dims, head_dim, axis_dims (None = default), theta, grid
    (1, 8, None, 10000.0, (9,)),
    (1, 12, (8,), 100.0, (5,)),  # partial rotation: 4 channels pass through
    (2, 8, None, 10000.0, (3, 4)),
    (2, 12, (4, 6), (100.0, 10.0), (2, 5)),  # uneven split, per-axis theta, 2 channels unrotated
    (2, 8, (2, 6), 10000.0, (5, 2)),
    (3, 12, None, 10000.0, (2, 3, 2)),
    (3, 16, (2, 4, 6), (10.0, 100.0, 1000.0), (3, 2, 2)),
]


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
@pytest.mark.parametrize("dims,head_dim,axis_dims,theta,grid", CASES)
def test_matches_naive_loop(dims, head_dim, axis_dims, theta, grid, pairing):
    pe = ndpe.make(dims=dims, kind="rope", dim=2 * head_dim, heads=2, axis_dims=axis_dims, theta=theta, pairing=pairing)
    q = torch.randn(math.prod(grid), head_dim, dtype=torch.float64)
    thetas = theta if isinstance(theta, tuple) else (theta,) * dims
    ref = naive_rope(q, grid, pe.axis_dims, thetas, pairing)
    torch.testing.assert_close(rotate(pe, q, grid), ref, rtol=1e-6, atol=1e-6)
    if sum(pe.axis_dims) < head_dim:
        assert torch.equal(rotate(pe, q, grid)[:, pe.rot_dim:], q[:, pe.rot_dim:]), "leftover channels untouched"


@pytest.mark.parametrize("dims,head_dim,expected", [(1, 64, (64,)), (2, 64, (32, 32)), (3, 64, (20, 20, 20)),
                                                    (2, 6, (2, 2)), (3, 6, (2, 2, 2))])
def test_default_axis_dims_equal_even_shares(dims, head_dim, expected):
    pe = ndpe.make(dims=dims, kind="rope", dim=head_dim, heads=1)
    assert pe.axis_dims == expected and pe.rot_dim == sum(expected)


def _offset_groups(coords: torch.Tensor):
    """Pairs (m, n) of token indices grouped by their offset vector coords[m] - coords[n]."""
    groups: dict[tuple, list] = {}
    for m, n in itertools.product(range(len(coords)), repeat=2):
        groups.setdefault(tuple((coords[m] - coords[n]).tolist()), []).append((m, n))
    return groups


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
@pytest.mark.parametrize("dims,grid", [(1, (7,)), (2, (2, 8)), (2, (8, 2)), (3, (2, 3, 2))])
def test_scores_depend_only_on_offset(dims, grid, pairing):
    """q.k between tokens m and n depends on coords[m] - coords[n] only (every axis)."""
    pe = ndpe.make(dims=dims, kind="rope", dim=12, heads=1, pairing=pairing, axis_dims=(12 // dims // 2 * 2,) * dims)
    n = math.prod(grid)
    gen = torch.Generator().manual_seed(0)  # fixed: two offsets' scores can meet by chance at 4 decimals
    q, k = torch.randn(12, dtype=torch.float64, generator=gen), torch.randn(12, dtype=torch.float64, generator=gen)
    rq, rk = rotate(pe, q.expand(n, 12), grid), rotate(pe, k.expand(n, 12), grid)
    scores = rq @ rk.T  # (N, N)
    groups = _offset_groups(pe.coords(grid))
    for pairs in groups.values():
        vals = torch.stack([scores[m, j] for m, j in pairs])
        torch.testing.assert_close(vals, vals[:1].expand_as(vals), rtol=1e-6, atol=1e-6)  # cos/sin are float32
    # and it does depend on the offset: distinct offsets give distinct scores
    reps = torch.stack([scores[p[0]] for p in groups.values()])
    assert len(torch.unique(reps.round(decimals=4))) == len(groups)


def test_transposed_grids_encode_rows_and_columns():
    """(2, 8) and (8, 2) differ; token k of a (R, C) grid sits at (k // C, k % C)."""
    pe = ndpe.make(dims=2, kind="rope", dim=8, heads=1)
    wide, tall = pe((2, 8)).rot[0][0], pe((8, 2)).rot[0][0]
    assert not torch.allclose(wide, tall)
    f = pe.inv_freq.float()
    for grid, cos in (((2, 8), wide), ((8, 2), tall)):
        k = grid[1] + 1  # second row, second column
        torch.testing.assert_close(cos[k], torch.cat([torch.cos(1 * f[:2]), torch.cos(1 * f[2:])]))
        k = grid[1] - 1  # first row, last column
        torch.testing.assert_close(cos[k], torch.cat([torch.ones(2), torch.cos((grid[1] - 1) * f[2:])]))


@pytest.mark.parametrize("dims,grid", [(1, (6,)), (2, (3, 4)), (3, (2, 2, 3))])
def test_norm_preserved(dims, grid):
    pe = ndpe.make(dims=dims, kind="rope", dim=16, heads=1, axis_dims=(4,) * dims)
    q = torch.randn(3, math.prod(grid), 16, dtype=torch.float64)
    torch.testing.assert_close(rotate(pe, q, grid).norm(dim=-1), q.norm(dim=-1))


@pytest.mark.parametrize("dims,grid", [(1, (6,)), (2, (3, 4)), (3, (2, 2, 3))])
def test_half_and_interleaved_differ_by_channel_permutation(dims, grid):
    """Interleaved channel 2i <-> half channel i, 2i + 1 <-> i + rot_dim / 2; leftovers stay put."""
    kw = dict(dims=dims, kind="rope", dim=14, heads=1, axis_dims=(12 // dims // 2 * 2,) * dims)
    half, inter = ndpe.make(pairing="half", **kw), ndpe.make(pairing="interleaved", **kw)
    r = half.rot_dim
    perm = torch.cat([torch.stack([torch.arange(r // 2), torch.arange(r // 2) + r // 2], -1).flatten(), torch.arange(r, 14)])
    q = torch.randn(math.prod(grid), 14, dtype=torch.float64)
    torch.testing.assert_close(rotate(inter, q[:, perm], grid), rotate(half, q, grid)[:, perm])


@pytest.mark.parametrize("mode,expected", [
    ("index", [0.0, 1.0, 2.0]),
    ("pixel", [-1.0, 0.0, 1.0]),
    ("centered", [-2 / 3, 0.0, 2 / 3]),
])
def test_coordinate_modes(mode, expected):
    pe = ndpe.make(dims=1, kind="rope", dim=4, heads=1, coords=mode, theta=100.0)
    assert pe.coords_mode == mode
    cos, sin = pe((3,)).rot
    angles = torch.tensor(expected)[:, None] * torch.tensor([1.0, 0.1])
    torch.testing.assert_close(cos[0], angles.cos())
    torch.testing.assert_close(sin[0], angles.sin())


def test_pixel_coords_single_token_is_zero():
    pe = ndpe.make(dims=2, kind="rope", dim=8, heads=1, coords="pixel")
    assert torch.equal(pe((1, 3)).rot[1][0, :, :2], torch.zeros(3, 2))


def test_output_layout_and_buffers():
    pe = ndpe.make(dims=2, kind="rope", dim=64, heads=4)
    out = pe((3, 5), num_prefix=1)
    assert out.rot[0].shape == (1, 16, 8) and out.pairing == "half"
    assert (out.rot[0][:, 0] == 1).all() and (out.rot[1][:, 0] == 0).all()
    batched = pe(positions=torch.rand(2, 15, 2) * 10)
    assert batched.rot[0].shape == (2, 1, 15, 8)  # broadcasts over heads
    assert list(pe.state_dict()) == [] and "inv_freq" in dict(pe.named_buffers())
    assert pe.inv_freq.dtype == torch.float64
    assert len(list(pe.parameters())) == 0 and pe((3, 5)) is pe((3, 5))  # fixed kind: cached


def test_low_precision_cast_keeps_frequencies():
    pe = ndpe.make(dims=1, kind="rope", dim=16, heads=1)
    ref = pe((40,)).rot[0]
    pe.to(torch.bfloat16)
    assert pe.inv_freq.dtype == torch.float64
    torch.testing.assert_close(pe((40,)).rot[0], ref)


BAD = [  # options, error type, words in the message
    (dict(dims=2, dim=16, axis_dims=(3, 5)), ValueError, "even"),
    (dict(dims=2, dim=16, axis_dims=(8,)), ValueError, "one entry per axis"),
    (dict(dims=2, dim=16, axis_dims=(8, 10)), ValueError, "head_dim is 16"),
    (dict(dims=2, dim=16, axis_dims=(0, 0)), ValueError, "positive sum"),
    (dict(dims=2, dim=16, axis_dims=8), TypeError, "tuple of 2 ints"),
    (dict(dims=1, dim=15), ValueError, "even head_dim"),
    (dict(dims=3, dim=4), ValueError, "too small"),
    (dict(dims=1, dim=8, theta=1.0), ValueError, "theta"),
    (dict(dims=2, dim=8, theta=(100.0, 10.0, 1.0)), ValueError, "one per axis"),
    (dict(dims=1, dim=8, coords="grid"), ValueError, "coords"),
    (dict(dims=1, dim=8, pairing="rotate_half"), ValueError, "pairing"),
    (dict(dims=1, dim=8, scaling="ntk-by-parts", scale=2.0), ValueError, "scaling must be"),
    (dict(dims=1, dim=8, scaling="linear"), ValueError, "needs scale"),
    (dict(dims=1, dim=8, scaling="ntk", scale=0.5), ValueError, "scale must be >= 1"),
    (dict(dims=1, dim=8, scaling="linear", scale=0.0), ValueError, "scale must be > 0"),
    (dict(dims=1, dim=8, scale=2.0), ValueError, "need a scaling"),
    (dict(dims=1, dim=8, scaling="yarn", scale=2.0), ValueError, "needs train_shape"),
    (dict(dims=1, dim=8, scaling="dynamic-ntk", scale=2.0), ValueError, "needs train_shape"),
    (dict(dims=1, dim=8, scaling="ntk", scale=2.0, train_shape=16), ValueError, "train_shape is used by"),
    (dict(dims=2, dim=8, scaling="yarn", scale=2.0, train_shape=(4, 4, 4)), ValueError, "one per axis"),
    (dict(dims=2, dim=4, scaling="ntk", scale=2.0), ValueError, "at least 4 rotary channels"),
    (dict(dims=1, dim=8, scaling="linear", scale=2.0, coords="pixel"), ValueError, "coords='index'"),
    (dict(dims=1, dim=8, base=100.0), TypeError, "unknown option"),
]


@pytest.mark.parametrize("opts,error,words", BAD, ids=[str(i) for i in range(len(BAD))])
def test_bad_options_raise(opts, error, words):
    with pytest.raises(error, match=words.replace("(", r"\(").replace(")", r"\)")):
        ndpe.make(kind="rope", **opts)


# -- head map: which heads rotate which axis, which stay unrotated (head_axes) ------------------------------------------

def logits(q, k):
    return q @ k.transpose(-1, -2)  # (B, heads, N, N)


@pytest.mark.parametrize("dims,head_axes", [(1, (0, None, 0, None)), (2, (0, 1, "all", None)),
                                            (3, (2, None, 0, 1, "all", 1))])
def test_unrotated_heads_pass_q_and_k_through(dims, head_axes):
    heads = len(head_axes)
    pe = ndpe.make(dims=dims, kind="rope", dim=16 * heads, heads=heads, head_axes=head_axes)
    grid = (5, 3, 2)[:dims]
    n = math.prod(grid)
    q, k = torch.randn(2, heads, 1 + n, 16), torch.randn(2, heads, 1 + n, 16)
    rq, rk = ndpe.apply_qk(q, k, pe(grid, num_prefix=1))
    none = [h for h, e in enumerate(head_axes) if e is None]
    rotated = [h for h, e in enumerate(head_axes) if e is not None]
    assert torch.equal(rq[:, none], q[:, none]) and torch.equal(rk[:, none], k[:, none])
    assert not torch.allclose(rq[:, rotated, 2:], q[:, rotated, 2:])  # the others do rotate
    positions = torch.rand(2, n, dims) * 20  # batched, fractional positions too
    bq, bk = ndpe.apply_qk(q[:, :, 1:], k[:, :, 1:], pe(positions=positions))
    assert torch.equal(bq[:, none], q[:, none, 1:]) and torch.equal(bk[:, none], k[:, none, 1:])


@pytest.mark.parametrize("grid_indexing", ["ij", "xy"])
def test_a_head_on_one_axis_sees_only_offsets_along_it(grid_indexing):
    """Head h on axis a: its logits q_i . k_j depend on p_i[a] - p_j[a] alone: moving every token anywhere along the
    other axes, or all of them by one shift along a, leaves them unchanged; moving along a changes them."""
    head_axes = (0, 1, 2, "all")
    pe = ndpe.make(dims=3, kind="rope", dim=4 * 24, heads=4, head_axes=head_axes, theta=(50.0, 100.0, 200.0),
                   grid_indexing=grid_indexing)
    n = 20
    q, k = torch.randn(1, 4, n, 24, dtype=torch.float64), torch.randn(1, 4, n, 24, dtype=torch.float64)
    p = torch.rand(n, 3) * 16

    def attn(positions):
        rq, rk = ndpe.apply_qk(q, k, pe(positions=positions))
        return logits(rq, rk)[0]

    base = attn(p)
    for a in range(3):
        elsewhere = p.clone()
        others = [b for b in range(3) if b != a]
        elsewhere[:, others] = torch.rand(n, 2) * 16  # every token moved along the other axes
        shifted = p.clone()
        shifted[:, a] += 3.7  # every token moved by one shift along a
        along = p.clone()
        along[:, a] = torch.rand(n) * 16  # every token moved along a
        torch.testing.assert_close(attn(elsewhere)[a], base[a], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(attn(shifted)[a], base[a], rtol=1e-5, atol=1e-5)
        assert (attn(along)[a] - base[a]).abs().max() > 1e-2
        assert (attn(elsewhere)[3] - base[3]).abs().max() > 1e-2  # the axial head sees every axis


@pytest.mark.parametrize("opts", [{}, {"theta": (100.0, 1000.0)}, {"pairing": "interleaved"}, {"proportion": 0.5},
                                  {"scaling": "yarn", "scale": (2.0, 4.0), "train_shape": (8, 16)},
                                  {"scaling": "dynamic-ntk", "scale": 2.0, "train_shape": (4, 4)},
                                  {"freqs": "pixel", "max_res": 32, "coords": "pixel"}], ids=str)
def test_single_axis_heads_are_a_1d_rope_over_every_rotary_channel(opts):
    """A head on axis a rotates like a 1D rope of axis_dims=(rot_dim,) with axis a's theta and scaling on p[a]; an
    "all" head like the encoding without a head map."""
    head_axes = (1, "all", 0)
    pe = ndpe.make(dims=2, kind="rope", dim=3 * 32, heads=3, head_axes=head_axes, **opts)
    plain = ndpe.make(dims=2, kind="rope", dim=3 * 32, heads=3, **opts)
    grid = (6, 20)
    cos, sin = pe(grid).rot
    assert cos.shape == (3, 120, 16) and pe.rot_dim == plain.rot_dim == 32
    torch.testing.assert_close(cos[1], plain(grid).rot[0][0])
    coords = pe.coords(grid)
    for h, a in ((0, 1), (2, 0)):
        one = {k: (v[a] if isinstance(v, tuple) else v) for k, v in opts.items()}
        axis = ndpe.make(dims=1, kind="rope", dim=32, axis_dims=(32,), **one)
        ref_cos, ref_sin = axis(positions=coords[:, a:a + 1]).rot
        torch.testing.assert_close(cos[h], ref_cos[0])
        torch.testing.assert_close(sin[h], ref_sin[0])


def test_head_map_decodes_with_a_kv_cache():
    pe = ndpe.make(dims=1, kind="rope", dim=64, heads=4, head_axes=(0, None, "all", 0))
    full = pe((9,)).rot
    step = pe((3,), past=6).rot
    torch.testing.assert_close(step[0], full[0][:, 6:])
    torch.testing.assert_close(step[1], full[1][:, 6:])
    attn = ndpe.Attention(64, heads=4)
    x = torch.randn(2, 9, 64)
    assert attn(x, pe((9,))).shape == (2, 9, 64)


def test_head_map_is_an_option_and_kept_by_replace():
    assert ndpe.options("rope")["head_axes"] is None
    pe = ndpe.make(dims=2, kind="rope", dim=64, heads=2, head_axes=(0, None))
    assert "head_axes=(0, None)" in repr(pe) and pe.replace(theta=100.0).head_axes == (0, None)
    assert pe.half().head_inv_freq.dtype == torch.float64  # frequencies stay float64 under .half()


@pytest.mark.parametrize("opts,match", [
    ({"head_axes": (0,)}, r"one entry per head \(2\)"),
    ({"head_axes": "all"}, "one entry per head"),
    ({"head_axes": (0, 2)}, r"an axis 0..1, None \(unrotated\) or 'all'; got 2"),
    ({"head_axes": (True, 0)}, "got True"),
    ({"head_axes": (0, "rows")}, "got 'rows'"),
    ({"head_axes": (0, 1), "mrope_section": (4, 4)}, "pass one of them"),
    ({"head_axes": (0, 1), "scaling": "longrope", "scale": 2.0, "train_shape": (8, 8), "short_factor": [1.0] * 16,
      "long_factor": [2.0] * 16}, "per-frequency factors"),
])
def test_head_map_errors(opts, match):
    with pytest.raises(ValueError, match=match):
        ndpe.make(dims=2, kind="rope", dim=64, heads=2, **opts)


@pytest.mark.parametrize("dims, opts, match", [
    # every period equal: one frequency repeated (with min = max = 1, index coordinates never rotate)
    (2, dict(periods=True, min_period=1, max_period=1), r"max_period must be above min_period=1"),
    (1, dict(periods=True, min_period=4.0, max_period=4.0), r"max_period must be above min_period=4"),
    # p-RoPE keeping int(p * d_a / 2) = 0 frequencies: nothing rotates (a NoPE in disguise)
    (1, dict(proportion=1e-9), r"proportion=1e-09 keeps no frequency .* use proportion >= 0.0625"),
    (2, dict(proportion=0.05), r"keeps no frequency of an axis of 8"),
    # DINOv3's augmentation is for centred coordinates of images
    (2, dict(augment="dinov3"), r"made for coords in \('pixel', 'centered'\), got coords='index'"),
    (1, dict(augment="dinov3", coords="centered"), r"'dinov3' .* needs dims >= 2, got dims=1"),
])
def test_degenerate_rope_options_are_refused(dims, opts, match):
    with pytest.raises(ValueError, match=match):
        ndpe.make(dims=dims, kind="rope", dim=32, **opts)


def test_the_nearest_valid_rope_options_still_build():
    ndpe.make(dims=2, kind="rope", dim=32, periods=True, min_period=1, max_period=1.5)
    assert int((ndpe.make(dims=1, kind="rope", dim=32, proportion=0.0625).inv_freq > 0).sum()) == 1
    pe = ndpe.make(dims=2, kind="rope", dim=32, augment="dinov3", coords="centered")
    with pytest.raises(ValueError, match="got coords='index'"):  # nor switched to index coordinates afterwards
        pe.coords_mode = "index"
    assert pe.coords_mode == "centered"
