"""``string`` (STRING, Schenck et al. 2025): RoPE in a learned orthogonal basis. No installable peer: pinned against
the formula ``R(p) = P RoPE(p) P^T`` as dense per-token matrices, and its properties (orthogonal ``P``, relative
logits, plain RoPE at init, trainable through attention, cached decoding)."""
from __future__ import annotations

import math

import pytest
import torch

import ndpe


def dense_rope(pe, positions):
    """RoPE(p) as ``(heads | 1, N, r, r)`` dense matrices (half pairing: frequency i turns channels i, i + r/2)."""
    cos, sin = pe.replace(init_std=0.0)(positions=positions).rot  # (1, N, r/2): the rope part alone
    r = 2 * cos.shape[-1]
    m = torch.zeros(*cos.shape[:-1], r, r)
    i = torch.arange(r // 2)
    m[..., i, i], m[..., i + r // 2, i + r // 2] = cos, cos
    m[..., i, i + r // 2], m[..., i + r // 2, i] = -sin, sin
    return m


@pytest.mark.parametrize("orthogonal", ["cayley", "circulant"])
@pytest.mark.parametrize("dims,grid", [(1, (6,)), (2, (2, 3)), (3, (2, 2, 2))])
def test_equals_the_formula(orthogonal, dims, grid):
    torch.manual_seed(0)
    pe = ndpe.make(dims=dims, kind="string", dim=2 * 6 * dims, heads=2, orthogonal=orthogonal, init_std=0.3)
    positions = pe.coords(grid)
    P = pe.basis().detach()  # (heads, r, r)
    R = P[:, None] @ dense_rope(pe, positions) @ P[:, None].transpose(-1, -2)  # (heads, N, r, r)
    n, r = math.prod(grid), P.shape[-1]
    q, k = torch.randn(2, 1, 2, n, 6 * dims).unbind(0)
    rq, rk = ndpe.apply_qk(q, k, pe(grid))
    want = torch.einsum("hnij,bhnj->bhni", R, q[..., :r]) @ torch.einsum("hnij,bhnj->bhni", R, k[..., :r]).transpose(-1, -2)
    want = want + q[..., r:] @ k[..., r:].transpose(-1, -2)
    torch.testing.assert_close(rq @ rk.transpose(-1, -2), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("orthogonal", ["cayley", "circulant"])
def test_orthogonal_relative_and_rope_at_init(orthogonal):
    torch.manual_seed(0)
    pe = ndpe.make(dims=2, kind="string", dim=32, heads=2, orthogonal=orthogonal, init_std=0.5)
    P = pe.basis().detach()
    torch.testing.assert_close(P @ P.transpose(-1, -2), torch.eye(16).expand(2, 16, 16), rtol=0, atol=1e-5)
    q, k = torch.randn(2, 1, 2, 6, 16).unbind(0)
    p = pe.coords((2, 3))
    logits = [(lambda a, b: a @ b.transpose(-1, -2))(*ndpe.apply_qk(q, k, pe(positions=p + s)))
              for s in (torch.zeros(2), torch.tensor([3.5, -1.25]))]
    torch.testing.assert_close(logits[0], logits[1], rtol=1e-4, atol=1e-4)  # translation invariant
    plain = ndpe.make(dims=2, kind="rope", dim=32, heads=2)
    fresh = ndpe.make(dims=2, kind="string", dim=32, heads=2, orthogonal=orthogonal)  # init_std=0: P = I
    for a, b in zip(ndpe.apply_qk(q, k, fresh((2, 3))), ndpe.apply_qk(q, k, plain((2, 3)))):
        torch.testing.assert_close(a, b)
    assert (logits[0] - ndpe.apply_qk(q, k, plain((2, 3)))[0] @ ndpe.apply_qk(q, k, plain((2, 3)))[1].transpose(-1, -2)
            ).abs().max() > 1e-2  # the learned basis changes the logits: the test can tell


def test_trains_and_decodes_through_attention():
    torch.manual_seed(0)
    pe = ndpe.make(dims=1, kind="string", dim=32, heads=4, init_std=0.2)
    attn = ndpe.Attention(32, heads=4, causal=True)
    x = torch.randn(2, 9, 32)
    attn(x, pe((9,))).sum().backward()
    assert pe.weight.grad is not None and pe.weight.grad.abs().sum() > 0
    pe.eval()
    with torch.no_grad():
        full = attn(x, pe((9,)))
        cache = ndpe.KVCache()
        steps = [attn(x[:, :5], pe((5,)), cache)] + [attn(x[:, i:i + 1], pe((1,), past=i), cache) for i in range(5, 9)]
    torch.testing.assert_close(torch.cat(steps, 1), full, rtol=1e-5, atol=1e-5)


def test_refusals():
    with pytest.raises(ValueError, match="orthogonal must be one of"):
        ndpe.make(dims=2, kind="string", dim=32, heads=2, orthogonal="householder")
    with pytest.raises(ValueError, match="init_std must be"):
        ndpe.make(dims=2, kind="string", dim=32, heads=2, init_std=-1.0)
    with pytest.raises(ValueError, match="PosOut.basis must be a square"):
        ndpe.PosOut(rot=(torch.ones(3, 4), torch.zeros(3, 4)), basis=torch.eye(4))
