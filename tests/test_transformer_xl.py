"""``transformer-xl``: the paper's four-term logits as a per-pair loop and as the original code's rel-shift,
its sinusoid, bidirectional / causal, decoding, invariance, gapped and batched positions, flex, errors."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import ndpe
from ndpe import flex
from ndpe.kinds.transformer_xl import offset_table, xl_sinusoid


def make(heads=2, head_dim=4, **opts):
    return ndpe.make(dims=1, kind="transformer-xl", dim=heads * head_dim, heads=heads, **opts)


def randomize(pe, std=0.5):
    with torch.no_grad():
        for p in pe.parameters():
            p.normal_(std=std)
    return pe


def naive_sinusoid(o: float, dim: int) -> torch.Tensor:
    """R(o) written out: sin then cos of o / 10000^(2i/dim), i = 0 .. dim/2 - 1."""
    freqs = [1.0 / 10000 ** (2 * i / dim) for i in range(dim // 2)]
    return torch.tensor([math.sin(o * f) for f in freqs] + [math.cos(o * f) for f in freqs])


def paper_logits(q, k, pq, pk, pe, clamp_len=None):
    """Dai et al. eq. (a)+(b)+(c)+(d) per pair, times 1/sqrt(d) as the original code:
    q_i.k_j + q_i.W_R R(i-j) + u.k_j + v.W_R R(i-j), R at the offset p_i - p_j (query minus key)."""
    b, h, nq, d = q.shape
    nk = k.shape[-2]
    out = torch.zeros(b, h, nq, nk)
    w = pe.w_r.detach().double()
    for i in range(nq):
        for j in range(nk):
            o = float(pq[i] - pk[j])
            if clamp_len is not None:
                o = max(-clamp_len, min(clamp_len, o))
            r = naive_sinusoid(o, pe.dim).double()
            for hh in range(h):
                wr = w[hh * d:(hh + 1) * d] @ r  # W_R R(i - j), head hh
                u, v = pe.u[hh].detach().double(), pe.v[hh].detach().double()
                for bb in range(b):
                    qi, kj = q[bb, hh, i].double(), k[bb, hh, j].double()
                    out[bb, hh, i, j] = float(qi @ kj + qi @ wr + u @ kj + v @ wr) / math.sqrt(d)
    return out


def sdpa_logits(pos, q, k, causal=None):
    """What SDPA softmaxes: q.k / sqrt(d) plus the encoding's term."""
    return q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]) + ndpe.attn_bias(pos, q=q, k=k, causal=causal)


@pytest.mark.parametrize("n", [1, 6])
def test_logits_equal_the_papers_four_terms(n):
    torch.manual_seed(0)
    pe = randomize(make())
    q, k = torch.randn(2, 2, n, 4), torch.randn(2, 2, n, 4)
    pos = torch.arange(float(n))
    with torch.no_grad():
        torch.testing.assert_close(sdpa_logits(pe((n,)), q, k), paper_logits(q, k, pos, pos, pe))


def original_rel_shift_scores(q, k, pe):
    """The original code's computation (mem_transformer.py, RelPartialLearnableMultiHeadAttn, no memory):
    pos_seq = klen-1 .. 0, r_head_k = r_net(pos_emb), AC = (q + r_w_bias).k, BD = _rel_shift((q + r_r_bias).r),
    (AC + BD) * scale; layouts [len, bsz, n_head, d_head] as there. Valid on keys j <= i (it is causal)."""
    b, h, n, d = q.shape
    w = q.permute(2, 0, 1, 3)  # [qlen, bsz, n_head, d_head]
    kk = k.permute(2, 0, 1, 3)
    pos_seq = torch.arange(n - 1, -1, -1.0)
    inv_freq = 1 / (10000 ** (torch.arange(0.0, pe.dim, 2.0) / pe.dim))
    sinusoid_inp = torch.outer(pos_seq, inv_freq)
    pos_emb = torch.cat([sinusoid_inp.sin(), sinusoid_inp.cos()], dim=-1)  # [rlen, d_model]
    r_head_k = F.linear(pos_emb, pe.w_r).view(n, h, d)
    ac = torch.einsum("ibnd,jbnd->ijbn", w + pe.u, kk)
    bd = torch.einsum("ibnd,jnd->ijbn", w + pe.v, r_head_k)
    zero_pad = torch.zeros((bd.size(0), 1, *bd.size()[2:]))
    padded = torch.cat([zero_pad, bd], dim=1).view(bd.size(1) + 1, bd.size(0), *bd.size()[2:])
    bd = padded[1:].view_as(bd)
    return ((ac + bd) / math.sqrt(d)).permute(2, 3, 0, 1)  # (B, H, i, j)


def test_causal_logits_equal_the_original_codes_rel_shift():
    torch.manual_seed(1)
    pe = randomize(make(heads=3, head_dim=4))
    q, k = torch.randn(2, 3, 9, 4), torch.randn(2, 3, 9, 4)
    lower = torch.ones(9, 9, dtype=torch.bool).tril()
    with torch.no_grad():
        ours = sdpa_logits(pe((9,)), q, k)
        torch.testing.assert_close(ours[..., lower], original_rel_shift_scores(q, k, pe)[..., lower])


