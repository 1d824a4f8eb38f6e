"""``dd-alibi-row`` (per-row data-dependent ALiBi): equal to x-transformers 2.31.10's ``PerRowDataDependentAlibi`` with
its weights copied (default and non-default ``dim_head`` / ``post_log_scale``), to a per-pair loop of its formula, and
inside ``ndpe.Attention`` to attention with that bias."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import ndpe
from ndpe.kinds.dd_alibi_row import row_forget_bias
from tests.conftest import assert_attention_adds_the_term, assert_tells_apart

x_transformers = pytest.importorskip("x_transformers.x_transformers")


def peer_and_ours(dim=32, heads=4, **options):
    torch.manual_seed(0)
    peer = x_transformers.PerRowDataDependentAlibi(dim, heads, **options)
    pe = ndpe.make(dims=1, kind="dd-alibi-row", dim=dim, heads=heads, **options)
    with torch.no_grad():
        peer.to_forget_gates[0].weight.mul_(4.0)  # larger gate logits: gates from near 0 to near 1
        pe.to_gates.weight.copy_(peer.to_forget_gates[0].weight)
    return peer, pe


def term(pe, x, num_prefix=0):
    n = x.shape[1] - num_prefix
    q = k = torch.zeros(x.shape[0], pe.heads, x.shape[1], pe.head_dim)
    return pe((n,), num_prefix=num_prefix).logits(q, k, x)


@pytest.mark.parametrize("options", [{}, {"dim_head": 4, "post_log_scale": 0.5}])
def test_equals_x_transformers(options):
    peer, pe = peer_and_ours(**options)
    x = torch.randn(3, 11, 32)
    with torch.no_grad():
        ref = peer(x)  # (B, heads, N, N), 0 on and above the diagonal
        ours = term(pe, x)
        other = term(pe.replace(post_log_scale=1.5 - options.get("post_log_scale", 1.0)), x)  # the same gates
    assert_tells_apart(ours, other, ref, rtol=1e-5, atol=1e-5)


def test_equals_the_per_pair_formula():
    """bias[h, i, j] = sum_{t=j}^{i-1} log sigmoid(q_i . k_t / sqrt(d)) for j < i, 0 on and above the diagonal."""
    _, pe = peer_and_ours(heads=2, dim_head=3)
    x = torch.randn(1, 6, 32)
    with torch.no_grad():
        got = term(pe, x)[0]
        q, k = pe.to_gates(x)[0].reshape(6, 2, 2, 3).unbind(1)  # (N, heads, dim_head) each
    for h in range(2):
        for i in range(6):
            for j in range(6):
                gates = [F.logsigmoid(q[i, h] @ k[t, h] / 3 ** 0.5) for t in range(j, i)]
                torch.testing.assert_close(got[h, i, j], sum(gates, torch.tensor(0.0)), rtol=1e-5, atol=1e-5)


def test_decay_and_alibi_limit():
    """Bias <= 0, rising towards each query; constant gates exp(-m) give ALiBi's -m (i - j)."""
    _, pe = peer_and_ours()
    with torch.no_grad():
        b = term(pe, torch.randn(2, 9, 32))
    rows = [b[..., i, :i + 1] for i in range(9)]
    assert all((r <= 1e-6).all() and (r.diff(dim=-1) >= -1e-6).all() for r in rows)
    m = 0.3
    i, j = torch.meshgrid(torch.arange(5.0), torch.arange(5.0), indexing="ij")
    torch.testing.assert_close(row_forget_bias(torch.full((5, 5), -m)), (-m * (i - j)).tril())


def test_attention_with_the_term():
    torch.manual_seed(0)
    _, pe = peer_and_ours()
    attn = ndpe.Attention(32, heads=4, causal=True)
    assert_attention_adds_the_term(attn, pe((8,)), torch.randn(2, 8, 32))


def test_prefix_tokens_and_gradients():
    _, pe = peer_and_ours()
    x = torch.randn(2, 2 + 7, 32)
    out = term(pe, x, num_prefix=2)
    assert (out[..., :2, :] == 0).all() and (out[..., :, :2] == 0).all()
    torch.testing.assert_close(out[..., 2:, 2:], term(pe, x[:, 2:]))
    out.sum().backward()
    assert pe.to_gates.weight.grad is not None and pe.to_gates.weight.grad.abs().sum() > 0


def test_refusals():
    pe = ndpe.make(dims=1, kind="dd-alibi-row", dim=32, heads=4)
    q = k = torch.zeros(1, 4, 5, 8)
    with pytest.raises(ValueError, match="cannot decode with a KV cache"):
        pe.eval()((1,), past=4)
    with pytest.raises(ValueError, match="causal attention only"):
        ndpe.attn_bias(pe((5,)), q=q, k=k, x=torch.randn(1, 5, 32), causal=False)
    with pytest.raises(ValueError, match="width dim=32"):
        pe((5,)).logits(q, k, torch.randn(1, 5, 16))
    with pytest.raises(ValueError, match="dim_head"):
        ndpe.make(dims=1, kind="dd-alibi-row", dim=32, heads=4, dim_head=0)
