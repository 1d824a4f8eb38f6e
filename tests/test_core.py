"""Core pieces: coordinates, PosOut apply/merge, prefix padding, caching, the reference Attention."""
from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F

import ndpe
from ndpe.base import pad_prefix
from ndpe.coords import axis_coords, grid_coords


@pytest.mark.parametrize("n,mode,expected", [
    (4, "index", [0, 1, 2, 3]),
    (3, "pixel", [-1, 0, 1]),
    (1, "pixel", [0]),
    (2, "centered", [-0.5, 0.5]),
    (1, "centered", [0]),
])
def test_axis_coords(n, mode, expected):
    torch.testing.assert_close(axis_coords(n, mode), torch.tensor(expected, dtype=torch.float32))


def test_grid_coords_are_row_major_ij():
    c = grid_coords((2, 3, 4))
    naive = torch.tensor([[f, r, col] for f in range(2) for r in range(3) for col in range(4)], dtype=torch.float32)
    torch.testing.assert_close(c, naive)
    assert not torch.equal(grid_coords((2, 8)), grid_coords((8, 2)))


def test_coordinates_stay_exact_at_large_positions():
    assert grid_coords((100_001,))[-1, 0].item() == 100_000.0  # never built in bf16


def test_pad_prefix_identity():
    out = ndpe.PosOut(add=torch.randn(5, 4), cat=torch.randn(5, 2), rot=(torch.randn(3, 5, 2), torch.randn(3, 5, 2)),
                      bias=torch.randn(3, 5, 5))
    p = pad_prefix(out, 2)
    assert p.add.shape == (7, 4) and p.cat.shape == (7, 2) and p.rot[0].shape == (3, 7, 2) and p.bias.shape == (3, 7, 7)
    assert (p.rot[0][:, :2] == 1).all() and (p.rot[1][:, :2] == 0).all()
    torch.testing.assert_close(p.bias[:, 2:, 2:], out.bias)
    assert p.bias[:, :2].abs().sum() == 0 and p.bias[:, :, :2].abs().sum() == 0


def test_apply_tokens_add_and_cat():
    x = torch.randn(2, 5, 6)
    pos = ndpe.PosOut(add=torch.ones(5, 6), cat=torch.full((5, 2), 3.0))
    y = ndpe.apply_tokens(x, pos)
    assert y.shape == (2, 5, 8)
    torch.testing.assert_close(y[..., :6], x + 1)
    assert (y[..., 6:] == 3).all()


def test_merge_sums_adds_and_biases():
    a = ndpe.PosOut(add=torch.ones(4, 3), bias=torch.ones(2, 4, 4))
    b = ndpe.PosOut(add=torch.ones(4, 3), bias=torch.ones(1, 4, 4), rot=(torch.ones(4, 1), torch.zeros(4, 1)),
                    pairing="interleaved")
    m = ndpe.merge(a, b)
    assert (m.add == 2).all() and (m.bias == 2).all() and m.bias.shape == (2, 4, 4)
    assert m.pairing == "interleaved" and m.rot is b.rot


def test_cache_keyed_by_dtype_and_grid():
    pe = ndpe.make(dims=1, kind="none", dim=8)
    assert pe((4,)) is pe((4,))
    assert pe((4,)) is not pe((5,))
    assert pe((4,), dtype=torch.bfloat16) is not pe((4,))


