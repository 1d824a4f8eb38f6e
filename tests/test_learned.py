"""learned: the table, cropping, resizing (timm / F.interpolate), gather by index, factorized tables, errors."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from einops import rearrange
from timm.layers import resample_abs_pos_embed

import ndpe
from ndpe.coords import grid_coords
from tests.conftest import assert_tells_apart

RESIZE = {1: "linear", 2: "bicubic", 3: "trilinear"}


def make(dims, dim=8, **opts):
    return ndpe.make(dims=dims, kind="learned", dim=dim, **opts)


def rows_cols_table(shape):
    """A table whose channel a holds the index along axis a: (*shape, dims)."""
    return torch.stack(torch.meshgrid(*[torch.arange(n, dtype=torch.float32) for n in shape], indexing="ij"), -1)


def test_default_grid_is_the_table_row_major():
    pe = make(2, grid_shape=(3, 4))
    torch.testing.assert_close(pe((3, 4)).add, rearrange(pe.table, "h w c -> (h w) c"))


@pytest.mark.parametrize("dims,table,grid", [(1, (10,), (4,)), (2, (4, 6), (2, 5)), (2, (4, 6), (4, 1)),
                                             (3, (3, 4, 5), (2, 4, 3))])
def test_smaller_grid_uses_leading_rows(dims, table, grid):
    pe = make(dims, grid_shape=table)
    crop = pe.table[tuple(slice(0, n) for n in grid)]
    torch.testing.assert_close(pe(grid).add, crop.reshape(-1, pe.dim))


@pytest.mark.parametrize("dims,table,grid", [(1, (4,), (5,)), (2, (4, 6), (5, 6)), (2, (4, 6), (4, 7)),
                                             (3, (2, 2, 2), (2, 3, 2))])
def test_larger_grid_without_resize_raises(dims, table, grid):
    with pytest.raises(ValueError, match=rf"exceeds the learned table \({', '.join(map(str, table))},?\).*resize="):
        make(dims, grid_shape=table)(grid)


@pytest.mark.parametrize("mode", ["bicubic", "bilinear"])
@pytest.mark.parametrize("grid", [(9, 5), (5, 9), (3, 3), (6, 8)])
def test_2d_resize_equals_timm(mode, grid):
    pe = make(2, dim=6, grid_shape=(6, 8), resize=mode)
    ref = resample_abs_pos_embed(rearrange(pe.table, "h w c -> 1 (h w) c"), list(grid), [6, 8],
                                 num_prefix_tokens=0, interpolation=mode)
    out = pe(grid).add
    columns_first = rearrange(out, "(h w) c -> (w h) c", h=grid[0])  # the wrong option: tokens in xy order
    assert_tells_apart(out, columns_first, ref[0], rtol=1.3e-6, atol=1e-5)


def test_2d_resize_without_timm_is_the_same_call(monkeypatch):
    pe = make(2, dim=6, grid_shape=(6, 8), resize="bicubic")
    with_timm = pe((9, 5)).add
    monkeypatch.setattr("ndpe.kinds.learned._HAS_TIMM", False)
    torch.testing.assert_close(pe((9, 5)).add, with_timm, atol=0, rtol=0)


@pytest.mark.parametrize("dims,grid", [(1, (13,)), (1, (3,)), (3, (5, 2, 7))])
def test_1d_3d_resize_equals_interpolate(dims, grid):
    pe = make(dims, grid_shape=(4,) * dims, resize=RESIZE[dims])
    x = rearrange(pe.table, "... c -> 1 c ...")
    ref = F.interpolate(x, size=grid, mode=RESIZE[dims], align_corners=False)
    torch.testing.assert_close(pe(grid).add, rearrange(ref, "1 c ... -> (...) c"))


@pytest.mark.parametrize("dims,table,grid", [(2, (6, 6), (3, 9)), (2, (6, 6), (12, 4)), (3, (4, 4, 4), (2, 6, 9)),
                                             (1, (6,), (11,))])
def test_non_square_resize_keeps_axes(dims, table, grid):
    """A table whose channel a holds the axis-a index stays increasing along axis a, constant across others."""
    pe = make(dims, dim=dims, grid_shape=table, resize=RESIZE[dims] if dims != 2 else "bilinear")
    with torch.no_grad():
        pe.table.copy_(rows_cols_table(table))
    out = pe(grid).add.reshape(*grid, dims)
    for a in range(dims):
        chan = out[..., a].movedim(a, 0).reshape(grid[a], -1)  # (n_a, other positions)
        assert (chan.diff(dim=0) > 0).all(), f"axis {a} not increasing"
        torch.testing.assert_close(chan, chan[:, :1].expand_as(chan))  # nothing leaks from the other axes


def test_gradient_reaches_table():
    pe = make(2, grid_shape=(4, 4), resize="bicubic")
    for grid in [(4, 4), (2, 3), (6, 5)]:
        pe.zero_grad()
        pe(grid, num_prefix=1).add.square().sum().backward()
        assert pe.table.grad is not None and pe.table.grad.abs().sum() > 0


@pytest.mark.parametrize("opts", [{}, {"factorized": True}, {"factorized": True, "combine": "concat"}])
def test_state_dict_round_trip(opts):
    torch.manual_seed(0)
    a = make(3, dim=12, grid_shape=(2, 3, 4), **opts)
    torch.manual_seed(1)
    b = make(3, dim=12, grid_shape=(2, 3, 4), **opts)
    keys = {"table"} if not opts else {"axis_tables.0", "axis_tables.1", "axis_tables.2"}
    assert set(a.state_dict()) == keys
    b.load_state_dict(a.state_dict())
    torch.testing.assert_close(a((2, 3, 4)).add, b((2, 3, 4)).add)


def test_init_is_trunc_normal_002():
    torch.manual_seed(0)
    t = make(2, dim=64, grid_shape=(14, 14)).table
    assert abs(t.std().item() - 0.02) < 0.002 and t.abs().max() <= 2.0
    assert t.requires_grad


@pytest.mark.parametrize("factorized", [False, True])
def test_init_std_sets_the_table_scale(factorized):
    torch.manual_seed(0)
    pe = make(2, dim=64, grid_shape=(14, 14), init_std=1.0, factorized=factorized)
    t = torch.cat([p.flatten() for p in pe.parameters()])
    assert abs(t.std().item() - 0.88) < 0.05 and t.abs().max() <= 2.0  # N(0, 1) truncated at +-2 (timm): std 0.88
    assert "init_std=1" in repr(pe)
    pe.reset_parameters()
    assert abs(torch.cat([p.flatten() for p in pe.parameters()]).std().item() - 0.88) < 0.05


def test_factorized_add_and_concat():
    add = make(2, dim=6, grid_shape=(3, 5), factorized=True)
    t0, t1 = add.axis_tables
    assert t0.shape == (3, 6) and t1.shape == (5, 6)
    out = add((3, 5)).add
    torch.testing.assert_close(out[1 * 5 + 4], t0[1] + t1[4])
    cat = make(2, dim=6, grid_shape=(3, 5), factorized=True, combine="concat")
    c0, c1 = cat.axis_tables
    assert c0.shape == (3, 3) and c1.shape == (5, 3)
    torch.testing.assert_close(cat((2, 5)).add[1 * 5 + 2], torch.cat([c0[1], c1[2]]))
    cat((2, 5)).add.sum().backward()
    assert c0.grad[:2].abs().sum() > 0 and c0.grad[2].abs().sum() == 0  # only the leading rows were used


def test_factorized_linear_resize_per_axis():
    pe = make(2, dim=4, grid_shape=(3, 5), factorized=True, resize="linear")
    out = pe((6, 2)).add
    r0 = F.interpolate(pe.axis_tables[0].t()[None], size=6, mode="linear", align_corners=False)[0].t()
    r1 = F.interpolate(pe.axis_tables[1].t()[None], size=2, mode="linear", align_corners=False)[0].t()
    torch.testing.assert_close(out, (r0[:, None] + r1[None]).reshape(12, 4))


def test_explicit_positions_gather():
    pe = make(2, grid_shape=(4, 6))
    idx = torch.tensor([[3, 5], [0, 0], [2, 1]])
    torch.testing.assert_close(pe(positions=idx.float()).add, pe.table[idx[:, 0], idx[:, 1]])
    batched = pe(positions=torch.stack([idx, idx.flip(0)]).float()).add
    assert batched.shape == (2, 3, 8)
    torch.testing.assert_close(batched[1], pe.table[idx.flip(0)[:, 0], idx.flip(0)[:, 1]])
    # with resize and a grid, positions index the resized table
    rs = make(2, grid_shape=(4, 6), resize="bilinear")
    torch.testing.assert_close(rs((8, 3), positions=grid_coords((8, 3))).add, rs((8, 3)).add)


@pytest.mark.parametrize("positions,match", [
    ([[0.5, 1.0]], "integer indices"),
    ([[4.0, 0.0]], r"\[0, n\) per axis of the table \(4, 6\)"),
    ([[0.0, -1.0]], r"\[0, n\)"),
])
def test_bad_positions(positions, match):
    pe = make(2, grid_shape=(4, 6))
    with pytest.raises(ValueError, match=match):
        pe(positions=torch.tensor(positions))


def test_augmentation_refused():
    pe = make(1, grid_shape=(8,))
    assert pe.coordinate_based is False
    with pytest.raises(ValueError, match="augmentation needs a coordinate-based kind"):
        pe.set_augment(torch.nn.Identity())


@pytest.mark.parametrize("dims,opts,match", [
    (2, {"grid_shape": (4, 4), "resize": "linear"}, "resize for dims=2 must be None or one of"),
    (1, {"grid_shape": (4,), "resize": "bicubic"}, "resize for dims=1"),
    (3, {"grid_shape": (2, 2, 2), "resize": "bilinear"}, "resize for dims=3"),
    (2, {"grid_shape": (4, 4), "factorized": True, "resize": "bicubic"}, "factorized tables"),
    (3, {"grid_shape": (2, 2, 2), "factorized": True, "combine": "concat"}, "not divisible by 3"),
    (2, {"grid_shape": (4, 4), "combine": "mean"}, "combine must be one of"),
    (2, {"grid_shape": (4,)}, "has 1 axes but the encoding has dims=2"),
    (2, {"grid_shape": (4, 0)}, ">= 1"),
    (1, {"grid_shape": (4,), "init_std": 0.0}, "init_std must be a finite number > 0"),
    (1, {"grid_shape": (4,), "init_std": float("nan")}, "init_std must be a finite number > 0"),
    (1, {"grid_shape": (4,), "init_std": float("inf")}, "init_std must be a finite number > 0"),
    (1, {"grid_shape": (4,), "init_std": "1"}, "init_std must be a finite number > 0"),
    (1, {"grid_shape": (4,), "init_std": True}, "init_std must be a finite number > 0"),
])
def test_bad_options(dims, opts, match):
    with pytest.raises(ValueError, match=match):
        make(dims, **opts)


def test_grid_shape_is_required():
    with pytest.raises(TypeError, match="grid_shape"):
        make(2)


# ---- added or concatenated to the tokens (cat_dim) -------------------------------------------------------------------

@pytest.mark.parametrize("opts,shapes", [({}, [(4, 5, 6)]), ({"factorized": True, "combine": "concat"}, [(4, 3), (5, 3)]),
                                         ({"factorized": True}, [(4, 6), (5, 6)])])
def test_cat_dim_concatenates_a_table_of_that_width(opts, shapes):
    """``cat_dim=6``: a 6-channel table (factorized concat: 3 per axis), gathered as the added one, in ``cat``."""
    pe = make(2, dim=16, grid_shape=(4, 5), cat_dim=6, **opts)
    assert [tuple(p.shape) for p in pe.parameters()] == shapes and pe.cat_dim == 6
    out = pe((3, 5))
    assert out.add is None and out.cat.shape == (15, 6)
    twin = make(2, dim=6, grid_shape=(4, 5), **opts)
    twin.load_state_dict(pe.state_dict())
    torch.testing.assert_close(out.cat, twin((3, 5)).add, atol=0, rtol=0)
    x = torch.randn(2, 15, 10)
    y = ndpe.apply_tokens(x, out)
    assert torch.equal(y, torch.cat([x, out.cat.expand(2, 15, 6)], -1))
    y.square().sum().backward()
    assert all(p.grad is not None for p in pe.parameters())


def test_cat_dim_decodes_and_resizes():
    pe = make(1, dim=16, grid_shape=(12,), cat_dim=4)
    torch.testing.assert_close(pe((3,), past=5).cat, pe((8,)).cat[5:])
    resized = make(2, dim=16, grid_shape=(4, 4), cat_dim=4, resize="bicubic")
    assert resized((6, 7)).cat.shape == (42, 4)


def test_cat_dim_in_a_model_narrows_the_token_embedding():
    from models import build_model

    model = build_model({"name": "text", "num_classes": 7, "vocab_size": 7, "dim": 32, "depth": 1, "heads": 4,
                         "pe": {"kind": "learned", "options": {"grid_shape": [16], "cat_dim": 8}}})
    assert model.tok_embed.embedding_dim == 24
    assert model(torch.randint(0, 7, (2, 10))).shape[-1] == 7


@pytest.mark.parametrize("opts,err,match", [
    ({"cat_dim": 16}, ValueError, "cat_dim=16 .* below dim=16"),
    ({"cat_dim": True}, TypeError, "cat_dim must be an int"),
    ({"cat_dim": 5, "factorized": True, "combine": "concat"}, ValueError, "cat_dim=5 is not divisible by 2"),
])
def test_cat_dim_errors(opts, err, match):
    with pytest.raises(err, match=match):
        make(2, dim=16, grid_shape=(4, 4), **opts)
