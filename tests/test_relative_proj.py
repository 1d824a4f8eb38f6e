"""``relative-proj`` (a relative bias mixed per query from a bank of distance curves): equal to x-transformers 2.31.10's
``RelativeProjPositionalBias`` with its weights copied (default and non-default options, decoding with its
``seq_len_k``), to a per-pair loop of its formula, and inside ``ndpe.Attention`` / a KV-cache decode."""
from __future__ import annotations

import pytest
import torch

import ndpe
from tests.conftest import assert_tells_apart

x_transformers = pytest.importorskip("x_transformers.x_transformers")


def peer_and_ours(dim=32, heads=4, **options):
    torch.manual_seed(0)
    peer = x_transformers.RelativeProjPositionalBias(dim, heads, **options)
    pe = ndpe.make(dims=1, kind="relative-proj", dim=dim, heads=heads, **options)
    with torch.no_grad():
        peer.distance_bank.mul_(50.0)  # curves of order 1: a misplaced distance shows well above the tolerance
        copy(peer, pe)
    return peer, pe


def copy(peer, pe):
    with torch.no_grad():
        linear = peer.to_distance_weights[0]
        pe.to_weights.weight.copy_(linear.weight)
        pe.to_weights.bias.copy_(linear.bias)
        pe.distance_bank.copy_(peer.distance_bank[:, :pe.max_dist])


def term(pe, x, num_prefix=0, past=0):
    n = x.shape[1] - num_prefix
    q = torch.zeros(x.shape[0], pe.heads, x.shape[1], pe.head_dim)
    k = torch.zeros(x.shape[0], pe.heads, num_prefix + past + n, pe.head_dim)
    pos = pe((n,), num_prefix=num_prefix, past=past) if past else pe((n,), num_prefix=num_prefix)
    return pos.logits(q, k, x)


@pytest.mark.parametrize("options", [{}, {"num_distance_basis": 4, "max_dist": 6}])
def test_equals_x_transformers(options):
    peer, pe = peer_and_ours(**options)
    x = torch.randn(3, 11, 32)
    wrong = ndpe.make(dims=1, kind="relative-proj", dim=32, heads=4, num_distance_basis=pe.num_distance_basis,
                      max_dist=min(pe.max_dist - 3, 5))  # distances fewer: those keys lose their bias
    copy(peer, wrong)
    with torch.no_grad():
        assert_tells_apart(term(pe, x), term(wrong, x), peer(x), rtol=1e-5, atol=1e-5)


def test_decoding_equals_x_transformers_seq_len_k():
    peer, pe = peer_and_ours(max_dist=6)
    pe.eval()
    x = torch.randn(2, 3, 32)  # 3 new tokens after 7 cached ones
    with torch.no_grad():
        torch.testing.assert_close(term(pe, x, past=7), peer(x, seq_len_k=10), rtol=1e-5, atol=1e-5)


def test_equals_the_per_pair_formula():
    """bias[h, i, j] = (W x_i + b)[h] . bank[:, i - j] for 0 <= i - j < max_dist, else 0."""
    _, pe = peer_and_ours(heads=2, num_distance_basis=3, max_dist=4)
    x = torch.randn(1, 7, 32)
    with torch.no_grad():
        got = term(pe, x)[0]
        weights = pe.to_weights(x)[0].reshape(7, 2, 3)  # (N, heads, basis)
    for h in range(2):
        for i in range(7):
            for j in range(7):
                want = weights[i, h] @ pe.distance_bank[:, i - j] if 0 <= i - j < 4 else torch.tensor(0.0)
                torch.testing.assert_close(got[h, i, j], want, rtol=1e-5, atol=1e-6)


def test_translation_invariant_in_the_positions():
    """Only offsets count: positions shifted together give the same term."""
    _, pe = peer_and_ours(max_dist=5)
    x = torch.randn(2, 6, 32)
    q = k = torch.zeros(2, 4, 6, 8)
    p = torch.arange(6.0)[:, None]
    with torch.no_grad():
        torch.testing.assert_close(pe(positions=p + 1000).logits(q, k, x), pe((6,)).logits(q, k, x))


def test_kv_cache_decoding_equals_the_full_sequence():
    torch.manual_seed(0)
    _, pe = peer_and_ours(max_dist=5)
    pe.eval()
    attn = ndpe.Attention(32, heads=4, causal=True).eval()
    x = torch.randn(2, 9, 32)
    with torch.no_grad():
        full = attn(x, pe((9,)))
        cache = ndpe.KVCache()
        steps = [attn(x[:, :4], pe((4,)), cache)] + [attn(x[:, i:i + 1], pe((1,), past=i), cache) for i in range(4, 9)]
        torch.testing.assert_close(torch.cat(steps, 1), full, rtol=1e-5, atol=1e-5)
        assert (full - attn(x, ndpe.PosOut())).abs().max() > 1e-3


def test_prefix_tokens_and_gradients():
    _, pe = peer_and_ours()
    x = torch.randn(2, 2 + 7, 32)
    out = term(pe, x, num_prefix=2)
    assert (out[..., :2, :] == 0).all() and (out[..., :, :2] == 0).all()
    torch.testing.assert_close(out[..., 2:, 2:], term(pe, x[:, 2:]))
    out.sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in (pe.to_weights.weight, pe.distance_bank))


def test_refusals():
    pe = ndpe.make(dims=1, kind="relative-proj", dim=32, heads=4)
    q = k = torch.zeros(1, 4, 5, 8)
    with pytest.raises(ValueError, match="width dim=32"):
        pe((5,)).logits(q, k, torch.randn(1, 5, 16))
    with pytest.raises(ValueError, match="fractional"):
        pe(positions=torch.tensor([[0.0], [0.5]]))
    with pytest.raises(ValueError, match="max_dist"):
        ndpe.make(dims=1, kind="relative-proj", dim=32, heads=4, max_dist=0)
