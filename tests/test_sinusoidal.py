"""sinusoidal: the AIAYN formula, timm's 2D builder, positional-encodings 1D/2D/3D, layouts, errors."""
from __future__ import annotations

import math

import pytest
import torch
from einops import rearrange
from positional_encodings.torch_encodings import PositionalEncoding1D, PositionalEncoding2D, PositionalEncoding3D
from timm.layers.pos_embed_sincos import build_sincos2d_pos_embed

import ndpe
from ndpe.coords import grid_coords
from tests.conftest import assert_tells_apart


def make(dims, dim, **opts):
    return ndpe.make(dims=dims, kind="sinusoidal", dim=dim, **opts)


def aiayn(n: int, d: int, temperature: float = 10000.0) -> torch.Tensor:
    """The paper's formula, one entry at a time, in float64: (n, d)."""
    pe = torch.empty(n, d, dtype=torch.float64)
    for pos in range(n):
        for i in range(d // 2):
            pe[pos, 2 * i] = math.sin(pos / temperature ** (2 * i / d))
            pe[pos, 2 * i + 1] = math.cos(pos / temperature ** (2 * i / d))
    return pe


@pytest.mark.parametrize("n,dim,temperature", [(50, 8, 10000.0), (17, 32, 10000.0), (9, 6, 100.0), (1, 2, 10000.0)])
def test_1d_is_the_aiayn_formula(n, dim, temperature):
    out = make(1, dim, temperature=temperature)((n,)).add
    torch.testing.assert_close(out.double(), aiayn(n, dim, temperature), atol=2e-6, rtol=0)


@pytest.mark.parametrize("grid", [(2, 8), (8, 2), (5, 9), (1, 3), (7, 7)])
@pytest.mark.parametrize("layout,interleave_sin_cos", [("sin_cos", False), ("blocks", True)])
def test_2d_equals_timm_build_sincos2d(grid, layout, interleave_sin_cos):
    ref = build_sincos2d_pos_embed(list(grid), dim=32, interleave_sin_cos=interleave_sin_cos)
    torch.testing.assert_close(make(2, 32, layout=layout)(grid).add, ref, atol=0, rtol=0)  # exact
    other = make(2, 32, layout="blocks" if layout == "sin_cos" else "sin_cos")(grid).add  # the other layout
    assert_tells_apart(make(2, 32, layout=layout)(grid).add, other, ref, rtol=0, atol=1e-6)


def test_timm_reverse_coord_encodes_the_transposed_grid_column_major():
    """timm's reverse_coord=True on (H, W) is our (W, H) grid: columns first, tokens column-major."""
    ref = build_sincos2d_pos_embed([3, 5], dim=16, reverse_coord=True)
    torch.testing.assert_close(make(2, 16, layout="sin_cos")((5, 3)).add, ref, atol=0, rtol=0)


def test_non_square_grids_differ_and_keep_axis_order():
    pe = make(2, 16)
    a, b = pe((2, 8)).add, pe((8, 2)).add
    assert a.shape == b.shape and not torch.allclose(a, b)
    # token (i, j) of (2, 8): first half encodes the row i, second half the column j
    row_table, col_table = make(1, 8)((8,)).add, make(1, 8)((8,)).add
    for i, j in [(0, 5), (1, 7), (1, 0)]:
        torch.testing.assert_close(a[i * 8 + j], torch.cat([row_table[i], col_table[j]]))
        torch.testing.assert_close(b[j * 2 + i], torch.cat([row_table[j], col_table[i]]))


@pytest.mark.parametrize("dims,peer,dim,grid", [
    (1, PositionalEncoding1D, 12, (9,)),
    (2, PositionalEncoding2D, 16, (3, 5)),
    (2, PositionalEncoding2D, 24, (6, 2)),
    (3, PositionalEncoding3D, 24, (2, 3, 4)),
])
def test_equals_positional_encodings_when_channels_split_evenly(dims, peer, dim, grid):
    ref = peer(dim)(torch.zeros(1, *grid, dim))[0]  # (*grid, dim), axes in our ij order
    out = make(dims, dim, layout="interleaved")(grid).add
    other = make(dims, dim, layout="blocks")(grid).add  # another layout
    assert_tells_apart(out, other, rearrange(ref, "... c -> (...) c"), atol=1e-6, rtol=0)


def test_positional_encodings_uneven_split_truncates_where_ndpe_splits():
    """2D dim=10: positional-encodings gives rows 6 channels, columns the first 4 of a 6-channel table
    (frequencies meant for 6); ndpe's default split (6, 4) gives the columns a 4-channel table of their own.
    (2D dim=6 happens to agree: the first pair of any table has w_0 = 1.)"""
    ref = rearrange(PositionalEncoding2D(10)(torch.zeros(1, 3, 5, 10))[0], "h w c -> (h w) c")
    table6 = make(1, 6)
    rows, cols = grid_coords((3, 5)).unbind(-1)
    torch.testing.assert_close(ref[:, :6], table6(positions=rows[:, None]).add)
    torch.testing.assert_close(ref[:, 6:], table6(positions=cols[:, None]).add[:, :4])
    out = make(2, 10)((3, 5)).add
    torch.testing.assert_close(out[:, :6], ref[:, :6], atol=1e-6, rtol=0)
    torch.testing.assert_close(out[:, 6:], make(1, 4)(positions=cols[:, None]).add)
    assert not torch.allclose(out, ref)
    six = rearrange(PositionalEncoding2D(6)(torch.zeros(1, 3, 5, 6))[0], "h w c -> (h w) c")
    torch.testing.assert_close(make(2, 6)((3, 5)).add, six, atol=1e-6, rtol=0)


# -- axis_dims: the per-axis channel split ----------------------------------------------------
@pytest.mark.parametrize("dims,dim,split", [
    (1, 6, (6,)), (2, 32, (16, 16)), (3, 24, (8, 8, 8)), (3, 48, (16, 16, 16)),  # today's equal split
    (2, 6, (4, 2)), (2, 10, (6, 4)), (3, 16, (6, 6, 4)), (3, 20, (8, 6, 6)), (3, 8, (4, 2, 2)), (3, 6, (2, 2, 2)),
])
def test_default_axis_dims(dims, dim, split):
    pe = make(dims, dim)
    assert pe.axis_dims == split and sum(split) == dim
    assert pe((2,) * dims).add.shape == (2 ** dims, dim)


@pytest.mark.parametrize("dims,dim", [(1, 12), (2, 16), (2, 32), (3, 24), (3, 48)])
@pytest.mark.parametrize("layout", ["interleaved", "blocks", "sin_cos"])
def test_explicit_equal_axis_dims_is_the_default_bit_for_bit(dims, dim, layout):
    grid = (3, 4, 5)[:dims]
    default = make(dims, dim, layout=layout)(grid).add
    explicit = make(dims, dim, layout=layout, axis_dims=(dim // dims,) * dims)(grid).add
    torch.testing.assert_close(explicit, default, atol=0, rtol=0)


@pytest.mark.parametrize("axis_dims", [(6, 4), (2, 8), (4, 6)])
@pytest.mark.parametrize("layout", ["interleaved", "blocks", "sin_cos"])
def test_uneven_axis_dims_are_per_axis_1d_tables(axis_dims, layout):
    grid = (4, 5)
    out = make(2, sum(axis_dims), layout=layout, axis_dims=axis_dims)(grid).add
    coords = grid_coords(grid)
    tables = [make(1, d, layout="blocks")(positions=coords[:, a:a + 1]).add for a, d in enumerate(axis_dims)]
    halves = [(t[:, :d // 2], t[:, d // 2:]) for t, d in zip(tables, axis_dims)]  # (sines, cosines) per axis
    if layout == "interleaved":
        ref = torch.cat([make(1, d)(positions=coords[:, a:a + 1]).add for a, d in enumerate(axis_dims)], -1)
    elif layout == "blocks":
        ref = torch.cat(tables, -1)
    else:
        ref = torch.cat([s for s, _ in halves] + [c for _, c in halves], -1)
    torch.testing.assert_close(out, ref, atol=0, rtol=0)
    assert out.abs().max() <= 1.0


def test_uneven_3d_split_encodes_every_position_uniquely():
    out = make(3, 16)((3, 4, 5)).add
    dist = torch.cdist(out, out) + torch.eye(out.shape[0]) * 1e3
    assert dist.min() > 1e-3


@pytest.mark.parametrize("dims,dim,opts,error,match", [
    (2, 8, {"axis_dims": (2, 4)}, ValueError, r"axis_dims \(2, 4\) sum to 6 channels but dim is 8"),
    (2, 8, {"axis_dims": (3, 5)}, ValueError, "even and >= 2"),
    (2, 8, {"axis_dims": (8, 0)}, ValueError, "even and >= 2"),
    (2, 8, {"axis_dims": (2, 2, 4)}, ValueError, r"one entry per axis \(2\)"),
    (2, 8, {"axis_dims": 8}, TypeError, "tuple of 2 ints"),
    (2, 8, {"axis_dims": (4.0, 4)}, TypeError, "tuple of 2 ints"),
    (2, 8, {"axis_dims": (4, 4), "combine": "add"}, ValueError, 'combine="concat" only'),
])
def test_bad_axis_dims(dims, dim, opts, error, match):
    with pytest.raises(error, match=match) as info:
        make(dims, dim, **opts)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("dims,grid", [(1, (6,)), (2, (3, 4)), (3, (2, 3, 2))])
def test_layouts_are_channel_permutations(dims, grid):
    dim = 12 * dims
    outs = {lay: make(dims, dim, layout=lay)(grid).add for lay in ("interleaved", "blocks", "sin_cos")}
    # interleaved (a f s) -> blocks (a s f) -> sin_cos (s a f), each a pure reshuffle
    inter = rearrange(outs["interleaved"], "n (a f s) -> n a f s", a=dims, s=2)
    torch.testing.assert_close(outs["blocks"], rearrange(inter, "n a f s -> n (a s f)"), atol=0, rtol=0)
    torch.testing.assert_close(outs["sin_cos"], rearrange(inter, "n a f s -> n (s a f)"), atol=0, rtol=0)


@pytest.mark.parametrize("dims,grid", [(2, (3, 5)), (3, (2, 3, 4))])
@pytest.mark.parametrize("layout", ["interleaved", "blocks"])
def test_add_sums_full_width_axis_tables(dims, grid, layout):
    dim = 16
    out = make(dims, dim, combine="add", layout=layout)(grid).add
    axis_pe = make(1, dim, layout=layout)
    coords = grid_coords(grid)
    ref = sum(axis_pe(positions=coords[:, a:a + 1]).add for a in range(dims))
    torch.testing.assert_close(out, ref)
    assert out.abs().max() <= dims + 1e-6
    if layout == "blocks":  # one chunk: sin_cos and blocks coincide
        torch.testing.assert_close(make(dims, dim, combine="add", layout="sin_cos")(grid).add, out, atol=0, rtol=0)


def test_add_is_symmetric_in_the_axes():
    """Documented caveat: shared frequencies make (i, j) and (j, i) collide under combine='add'."""
    out = make(2, 16, combine="add")((4, 4)).add
    torch.testing.assert_close(out[1 * 4 + 2], out[2 * 4 + 1])
    concat = make(2, 16)((4, 4)).add
    assert not torch.allclose(concat[1 * 4 + 2], concat[2 * 4 + 1])


@pytest.mark.parametrize("dims,grid,dim", [(1, (64,), 16), (2, (8, 12), 32), (3, (4, 5, 6), 48)])
@pytest.mark.parametrize("layout", ["interleaved", "blocks", "sin_cos"])
def test_bounded_and_unique(dims, grid, dim, layout):
    out = make(dims, dim, layout=layout)(grid).add
    assert out.shape == (math.prod(grid), dim)
    assert out.abs().max() <= 1.0
    dist = torch.cdist(out, out) + torch.eye(out.shape[0]) * 1e3
    assert dist.min() > 1e-3, "two positions share an encoding"


@pytest.mark.parametrize("coords", ["index", "pixel", "centered"])
def test_coords_modes(coords):
    pe = make(2, 16, coords=coords)
    assert pe.coords_mode == coords
    grid = (3, 4)
    torch.testing.assert_close(pe(grid).add, make(2, 16)(positions=grid_coords(grid, coords)).add)


def test_fixed_kind_no_parameters_cached_batched():
    pe = make(2, 16)
    assert list(pe.parameters()) == [] and pe.state_dict() == {}
    assert pe((3, 4)) is pe((3, 4))
    coords = pe.coords((3, 4))
    out = pe(positions=torch.stack([coords, coords + 0.5])).add
    assert out.shape == (2, 12, 16)
    torch.testing.assert_close(out[1], pe(positions=coords + 0.5).add)


def test_bf16_output_computed_in_float32():
    pe = make(1, 8)
    out = pe((300,), dtype=torch.bfloat16).add
    torch.testing.assert_close(out, pe((300,)).add.to(torch.bfloat16), atol=0, rtol=0)


@pytest.mark.parametrize("dims,dim,opts,match", [
    (2, 10, {}, None),  # fine since axis_dims: split (6, 4)
    (3, 16, {}, None),  # split (6, 6, 4)
    (1, 7, {}, "needs an even dim .* got dim=7; nearest valid: 6 or 8$"),
    (3, 9, {}, "got dim=9; nearest valid: 8 or 10$"),
    (3, 4, {}, r"dim >= 2 \* dims = 6\), got dim=4; nearest valid: dim >= 6, e.g. 6 \(or combine='add'"),
    (2, 2, {}, "nearest valid: dim >= 4"),
    (2, 10, {"combine": "add"}, None),  # fine: add needs an even dim only
    (2, 9, {"combine": "add"}, "divisible by 2"),
    (2, 16, {"combine": "sum"}, "combine must be one of"),
    (2, 16, {"layout": "pairs"}, "layout must be one of"),
    (2, 16, {"coords": "pixels"}, "coords must be one of"),
    (2, 16, {"temperature": 0}, "temperature must be > 0"),
])
def test_bad_options(dims, dim, opts, match):
    if match is None:
        make(dims, dim, **opts)
        return
    with pytest.raises(ValueError, match=match):
        make(dims, dim, **opts)


# ---- added or concatenated to the tokens (cat_dim) -------------------------------------------------------------------

@pytest.mark.parametrize("dims,grid,cat_dim,opts", [(1, (9,), 8, {}), (2, (3, 5), 16, {"layout": "sin_cos"}),
                                                    (2, (4, 2), 10, {}), (3, (2, 3, 2), 12, {"combine": "add"})])
def test_cat_dim_concatenates_the_table_of_that_width(dims, grid, cat_dim, opts):
    """``cat_dim=c``: the table a c-channel sinusoidal encoding would add, concatenated after tokens of dim - c."""
    pe = make(dims, 48, cat_dim=cat_dim, **opts)
    out = pe(grid)
    assert out.add is None and pe.cat_dim == cat_dim
    torch.testing.assert_close(out.cat, make(dims, cat_dim, **opts)(grid).add, atol=0, rtol=0)
    x = torch.randn(2, 1 + math.prod(grid), 48 - cat_dim)
    y = ndpe.apply_tokens(x, pe(grid, num_prefix=1))
    assert y.shape == (2, 1 + math.prod(grid), 48)
    assert torch.equal(y[..., :48 - cat_dim], x) and (y[:, 0, 48 - cat_dim:] == 0).all()  # tokens kept, prefix 0
    assert make(dims, 48)(grid).cat is None and make(dims, 48).cat_dim == 0  # default: added, as before


def test_cat_dim_in_a_model_narrows_the_token_embedding():
    """The model's width grows as for coordinate channels: patches are embedded to dim - cat_dim channels."""
    from models import build_model

    model = build_model({"name": "vit", "num_classes": 3, "dim": 48, "depth": 1, "heads": 4, "patch_size": 4,
                         "pe": {"kind": "sinusoidal", "options": {"cat_dim": 16}}})
    assert model.patch_embed.proj.out_channels == 32 and model.head.in_features == 48
    assert model(torch.randn(2, 3, 16, 24)).shape == (2, 3)


@pytest.mark.parametrize("opts,err,match", [
    ({"cat_dim": 48}, ValueError, "cat_dim=48 .* below dim=48"),
    ({"cat_dim": -1}, ValueError, "cat_dim must be an int >= 0"),
    ({"cat_dim": 8.0}, TypeError, "cat_dim must be an int"),
    ({"cat_dim": 7, "combine": "add"}, ValueError, "cat_dim divisible by 2"),
    ({"cat_dim": 16, "axis_dims": (8, 6)}, ValueError, "sum to 14 channels but dim is 16"),
])
def test_cat_dim_errors(opts, err, match):
    with pytest.raises(err, match=match):
        make(2, 48, **opts)
