"""The pair-bias kinds hand attention a heads-first, contiguous mask ``(..., heads, N, N)``: SDPA reads a mask row by
row, and the heads-last layout they had (strides ``(h, 1, N h, h)``) strides across memory on every read (an H200
ran cached SDPA with it 18x slower than with alibi's contiguous mask of the same size)."""
from __future__ import annotations

import pytest
import torch

import ndpe

KINDS = [("relative", {}), ("fire", {}), ("cpb", {}), ("cpb", {"style": "swin"}), ("cpb", {"style": "dynamic"})]


@pytest.mark.parametrize("kind,opts", KINDS)
@pytest.mark.parametrize("dims,grid", [(1, (7,)), (2, (3, 4))])
def test_masks_are_heads_first_and_contiguous(kind, opts, dims, grid):
    pe = ndpe.make(dims=dims, kind=kind, dim=48, heads=6, **opts)
    for prefix in (0, 1):  # a prefix pads the mask (a new tensor); without one it is the kind's own
        n = prefix + (7 if dims == 1 else 12)
        for bias in (pe(grid, num_prefix=prefix).bias, pe(grid, num_prefix=prefix, dtype=torch.bfloat16).bias):
            assert bias.shape == (6, n, n) and bias.stride() == (n * n, n, 1)
    n = 7 if dims == 1 else 12
    pe.requires_grad_(False)  # frozen: the output is cached, and served again as it was stored
    first = pe(grid)
    assert pe(grid) is first and first.bias.stride() == (n * n, n, 1)
    batched = pe(positions=torch.randint(0, 5, (2, 12, dims)).float()).bias  # per-sample positions
    assert batched.shape == (2, 6, 12, 12) and batched.is_contiguous()
