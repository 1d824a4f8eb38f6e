"""``ndpe.timm.use`` on timm's Swin Transformer V1 and MaxViT (``ndpe/timm_windows.py``): ``"relative"`` is their own
window bias (each table copied: timm's outputs), resized with the window as timm resizes its own; other bias kinds
replace it; kinds that rotate or add are refused in one line, and so is a timm class ndpe does not map (timm 1.0.31).
Swin V2, BEiT, MaxViT's MLP and TF biases and its resize: tests/test_timm_windows_v2.py."""
from __future__ import annotations

import pytest
import torch

from tests.conftest import assert_tells_apart, sharpen_attention

timm = pytest.importorskip("timm")
import ndpe.timm  # noqa: E402

pytestmark = pytest.mark.peers


def swin():
    torch.manual_seed(0)
    model = timm.create_model("swin_tiny_patch4_window7_224", pretrained=False, img_size=56, embed_dim=32,
                              depths=(2, 2), num_heads=(2, 4), num_classes=0)
    return sharpen_attention(model).eval()


def test_relative_is_swins_own_bias():
    x = torch.randn(2, 3, 56, 56)
    with torch.no_grad():
        ref = swin()(x)
        out = ndpe.timm.use(swin(), "relative")(x)
        other = ndpe.timm.use(swin(), "relative", max_distance=3)(x)  # a fresh table, clipped at 3: another model
    assert_tells_apart(out, other, ref, rtol=1e-5, atol=1e-5)


def test_another_window_size_is_timms_resize():
    """``set_input_size(window_size=4)``: timm bicubically resizes its tables, ndpe its copies of them the same way."""
    x = torch.randn(2, 3, 56, 56)
    timm_model, model = swin(), ndpe.timm.use(swin(), "relative")
    for m in (timm_model, model):
        m.set_input_size(img_size=(56, 56), window_size=(4, 4))
    with torch.no_grad():
        assert_tells_apart(model(x), swin()(x), timm_model(x), rtol=1e-5, atol=1e-5)  # vs. the window-7 model


@pytest.mark.parametrize("kind", ["alibi", "cpb", "none"])
def test_other_bias_kinds_train(kind):
    model = ndpe.timm.use(swin(), kind).train()
    model(torch.randn(2, 3, 56, 56)).square().mean().backward()
    pes = [m.ndpe_pe for m in model.modules() if hasattr(m, "ndpe_pe")]
    assert len(pes) == 4 and all(p.kind == kind for p in pes)


def test_refusals_are_one_line():
    for kind in ("rope", "sinusoidal"):
        model = swin()
        with pytest.raises(ValueError, match="only biases attention") as err:
            ndpe.timm.use(model, kind)
        assert "\n" not in str(err.value)
        assert all(getattr(m, "ndpe_pe", None) is None for m in model.modules())  # nothing changed
    model = timm.create_model("swinv2_cr_tiny_ns_224", pretrained=False, num_classes=0, img_size=64, embed_dim=32,
                              depths=(1, 1), num_heads=(2, 2), window_size=4)  # its own class: meta MLP, no table
    with pytest.raises(TypeError, match="supports timm's") as err:
        ndpe.timm.use(model, "relative")
    assert "\n" not in str(err.value)


def maxvit():
    torch.manual_seed(0)
    model = timm.create_model("maxvit_nano_rw_256", pretrained=False, img_size=64, num_classes=0)
    return sharpen_attention(model).eval() if _sharpenable(model) else model.eval()


def _sharpenable(model) -> bool:
    try:
        sharpen_attention(model)
    except AssertionError:
        return False
    return True


def test_maxvit_relative_is_its_own_bias():
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        ref = maxvit()(x)
        out = ndpe.timm.use(maxvit(), "relative")(x)
        other = ndpe.timm.use(maxvit(), "alibi")(x)
    assert_tells_apart(out, other, ref, rtol=1e-5, atol=1e-5)
    assert sum(hasattr(m, "ndpe_pe") for m in ndpe.timm.use(maxvit(), "cpb").modules()) == 14  # block + grid
