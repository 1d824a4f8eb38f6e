"""Tiny random Hugging Face models of 2025 (transformers 5.23) with their rope swapped for ndpe's give their own
outputs: Gemma 3 (sliding and full layers), Gemma 4 text (per-layer head sizes, p-RoPE on full layers), Llama 4 text
(rope and no-rope layers, with its attention temperature tuning), Llama 4 vision (1-based xy coordinates, class token
last) and Gemma 4 vision (``apply_multidimensional_rope``). The recipes are in docs/integrations.md."""
from __future__ import annotations

import pytest
import torch
from einops import rearrange

import ndpe
from tests.conftest import assert_tells_apart, sharpen_attention

pytest.importorskip("transformers")
pytestmark = pytest.mark.peers  # also run against the newest transformers and timm (scripts/test_peers.sh)
from transformers import Gemma3TextConfig, Gemma4TextConfig, Gemma4VisionConfig, Llama4TextConfig, Llama4VisionConfig  # noqa: E402,E501
from transformers.models.gemma3.modeling_gemma3 import Gemma3TextModel  # noqa: E402
from transformers.models.gemma4 import modeling_gemma4  # noqa: E402
from transformers.models.llama4.modeling_llama4 import Llama4TextModel, Llama4VisionModel  # noqa: E402


def swap_layer_type_ropes(model, config, monkeypatch):
    """``model.rotary_emb(x, position_ids, layer_type)`` from ndpe: one rope per layer type (``from_hf_rope``)."""
    ropes = ndpe.from_hf_rope(config)
    monkeypatch.setattr(model.rotary_emb, "forward", lambda x, position_ids, layer_type:
                        ndpe.hf_cos_sin(ropes[layer_type], position_ids, dtype=x.dtype))
    return ropes


def test_gemma3_local_and_global_layers(monkeypatch):
    torch.manual_seed(0)
    config = Gemma3TextConfig(vocab_size=64, hidden_size=64, intermediate_size=64, num_hidden_layers=4,
                              num_attention_heads=2, num_key_value_heads=1, head_dim=32, sliding_window=8,
                              sliding_window_pattern=2,
                              rope_parameters=dict(sliding_attention=dict(rope_type="default", rope_theta=10000.0),
                                                   full_attention=dict(rope_type="linear", factor=8.0,
                                                                       rope_theta=1e6)))
    model = sharpen_attention(Gemma3TextModel(config).eval())  # positions must matter (tests/conftest.py)
    assert set(config.layer_types) == {"sliding_attention", "full_attention"}
    tokens = torch.randint(0, 64, (2, 20))
    with torch.no_grad():
        ref = model(input_ids=tokens).last_hidden_state
        ropes = swap_layer_type_ropes(model, config, monkeypatch)
        out = model(input_ids=tokens).last_hidden_state
        ropes["full_attention"] = ropes["sliding_attention"]  # one rope for both: visibly another model
        other = model(input_ids=tokens).last_hidden_state
    assert_tells_apart(out, other, ref, rtol=1e-4, atol=1e-4)


def test_gemma4_text_per_layer_head_dim_and_p_rope(monkeypatch):
    """Gemma 4: sliding layers head_dim 16 theta 10k; full layers head_dim 32, theta 1M, p-RoPE keeping 1/4."""
    torch.manual_seed(0)
    config = Gemma4TextConfig(vocab_size=64, hidden_size=64, intermediate_size=64, num_hidden_layers=6,
                              num_attention_heads=2, num_key_value_heads=1, head_dim=16, global_head_dim=32,
                              hidden_size_per_layer_input=8, vocab_size_per_layer_input=64)
    model = sharpen_attention(Gemma4TextModel(config).eval())  # positions must matter (tests/conftest.py)
    tokens = torch.randint(0, 64, (2, 20))
    with torch.no_grad():
        ref = model(input_ids=tokens).last_hidden_state
        ropes = swap_layer_type_ropes(model, config, monkeypatch)
        assert (ropes["full_attention"].head_dim, ropes["full_attention"].proportion) == (32, 0.25)
        out = model(input_ids=tokens).last_hidden_state
        ropes["full_attention"] = ndpe.make(dims=1, kind="rope", dim=32, theta=1e6)  # all pairs rotating
        other = model(input_ids=tokens).last_hidden_state
    assert_tells_apart(out, other, ref, rtol=1e-4, atol=1e-4)


