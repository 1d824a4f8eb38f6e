"""``pope`` (polar positional embedding): SDPA's ``q . k / sqrt(d)`` plus ndpe's logits term equals x-transformers
2.31.10's ``PolarEmbedding`` + ``apply_polar_pos_emb`` logits (its ``learned_bias`` copied, under its scale
``dim_head ** -0.5``) and a per-pair loop of the paper's formula; relative by construction; decodes with a cache."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import ndpe
from tests.conftest import assert_tells_apart

xt = pytest.importorskip("x_transformers.x_transformers")


def full_logits(pe, q, k, **call):
    """What attention adds up: SDPA's scaled q.k and the kind's term."""
    return q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5 + pe(**call).logits(q, k)


def with_bias(heads=3, d=8):
    torch.manual_seed(0)
    peer = xt.PolarEmbedding(d, heads)
    pe = ndpe.make(dims=1, kind="pope", dim=heads * d, heads=heads)
    with torch.no_grad():
        peer.learned_bias.uniform_(-7.0, 0.5)  # some outside [-2 pi, 0]: both clamp
        pe.learned_bias.copy_(peer.learned_bias)
    return peer, pe


@pytest.mark.parametrize("n", [1, 7, 33])
def test_equals_x_transformers(n):
    peer, pe = with_bias()
    q, k = torch.randn(2, 2, 3, n, 8).unbind(0)
    freqs, bias = peer(torch.arange(n))
    ref = xt.apply_polar_pos_emb(q, freqs) @ xt.apply_polar_pos_emb(k, freqs + bias).transpose(-1, -2) * 8 ** -0.5
    other = pe.replace()
    with torch.no_grad():
        other.learned_bias.zero_()  # the wrong option: no learned phase bias
    assert_tells_apart(full_logits(pe, q, k, grid_shape=(n,)), full_logits(other, q, k, grid_shape=(n,)), ref,
                       rtol=1e-4, atol=1e-4)


def test_equals_the_per_pair_formula():
    _, pe = with_bias(heads=2, d=6)
    q, k = torch.randn(2, 1, 2, 5, 6).unbind(0)
    got = full_logits(pe, q, k, grid_shape=(5,))[0]
    b = pe.learned_bias.detach().clamp(-2 * math.pi, 0)[:, 0]  # (heads, d)
    f = 10000.0 ** (-torch.arange(6.0) / 6)
    for h in range(2):
        for i in range(5):
            for j in range(5):
                want = (F.softplus(q[0, h, i]) * F.softplus(k[0, h, j]) * torch.cos((i - j) * f - b[h])).sum() / 6 ** 0.5
                torch.testing.assert_close(got[h, i, j], want, rtol=1e-4, atol=1e-5)


def test_depends_on_the_offset_only_and_not_on_content_phase():
    """Shifting every position leaves the logits; the content only scales each channel (no phase from content)."""
    _, pe = with_bias()
    q, k = torch.randn(2, 1, 3, 6, 8).unbind(0)
    a = full_logits(pe, q, k, positions=torch.arange(6.0)[:, None])
    b = full_logits(pe, q, k, positions=torch.arange(6.0)[:, None] + 37)
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


def test_decoding_rows_equal_the_full_sequence():
    _, pe = with_bias()
    pe.eval()
    q, k = torch.randn(2, 1, 3, 9, 8).unbind(0)
    full = full_logits(pe, q, k, grid_shape=(9,))
    step = q[..., 6:, :] @ k.transpose(-1, -2) * 8 ** -0.5 + pe((3,), past=6).logits(q[..., 6:, :], k)
    torch.testing.assert_close(step, full[..., 6:, :], rtol=1e-4, atol=1e-4)


def test_bias_trains_within_its_clamp():
    _, pe = with_bias()
    q, k = torch.randn(2, 1, 3, 5, 8).unbind(0)
    pe((5,)).logits(q, k).sum().backward()
    grad = pe.learned_bias.grad
    inside = (pe.learned_bias > -2 * math.pi) & (pe.learned_bias < 0)
    assert grad is not None and (grad[~inside.expand_as(grad)] == 0).all() and grad[inside.expand_as(grad)].abs().sum() > 0


def test_refusals():
    with pytest.raises(ValueError, match="base must be"):
        ndpe.make(dims=1, kind="pope", dim=32, heads=4, base=1.0)
    with pytest.raises(TypeError, match="bias_uniform_init"):
        ndpe.make(dims=1, kind="pope", dim=32, heads=4, bias_uniform_init=1)
    pe = ndpe.make(dims=1, kind="pope", dim=32, heads=4)
    with pytest.raises(ValueError, match="encoded for 5 queries"):
        pe((5,)).logits(torch.randn(1, 4, 6, 8), torch.randn(1, 4, 6, 8))
