"""``erpe``: eRPE pinned against ConvTran's attention (ported below), the term after the softmax through the contract
(``PosOut.prob_bias``, stage ``"probs"``), and what attention does with it (packing, causal masks, decoding, flex)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

import ndpe
from conftest import assert_tells_apart
from ndpe.attention import attend
from test_tape import ConvTranTAPE

DIM, HEADS, L = 32, 4, 12


class ConvTranAttentionRelScl(nn.Module):
    """ConvTran's eRPE attention, ported from github.com/Navidfoumani/ConvTran, ``Models/Attention.py`` (class
    ``Attention_Rel_Scl``, commit 148afb6), unchanged (its unused dropout left out; ``indexing="ij"`` spelt out, as
    torch's default)."""

    def __init__(self, emb_size, num_heads, seq_len):
        super().__init__()
        self.seq_len = seq_len
        self.num_heads = num_heads
        self.scale = emb_size ** -0.5
        self.key = nn.Linear(emb_size, emb_size, bias=False)
        self.value = nn.Linear(emb_size, emb_size, bias=False)
        self.query = nn.Linear(emb_size, emb_size, bias=False)

        self.relative_bias_table = nn.Parameter(torch.zeros((2 * self.seq_len - 1), num_heads))
        coords = torch.meshgrid((torch.arange(1), torch.arange(self.seq_len)), indexing="ij")
        coords = torch.flatten(torch.stack(coords), 1)
        relative_coords = coords[:, :, None] - coords[:, None, :]
        relative_coords[1] += self.seq_len - 1
        relative_coords = rearrange(relative_coords, 'c h w -> h w c')
        relative_index = relative_coords.sum(-1).flatten().unsqueeze(1)
        self.register_buffer("relative_index", relative_index)
        self.to_out = nn.LayerNorm(emb_size)

    def forward(self, x):
        batch_size, seq_len, _ = x.shape
        k = self.key(x).reshape(batch_size, seq_len, self.num_heads, -1).permute(0, 2, 3, 1)
        v = self.value(x).reshape(batch_size, seq_len, self.num_heads, -1).transpose(1, 2)
        q = self.query(x).reshape(batch_size, seq_len, self.num_heads, -1).transpose(1, 2)
        attn = torch.matmul(q, k) * self.scale
        attn = nn.functional.softmax(attn, dim=-1)
        relative_bias = self.relative_bias_table.gather(0, self.relative_index.repeat(1, self.num_heads))
        relative_bias = rearrange(relative_bias, '(h w) c -> 1 c h w', h=1 * self.seq_len, w=1 * self.seq_len)
        attn = attn + relative_bias
        out = torch.matmul(attn, v)
        out = out.transpose(1, 2)
        out = out.reshape(batch_size, seq_len, -1)
        out = self.to_out(out)
        return out


def models(seed: int = 0):
    """ConvTran's attention with a random table (std 0.1: the size of the probabilities, 1 / 12) and ndpe's erpe with
    the same table."""
    torch.manual_seed(seed)
    ref = ConvTranAttentionRelScl(DIM, HEADS, L)
    with torch.no_grad():
        ref.relative_bias_table.normal_(std=0.1)
    pe = ndpe.make(dims=1, kind="erpe", dim=DIM, heads=HEADS, length=L)
    with torch.no_grad():
        pe.table.copy_(ref.relative_bias_table)
    return ref, pe


def ndpe_attention_like(ref: ConvTranAttentionRelScl) -> ndpe.Attention:
    """``ndpe.Attention`` with ConvTran's projections (no qkv bias) and an identity output projection."""
    attn = ndpe.Attention(DIM, HEADS, qkv_bias=False)
    with torch.no_grad():
        attn.qkv.weight.copy_(torch.cat([ref.query.weight, ref.key.weight, ref.value.weight]))
        attn.proj.weight.copy_(torch.eye(DIM))
        attn.proj.bias.zero_()
    return attn


def test_equals_convtran_attention():
    """ConvTran's module as it is (its scale ``emb_size ** -0.5``, its LayerNorm) against ``attend`` with erpe's
    PosOut; a table read with the offset's sign flipped, or added before the softmax, misses by far."""
    ref, pe = models()
    x = torch.randn(2, L, DIM)
    q, k, v = (rearrange(lin(x), "b t (h d) -> b h t d", h=HEADS) for lin in (ref.query, ref.key, ref.value))

    def run(pos, before=False):
        if before:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=pos.prob_bias, scale=DIM ** -0.5)
        else:
            out = attend(q, k, v, pos, scale=DIM ** -0.5)
        return ref.to_out(rearrange(out, "b h t d -> b t (h d)"))

    pos = pe((L,))
    with torch.no_grad():
        expected, got = ref(x), run(pos)
        flipped = run(ndpe.PosOut(prob_bias=pos.prob_bias.transpose(-1, -2)))  # table[j - i + L - 1]
        before = run(pos, before=True)
    assert_tells_apart(got, flipped, expected, rtol=1e-5, atol=1e-5)
    assert_tells_apart(got, before, expected, rtol=1e-5, atol=1e-5)


