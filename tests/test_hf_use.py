"""``ndpe.hf.use(model, kind)``: any 1D kind in a Hugging Face decoder of the Llama family (transformers 5.23):
Llama, Qwen2, Mistral and Gemma. ``rope`` (from the config) gives the model's own logits; every kind that decodes
generates the same tokens with and without the KV cache, and its cached logits equal the full forward's."""
from __future__ import annotations

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


# every 1D kind that keeps the width; the test asks each whether it decodes (a refusal skips it, never collection)
DECODING = [k for k, dims in ndpe.available().items() if 1 in dims and build(k, 1).cat_dim == 0]

def cached_logits(model, ids, split):
    """Logits of ``ids`` fed as a prompt of ``split`` tokens, then one token at a time through the KV cache."""
    out = model(ids[:, :split], use_cache=True)
    cache, steps = out.past_key_values, [out.logits]
    for i in range(split, ids.shape[1]):
        out = model(ids[:, i:i + 1], past_key_values=cache, use_cache=True)
        cache = out.past_key_values
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


@pytest.mark.parametrize("kind,opts,match", [("xpos", {}, "fixed center"), ("fire", {}, "causal=True"),
                                             ("learned", {"grid_shape": (8,), "resize": "linear"}, "resize=None")])
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
