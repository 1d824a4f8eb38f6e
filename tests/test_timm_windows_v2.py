"""``ndpe.timm.use`` on timm's Swin V2, BEiT and MaxViT's MLP and TF biases (``ndpe/timm_windows.py``): the model's own
kind (``"cpb"`` for a CPB MLP, ``"relative"`` for a table) is its own bias, weights copied, equal to timm's model at its
size and after timm's own resize (``set_input_size``); other bias kinds replace it; kinds that rotate or add are
refused in one line (timm 1.0.31). Tiny models, their positional weights redrawn large (``sharpen_positions``) so
positions matter."""
from __future__ import annotations

import pytest
import torch

from tests.conftest import assert_tells_apart

timm = pytest.importorskip("timm")
import ndpe  # noqa: E402
import ndpe.timm  # noqa: E402
from benchmarks.scan_dropins import sharpen_positions  # noqa: E402  (positional weights redrawn large)

pytestmark = pytest.mark.peers
TOL = dict(rtol=1e-5, atol=1e-5)


def swinv2(**kw):
    torch.manual_seed(0)
    kw = {"window_size": 8, **kw}
    return sharpen_positions(timm.create_model("swinv2_tiny_window8_256", pretrained=False, img_size=64, embed_dim=32,
                                               depths=(2, 2), num_heads=(2, 4), num_classes=0, **kw))


def beit(shared=False):
    torch.manual_seed(0)
    flags = dict(use_rel_pos_bias=False, use_shared_rel_pos_bias=True) if shared else {}
    return sharpen_positions(timm.create_model("beit_base_patch16_224", pretrained=False, img_size=64, embed_dim=32,
                                               depth=2, num_heads=2, num_classes=0, **flags))


def maxvit(name, side=64):
    torch.manual_seed(0)
    return sharpen_positions(timm.create_model(name, pretrained=False, img_size=side, num_classes=0,
                                               depths=(1, 1, 1, 1), embed_dim=(64, 64, 64, 64)))


def sites(model):
    return [m for m in model.modules() if getattr(m, "ndpe_pe", None) is not None]


def x_(side=64, width=None):
    return torch.randn(2, 3, side, width or side, generator=torch.Generator().manual_seed(1))


@torch.no_grad()
def test_swinv2_cpb_is_its_own_mlp():
    x = x_()
    ref = swinv2()(x)
    out = ndpe.timm.use(swinv2(), "cpb")(x)
    assert_tells_apart(out, ndpe.timm.use(swinv2(), "none")(x), ref, **TOL)  # no bias: another model
    assert [p.kind for p in map(lambda m: m.ndpe_pe, sites(ndpe.timm.use(swinv2(), "cpb")))] == ["cpb"] * 4


@torch.no_grad()
def test_swinv2_pretrained_window_is_its_train_shape():
    """A model fine-tuned from another window (``pretrained_window_sizes``) normalises offsets by that window: the
    copied MLP with ``train_shape`` is timm's; the same MLP normalised by the window it sees is not."""
    x = x_()
    ref = swinv2(window_size=4, pretrained_window_sizes=(8, 8))(x)
    model = ndpe.timm.use(swinv2(window_size=4, pretrained_window_sizes=(8, 8)), "cpb")
    out = model(x)
    for site in sites(model):
        site.ndpe_pe = site.ndpe_pe.replace(train_shape=None)  # the same MLP, offsets over the window
    assert_tells_apart(out, model(x), ref, **TOL)


@torch.no_grad()
def test_swinv2_another_window_is_timms_resize():
    """``set_input_size(window_size=4)``: timm's MLP sees the new window's offsets, normalised by it; so does ndpe's
    (the MLP fixed to the old window's normalisation is another model)."""
    x = x_()
    timm_model, model, wrong = swinv2(), ndpe.timm.use(swinv2(), "cpb"), ndpe.timm.use(swinv2(), "cpb")
    for m in (timm_model, model, wrong):
        m.set_input_size(img_size=(64, 64), window_size=(4, 4))
    for site in sites(wrong):
        site.ndpe_pe = site.ndpe_pe.replace(train_shape=(8, 8))
    assert_tells_apart(model(x), wrong(x), timm_model(x), **TOL)


@pytest.mark.parametrize("shared", [False, True], ids=["per-block", "shared"])
@torch.no_grad()
def test_beit_relative_is_its_own_table(shared):
    """Each table copied (one per block, or the model's shared one), its class-token rows at ``ndpe_prefix_bias``:
    timm's outputs; the same tables with the class token unbiased are another model."""
    x = x_()
    ref = beit(shared)(x)
    model = ndpe.timm.use(beit(shared), "relative")
    out = model(x)
    assert len(sites(model)) == (1 if shared else 2)
    for site in sites(model):
        site.ndpe_prefix_bias.zero_()
    assert_tells_apart(out, model(x), ref, **TOL)