def test_ndpe_attention_applies_it_as_convtran():
    """``ndpe.Attention`` (head_dim ** -0.5, ConvTran's scale set to it) with the PosOut alone: no kind-specific code."""
    ref, pe = models(1)
    ref.scale, ref.to_out = (DIM // HEADS) ** -0.5, nn.Identity()
    attn = ndpe_attention_like(ref)
    x = torch.randn(3, L, DIM)
    with torch.no_grad():
        assert_tells_apart(attn(x, pe((L,))), attn(x, None), ref(x), rtol=1e-5, atol=1e-5)


def test_convtran_encoder_attention_with_tape_and_erpe():
    """ConvTran's pair (tAPE on the tokens, eRPE in attention) is ``ndpe.Combine(tape, erpe)``: one PosOut."""
    ref, erpe = models(2)
    ref.scale, ref.to_out = (DIM // HEADS) ** -0.5, nn.Identity()
    attn = ndpe_attention_like(ref)
    both = ndpe.Combine(ndpe.make(dims=1, kind="tape", dim=DIM, heads=HEADS), erpe)
    x = torch.randn(2, L, DIM)
    with torch.no_grad():
        pos = both((L,))
        torch.testing.assert_close(attn(ndpe.apply_tokens(x, pos), pos), ref(ConvTranTAPE(DIM, max_len=L)(x)),
                                   rtol=1e-5, atol=1e-5)


def test_table_rows_offsets_and_clipping():
    """``prob_bias[h, i, j] = table[clamp(i - j, -(L-1), L-1) + L - 1, h]``; prefix rows and columns 0."""
    _, pe = models()
    n = 2 * L
    got = pe((n,), num_prefix=2).prob_bias
    assert got.shape == (HEADS, n + 2, n + 2)
    assert (got[:, :2] == 0).all() and (got[:, :, :2] == 0).all()
    for i in range(n):
        for j in range(n):
            row = max(-(L - 1), min(L - 1, i - j)) + L - 1
            torch.testing.assert_close(got[:, 2 + i, 2 + j], pe.table[row])


def test_the_explicit_path_equals_fused_sdpa_when_the_term_is_zero():
    """``attend`` with a zero ``prob_bias`` takes the explicit softmax and still equals SDPA: scale, causal, float and
    boolean masks, non-square (decoding) shapes; without such a field it is SDPA itself."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, HEADS, 6, 8, generator=g) for _ in range(3))
    zero = ndpe.PosOut(prob_bias=torch.zeros(HEADS, 6, 6))
    float_mask = torch.randn(1, HEADS, 6, 6, generator=g)
    bool_mask = torch.rand(6, 6, generator=g) > 0.3
    bool_mask.fill_diagonal_(True)
    for kw in ({}, {"scale": 0.3}, {"is_causal": True}, {"attn_mask": float_mask}, {"attn_mask": bool_mask}):
        torch.testing.assert_close(attend(q, k, v, zero, **kw), F.scaled_dot_product_attention(q, k, v, **kw))
        assert torch.equal(attend(q, k, v, None, **kw), F.scaled_dot_product_attention(q, k, v, **kw))
    rect = ndpe.PosOut(prob_bias=torch.zeros(HEADS, 2, 6))  # 2 new queries, 6 keys
    torch.testing.assert_close(attend(q[..., 4:, :], k, v, rect), F.scaled_dot_product_attention(q[..., 4:, :], k, v))


def test_causal_attention_never_reads_later_tokens():
    """The mask hides later keys from the term too: a causal model's outputs ignore every later token."""
    _, pe = models()
    torch.manual_seed(0)
    attn = ndpe.Attention(DIM, HEADS, causal=True)
    x = torch.randn(1, L, DIM)
    changed = x.clone()
    changed[:, 7:] = torch.randn(1, L - 7, DIM)
    with torch.no_grad():
        a, b = attn(x, pe((L,))), attn(changed, pe((L,)))
    torch.testing.assert_close(a[:, :7], b[:, :7])


def test_decoding_with_a_kv_cache_equals_the_full_sequence():
    _, pe = models()
    pe.eval()
    torch.manual_seed(0)
    attn = ndpe.Attention(DIM, HEADS, causal=True)
    x = torch.randn(1, 1 + L, DIM)
    with torch.no_grad():
        whole = attn(x, pe((L,), num_prefix=1))
        cache = ndpe.KVCache()
        first = attn(x[:, :8], pe((7,), num_prefix=1), cache)
        step = pe((5,), num_prefix=1, past=7)
        last = attn(x[:, 8:], step, cache)
    torch.testing.assert_close(step.prob_bias, pe((L,), num_prefix=1).prob_bias[:, 8:])
    torch.testing.assert_close(torch.cat([first, last], 1), whole, rtol=1e-5, atol=1e-5)


def test_packed_samples_equal_each_alone():
    _, pe = models()
    torch.manual_seed(0)
    attn = ndpe.Attention(DIM, HEADS)
    grids = [(5,), (9,)]
    packed = pe.packed(grids, num_prefix=1)
    x = torch.randn(1, 16, DIM)
    with torch.no_grad():
        together = attn(x, packed)
        torch.testing.assert_close(together[:, :6], attn(x[:, :6], pe(grids[0], num_prefix=1)))
        torch.testing.assert_close(together[:, 6:], attn(x[:, 6:], pe(grids[1], num_prefix=1)))


def test_the_table_learns_through_attention():
    _, pe = models()
    attn = ndpe.Attention(DIM, HEADS)
    attn(torch.randn(2, L, DIM), pe((L,))).square().sum().backward()
    assert pe.table.grad is not None and pe.table.grad.abs().min() > 0


def test_flex_refuses_a_term_after_the_softmax():
    pytest.importorskip("torch.nn.attention.flex_attention")
    from ndpe import flex

    _, pe = models()
    with pytest.raises(ValueError, match="after the softmax") as info:
        flex.score_mod(pe, (L,))
    assert "\n" not in str(info.value)


def test_bad_inputs_raise_one_line():
    with pytest.raises(TypeError, match="length"):
        ndpe.make(dims=1, kind="erpe", dim=DIM, heads=HEADS)
    for bad in (0, 2.5):
        with pytest.raises((TypeError, ValueError), match="length"):
            ndpe.make(dims=1, kind="erpe", dim=DIM, heads=HEADS, length=bad)
    with pytest.raises(ValueError, match="dims"):
        ndpe.make(dims=2, kind="erpe", dim=DIM, heads=HEADS, length=L)
    _, pe = models()
    with pytest.raises(ValueError, match="fractional"):
        pe(positions=torch.tensor([[0.0], [0.5]]))
    attn = ndpe.Attention(DIM, 2)
    with pytest.raises(ValueError, match="heads") as info:  # built for 4 heads, met by 2
        attn(torch.randn(1, L, DIM), pe((L,)))
    assert "\n" not in str(info.value)
