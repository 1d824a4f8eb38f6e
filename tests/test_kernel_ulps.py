"""Every GPU RoPE kernel against a float64 reference: within 1 ulp of the output dtype, q and k, forward and backward.

``benchmarks/kernel_ulps.py`` measures the error (in ulps of the output dtype at the norm of each rotated pair, the
scale the rotation keeps) for the Triton kernel on q and k views of a qkv buffer and for the in-place packed-qkv
kernel with its autograd backward, in float32, bfloat16 and float16, both pairings, 1D / 2D-grid / per-head /
per-sample tables. On CPU under Triton's interpreter (which rounds float32 -> bfloat16 toward zero: up to 1 ulp);
``cuda``-marked on a GPU (rounding to nearest: up to 0.5 ulp and the float32 math's share).
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("triton")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import kernel_ulps  # noqa: E402

CASES = [(kernel, dtype, pairing, table) for kernel in ("triton", "triton qkv")
         for dtype in kernel_ulps.DTYPES for pairing in ("half", "interleaved")
         for table in ("1d", "2d grid", "per head", "per sample")]


@pytest.mark.parametrize("kernel,dtype,pairing,table", CASES)
def test_within_one_ulp_interpreted(monkeypatch, kernel, dtype, pairing, table):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    row = kernel_ulps.measure(kernel, kernel_ulps.DTYPES[dtype], pairing, table, torch.device("cpu"))
    assert row["fwd_ulps"] <= 1.0 and row["bwd_ulps"] <= 1.0, row
    if dtype != "bfloat16":  # rounded to nearest by the interpreter too: one rounding of the exact rotation
        assert row["fwd_ulps"] <= 0.5 + 1e-3 and row["bwd_ulps"] <= 0.5 + 1e-3, row


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (the compiled kernels)")
@pytest.mark.parametrize("kernel,dtype,pairing,table", CASES)
def test_within_one_ulp_on_cuda(monkeypatch, kernel, dtype, pairing, table):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    row = kernel_ulps.measure(kernel, kernel_ulps.DTYPES[dtype], pairing, table, torch.device("cuda"))
    assert row["fwd_ulps"] <= 1.0 and row["bwd_ulps"] <= 1.0, row


def test_ulps_counts_the_scale_of_the_pair():
    """One bfloat16 step at a pair of norm 2 (|x| in [2, 4): a step of 2**-6) is 1 ulp, even on the pair's small
    channel; half a step is 0.5 ulp."""
    ref = torch.tensor([[2.0, 0.0]], dtype=torch.float64)  # one "half" pair (x1, x2) of norm 2
    for err, want in ((2.0 ** -6, 1.0), (2.0 ** -7, 0.5)):
        out = (ref + torch.tensor([[0.0, err]], dtype=torch.float64)).to(torch.bfloat16)
        assert kernel_ulps.ulps(out, ref, 1, "half") == want
