"""KV-cache decoding: a causal text model decoding token by token with a cache equals its full-sequence forward.

Each kind that makes sense causally is decoded through the whole stack (``pe((n,), past=p)``, ``ndpe.Attention``
with a :class:`ndpe.KVCache`, ``TextTransformer(caches=)``) and compared with one forward over the sequence.
"""
from __future__ import annotations

import pytest
import torch

import ndpe
from conftest import needs_kind
from models.text import TextTransformer

VOCAB, LENGTH = 13, 12

CASES = {  # name: (kind, options)
    "rope": ("rope", {}),
    "rope-interleaved": ("rope", {"pairing": "interleaved", "theta": 100.0}),
    "rope-yarn": ("rope", {"scaling": "yarn", "scale": 4.0, "train_shape": (4,)}),
    "rope-linear": ("rope", {"scaling": "linear", "scale": 2.0}),
    "xpos": ("xpos", {"center": 0, "scale_base": 16.0}),
    "alibi": ("alibi", {"causal": True}),
    "alibi-symmetric": ("alibi", {}),
    "relative-t5": ("relative", {"mode": "t5", "bidirectional": False, "num_buckets": 8, "max_distance": 16}),
    "relative-clip": ("relative", {"max_distance": 3}),
    "cope": ("cope", {}),
    "transformer-xl": ("transformer-xl", {}),
    "fire": ("fire", {"causal": True, "init_L": 4.0}),  # L below the length: the normalizer's max(L, i) acts
    "cpb-dynamic": ("cpb", {"style": "dynamic", "log_distance": True}),
    "cpb-swin": ("cpb", {"train_shape": (8,)}),
    "none": ("none", {}),
    "sinusoidal": ("sinusoidal", {}),
    "learned": ("learned", {"grid_shape": (LENGTH,)}),
}


def model(kind: str, options: dict, *, causal: bool = True, depth: int = 2) -> TextTransformer:
    torch.manual_seed(0)
    m = TextTransformer(vocab_size=VOCAB, num_classes=VOCAB, pe={"kind": kind, "options": options}, dim=32,
                        depth=depth, heads=4, causal=causal).eval()
    with torch.no_grad():  # move learned parameters off their init so that every term matters
        for p in m.encoder.pe.parameters():
            p.add_(0.2 * torch.randn_like(p))
        for blk in m.encoder.blocks:  # larger q, k: a wrong rotation or offset changes the logits well above 1e-5
            blk.attn.qkv.weight.mul_(8.0)
    return m


@pytest.mark.parametrize("name", list(CASES))
def test_token_by_token_equals_full_sequence(name):
    kind, options = CASES[name]
    if kind not in ndpe.available():
        pytest.skip(f"kind {kind!r} not registered")
    m = model(kind, options)
    tokens = torch.randint(0, VOCAB, (2, LENGTH), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = m(tokens)
        caches = m.new_caches()
        steps = [m(tokens[:, :5], caches)]  # a prompt, then one token at a time
        steps += [m(tokens[:, i:i + 1], caches) for i in range(5, LENGTH)]
    assert [c.length for c in caches] == [LENGTH] * len(caches)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["rope", "alibi", "cope", "transformer-xl", "learned"])
def test_generate_with_cache_equals_without(name):
    kind, options = CASES[name]
    if kind not in ndpe.available():
        pytest.skip(f"kind {kind!r} not registered")
    m = model(kind, options)
    prompt = torch.randint(0, VOCAB, (2, 4), generator=torch.Generator().manual_seed(2))
    greedy = m.generate(prompt, LENGTH - 4)
    assert greedy.shape == (2, LENGTH) and torch.equal(greedy[:, :4], prompt)
    assert torch.equal(greedy, m.generate(prompt, LENGTH - 4, use_cache=False))
    sampled = [m.generate(prompt, 6, temperature=1.0, top_k=5, generator=torch.Generator().manual_seed(3),
                          use_cache=c) for c in (True, False)]
    assert torch.equal(*sampled)


def test_generate_greedy_picks_the_argmax():
    m = model("rope", {})
    prompt = torch.tensor([[1, 2, 3]])
    out = m.generate(prompt, 1)
    assert out[0, -1] == m(prompt)[0, -1].argmax()


def test_attention_decodes_with_a_cache_directly():
    """ndpe.Attention alone: new queries attend to every cached key, with the causal offset."""
    torch.manual_seed(0)
    pe = ndpe.make(dims=1, kind="alibi", dim=16, heads=2, causal=True)
    attn = ndpe.Attention(16, heads=2, causal=True).eval()
    x = torch.randn(1, 7, 16)
    full = attn(x, pe((7,)))
    cache = ndpe.KVCache()
    first = attn(x[:, :3], pe((3,)), cache)
    rest = attn(x[:, 3:], pe((4,), past=3), cache)  # four new tokens at once: causal among themselves
    torch.testing.assert_close(torch.cat([first, rest], 1), full, rtol=1e-5, atol=1e-6)


def test_causal_mask_offsets_queries_to_the_end():
    mask = ndpe.causal_mask(2, 4)
    assert mask.isinf().tolist() == [[False, False, False, True], [False, False, False, False]]


# -- bad inputs ------------------------------------------------------------------------------------------


def test_cache_longer_than_a_learned_table():
    m = model("learned", {"grid_shape": (6,)})
    with pytest.raises(ValueError, match="needs a learned table that covers them"):
        m.generate(torch.tensor([[1, 2, 3, 4]]), 5)


