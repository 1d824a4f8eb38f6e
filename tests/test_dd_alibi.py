"""``dd-alibi`` (data-dependent ALiBi, the Forgetting Transformer): equal to x-transformers 2.31.10's
``DataDependentAlibi`` with its weights copied (causal and bidirectional), to a per-pair loop of the paper's formula
``sum_{t=j+1}^{i} log f_t``, and inside ``ndpe.Attention`` to attention with that bias."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import ndpe
from ndpe.kinds.dd_alibi import forget_bias
from tests.conftest import assert_attention_adds_the_term, assert_tells_apart

x_transformers = pytest.importorskip("x_transformers.x_transformers")


def peer_and_ours(causal: bool, dim=32, heads=4, post_log_scale=1.0):
    torch.manual_seed(0)
    peer = x_transformers.DataDependentAlibi(dim, heads, causal=causal, post_log_scale=post_log_scale)
    pe = ndpe.make(dims=1, kind="dd-alibi", dim=dim, heads=heads, causal=causal, post_log_scale=post_log_scale)
    with torch.no_grad():
        linear = peer.to_forget_gates[0]
        pe.to_gates.weight.copy_(linear.weight)
        pe.to_gates.bias.copy_(linear.bias)
        for p in (pe.to_gates.weight, pe.to_gates.bias):  # away from the 5.0 init, so gates close somewhere
            p.add_(torch.randn_like(p))
        linear.weight.copy_(pe.to_gates.weight)
        linear.bias.copy_(pe.to_gates.bias)
    return peer, pe


def term(pe, x, num_prefix=0):
    n = x.shape[1] - num_prefix
    q = k = torch.zeros(x.shape[0], pe.heads, x.shape[1], pe.head_dim)
    return pe((n,), num_prefix=num_prefix).logits(q, k, x)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("post_log_scale", [1.0, 0.5])
def test_equals_x_transformers(causal, post_log_scale):
    peer, pe = peer_and_ours(causal, post_log_scale=post_log_scale)
    x = torch.randn(3, 11, 32)
    with torch.no_grad():
        ref = peer(x)  # (B, heads, N, N)
        ours = term(pe, x)
        other = term(pe.replace(post_log_scale=1.5 - post_log_scale), x)  # another post_log_scale, the same gates
    if causal:  # the peer returns c_i - c_j everywhere; causal attention masks j > i
        tri = torch.ones(11, 11, dtype=torch.bool).tril()
        ref, ours, other = ref.masked_fill(~tri, 0), ours.masked_fill(~tri, 0), other.masked_fill(~tri, 0)
    assert_tells_apart(ours, other, ref, rtol=1e-5, atol=1e-5)


def test_equals_the_per_pair_formula():
    """bias[h, i, j] = sum_{t=j+1}^{i} log sigmoid(w_h . x_t + b_h) for j <= i; the reverse gates above (bidirectional)."""
    _, pe = peer_and_ours(causal=False, heads=2)
    x = torch.randn(1, 6, 32)
    with torch.no_grad():
        got = term(pe, x)[0]
        gates = F.logsigmoid(pe.to_gates(x))[0]  # (N, 2 * heads): forward gates, then backward
    for h in range(2):
        for i in range(6):
            for j in range(6):
                want = gates[j + 1:i + 1, h].sum() if j <= i else gates[i + 1:j + 1, 2 + h].sum()
                torch.testing.assert_close(got[h, i, j], want, rtol=1e-5, atol=1e-5)


def test_decay_and_alibi_limit():
    """Bias <= 0 and non-increasing with distance back from each query; constant gates exp(-m) give ALiBi's -m (i - j)."""
    _, pe = peer_and_ours(causal=True)
    with torch.no_grad():
        b = term(pe, torch.randn(2, 9, 32))
    rows = [b[..., i, :i + 1] for i in range(9)]
    assert all((r <= 1e-6).all() and (r.diff(dim=-1) >= -1e-6).all() for r in rows)  # rises towards the query
    m = 0.3
    constant = forget_bias(torch.full((1, 5, 1), -m))[0, 0]
    i, j = torch.meshgrid(torch.arange(5.0), torch.arange(5.0), indexing="ij")
    torch.testing.assert_close(constant.tril(), (-m * (i - j)).tril())


def test_attention_reads_each_layers_states():
    """ndpe.Attention hands the term its own input: the same encoding, two inputs, two biases."""
    torch.manual_seed(0)
    pe = ndpe.make(dims=1, kind="dd-alibi", dim=32, heads=4)
    with torch.no_grad():
        pe.to_gates.bias.fill_(-1.0)  # gates ~0.27: strong forgetting
    attn = ndpe.Attention(32, heads=4, causal=True)
    assert_attention_adds_the_term(attn, pe((8,)), torch.randn(2, 8, 32))


def test_prefix_tokens_and_gradients():
    _, pe = peer_and_ours(causal=False)
    x = torch.randn(2, 2 + 7, 32)
    out = term(pe, x, num_prefix=2)
    assert (out[..., :2, :] == 0).all() and (out[..., :, :2] == 0).all()
    torch.testing.assert_close(out[..., 2:, 2:], term(pe, x[:, 2:]))
    out.sum().backward()
    assert pe.to_gates.weight.grad is not None and pe.to_gates.weight.grad.abs().sum() > 0


def test_refusals():
    pe = ndpe.make(dims=1, kind="dd-alibi", dim=32, heads=4)
    q = k = torch.zeros(1, 4, 5, 8)
    with pytest.raises(ValueError, match="read the token states: pass x="):
        pe((5,)).logits(q, k)
    with pytest.raises(ValueError, match="cannot decode with a KV cache"):
        pe.eval()((1,), past=4)
    with pytest.raises(ValueError, match="causal attention only"):
        ndpe.attn_bias(pe((5,)), q=q, k=k, x=torch.randn(1, 5, 32), causal=False)
    with pytest.raises(ValueError, match="width dim=32"):
        pe((5,)).logits(q, k, torch.randn(1, 5, 16))
    with pytest.raises(ValueError, match="post_log_scale"):
        ndpe.make(dims=1, kind="dd-alibi", dim=32, heads=4, post_log_scale=-1.0)
    from transformers import LlamaConfig, LlamaForCausalLM
    model = LlamaForCausalLM(LlamaConfig(vocab_size=11, hidden_size=32, intermediate_size=32, num_hidden_layers=1,
                                         num_attention_heads=4))
    with pytest.raises(ValueError, match="reads the token states"):
        ndpe.hf.use(model, "dd-alibi")
