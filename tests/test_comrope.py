"""``comrope`` against a port of the ComRoPE authors' public code (Longin-Yu/ComRoPE, model.py:
``RoPESelfAttentionBase.get_rotation_matrix`` and ``forward`` with ``ComRoPELDAttention.get_exponent_matrix`` and
``ComRoPEAPAttention.get_exponent_matrix`` / ``_create_mask``), a per-pair loop of the paper's formula with dense
angle matrices, and the defining properties: each R(p) is orthogonal and ``R(x)^T R(y) = R(y - x)`` (the logits
depend on the offset alone) for random weights and after training steps."""
from __future__ import annotations

import math

import pytest
import torch

import ndpe
# the reference's rotation and attention are the same code for LieRE and ComRoPE (RoPESelfAttentionBase)
from test_liere import full_logits, reference_logits, rotation_matrix as reference_rotation


# ---- port of the reference ------------------------------------------------------------------------------------------

def reference_exponent(variant: str, freqs: torch.Tensor, multiplier: torch.Tensor | None, num_axes: int):
    """``get_exponent_matrix``: freqs ``(heads, 1, blocks, b, b)``; LD's multiplier ``(1, axes, blocks, 1, 1)``."""
    skew = freqs - freqs.transpose(-1, -2)
    if variant == "ld":
        return skew * multiplier
    total_blocks = freqs.shape[2]
    mask = torch.zeros((num_axes, total_blocks), dtype=torch.float32)
    for i in range(num_axes):
        mask[i, i::num_axes] = 1.0
    return skew.expand(-1, num_axes, -1, -1, -1) * mask.view(1, num_axes, total_blocks, 1, 1)


# ---- helpers --------------------------------------------------------------------------------------------------------

def dense_angle_matrices(pe) -> torch.Tensor:
    """The paper's ``A_i = diag(B_i1, ..., B_im)`` as dense ``(heads, dims, head_dim, head_dim)`` matrices, built from
    the weights by its definitions (AP: ``B_ij = P_j - P_j^T`` if ``j = i mod N``; LD: ``B_ij = theta_ij (P_j -
    P_j^T)``), not from ``pe.generators()``."""
    W = pe.weight.detach()
    heads, blocks, b, _ = W.shape
    A = torch.zeros(heads, pe.dims, blocks * b, blocks * b)
    for h in range(heads):
        for i in range(pe.dims):
            for j in range(blocks):
                P = W[h, j] - W[h, j].T
                if pe.variant == "ap":
                    block = P if j % pe.dims == i else torch.zeros(b, b)
                else:
                    block = pe.multiplier.detach()[i, j] * P
                A[h, i, j * b:(j + 1) * b, j * b:(j + 1) * b] = block
    return A


CASES = [(1, (7,)), (2, (3, 4)), (3, (2, 2, 3))]


