"""M-RoPE (rope's mrope_section / mrope_interleaved) pinned against transformers' Qwen2-VL and Qwen3-VL
rotary embeddings, with (t, h, w) position ids from Qwen2-VL's get_rope_index (image, video, mixed text)."""
from __future__ import annotations

import functools
from types import SimpleNamespace

import pytest
import torch

import ndpe
from tests.conftest import assert_tells_apart, sharpen_attention

pytest.importorskip("transformers")
pytestmark = pytest.mark.peers  # also run against the newest transformers and timm (scripts/test_peers.sh)
from transformers import Qwen2VLTextConfig  # noqa: E402
from transformers.models.qwen2_vl.modeling_qwen2_vl import (  # noqa: E402
    Qwen2VLModel, Qwen2VLRotaryEmbedding, apply_rotary_pos_emb)
from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLTextConfig  # noqa: E402
from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLTextRotaryEmbedding  # noqa: E402

IMAGE, VIDEO = 1, 2


def rope_index(token_types, image_grid_thw=None, video_grid_thw=None, merge=2):
    """HF's Qwen2VLModel.get_rope_index on a stand-in self (it only reads the vision merge size)."""
    fake = SimpleNamespace(config=SimpleNamespace(vision_config=SimpleNamespace(spatial_merge_size=merge)))
    fake.get_vision_position_ids = functools.partial(Qwen2VLModel.get_vision_position_ids, fake)
    types = torch.tensor(token_types)
    ids = torch.zeros_like(types)
    grid = (lambda g: None if g is None else torch.tensor(g))
    return Qwen2VLModel.get_rope_index(fake, ids, types, grid(image_grid_thw), grid(video_grid_thw))[0]  # (3, B, T)


def sequences():
    """(name, token types (B, T), image grids, video grids): pure image, pure video, text + image + text + video."""
    img = [[1, 8, 12]]  # t, h, w patches before the 2x2 merge: 4 x 6 tokens
    vid = [[3, 4, 6]]   # 3 x 2 x 3 tokens
    mixed = [0] * 5 + [IMAGE] * 24 + [0] * 4 + [VIDEO] * 18 + [0] * 3
    return [("image", [[IMAGE] * 24], img, None), ("video", [[VIDEO] * 18], None, vid),
            ("mixed", [mixed, mixed], img * 2, vid * 2)]


def qwen2_rotary(head_dim, section, theta=1e6):
    cfg = Qwen2VLTextConfig(hidden_size=head_dim * 2, num_attention_heads=2, num_key_value_heads=2,
                            rope_parameters=dict(rope_type="default", rope_theta=theta, mrope_section=list(section)))
    return cfg, Qwen2VLRotaryEmbedding(cfg)


def qwen3_rotary(head_dim, section, theta=5e6):
    cfg = Qwen3VLTextConfig(hidden_size=head_dim * 2, num_attention_heads=2, num_key_value_heads=2, head_dim=head_dim,
                            rope_parameters=dict(rope_type="default", rope_theta=theta, mrope_section=list(section),
                                                 mrope_interleaved=True))
    return cfg, Qwen3VLTextRotaryEmbedding(cfg)


CASES = [("qwen2", 128, (16, 24, 24)), ("qwen2", 64, (8, 12, 12)), ("qwen2", 32, (4, 6, 6)),
         ("qwen3", 128, (24, 20, 20)), ("qwen3", 64, (12, 10, 10)), ("qwen3", 32, (6, 5, 5))]