def test_sinusoid_is_transformer_xls_positional_embedding():
    offsets = torch.arange(-5.0, 9.0)
    expected = torch.stack([naive_sinusoid(float(o), 12) for o in offsets])
    torch.testing.assert_close(xl_sinusoid(offsets, 12), expected)


def test_causal_is_bidirectional_on_visible_keys_and_zero_after():
    torch.manual_seed(2)
    bi = randomize(make())
    causal = make(causal=True)
    causal.load_state_dict(bi.state_dict())
    q, k = torch.randn(2, 2, 7, 4), torch.randn(2, 2, 7, 4)
    lower = torch.ones(7, 7, dtype=torch.bool).tril()
    with torch.no_grad():
        a, b = bi((7,)).logits(q, k), causal((7,)).logits(q, k)
    torch.testing.assert_close(b[..., lower], a[..., lower])
    assert (b[..., ~lower] == 0).all() and (a[..., ~lower] != 0).all()
    assert causal((7,)).logits.causal_only and not bi((7,)).logits.causal_only
    with pytest.raises(ValueError, match="causal attention only"):
        ndpe.Attention(8, heads=2)(torch.randn(1, 7, 8), causal((7,)))


def test_translation_invariant():
    """(b) + (d) depend on i - j alone: shifted positions give the same term, every diagonal minus u.k is constant."""
    torch.manual_seed(3)
    pe = randomize(make())
    q, k = torch.randn(1, 2, 8, 4), torch.randn(1, 2, 8, 4)
    with torch.no_grad():
        term = pe((8,)).logits(q, k)
        torch.testing.assert_close(pe(positions=pe.coords((8,)) + 37.0).logits(q, k), term)
        q1 = q[:, :, :1].expand_as(q)  # one query repeated: q.W_R R + v.W_R R depends on the offset only
        rel = pe((8,)).logits(q1, torch.zeros_like(k))[0]
    for off in range(-7, 8):
        diag = rel.diagonal(-off, dim1=-2, dim2=-1)  # entries with i - j = off
        torch.testing.assert_close(diag, diag[:, :1].expand_as(diag))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("past,n", [(1, 1), (6, 1), (4, 3)])
@pytest.mark.parametrize("num_prefix", [0, 1])
def test_decoding_rows_equal_full_sequence(causal, past, n, num_prefix):
    torch.manual_seed(4)
    pe = randomize(make(causal=causal)).eval()
    t = past + n
    q, k = torch.randn(2, 2, num_prefix + t, 4), torch.randn(2, 2, num_prefix + t, 4)
    with torch.no_grad():
        full = pe((t,), num_prefix=num_prefix).logits(q, k)
        step = pe((n,), past=past, num_prefix=num_prefix).logits(q[..., num_prefix + past:, :], k)
    assert step.shape == (2, 2, n, num_prefix + t)
    torch.testing.assert_close(step, full[..., num_prefix + past:, :])