@pytest.mark.parametrize("variant", ["ld", "ap"])
@pytest.mark.parametrize("dims,grid", CASES)
@pytest.mark.parametrize("block_size", [2, 4])
def test_equals_the_reference(variant, dims, grid, block_size):
    torch.manual_seed(0)
    head_dim = 12 if dims == 3 else 8
    pe = ndpe.make(dims=dims, kind="comrope", dim=2 * head_dim, heads=2, variant=variant, block_size=block_size,
                   init_std=0.5)
    if variant == "ap" and head_dim % (dims * block_size):
        pytest.skip("ap needs dims * block_size to divide head_dim")
    with torch.no_grad():  # a random state, the LD scales included
        pe.weight.normal_()
    freqs = pe.weight.detach()[:, None]  # the reference's (heads, 1, blocks, b, b)
    mult = None if pe.multiplier is None else pe.multiplier.detach()[None, :, :, None, None]
    A = reference_exponent(variant, freqs, mult, dims)
    positions = pe.coords(grid) + 0.3 * torch.randn(math.prod(grid), dims)  # continuous, as the reference's
    q, k = torch.randn(2, 2, 2, math.prod(grid), head_dim).unbind(0)
    R = reference_rotation(A, positions[None], head_dim, block_size)
    torch.testing.assert_close(full_logits(pe, q, k, positions=positions),
                               reference_logits(q, k, R).expand(2, -1, -1, -1), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("variant", ["ld", "ap"])
def test_per_pair_loop_of_the_formula(variant):
    """``(R(p_i) q_i) . (R(p_j) k_j) / sqrt(d)`` with ``R(p) = exp(sum_a p_a A_a)`` of dense angle matrices."""
    torch.manual_seed(1)
    pe = ndpe.make(dims=2, kind="comrope", dim=16, heads=2, variant=variant, block_size=4, init_std=0.7)
    grid = (2, 3)
    p = pe.coords(grid)
    A = dense_angle_matrices(pe)
    q, k = torch.randn(2, 1, 2, 6, 8).unbind(0)
    got = full_logits(pe, q, k, grid_shape=grid)[0]
    for h in range(2):
        R = [torch.matrix_exp(p[i, 0] * A[h, 0] + p[i, 1] * A[h, 1]) for i in range(6)]
        for i in range(6):
            for j in range(6):
                want = (R[i] @ q[0, h, i]) @ (R[j] @ k[0, h, j]) / 8 ** 0.5
                torch.testing.assert_close(got[h, i, j], want, rtol=1e-4, atol=1e-5)


def relative_gap(pe) -> float:
    """Largest ``|R(x)^T R(y) - R(y - x)|`` over pairs of random continuous positions, per head and block."""
    x, y = torch.randn(2, 5, pe.dims).unbind(0)
    with torch.no_grad():
        Rx, Ry, Rd = pe._rotations(x), pe._rotations(y), pe._rotations(y - x)  # (heads, N, blocks, b, b)
        ortho = (Rx @ Rx.transpose(-1, -2) - torch.eye(pe.block_size)).abs().max()
        assert ortho < 1e-5  # each R(p) is a rotation
        return float((Rx.transpose(-1, -2) @ Ry - Rd).abs().max())


@pytest.mark.parametrize("variant", ["ld", "ap"])
@pytest.mark.parametrize("dims", [1, 2, 3])
def test_relative_for_random_weights_and_after_training(variant, dims):
    torch.manual_seed(2)
    pe = ndpe.make(dims=dims, kind="comrope", dim=48, heads=2, variant=variant, block_size=4, init_std=1.0)
    assert relative_gap(pe) < 1e-4
    grid = (4,) if dims == 1 else (2, 3) if dims == 2 else (2, 2, 2)
    attn = ndpe.Attention(48, heads=2)
    opt = torch.optim.SGD(list(pe.parameters()) + list(attn.parameters()), lr=1.0)
    x = torch.randn(2, math.prod(grid), 48)
    before = pe.weight.detach().clone()
    for _ in range(3):
        opt.zero_grad()
        attn(x, pe(grid)).square().mean().backward()
        opt.step()
    assert (pe.weight.detach() - before).abs().max() > 1e-4  # the weights moved
    assert relative_gap(pe) < 1e-4
    # through attention: shifting every position leaves the logits as they are
    q, k = torch.randn(2, 1, 2, math.prod(grid), 24).unbind(0)
    p = pe.coords(grid)
    with torch.no_grad():
        a = full_logits(pe, q, k, positions=p)
        b = full_logits(pe, q, k, positions=p + torch.randn(dims))
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


def test_liere_with_the_same_blocks_is_not_relative():
    """The test can tell: LieRE's free generators per axis (same blocks of 4) do not commute."""
    torch.manual_seed(2)
    liere = ndpe.make(dims=2, kind="liere", dim=48, heads=2, block_size=4, init_std=1.0)
    assert relative_gap(liere) > 1e-2


def test_decoding_and_gradients():
    pe = ndpe.make(dims=1, kind="comrope", dim=16, heads=2, block_size=4, coords="index", init_std=0.3).eval()
    q, k = torch.randn(2, 1, 2, 9, 8).unbind(0)
    full = full_logits(pe, q, k, grid_shape=(9,))
    step = q[..., 6:, :] @ k.transpose(-1, -2) * 8 ** -0.5 + pe((3,), past=6).logits(q[..., 6:, :], k)
    torch.testing.assert_close(step, full[..., 6:, :], rtol=1e-4, atol=1e-4)
    pe.train()
    pe((5,)).logits(q[..., :5, :], k[..., :5, :]).sum().backward()
    for p in (pe.weight, pe.multiplier):
        assert p.grad is not None and p.grad.abs().sum() > 0


@pytest.mark.parametrize("variant,dims,dim,heads,block", [("ld", 2, 256, 4, 8), ("ld", 2, 48, 4, 6), ("ap", 2, 48, 4, 6),
                                                          ("ap", 3, 48, 4, 4), ("ap", 3, 96, 2, 8)])
def test_default_block_size(variant, dims, dim, heads, block):
    """The largest block of 2 to 8 that fills an axis' channels (head_dim for ld, head_dim / dims for ap)."""
    assert ndpe.make(dims=dims, kind="comrope", dim=dim, heads=heads, variant=variant).block_size == block


def test_refusals():
    with pytest.raises(ValueError, match="variant must be one of"):
        ndpe.make(dims=2, kind="comrope", dim=48, heads=2, variant="lie")
    with pytest.raises(ValueError, match="block_size must divide head_dim=24"):
        ndpe.make(dims=2, kind="comrope", dim=48, heads=2, block_size=5)
    with pytest.raises(ValueError, match="dims \\* block_size must divide head_dim=24"):
        ndpe.make(dims=2, kind="comrope", dim=48, heads=2, variant="ap", block_size=8)
    with pytest.raises(ValueError, match="splits head_dim=64 between the 3 axes"):
        ndpe.make(dims=3, kind="comrope", dim=64, heads=1, variant="ap")
    with pytest.raises(ValueError, match="block_size must be an int >= 2"):
        ndpe.make(dims=2, kind="comrope", dim=48, heads=2, block_size=1)
    with pytest.raises(ValueError, match="no block_size from 2 to 8 divides the 11 channels"):
        ndpe.make(dims=1, kind="comrope", dim=22, heads=2)
    with pytest.raises(ValueError, match="coords must be"):
        ndpe.make(dims=2, kind="comrope", dim=48, heads=2, coords="polar")
    with pytest.raises(ValueError, match="init_std must be"):
        ndpe.make(dims=2, kind="comrope", dim=48, heads=2, init_std=-1.0)
