"""Precision of rotary encodings: positions and angles are never low precision, whatever the input dtype.

Stated bound: with q, k in bf16 or fp16 at any integer position up to 100,000, every rotated
element is within ``2 * eps * max|q|`` of the float64 rotation of the same (rounded) input,
``eps = torch.finfo(dtype).eps`` (bf16 2**-7, fp16 2**-10): the output dtype's own rounding,
independent of the position. Building positions in the input dtype (bf16 turns 99,999 into
99,840) breaks the bound by orders of magnitude: ``test_positions_in_low_precision_would_fail``.
"""
from __future__ import annotations

import pytest
import torch
from rotary_embedding_torch import RotaryEmbedding

import ndpe

POSITIONS = torch.tensor([0, 1, 2, 255, 256, 257, 4097, 65537, 99_998, 99_999, 100_000], dtype=torch.float32)
HEAD_DIM = 32


def reference_rotation(q: torch.Tensor, positions: torch.Tensor, theta: float = 10000.0) -> torch.Tensor:
    """Half-pairing RoPE of ``q`` ``(..., N, HEAD_DIM)`` entirely in float64."""
    q = q.double()
    freq = theta ** (-torch.arange(0, HEAD_DIM, 2, dtype=torch.float64) / HEAD_DIM)
    angle = positions.double()[:, None] * freq
    x1, x2 = q[..., : HEAD_DIM // 2], q[..., HEAD_DIM // 2:]
    return torch.cat([x1 * angle.cos() - x2 * angle.sin(), x2 * angle.cos() + x1 * angle.sin()], -1)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_qk_within_bound_at_large_positions(dtype):
    torch.manual_seed(0)
    pe = ndpe.make(dims=1, kind="rope", dim=HEAD_DIM, heads=1)
    q = torch.randn(2, 1, len(POSITIONS), HEAD_DIM).to(dtype)
    k = torch.randn(2, 1, len(POSITIONS), HEAD_DIM).to(dtype)
    rq, rk = ndpe.apply_qk(q, k, pe(positions=POSITIONS[:, None], dtype=dtype))
    assert rq.dtype == dtype
    eps = torch.finfo(dtype).eps
    for x, rx in ((q, rq), (k, rk)):
        err = (rx.double() - reference_rotation(x, POSITIONS)).abs()  # (2, 1, N, HEAD_DIM)
        assert err.max() <= 2 * eps * x.double().abs().max()
        per_position = err.amax(dim=(0, 1, 3))
        assert per_position[-3:].max() <= 2 * eps * x.double().abs().max()  # no growth with position
    scores = rq.double() @ rk.double().transpose(-1, -2)
    ref = reference_rotation(q, POSITIONS) @ reference_rotation(k, POSITIONS).transpose(-1, -2)
    assert (scores - ref).abs().max() <= 4 * eps * q.double().norm(dim=-1).max() * k.double().norm(dim=-1).max()


def test_positions_in_low_precision_would_fail():
    """A peer that builds positions in the input dtype (rotary-embedding-torch, bf16) breaks the bound."""
    torch.manual_seed(0)
    idx = POSITIONS.long()
    q = torch.randn(1, 1, 100_001, HEAD_DIM).to(torch.bfloat16)
    pe = ndpe.make(dims=1, kind="rope", dim=HEAD_DIM, pairing="interleaved")  # the peer's pairing
    ref = ndpe.apply_qk(q[..., idx, :].double(), q[..., idx, :].double(), pe(positions=POSITIONS.double()[:, None]))[0]
    ours = ndpe.apply_qk(q, q, pe((100_001,), dtype=torch.bfloat16))[0][..., idx, :]
    peer = RotaryEmbedding(dim=HEAD_DIM, cache_if_possible=False).rotate_queries_or_keys(q)[..., idx, :]
    bound = 2 * torch.finfo(torch.bfloat16).eps * q.double().abs().max()
    assert (ours.double() - ref).abs().max() <= bound
    assert (peer.double() - ref).abs().max() > 10 * bound


def test_default_grid_positions_exact_up_to_100k():
    """The base builds grid coordinates in float32 (exact integers to 2**24); angles in float64."""
    pe = ndpe.make(dims=1, kind="rope", dim=8, heads=1)
    assert pe.coords((100_001,)).dtype == torch.float32
    cos, sin = pe((100_001,), dtype=torch.bfloat16).rot
    freq = 10000.0 ** (-torch.arange(0, 8, 2, dtype=torch.float64) / 8)
    angle = POSITIONS.double()[:, None] * freq
    half_ulp = torch.finfo(torch.bfloat16).eps / 2
    for got, ref in ((cos, angle.cos()), (sin, angle.sin())):
        got = got[0, POSITIONS.long()].double()
        assert ((got - ref).abs() <= half_ulp * ref.abs().clamp(min=2 ** -8) * 1.01 + 1e-12).all()
    # float32 output: float64 angles leave only float32 rounding at position 100,000
    cos32 = pe((100_001,)).rot[0][0, -1].double()
    assert (cos32 - (100_000 * freq).cos()).abs().max() < 1e-7


def test_angles_ignore_autocast():
    pe = ndpe.make(dims=2, kind="rope", dim=16, heads=1)
    positions = torch.tensor([[1000.0, 77777.0], [3.0, 99_999.0]])
    ref = pe(positions=positions).rot[0]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = pe(positions=positions).rot[0]
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, ref, rtol=0, atol=0)


@pytest.mark.parametrize("kind,dims", [("rope", 2), ("rope-mixed", 2)])
def test_cache_keyed_by_dtype_and_device(kind, dims):
    pe = ndpe.make(dims=dims, kind=kind, dim=16, heads=2).eval()
    fresh = pe((3, 4)).rot[0]
    low = pe((3, 4), dtype=torch.bfloat16).rot[0]
    full = pe((3, 4), dtype=torch.float32).rot[0]
    assert low.dtype == torch.bfloat16 and full.dtype == torch.float32
    torch.testing.assert_close(full, fresh, rtol=0, atol=0)  # not an upcast of the bf16 entry
    pe.to("meta")
    assert pe((3, 4)).rot[0].device.type == "meta"
    if kind == "rope":  # the non-persistent frequencies are rebuilt wherever the module lands
        pe.to_empty(device="cpu")
        torch.testing.assert_close(pe((3, 4)).rot[0], fresh, rtol=0, atol=0)


def test_float64_positions_kept():
    pe = ndpe.make(dims=1, kind="rope", dim=4, heads=1)
    p = torch.tensor([[123_456_789.0]], dtype=torch.float64)  # not exact in float32
    sin = pe(positions=p).rot[1][0, 0, 0].item()
    assert sin == pytest.approx(torch.sin(p).item(), abs=1e-6)
