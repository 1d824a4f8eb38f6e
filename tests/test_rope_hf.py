"""RoPE scaling pinned against Hugging Face transformers (ROPE_INIT_FUNCTIONS, LlamaRotaryEmbedding, a tiny
LlamaForCausalLM), ndpe.from_hf_rope / ndpe.hf_cos_sin, and the recipes of docs/integrations.md."""
from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

import ndpe
from tests.conftest import assert_tells_apart, sharpen_attention

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.peers  # also run against the newest transformers and timm (scripts/test_peers.sh)
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: E402
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb  # noqa: E402

transformers.logging.set_verbosity_error()  # HF warns about unusual (test) rope parameters


def hf_config(head_dim, max_pos=4096, heads=2, **rope_parameters):
    return LlamaConfig(hidden_size=head_dim * heads, num_attention_heads=heads, num_key_value_heads=heads,
                       head_dim=head_dim, max_position_embeddings=max_pos, rope_parameters=rope_parameters)


def close(ndpe_out, hf_out, max_pos):
    """HF computes angles in float32 (error ~ eps * position), ndpe in float64."""
    torch.testing.assert_close(ndpe_out, hf_out, rtol=0, atol=2e-7 * max_pos + 2e-6)


def longrope_factors(n, seed):
    g = torch.Generator().manual_seed(seed)
    return (1 + 3 * torch.rand(n, generator=g, dtype=torch.float64)).tolist()


