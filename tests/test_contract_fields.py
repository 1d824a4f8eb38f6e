"""A new ``PosOut`` field, declared in this file alone, flows through every operation of the contract.

``GainOut`` adds ``gain``: a per-token, per-head log-scale of the queries (a temperature per position), declared once
with its role, leading axes, identity (0: no scaling), merge rule (log-gains add) and how it acts (on q in
``apply_qk``). ``GainBias``, a kind written here and not registered, returns it with an ALiBi-like bias. Nothing in
ndpe is edited: prefix padding, the dtype cast, the cache, the pytree (torch.compile), ``merge``, ``pack``,
``stack``, flex attention and KV-cache decoding carry the field from its declaration. Also: a ``PosOut`` is checked
once, where it is built.
"""
from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F
import torch.utils._pytree as pytree
from torch import Tensor

import ndpe
from ndpe.base import Encoding
from ndpe.fields import Field, declare, specs

HEADS, DIM = 2, 16


def scale_queries(q: Tensor, k: Tensor, gain: Tensor) -> tuple[Tensor, Tensor]:
    """``q * exp(gain)``: ``gain`` ``(*, T, 1)`` broadcast over ``(B, heads, T, head_dim)``."""
    return q * gain.exp().to(q.dtype), k


@dataclass(frozen=True)
class GainOut(ndpe.PosOut):
    gain: Tensor | None = declare(Field("token", ("batch", "heads"), merge="sum", acts="scale queries",
                                        stage="qk", act=scale_queries))


class GainBias(Encoding):
    """``bias = -slope[h] |p_i - p_j|`` and ``gain = rate[h] * log1p(p)``: queries sharpen further along."""

    kind = "test-gain-bias"
    takes_key_positions = True

    def __init__(self, *, dims: int = 1, dim: int = DIM, heads: int = HEADS):
        super().__init__(dims=dims, dim=dim, heads=heads)
        self.register_buffer("slopes", 0.5 * torch.arange(1.0, heads + 1), persistent=False)
        self.register_buffer("rates", 0.3 * torch.arange(1.0, heads + 1), persistent=False)

    def encode(self, positions, grid_shape, key_positions=None):
        keys = positions if key_positions is None else key_positions
        distance = (positions[..., :, None, :] - keys[..., None, :, :]).abs().sum(-1)  # (..., N, M)
        gain = self.rates[:, None, None] * positions.sum(-1).log1p()[..., None, :, None]  # (..., heads, N, 1)
        return GainOut(bias=-self.slopes[:, None, None] * distance[..., None, :, :], gain=gain)

    def score_bias(self, coords, *, q=None, k=None):
        return lambda b, h, i, j: -self.slopes[h] * (coords[i] - coords[j]).abs().sum(-1)


def attention(pos: ndpe.PosOut, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    q, k = ndpe.apply_qk(q, k, pos)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=ndpe.attn_bias(pos, q=q, k=k))


