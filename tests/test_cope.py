"""``cope``: equal to x-transformers ``CoPE`` (term and whole attention) and to the paper's per-pair formula;
causal only, decoding, counting property, errors."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import ndpe
from ndpe import flex
from ndpe.kinds.cope import cope_term
from tests.conftest import assert_tells_apart

xt = pytest.importorskip("x_transformers.x_transformers")


def make(heads=3, head_dim=8, **opts):
    return ndpe.make(dims=1, kind="cope", dim=heads * head_dim, heads=heads, **opts)


def randomize(pe, std=0.5):
    with torch.no_grad():
        for p in pe.parameters():
            p.normal_(std=std)
    return pe


def reference_logits(q, k):
    """What x-transformers' Attend hands CoPE: the scaled logits, future keys filled with -finfo.max."""
    sim = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
    future = torch.ones(sim.shape[-2:], dtype=torch.bool).triu(1)
    return sim.masked_fill(future, -torch.finfo(sim.dtype).max)


LOWER = torch.ones(10, 10, dtype=torch.bool).tril()


@pytest.mark.parametrize("max_pos", [2, 4, 16])  # 2 and 4: most counts are clamped; 16: none are
@pytest.mark.parametrize("talking_heads", [False, True])
def test_term_equals_x_transformers(max_pos, talking_heads):
    torch.manual_seed(0)
    ref = xt.CoPE(dim=8, heads=3, max_pos=max_pos, talking_heads=talking_heads)
    pe = randomize(make(max_pos=max_pos, talking_heads=talking_heads))
    with torch.no_grad():
        ref.pos_emb.copy_(pe.table)
        if talking_heads:
            ref.talking_heads.weight.copy_(pe.head_mix[:, :, None, None])
    q, k = torch.randn(2, 3, 10, 8), torch.randn(2, 3, 10, 8)
    ours = pe((10,)).logits(q, k)
    expected = ref(q, reference_logits(q, k))
    missing = torch.zeros_like(ours)  # the wrong option: no table (a zero term)
    assert_tells_apart(ours[..., LOWER], missing[..., LOWER], expected[..., LOWER], rtol=1.3e-6, atol=1e-5)
    assert (ours[..., ~LOWER] == 0).all()  # future keys: 0 here (masked by attention); the reference has q.E[0]


def paper_term(q, k, table):
    """Golovneva et al. eq. 3-5 per pair: p_ij = sum_{t=j}^{i} sigmoid(q_i.k_t / sqrt(d)), clamped,
    e_ij = q_i . (linear interpolation of the table at p_ij)."""
    b, h, n, d = q.shape
    out = torch.zeros(b, h, n, n)
    for bb in range(b):
        for hh in range(h):
            for i in range(n):
                for j in range(i + 1):
                    p = sum(torch.sigmoid(q[bb, hh, i] @ k[bb, hh, t] / math.sqrt(d)) for t in range(j, i + 1))
                    p = min(float(p), table.shape[0] - 1)
                    lo, frac = math.floor(p), p - math.floor(p)
                    emb = table[lo] * (1 - frac) + table[math.ceil(p)] * frac
                    out[bb, hh, i, j] = q[bb, hh, i] @ emb
    return out


@pytest.mark.parametrize("max_pos", [3, 12])
def test_term_equals_the_papers_per_pair_formula(max_pos):
    torch.manual_seed(1)
    pe = randomize(make(heads=2, head_dim=4, max_pos=max_pos))
    q, k = torch.randn(2, 2, 7, 4) * 2, torch.randn(2, 2, 7, 4)
    with torch.no_grad():
        torch.testing.assert_close(pe((7,)).logits(q, k), paper_term(q, k, pe.table))


def copy_attention(ref, ours):
    """x-transformers Attention (to_q, to_k, to_v, to_out without biases) -> ndpe.Attention (qkv, proj)."""
    with torch.no_grad():
        ours.qkv.weight.copy_(torch.cat([ref.to_q.weight, ref.to_k.weight, ref.to_v.weight]))
        ours.proj.weight.copy_(ref.to_out.weight)
        ours.proj.bias.zero_()


