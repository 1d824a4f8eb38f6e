"""``liere`` against a port of the LieRE attention in the ComRoPE authors' public code (Longin-Yu/ComRoPE, model.py:
``RoPESelfAttentionBase.get_rotation_matrix`` with ``LieREAttention.get_exponent_matrix``, at ``scale_factor=1``),
a dense per-token loop, and the properties: each R(p) is orthogonal, generators that commute make it relative."""
from __future__ import annotations

import math

import pytest
import torch

import ndpe


def reference_rotation(freqs: torch.Tensor, positions: torch.Tensor, head_dim: int, block_size: int) -> torch.Tensor:
    """The port (LieRE's ``get_exponent_matrix``, then ``get_rotation_matrix``)."""
    return rotation_matrix(freqs - freqs.transpose(-1, -2), positions, head_dim, block_size)


def rotation_matrix(A: torch.Tensor, positions: torch.Tensor, head_dim: int, block_size: int) -> torch.Tensor:
    """``get_rotation_matrix`` (shared by the reference's LieRE and ComRoPE): angle matrices ``A`` ``(heads, axes,
    blocks, b, b)`` -> ``(bs, len, heads, head_dim, head_dim)`` block-diagonal ``exp(sum_a A_a p_a)``."""
    eye = torch.eye(block_size, dtype=A.dtype)
    pos = positions[..., None, None, None] * eye  # (bs, len, axes, 1, b, b)
    lnR = torch.matmul(A, pos.unsqueeze(2)).sum(dim=3)  # (bs, len, heads, blocks, b, b)
    R = torch.matrix_exp(lnR)
    selector = torch.kron(torch.eye(head_dim // block_size, dtype=torch.bool), torch.ones(block_size, block_size,
                                                                                        dtype=torch.bool))
    dense = torch.zeros(*R.shape[:3], head_dim, head_dim, dtype=R.dtype)
    dense[:, :, :, selector] = R.reshape(*R.shape[:3], -1)
    return dense


def reference_logits(q, k, R):
    """``(R q) . (R k)`` with q scaled by ``head_dim ** -0.5`` first, as the reference attention."""
    R = R.transpose(1, 2)  # (bs, heads, len, d, d)
    Q = (R @ (q * q.shape[-1] ** -0.5).unsqueeze(-1)).squeeze(-1)
    K = (R @ k.unsqueeze(-1)).squeeze(-1)
    return Q @ K.transpose(-1, -2)


def full_logits(pe, q, k, **call):
    return q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5 + pe(**call).logits(q, k)


@pytest.mark.parametrize("dims,grid", [(1, (7,)), (2, (3, 4)), (3, (2, 2, 3))])
@pytest.mark.parametrize("block_size", [2, 4, 8])
def test_equals_the_reference(dims, grid, block_size):
    torch.manual_seed(0)
    pe = ndpe.make(dims=dims, kind="liere", dim=16, heads=2, block_size=block_size, init_std=0.5)
    positions = pe.coords(grid)
    q, k = torch.randn(2, 2, 2, math.prod(grid), 8).unbind(0)
    R = reference_rotation(pe.weight.detach(), positions[None], 8, block_size)
    torch.testing.assert_close(full_logits(pe, q, k, grid_shape=grid), reference_logits(q, k, R).expand(2, -1, -1, -1),
                               rtol=1e-4, atol=1e-4)


def test_dense_per_token_loop_and_orthogonality():
    torch.manual_seed(1)
    pe = ndpe.make(dims=2, kind="liere", dim=8, heads=1, init_std=0.7)  # dense: one 8 x 8 generator per axis
    grid = (2, 3)
    p = pe.coords(grid)
    A = pe.generators().detach()[0, :, 0]  # (axes, 8, 8)
    q, k = torch.randn(2, 1, 1, 6, 8).unbind(0)
    got = full_logits(pe, q, k, grid_shape=grid)[0, 0]
    for i in range(6):
        Ri = torch.matrix_exp(p[i, 0] * A[0] + p[i, 1] * A[1])
        torch.testing.assert_close(Ri @ Ri.T, torch.eye(8), rtol=0, atol=1e-5)  # a rotation
        for j in range(6):
            Rj = torch.matrix_exp(p[j, 0] * A[0] + p[j, 1] * A[1])
            want = (Ri @ q[0, 0, i]) @ (Rj @ k[0, 0, j]) / 8 ** 0.5
            torch.testing.assert_close(got[i, j], want, rtol=1e-4, atol=1e-5)