def qkv(tokens: int, batch: int = 1, seed: int = 0) -> tuple[Tensor, Tensor, Tensor]:
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(batch, HEADS, tokens, DIM // HEADS, generator=g) for _ in range(3))  # type: ignore


def test_the_declaration_is_the_field():
    name, spec, default = specs(GainOut)[-1]
    assert (name, spec.role, spec.identity, default) == ("gain", "token", 0.0, None)
    assert [n for n, _, _ in specs(GainOut)[:-1]] == [n for n, _, _ in specs(ndpe.PosOut)]


def test_the_field_acts_in_apply_qk_and_attention():
    pos = GainBias()((5,))
    q, k, v = qkv(5)
    gained, same = ndpe.apply_qk(q, k, pos)
    torch.testing.assert_close(gained, q * pos.gain.exp())
    assert torch.equal(same, k)
    x = torch.randn(1, 5, DIM)
    attn = ndpe.Attention(DIM, HEADS)
    assert not torch.allclose(attn(x, pos), attn(x, ndpe.PosOut(bias=pos.bias)))


def test_prefix_padding_and_dtype():
    pe = GainBias()
    plain, out = pe((4,)), pe((4,), num_prefix=2)
    assert isinstance(out, GainOut) and out.gain.shape == (HEADS, 6, 1)
    assert (out.gain[:, :2] == 0).all()  # its identity: prefix queries are not scaled
    torch.testing.assert_close(out.gain[:, 2:], plain.gain)
    assert pe((4,), dtype=torch.bfloat16).gain.dtype == torch.bfloat16
    assert pe((4,), num_prefix=1).to(torch.float16).gain.dtype == torch.float16


def test_the_cache_sees_the_field_changed_in_place():
    pe = GainBias()
    first = pe((4,))
    assert pe((4,)) is first  # a parameter-free kind: cached
    first.gain.add_(1.0)  # a caller's edit: the cached output must not serve it
    again = pe((4,))
    assert again is not first
    torch.testing.assert_close(again.gain, first.gain - 1.0)


def test_pytree_and_compile():
    pos = GainBias()((4,), num_prefix=1)
    leaves, spec = pytree.tree_flatten(pos)
    assert any(t is pos.gain for t in leaves)
    back = pytree.tree_unflatten(leaves, spec)
    assert isinstance(back, GainOut) and torch.equal(back.gain, pos.gain)
    pe = GainBias().eval()
    torch._dynamo.reset()
    compiled = torch.compile(pe, fullgraph=True, dynamic=False)
    with torch.no_grad():
        out = compiled((4,), num_prefix=1)
    assert isinstance(out, GainOut)
    torch.testing.assert_close(out.gain, pos.gain)


def test_merge_sums_gains_and_keeps_the_subclass():
    pe = GainBias()
    learned = ndpe.make(dims=1, kind="sinusoidal", dim=DIM, heads=HEADS)((4,), num_prefix=1)
    one = pe((4,), num_prefix=1)
    merged = ndpe.merge(learned, one, one)
    assert isinstance(merged, GainOut)
    torch.testing.assert_close(merged.gain, 2 * one.gain)
    torch.testing.assert_close(merged.bias, 2 * one.bias)
    assert torch.equal(merged.add, learned.add)


def test_pack_equals_each_sample_alone():
    pe = GainBias()
    grids, p = [(3,), (5,)], 1
    packed = pe.packed(grids, num_prefix=p)
    assert isinstance(packed, GainOut) and packed.gain.shape == (HEADS, 10, 1)
    q, k, v = qkv(10)
    together = attention(packed, q, k, v)
    start = 0
    for grid in grids:
        n = p + grid[0]
        part = slice(start, start + n)
        alone = attention(pe(grid, num_prefix=p), q[..., part, :], k[..., part, :], v[..., part, :])
        torch.testing.assert_close(together[..., part, :], alone)
        start += n


def test_stack_pads_with_the_identity_along_the_batch():
    pe = GainBias()
    outs = [pe((3,), num_prefix=1), pe((5,), num_prefix=1)]
    stacked = ndpe.stack(outs, 7)
    assert isinstance(stacked, GainOut) and stacked.gain.shape == (2, HEADS, 7, 1)
    for b, o in enumerate(outs):
        n = o.num_tokens
        torch.testing.assert_close(stacked.gain[b, :, :n], o.gain)
        assert (stacked.gain[b, :, n:] == 0).all()
    q, k, v = qkv(7, batch=2)
    keep = torch.zeros(2, 1, 7, 7)  # the caller's mask keeps each sample's padding out
    keep[0, ..., 4:], keep[1, ..., 6:] = float("-inf"), float("-inf")
    q2, k2 = ndpe.apply_qk(q, k, stacked)
    out = F.scaled_dot_product_attention(q2, k2, v, attn_mask=ndpe.attn_bias(stacked, q=q2, k=k2) + keep)
    for b, o in enumerate(outs):
        n = o.num_tokens
        alone = attention(o, q[b:b + 1, :, :n], k[b:b + 1, :, :n], v[b:b + 1, :, :n])
        torch.testing.assert_close(out[b:b + 1, :, :n], alone)


def test_flex_attention_with_the_field():
    pytest.importorskip("torch.nn.attention.flex_attention")
    from ndpe import flex

    pe = GainBias()
    pos = pe((6,), num_prefix=1)
    packed, shapes = pe.packed([(2,), (4,)], num_prefix=1), [(2,), (4,)]
    (q, k, v), (pq, pk, pv) = qkv(7), qkv(8)
    with torch.no_grad():
        got = flex.attention(*ndpe.apply_qk(q, k, pos), v, pe, (6,), num_prefix=1, compiled=False)
        apart = flex.packed_attention(*ndpe.apply_qk(pq, pk, packed), pv, pe, shapes, num_prefix=1, compiled=False)
    torch.testing.assert_close(got, attention(pos, q, k, v), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(apart, attention(packed, pq, pk, pv), rtol=1e-5, atol=1e-5)


def test_decoding_with_a_kv_cache_equals_the_full_sequence():
    pe = GainBias().eval()
    full, step = pe((7,), num_prefix=1), pe((3,), num_prefix=1, past=4)
    torch.testing.assert_close(step.gain, full.gain[:, -3:])
    torch.manual_seed(0)
    attn = ndpe.Attention(DIM, HEADS, causal=True)
    x = torch.randn(1, 8, DIM)
    with torch.no_grad():
        whole = attn(x, full)
        cache = ndpe.KVCache()
        first = attn(x[:, :5], pe((4,), num_prefix=1), cache)
        last = attn(x[:, 5:], step, cache)
    torch.testing.assert_close(torch.cat([first, last], 1), whole, rtol=1e-5, atol=1e-5)


def test_every_integration_applies_the_field():
    """The field acts in ``ndpe.timm.use`` and ``ndpe.hf.use`` (cached decoding included) with no edit of either: each
    calls the one apply layer. (HF's attention used to apply a few fields by name and drop the others.)"""
    timm = pytest.importorskip("timm")
    transformers = pytest.importorskip("transformers")
    import ndpe.timm

    ndpe.register("test-gain-bias", dims=(1, 2))(GainBias)
    try:
        torch.manual_seed(0)
        vit = ndpe.timm.use(timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, depth=1,
                                              global_pool="avg", num_classes=3).eval(), "test-gain-bias")
        config = transformers.LlamaConfig(vocab_size=61, hidden_size=DIM, intermediate_size=32, num_hidden_layers=2,
                                          num_attention_heads=HEADS, num_key_value_heads=HEADS)
        llama = ndpe.hf.use(transformers.LlamaForCausalLM(config).eval(), "test-gain-bias")
        image, ids = torch.randn(1, 3, 32, 32), torch.randint(0, 61, (1, 9))
        with torch.no_grad():
            first = llama(ids[:, :5], use_cache=True)
            cache = next(first[name] for name in ("cache", "past_key_values") if name in first)
            step = llama(ids[:, 5:], use_cache=True, **{"cache" if "cache" in first else "past_key_values": cache})
            gained = vit(image), llama(ids).logits
            torch.testing.assert_close(torch.cat([first.logits, step.logits], 1), gained[1], rtol=1e-4, atol=1e-4)
            for model in (vit, llama):
                model.ndpe_pe.rates.zero_()  # no gain: only the bias is left
            plain = vit(image), llama(ids).logits
        for a, b in zip(gained, plain):  # small random models: 4e-4 and more apart, rounding 1e-7
            assert (a - b).abs().max() > 1e-5
    finally:
        ndpe.registry.unregister("test-gain-bias")


rot = (torch.ones(4, 2), torch.zeros(4, 2))


@pytest.mark.parametrize("build,err,match", [
    (lambda: ndpe.PosOut(rot=torch.ones(4, 2)), TypeError, "PosOut.rot must be a tuple of 2 tensors"),
    (lambda: ndpe.PosOut(rot=(torch.ones(4, 2),)), TypeError, "PosOut.rot must be a tuple of 2 tensors"),
    (lambda: ndpe.PosOut(add=torch.ones(4, 8, dtype=torch.long)), ValueError, "PosOut.add must be floating"),
    (lambda: ndpe.PosOut(add=torch.ones(8)), ValueError, "at least 2 dims"),
    (lambda: ndpe.PosOut(rot=(torch.ones(4, 2), torch.zeros(5, 2))), ValueError, "same tokens and channels"),
    (lambda: ndpe.PosOut(add=torch.ones(4, 8), rot=(torch.ones(5, 2),) * 2), ValueError, "covers 5 tokens but"),
    (lambda: ndpe.PosOut(add=torch.ones(4, 8), bias=torch.zeros(3, 3)), ValueError, "covers 3 tokens but"),
    (lambda: ndpe.PosOut(logits=3), TypeError, "callable term"),
    (lambda: ndpe.PosOut(rot=rot, pairing="both"), ValueError, "pairing must be one of"),
    (lambda: ndpe.PosOut(num_prefix=-1), ValueError, "num_prefix must be"),
    (lambda: ndpe.PosOut(rot=rot, rot_k=(torch.ones(9, 2),) * 2), None, ""),  # keys: all of a cache's (hf.use)
])
def test_a_posout_is_checked_where_it_is_built(build, err, match):
    if err is None:
        assert build().rot_k[0].shape[-2] == 9
        return
    with pytest.raises(err, match=match):
        build()


def test_a_field_is_declared_once():
    with pytest.raises(TypeError, match="declare each new PosOut field once"):
        @dataclass(frozen=True)
        class Twice(GainOut):
            gain: Tensor | None = declare(Field("token"))


def test_what_an_integration_cannot_carry_is_read_from_the_table():
    """HF's rotary path (``beyond_rotation``: only the rotation of q and k) and the refusals of HF and flex
    (``state_fields``: a term reading the token states) read the field table, not field names: the field declared
    here counts where it acts."""
    from ndpe.apply import beyond_rotation, state_fields

    assert beyond_rotation(GainBias()((5,))) == ["bias", "gain"]  # a rotary path carries neither
    expected = {"rope": [], "alibi": ["bias"], "erpe": ["prob_bias"], "gta": ["frame"], "string": ["basis"],
                "xpos": ["rot_k"]}
    for kind, fields in expected.items():
        grid = (2, 3) if kind in ("gta", "string") else (5,)
        opts = {"length": 5} if kind == "erpe" else {}
        out = ndpe.make(dims=len(grid), kind=kind, dim=DIM, heads=HEADS, **opts)(grid)
        assert beyond_rotation(out) == fields and state_fields(out) == [], kind
    dd = ndpe.make(dims=1, kind="dd-alibi", dim=DIM, heads=HEADS)((5,))
    assert state_fields(dd) == ["logits"] and beyond_rotation(dd) == ["logits"]