Gemma4TextModel = modeling_gemma4.Gemma4TextModel


def llama4_freqs_cis(pe, position_ids):
    """Llama 4's complex ``freqs_cis`` ``(B, T, head_dim / 2)`` from ndpe's interleaved rope."""
    cos, sin = pe(positions=position_ids[..., None].double()).rot  # (B, 1, T, head_dim / 2)
    return torch.complex(cos[:, 0], sin[:, 0])


@pytest.mark.parametrize("scaling", [None, "llama3"])
def test_llama4_text_rope_and_no_rope_layers(scaling, monkeypatch):
    """Every 4th layer has no rope and scales its queries by Llama 4's attention temperature (the model's own code
    path, untouched); the rope layers use ndpe's rope."""
    torch.manual_seed(0)
    rope = dict(rope_type="default", rope_theta=5e5) if scaling is None else dict(
        rope_type="llama3", rope_theta=5e5, factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
        original_max_position_embeddings=16)
    config = Llama4TextConfig(vocab_size=64, hidden_size=64, num_attention_heads=2, num_key_value_heads=1, head_dim=32,
                              num_hidden_layers=4, intermediate_size=64, intermediate_size_mlp=64, num_local_experts=2,
                              attn_temperature_tuning=True, floor_scale=4, attn_scale=0.1, rope_parameters=rope)
    assert config.no_rope_layers == [1, 1, 1, 0]
    model = sharpen_attention(Llama4TextModel(config).eval())  # positions must matter (tests/conftest.py)
    tokens = torch.randint(0, 64, (2, 24))
    with torch.no_grad():
        ref = model(input_ids=tokens).last_hidden_state
        pe = ndpe.from_hf_rope(config, pairing="interleaved")
        monkeypatch.setattr(model.rotary_emb, "forward", lambda x, position_ids: llama4_freqs_cis(pe, position_ids))
        out = model(input_ids=tokens).last_hidden_state
        pe = ndpe.from_hf_rope(config, pairing="interleaved", theta=1e4)  # another theta: visibly another model
        other = model(input_ids=tokens).last_hidden_state
    assert_tells_apart(out, other, ref, rtol=1e-4, atol=1e-4)


def llama4_vision_rope(grid: int, head_dim: int, heads: int, theta: float):
    """Llama 4's vision ``freqs_ci`` ``(N + 1, 1, head_dim / 2)``: columns first (xy), 1-based coordinates, the class
    token last at position 0 (not rotated)."""
    pe = ndpe.make(dims=2, kind="rope", dim=head_dim * heads, heads=heads, theta=theta, pairing="interleaved",
                   grid_indexing="xy")
    positions = torch.cat([pe.coords((grid, grid)) + 1, torch.zeros(1, 2)])
    cos, sin = pe(positions=positions).rot  # (1, N + 1, head_dim / 2)
    return rearrange(torch.complex(cos, sin), "1 n f -> n 1 f")


def encoded(model, x):
    """The vision encoder's output tokens (before the adapter, whose 0.02-std MLP shrinks them 100-fold)."""
    return model(x, output_hidden_states=True).hidden_states[-1]


