"""Every rotary layout transformers ships, through ``ndpe.from_hf_rope`` and ``ndpe.hf.use(model, "rope")``: half pairs
(Llama), interleaved pairs (Cohere, GLM over part of the head, GLM-OCR's M-RoPE), complex ``freqs_cis`` (Llama 4), one
cos per pair (GPT-OSS), an odd rotary width (Glm4Moe's default: 21 channels, 11 pairs); each equals the model's own
rope at a sharpened attention (the layout ndpe used before is > 100 x the tolerance away), or is refused in one line."""
from __future__ import annotations

import pytest
import torch

import ndpe
from tests.conftest import assert_tells_apart, sharpen_attention

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.peers

from ndpe.hf_rotary import ModelRotary  # noqa: E402

SMALL = dict(vocab_size=61, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=256, pad_token_id=0, bos_token_id=1, eos_token_id=2)
# family: (causal LM class, config class, config changes, the options of ndpe's layout before: another model)
LAYOUTS = {
    "cohere": ("CohereForCausalLM", "CohereConfig", {}, dict(pairing="half", theta=5e5)),
    "cohere2": ("Cohere2ForCausalLM", "Cohere2Config", {}, dict(pairing="half", theta=5e5)),
    "llama4": ("Llama4ForCausalLM", "Llama4TextConfig", dict(head_dim=8, intermediate_size_mlp=64, num_local_experts=2,
                                                             attn_temperature_tuning=False),
               dict(pairing="half", theta=5e5)),
    "glm": ("GlmForCausalLM", "GlmConfig", dict(head_dim=8), dict(pairing="half", axis_dims=(4,))),
    "gpt_oss": ("GptOssForCausalLM", "GptOssConfig", dict(head_dim=8, num_local_experts=2, num_experts_per_tok=1,
                                                          layer_types=["full_attention"] * 2),
                dict(pairing="interleaved", theta=1.5e5)),
    # head_dim 14 x 0.5 = 7 channels: HF rotates 4 pairs, exponents over 7 (ndpe used to rotate 3 over 6)
    "glm4_moe_odd": ("Glm4MoeForCausalLM", "Glm4MoeConfig", dict(hidden_size=56, n_routed_experts=2, num_experts_per_tok=1,
                                                                 moe_intermediate_size=32, first_k_dense_replace=1),
                     dict(pairing="half", axis_dims=(6,))),
}


def tiny(family: str):
    model_cls, config_cls, changes, _ = LAYOUTS[family]
    config = getattr(transformers, config_cls)(**{**SMALL, **changes})
    torch.manual_seed(0)
    return sharpen_attention(getattr(transformers, model_cls)(config).eval())


@pytest.mark.parametrize("family", list(LAYOUTS))
def test_every_layout_is_the_models_own_rope(family):
    model, ids = tiny(family), torch.randint(3, 61, (2, 24))
    with torch.no_grad():
        ref = model(ids).logits
        out = ndpe.hf.use(model, "rope")(ids).logits
        before = ndpe.hf.use(tiny(family), "rope", **LAYOUTS[family][3])(ids).logits  # the layout ndpe used before
    assert_tells_apart(out, before, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("family", list(LAYOUTS))
def test_from_hf_rope_gives_the_models_cos_sin(family):
    """``from_hf_rope(config)`` in the model's form (:class:`ModelRotary`) is what its ``rotary_emb`` returns."""
    model = tiny(family)
    rotary = ModelRotary(model.model)
    ids = torch.arange(40)[None]
    own, mine = rotary.own(torch.zeros(1, 40, 1), ids), rotary.cos_sin(ndpe.from_hf_rope(model.config), ids)
    own, mine = (own, mine) if isinstance(own, tuple) else ((own.real, own.imag), (mine.real, mine.imag))
    for a, b in zip(mine, own):
        torch.testing.assert_close(a.float(), b.float(), rtol=1e-5, atol=1e-5)


def test_odd_width_follows_transformers():
    """Glm4Moe's default (head_dim 42 x 0.5 = 21 channels): 11 pairs, ``theta ** (-2j / 21)``, as HF's init."""
    from transformers import Glm4MoeConfig
    from transformers.models.glm4_moe.modeling_glm4_moe import Glm4MoeRotaryEmbedding

    config = Glm4MoeConfig()
    pe = ndpe.from_hf_rope(config)
    assert pe.rot_dim == 22
    torch.testing.assert_close(pe.inv_freq.float(), Glm4MoeRotaryEmbedding(config).inv_freq, rtol=1e-6, atol=0)
    with pytest.raises(ValueError, match="odd rotary width") as err:
        ndpe.from_hf_rope(Glm4MoeConfig(rope_parameters=dict(rope_type="yarn", factor=4.0, rope_theta=1e4,
                                                             partial_rotary_factor=0.5)))
    assert "\n" not in str(err.value)


def test_glm_ocr_text_mrope_pairs_interleaved():
    """GLM-OCR's text rope: M-RoPE sections with interleaved pairs (``repeat_interleave``)."""
    from transformers.models.glm_ocr.configuration_glm_ocr import GlmOcrTextConfig
    from transformers.models.glm_ocr.modeling_glm_ocr import GlmOcrTextRotaryEmbedding

    config = GlmOcrTextConfig(rope_parameters=dict(rope_type="default", rope_theta=1e4, mrope_section=[8, 12, 12]))
    pe = ndpe.from_hf_rope(config)
    assert pe.pairing == "interleaved" and pe.mrope_section is not None
    ids = torch.stack([torch.arange(30), torch.arange(30) % 5, torch.arange(30) // 5])[:, None]  # (3, 1, T)
    cos, sin = GlmOcrTextRotaryEmbedding(config)(torch.zeros(1), ids)
    rot = pe(positions=ids.permute(1, 2, 0).double()).rot
    torch.testing.assert_close(rot[0][:, 0].repeat_interleave(2, -1), cos, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(rot[1][:, 0].repeat_interleave(2, -1), sin, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("model_type", ["nanochat", "ernie4_5_vl_moe_text"])
def test_layouts_without_an_equivalent_are_refused(model_type):
    config = transformers.AutoConfig.for_model(model_type)
    with pytest.raises(ValueError, match="no ndpe equivalent") as err:
        ndpe.from_hf_rope(config)
    assert "\n" not in str(err.value)