@pytest.mark.parametrize("family,head_dim,section", CASES, ids=[f"{f}-{d}" for f, d, _ in CASES])
@pytest.mark.parametrize("seq", sequences(), ids=lambda s: s[0])
def test_cos_sin_and_rotation_match_qwen_vl(family, head_dim, section, seq):
    _, types, img, vid = seq
    position_ids = rope_index(types, img, vid)
    cfg, hf = (qwen2_rotary if family == "qwen2" else qwen3_rotary)(head_dim, section)
    pe = ndpe.make(dims=3, kind="rope", dim=head_dim * 2, heads=2, theta=cfg.rope_parameters["rope_theta"],
                   mrope_section=section, mrope_interleaved=family == "qwen3")
    other = pe.replace(mrope_interleaved=family != "qwen3")  # the other family's layout
    hf_cos, hf_sin = hf(torch.zeros(1), position_ids)
    cos, sin = ndpe.hf_cos_sin(pe, position_ids)
    wrong_cos, wrong_sin = ndpe.hf_cos_sin(other, position_ids)
    atol = 2e-7 * float(position_ids.max()) + 2e-6
    assert_tells_apart(cos, wrong_cos, hf_cos, rtol=0, atol=atol)
    assert_tells_apart(sin, wrong_sin, hf_sin, rtol=0, atol=atol)
    # the rotation itself, through ndpe's own (B, 1, T, rot/2) output and apply_qk
    B, T = position_ids.shape[1:]
    q, k = torch.randn(B, 2, T, head_dim), torch.randn(B, 2, T, head_dim)
    positions = position_ids.permute(1, 2, 0).float()
    for a, b, c in zip(ndpe.apply_qk(q, k, pe(positions=positions)),
                       apply_rotary_pos_emb(q, k, hf_cos, hf_sin), ndpe.apply_qk(q, k, other(positions=positions))):
        assert_tells_apart(a, c, b, rtol=1e-5, atol=1e-4)


def test_from_hf_rope_reads_mrope_configs():
    cfg2, hf2 = qwen2_rotary(64, (8, 12, 12))
    cfg3, hf3 = qwen3_rotary(64, (12, 10, 10))
    position_ids = rope_index(*sequences()[2][1:])
    for cfg, hf in ((cfg2, hf2), (cfg3, hf3)):
        pe = ndpe.from_hf_rope(cfg)
        assert pe.mrope_interleaved == (cfg is cfg3)
        torch.testing.assert_close(ndpe.hf_cos_sin(pe, position_ids)[0], hf(torch.zeros(1), position_ids)[0],
                                   rtol=0, atol=1e-4)


def test_sections_share_one_series():
    """mrope_section cuts ONE series theta^(-2j/D); text ids (t = h = w) give plain 1D RoPE over D channels."""
    pe = ndpe.make(dims=3, kind="rope", dim=64, heads=1, mrope_section=(8, 12, 12))
    plain = ndpe.make(dims=1, kind="rope", dim=64, heads=1)
    torch.testing.assert_close(pe.inv_freq, plain.inv_freq)
    ids = torch.arange(20.0)[:, None]
    torch.testing.assert_close(pe(positions=ids.expand(20, 3)).rot[0], plain(positions=ids).rot[0])
    # a grid: frequencies 0..7 turn with t, 8..19 with h, 20..31 with w
    cos = pe((2, 3, 4)).rot[0][0]
    coords = pe.coords((2, 3, 4))
    torch.testing.assert_close(cos[:, 8:20], torch.cos(coords[:, 1:2].double() * pe.inv_freq[8:20]).float())
    assert pe.freq_axis.tolist() == [0] * 8 + [1] * 12 + [2] * 12
    inter = ndpe.make(dims=3, kind="rope", dim=64, heads=1, mrope_section=(12, 10, 10), mrope_interleaved=True)
    assert inter.freq_axis.tolist()[:6] == [0, 1, 2, 0, 1, 2] and inter.freq_axis.tolist()[-2:] == [0, 0]
    assert [inter.freq_axis.tolist().count(a) for a in range(3)] == [12, 10, 10]


@pytest.mark.parametrize("opts,err,match", [
    (dict(mrope_section=(8, 12, 12), axis_dims=(16, 24, 24)), ValueError, "not both"),
    (dict(mrope_section=(16, 12, 12)), ValueError, "1 to head_dim / 2 = 32"),
    (dict(mrope_section=(8, 12)), ValueError, "mrope_section must be"),
    (dict(mrope_section=(8, 12, 12), theta=(1e4, 1e4, 100.0)), ValueError, "theta must be one number"),
    (dict(mrope_section=(8, 12, 12), scaling="linear", scale=2.0), ValueError, "takes no scaling"),
    (dict(mrope_interleaved=True), ValueError, "needs mrope_section"),
    (dict(mrope_section=(8, 12, 12), mrope_interleaved=1), TypeError, "mrope_interleaved must be a bool"),
])
def test_bad_mrope_options(opts, err, match):
    with pytest.raises(err, match=match):
        ndpe.make(dims=3, kind="rope", dim=64, **opts)