def naive_attention(x, attn, pos, causal):
    """Per-head softmax attention written out, as a reference for ndpe.Attention."""
    b, t, c = x.shape
    h = attn.heads
    q, k, v = attn.qkv(x).split(c, dim=-1)
    q, k, v = (z.reshape(b, t, h, c // h).transpose(1, 2) for z in (q, k, v))
    q, k = ndpe.apply_qk(q, k, pos)
    logits = q @ k.transpose(-1, -2) / math.sqrt(c // h)
    if pos is not None and pos.bias is not None:
        logits = logits + pos.bias
    if causal:
        logits = logits.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
    out = (logits.softmax(-1) @ v).transpose(1, 2).reshape(b, t, c)
    return attn.proj(out)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("with_bias", [False, True])
def test_attention_matches_naive(causal, with_bias):
    torch.manual_seed(0)
    attn = ndpe.Attention(16, heads=4, causal=causal).eval()
    x = torch.randn(2, 6, 16)
    cos, sin = torch.cos(torch.arange(6.0)[:, None] * torch.tensor([1.0, 0.1])), torch.sin(
        torch.arange(6.0)[:, None] * torch.tensor([1.0, 0.1]))
    pos = ndpe.PosOut(rot=(cos, sin), bias=torch.randn(4, 6, 6) if with_bias else None)
    torch.testing.assert_close(attn(x, pos), naive_attention(x, attn, pos, causal), rtol=1e-5, atol=1e-5)


def test_causal_mask():
    m = ndpe.causal_mask(3)
    assert m[0, 1] == float("-inf") and m[1, 0] == 0 and m[2, 2] == 0
    x = torch.randn(1, 1, 3, 4)
    torch.testing.assert_close(F.scaled_dot_product_attention(x, x, x, attn_mask=m),
                               F.scaled_dot_product_attention(x, x, x, is_causal=True))


def test_combine_merges_kinds():
    """learned absolute + ALiBi: the add of one and the bias of the other, in one PosOut."""
    learned = ndpe.make(dims=2, kind="learned", dim=16, heads=2, grid_shape=(3, 4))
    alibi = ndpe.make(dims=2, kind="alibi", dim=16, heads=2)
    both = ndpe.Combine(learned, alibi)
    out = both((3, 4), num_prefix=1)
    torch.testing.assert_close(out.add, learned((3, 4), num_prefix=1).add)
    torch.testing.assert_close(out.bias, alibi((3, 4), num_prefix=1).bias)
    assert both.kind == "learned+alibi" and both.cat_dim == 0 and not both.coordinate_based
    coord = ndpe.make(dims=2, kind="coord", dim=16, heads=2)
    assert ndpe.Combine(coord, alibi).cat_dim == coord.cat_dim
    with pytest.raises(ValueError, match="same dims, dim and heads"):
        ndpe.Combine(alibi, ndpe.make(dims=2, kind="alibi", dim=16, heads=4))
    with pytest.raises(ValueError, match="two rotary"):
        r = ndpe.make(dims=2, kind="rope", dim=16, heads=2)
        ndpe.Combine(r, r)((3, 4))


def test_outputs_made_in_inference_mode_do_not_reach_training():
    """A validation pass under torch.inference_mode must not poison the cache for the next training step."""
    pe = ndpe.make(dims=1, kind="rope", dim=32, heads=2)
    with torch.inference_mode():
        pe((8,))
    q = torch.randn(1, 2, 8, 16, requires_grad=True)
    a, b = ndpe.apply_qk(q, q, pe((8,)))
    (a.sum() + b.sum()).backward()
    assert q.grad is not None


def test_merge_broadcasts_batched_and_unbatched_cats():
    a = ndpe.PosOut(cat=torch.zeros(6, 2))
    b = ndpe.PosOut(cat=torch.ones(3, 6, 1))
    m = ndpe.merge(a, b)
    assert m.cat.shape == (3, 6, 3) and (m.cat[..., 2] == 1).all()


def test_apply_tokens_keeps_the_token_dtype():
    x = torch.randn(2, 4, 8, dtype=torch.bfloat16)
    assert ndpe.apply_tokens(x, ndpe.PosOut(add=torch.ones(4, 8))).dtype == torch.bfloat16


def test_combine_refuses_positions_in_mixed_units():
    both = ndpe.Combine(ndpe.make(dims=2, kind="rope", dim=32, heads=2), ndpe.make(dims=2, kind="coord", dim=32, heads=2))
    both((3, 4))  # each kind builds its own default coordinates: fine
    with pytest.raises(ValueError, match="one coordinate unit"):
        both((3, 4), positions=torch.zeros(12, 2))
    with pytest.raises(ValueError, match="one coordinate unit"):
        both.coords((3, 4))


CACHED_FIELDS = [  # (kind, dims, opts, field)
    ("sinusoidal", 2, {}, "add"),
    ("coord", 2, {}, "cat"),
    ("rope", 2, {}, "cos"),
    ("rope", 2, {}, "sin"),
    ("alibi", 2, {}, "bias"),
]


def _field(pos, name):
    if name in ("cos", "sin"):
        return pos.rot[0 if name == "cos" else 1]
    return getattr(pos, name)


@pytest.mark.parametrize("num_prefix", [0, 1])
@pytest.mark.parametrize("kind,dims,opts,field", CACHED_FIELDS, ids=[f"{c[0]}-{c[3]}" for c in CACHED_FIELDS])
def test_cache_survives_in_place_changes_by_the_caller(kind, dims, opts, field, num_prefix):
    pe = ndpe.make(dims=dims, kind=kind, dim=32, heads=4, **opts)
    ref = _field(pe((3, 4), num_prefix=num_prefix), field).clone()
    _field(pe((3, 4), num_prefix=num_prefix), field).mul_(0).add_(7)  # the caller scribbles on its output
    torch.testing.assert_close(_field(pe((3, 4), num_prefix=num_prefix), field), ref, rtol=0, atol=0)
    assert pe((3, 4), num_prefix=num_prefix) is pe((3, 4), num_prefix=num_prefix)  # still cached afterwards


@pytest.mark.parametrize("dtype", [None, torch.float32, torch.bfloat16])
def test_cache_survives_changes_through_attn_bias(dtype):
    pe = ndpe.make(dims=1, kind="alibi", dim=32, heads=4)
    ref = pe((4,), dtype=dtype).bias.clone()
    m = ndpe.attn_bias(pe((4,), dtype=dtype))
    m += 5  # a view of the cached bias when no cast happens
    torch.testing.assert_close(pe((4,), dtype=dtype).bias, ref, rtol=0, atol=0)
    torch.testing.assert_close(ndpe.attn_bias(pe((4,), dtype=dtype))[0], ref, rtol=0, atol=0)


def test_cache_survives_changes_through_combine():
    pe = ndpe.Combine(ndpe.make(dims=1, kind="sinusoidal", dim=32, heads=4), ndpe.make(dims=1, kind="alibi", dim=32, heads=4))
    ref = pe((4,))
    ref_add, ref_bias = ref.add.clone(), ref.bias.clone()
    out = pe((4,))
    out.add.zero_()
    out.bias.zero_()
    torch.testing.assert_close(pe((4,)).add, ref_add, rtol=0, atol=0)
    torch.testing.assert_close(pe((4,)).bias, ref_bias, rtol=0, atol=0)


def test_bias_size_guard_is_configurable_and_checked_before_allocating():
    pe = ndpe.make(dims=2, kind="alibi", dim=32, heads=4)
    with pytest.raises(MemoryError, match=r"\(4, 16384, 16384\) float32.*GiB budget.*ndpe\.flex"):
        pe((128, 128))  # ~5 GiB: refused at once instead of allocating
    previous = ndpe.set_bias_budget(1000)
    try:
        assert ndpe.bias_budget() == 1000
        with pytest.raises(MemoryError, match="budget"):
            pe((8, 8))
        with pytest.raises(MemoryError, match="budget"):
            ndpe.make(dims=2, kind="relative", dim=32, heads=4)((8, 8))
        assert pe((2, 2)).bias.shape == (4, 4, 4)  # 4 x 4 tokens fit in 1000 bytes
        ndpe.set_bias_budget(None)
        assert pe((8, 8)).bias.shape == (4, 64, 64)
    finally:
        ndpe.set_bias_budget(previous)
    assert ndpe.bias_budget() == previous
    with pytest.raises(TypeError, match="bias budget"):
        ndpe.set_bias_budget(1.5)


def test_replace_rebuilds_with_changed_options():
    """pe.replace(**changes): same kind, other options kept, trained state, augmentation, device and mode kept."""
    pe = ndpe.make(dims=2, kind="rope", dim=32, heads=2, theta=100.0, pairing="interleaved", axis_dims=(4, 8)).eval()
    scaled = pe.replace(scaling="yarn", scale=(2.0, 1.5), train_shape=(4, 4))
    assert (scaled.theta, scaled.pairing, scaled.axis_dims) == (pe.theta, pe.pairing, pe.axis_dims)
    assert scaled.scaling == "yarn" and scaled.scale == (2.0, 1.5) and not scaled.training
    same = pe.replace()
    torch.testing.assert_close(same((3, 5)).rot[0], pe((3, 5)).rot[0], rtol=0, atol=0)

    table = ndpe.make(dims=2, kind="learned", dim=8, grid_shape=(3, 3), augment=None).double()
    with torch.no_grad():
        table.table.add_(1.0)  # "trained"
    resized = table.replace(resize="bicubic")
    assert resized.table.dtype == torch.float64 and torch.equal(resized.table, table.table)
    bigger = table.replace(grid_shape=(4, 4))  # another shape: a fresh table of that shape
    assert bigger.table.shape == (4, 4, 8)

    cape = ndpe.make(dims=1, kind="sinusoidal", dim=8, augment="cape")
    assert type(cape.replace(temperature=100.0).augment).__name__ == "CAPE"
    with pytest.raises(TypeError, match="thetaa"):
        pe.replace(thetaa=1.0)
    assert copy.deepcopy(pe).replace(pairing="half").theta == (100.0, 100.0)  # a copy keeps the options


def test_replace_of_a_subclass_rebuilds_the_subclass():
    """The options are recorded once per construction, whichever class's __init__ takes them."""
    class Sub(type(ndpe.make(dims=1, kind="alibi", dim=8))):
        pass

    pe = Sub(dims=1, dim=8, heads=4, causal=True)
    new = pe.replace(heads=2)
    assert type(new) is Sub and new.causal and new.heads == 2
