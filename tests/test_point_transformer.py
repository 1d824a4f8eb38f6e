"""``point-transformer``: equal to the official code's ``linear_p`` (POSTECH-CVLab/point-transformer at 10d43ab,
``PointTransformerLayer``: Linear, BatchNorm1d in eval, ReLU, Linear, on ``queryandgroup``'s neighbour offsets,
ported) and to the paper's formula ``theta(p_i - p_j)`` per pair; invariant to a shared translation of the points;
its k nearest neighbours are the brute-force ones; decoding exact without neighbours."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import ndpe
from tests.conftest import assert_tells_apart


def make(dims=3, heads=4, **options):
    torch.manual_seed(0)
    pe = ndpe.make(dims=dims, kind="point-transformer", dim=16 * heads, heads=heads, **options)
    with torch.no_grad():  # weights of order 1: every term matters
        for p in pe.parameters():
            p.copy_(torch.randn_like(p))
    return pe


def official_linear_p(heads: int) -> nn.Sequential:
    """The official ``linear_p`` with ``out_planes = heads`` (one bias per head), its batch norm given running
    statistics and an affine map of its own, in eval mode."""
    torch.manual_seed(1)
    linear_p = nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3), nn.ReLU(inplace=True), nn.Linear(3, heads))
    bn = linear_p[1]
    with torch.no_grad():
        bn.running_mean.copy_(torch.randn(3))
        bn.running_var.copy_(torch.rand(3) + 0.5)
        bn.weight.copy_(torch.randn(3))
        bn.bias.copy_(torch.randn(3))
    return linear_p.eval()


def official_bias(linear_p: nn.Sequential, p: torch.Tensor, nsample: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The official layer's ``p_r`` for one cloud ``p`` ``(n, 3)``: ``queryandgroup(nsample, p, p, ..., use_xyz=True)``
    (the ``nsample`` nearest points, the centre itself first, offsets neighbour minus centre) through ``linear_p``
    (its batch norm over the channel axis, as the layer transposes for it). Returns ``(n, nsample, heads)`` and the
    neighbour indices ``(n, nsample)``."""
    idx = torch.cdist(p, p).topk(nsample, dim=-1, largest=False).indices  # pointops.knnquery
    p_r = p[idx] - p[:, None, :]  # grouped_xyz - new_xyz
    for i, layer in enumerate(linear_p):
        p_r = layer(p_r.transpose(1, 2).contiguous()).transpose(1, 2).contiguous() if i == 1 else layer(p_r)
    return p_r, idx


def fold(pe, linear_p: nn.Sequential) -> None:
    """Copy the official weights into ours, the eval-mode batch norm folded into the first linear layer."""
    lin1, bn, _, lin2 = linear_p
    g = bn.weight / (bn.running_var + bn.eps).sqrt()
    with torch.no_grad():
        pe.first.weight.copy_(lin1.weight * g[:, None])
        pe.first.bias.copy_((lin1.bias - bn.running_mean) * g + bn.bias)
        pe.second.weight.copy_(lin2.weight)
        pe.second.bias.copy_(lin2.bias)


def test_equals_the_official_code():
    linear_p = official_linear_p(heads=4)
    pe, wrong = make(offset="j-i", neighbors=16), make(offset="i-j", neighbors=16)  # the code's sign; the paper's
    fold(pe, linear_p)
    fold(wrong, linear_p)
    p = torch.randn(60, 3) * 2
    with torch.no_grad():
        ref, idx = official_bias(linear_p, p, 16)  # (n, nsample, heads)
        rows = torch.arange(60)[:, None]
        ours, other = (m(positions=p).bias.permute(1, 2, 0)[rows, idx] for m in (pe, wrong))
    assert_tells_apart(ours, other, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("options", [{}, {"hidden": 7, "offset": "j-i"}])
def test_equals_the_papers_formula(options):
    """bias[h, i, j] = W2[h] . relu(W1 (p_i - p_j) + b1) + b2[h] (p_j - p_i with offset="j-i")."""
    pe = make(dims=2, heads=3, **options)
    p = torch.randn(9, 2)
    sign = -1.0 if options.get("offset") == "j-i" else 1.0
    with torch.no_grad():
        got = pe(positions=p).bias
        W1, b1, W2, b2 = pe.first.weight, pe.first.bias, pe.second.weight, pe.second.bias
        for i in range(9):
            for j in range(9):
                want = W2 @ torch.relu(W1 @ (sign * (p[i] - p[j])) + b1) + b2
                torch.testing.assert_close(got[:, i, j], want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("neighbors", [None, 5])
def test_invariant_to_a_shared_translation(neighbors):
    pe = make(neighbors=neighbors)
    p = torch.randn(2, 40, 3)  # a batch of two clouds
    shift = torch.tensor([[[30.0, -12.5, 7.0]], [[-3.0, 100.0, 0.25]]])
    with torch.no_grad():
        a, b = pe(positions=p).bias, pe(positions=p + shift).bias
    assert a.shape == (2, 4, 40, 40)
    assert torch.equal(torch.isinf(a), torch.isinf(b))
    torch.testing.assert_close(a.nan_to_num(neginf=0.0), b.nan_to_num(neginf=0.0), rtol=1e-4, atol=1e-4)
    assert (pe(positions=p * 1.5).bias - a).nan_to_num().abs().max() > 0.1  # a scaling is not invariant


def test_nearest_neighbours_are_the_brute_force_ones():
    pe = make(neighbors=6)
    p = torch.randn(50, 3)
    with torch.no_grad():
        kept = torch.isfinite(pe(positions=p).bias)
    assert (kept == kept[:1]).all()  # every head keeps the same keys
    for i in range(50):
        distance = ((p - p[i]) ** 2).sum(-1)
        assert set(kept[0, i].nonzero()[:, 0].tolist()) == set(distance.argsort()[:6].tolist())


def test_gradients_and_decoding():
    pe = make(dims=1)
    pe((7,)).bias.square().sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in pe.parameters())
    pe.eval()
    with torch.no_grad():
        full = pe((9,)).bias
        torch.testing.assert_close(pe((3,), past=6).bias, full[:, 6:, :])
    with pytest.raises(ValueError, match="cannot decode"):
        make(dims=1, neighbors=3).eval()((1,), past=4)


def test_limit_and_refusals():
    pe = make()
    limit, why = pe.position_limit(torch.float16)
    signs = torch.tensor([[1.0, 1.0, 1.0], [-1.0, -1.0, -1.0], [0.5, -1.0, 0.0]])
    assert "float16" in why and torch.isfinite(pe(positions=signs * limit * 0.99, dtype=torch.float16).bias).all()
    with pytest.raises(ValueError, match="past"):
        pe(positions=signs * limit * 1.01, dtype=torch.float16)
    with pytest.raises(ValueError, match="offset must be one of"):
        make(offset="i+j")
    with pytest.raises(ValueError, match="neighbors"):
        make(neighbors=0)
