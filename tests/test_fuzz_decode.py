"""Table-driven fuzz of decoding and of the shape checks at the public boundaries.

Every row asserts one category: a clear one-line error (type and a fragment of the message), or a checked
result (decoding with the right ``past=`` equals the full forward). Families:

- decoding: every kind that decodes, with ``past=`` forgotten, stale, too large, or without a cache;
- shapes: ``apply_qk``, ``attn_bias``, ``merge``, :class:`ndpe.KVCache`, ``Combine``, flex, ``generate``.

Without the tie between ``PosOut.past`` and the cache, the decoding rows return outputs off by the cache length
(rope: 4.9 max abs) and no error.
"""
from __future__ import annotations

import dataclasses

import pytest
import torch

import ndpe
import ndpe.flex
from models.text import TextTransformer

DIM, HEADS, PROMPT = 32, 4, 5

DECODES = {  # kinds that decode with a KV cache: name -> (kind, options)
    "rope": ("rope", {}),
    "rope-interleaved": ("rope", {"pairing": "interleaved", "theta": 100.0}),
    "rope-yarn": ("rope", {"scaling": "yarn", "scale": 4.0, "train_shape": (4,)}),
    "xpos": ("xpos", {"center": 0, "scale_base": 16.0}),
    "alibi": ("alibi", {"causal": True}),
    "relative-t5": ("relative", {"mode": "t5", "bidirectional": False, "num_buckets": 8, "max_distance": 16}),
    "relative-clip": ("relative", {"max_distance": 3}),
    "cope": ("cope", {}),
    "transformer-xl": ("transformer-xl", {}),
    "fire": ("fire", {"causal": True, "init_L": 4.0}),
    "cpb": ("cpb", {"style": "dynamic", "log_distance": True}),
    "sinusoidal": ("sinusoidal", {}),
    "learned": ("learned", {"grid_shape": (16,)}),
    "none": ("none", {}),
}


def encoding(name: str):
    kind, options = DECODES[name]
    torch.manual_seed(0)
    pe = ndpe.make(dims=1, kind=kind, dim=DIM, heads=HEADS, **options).eval()
    with torch.no_grad():  # learned parameters off their init, so that every term matters
        for p in pe.parameters():
            p.add_(0.2 * torch.randn_like(p))
    return pe


def prefilled(name: str):
    """(pe, attention, cache holding PROMPT tokens, the next token's embedding)."""
    pe = encoding(name)
    torch.manual_seed(1)
    attn = ndpe.Attention(DIM, HEADS, causal=True).eval()
    x = torch.randn(1, PROMPT + 1, DIM)
    cache = ndpe.KVCache()
    with torch.no_grad():
        attn(ndpe.apply_tokens(x[:, :PROMPT], pos := pe((PROMPT,))), pos, cache)
    return pe, attn, cache, x


def decode_with(name: str, past):
    """Decode one token after the prompt with ``past(cache)`` (or without a cache when ``past`` is an int)."""
    def run():
        pe, attn, cache, x = prefilled(name)
        if isinstance(past, int):
            pos = pe((1,), past=past)
            return attn(ndpe.apply_tokens(x[:, PROMPT:], pos), pos)
        pos = pe((1,)) if past(cache) == 0 else pe((1,), past=past(cache))
        return attn(ndpe.apply_tokens(x[:, PROMPT:], pos), pos, cache)
    return run


MISMATCH = "cached tokens but the KVCache holds"
DECODE_ROWS = []
for _name in DECODES:
    DECODE_ROWS += [
        (f"{_name} past forgotten", decode_with(_name, lambda c: 0), ValueError, MISMATCH),
        (f"{_name} past stale", decode_with(_name, lambda c: c.length - 2), ValueError, MISMATCH),
        (f"{_name} past too large", decode_with(_name, lambda c: c.length + 1), ValueError, MISMATCH),
        (f"{_name} past without a cache", decode_with(_name, PROMPT), ValueError, "no KVCache was given"),
    ]


def qk(*shape, dtype=torch.float32):
    return torch.zeros(*shape, dtype=dtype)


def rope(n=4, **kw):
    return ndpe.make(dims=1, kind="rope", dim=DIM, heads=HEADS)((n,), **kw)


