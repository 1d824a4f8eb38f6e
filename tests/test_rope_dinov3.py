"""DINOv3's rope as ndpe's ``rope`` (``periods=`` and ``augment="dinov3"``), pinned against timm 1.0.31's
``RotaryEmbeddingDinoV3`` and transformers 5.23's ``DINOv3ViTRopePositionEmbedding``, and inside the models that use
them (timm ``vit_small_patch16_dinov3``, HF ``DINOv3ViTModel``) with their rope swapped for ndpe's.

timm ``RotaryEmbeddingDinoV3(dim=D, temperature=T, min_period=a, max_period=b, rotate_half=H)`` ==
``rope, axis_dims=(D / 2, D / 2), coords="centered", periods=True, theta=T`` (or ``min_period=a, max_period=b``),
``pairing="half" if H else "interleaved"``; its ``shift_coords`` / ``jitter_coords`` / ``rescale_coords`` ==
``augment={"name": "dinov3", "shift": .., "jitter": .., "rescale": ..}``. Not expressible: ``normalize_coords="min"`` /
``"max"`` (DINOv3 and HF use ``"separate"``, ndpe's ``coords="centered"``) and ``grid_offset``.
"""
from __future__ import annotations

import math

import pytest
import torch

import ndpe
from tests.conftest import assert_tells_apart, sharpen_attention
from ndpe.augment import CoordAug

timm = pytest.importorskip("timm")
transformers = pytest.importorskip("transformers")
from timm.layers.pos_embed_sincos import RotaryEmbeddingDinoV3, apply_rot_embed_cat  # noqa: E402
from transformers import DINOv3ViTConfig, DINOv3ViTModel  # noqa: E402
from transformers.models.dinov3_vit.modeling_dinov3_vit import (  # noqa: E402
    DINOv3ViTRopePositionEmbedding, apply_rotary_pos_emb)

GRIDS = [(4, 4), (3, 5), (7, 2), (1, 6)]  # square, non-square both ways, a 1-long axis
SCHEDULES = [dict(temperature=100.0), dict(temperature=10000.0), dict(min_period=0.5, max_period=40.0)]


def dino(head_dim: int, heads: int = 1, *, rotate_half: bool = True, augment=None, **sched) -> ndpe.Encoding:
    """ndpe's rope with the options that equal ``RotaryEmbeddingDinoV3(head_dim, **sched, rotate_half=...)``."""
    opts = dict(theta=sched["temperature"]) if "temperature" in sched else dict(sched)
    return ndpe.make(dims=2, kind="rope", dim=head_dim * heads, heads=heads, coords="centered", periods=True,
                     pairing="half" if rotate_half else "interleaved", augment=augment, **opts)


@pytest.mark.parametrize("grid", GRIDS, ids=str)
@pytest.mark.parametrize("sched", SCHEDULES, ids=lambda s: "-".join(f"{k}{v:g}" for k, v in s.items()))
@pytest.mark.parametrize("rotate_half", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_equals_timm_rotary_embedding_dinov3(grid, sched, rotate_half, dtype):
    head_dim = 32
    peer = RotaryEmbeddingDinoV3(head_dim, rotate_half=rotate_half, **sched).eval()
    q = torch.randn(2, 3, math.prod(grid), head_dim).to(dtype)
    ref = apply_rot_embed_cat(q, peer.get_embed(list(grid), dtype=dtype), half=rotate_half)
    mine = ndpe.apply_qk(q, q, dino(head_dim, rotate_half=rotate_half, **sched)(grid))[0]
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=0, atol=4e-2)  # bf16: 2 ** -8 relative on values up to ~4
    theta_series = ndpe.make(dims=2, kind="rope", dim=head_dim, coords="centered", theta=sched.get("temperature", 100.0),
                             pairing="half" if rotate_half else "interleaved")
    other = ndpe.apply_qk(q, q, theta_series(grid))[0]  # the radian series is another encoding: the test can tell
    if dtype == torch.float32:
        assert_tells_apart(mine, other, ref, **tol)
    else:  # bf16's tolerance is that of its rounding; the float32 case shows the margin
        torch.testing.assert_close(mine, ref, **tol)
        assert (other.float() - ref.float()).abs().max() > 0.05