def test_kv_cache_decoding_equals_full_causal_attention():
    torch.manual_seed(5)
    pe = randomize(make(heads=2, head_dim=8, causal=True)).eval()
    attn = ndpe.Attention(16, heads=2, causal=True).eval()
    x = torch.randn(2, 1 + 9, 16)
    with torch.no_grad():
        full = attn(x, pe((9,), num_prefix=1))
        cache = ndpe.KVCache()
        outs = [attn(x[:, :5], pe((4,), num_prefix=1), cache)]
        for a, b in [(5, 7), (7, 8), (8, 10)]:
            outs.append(attn(x[:, a:b], pe((b - a,), past=cache.length - 1, num_prefix=1), cache))
    torch.testing.assert_close(torch.cat(outs, dim=1), full, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("positions", [[0, 2, 3, 9, 10], [4, 3, 2, 1, 0], [0, 100, 1, 7, 7]])
def test_any_integer_positions_equal_the_loop(positions):
    """Gapped, reversed or repeated positions (the eager unique-offset path, or the range path for a permutation)."""
    torch.manual_seed(6)
    pe = randomize(make())
    p = torch.tensor(positions, dtype=torch.float32)
    q, k = torch.randn(1, 2, 5, 4), torch.randn(1, 2, 5, 4)
    with torch.no_grad():
        torch.testing.assert_close(sdpa_logits(pe(positions=p[:, None]), q, k), paper_logits(q, k, p, p, pe))


def test_batched_positions_pair_with_the_batch():
    torch.manual_seed(7)
    pe = randomize(make())
    a, b = torch.arange(6.0), torch.tensor([0.0, 1, 5, 6, 7, 20])  # contiguous and gapped
    q, k = torch.randn(2, 2, 6, 4), torch.randn(2, 2, 6, 4)
    with torch.no_grad():
        out = pe(positions=torch.stack([a, b])[..., None]).logits(q, k)
        torch.testing.assert_close(out[:1], pe(positions=a[:, None]).logits(q[:1], k[:1]))
        torch.testing.assert_close(out[1:], pe(positions=b[:, None]).logits(q[1:], k[1:]))
        out = pe(positions=torch.stack([a, a + 3])[..., None]).logits(q, k)  # range path, one offset base per sample
        torch.testing.assert_close(out[1:], pe(positions=a[:, None] + 3).logits(q[1:], k[1:]))


def test_clamp_len_equals_the_loop():
    torch.manual_seed(8)
    pe = randomize(make(clamp_len=2))
    q, k = torch.randn(1, 2, 6, 4), torch.randn(1, 2, 6, 4)
    pos = torch.arange(6.0)
    with torch.no_grad():
        torch.testing.assert_close(sdpa_logits(pe((6,)), q, k), paper_logits(q, k, pos, pos, pe, clamp_len=2))


def test_grid_projects_2n_minus_1_offsets():
    table, index = offset_table(torch.arange(5.0), torch.arange(5.0))
    assert table.tolist() == [float(o) for o in range(-4, 5)]
    assert index.shape == (5, 5) and index[4, 0] == 8 and index[0, 4] == 0
    table, index = offset_table(torch.tensor([0.0, 10.0]), torch.tensor([0.0, 10.0]))  # a gap: distinct offsets
    assert table.tolist() == [-10.0, 0.0, 10.0] and index.tolist() == [[1, 0], [2, 1]]


@pytest.mark.skipif(not flex.flex_available()[0], reason="no flex_attention")
@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
@pytest.mark.parametrize("causal", [False, True])
def test_flex_equals_materialized(causal):
    torch.manual_seed(9)
    pe = randomize(make(heads=3, head_dim=8, causal=causal)).eval()
    q, k, v = (torch.randn(2, 3, 2 + 7, 8) for _ in range(3))
    with torch.no_grad():
        out = flex.attention(q, k, v, pe, (7,), num_prefix=2, causal=causal, compiled=False)
        mask = ndpe.attn_bias(pe((7,), num_prefix=2), q=q, k=k, causal=causal)
        if causal:
            mask = mask + ndpe.causal_mask(9)
        ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


def test_gradients_reach_w_r_u_v():
    pe = make()
    q, k = torch.randn(2, 2, 6, 4), torch.randn(2, 2, 6, 4)
    pe((5,), num_prefix=1).logits(q, k).sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in (pe.w_r, pe.u, pe.v))


def test_init_is_the_originals_normal_002():
    torch.manual_seed(0)
    pe = make(heads=8, head_dim=32)
    for p in (pe.w_r, pe.u, pe.v):
        assert 0.016 < p.std() < 0.024 and p.mean().abs() < 0.005
    assert pe.w_r.shape == (256, 256) and pe.u.shape == pe.v.shape == (8, 32)


@pytest.mark.skipif(not hasattr(torch, "_assert_async"), reason="no torch._assert_async")
def test_compiled_refuses_gapped_positions():
    torch._dynamo.reset()
    pe = make().eval()
    compiled = torch.compile(lambda p: pe(positions=p), fullgraph=True, dynamic=False)
    q = k = torch.randn(1, 2, 4, 4)
    with torch.no_grad():
        torch.testing.assert_close(compiled(torch.arange(4.0)[:, None] + 2).logits(q, k),
                                   pe(positions=torch.arange(4.0)[:, None]).logits(q, k))
        with pytest.raises(RuntimeError, match="contiguous integer positions"):
            compiled(torch.tensor([[0.0], [1], [2], [9]]))


def test_fractional_positions_and_wrong_shapes_raise():
    pe = make()
    with pytest.raises(ValueError, match="fractional positions"):
        pe(positions=torch.arange(4.0)[:, None] * 0.5)
    with pytest.raises(ValueError, match="encoded for 2 heads of 4 channels, 5 queries and 5 keys"):
        pe((5,)).logits(torch.randn(1, 2, 5, 4), torch.randn(1, 2, 4, 4))
    with pytest.raises(ValueError, match="pass q= and k="):
        pe.score_bias(pe.coords((5,)))


@pytest.mark.parametrize("dims,dim,opts,exc,fragment", [
    (1, 6, {"heads": 2, "causal": "yes"}, TypeError, "causal must be a bool"),
    (1, 6, {"heads": 2, "clamp_len": -1}, ValueError, "clamp_len must be an int >= 0"),
    (1, 6, {"heads": 2, "clamp_len": 2.0}, TypeError, "clamp_len must be an int >= 0"),
    (1, 9, {"heads": 3}, ValueError, "even dim"),
    (2, 8, {"heads": 2}, ValueError, "supports dims"),
    (1, 8, {"heads": 2, "mem_len": 4}, TypeError, "valid options"),
])
def test_bad_options(dims, dim, opts, exc, fragment):
    with pytest.raises(exc, match=fragment):
        ndpe.make(dims=dims, kind="transformer-xl", dim=dim, **opts)