def batched(kind="rope", batch=3, n=4, heads=HEADS, **opts):
    return ndpe.make(dims=1, kind=kind, dim=DIM, heads=heads, **opts)(positions=torch.rand(batch, n, 1))


def bias(heads=HEADS, n=4, **kw):
    return ndpe.make(dims=1, kind="alibi", dim=DIM, heads=heads)((n,), **kw)


def cache_with(k_shape=(1, 2, 3, 4), v_shape=None, dtype=torch.float32):
    cache = ndpe.KVCache()
    cache.update(torch.zeros(k_shape, dtype=dtype), torch.zeros(v_shape or k_shape, dtype=dtype))
    return cache


def lm():
    torch.manual_seed(0)
    return TextTransformer(vocab_size=11, num_classes=11, pe={"kind": "rope"}, dim=16, depth=1, heads=2,
                           causal=True).eval()


def flex(q, k=None, v=None, grid=(4,), **kw):
    pe = ndpe.make(dims=1, kind="alibi", dim=DIM, heads=HEADS)
    k, v = q if k is None else k, q if v is None else v
    return lambda: ndpe.flex.attention(q, k, v, pe, grid, compiled=False, **kw)


SHAPE_ROWS = [
    # -- apply_qk: (B, heads, T, head_dim) or (B, T, head_dim); the rotation must not grow them
    ("apply_qk q 2-D", lambda: ndpe.apply_qk(qk(4, 8), qk(4, 8), rope()), ValueError, "(B, heads, T, head_dim)"),
    ("apply_qk q 1-D", lambda: ndpe.apply_qk(qk(8), qk(8), rope()), ValueError, "(B, heads, T, head_dim)"),
    ("apply_qk q 5-D", lambda: ndpe.apply_qk(qk(1, 1, 4, 4, 8), qk(1, 1, 4, 4, 8), rope()), ValueError,
     "(B, heads, T, head_dim)"),
    ("apply_qk q 4-D k 3-D", lambda: ndpe.apply_qk(qk(1, 4, 4, 8), qk(1, 4, 8), rope()), ValueError,
     "(B, heads, T, head_dim)"),
    ("apply_qk batch q 2 k 1", lambda: ndpe.apply_qk(qk(2, 4, 4, 8), qk(1, 4, 4, 8), rope()), ValueError,
     "q has batch 2 but k has batch 1"),
    ("apply_qk positions batch 3 q batch 1", lambda: ndpe.apply_qk(qk(1, 4, 4, 8), qk(1, 4, 4, 8), batched()),
     ValueError, "another batch size"),
    ("apply_qk positions batch 3 q batch 2", lambda: ndpe.apply_qk(qk(2, 4, 4, 8), qk(2, 4, 4, 8), batched()),
     ValueError, "another batch size"),
    ("apply_qk positions batch 3 q 3-D batch 3", lambda: ndpe.apply_qk(qk(3, 4, 8), qk(3, 4, 8), batched()),
     ValueError, "another batch size"),
    ("apply_qk xpos positions batch 2 q batch 1",
     lambda: ndpe.apply_qk(qk(1, 4, 4, 8), qk(1, 4, 4, 8), batched("xpos", batch=2)), ValueError, "another batch size"),
    ("apply_qk tokens 5 vs 4", lambda: ndpe.apply_qk(qk(1, 4, 5, 8), qk(1, 4, 5, 8), rope()), ValueError,
     "q has 5 tokens"),
    ("apply_qk k tokens 5 vs 4", lambda: ndpe.apply_qk(qk(1, 4, 4, 8), qk(1, 4, 5, 8), rope()), ValueError,
     "k has 5 tokens"),
    ("apply_qk head_dim 4 for rot 8", lambda: ndpe.apply_qk(qk(1, 4, 4, 4), qk(1, 4, 4, 4), rope()), ValueError,
     "head_dim"),
    ("apply_qk integer q", lambda: ndpe.apply_qk(qk(1, 4, 4, 8, dtype=torch.long), qk(1, 4, 4, 8), rope()),
     ValueError, "q must have a floating dtype"),
    ("apply_qk pos a dict", lambda: ndpe.apply_qk(qk(1, 4, 4, 8), qk(1, 4, 4, 8), {"rot": None}), TypeError,
     "ndpe.PosOut"),
    # -- attn_bias: the bias must not grow q's batch or heads
    ("attn_bias positions batch 3 q batch 1",
     lambda: ndpe.attn_bias(batched("alibi"), q=qk(1, 4, 4, 8), k=qk(1, 4, 4, 8)), ValueError, "another batch size"),
    ("attn_bias positions batch 3 q batch 2",
     lambda: ndpe.attn_bias(batched("alibi"), q=qk(2, 4, 4, 8), k=qk(2, 4, 4, 8)), ValueError, "another batch size"),
    ("attn_bias 2 heads q 4", lambda: ndpe.attn_bias(bias(heads=2), q=qk(1, 4, 4, 8), k=qk(1, 4, 4, 8)), ValueError,
     "bias has 2 heads but the attention has heads=4"),
    ("attn_bias 8 heads q 4", lambda: ndpe.attn_bias(bias(heads=8), q=qk(1, 4, 4, 8), k=qk(1, 4, 4, 8)), ValueError,
     "bias has 8 heads but the attention has heads=4"),
    ("attn_bias relative 2 heads q 4",
     lambda: ndpe.attn_bias(ndpe.make(dims=1, kind="relative", dim=DIM, heads=2)((4,)), q=qk(1, 4, 4, 8),
                            k=qk(1, 4, 4, 8)), ValueError, "bias has 2 heads"),
    ("attn_bias dtype int", lambda: ndpe.attn_bias(bias(), torch.long), ValueError, "dtype must be a floating"),
    ("Attention positions batch 3 x batch 1",
     lambda: ndpe.Attention(DIM, HEADS)(torch.randn(1, 4, DIM), batched("alibi")), ValueError, "another batch size"),
    ("Attention rope positions batch 3 x batch 2",
     lambda: ndpe.Attention(DIM, HEADS)(torch.randn(2, 4, DIM), batched()), ValueError, "another batch size"),
    ("Attention cache a list", lambda: ndpe.Attention(DIM, HEADS)(torch.randn(1, 4, DIM), rope(), []), TypeError,
     "cache must be an ndpe.KVCache"),
    # -- merge: one past, one token count, broadcastable fields
    ("merge 4-head and 2-head bias", lambda: ndpe.merge(bias(heads=4), bias(heads=2)), ValueError,
     "cannot merge the bias fields"),
    ("merge biases of 4 and 5 tokens", lambda: ndpe.merge(bias(n=4), bias(n=5)), ValueError, "different token counts"),
    ("merge rope 4 tokens and alibi 5", lambda: ndpe.merge(rope(4), bias(n=5)), ValueError, "different token counts"),
    ("merge adds of dim 32 and 16",
     lambda: ndpe.merge(ndpe.make(dims=1, kind="sinusoidal", dim=32, heads=4)((4,)),
                        ndpe.make(dims=1, kind="sinusoidal", dim=16, heads=4)((4,))), ValueError,
     "cannot merge the add fields"),
    ("merge adds batch 3 and 2",
     lambda: ndpe.merge(batched("sinusoidal", batch=3), batched("sinusoidal", batch=2)), ValueError,
     "cannot merge the add fields"),
    ("merge biases batch 3 and 2", lambda: ndpe.merge(batched("alibi", batch=3), batched("alibi", batch=2)),
     ValueError, "cannot merge the bias fields"),
    ("merge cats batch 3 and 2",
     lambda: ndpe.merge(batched("coord", batch=3), batched("coord", batch=2)), ValueError, "cannot merge the cat fields"),
    ("merge different past", lambda: ndpe.merge(rope(1, past=3), bias(n=1, past=4)), ValueError,
     "different KV-cache lengths"),
    ("merge past and no past", lambda: ndpe.merge(rope(1, past=3), bias(n=1)), ValueError, "different KV-cache lengths"),
    ("merge num_prefix 0 and 1", lambda: ndpe.merge(rope(4), bias(n=3, num_prefix=1)), ValueError,
     "different num_prefix"),
    ("merge a tensor", lambda: ndpe.merge(rope(4), torch.zeros(4, 4)), TypeError, "ndpe.PosOut"),
    ("merge nothing", lambda: ndpe.merge(), ValueError, "at least one"),
    ("merge two rotations", lambda: ndpe.merge(rope(4), rope(4)), ValueError, "two rotary"),
    ("PosOut past negative", lambda: ndpe.PosOut(past=-1), ValueError, "PosOut.past"),
    ("PosOut past float", lambda: ndpe.PosOut(past=1.0), TypeError, "PosOut.past"),
    ("Combine 4-head and 2-head biases",
     lambda: ndpe.Combine(ndpe.make(dims=1, kind="alibi", dim=DIM, heads=4),
                          ndpe.make(dims=1, kind="relative", dim=DIM, heads=2))((4,)), ValueError,
     "Combine needs encodings with the same dims, dim and heads"),
    # -- KVCache: 4-D floating keys and values, one batch, heads, head_dim, dtype and device
    ("KVCache keys 3-D", lambda: ndpe.KVCache().update(qk(2, 3, 4), qk(2, 3, 4)), ValueError, "(B, heads, T, head_dim)"),
    ("KVCache keys 5-D", lambda: ndpe.KVCache().update(qk(1, 2, 2, 3, 4), qk(1, 2, 2, 3, 4)), ValueError,
     "(B, heads, T, head_dim)"),
    ("KVCache integer keys", lambda: ndpe.KVCache().update(qk(1, 2, 3, 4, dtype=torch.long), qk(1, 2, 3, 4)),
     ValueError, "floating"),
    ("KVCache keys a list", lambda: ndpe.KVCache().update([0.0], qk(1, 2, 3, 4)), ValueError, "floating"),
    ("KVCache values of other tokens", lambda: ndpe.KVCache().update(qk(1, 2, 3, 4), qk(1, 2, 2, 4)), ValueError,
     "same batch, heads, tokens"),
    ("KVCache values of other dtype",
     lambda: ndpe.KVCache().update(qk(1, 2, 3, 4), qk(1, 2, 3, 4, dtype=torch.float64)), ValueError,
     "same batch, heads, tokens, dtype"),
    ("KVCache values on meta",
     lambda: ndpe.KVCache().update(qk(1, 2, 3, 4), torch.zeros(1, 2, 3, 4, device="meta")), ValueError, "device"),
    ("KVCache new head_dim", lambda: cache_with().update(qk(1, 2, 1, 8), qk(1, 2, 1, 8)), ValueError,
     "do not extend the cached"),
    ("KVCache new value head_dim", lambda: cache_with().update(qk(1, 2, 1, 4), qk(1, 2, 1, 8)), ValueError,
     "do not extend the cached"),
    ("KVCache new heads", lambda: cache_with().update(qk(1, 3, 1, 4), qk(1, 3, 1, 4)), ValueError,
     "do not extend the cached"),
    ("KVCache new batch", lambda: cache_with().update(qk(2, 2, 1, 4), qk(2, 2, 1, 4)), ValueError,
     "do not extend the cached"),
    ("KVCache new dtype", lambda: cache_with().update(qk(1, 2, 1, 4, dtype=torch.float64),
                                                      qk(1, 2, 1, 4, dtype=torch.float64)), ValueError,
     "do not extend the cached"),
    ("KVCache new device", lambda: cache_with().update(torch.zeros(1, 2, 1, 4, device="meta"),
                                                       torch.zeros(1, 2, 1, 4, device="meta")), ValueError,
     "do not extend the cached"),
    # -- flex: num_prefix, causal and (B, heads, T, head_dim) tensors checked first
    ("flex num_prefix -1", flex(qk(1, 4, 4, 8), num_prefix=-1), ValueError, "num_prefix must be"),
    ("flex num_prefix float", flex(qk(1, 4, 5, 8), num_prefix=1.0), TypeError, "num_prefix must be"),
    ("flex num_prefix bool", flex(qk(1, 4, 5, 8), num_prefix=True), TypeError, "num_prefix must be"),
    ("flex causal str", flex(qk(1, 4, 4, 8), causal="yes"), TypeError, "causal must be a bool"),
    ("flex q 3-D", flex(qk(4, 4, 8)), ValueError, "q must be (B, heads, T, head_dim)"),
    ("flex integer q", flex(qk(1, 4, 4, 8, dtype=torch.long)), ValueError, "q must have a floating dtype"),
    ("flex k of other tokens", flex(qk(1, 4, 4, 8), qk(1, 4, 5, 8), qk(1, 4, 4, 8)), ValueError, "do not match"),
    ("flex v of other tokens", flex(qk(1, 4, 4, 8), qk(1, 4, 4, 8), qk(1, 4, 3, 8)), ValueError, "do not match"),
    ("flex k of other head_dim", flex(qk(1, 4, 4, 8), qk(1, 4, 4, 4), qk(1, 4, 4, 4)), ValueError, "do not match"),
    ("flex k of other batch", flex(qk(1, 4, 4, 8), qk(2, 4, 4, 8), qk(2, 4, 4, 8)), ValueError, "do not match"),
    ("flex score_mod num_prefix -2",
     lambda: ndpe.flex.score_mod(ndpe.make(dims=1, kind="alibi", dim=DIM, heads=HEADS), (4,), num_prefix=-2),
     ValueError, "num_prefix must be"),
    # -- generate: token ids inside the vocabulary
    ("generate id -1", lambda: lm().generate(torch.tensor([[1, -1]]), 2), ValueError, "outside the vocabulary 0..10"),
    ("generate id = vocab", lambda: lm().generate(torch.tensor([[1, 11]]), 2), ValueError, "token id 11 outside"),
    ("generate id huge", lambda: lm().generate(torch.tensor([[10 ** 12]]), 1), ValueError, "outside the vocabulary"),
    ("generate float prompt", lambda: lm().generate(torch.tensor([[1.0, 2.0]]), 1), ValueError, "dtype long"),
    ("generate empty prompt", lambda: lm().generate(torch.zeros(1, 0, dtype=torch.long), 1), ValueError, "L >= 1"),
    ("generate 1-D prompt", lambda: lm().generate(torch.tensor([1, 2]), 1), ValueError, "(B, L >= 1)"),
]