def test_relative_only_when_generators_commute():
    """With 2 x 2 blocks the generators commute (RoPE with learned angles): the logits depend on the offset only;
    dense generators in 2D do not commute, and a shift of every position changes them."""
    torch.manual_seed(0)
    q, k = torch.randn(2, 1, 1, 6, 8).unbind(0)
    grid = (2, 3)
    for block_size, relative in ((2, True), (8, False)):
        pe = ndpe.make(dims=2, kind="liere", dim=8, heads=1, block_size=block_size, init_std=0.7)
        p = pe.coords(grid)
        a, b = full_logits(pe, q, k, positions=p), full_logits(pe, q, k, positions=p + torch.tensor([0.7, -0.4]))
        assert torch.allclose(a, b, atol=1e-4) == relative


def test_decoding_and_gradients():
    pe = ndpe.make(dims=1, kind="liere", dim=16, heads=2, block_size=4, coords="index").eval()
    q, k = torch.randn(2, 1, 2, 9, 8).unbind(0)
    full = full_logits(pe, q, k, grid_shape=(9,))
    step = q[..., 6:, :] @ k.transpose(-1, -2) * 8 ** -0.5 + pe((3,), past=6).logits(q[..., 6:, :], k)
    torch.testing.assert_close(step, full[..., 6:, :], rtol=1e-4, atol=1e-4)
    pe((5,)).logits(q[..., :5, :], k[..., :5, :]).sum().backward()
    assert pe.weight.grad is not None and pe.weight.grad.abs().sum() > 0


def test_refusals():
    with pytest.raises(ValueError, match="block_size must divide"):
        ndpe.make(dims=2, kind="liere", dim=48, heads=2, block_size=5)
    with pytest.raises(ValueError, match="coords must be"):
        ndpe.make(dims=2, kind="liere", dim=48, heads=2, coords="polar")


@pytest.mark.parametrize("kind", ["liere", "comrope"])
def test_positions_past_a_float32_rotation_are_refused(kind):
    """Positions whose exponent sum_a p_a A_a a float32 matrix exponential cannot keep a rotation (NaN at ~1e9,
    entries off by ~1e-7 x its norm before) are refused in one line, for the queries and in decoding; positions
    well inside give finite logits and orthogonal rotations."""
    pe = ndpe.make(dims=2, kind=kind, dim=16, heads=2, block_size=4)
    q = torch.randn(1, 2, 2, 8)
    with pytest.raises(ValueError, match=r"^[^\n]*past the 100000 a float32 matrix exponential keeps a rotation"):
        pe(positions=torch.tensor([[0.0, 0.0], [1e30, 1.0]]))
    big = 1e4 / float(torch.linalg.matrix_norm(pe.generators().detach(), ord=1).amax())  # norm 1e4 per axis
    assert torch.isfinite(pe(positions=torch.tensor([[0.0, 0.0], [big, 0.0]])).logits(q, q)).all()
    rot = pe._rotations(torch.tensor([[big, 0.0]])).detach()  # (heads, 1, blocks, b, b)
    eye = torch.eye(4).expand_as(rot)
    torch.testing.assert_close(rot @ rot.transpose(-1, -2), eye, atol=1e-2, rtol=0)
    decoder = ndpe.make(dims=1, kind=kind, dim=16, heads=2, block_size=4, coords="index", init_std=50.0)
    with pytest.raises(ValueError, match="float32 matrix exponential"):
        decoder((1,), past=10 ** 4)


@pytest.mark.parametrize("kind", ["liere", "comrope"])
def test_queries_of_another_device_or_batch_are_refused(kind):
    pe = ndpe.make(dims=1, kind=kind, dim=16, heads=2, block_size=4)
    with pytest.raises(ValueError, match=rf"^{kind}'s logits needs one device, got q on meta, k on meta, encoding on "
                                         r"cpu[^\n]*$"):
        pe((5,)).logits(*torch.randn(2, 1, 2, 5, 8, device="meta").unbind(0))
    q = torch.randn(3, 2, 5, 8)
    with pytest.raises(ValueError, match=r"^the encoding's rotations has leading dims \(2, 2\)[^\n]*another batch"):
        pe(positions=torch.rand(2, 5, 1)).logits(q, q)
    assert pe(positions=torch.rand(3, 5, 1)).logits(q, q).shape == (3, 2, 5, 5)