@pytest.mark.parametrize("grid", GRIDS, ids=str)
@pytest.mark.parametrize("prefix", [0, 1, 5])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_equals_hf_dinov3_rope_with_prefix_tokens(grid, prefix, dtype):
    """HF rotates the patch tokens only (class + register tokens first): ndpe's ``num_prefix``."""
    config = DINOv3ViTConfig(hidden_size=64, num_attention_heads=2, patch_size=4, rope_theta=100.0)
    peer = DINOv3ViTRopePositionEmbedding(config).eval()
    cos, sin = peer(torch.zeros(1, 3, 4 * grid[0], 4 * grid[1], dtype=dtype))
    q, k = torch.randn(2, 2, 2, prefix + math.prod(grid), 32).to(dtype)
    ref = apply_rotary_pos_emb(q, k, cos, sin)
    mine = ndpe.apply_qk(q, k, dino(32, 2, temperature=100.0)(grid, num_prefix=prefix))
    radians = ndpe.make(dims=2, kind="rope", dim=64, heads=2, coords="centered", theta=100.0)  # another series
    wrong = ndpe.apply_qk(q, k, radians(grid, num_prefix=prefix))
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=0, atol=4e-2)  # bf16: 2 ** -8 relative on values up to ~4
    for a, b, c in zip(mine, ref, wrong):
        if dtype == torch.float32:
            assert_tells_apart(a, c, b, **tol)
        else:  # bf16's tolerance is that of its rounding; the float32 case shows the margin
            torch.testing.assert_close(a, b, **tol)
        assert torch.equal(a[..., :prefix, :], b[..., :prefix, :])


AUGS = [dict(rescale=2.0), dict(shift=0.3), dict(jitter=1.5), dict(shift=0.2, jitter=1.3, rescale=1.7)]


