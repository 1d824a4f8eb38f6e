"""What only a CUDA GPU can check (marked ``cuda``; they skip elsewhere; ``scripts/gpu_check.sh`` runs them):
compiled flex attention for every kind with a score bias against SDPA with the materialized bias, and a bf16
autocast training step of the reference ViT with a finite loss for the kinds a ViT uses. The Triton kernel's
CUDA test is in tests/test_triton.py."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import ndpe
from conftest import KIND_DIMS, build
from ndpe import flex

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

SCORE_KINDS = [(k, d) for k, d in KIND_DIMS if d == 2 and ndpe.registry.kind_class(k).has_score_bias()]


@pytest.mark.parametrize("kind,dims", SCORE_KINDS, ids=[f"{k}-{d}d" for k, d in SCORE_KINDS])
def test_compiled_flex_on_cuda_equals_materialized_bias(kind, dims):
    torch.manual_seed(0)
    pe = build(kind, dims, dim=64, heads=4).cuda().eval()
    grid = (6, 5)
    q, k, v = (torch.randn(2, 4, 1 + 30, 16, device="cuda") for _ in range(3))
    with torch.no_grad():
        out = flex.attention(q, k, v, pe, grid, num_prefix=1)
        ref = F.scaled_dot_product_attention(q, k, v, attn_mask=ndpe.attn_bias(pe(grid, num_prefix=1), q=q, k=k))
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kind", ["none", "rope", "alibi", "rope-mixed", "learned"])
def test_bf16_autocast_training_step(kind):
    from models.vit import ViT
    from train.engine import autocast

    torch.manual_seed(0)
    pe = {"kind": kind, "options": {"grid_shape": (8, 8)} if kind == "learned" else {}}  # 32 px / 4 px patches
    model = ViT(num_classes=10, pe=pe, dim=64, depth=2, heads=4, patch_size=4).cuda().train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    images, labels = torch.randn(8, 3, 32, 32, device="cuda"), torch.randint(0, 10, (8,), device="cuda")
    losses = []
    for _ in range(3):
        with autocast(images.device, True):
            loss = F.cross_entropy(model(images), labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert all(torch.isfinite(torch.tensor(losses))) and losses[-1] < losses[0]