@pytest.mark.parametrize("talking_heads", [False, True])
def test_whole_attention_equals_x_transformers(talking_heads):
    torch.manual_seed(2)
    ref = xt.Attention(dim=32, heads=2, dim_head=16, causal=True, use_cope=True, cope_max_pos=6,
                       cope_talking_heads=talking_heads).eval()
    pe = randomize(make(heads=2, head_dim=16, max_pos=6, talking_heads=talking_heads))
    attn = ndpe.Attention(32, heads=2, qkv_bias=False, causal=True).eval()
    copy_attention(ref, attn)
    with torch.no_grad():
        ref.attend.cope.pos_emb.copy_(pe.table)
        if talking_heads:
            ref.attend.cope.talking_heads.weight.copy_(pe.head_mix[:, :, None, None])
        x = torch.randn(2, 12, 32)
        # the term matters: the same attention without it (a missing table) is > 100 x the tolerance away
        assert_tells_apart(attn(x, pe((12,))), attn(x, None), ref(x), rtol=1e-5, atol=1e-5)


def test_term_of_a_pair_depends_only_on_the_tokens_between():
    """p_ij counts keys j..i: dropping the first tokens leaves every later (query, key) term unchanged."""
    torch.manual_seed(3)
    pe = randomize(make())
    q, k = torch.randn(1, 3, 9, 8), torch.randn(1, 3, 9, 8)
    with torch.no_grad():
        full = pe((9,)).logits(q, k)
        tail = pe((6,)).logits(q[..., 3:, :], k[..., 3:, :])
    torch.testing.assert_close(tail, full[..., 3:, 3:])


def test_counts_follow_the_gates():
    """Keys whose gates are ~0 are not counted: a query that gates out every key but itself sees position
    ~1 for itself and ~1 for every earlier key (interpolated halfway past E[0] only by its own gate)."""
    pe = make(heads=1, head_dim=2, max_pos=4)
    with torch.no_grad():
        pe.table.copy_(torch.tensor([[0.0, 0.0], [1.0, 0.0], [2.0, 0.0], [3.0, 0.0]]))
    q = torch.tensor([[[[0.0, 0.0], [0.0, 0.0], [40.0, 0.0]]]])  # (1, 1, 3, 2)
    k = torch.tensor([[[[-1.0, 0.0], [-1.0, 0.0], [1.0, 0.0]]]])  # the last query gates keys 0, 1 out
    term = pe((3,)).logits(q, k)[0, 0, 2]
    torch.testing.assert_close(term, torch.full((3,), 40.0), atol=1e-4, rtol=0)  # q . E[1] for all three


@pytest.mark.parametrize("past,n", [(1, 1), (5, 1), (4, 3)])
@pytest.mark.parametrize("num_prefix", [0, 2])
def test_decoding_rows_equal_full_sequence(past, n, num_prefix):
    torch.manual_seed(4)
    pe = randomize(make(max_pos=5)).eval()
    t = past + n
    q, k = torch.randn(2, 3, num_prefix + t, 8), torch.randn(2, 3, num_prefix + t, 8)
    with torch.no_grad():
        full = pe((t,), num_prefix=num_prefix).logits(q, k)
        step = pe((n,), past=past, num_prefix=num_prefix).logits(q[..., num_prefix + past:, :], k)
    assert step.shape == (2, 3, n, num_prefix + t)
    torch.testing.assert_close(step, full[..., num_prefix + past:, :])


def test_kv_cache_decoding_equals_full_causal_attention():
    torch.manual_seed(5)
    pe = randomize(make(heads=2, head_dim=8, max_pos=6)).eval()
    attn = ndpe.Attention(16, heads=2, causal=True).eval()
    x = torch.randn(2, 1 + 9, 16)
    with torch.no_grad():
        full = attn(x, pe((9,), num_prefix=1))
        cache = ndpe.KVCache()
        outs = [attn(x[:, :5], pe((4,), num_prefix=1), cache)]  # prefix + 4 tokens, then 2, 1, 1, 1
        for a, b in [(5, 7), (7, 8), (8, 9), (9, 10)]:
            outs.append(attn(x[:, a:b], pe((b - a,), past=cache.length - 1, num_prefix=1), cache))
    torch.testing.assert_close(torch.cat(outs, dim=1), full, rtol=1e-5, atol=1e-5)