@pytest.mark.parametrize("aug", AUGS, ids=lambda a: "-".join(a))
@pytest.mark.parametrize("grid", [(4, 4), (3, 5)], ids=str)
def test_augment_draws_equal_timm_and_hf(aug, grid):
    """The same RNG state gives the same transform as timm's and HF's training-mode rope; eval mode is untouched."""
    timm_names = {"shift": "shift_coords", "jitter": "jitter_coords", "rescale": "rescale_coords"}
    hf_names = {"shift": "pos_embed_shift", "jitter": "pos_embed_jitter", "rescale": "pos_embed_rescale"}
    timm_pe = RotaryEmbeddingDinoV3(32, temperature=100.0, **{timm_names[k]: v for k, v in aug.items()}).train()
    config = DINOv3ViTConfig(hidden_size=32, num_attention_heads=1, patch_size=4, rope_theta=100.0,
                             **{"pos_embed_rescale": None, **{hf_names[k]: v for k, v in aug.items()}})
    hf_pe = DINOv3ViTRopePositionEmbedding(config).train()
    pe = dino(32, temperature=100.0, augment={"name": "dinov3", "rescale": None, **aug}).train()
    q = torch.randn(1, 1, math.prod(grid), 32)
    outs = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        ref = apply_rot_embed_cat(q, timm_pe.get_embed(list(grid)), half=True)
        torch.manual_seed(seed)
        cos, sin = hf_pe(torch.zeros(1, 3, 4 * grid[0], 4 * grid[1]))
        hf = apply_rotary_pos_emb(q, q, cos, sin)[0]
        torch.manual_seed(seed)
        mine = ndpe.apply_qk(q, q, pe(grid))[0]
        torch.testing.assert_close(mine, ref, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(mine, hf, rtol=1e-5, atol=1e-5)
        outs.append(mine)
    assert (outs[0] - outs[1]).abs().max() > 1e-3  # a fresh transform per call
    plain = ndpe.apply_qk(q, q, pe.eval()(grid))[0]
    torch.testing.assert_close(plain, apply_rot_embed_cat(q, timm_pe.eval().get_embed(list(grid)), half=True),
                               rtol=1e-5, atol=1e-5)
    assert (plain - outs[0]).abs().max() > 1e-3


def test_augment_distribution_and_per_sample_draws():
    """Shift, jitter and rescale follow their bounds; ``batch_size`` draws one transform per sample."""
    g = torch.Generator().manual_seed(0)
    ones = torch.ones(1, 2)
    shift = CoordAug(dims=2, shift=0.5, rescale=None, batch_size=4000, generator=g)(torch.zeros(1, 2))
    assert shift.shape == (4000, 1, 2) and shift.abs().max() <= 0.5 and shift.abs().max() > 0.49
    assert abs(shift.mean()) < 0.02 and abs(shift.var() - 0.5 ** 2 / 3) < 0.005  # U(-0.5, 0.5)
    jitter = CoordAug(dims=2, jitter=2.0, rescale=None, batch_size=4000, generator=g)(ones).log()
    assert jitter.abs().max() <= math.log(2) + 1e-6 and (jitter[..., 0] - jitter[..., 1]).abs().max() > 0.5
    rescale = CoordAug(dims=2, batch_size=4000, generator=g)(ones).log()  # default rescale=2: one factor, both axes
    assert torch.equal(rescale[..., 0], rescale[..., 1]) and rescale.abs().max() <= math.log(2) + 1e-6
    assert abs(rescale.mean()) < 0.02 and abs(rescale.var() - math.log(2) ** 2 / 3) < 0.01


@pytest.mark.parametrize("img_size", [64, 96])
def test_timm_dinov3_model_with_ndpe_rope(img_size):
    """timm's vit_small_patch16_dinov3 (cls + 4 register tokens, temperature 100) with its rope swapped for ndpe's,
    in eval mode and in training mode with rescale_coords=2 (the same draw from the same seed)."""
    from test_integrations_timm import NdpeEvaRope
    torch.manual_seed(0)
    model = timm.create_model("vit_small_patch16_dinov3", pretrained=False, img_size=img_size, depth=2,
                              num_classes=0, rope_rescale_coords=2.0)  # pooled features
    sharpen_attention(model)  # positions must matter (tests/conftest.py)
    assert model.num_prefix_tokens == 5
    x = torch.randn(2, 3, img_size, img_size)
    ours = NdpeEvaRope(dino(64, 6, temperature=100.0, augment={"name": "dinov3", "rescale": 2.0}))
    with torch.no_grad():
        for train in (False, True):
            model.train(train)
            torch.manual_seed(1)
            ref = model(x)
            timm_rope, model.rope = model.rope, ours.train(train)
            torch.manual_seed(1)
            out = model(x)
            model.rope = timm_rope
            torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
            if not train:
                eval_out, eval_ref = out, ref
        model.rope = NdpeEvaRope(ndpe.make(dims=2, kind="rope", dim=384, heads=6, theta=100.0, coords="centered"))
        other = model.eval()(x)
    assert_tells_apart(eval_out, other, eval_ref, rtol=1e-5, atol=1e-5)


class NdpeDinoRope(torch.nn.Module):
    """Stands in for ``DINOv3ViTModel.rope_embeddings``: pixel values -> ``(cos, sin)`` of the patch tokens, HF's
    rotate_half layout ``(N, head_dim)``."""

    def __init__(self, pe: ndpe.Encoding, patch_size: int):
        super().__init__()
        self.pe, self.patch_size = pe, patch_size

    def forward(self, pixel_values):
        grid = (pixel_values.shape[-2] // self.patch_size, pixel_values.shape[-1] // self.patch_size)
        cos, sin = (torch.cat([t[0], t[0]], -1).to(pixel_values.dtype) for t in self.pe(grid).rot)
        return cos, sin


@pytest.mark.parametrize("size", [(32, 32), (24, 40)], ids=str)
def test_hf_dinov3_model_with_ndpe_rope(size):
    torch.manual_seed(0)
    config = DINOv3ViTConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                             patch_size=8, image_size=32, num_register_tokens=4, rope_theta=100.0)
    model = sharpen_attention(DINOv3ViTModel(config))  # positions must matter (tests/conftest.py)
    x = torch.randn(2, 3, *size)
    with torch.no_grad():
        for train in (False, True):
            model.train(train)
            torch.manual_seed(1)
            ref = model(pixel_values=x).last_hidden_state
            hf_rope, model.rope_embeddings = model.rope_embeddings, NdpeDinoRope(dino(16, 4, temperature=100.0, augment="dinov3"), 8)
            torch.manual_seed(1)
            out = model.train(train)(pixel_values=x).last_hidden_state
            if not train:  # the radian series with the same theta: another model
                model.rope_embeddings = NdpeDinoRope(ndpe.make(dims=2, kind="rope", dim=16, coords="centered",
                                                               theta=100.0), 8)
                assert_tells_apart(out, model(pixel_values=x).last_hidden_state, ref, rtol=1e-5, atol=1e-5)
            model.rope_embeddings = hf_rope
            torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("opts,err,match", [
    (dict(min_period=1.0), ValueError, "go together"),
    (dict(max_period=4.0), ValueError, "go together"),
    (dict(min_period=0.0, max_period=4.0), ValueError, "min_period must be"),
    (dict(min_period=4.0, max_period=2.0), ValueError, "max_period must be"),
    (dict(periods=True, max_res=16.0, coords="pixel"), ValueError, "takes no max_res"),
    (dict(periods=True, scaling="linear", scale=2.0), ValueError, "takes no max_res, mrope_section or scaling"),
    (dict(periods=1), TypeError, "periods"),
])
def test_period_refusals(opts, err, match):
    with pytest.raises(err, match=match):
        ndpe.make(dims=2, kind="rope", dim=32, **opts)


@pytest.mark.parametrize("opts,err,match", [
    (dict(shift=-0.1), ValueError, "shift must be"),
    (dict(jitter=0.5), ValueError, "jitter must be a factor >= 1"),
    (dict(rescale=float("inf")), ValueError, "rescale must be"),
    (dict(scale=2.0), TypeError, "valid options"),
])
def test_augment_refusals(opts, err, match):
    with pytest.raises(err, match=match):
        ndpe.make(dims=2, kind="rope", dim=32, augment={"name": "dinov3", **opts})


def test_min_max_periods_span_the_range():
    """Angles turn once per period: the fastest pair at min_period, the slowest at max_period."""
    pe = ndpe.make(dims=1, kind="rope", dim=8, periods=True, min_period=0.5, max_period=8.0)
    torch.testing.assert_close(pe.inv_freq, 2 * math.pi / torch.tensor([0.5, 0.5 * 16 ** (1 / 3), 0.5 * 16 ** (2 / 3), 8.0],
                                                                        dtype=torch.float64))
    cos, sin = pe(positions=torch.tensor([[8.0]])).rot
    assert abs(float(cos[0, 0, -1]) - 1.0) < 1e-6 and abs(float(cos[0, 0, 0]) - 1.0) < 1e-6  # 16 and 1 turns


class NdpeNaFlexRope(torch.nn.Module):
    """Stands in for ``NaFlexVit.rope`` (axial or dinov3 types): ``dim`` (its head_dim) and ``get_embed(shape)``."""

    def __init__(self, pe: ndpe.Encoding):
        super().__init__()
        from test_integrations_timm import NdpeEvaRope
        self.adapter, self.dim = NdpeEvaRope(pe), pe.head_dim

    def get_embed(self, shape=None, dtype=None):
        emb = self.adapter.get_embed(shape)
        return emb if dtype is None else emb.to(dtype)


@pytest.mark.parametrize("rope_type", ["axial", "dinov3"])
def test_naflexvit_packed_batch_with_ndpe_rope(rope_type):
    """timm's NaFlexVit on a NaFlex batch: images of 3 sizes patchified, padded to one length, each with its own
    grid of rope positions; ndpe's rope in its place gives the model's outputs (and the same on each image alone)."""
    from test_timm_use import naflex_batch
    torch.manual_seed(0)
    dino = rope_type == "dinov3"
    model = timm.create_model("naflexvit_base_patch16_gap", pretrained=False, patch_size=8, embed_dim=64, depth=2,
                              num_heads=4, num_classes=0, rope_type=rope_type, rope_temperature=100.0,
                              rope_rotate_half=dino, pos_embed="none").eval()
    sharpen_attention(model)  # positions must matter (tests/conftest.py)
    batch, sizes = naflex_batch([torch.randn(3, 32, 32), torch.randn(3, 24, 40), torch.randn(3, 16, 8)])
    opts = dict(coords="centered", periods=True) if dino else dict(pairing="interleaved")
    pe = ndpe.make(dims=2, kind="rope", dim=64, heads=4, theta=100.0, **opts)
    with torch.no_grad():
        ref = model(batch)
        model.rope = NdpeNaFlexRope(pe)
        out = model(batch)
        alone = torch.cat([model({k: v[i:i + 1, :sizes[i]] for k, v in batch.items()}) for i in range(3)])
        model.rope = NdpeNaFlexRope(ndpe.make(dims=2, kind="rope", dim=64, heads=4, **opts))  # theta 10000
        other = model(batch)
    assert_tells_apart(out, other, ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(alone, ref, rtol=1e-4, atol=1e-4)