def test_tiny_qwen2_vl_text_model_outputs_with_ndpe_mrope(monkeypatch):
    """Swap ndpe's M-RoPE cos/sin into a small random Qwen2-VL text model: same hidden states for text + image + video ids."""
    from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLTextModel

    torch.manual_seed(0)
    section = (4, 6, 6)  # head_dim 32
    cfg = Qwen2VLTextConfig(vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                            num_attention_heads=2, num_key_value_heads=2,
                            rope_parameters=dict(rope_type="default", rope_theta=1e6, mrope_section=list(section)))
    model = sharpen_attention(Qwen2VLTextModel(cfg).eval())  # positions must matter (tests/conftest.py)
    _, types, img, vid = sequences()[2]  # text + image + text + video, batch of 2
    position_ids = rope_index(types, img, vid)  # (3, B, T)
    tokens = torch.randint(0, 64, position_ids.shape[1:])
    with torch.no_grad():
        reference = model(input_ids=tokens, position_ids=position_ids).last_hidden_state
        pe = ndpe.from_hf_rope(cfg)
        monkeypatch.setattr(model.rotary_emb, "forward",
                            lambda x, position_ids: ndpe.hf_cos_sin(pe, position_ids, dtype=x.dtype))
        swapped = model(input_ids=tokens, position_ids=position_ids).last_hidden_state
        pe = ndpe.from_hf_rope(cfg, mrope_interleaved=True)  # Qwen3-VL's layout: another model (the lambda reads pe)
        other = model(input_ids=tokens, position_ids=position_ids).last_hidden_state
    assert_tells_apart(swapped, other, reference, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("head_dim,section", [(72, (8, 12, 12)), (64, (8, 12, 12)), (36, (6, 6, 6)), (64, (10, 8, 8))])
@pytest.mark.parametrize("grid", [(4, 4), (3, 5), (1, 6)], ids=str)
def test_equals_timm_rotary_embedding_mrope(head_dim, section, grid):
    """timm's RotaryEmbeddingMRope (GenLIP / NaFlexVit ``rope_type='mrope'``): the interleaved layout over the whole
    head, temporal ids 0 on an image. Its temporal axis takes every frequency that h and w leave, so ndpe's section is
    ``(head_dim / 2 - s_h - s_w, s_h, s_w)`` (equal to timm's where its sections tile the head) on the grid (1, H, W)."""
    timm_layers = pytest.importorskip("timm.layers.pos_embed_sincos")
    peer = timm_layers.RotaryEmbeddingMRope(head_dim, mrope_section=section, temperature=1e4)
    q = torch.randn(2, 3, grid[0] * grid[1], head_dim)
    ref = timm_layers.apply_rot_embed_cat(q, peer.get_embed(list(grid)), half=True)
    pe = ndpe.make(dims=3, kind="rope", dim=head_dim, mrope_section=(head_dim // 2 - section[1] - section[2], *section[1:]),
                   mrope_interleaved=True)
    other = pe.replace(mrope_interleaved=False)  # Qwen2-VL's sections: another layout
    assert_tells_apart(ndpe.apply_qk(q, q, pe((1, *grid)))[0], ndpe.apply_qk(q, q, other((1, *grid)))[0], ref,
                       rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("section", [[8, 8], [4, 4, 4, 4], [16]])
def test_from_hf_rope_refuses_an_mrope_section_that_is_not_t_h_w(section):
    """HF's M-RoPE splits (3, B, T) ids: a section of another length is a config error, not a 2-D or 4-D rope."""
    cfg = SimpleNamespace(head_dim=64, rope_parameters={"rope_type": "default", "rope_theta": 1e4,
                                                        "mrope_section": section})
    with pytest.raises(ValueError, match=r"mrope_section'\] must have 3 entries.*got \[" + str(section[0])):
        ndpe.from_hf_rope(cfg)
    cfg.rope_parameters["mrope_section"] = [8, 12, 12]
    assert ndpe.from_hf_rope(cfg).dims == 3