@pytest.mark.parametrize("shared", [False, True], ids=["per-block", "shared"])
@torch.no_grad()
def test_beit_another_size_is_timms_resize(shared):
    """``set_input_size(img_size=(96, 80))``: timm interpolates its tables to the 6 x 5 grid (class-token rows kept),
    ndpe its copies the same way; clipping the old table's offsets instead is another model."""
    x = x_(96, 80)
    timm_model, model, wrong = beit(shared), ndpe.timm.use(beit(shared), "relative"), ndpe.timm.use(beit(shared),
                                                                                                  "relative")
    for site in sites(wrong):  # the window follows, the table is not resized: offsets past 3 clipped
        site.set_window_size = lambda size, site=site: setattr(site, "window_size", tuple(size))
    for m in (timm_model, model, wrong):
        m.set_input_size(img_size=(96, 80))
    assert_tells_apart(model(x), wrong(x), timm_model(x), **TOL)


@pytest.mark.parametrize("name, kind", [("maxvit_nano_rw_256", "relative"), ("maxvit_rmlp_nano_rw_256", "cpb"),
                                        ("maxvit_tiny_tf_224", "relative")])
@torch.no_grad()
def test_maxvit_is_its_own_and_resizes_as_timm(name, kind):
    """MaxViT's ``RelPosBias`` tables, its ``RelPosMlp`` (a CPB MLP of natural-log offsets, ReLU, dropout 0.125 in
    training) and the TF port's ``RelPosBiasTf`` (a per-head table indexed by key minus query), in its block and grid
    attentions: timm's outputs at 128 px (no bias differs), and after ``set_input_size(img_size=192)`` (windows 4 -> 6:
    tables interpolated as timm does, the MLP at the new offsets), where a table clipped at the old window instead, or
    no bias, differs."""
    x, y = x_(128), x_(192)
    timm_model, model, wrong = (maxvit(name, 128), ndpe.timm.use(maxvit(name, 128), kind),
                                ndpe.timm.use(maxvit(name, 128), kind))
    assert len(sites(model)) == 8  # 4 stages, a block and a grid attention each
    assert_tells_apart(model(x), ndpe.timm.use(maxvit(name, 128), "none")(x), timm_model(x), **TOL)
    if kind == "relative":
        for site in sites(wrong):  # the window follows, the table is not resized: offsets past 3 clipped
            site.set_window_size = lambda size, site=site: setattr(site, "window_size", tuple(size))
    else:  # an MLP of raw offsets has nothing to resize: no bias at the new windows
        wrong = ndpe.timm.use(maxvit(name, 128), "none")
    for m in (timm_model, model, wrong):
        m.set_input_size(img_size=(192, 192))
    assert_tells_apart(model(y), wrong(y), timm_model(y), **TOL)


def relpos(name, **kw):
    torch.manual_seed(0)
    return sharpen_positions(timm.create_model(name, pretrained=False, img_size=64, embed_dim=32, depth=2, num_heads=2,
                                               num_classes=0, **kw))


@pytest.mark.parametrize("name, kw, kind", [
    ("vit_relpos_medium_patch16_cls_224", {}, "cpb"),  # RelPosMlp ('cr'), a class token (its rows 0)
    ("vit_srelpos_small_patch16_224", {}, "cpb"),  # one RelPosMlp shared by every block
    ("vit_relpos_base_patch16_cls_224", {"rel_pos_type": "bias"}, "relative"),  # RelPosBias, class-token rows
    ("vit_relpos_base_patch16_224", {"rel_pos_type": "mlp_swin"}, "cpb"),  # RelPosMlp in Swin V2's form
], ids=["mlp-cls", "shared-mlp", "bias-cls", "mlp-swin"])
@torch.no_grad()
def test_vit_relpos_is_its_own_and_resizes_as_timm(name, kw, kind):
    """timm's ViT-RelPos (``VisionTransformerRelPos``: MaxViT's bias modules over a ViT's patch grid, per block or
    shared, with or without a class token): timm's outputs at 64 px (no bias differs) and after
    ``set_input_size(img_size=96)`` (4 x 4 -> 6 x 6), where a table clipped at the old grid, or no bias, differs."""
    x, y = x_(), x_(96)
    timm_model, model = relpos(name, **kw), ndpe.timm.use(relpos(name, **kw), kind)
    assert_tells_apart(model(x), ndpe.timm.use(relpos(name, **kw), "none")(x), timm_model(x), **TOL)
    wrong = ndpe.timm.use(relpos(name, **kw), kind if kind == "relative" else "none")
    for site in sites(wrong) if kind == "relative" else []:  # the grid follows, the table is not resized
        site.set_window_size = lambda size, site=site: setattr(site, "window_size", tuple(size))
    for m in (timm_model, model, wrong):
        m.set_input_size(img_size=(96, 96))
    assert_tells_apart(model(y), wrong(y), timm_model(y), **TOL)