CASES = [
    # (head_dim, theta, rope_parameters beyond rope_type / rope_theta, max_position_embeddings)
    *[(d, th, dict(rope_type="llama3", factor=f, low_freq_factor=lo, high_freq_factor=hi,
                   original_max_position_embeddings=L), 8 * L)
      for d, th, f, lo, hi, L in [(64, 500000.0, 8.0, 1.0, 4.0, 8192), (128, 500000.0, 32.0, 1.0, 4.0, 8192),
                                  (32, 10000.0, 4.0, 2.0, 8.0, 512), (16, 1000.0, 2.0, 0.5, 3.0, 64)]],
    *[(d, th, dict(rope_type="yarn", factor=f, original_max_position_embeddings=L, **kw), int(f * L))
      for d, th, f, L, kw in [
          (64, 10000.0, 4.0, 2048, {}),
          (128, 1e6, 16.0, 4096, dict(beta_fast=16.0, beta_slow=2.0)),
          (64, 10000.0, 40.0, 4096, dict(mscale=1.0, mscale_all_dim=1.0)),   # DeepSeek-V3
          (64, 10000.0, 40.0, 4096, dict(mscale=0.707, mscale_all_dim=0.5)),
          (32, 50000.0, 8.0, 1024, dict(truncate=False)),                    # gpt-oss
          (32, 10000.0, 3.0, 512, dict(truncate=False, beta_fast=8.0, beta_slow=0.5)),
          (16, 10000.0, 2.0, 256, dict(attention_factor=1.25)),
      ]],
    *[(d, th, dict(rope_type="longrope", short_factor=longrope_factors(d // 2, d),
                   long_factor=longrope_factors(d // 2, d + 1), original_max_position_embeddings=L, **kw), mp)
      for d, th, L, mp, kw in [(96, 10000.0, 4096, 131072, {}), (64, 10000.0, 256, 1024, dict(factor=8.0)),
                               (32, 10000.0, 64, 512, dict(attention_factor=1.1))]],
]
IDS = [f"{p['rope_type']}-d{d}-{i}" for i, (d, _, p, _) in enumerate(CASES)]


@pytest.mark.parametrize("head_dim,theta,params,max_pos", CASES, ids=IDS)
def test_inv_freq_and_attention_factor_match_rope_init_functions(head_dim, theta, params, max_pos):
    cfg = hf_config(head_dim, max_pos, rope_theta=theta, **params)
    pe = ndpe.from_hf_rope(cfg)
    inv_freq, factor = ROPE_INIT_FUNCTIONS[params["rope_type"]](cfg, "cpu")
    torch.testing.assert_close(pe.inv_freq, inv_freq.double(), rtol=2e-6, atol=0)
    unscaled = ndpe.from_hf_rope(cfg, scaling=None).inv_freq  # the wrong option: the series without its scaling
    assert ((unscaled - inv_freq.double()).abs() / inv_freq.double()).max() > 100 * 2e-6
    assert pe.attn_factor[0] == pytest.approx(factor, rel=1e-12)
    if params["rope_type"] == "longrope":  # the long factors, beyond the original length
        long_freq, _ = ROPE_INIT_FUNCTIONS["longrope"](cfg, "cpu", seq_len=params["original_max_position_embeddings"] + 1)
        beyond = torch.tensor([[float(params["original_max_position_embeddings"])]])
        torch.testing.assert_close(pe.axis_inv_freqs(beyond)[0], long_freq.double(), rtol=2e-6, atol=0)


@pytest.mark.parametrize("head_dim,theta,params,max_pos", CASES, ids=IDS)
def test_cos_sin_match_hf_rotary_embedding(head_dim, theta, params, max_pos):
    cfg = hf_config(head_dim, max_pos, rope_theta=theta, **params)
    pe, hf = ndpe.from_hf_rope(cfg), LlamaRotaryEmbedding(cfg)
    L = params["original_max_position_embeddings"]
    x = torch.zeros(1)
    unscaled = ndpe.from_hf_rope(cfg, scaling=None)  # the wrong option: the series without its scaling
    for pos in (torch.arange(min(L, 300))[None],                               # within the trained length
                torch.stack([torch.arange(200), torch.arange(200) + L - 100]),  # batch, one row crossing L
                torch.arange(L - 5, L + 40)[None]):                            # beyond: longrope's long factors
        for a, b, c in zip(ndpe.hf_cos_sin(pe, pos), hf(x, pos), ndpe.hf_cos_sin(unscaled, pos)):
            tol = 2e-7 * int(pos.max()) + 2e-6
            assert_tells_apart(a, c, b, rtol=0, atol=tol)


def test_direct_options_equal_from_hf_rope():
    pe = ndpe.make(dims=1, kind="rope", dim=128, heads=2, theta=1e4, scaling="yarn", scale=40.0, train_shape=4096,
                   mscale=1.0, mscale_all_dim=1.0, beta_fast=16.0)
    cfg = hf_config(64, rope_type="yarn", rope_theta=1e4, factor=40.0, original_max_position_embeddings=4096,
                    mscale=1.0, mscale_all_dim=1.0, beta_fast=16.0)
    torch.testing.assert_close(pe.inv_freq, ndpe.from_hf_rope(cfg).inv_freq, rtol=0, atol=0)
    assert pe.attn_factor == (1.0,)
    assert "mscale=1.0" in repr(pe)
    opts = ndpe.options("rope")
    assert (opts["beta_fast"], opts["beta_slow"], opts["truncate"], opts["low_freq_factor"],
            opts["high_freq_factor"]) == (32.0, 1.0, True, 1.0, 4.0)


def test_existing_yarn_is_hf_default_yarn():
    """The defaults of the new options leave scaling='yarn' as it was."""
    from ndpe import scaling as S
    for d, th, s, L in [(8, 1e4, 4.0, 64), (64, 5e5, 2.0, 4096)]:
        torch.testing.assert_close(S.scaled_inv_freq(d, th, "yarn", s, L)[0],
                                   S.yarn_inv_freq(d, th, s, L, beta_fast=32.0, beta_slow=1.0, truncate=True))
        assert S.yarn_attention_factor(s) == 0.1 * math.log(s) + 1


def test_llama3_and_longrope_per_axis_in_2d():
    """On 2D grids each axis gets its own series and its own trained length."""
    kw = dict(dims=2, kind="rope", dim=32, heads=1)
    pe = ndpe.make(scaling="llama3", scale=(1.0, 8.0), train_shape=(16, 16), **kw)
    plain = ndpe.make(**kw)
    cos, cos0 = pe((4, 4)).rot[0][0], plain((4, 4)).rot[0][0]
    torch.testing.assert_close(cos[:, :8], cos0[:, :8])  # scale 1: unchanged
    assert not torch.allclose(cos[:, 8:], cos0[:, 8:])
    short, long = [1.0] * 16, [2.0] * 16
    lr = ndpe.make(scaling="longrope", scale=4.0, train_shape=(4, 8), short_factor=short, long_factor=long, **kw)
    f = lr.axis_inv_freqs(lr.coords((6, 6)))  # axis 0 past 4 rows: long factors; axis 1 within 8: short
    torch.testing.assert_close(f[0], plain.inv_freq[:8] / 2)
    torch.testing.assert_close(f[1], plain.inv_freq[8:])


@pytest.mark.parametrize("opts,err,match", [
    (dict(beta_fast=16.0), ValueError, "beta_fast is used by scaling='yarn' only"),
    (dict(scaling="linear", scale=2.0, mscale=1.0), ValueError, "mscale is used by"),
    (dict(scaling="yarn", scale=2.0, train_shape=64, low_freq_factor=2.0), ValueError, "low_freq_factor is used"),
    (dict(scaling="yarn", scale=2.0, train_shape=64, beta_fast=0.5), ValueError, "beta_fast must be >= beta_slow"),
    (dict(scaling="yarn", scale=2.0, train_shape=64, beta_slow=-1.0), ValueError, "beta_slow must be > 0"),
    (dict(scaling="yarn", scale=2.0, train_shape=64, truncate="no"), TypeError, "truncate must be a bool"),
    (dict(scaling="yarn", scale=2.0, train_shape=64, attention_factor=0.0), ValueError, "attention_factor must be > 0"),
    (dict(scaling="llama3", scale=8.0, train_shape=64, high_freq_factor=1.0), ValueError, "high_freq_factor must be >"),
    (dict(scaling="llama3", scale=8.0), ValueError, "needs train_shape"),
    (dict(scaling="longrope", scale=8.0, train_shape=64), ValueError, "needs short_factor and long_factor"),
    (dict(scaling="longrope", scale=8.0, train_shape=64, short_factor=[1.0] * 3, long_factor=[1.0] * 16),
     ValueError, "must hold 16 numbers"),
    (dict(scaling="longrope", scale=8.0, train_shape=64, short_factor=[1.0] * 16, long_factor=[0.0] * 16),
     ValueError, "long_factor must be > 0"),
    (dict(scaling="longrope", scale=8.0, train_shape=64, short_factor="1" * 16, long_factor=[1.0] * 16),
     TypeError, "short_factor must be a sequence"),
    (dict(short_factor=[1.0] * 16), ValueError, "short_factor is used by scaling='longrope' only"),
])
def test_bad_options(opts, err, match):
    with pytest.raises(err, match=match):
        ndpe.make(dims=1, kind="rope", dim=32, **opts)


def test_hf_cos_sin_checks():
    pe = ndpe.make(dims=1, kind="rope", dim=32, pairing="interleaved")
    with pytest.raises(ValueError, match="pairing='half'"):
        ndpe.hf_cos_sin(pe, torch.arange(4)[None])
    with pytest.raises(TypeError, match="'rope' encoding"):
        ndpe.hf_cos_sin(ndpe.make(dims=1, kind="sinusoidal", dim=32), torch.arange(4)[None])
    with pytest.raises(ValueError, match="has no ndpe equivalent"):
        ndpe.from_hf_rope(SimpleNamespace(head_dim=32, rope_parameters={"rope_type": "su", "rope_theta": 1e4}))


# --- a tiny random Llama, end to end ---------------------------------------------------------------------------

LLAMA_ROPES = {
    "default": dict(rope_type="default", rope_theta=10000.0),
    "llama3": dict(rope_type="llama3", rope_theta=500000.0, factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                   original_max_position_embeddings=32),
    "yarn": dict(rope_type="yarn", rope_theta=10000.0, factor=4.0, original_max_position_embeddings=32,
                 beta_fast=16.0, mscale=0.8, mscale_all_dim=1.0),
    "longrope": dict(rope_type="longrope", rope_theta=10000.0, factor=4.0, original_max_position_embeddings=32,
                     short_factor=longrope_factors(8, 0), long_factor=longrope_factors(8, 1)),
}


def tiny_llama(rope_parameters):
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=101, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=128,
                      rope_parameters=dict(rope_parameters), attn_implementation="eager")
    return LlamaForCausalLM(cfg).eval()


@pytest.mark.parametrize("name", list(LLAMA_ROPES))
def test_tiny_llama_rotary_and_logits(name, monkeypatch):
    model = tiny_llama(LLAMA_ROPES[name])
    pe = ndpe.from_hf_rope(model.config)
    ids = torch.randint(0, 101, (2, 48))  # 48 > original 32: longrope switches to its long factors
    pos = torch.arange(48)[None].expand(2, -1)
    x = torch.zeros(1)
    sharpen_attention(model)  # positions must matter (tests/conftest.py)
    with torch.no_grad():
        hf_cos, hf_sin = model.model.rotary_emb(x, pos)
        cos, sin = ndpe.hf_cos_sin(pe, pos)
        close(cos, hf_cos, 48)
        close(sin, hf_sin, 48)
        ref = model(ids, position_ids=pos).logits
        monkeypatch.setattr(model.model.rotary_emb, "forward",
                            lambda x, position_ids: ndpe.hf_cos_sin(pe, position_ids, dtype=x.dtype))
        out = model(ids, position_ids=pos).logits
        pe = ndpe.from_hf_rope(model.config, theta=100.0)  # another theta: another model (the lambda reads pe)
        other = model(ids, position_ids=pos).logits
    assert_tells_apart(out, other, ref, rtol=1e-4, atol=1e-4)


# --- recipes of docs/integrations.md (keep in sync) -------------------------------------------------------------

def test_recipe_hf_llama_swap():
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=101, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, max_position_embeddings=1024,
                         rope_parameters=dict(rope_type="llama3", rope_theta=500000.0, factor=8.0,
                                              low_freq_factor=1.0, high_freq_factor=4.0,
                                              original_max_position_embeddings=128))
    model = LlamaForCausalLM(config).eval()
    pe = ndpe.from_hf_rope(model.config)  # the same rope, as an ndpe encoding

    sharpen_attention(model)  # not in the recipe: positions must matter (tests/conftest.py)
    ids = torch.randint(0, 101, (1, 200))
    with torch.no_grad():
        ref = model(ids).logits
        model.model.rotary_emb.forward = lambda x, position_ids: ndpe.hf_cos_sin(pe, position_ids, dtype=x.dtype)
        out = model(ids).logits
        pe = ndpe.from_hf_rope(model.config, scaling=None)  # llama3 scaling left out: another model
        other = model(ids).logits
    assert_tells_apart(out, other, ref, rtol=1e-4, atol=1e-4)


def test_recipe_sdpa_compile():
    import torch.nn.functional as F

    pe = ndpe.make(dims=1, kind="rope", dim=256, heads=4, scaling="yarn", scale=4.0, train_shape=512)
    pos = pe((1024,))                                   # cos/sin, computed once per forward
    q, k, v = (torch.randn(2, 4, 1024, 64) for _ in range(3))

    @torch.compile(backend="eager" if not torch.cuda.is_available() else "inductor", fullgraph=True)
    def attend(q, k, v, cos, sin):
        q, k = ndpe.apply_qk(q, k, ndpe.PosOut(rot=(cos, sin), pairing="half"))
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    out = attend(q, k, v, *pos.rot)
    q2, k2 = ndpe.apply_qk(q, k, pos)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q2, k2, v, is_causal=True), rtol=1e-4, atol=1e-4)


