"""``ndpe.hf.use(model, kind)``: any 1D kind in a Hugging Face decoder of the Llama family (the installed transformers:
5.23 pinned, 5.24 the newest, which renamed the cache argument):
Llama, Qwen2, Mistral and Gemma. ``rope`` (from the config) gives the model's own logits; every kind that decodes
generates the same tokens with and without the KV cache, and its cached logits equal the full forward's."""
from __future__ import annotations

import inspect

import pytest
import torch

import ndpe
from conftest import build
from tests.conftest import assert_tells_apart, sharpen_attention

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.peers  # also run against the newest transformers and timm (scripts/test_peers.sh)
from transformers import (GemmaConfig, GemmaForCausalLM, LlamaConfig, LlamaForCausalLM, MistralConfig,  # noqa: E402
                          MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM)

SMALL = dict(vocab_size=61, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=256)
FAMILIES = {
    "llama": lambda: LlamaForCausalLM(LlamaConfig(**SMALL)),
    "qwen2": lambda: Qwen2ForCausalLM(Qwen2Config(**SMALL)),
    "mistral": lambda: MistralForCausalLM(MistralConfig(**SMALL, sliding_window=None)),
    "gemma": lambda: GemmaForCausalLM(GemmaConfig(**SMALL, head_dim=8)),
}


def fresh(family: str):
    torch.manual_seed(0)
    return FAMILIES[family]().eval()


def sharp(family: str, **config):
    """``fresh(family)`` (with ``config`` changed) with attention sharp enough that positions move the logits."""
    torch.manual_seed(0)
    model = FAMILIES[family]() if not config else LlamaForCausalLM(LlamaConfig(**{**SMALL, **config}))
    return sharpen_attention(model.eval())


@pytest.mark.parametrize("family", list(FAMILIES))
def test_rope_from_the_config_equals_the_model(family):
    model = sharp(family)
    ids = torch.randint(0, 61, (2, 40))
    with torch.no_grad():
        ref = model(ids).logits
        out = ndpe.hf.use(model, "rope")(ids).logits
        assert isinstance(model.ndpe_pe, ndpe.Encoding) and model.ndpe_pe.kind == "rope"
        other = ndpe.hf.use(sharp(family), "rope", theta=100.0)(ids).logits  # another theta: another model
    assert_tells_apart(out, other, ref, rtol=1e-4, atol=1e-4)


def test_partial_rotary_factor_is_the_models_own_rope():
    """Llama's default rope ignores ``partial_rotary_factor`` (it turns the whole head): so does ``use(m, "rope")``;
    ndpe's rope over half the head is another model. Other rope types give cos/sin for part of the head, which the
    model's attention cannot apply (transformers' model fails too): refused in one line."""
    model = sharp("llama", partial_rotary_factor=0.5)
    ids = torch.randint(0, 61, (2, 24))
    with torch.no_grad():
        ref = model(ids).logits
        out = ndpe.hf.use(model, "rope")(ids).logits
        half = ndpe.hf.use(sharp("llama", partial_rotary_factor=0.5), "rope", axis_dims=(4,))(ids).logits
    assert_tells_apart(out, half, ref, rtol=1e-4, atol=1e-4)
    llama3 = dict(rope_type="llama3", rope_theta=5e5, factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                  original_max_position_embeddings=32, partial_rotary_factor=0.5)
    with pytest.raises(ValueError, match="turns 4 of its 8 head channels") as err:
        ndpe.hf.use(sharp("llama", rope_parameters=llama3), "rope")
    assert "\n" not in str(err.value)


def test_position_ids_are_honoured_or_refused():
    """Kinds that go through the rotary module take explicit ``position_ids`` as HF's rope does; the others count
    positions from each row's first token and refuse any other ids in one line (they used to ignore them)."""
    ids = torch.randint(0, 61, (2, 12))
    shifted = (3 * torch.arange(12))[None].expand(2, -1)  # spread out: relative distances change
    model = sharp("llama")
    with torch.no_grad():
        ref = model(ids, position_ids=shifted).logits
        out = ndpe.hf.use(model, "rope")(ids, position_ids=shifted).logits
        unspread = ndpe.hf.use(sharp("llama"), "rope")(ids).logits
        assert_tells_apart(out, unspread, ref, rtol=1e-4, atol=1e-4)
        for kind in ("sinusoidal", "alibi"):
            other = ndpe.hf.use(fresh("llama"), kind)
            torch.testing.assert_close(other(ids, position_ids=torch.arange(12)[None].expand(2, -1)).logits,
                                       other(ids).logits)  # the ids it counts itself: accepted
            with pytest.raises(ValueError, match="takes position_ids 0..11 only") as err:
                other(ids, position_ids=shifted)
            assert "\n" not in str(err.value)