def test_non_causal_use_raises():
    pe = make()
    assert type(pe).causal_only  # the class says so too (benchmarks pick causal tasks for it)
    pos = pe((5,))
    q = k = torch.randn(1, 3, 5, 8)
    with pytest.raises(ValueError, match="causal attention only"):
        ndpe.attn_bias(pos, q=q, k=k, causal=False)
    with pytest.raises(ValueError, match="causal attention only"):
        ndpe.Attention(24, heads=3)(torch.randn(1, 5, 24), pos)
    with pytest.raises(ValueError, match="depend on the queries and keys"):
        ndpe.attn_bias(pos)
    assert ndpe.attn_bias(pos, q=q, k=k, causal=True).shape == (1, 3, 5, 5)


@pytest.mark.skipif(not flex.flex_available()[0], reason="no flex_attention")
@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
def test_flex_equals_materialized():
    """score_bias materializes the term (future keys -inf) and flex with causal=True equals the SDPA path."""
    torch.manual_seed(6)
    pe = randomize(make(max_pos=4)).eval()
    q, k, v = (torch.randn(2, 3, 1 + 8, 8) for _ in range(3))
    with torch.no_grad():
        out = flex.attention(q, k, v, pe, (8,), num_prefix=1, causal=True, compiled=False)
        mask = ndpe.attn_bias(pe((8,), num_prefix=1), q=q, k=k, causal=True) + ndpe.causal_mask(1 + 8)
        ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(not flex.flex_available()[0], reason="no flex_attention")
def test_flex_refuses_bidirectional_use():
    pe = make(max_pos=4).eval()
    q = torch.randn(1, 3, 8, 8)
    with pytest.raises(ValueError, match="causal attention only"), torch.no_grad():
        flex.attention(q, q, q, pe, (8,), causal=False, compiled=False)


def test_gradients_reach_the_table_and_head_mix():
    torch.manual_seed(7)
    pe = randomize(make(talking_heads=True))
    q, k = torch.randn(2, 3, 6, 8), torch.randn(2, 3, 6, 8)
    pos = pe((6,), num_prefix=1)
    pos.logits(torch.cat([q[..., :1, :], q], -2), torch.cat([k[..., :1, :], k], -2)).sum().backward()
    assert pe.table.grad.abs().sum() > 0 and pe.head_mix.grad.abs().sum() > 0


def test_init_is_the_papers():
    """Table zeros (the paper's and the reference's pos_emb): the term starts at 0; talking heads start at the identity."""
    pe = make(talking_heads=True)
    assert (pe.table == 0).all() and pe.table.shape == (16, 8)
    torch.testing.assert_close(pe.head_mix.detach(), torch.eye(3))
    q = k = torch.randn(1, 3, 4, 8)
    assert (pe((4,)).logits(q, k) == 0).all()


def test_explicit_positions_only_order_the_tokens():
    pe = randomize(make())
    q, k = torch.randn(1, 3, 5, 8), torch.randn(1, 3, 5, 8)
    with torch.no_grad():
        a = pe((5,)).logits(q, k)
        b = pe(positions=torch.tensor([[0.0], [2], [3], [7], [8]])).logits(q, k)
    torch.testing.assert_close(a, b)
    with pytest.raises(ValueError, match="must increase along the sequence, but token 2 is at 1.0 after 2.0"):
        pe(positions=torch.tensor([[0.0], [2], [1]]))


def test_wrong_q_k_lengths_raise():
    pos = make()((5,))
    with pytest.raises(ValueError, match="encoded for 5 queries and 5 keys"):
        pos.logits(torch.randn(1, 3, 5, 8), torch.randn(1, 3, 6, 8))


@pytest.mark.parametrize("dims,opts,exc,fragment", [
    (1, {"max_pos": 0}, ValueError, "max_pos must be a positive int"),
    (1, {"max_pos": 2.5}, TypeError, "max_pos must be a positive int"),
    (1, {"talking_heads": "yes"}, TypeError, "talking_heads must be a bool"),
    (1, {"soft_onehot": True}, TypeError, "valid options"),
    (2, {}, ValueError, "supports dims"),
])
def test_bad_options(dims, opts, exc, fragment):
    with pytest.raises(exc, match=fragment):
        ndpe.make(dims=dims, kind="cope", dim=24, heads=3, **opts)


def test_cope_term_helper_zero_outside_visible():
    q = k = torch.randn(1, 1, 3, 4)
    table = torch.randn(3, 4)
    visible = torch.tensor([[True, False, False], [True, True, False], [False, True, True]])
    out = cope_term(q, k, table, visible)
    assert (out[0, 0][~visible] == 0).all() and (out[0, 0][visible] != 0).all()
