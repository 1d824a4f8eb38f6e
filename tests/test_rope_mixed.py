"""``rope-mixed`` (Heo et al. 2024): equal to timm's ``RotaryEmbeddingMixed``, learnable, relative.

Mapping to timm 1.0.31 ``RotaryEmbeddingMixed(dim, depth, num_heads, temperature=10)``:
    its ``freqs[:, block]`` ``(2, heads, head_dim / 2)`` are one block's frequencies; ours are
    shared by all blocks: ``freqs[h, a, j]`` with ``a`` in ``ij`` order (row, col).
    ``grid_indexing="xy"`` (timm's default): ``freqs[0]`` multiplies the column, ``freqs[1]`` the row,
    so ours ``[:, 0] = freqs[1]``, ``[:, 1] = freqs[0]``; ``grid_indexing="ij"``: the same order.
    Its layout is interleaved (``apply_rot_embed_cat(half=False)``) == ``pairing="interleaved"``.
"""
from __future__ import annotations

import itertools
import math

import pytest
import torch
from timm.layers.pos_embed_sincos import RotaryEmbeddingMixed, apply_rot_embed_cat

import ndpe
from ndpe.kinds.rope_mixed import init_mixed_freqs


@pytest.mark.parametrize("grid_indexing,order", [("xy", (1, 0)), ("ij", (0, 1))])
@pytest.mark.parametrize("grid", [(3, 5), (5, 3)])
def test_equals_timm_rotary_embedding_mixed(grid, grid_indexing, order):
    torch.manual_seed(0)
    heads, head_dim, block = 3, 16, 1
    timm_pe = RotaryEmbeddingMixed(heads * head_dim, depth=2, num_heads=heads, grid_indexing=grid_indexing)
    pe = ndpe.make(dims=2, kind="rope-mixed", dim=heads * head_dim, heads=heads, pairing="interleaved")
    with torch.no_grad():
        pe.freqs.copy_(torch.stack([timm_pe.freqs[a, block] for a in order], dim=1))  # (heads, 2, head_dim / 2)
    q = torch.randn(2, heads, math.prod(grid), head_dim)
    ref = apply_rot_embed_cat(q, timm_pe.get_embed(list(grid))[block])
    torch.testing.assert_close(ndpe.apply_qk(q, q, pe(grid))[0], ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dims,grid", [(2, (3, 4)), (3, (2, 3, 2))])
def test_unrotated_init_is_axial_rope(dims, grid):
    mixed = ndpe.make(dims=dims, kind="rope-mixed", dim=48, heads=2, rotate=False, theta=10.0)
    axial = ndpe.make(dims=dims, kind="rope", dim=48, heads=2, theta=10.0)
    for a, b in zip(mixed(grid).rot, axial(grid).rot):
        torch.testing.assert_close(a, b.expand_as(a))


@pytest.mark.parametrize("dims", [2, 3])
def test_init_is_a_random_rotation_of_axial_frequencies(dims):
    torch.manual_seed(0)
    axis_dims = (8,) * dims
    freqs = init_mixed_freqs(5, axis_dims, 10.0).double()  # (H, dims, rot / 2)
    mags = 10.0 ** (-torch.arange(0, 8, 2, dtype=torch.float64) / 8)
    groups = freqs.unflatten(-1, (dims, 4)) / mags  # (H, dims, group, j): direction of group g, same for every j
    torch.testing.assert_close(groups, groups[..., :1].expand_as(groups))
    rot = groups[..., 0]  # (H, dims, dims): column g = direction of group g
    torch.testing.assert_close(rot.transpose(-1, -2) @ rot, torch.eye(dims, dtype=torch.float64).expand(5, dims, dims), atol=1e-6, rtol=0)
    torch.testing.assert_close(torch.linalg.det(rot), torch.ones(5, dtype=torch.float64), atol=1e-6, rtol=0)
    assert not torch.allclose(rot[0], rot[1]), "one rotation per head"


@pytest.mark.parametrize("dims,grid", [(2, (2, 5)), (3, (2, 2, 3))])
def test_scores_depend_only_on_offset(dims, grid):
    pe = ndpe.make(dims=dims, kind="rope-mixed", dim=24, heads=2)
    n = math.prod(grid)
    q, k = torch.randn(2, 1, 12, dtype=torch.float64).expand(2, n, 12), torch.randn(2, 1, 12, dtype=torch.float64).expand(2, n, 12)
    rq, rk = ndpe.apply_qk(q[None], k[None], pe(grid))
    scores = (rq @ rk.transpose(-1, -2))[0]  # (heads, N, N)
    coords = pe.coords(grid)
    groups: dict[tuple, list] = {}
    for m, j in itertools.product(range(n), repeat=2):
        groups.setdefault(tuple((coords[m] - coords[j]).tolist()), []).append((m, j))
    for pairs in groups.values():
        vals = torch.stack([scores[:, m, j] for m, j in pairs])
        torch.testing.assert_close(vals, vals[:1].expand_as(vals), rtol=1e-5, atol=1e-5)


def test_gradient_reaches_frequencies():
    """Attention scores between different positions train the frequencies, with the textbook gradient."""
    torch.manual_seed(0)
    pe = ndpe.make(dims=2, kind="rope-mixed", dim=32, heads=2)
    q, k, weight = torch.randn(1, 2, 12, 16), torch.randn(1, 2, 12, 16), torch.randn(12, 12)

    def loss(rq, rk):  # weighted q.k over all (m, n): same-position terms alone would not depend on freqs
        return ((rq @ rk.transpose(-1, -2)) * weight).sum()

    loss(*ndpe.apply_qk(q, k, pe((3, 4)))).backward()
    assert pe.freqs.grad is not None and pe.freqs.grad.abs().min() > 1e-4
    assert pe((3, 4)) is not pe((3, 4)), "learned: never cached"
    freqs = pe.freqs.detach().clone().requires_grad_()  # the same through a plain formula (half pairing)
    angle = (pe.coords((3, 4))[None, :, :, None] * freqs[:, None]).sum(-2)  # (H, N, 8)

    def rot(x):
        x1, x2 = x[..., :8], x[..., 8:]
        return torch.cat([x1 * angle.cos() - x2 * angle.sin(), x2 * angle.cos() + x1 * angle.sin()], -1)

    loss(rot(q), rot(k)).backward()
    torch.testing.assert_close(pe.freqs.grad, freqs.grad, rtol=1e-4, atol=1e-4)


def test_state_dict_round_trip_and_shapes():
    torch.manual_seed(0)
    a = ndpe.make(dims=3, kind="rope-mixed", dim=48, heads=4)
    b = ndpe.make(dims=3, kind="rope-mixed", dim=48, heads=4)
    assert list(a.state_dict()) == ["freqs"] and a.freqs.shape == (4, 3, 6)
    assert not torch.equal(a((2, 2, 3)).rot[0], b((2, 2, 3)).rot[0])
    b.load_state_dict(a.state_dict())
    torch.testing.assert_close(a((2, 2, 3)).rot[0], b((2, 2, 3)).rot[0], rtol=0, atol=0)
    out = a((2, 2, 3), num_prefix=1)
    assert out.rot[0].shape == (4, 13, 6) and (out.rot[0][:, 0] == 1).all()
    assert a(positions=torch.rand(5, 12, 3)).rot[0].shape == (5, 4, 12, 6)


BAD = [
    (dict(dims=1, dim=16), "supports dims"),
    (dict(dims=2, dim=15, heads=1), "even head_dim"),
    (dict(dims=2, dim=16, theta=1.0), "theta"),
    (dict(dims=2, dim=16, coords="xy"), "coords"),
    (dict(dims=2, dim=16, pairing="complex"), "pairing"),
]


@pytest.mark.parametrize("opts,words", BAD)
def test_bad_options_raise(opts, words):
    with pytest.raises(ValueError, match=words):
        ndpe.make(kind="rope-mixed", **opts)


@pytest.mark.parametrize("dims,batched,pairing", [(2, False, "interleaved"), (3, True, "half"), (2, True, "interleaved")])
def test_fused_gradient_equals_autograd_of_the_formula(dims, batched, pairing):
    """The frequencies' hand-written gradient (rope-mixed's angle gradient, the rotation's cos/sin sums over stacked q
    and k, bfloat16 q and k) equals autograd through the plain formula, in 2D and 3D, per-sample positions or not."""
    torch.manual_seed(0)
    pe = ndpe.make(dims=dims, kind="rope-mixed", dim=48, heads=2, pairing=pairing)
    grid = (2, 3, 2)[:dims]
    n = 2 * 3 * (2 if dims == 3 else 1)
    positions = torch.rand(3, n, dims) * 8 if batched else None
    qkv = torch.randn(3, n, 3 * 48, dtype=torch.bfloat16)
    q, k = qkv.unflatten(-1, (3, 2, 24)).permute(2, 0, 3, 1, 4)[:2]  # views of one fused qkv
    weight = torch.randn(n, n)

    def loss(rq, rk):
        return ((rq.float() @ rk.float().transpose(-1, -2)) * weight).sum()

    loss(*ndpe.apply_qk(q, k, pe(grid, positions=positions))).backward()
    freqs = pe.freqs.detach().clone().requires_grad_()
    pos = pe.coords(grid) if positions is None else positions
    angle = sum(pos[..., None, :, a, None] * freqs[:, None, a, :] for a in range(dims))
    half = angle.shape[-1]

    def rot(x):
        x = x.float()
        x1, x2 = (x[..., :half], x[..., half:2 * half]) if pairing == "half" else (x[..., 0::2], x[..., 1::2])
        o1, o2 = x1 * angle.cos() - x2 * angle.sin(), x2 * angle.cos() + x1 * angle.sin()
        return torch.cat([o1, o2], -1) if pairing == "half" else torch.stack([o1, o2], -1).flatten(-2)

    loss(rot(q), rot(k)).backward()
    torch.testing.assert_close(pe.freqs.grad, freqs.grad, rtol=2e-2, atol=2e-2 * freqs.grad.abs().max().item())


def _qk(n, dtype, prefix=0, batch=3, heads=2, head_dim=24):
    """q and k: views of one fused qkv leaf ``(batch, prefix + n, 3 * heads * head_dim)``, as a ViT's attention."""
    qkv = torch.randn(batch, prefix + n, 3 * heads * head_dim, dtype=dtype, requires_grad=True)
    q, k = qkv.unflatten(-1, (3, heads, head_dim)).permute(2, 0, 3, 1, 4)[:2]
    return qkv, q, k


@pytest.mark.parametrize("pairing,prefix,batched", [("half", 0, False), ("interleaved", 1, False), ("half", 2, True),
                                                    ("interleaved", 0, True)])
def test_fused_rotation_gradcheck(pairing, prefix, batched):
    """The rotation by rope-mixed's tables (MixedRotary: q's, k's and the frequencies' gradients from one inverse
    rotation) against finite differences in float64, prefix tokens and per-sample positions included."""
    from ndpe.contract import pad_prefix
    from ndpe.kernels.angles import MixedCosSin
    torch.manual_seed(0)
    freqs = torch.randn(2, 2, 3, dtype=torch.float64, requires_grad=True)
    pos = torch.rand(*((2,) if batched else ()), 5, 2, dtype=torch.float64) * 4
    q, k = (torch.randn(2, 2, prefix + 5, 8, dtype=torch.float64, requires_grad=True) for _ in range(2))

    def rotate(freqs, q, k):
        rot = pad_prefix(ndpe.PosOut(rot=MixedCosSin.apply(pos, freqs), pairing=pairing), prefix)
        out = ndpe.apply_qk(q, k, rot)
        assert type(out[0].grad_fn).__name__ == "MixedRotaryBackward"
        return out
    assert torch.autograd.gradcheck(rotate, (freqs, q, k))


@pytest.mark.parametrize("dims,pairing,dtype,batched,prefix", [
    (2, "half", torch.bfloat16, False, 0), (2, "interleaved", torch.bfloat16, False, 1),
    (3, "half", torch.float32, True, 0), (2, "interleaved", torch.float32, False, 2)])
def test_fused_rotation_equals_the_tables_gradient(dims, pairing, dtype, batched, prefix):
    """q and k rotated by ``pe(grid)`` in training take MixedRotary; by the same tables as plain tensors (cloned), the
    general Rotary and MixedCosSin's backward (cos / sin gradients, then the angle's). The same outputs bit for bit,
    the same q / k gradients bit for bit, the frequencies' gradient within float32's precision (bfloat16: within
    its, the angle's gradient read from the bfloat16 inverse rotation)."""
    pe = ndpe.make(dims=dims, kind="rope-mixed", dim=48, heads=2, pairing=pairing)
    grid = (2, 3, 2)[:dims]
    n = math.prod(grid)
    positions = torch.rand(3, n, dims) * 8 if batched else None

    def run(tables):
        torch.manual_seed(0)
        qkv, q, k = _qk(n, dtype, prefix)
        weight = torch.randn(prefix + n, prefix + n)
        pos = pe(grid, positions=positions, num_prefix=prefix)
        if tables:
            pos = ndpe.PosOut(rot=tuple(t.clone() for t in pos.rot), pairing=pairing, num_prefix=prefix)
        rq, rk = ndpe.apply_qk(q, k, pos)
        pe.freqs.grad = None
        ((rq.float() @ rk.float().mT) * weight).sum().backward()
        return type(rq.grad_fn).__name__, rq, rk, qkv.grad, pe.freqs.grad

    fused, plain = run(False), run(True)
    assert (fused[0], plain[0]) == ("MixedRotaryBackward", "RotaryBackward")
    for a, b in zip(fused[1:4], plain[1:4]):
        assert torch.equal(a.detach().view(torch.int16 if dtype == torch.bfloat16 else torch.int32),
                           b.detach().view(torch.int16 if dtype == torch.bfloat16 else torch.int32))
    scale = plain[4].abs().max().item()
    tol = (1e-2 if dtype == torch.bfloat16 else 1e-5) * scale
    torch.testing.assert_close(fused[4], plain[4], rtol=0, atol=tol)
