"""``ndpe.timm.use(eva, "rope")`` is EVA's own rope at every image size: its theta, pairing and grid indexing, and
timm's rescaling by ``ref_feat_shape`` (positions times ``ref / grid``) on the grid of each forward, as timm's
``dynamic_img_size=True`` model computes it (timm 1.0.31)."""
from __future__ import annotations

import pytest
import torch

import ndpe
from tests.conftest import assert_tells_apart, sharpen_attention

timm = pytest.importorskip("timm")
import ndpe.timm  # noqa: E402

pytestmark = pytest.mark.peers


def eva(**kwargs):
    torch.manual_seed(0)
    model = timm.create_model("eva02_tiny_patch14_224", pretrained=False, depth=2, num_classes=0, **kwargs)
    with torch.no_grad():
        model.pos_embed.normal_(0.0, 0.5)  # a table of trained scale: timm resamples it, and so must use()
    return sharpen_attention(model).eval()


@pytest.mark.parametrize("size", [(112, 112), (224, 224), (98, 168)])
def test_eva02_rope_follows_ref_feat_shape_at_any_size(size):
    x = torch.randn(2, 3, *size)
    with torch.no_grad():
        ref = eva(dynamic_img_size=True)(x)  # timm rescales its rope to ref_feat_shape (16, 16) on every grid
        out = ndpe.timm.use(eva(), "rope")(x)
        fixed = ndpe.timm.use(eva(), "rope", pairing="interleaved", scaling="linear", scale=1.0)(x)  # ref ignored
        plain = ndpe.timm.use(eva(), "rope", pairing="half")(x)  # ndpe's default pairing: another model
    if size == (224, 224):  # the reference grid: scale 1, so only the pairing tells
        torch.testing.assert_close(fixed, ref, rtol=1e-5, atol=2e-5)
        fixed = plain
    assert_tells_apart(out, fixed, ref, rtol=1e-5, atol=2e-5)


def test_eva02_at_its_own_size_equals_the_static_model():
    """A model built at 112 px (timm: scale 0.5 fixed) equals ``use()`` at 112; at 224 px ``use()`` follows the grid
    (scale 1), as the dynamic model does."""
    x = torch.randn(2, 3, 112, 112)
    with torch.no_grad():
        ref = eva(img_size=112)(x)
        out = ndpe.timm.use(eva(img_size=112), "rope")(x)
        torch.testing.assert_close(out, ref, rtol=1e-5, atol=2e-5)
        big = torch.randn(1, 3, 224, 224)
        torch.testing.assert_close(ndpe.timm.use(eva(img_size=112), "rope")(big), eva(img_size=112, dynamic_img_size=True)(big),
                                   rtol=1e-5, atol=2e-5)


@pytest.mark.parametrize("name", ["vit_pe_core_tiny_patch16_384", "vit_small_patch16_dinov3"])
def test_other_eva_ropes_are_the_models_own(name):
    """Perception Encoder (1-based coordinates, ``grid_offset=1``, xy indexing, ``ref_feat_shape`` 24) and DINOv3
    (centred coordinates, periods): ``use(model, "rope")`` alone is the model's rope."""
    def build():
        torch.manual_seed(0)
        model = timm.create_model(name, pretrained=False, depth=2, num_classes=0, img_size=64, embed_dim=64,
                                  num_heads=4)
        return sharpen_attention(model).eval()

    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        ref = build()(x)
        out = ndpe.timm.use(build(), "rope")(x)
        other = ndpe.timm.use(build(), "rope", theta=100.0)(x)  # ndpe's rope with another theta
    assert_tells_apart(out, other, ref, rtol=1e-5, atol=2e-5)