def test_apply_qk_equals_hf_apply_rotary_pos_emb():
    """ndpe's pairing='half' on (1, N, rot/2) cos/sin == HF's rotate_half on the duplicated (B, T, rot) layout."""
    pe = ndpe.make(dims=1, kind="rope", dim=128, heads=2, scaling="llama3", scale=8.0, train_shape=64)
    q, k = torch.randn(2, 2, 100, 64), torch.randn(2, 2, 100, 64)
    pos = torch.arange(100)[None].expand(2, -1)
    ref = apply_rotary_pos_emb(q, k, *ndpe.hf_cos_sin(pe, pos))
    wrong = ndpe.apply_qk(q, k, pe.replace(pairing="interleaved")((100,)))  # another pairing
    for a, b, c in zip(ndpe.apply_qk(q, k, pe((100,))), ref, wrong):
        assert_tells_apart(a, c, b, rtol=1.3e-6, atol=1e-5)  # assert_close's float32 tolerances


# ---- per-layer-type rope parameters (Gemma 3: sliding layers theta 10k, full layers theta 1M with linear x8) --------

@pytest.mark.parametrize("full", [{"rope_type": "default", "rope_theta": 1e6},
                                  {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6}], ids=["default", "linear8"])
def test_gemma3_one_rope_per_layer_type(full):
    from transformers import Gemma3TextConfig
    from transformers.models.gemma3.modeling_gemma3 import Gemma3RotaryEmbedding

    cfg = Gemma3TextConfig(hidden_size=64, num_attention_heads=2, num_key_value_heads=1, head_dim=32,
                           num_hidden_layers=6, intermediate_size=64, vocab_size=50,
                           rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
                                            "full_attention": dict(full)})
    ropes = ndpe.from_hf_rope(cfg)
    assert sorted(ropes) == ["full_attention", "sliding_attention"]
    assert ropes["sliding_attention"].theta == (1e4,) and ropes["full_attention"].theta == (1e6,)
    peer = Gemma3RotaryEmbedding(cfg)
    ids = torch.arange(300)[None]
    x = torch.zeros(1, 300, 32)
    for layer_type, pe in ropes.items():
        cos, sin = peer(x, ids, layer_type)
        ours = ndpe.hf_cos_sin(pe, ids)
        close(ours[0], cos, 300)
        close(ours[1], sin, 300)
    other = ndpe.hf_cos_sin(ropes["sliding_attention"], ids)[0]
    assert (other - peer(x, ids, "full_attention")[0]).abs().max() > 0.1  # the two layer types differ visibly


