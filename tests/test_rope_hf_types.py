"""HF rope types that transformers' default configs do not build (their validation refuses the checkpoints' keys),
pinned with hand-made configs against the models' own rotary embeddings.

- Hunyuan's ``ntk_alpha`` (``rope_type="dynamic"`` with a fixed ``alpha``, HF's ``compute_ntk_alpha_rope_parameters``
  in ``HunYuanDenseV1RotaryEmbedding`` / ``HunYuanMoEV1RotaryEmbedding`` / ``HunYuanVLRotaryEmbedding``): the table's
  ``"ntk"`` entry with ``scale = alpha`` (:meth:`ndpe.RopeScaling.from_hf`).
- HunYuanVL's ``xdrope``: not a rotation (a channel pair's two halves turn by the angles of two different axes), so no
  ``rope`` equals it; shown here, and ``from_hf_rope`` should refuse it (an expected failure until it does).
- Gemma 4's ``proportional`` type is pinned in ``tests/test_rope_hf.py`` (``ROPE_INIT_FUNCTIONS``) and
  ``tests/test_hf_models.py`` (``Gemma4TextModel``).
"""
from __future__ import annotations

import pytest
import torch

import ndpe
from ndpe.scaling_config import RopeScaling
from tests.conftest import assert_tells_apart

transformers = pytest.importorskip("transformers")
from transformers.models.hunyuan_v1_dense import modeling_hunyuan_v1_dense as dense  # noqa: E402
from transformers.models.hunyuan_v1_moe import modeling_hunyuan_v1_moe as moe  # noqa: E402
from transformers.models.hunyuan_vl import modeling_hunyuan_vl as vl  # noqa: E402
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb  # noqa: E402

transformers.logging.set_verbosity_error()  # HF warns about the checkpoints' `alpha` key


def hunyuan_config(cls, head_dim, **rope_parameters):
    """A hand-made config as Hunyuan's checkpoints write it (``factor`` beside ``alpha`` so that HF's validation of
    ``"dynamic"`` passes)."""
    return cls(vocab_size=64, hidden_size=2 * head_dim, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
               num_key_value_heads=2, head_dim=head_dim, max_position_embeddings=512, rope_parameters=rope_parameters)


CONFIGS = {"dense": (dense.HunYuanDenseV1Config, dense.HunYuanDenseV1RotaryEmbedding),
           "moe": (moe.HunYuanMoEV1Config, moe.HunYuanMoEV1RotaryEmbedding)}


def ours(config, **changes):
    params = {**config.rope_parameters, **changes}
    scaling = RopeScaling.from_hf(params, config.max_position_embeddings)
    return ndpe.make(dims=1, kind="rope", dim=config.head_dim, theta=params["rope_theta"], scaling=scaling)


@pytest.mark.parametrize("family", list(CONFIGS))
@pytest.mark.parametrize("head_dim,theta,alpha", [(32, 10000.0, 1000.0), (64, 1e5, 50.0), (128, 10000.0, 3.5)])
def test_ntk_alpha_equals_hunyuans_rotary_embedding(family, head_dim, theta, alpha):
    config_cls, rotary_cls = CONFIGS[family]
    config = hunyuan_config(config_cls, head_dim, rope_type="dynamic", alpha=alpha, factor=1.0, rope_theta=theta)
    rotary = rotary_cls(config)
    assert rotary.rope_type == "ntk_alpha"  # HF reads the checkpoint as its static type
    pe = ours(config)
    assert pe.scaling == "ntk" and pe.scale == (alpha,)
    torch.testing.assert_close(pe.inv_freq, rotary_cls.compute_ntk_alpha_rope_parameters(config)[0].double(),
                               rtol=2e-6, atol=0)
    pos = torch.arange(400)[None]
    q = torch.randn(1, 2, 400, head_dim, generator=torch.Generator().manual_seed(0))
    ref, _ = apply_rotary_pos_emb(q, q, *rotary(q, pos))
    wrong = ours(config, alpha=alpha / 2)  # half the alpha: another base
    rotate = lambda pe: ndpe.apply_qk(q, q, pe(positions=pos[0, :, None].double()))[0]  # noqa: E731
    assert_tells_apart(rotate(pe), rotate(wrong), ref, rtol=0, atol=2e-4)  # HF's float32 angles: ~6e-8 x position
    # "dynamic" without alpha stays dynamic NTK; the type's own name reads the same
    assert RopeScaling.from_hf({"rope_type": "dynamic", "factor": 2.0}, 512).type == "dynamic-ntk"
    assert RopeScaling.from_hf({"rope_type": "ntk_alpha", "alpha": alpha}, 512) == RopeScaling("ntk", scale=alpha)


def test_ntk_alpha_needs_its_alpha():
    with pytest.raises(ValueError, match=r"needs rope_parameters\['alpha'\]"):
        RopeScaling.from_hf({"rope_type": "ntk_alpha", "factor": 2.0}, 512)


def xdrope(head_dim=32, section=(4, 4, 4, 4)):
    config = vl.HunYuanVLTextConfig(vocab_size=64, hidden_size=2 * head_dim, intermediate_size=64, num_hidden_layers=1,
                                    num_attention_heads=2, num_key_value_heads=2, head_dim=head_dim,
                                    max_position_embeddings=512, rope_parameters={
                                        "rope_type": "default", "rope_theta": 10000.0, "xdrope_section": list(section)})
    n = len(section)  # (position, width, height, image index); text tokens: all equal
    pos = torch.stack([torch.arange(6), torch.tensor([0, 1, 2, 0, 1, 2]), torch.tensor([0, 0, 0, 1, 1, 1]),
                       torch.zeros(6, dtype=torch.long)])[-n:, None]
    return config, pos


def test_xdrope_is_no_rotation():
    """Frequency j's cos on channel j and on its partner j + head_dim / 2 come from two different axes: equal on text
    tokens (every axis the same position), apart on image tokens, so the pair is not rotated by one angle."""
    config, pos = xdrope()
    rotary = vl.HunYuanVLRotaryEmbedding(config)
    cos, _ = rotary(torch.zeros(1), pos)
    text, _ = rotary(torch.zeros(1), pos[:1].expand_as(pos))
    half = config.head_dim // 2
    torch.testing.assert_close(text[..., :half], text[..., half:])
    assert (cos[..., :half] - cos[..., half:]).abs().max() > 0.5


def test_from_hf_rope_refuses_xdrope():
    config, _ = xdrope(section=(8, 4, 4))
    with pytest.raises(ValueError, match="xdrope"):
        ndpe.from_hf_rope(config)


def test_from_hf_rope_reads_ntk_alpha():
    config = hunyuan_config(dense.HunYuanDenseV1Config, 32, rope_type="dynamic", alpha=1000.0, factor=1.0,
                            rope_theta=10000.0)
    torch.testing.assert_close(ndpe.from_hf_rope(config).inv_freq, ours(config).inv_freq)