@needs_kind("cope")
def test_causal_only_kind_in_a_bidirectional_model():
    m = model("cope", {}, causal=False)
    with pytest.raises(ValueError, match="causal attention only"):
        m(torch.tensor([[1, 2, 3]]))


@needs_kind("cpb")
def test_cpb_normalized_by_the_growing_grid_cannot_decode():
    with pytest.raises(ValueError, match="needs a fixed train_shape"):
        ndpe.make(dims=1, kind="cpb", dim=16, heads=2)((1,), past=4)


@pytest.mark.parametrize("kind,options,fragment", [
    ("rope", {"scaling": "dynamic-ntk", "scale": 2.0, "train_shape": (4,)}, "needs a static scaling"),
    ("learned", {"grid_shape": (16,), "resize": "linear"}, "needs resize=None"),
    ("sinusoidal", {"coords": "pixel"}, "needs coords='index'"),
    ("rope", {"coords": "centered"}, "needs coords='index'"),
])
def test_encodings_that_change_with_the_length_cannot_decode(kind, options, fragment):
    """What a cached key would have seen differently at a shorter length refuses past= in one line."""
    pe = ndpe.make(dims=1, kind=kind, dim=16, heads=2, **options)
    with pytest.raises(ValueError, match=fragment):
        pe((1,), past=8)


def test_decoding_budget_counts_the_new_rows_only():
    """One new query against 8001 keys is a (heads, 1, 8001) bias, far under the budget a square one would break."""
    pe = ndpe.make(dims=1, kind="alibi", dim=64, heads=8, causal=True)
    assert pe((1,), past=8000).bias.shape == (8, 1, 8001)


def test_kv_cache_refuses_mismatched_updates():
    cache = ndpe.KVCache()
    cache.update(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4))
    with pytest.raises(ValueError, match="one dtype"):
        cache.update(torch.zeros(1, 2, 1, 4, dtype=torch.bfloat16), torch.zeros(1, 2, 1, 4, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="same batch, heads, tokens"):
        cache.update(torch.zeros(1, 2, 1, 4), torch.zeros(1, 2, 2, 4))


def test_generate_needs_a_causal_model():
    with pytest.raises(ValueError, match="needs a causal model"):
        model("rope", {}, causal=False).generate(torch.tensor([[1, 2]]), 2)


@pytest.mark.parametrize("kwargs,fragment", [
    ({"max_new_tokens": -1}, "max_new_tokens must be an int >= 0"),
    ({"max_new_tokens": 2, "temperature": float("nan")}, "temperature must be a number >= 0"),
    ({"max_new_tokens": 2, "top_k": 0}, "top_k must be an int >= 1"),
])
def test_generate_bad_arguments(kwargs, fragment):
    with pytest.raises(ValueError, match=fragment):
        model("rope", {}).generate(torch.tensor([[1, 2]]), **kwargs)


def test_bias_without_past_against_a_cache():
    """A bias built for the new tokens alone (past= forgotten) does not cover the cached keys: one clear line."""
    pe = ndpe.make(dims=1, kind="alibi", dim=16, heads=2, causal=True)
    attn = ndpe.Attention(16, heads=2, causal=True)
    cache = ndpe.KVCache()
    attn(torch.randn(1, 3, 16), pe((3,)), cache)
    with pytest.raises(ValueError, match="past="):
        attn(torch.randn(1, 1, 16), pe((1,)), cache)


class _Distance(ndpe.base.Encoding):  # a user's bias kind, not registered
    def encode(self, positions, grid_shape, key_positions=None):
        keys = positions if key_positions is None else key_positions
        return ndpe.PosOut(bias=-(positions[:, None, 0] - keys[None, :, 0]).abs().expand(self.heads, -1, -1))


def test_a_bias_kind_decodes_as_it_declares():
    """takes_key_positions (declared, not read off encode's signature) decides whether past= hands over the keys."""
    class Declared(_Distance):
        takes_key_positions = True

    assert Declared(dims=1, dim=8, heads=2)((2,), past=3).bias.shape == (2, 2, 5)
    with pytest.raises(ValueError, match="does not declare takes_key_positions"):
        _Distance(dims=1, dim=8, heads=2)((2,), past=3)


def test_rotation_of_other_length_than_q():
    pe = ndpe.make(dims=1, kind="rope", dim=16, heads=2)
    q = torch.randn(1, 2, 3, 8)
    with pytest.raises(ValueError, match="q has 3 tokens but the encoding covers 5"):
        ndpe.apply_qk(q, q, pe((5,)))


@pytest.mark.parametrize("call,fragment", [
    (lambda: ndpe.make(dims=2, kind="rope", dim=16, heads=2)((2, 2), past=1), "needs a token order, dims=1"),
    (lambda: ndpe.make(dims=1, kind="rope", dim=16, heads=2)((2,), past=-1), "past must be"),
    (lambda: ndpe.make(dims=1, kind="rope", dim=16, heads=2)(positions=torch.zeros(2, 1), past=1), "no explicit positions"),
])
def test_past_bad_inputs(call, fragment):
    with pytest.raises((ValueError, TypeError), match=fragment):
        call()


def test_logits_term_needs_q_and_k():
    term = ndpe.LogitsTerm(fn=lambda q, k: q @ k.transpose(-1, -2))
    with pytest.raises(ValueError, match="call attn_bias\\(pos, q=q, k=k\\)"):
        ndpe.attn_bias(ndpe.PosOut(logits=term))