# the options under which a kind decodes (the others refuse past=, each in one line: see test_refused_options)
DECODE_OPTIONS = {"learned": {"grid_shape": (64,)}, "cpb": {"train_shape": (16,)}, "fire": {"causal": True},
                  "fourier": {"coords": "index"}, "xpos": {"center": 0}, "liere": {"coords": "index", "block_size": 4}}


def options(kind):
    return DECODE_OPTIONS.get(kind, type(build(kind, 1)).example_options(1))


def skip_unless_it_decodes(kind: str) -> None:
    """Skip a kind that refuses KV-cache decoding under its options, as every kind refuses what it cannot do: in one
    line, ``ValueError`` (dd-alibi never decodes; a bias kind decodes when it declares ``takes_key_positions``)."""
    try:
        ndpe.make(dims=1, kind=kind, dim=32, heads=4, **options(kind)).eval()((1,), past=1)  # as ndpe.hf.use builds it
    except ValueError as err:
        assert "decod" in str(err) and "\n" not in str(err), err
        pytest.skip(f"{kind} does not decode with {options(kind)}: {err}")
    if getattr(ndpe.make(dims=1, kind=kind, dim=32, heads=4, **options(kind))((2,)).logits, "uses_states", False):
        pytest.skip(f"{kind} reads the token states, which ndpe.hf.use refuses (test_refusals there)")


# every 1D kind that keeps the width; the test asks each whether it decodes (a refusal skips it, never collection)
DECODING = [k for k, dims in ndpe.available().items() if 1 in dims and build(k, 1).cat_dim == 0]

# the KV cache's name in the installed transformers: ``cache`` from 5.24 on, ``past_key_values`` before
CACHE = next(n for n in ("cache", "past_key_values") if n in inspect.signature(LlamaForCausalLM.forward).parameters)


def cached_logits(model, ids, split):
    """Logits of ``ids`` fed as a prompt of ``split`` tokens, then one token at a time through the KV cache, passed
    under the name the installed transformers takes."""
    out = model(ids[:, :split], use_cache=True)
    cache, steps = out[CACHE], [out.logits]
    for i in range(split, ids.shape[1]):
        out = model(ids[:, i:i + 1], use_cache=True, **{CACHE: cache})
        cache = out[CACHE]
        steps.append(out.logits)
    return torch.cat(steps, dim=1)


@pytest.mark.parametrize("kind", DECODING)
def test_every_kind_decodes_with_the_cache(kind):
    skip_unless_it_decodes(kind)
    model = ndpe.hf.use(fresh("llama"), kind, **options(kind))
    ids = torch.randint(0, 61, (2, 12))
    with torch.no_grad():
        full = model(ids).logits
        step = cached_logits(model, ids, 5)
        torch.testing.assert_close(step, full, rtol=1e-4, atol=1e-4)
        a = model.generate(ids[:, :4], max_new_tokens=6, do_sample=False, use_cache=True)
        b = model.generate(ids[:, :4], max_new_tokens=6, do_sample=False, use_cache=False)
    assert torch.equal(a, b)


@pytest.mark.parametrize("family", ["qwen2", "mistral", "gemma"])
@pytest.mark.parametrize("kind", ["alibi", "sinusoidal", "xpos"])
def test_other_families_with_bias_token_and_key_rotation_kinds(family, kind):
    model = ndpe.hf.use(fresh(family), kind, **options(kind))
    ids = torch.randint(0, 61, (1, 10))
    with torch.no_grad():
        torch.testing.assert_close(cached_logits(model, ids, 4), model(ids).logits, rtol=1e-4, atol=1e-4)


def test_positions_reach_the_model():
    """alibi in place of rope: the logits of a token depend on how far back the others are."""
    model = ndpe.hf.use(fresh("llama"), "alibi")
    plain = ndpe.hf.use(fresh("llama"), "none")
    ids = torch.randint(0, 61, (1, 16))
    with torch.no_grad():
        assert (model(ids).logits - plain(ids).logits).abs().max() > 1e-4


@pytest.mark.parametrize("kind,opts,match", [("xpos", {"center": None}, "fixed center"),
                                             ("fire", {"causal": False}, "causal=True")])