def swin():
    torch.manual_seed(0)
    return sharpen_positions(timm.create_model("swin_tiny_patch4_window7_224", pretrained=False, img_size=56,
                                               embed_dim=32, depths=(2, 2), num_heads=(2, 4), num_classes=0))


CHECKPOINTS = {"swin": (swin, "relative"), "swinv2": (swinv2, "cpb"), "beit": (beit, "relative"),
               "beit-shared": (lambda: beit(True), "relative"),
               "maxvit-tf": (lambda: maxvit("maxvit_tiny_tf_224"), "relative"),
               "maxvit-mlp": (lambda: maxvit("maxvit_rmlp_nano_rw_256"), "cpb"),
               "relpos-bias": (lambda: relpos("vit_relpos_base_patch16_cls_224", rel_pos_type="bias"), "relative")}
BIAS_KEYS = ("relative_position_bias_table", "cpb_mlp.", "rel_pos.mlp.")


@pytest.mark.parametrize("name", list(CHECKPOINTS))
@torch.no_grad()
def test_a_timm_checkpoint_loads_after_use(name):
    """``load_state_dict`` of timm's own state dict into a model that took its own kind (its weights other than the
    checkpoint's): the tables and MLPs land in the encodings (class-token rows, TF flip), strictly, and the outputs
    are the checkpoint's; without its bias weights (``strict=False``) the model is another."""
    build, kind = CHECKPOINTS[name]
    checkpoint = build()
    x = x_(56 if name == "swin" else 64)

    def loaded(strict):
        model = ndpe.timm.use(build(), kind)
        for p in model.parameters():
            p.add_(torch.randn_like(p))
        state = checkpoint.state_dict()
        if not strict:
            state = {k: v for k, v in state.items() if not any(b in k for b in BIAS_KEYS)}
        model.load_state_dict(state, strict=strict)
        return model(x)

    assert_tells_apart(loaded(True), loaded(False), checkpoint(x), **TOL)


@pytest.mark.parametrize("build", [swinv2, beit], ids=["swinv2", "beit"])
@pytest.mark.parametrize("kind", ["alibi", "relative", "cpb"])
def test_other_bias_kinds_train(build, kind):
    """A fresh kind in place of the model's bias (``relative`` with options, a fresh ``cpb``); its parameters train."""
    options = {"relative": {"max_distance": 3}, "cpb": {"mlp_hidden": 16}}.get(kind, {})
    model = ndpe.timm.use(build(), kind, **options).train()
    model(x_()).square().mean().backward()
    pes = [m.ndpe_pe for m in sites(model)]
    assert pes and all(p.kind == kind for p in pes)
    assert all(p.grad is not None for pe in pes for p in pe.parameters())
    assert not any(hasattr(m, "ndpe_prefix_bias") for m in sites(model))  # a new kind leaves the class token unbiased


@pytest.mark.parametrize("build", [swinv2, beit, lambda: maxvit("maxvit_rmlp_nano_rw_256")],
                         ids=["swinv2", "beit", "maxvit-mlp"])
def test_rotating_or_adding_kinds_are_refused_in_one_line(build):
    for kind in ("rope", "sinusoidal"):
        model = build()
        with pytest.raises(ValueError, match="only biases attention") as err:
            ndpe.timm.use(model, kind)
        assert "\n" not in str(err.value)
        assert not sites(model)  # nothing changed


def test_unmapped_models_are_refused_in_one_line():
    model = timm.create_model("beit_base_patch16_224", pretrained=False, img_size=32, embed_dim=32, depth=1,
                              num_heads=2, use_rel_pos_bias=False, use_abs_pos_emb=True)
    with pytest.raises(ValueError, match="has none") as err:
        ndpe.timm.use(model, "relative")
    assert "\n" not in str(err.value)
    for bad in ({"act": "gelu"}, {"dropout": 1.5}):  # cpb's MLP options: one line, what is expected
        with pytest.raises(ValueError) as err:
            ndpe.make(dims=2, kind="cpb", dim=8, heads=2, **bad)
        assert "\n" not in str(err.value)
