"""``ndpe.kernels.qkv.rotary_qkv_``: RoPE in place on a packed qkv buffer (Triton; CPU under the interpreter)."""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

import ndpe  # noqa: E402
from ndpe.functional import rotary_kernel  # noqa: E402
from ndpe.kernels.qkv import qk_views, rotary_qkv_  # noqa: E402


@pytest.fixture(autouse=True)
def interpret(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
@pytest.mark.parametrize("dims,grid", [(1, (10,)), (3, (2, 3, 2))])
def test_in_place_equals_apply_qk_forward_and_backward(pairing, dims, grid):
    """q and k rotated where they lie (same storage, v and the pass-through channels untouched), equal to
    ``apply_qk`` on the eager kernel; the gradient of the buffer equals autograd through ``apply_qk``."""
    heads, head_dim = 2, 20  # 3D: rot 18 of 20
    pos = ndpe.make(dims=dims, kind="rope", dim=heads * head_dim, heads=heads, pairing=pairing)(grid, num_prefix=1)
    t = pos.num_tokens
    base = torch.randn(2, t, 3, heads, head_dim, generator=torch.Generator().manual_seed(0))
    weight = torch.randn(t, t)

    def loss(q, k, v):
        return (((q @ k.mT) * weight) @ v).sum() + (q * v).sum()

    leaf = base.clone().requires_grad_()
    qkv = leaf * 1
    ptr, before = qkv.data_ptr(), qkv.detach().clone()
    out = rotary_qkv_(qkv, *pos.rot, pairing)
    assert out is qkv and out.data_ptr() == ptr
    rot = 2 * pos.rot[0].shape[-1]
    assert torch.equal(out[:, :, 2], before[:, :, 2]) and torch.equal(out[..., rot:], before[..., rot:])
    loss(*qk_views(out), out[:, :, 2].transpose(1, 2)).backward()

    ref_leaf = base.clone().requires_grad_()
    with rotary_kernel("eager"):
        q, k = ndpe.apply_qk(*qk_views(ref_leaf), pos)
    torch.testing.assert_close(torch.stack(qk_views(out.detach())), torch.stack([q.detach(), k.detach()]),
                               rtol=1e-6, atol=1e-6)
    loss(q, k, ref_leaf[:, :, 2].transpose(1, 2)).backward()
    torch.testing.assert_close(leaf.grad, ref_leaf.grad, rtol=1e-5, atol=1e-5 * ref_leaf.grad.abs().max().item())


def test_no_grad_bfloat16_per_head_tables():
    """Without autograd the buffer is rotated in place too; per-head tables ``(heads, T, half)`` broadcast by strides."""
    heads, t = 3, 7
    angle = torch.rand(heads, t, 8, generator=torch.Generator().manual_seed(1)) * 50
    qkv = torch.randn(2, t, 3, heads, 16).bfloat16()
    want = [ndpe.functional.rotate_reference(x.double(), angle.cos().double(), angle.sin().double())
            for x in qk_views(qkv)]
    with torch.no_grad():
        rotary_qkv_(qkv, angle.cos(), angle.sin())
    for got, ref in zip(qk_views(qkv), want):
        assert (got.double() - ref).abs().max() <= 2 ** -7 * ref.abs().max()


def test_refuses_what_it_cannot_do(monkeypatch):
    cos = sin = torch.ones(4, 2)
    with pytest.raises(ValueError, match=r"packed qkv buffer of shape \(B, T, 3, heads, head_dim\)"):
        rotary_qkv_(torch.zeros(1, 4, 12), cos, sin)
    with pytest.raises(ValueError, match="fixed cos/sin"):
        rotary_qkv_(torch.zeros(1, 4, 3, 1, 4), cos.requires_grad_(), sin)
    with pytest.raises(ValueError, match="widen"):
        rotary_qkv_(torch.zeros(1, 4, 3, 1, 4), torch.ones(2, 4, 2), torch.ones(2, 4, 2))
    monkeypatch.delenv("TRITON_INTERPRET")
    with pytest.raises(RuntimeError, match="needs Triton and a CUDA tensor"):
        rotary_qkv_(torch.zeros(1, 4, 3, 1, 4), torch.ones(4, 2), torch.ones(4, 2))