def test_refused_options(kind, opts, match):
    """Options that cannot decode pass a full forward and refuse the cached step in one line."""
    model = ndpe.hf.use(fresh("llama"), kind, **opts)
    ids = torch.randint(0, 61, (1, 6))
    with torch.no_grad():
        model(ids)
        with pytest.raises(ValueError, match=match):
            cached_logits(model, ids, 3)


def test_refusals():
    with pytest.raises(ValueError, match="already uses an ndpe encoding"):
        ndpe.hf.use(ndpe.hf.use(fresh("llama"), "rope"), "alibi")
    with pytest.raises(ValueError, match="concatenates"):
        ndpe.hf.use(fresh("llama"), "coord")
    with pytest.raises(TypeError, match="Llama family"):
        ndpe.hf.use(torch.nn.Linear(2, 2), "rope")
    with pytest.raises(ValueError, match="later tokens would change earlier ones"):  # tAPE scaled by each call's length
        ndpe.hf.use(fresh("llama"), "tape")
    ndpe.hf.use(fresh("llama"), "tape", length=64)  # a fixed length: causal
    with pytest.raises(ValueError, match="resize=None"):  # a table resized to each call's length: the same leak
        ndpe.hf.use(fresh("llama"), "learned", grid_shape=(8,), resize="linear")


class ShearFrame(ndpe.Encoding):
    """A 1D kind with a ``frame``, written here: token ``p``'s map of each 4-channel block is the shear
    ``D = I + 0.3 p E_01`` (``D^-1 = I - 0.3 p E_01``), so that it reaches the logits, the values and the output."""

    def encode(self, positions, grid_shape):
        blocks = self.head_dim // 4
        shear = torch.zeros(16)
        shear[1] = 0.3
        delta = positions[..., :1] * shear.repeat(blocks)  # (N, 16 blocks), row-major blocks
        return ndpe.PosOut(frame=(delta, -delta))


def by_hand(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """HF's attention with ShearFrame's maps written out: ``q D^T``... as rows, causal softmax, ``D`` on the output."""
    n, total = query.shape[-2], key.shape[-2]
    groups = query.shape[1] // key.shape[1]
    key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)
    p = torch.arange(total, dtype=query.dtype)
    eye = torch.eye(4)
    shear = torch.zeros(4, 4)
    shear[0, 1] = 0.3
    d = eye + p[:, None, None] * shear  # (total, 4, 4)
    d_inv = eye - p[:, None, None] * shear

    def blocks(t, m):  # each token's rows t[..., i, :] in blocks of 4 channels, times m[i]^T (m applied per token)
        shape = t.shape
        t = t.reshape(*shape[:-1], -1, 4)
        return torch.einsum("bhtcj,tij->bhtci", t, m[-shape[-2]:]).reshape(shape)
    q, k, v = blocks(query, d.transpose(-1, -2)), blocks(key, d_inv), blocks(value, d_inv)
    logits = (q @ k.transpose(-1, -2)) * scaling + torch.full((n, total), float("-inf")).triu(total - n + 1)
    out = blocks(logits.softmax(-1) @ v, d)
    return out.transpose(1, 2).contiguous(), None


def test_a_frame_kind_is_applied_in_hf():
    """A 1D kind with a frame (q, k, v and the output mapped per token) in a HF decoder: equal to HF's attention with
    the maps written by hand, and far from the model without positions; cached decoding equals the full forward (the
    cache holds the raw keys and values, mapped by each key's frame). It used to give the "none" model's logits."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, eager_mask

    ndpe.register("test-shear-frame", dims=(1,))(ShearFrame)
    try:
        ids = torch.randint(0, 61, (2, 10))
        with torch.no_grad():
            model = ndpe.hf.use(sharp("llama"), "test-shear-frame")
            out = model(ids).logits
            cached = cached_logits(model, ids, 4)
            plain = ndpe.hf.use(sharp("llama"), "none")(ids).logits
            ref = sharp("llama")
            ones = lambda x, position_ids, *a, **k: (x.new_ones(*position_ids.shape, 8),) * 1 + (  # noqa: E731
                x.new_zeros(*position_ids.shape, 8),)
            ref.model.rotary_emb.forward = ones
            AttentionInterface.register("test-by-hand", by_hand)
            ALL_MASK_ATTENTION_FUNCTIONS.register("test-by-hand", eager_mask)
            ref.set_attn_implementation("test-by-hand")
            expected = ref(ids).logits
        assert_tells_apart(out, plain, expected, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(cached, out, rtol=1e-4, atol=1e-4)
    finally:
        ndpe.registry.unregister("test-shear-frame")


def test_models_of_one_config_stay_independent():
    """``use`` sets the attention implementation on the model's own copy of its config: a model built from the same
    config object runs transformers' own attention, takes another kind, and the config itself is left alone."""
    config = LlamaConfig(**SMALL)
    torch.manual_seed(0)
    first, second, third = (LlamaForCausalLM(config).eval() for _ in range(3))
    ids = torch.randint(0, 61, (1, 8))
    with torch.no_grad():
        before = second(ids).logits
        ndpe.hf.use(first, "fire", causal=True)
        torch.testing.assert_close(second(ids).logits, before, rtol=0, atol=0)  # still transformers' own
        assert config._attn_implementation != first.config._attn_implementation
        ndpe.hf.use(third, "alibi")
        assert first.config._attn_implementation != third.config._attn_implementation
        first(ids), third(ids)