@pytest.mark.parametrize("image_size", [16, 24])
def test_llama4_vision_model(image_size):
    torch.manual_seed(0)
    config = Llama4VisionConfig(hidden_size=32, num_attention_heads=2, num_hidden_layers=2, intermediate_size=128,
                                image_size=image_size, patch_size=4, vision_output_dim=32, projector_input_dim=32,
                                projector_output_dim=32, pixel_shuffle_ratio=0.5)
    model = sharpen_attention(Llama4VisionModel(config).eval())  # positions must matter (tests/conftest.py)
    x = torch.randn(2, 3, image_size, image_size)
    with torch.no_grad():
        ref = encoded(model, x)
        freqs = llama4_vision_rope(image_size // 4, 16, 2, config.rope_parameters["rope_theta"])
        torch.testing.assert_close(freqs, model.rotary_embedding.freqs_ci, rtol=0, atol=1e-5)
        model.rotary_embedding.freqs_ci = freqs
        out = encoded(model, x)
        model.rotary_embedding.freqs_ci = rearrange(  # 0-based coordinates: another encoding
            torch.complex(*ndpe.make(dims=2, kind="rope", dim=32, heads=2, pairing="interleaved", grid_indexing="xy")(
                (image_size // 4, image_size // 4), num_prefix=1).rot), "1 n f -> n 1 f").roll(-1, 0)
        other = encoded(model, x)
    assert_tells_apart(out, other, ref, rtol=1e-5, atol=1e-5)


def gemma4_multidimensional_rope(pe):
    """Gemma 4's ``apply_multidimensional_rope`` from ndpe's rope: Gemma rotates each axis' block with rotate_half
    inside the block (channels ``(axis, half, freq)``), ndpe's ``pairing="half"`` pairs across the rotated channels
    (``(half, axis, freq)``): the same rotation after one fixed channel permutation, undone afterwards."""
    def apply(x, cos, sin, position_ids, unsqueeze_dim=2):  # x (B, L, heads, head_dim), position_ids (B, L, 2)
        xt = rearrange(x, "b l h (a two f) -> b h l (two a f)", a=pe.dims, two=2)
        y = ndpe.apply_qk(xt, xt, pe(positions=position_ids.float()))[0]
        return rearrange(y, "b h l (two a f) -> b l h (a two f)", a=pe.dims, two=2)
    return apply


@pytest.mark.parametrize("grid", [(4, 4), (3, 6)], ids=str)
def test_gemma4_vision_multidimensional_rope(grid, monkeypatch):
    torch.manual_seed(0)
    config = Gemma4VisionConfig(hidden_size=64, num_attention_heads=2, num_key_value_heads=2, head_dim=32, num_hidden_layers=2,
                                intermediate_size=64, patch_size=4)
    model = sharpen_attention(modeling_gemma4.Gemma4VisionModel(config).eval())  # positions must matter
    encoder = model.encoder if hasattr(model, "encoder") else model
    n = grid[0] * grid[1]
    xy = torch.stack(torch.meshgrid(torch.arange(grid[1]), torch.arange(grid[0]), indexing="xy"), -1).reshape(n, 2)
    positions = xy[None].expand(2, n, 2)  # (x, y) per patch, as Gemma 4's processor gives them
    embeds, mask = torch.randn(2, n, 64), None  # no padding
    pe = ndpe.from_hf_rope(config)
    assert pe.axis_dims == (16, 16)
    with torch.no_grad():
        ref = encoder(inputs_embeds=embeds, attention_mask=mask, pixel_position_ids=positions).last_hidden_state
        monkeypatch.setattr(modeling_gemma4, "apply_multidimensional_rope", gemma4_multidimensional_rope(pe))
        out = encoder(inputs_embeds=embeds, attention_mask=mask, pixel_position_ids=positions).last_hidden_state
        plain = lambda x, cos, sin, position_ids, unsqueeze_dim=2: rearrange(  # noqa: E731  no permutation
            ndpe.apply_qk(*[rearrange(x, "b l h d -> b h l d")] * 2, pe(positions=position_ids.float()))[0],
            "b h l d -> b l h d")
        monkeypatch.setattr(modeling_gemma4, "apply_multidimensional_rope", plain)
        other = encoder(inputs_embeds=embeds, attention_mask=mask, pixel_position_ids=positions).last_hidden_state
    assert_tells_apart(out, other, ref, rtol=1e-5, atol=1e-5)