ROWS = DECODE_ROWS + SHAPE_ROWS


@pytest.mark.parametrize("name, thunk, exc, fragment", ROWS, ids=[r[0] for r in ROWS])
def test_bad_input_raises_clear_error(name, thunk, exc, fragment):
    with pytest.raises(exc) as info:
        thunk()
    msg = str(info.value)
    assert fragment in msg, f"{name}: message {msg!r} lacks {fragment!r}"
    assert "\n" not in msg, f"{name}: message is not one line: {msg!r}"


@pytest.mark.parametrize("name", list(DECODES))
@pytest.mark.parametrize("num_prefix", [0, 2])
def test_decoding_with_the_right_past_equals_the_full_forward(name, num_prefix):
    """The checked result: the prompt, then one token at a time with past=cache.length - num_prefix, through
    apply_tokens and Attention, equals one causal forward over the whole sequence."""
    pe = encoding(name)
    torch.manual_seed(1)
    attn = ndpe.Attention(DIM, HEADS, causal=True).eval()
    with torch.no_grad():
        attn.qkv.weight.mul_(4.0)  # a wrong offset changes the outputs well above the tolerance
    n = 9
    x = torch.randn(2, num_prefix + n, DIM)
    with torch.no_grad():
        full = attn(ndpe.apply_tokens(x, pos := pe((n,), num_prefix=num_prefix)), pos)
        cache = ndpe.KVCache()
        head = num_prefix + 4
        steps = [attn(ndpe.apply_tokens(x[:, :head], pos := pe((4,), num_prefix=num_prefix)), pos, cache)]
        for i in range(head, num_prefix + n):
            pos = pe((1,), num_prefix=num_prefix, past=cache.length - num_prefix)
            assert pos.past == cache.length
            steps.append(attn(ndpe.apply_tokens(x[:, i:i + 1], pos), pos, cache))
    torch.testing.assert_close(torch.cat(steps, 1), full, rtol=1e-5, atol=1e-5)


def test_forgotten_past_would_be_silently_wrong():
    """Why the tie matters: the same call with the check bypassed gives another result, not an error."""
    pe, attn, cache, x = prefilled("rope")
    right = attn(x[:, PROMPT:], pe((1,), past=PROMPT), cache)
    cache.k, cache.v = cache.k[..., :PROMPT, :], cache.v[..., :PROMPT, :]  # drop the token just appended
    pos = dataclasses.replace(pe((1,)), past=PROMPT)  # what an output without past would have passed before
    wrong = attn(x[:, PROMPT:], pos, cache)
    assert (right - wrong).abs().max() > 1e-2


def test_table_is_large_enough():
    assert len(ROWS) >= 120