def registered() -> set[str]:
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS
    return set(AttentionInterface._global_mapping) | set(type(ALL_MASK_ATTENTION_FUNCTIONS)._global_mapping)


def test_use_leaves_nothing_registered_and_keeps_no_model_alive():
    """What ``use`` registers in transformers' global attention and mask interfaces goes with its model: nothing
    there keeps the model alive (a weak reference dies with it), and ``close()`` unregisters at once."""
    import gc
    import weakref

    gc.collect()  # earlier tests' models first: their registrations would go in the collection below
    before = registered()
    model = ndpe.hf.use(fresh("llama"), "alibi")
    name = model.config._attn_implementation
    assert name in registered() - before
    with torch.no_grad():
        model(torch.randint(0, 61, (1, 5)))
    ref = weakref.ref(model)
    del model
    gc.collect()
    assert ref() is None and registered() == before
    other = ndpe.hf.use(fresh("llama"), "sinusoidal")
    other.ndpe_adapter.close()
    assert registered() == before


@pytest.mark.parametrize("kind,option", [("fire", {"causal": True}), ("xpos", {"center": 0})])
def test_decoder_defaults(kind, option):
    """Under ``use``, a kind that takes ``causal`` is causal and xPos's center is 0 unless given: the model equals
    the one built with the option and decodes with the cache."""
    ids = torch.randint(0, 61, (1, 9))
    with torch.no_grad():
        model = ndpe.hf.use(sharp("llama"), kind)
        given = ndpe.hf.use(sharp("llama"), kind, **option)(ids).logits
        torch.testing.assert_close(model(ids).logits, given, rtol=0, atol=0)
        torch.testing.assert_close(cached_logits(model, ids, 4), given, rtol=1e-4, atol=1e-4)


def test_a_term_after_the_softmax_stays_causal():
    """eRPE's term after the softmax under transformers' mask (finfo.min, not -inf): earlier tokens' logits do not
    move when later tokens change, and the cached decoding equals the full forward. It used to leak (0.3)."""
    ids = torch.randint(0, 61, (1, 10))
    later = ids.clone()
    later[:, 6:] = (later[:, 6:] + 7) % 61
    with torch.no_grad():
        model = ndpe.hf.use(sharp("llama"), "erpe", **options("erpe"))
        model.ndpe_pe.table.normal_(std=0.3)  # it starts at 0
        out, moved = model(ids).logits, model(later).logits
        torch.testing.assert_close(moved[:, :6], out[:, :6], rtol=1e-5, atol=1e-5)
        assert (moved[:, 6:] - out[:, 6:]).abs().max() > 1e-2
        torch.testing.assert_close(cached_logits(model, ids, 4), out, rtol=1e-4, atol=1e-4)


def test_the_cache_given_by_position():
    """The decoder's cache passed by position (its fourth argument, ``past_key_values`` in 5.23, ``cache`` in 5.24)
    is seen as by keyword: the step's logits equal the full forward's."""
    model = ndpe.hf.use(fresh("llama"), "alibi")
    ids = torch.randint(0, 61, (1, 7))
    with torch.no_grad():
        first = model.model(ids[:, :6], use_cache=True)
        hidden = model.model(ids[:, 6:], None, None, first[CACHE], use_cache=True).last_hidden_state
        torch.testing.assert_close(model.lm_head(hidden)[:, -1], model(ids).logits[:, -1], rtol=1e-4, atol=1e-4)
