"""The eager RoPE path's host cost: tables cast and joined once a grid, a handful of kernels a block, checks once.

Counted with ``benchmarks/rope_traffic.OpTraffic`` (ATen ops that move data; views and allocations free; a foreach op
one kernel per tensor), on bfloat16 q and k split from one fused qkv, with a cached encoding's float32 tables: what
a model under autocast hands ``apply_qk`` in every block (``benchmarks/bench_host.py`` times it against HF, timm and
rotary-embedding-torch).
"""
from __future__ import annotations

import gc
import sys
import weakref
from pathlib import Path

import pytest
import torch

import ndpe
from ndpe.functional import rotary_kernel
from ndpe.kernels import eager

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from rope_traffic import OpTraffic  # noqa: E402


def qk(requires_grad=False):
    qkv = torch.randn(2, 16, 3, 2, 32, dtype=torch.bfloat16, requires_grad=requires_grad)
    return qkv, qkv[:, :, 0].transpose(1, 2), qkv[:, :, 1].transpose(1, 2)


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
def test_kernels_per_block(pairing):
    """After the first block: 3 kernels forward (no cast, no join), 4 backward beyond autograd's own."""
    pos = ndpe.make(dims=2, kind="rope", dim=64, heads=2, pairing=pairing)((4, 4))
    with rotary_kernel("eager"):
        _, q, k = qk()
        with torch.no_grad():
            ndpe.apply_qk(q, k, pos)  # the first block casts and joins the tables
            with OpTraffic() as fwd:
                ndpe.apply_qk(q, k, pos)
        assert fwd.ops == 3

        def backward_ops(rotate):
            qkv, q, k = qk(requires_grad=True)
            outs = ndpe.apply_qk(q, k, pos) if rotate else (q, k)
            with OpTraffic() as bwd:
                torch.autograd.backward(outs, [torch.ones_like(o) for o in outs])
            return bwd.ops
        assert backward_ops(True) - backward_ops(False) == 4


def test_tables_kept_weakly_and_refreshed_after_an_edit():
    """The prepared tables live as long as the encoding's cos (no cache holds it) and are rebuilt after an in-place
    change of cos or sin (their version counters)."""
    cos, sin = torch.rand(16, 8), torch.rand(16, 8)
    first = eager.prepare(cos, sin, torch.bfloat16, "half")
    assert eager.prepare(cos, sin, torch.bfloat16, "half") is first
    assert eager.prepare(cos, sin.clone(), torch.bfloat16, "half") is not first  # another sin
    sin.mul_(2)
    fresh = eager.prepare(cos, sin, torch.bfloat16, "half")
    assert fresh is not first and torch.equal(fresh.sin, sin.bfloat16())
    same_dtype = eager.prepare(cos, sin, torch.float32, "half")  # no cast: an alias, not cos itself
    assert same_dtype.cos is not cos and same_dtype.cos.data_ptr() == cos.data_ptr()
    gc.collect()  # garbage of earlier tests in this worker first, so that the count below sees only this cos
    n, cos_ref = len(eager._TABLES), weakref.ref(cos)
    del cos, first, fresh, same_dtype
    gc.collect()
    assert cos_ref() is None and len(eager._TABLES) == n - 1


def test_checks_once_a_forward_still_refuse_a_bad_call():
    """The shape checks are skipped for shapes already checked against this PosOut, not for new ones."""
    pos = ndpe.make(dims=1, kind="rope", dim=64, heads=2)((16,))
    _, q, k = qk()
    ndpe.apply_qk(q, k, pos)
    ndpe.apply_qk(q, k, pos)
    with pytest.raises(ValueError, match="tokens"):
        ndpe.apply_qk(q[:, :, :8], k[:, :, :8], pos)


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
def test_rope_mixed_backward_within_twice_ropes(pairing):
    """rope-mixed in training (``pe(grid)`` with learned frequencies, then ``apply_qk``): its backward beyond autograd's
    own is at most twice rope's 4 kernels: the same inverse rotation of q's and k's gradients, then the angle's
    gradient (2 ops on the stack) and the frequencies' (a sum over the batch and a bmm); no cos / sin gradients."""
    mixed = ndpe.make(dims=2, kind="rope-mixed", dim=64, heads=2, pairing=pairing)

    def backward_ops(rotate):
        qkv, q, k = qk(requires_grad=True)
        outs = ndpe.apply_qk(q, k, mixed((4, 4))) if rotate else (q, k)
        mixed.freqs.grad = None  # as after zero_grad(): no accumulation into an earlier step's gradient
        with OpTraffic() as bwd:
            torch.autograd.backward(outs, [torch.ones_like(o) for o in outs])
        return bwd.ops
    with rotary_kernel("eager"):
        backward_ops(True)  # a first step (its one-time set-up is no cost of later ones)
        ops = backward_ops(True)
        assert mixed.freqs.grad is not None and mixed.freqs.grad.abs().sum() > 0
        assert ops - backward_ops(False) <= 2 * 4