def test_a_layer_type_without_rope_is_left_out():
    from types import SimpleNamespace

    cfg = SimpleNamespace(head_dim=16, max_position_embeddings=64, layer_types=["rope_layer", "nope_layer"],
                          rope_parameters={"rope_layer": {"rope_type": "default", "rope_theta": 500.0}, "nope_layer": None})
    ropes = ndpe.from_hf_rope(cfg)
    assert list(ropes) == ["rope_layer"] and ropes["rope_layer"].theta == (500.0,)


# ---- p-RoPE: HF's `proportional` type (Barbero et al. 2025; Gemma 4) ------------------------------------------------

@pytest.mark.parametrize("partial", [0.25, 0.5, 1.0])
@pytest.mark.parametrize("factor", [1.0, 8.0])
@pytest.mark.parametrize("head_dim", [64, 96])
def test_proportional_matches_hf(partial, factor, head_dim):
    cfg = hf_config(head_dim, rope_type="proportional", rope_theta=1e6, partial_rotary_factor=partial, factor=factor)
    pe = ndpe.from_hf_rope(cfg)
    inv_freq, attention_factor = ROPE_INIT_FUNCTIONS["proportional"](cfg, "cpu")
    torch.testing.assert_close(pe.inv_freq, inv_freq.double(), rtol=2e-6, atol=0)
    assert pe.rot_dim == head_dim and attention_factor == 1.0
    assert int((pe.inv_freq > 0).sum()) == int(partial * head_dim // 2)  # the fastest frequencies only
    pos = torch.arange(300)[None]
    for a, b in zip(ndpe.hf_cos_sin(pe, pos), LlamaRotaryEmbedding(cfg)(torch.zeros(1), pos)):
        close(a, b, 300)
    q = torch.randn(1, 2, 300, head_dim)  # the whole head with HF's rotate_half: pairs (i, i + head_dim / 2)
    ref, _ = apply_rotary_pos_emb(q, q, *LlamaRotaryEmbedding(cfg)(q, pos))
    wrong = pe.replace(proportion=1.0) if partial < 1 else pe.replace(theta=1e4)  # every pair turning / another theta
    assert_tells_apart(ndpe.apply_qk(q, q, pe(positions=pos[0, :, None].double()))[0],
                       ndpe.apply_qk(q, q, wrong(positions=pos[0, :, None].double()))[0], ref, rtol=0, atol=1e-4)


def test_proportion_is_not_partial_rotation():
    """p-RoPE keeps the full series' fastest frequencies in place; axis_dims below head_dim is another series."""
    p = ndpe.make(dims=1, kind="rope", dim=64, proportion=0.25)
    partial = ndpe.make(dims=1, kind="rope", dim=64, axis_dims=(16,))
    assert p.rot_dim == 64 and partial.rot_dim == 16
    torch.testing.assert_close(p.inv_freq[:8], ndpe.make(dims=1, kind="rope", dim=64).inv_freq[:8], rtol=0, atol=0)
    assert not torch.allclose(p.inv_freq[:8], partial.inv_freq)
    with pytest.raises(ValueError, match="proportion must be"):
        ndpe.make(dims=1, kind="rope", dim=64, proportion=0.0)


# ---- Pixtral's vision rope: one series split between rows (even frequencies) and columns (odd ones) ---------------

def pixtral_rope(head_dim: int, theta: float) -> ndpe.Encoding:
    """Pixtral's axial rope as ndpe's: rows take frequencies theta ** (-4j / d) (an axial series over d / 2 channels),
    columns theta ** (-(4j + 2) / d) = the same series at positions divided by theta ** (2 / d) (linear scaling)."""
    return ndpe.make(dims=2, kind="rope", dim=head_dim, axis_dims=(head_dim // 2, head_dim // 2), theta=theta,
                     scaling="linear", scale=(1.0, theta ** (2 / head_dim)))


def hf_layout(pe, position_ids):
    """ndpe's (cos, sin) for ``position_ids`` ``(N, 2)`` in Pixtral's ``(N, head_dim)`` rotate_half layout."""
    cos, sin = (t[0] for t in pe(positions=position_ids.double()).rot)
    return torch.cat([cos, cos], -1), torch.cat([sin, sin], -1)


@pytest.mark.parametrize("grids", [[(3, 5)], [(4, 4)], [(2, 7), (5, 3)]], ids=["3x5", "4x4", "packed"])
@pytest.mark.parametrize("head_dim,theta", [(16, 10000.0), (64, 1e4), (32, 100.0)])
def test_pixtral_rope_equals_hf(grids, head_dim, theta):
    from transformers import PixtralVisionConfig
    from transformers.models.pixtral.modeling_pixtral import PixtralVisionRotaryEmbedding

    cfg = PixtralVisionConfig(hidden_size=head_dim * 2, num_attention_heads=2, head_dim=head_dim,
                              rope_parameters={"rope_type": "axial", "rope_theta": theta})
    ids = torch.cat([torch.stack(torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij"), -1).reshape(-1, 2)
                     for h, w in grids])  # as PixtralVisionModel builds them, images one after another
    ref = PixtralVisionRotaryEmbedding(cfg)(torch.zeros(1), ids)
    ours = hf_layout(pixtral_rope(head_dim, theta), ids)
    for a, b in zip(ours, ref):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
    plain = hf_layout(ndpe.make(dims=2, kind="rope", dim=head_dim, theta=theta), ids)[0]
    assert (plain - ref[0]).abs().max() > 1e-2  # without the column scaling the layout differs: the test can tell


def test_pixtral_vision_model_with_ndpe_rope():
    from transformers import PixtralVisionConfig, PixtralVisionModel

    torch.manual_seed(0)
    cfg = PixtralVisionConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                              head_dim=16, image_size=64, patch_size=8, rope_parameters={"rope_type": "axial",
                                                                                         "rope_theta": 10000.0})
    model = sharpen_attention(PixtralVisionModel(cfg).eval())  # positions must matter (tests/conftest.py)
    pe = pixtral_rope(16, 10000.0)
    x = torch.randn(2, 3, 64, 64)
    sizes = torch.tensor([[64, 48], [32, 64]])  # two images of other sizes, packed in one sequence
    with torch.no_grad():
        ref = model(x, image_sizes=sizes).last_hidden_state
        model.patch_positional_embedding.forward = lambda h, position_ids: tuple(
            t.to(h.dtype) for t in hf_layout(pe, position_ids))
        out = model(x, image_sizes=sizes).last_hidden_state
        plain = ndpe.make(dims=2, kind="rope", dim=16, axis_dims=(8, 8), theta=10000.0)
        model.patch_positional_embedding.forward = lambda h, position_ids: tuple(
            t.to(h.dtype) for t in hf_layout(plain, position_ids))
        unscaled = model(x, image_sizes=sizes).last_hidden_state
    assert_tells_apart(out, unscaled, ref, rtol=1e-5, atol=1e-5)  # the test can tell the column scaling


# ---- Llama 4 text: interleaved (complex) rotation, and its no-rope layers ----------------------------------------

@pytest.mark.parametrize("rope_parameters", [
    {"rope_type": "default", "rope_theta": 5e5},
    {"rope_type": "llama3", "rope_theta": 5e5, "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
     "original_max_position_embeddings": 256}], ids=["default", "llama3"])
def test_llama4_rotation_equals_hf(rope_parameters):
    from transformers import Llama4TextConfig
    from transformers.models.llama4.modeling_llama4 import Llama4TextRotaryEmbedding, apply_rotary_emb

    cfg = Llama4TextConfig(hidden_size=64, num_attention_heads=2, num_key_value_heads=1, head_dim=32,
                           num_hidden_layers=8, intermediate_size=64, intermediate_size_mlp=64, vocab_size=50,
                           max_position_embeddings=2048, rope_parameters=dict(rope_parameters))
    pe = ndpe.from_hf_rope(cfg, pairing="interleaved")  # Llama 4 rotates (x[2i], x[2i+1]) as complex numbers
    ids = torch.arange(600)[None]
    q, k = torch.randn(1, 600, 2, 32), torch.randn(1, 600, 2, 32)  # Llama 4's (B, T, heads, head_dim)
    ref_q, ref_k = apply_rotary_emb(q, k, Llama4TextRotaryEmbedding(cfg)(q, ids))
    ours_q, ours_k = ndpe.apply_qk(q.transpose(1, 2), k.transpose(1, 2), pe((600,)))
    half_q, half_k = ndpe.apply_qk(q.transpose(1, 2), k.transpose(1, 2), pe.replace(pairing="half")((600,)))
    assert_tells_apart(ours_q.transpose(1, 2), half_q.transpose(1, 2), ref_q, rtol=0, atol=2e-4)  # HF's float32
    assert_tells_apart(ours_k.transpose(1, 2), half_k.transpose(1, 2), ref_k, rtol=0, atol=2e-4)  # angles to 600
    # its default no_rope_layers (every 4th layer without rope) is the reference model's nope_every=4
    from models.block import Encoder

    enc = Encoder(ndpe.make(dims=1, kind="rope", dim=64, heads=2), dim=64, depth=8, heads=2, nope_every=4)
    assert [int(not n) for n in enc.nope] == list(cfg.no_rope_layers)


# ---- iRoPE: from_hf_rope(per_layer=True), None for the layers without rope (no_rope_layers) ------------------------

def test_smollm3_layers_set_from_per_layer_ropes():
    """SmolLM3: each layer's entry is None exactly where the model's attention skips rope (``use_rope`` from
    ``no_rope_layers``), else one shared rope whose cos/sin are the model's own; the reference Encoder's
    ``nope_every`` blocks are the same layers."""
    from transformers import SmolLM3Config, SmolLM3Model

    from models.block import Encoder

    cfg = SmolLM3Config(hidden_size=64, num_attention_heads=2, num_key_value_heads=1, num_hidden_layers=8,
                        intermediate_size=64, vocab_size=50, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                        rope_parameters={"rope_type": "default", "rope_theta": 2e6})
    model = SmolLM3Model(cfg)
    ropes = ndpe.from_hf_rope(cfg, per_layer=True)
    assert len(ropes) == 8 and [pe is None for pe in ropes] == [not layer.self_attn.use_rope for layer in model.layers]
    assert [pe is None for pe in ropes] == [False, False, False, True] * 2
    assert len({id(pe) for pe in ropes if pe is not None}) == 1
    ids = torch.arange(50)[None]
    cos, sin = model.rotary_emb(torch.zeros(1, 50, 64), ids)
    ours = ndpe.hf_cos_sin(next(pe for pe in ropes if pe is not None), ids)
    close(ours[0], cos, 50)
    close(ours[1], sin, 50)
    enc = Encoder(ndpe.make(dims=1, kind="rope", dim=64, heads=2), dim=64, depth=8, heads=2, nope_every=4)
    assert list(enc.nope) == [pe is None for pe in ropes]


@pytest.mark.parametrize("flags", [[1, 0, 1, 1, 0, 1], [0, 0, 1, 1, 1, 1]])
def test_llama4_explicit_no_rope_layers(flags):
    """An explicit ``no_rope_layers`` (1: rope, 0: NoPE, as HF's Llama 4 attention reads it)."""
    from transformers import Llama4TextConfig
    from transformers.models.llama4.modeling_llama4 import Llama4TextAttention

    cfg = Llama4TextConfig(hidden_size=64, num_attention_heads=2, num_key_value_heads=1, head_dim=32,
                           num_hidden_layers=6, intermediate_size=64, intermediate_size_mlp=64, vocab_size=50,
                           no_rope_layers=list(flags), rope_parameters={"rope_type": "default", "rope_theta": 5e5})
    ropes = ndpe.from_hf_rope(cfg, per_layer=True, pairing="interleaved")
    assert [pe is None for pe in ropes] == [not Llama4TextAttention(cfg, i).use_rope for i in range(6)]
    assert all(pe.pairing == "interleaved" for pe in ropes if pe is not None)


@pytest.mark.parametrize("fields,expected", [
    ({}, [True] * 4),                                                     # no iRoPE: every layer
    ({"no_rope_layer_interval": 2}, [True, False, True, False]),          # built as transformers does
    ({"no_rope_layers": [], "no_rope_layer_interval": 3}, [True, True, False, True]),  # Llama 4: empty -> default
    ({"no_rope_layers": [0, 1, 1, 0, 1]}, [False, True, True, False]),
])
def test_per_layer_reads_no_rope_layers_as_transformers(fields, expected):
    cfg = SimpleNamespace(head_dim=16, num_hidden_layers=4, rope_parameters={"rope_type": "default", "rope_theta": 1e4},
                          **fields)
    assert [pe is not None for pe in ndpe.from_hf_rope(cfg, per_layer=True)] == expected
    assert isinstance(ndpe.from_hf_rope(cfg), ndpe.kinds.rope.RoPE)  # without per_layer: the one rope, as before


def test_per_layer_with_layer_types():
    """Per-layer-type parameters: each layer its type's rope; a type without rope and a NoPE layer give None."""
    cfg = SimpleNamespace(head_dim=16, num_hidden_layers=4, no_rope_layers=[1, 1, 1, 0],
                          layer_types=["local", "global", "plain", "global"],
                          rope_parameters={"local": {"rope_type": "default", "rope_theta": 1e4},
                                           "global": {"rope_type": "default", "rope_theta": 1e6}, "plain": None})
    ropes = ndpe.from_hf_rope(cfg, per_layer=True)
    assert [pe and pe.theta for pe in ropes] == [(1e4,), (1e6,), None, None]


@pytest.mark.parametrize("fields,match", [
    ({"num_hidden_layers": None}, "needs config.num_hidden_layers"),
    ({"no_rope_layers": [1, 0]}, "1 \\(rope\\) or 0 \\(NoPE\\) for each of the 3 layers"),
    ({"no_rope_layers": [1, 2, 1]}, "1 \\(rope\\) or 0 \\(NoPE\\)"),
    ({"no_rope_layer_interval": 0}, "no_rope_layer_interval must be an int >= 1"),
    ({"rope_parameters": {"a": {"rope_type": "default"}}, "layer_types": None}, "need config.layer_types"),
])
def test_per_layer_errors(fields, match):
    base = dict(head_dim=16, num_hidden_layers=3, rope_parameters={"rope_type": "default", "rope_theta": 1e4})
    with pytest.raises((ValueError, TypeError), match=match):
        ndpe.from_hf_rope(SimpleNamespace(**{**base, **fields}), per_layer=True)
    with pytest.raises(TypeError, match="per_layer must be a bool"):
        ndpe.from_hf_rope(SimpleNamespace(**base), per_layer=1)


def test_from_hf_rope_refuses_rope_scaling_and_rope_parameters_that_disagree():
    """Both names set and different: which one HF would read depends on its version; neither silently wins."""
    cfg = SimpleNamespace(head_dim=32, rope_scaling={"rope_type": "linear", "factor": 2.0},
                          rope_parameters={"rope_type": "linear", "factor": 4.0})
    with pytest.raises(ValueError, match=r"rope_scaling .*'factor': 2\.0.* and config\.rope_parameters .*'factor': "
                                         r"4\.0.* disagree"):
        ndpe.from_hf_rope(cfg)
    cfg.rope_scaling = dict(cfg.rope_parameters)  # the same dict under both names (HF 5 keeps both): fine
    assert ndpe.from_hf_rope(cfg).scale == (4.0,)


@pytest.mark.parametrize("params, unknown", [
    ({"rope_type": "linear", "factor": 2.0, "factr": 3.0}, "['factr']"),
    ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64, "beta_fats": 16}, "['beta_fats']"),
    ({"rope_type": "default", "theta": 500000.0}, "['theta']"),  # rope_theta misspelt: 10000 would be used
])
def test_from_hf_rope_names_unknown_keys(params, unknown):
    with pytest.raises(ValueError, match=r"unknown key\(s\) " + unknown.replace("[", r"\[").replace("]", r"\]")):
        ndpe.from_hf_rope(SimpleNamespace(head_dim=32, max_position_embeddings=256, rope_parameters=params))
    known = {k: v for k, v in params.items() if k not in unknown}
    ndpe.from_hf_rope(SimpleNamespace(head_dim=32, max_position_embeddings=256, rope_parameters=known))
