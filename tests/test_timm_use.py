"""``ndpe.timm.use(model, kind)``: any 2D kind in timm's VisionTransformer and Eva (timm 1.0.31). Where the kind is the
model's own encoding the outputs equal timm's; for every kind a training step runs and the model runs at a second
image size."""
from __future__ import annotations

import pickle

import pytest
import torch

import ndpe
from tests.conftest import assert_tells_apart, sharpen_attention
from conftest import build

timm = pytest.importorskip("timm")
pytestmark = pytest.mark.peers  # also run against the newest transformers and timm (scripts/test_peers.sh)
import ndpe.timm  # noqa: E402
from timm.layers.pos_embed_sincos import build_sincos2d_pos_embed  # noqa: E402
from timm.models.vision_transformer import VisionTransformer  # noqa: E402


def outputs_equal_after_use(build, x, kind, wrong, *, atol=2e-5, **options):
    """``ndpe.timm.use(model, kind, **options)`` gives the timm model's outputs, and ``wrong`` (a fresh model -> that
    model with a wrong option: another pairing, indexing, layout, a missing table) is > 100 x ``atol`` away from them.
    Attention is sharpened (tests/conftest.py) so that positions move the outputs well past rounding."""
    def fresh():
        torch.manual_seed(0)
        return sharpen_attention(build()).eval()

    with torch.no_grad():
        model = fresh()
        ref = model(x)
        out = ndpe.timm.use(model, kind, **options).eval()(x)
        other = wrong(fresh()).eval()(x)
    assert_tells_apart(out, other, ref, rtol=1e-5, atol=atol)
    return model


def without_table(model):
    model.pos_embed = None
    return model


def test_eva02_rope_equals_timm():
    """EVA02 (interleaved pairs, ref_feat_shape 16 x 16: scale 1 at 224 px) keeps its learned table beside ndpe's
    rope: without it the model is another one."""
    build = lambda: timm.create_model("eva02_tiny_patch14_224", pretrained=False, depth=2, num_classes=0)  # noqa: E731
    outputs_equal_after_use(build, torch.randn(2, 3, 224, 224), "rope",
                            lambda m: ndpe.timm.use(without_table(m), "rope", pairing="interleaved"),
                            pairing="interleaved")


def test_eva02_keeps_a_trained_scale_table_at_another_size():
    """A table of trained scale (std 0.5), EVA02 at 112 px (grid 8 x 8: scale 0.5, timm resamples the table): still
    timm's outputs; the table stays for every kind that takes the rope's place, goes for none and additive kinds."""
    def build():
        model = timm.create_model("eva02_tiny_patch14_224", pretrained=False, img_size=112, depth=2, num_classes=0)
        with torch.no_grad():
            model.pos_embed.normal_(0.0, 0.5)
        return model

    outputs_equal_after_use(build, torch.randn(2, 3, 112, 112), "rope",
                            lambda m: ndpe.timm.use(without_table(m), "rope", pairing="interleaved", scaling="linear",
                                                    scale=0.5),
                            pairing="interleaved", scaling="linear", scale=0.5)
    for kind, stays in [("alibi", True), ("rope-mixed", True), ("none", False), ("sinusoidal", False)]:
        assert (ndpe.timm.use(build(), kind).pos_embed is not None) == stays, kind
    plain = ndpe.timm.use(timm.create_model("vit_small_patch16_rope_224", pretrained=False, img_size=32, depth=1), "rope")
    assert plain.pos_embed is None  # RoPE-ViT has no table


@pytest.mark.parametrize("img_size", [64, 96])
def test_rope_vit_xy_equals_timm(img_size):
    build = lambda: timm.create_model("vit_small_patch16_rope_224", pretrained=False,  # noqa: E731
                                      img_size=img_size, depth=2, num_classes=0)
    outputs_equal_after_use(build, torch.randn(2, 3, img_size, img_size), "rope",
                            lambda m: ndpe.timm.use(m, "rope", theta=100.0, pairing="interleaved"),  # ij indexing
                            theta=100.0, pairing="interleaved", grid_indexing="xy")


def test_dinov3_equals_timm():
    build = lambda: timm.create_model("vit_small_patch16_dinov3", pretrained=False, img_size=64,  # noqa: E731
                                      depth=2, num_classes=0)
    outputs_equal_after_use(build, torch.randn(2, 3, 64, 80), "rope",
                            lambda m: ndpe.timm.use(m, "rope", coords="centered", periods=True, theta=100.0,
                                                    pairing="interleaved"),
                            coords="centered", periods=True, theta=100.0)


def test_vit_sincos_table_equals_timm():
    """A VisionTransformer whose table is timm's 2D sincos (no_embed_class, cls + 4 register tokens)."""
    def build():
        model = VisionTransformer(img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4, num_classes=0,
                                  no_embed_class=True, reg_tokens=4)
        with torch.no_grad():
            model.pos_embed.copy_(build_sincos2d_pos_embed((4, 4), 64)[None])
        return model

    outputs_equal_after_use(build, torch.randn(2, 3, 32, 32), "sinusoidal",
                            lambda m: ndpe.timm.use(m, "sinusoidal", combine="concat", layout="blocks"),
                            combine="concat", layout="sin_cos")


KINDS = [k for k, dims in ndpe.available().items() if 2 in dims and build(k, 2).cat_dim == 0]


def tiny_models():
    return {
        "vit": lambda: VisionTransformer(img_size=32, patch_size=8, embed_dim=48, depth=2, num_heads=2, num_classes=5,
                                         reg_tokens=2, dynamic_img_size=True),
        "vit-noembed": lambda: VisionTransformer(img_size=32, patch_size=8, embed_dim=48, depth=1, num_heads=2,
                                                 num_classes=5, no_embed_class=True, dynamic_img_size=True),
        "eva": lambda: timm.create_model("eva02_tiny_patch14_224", pretrained=False, img_size=28, patch_size=7,
                                         embed_dim=48, num_heads=2, depth=2, num_classes=5, dynamic_img_size=True),
    }


@pytest.mark.parametrize("name", list(tiny_models()))
@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_trains_and_runs_at_another_size(kind, name):
    torch.manual_seed(0)
    model = ndpe.timm.use(tiny_models()[name](), kind, **type(build(kind, 2)).example_options(2))
    probe = build(kind, 2)((2, 2))
    keeps = name == "eva" and kind != "none" and probe.add is None and probe.tokens is None  # EVA02's table stays
    assert (model.pos_embed is not None) == keeps and isinstance(model.ndpe_pe, ndpe.Encoding)
    x = torch.randn(2, 3, 32, 32) if name != "eva" else torch.randn(2, 3, 28, 28)
    loss = torch.nn.functional.cross_entropy(model.train()(x), torch.tensor([0, 1]))
    loss.backward()
    assert torch.isfinite(loss)
    grads = [p.grad for p in model.ndpe_pe.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)  # the encoding's parameters train
    other = torch.randn(1, 3, 48, 40) if name != "eva" else torch.randn(1, 3, 42, 35)
    with torch.no_grad():
        assert torch.isfinite(model.eval()(other)).all()


@pytest.mark.parametrize("kind", ["rope", "alibi"])
def test_positions_reach_the_attention(kind):
    """The swapped model sees patch order: shuffling patches changes its output (a none model does not care)."""
    torch.manual_seed(0)
    model = sharpen_attention(ndpe.timm.use(tiny_models()["vit"](), kind).eval())  # positions matter (conftest.py)
    plain = ndpe.timm.use(tiny_models()["vit"](), "none").eval()
    plain.load_state_dict(model.state_dict(), strict=False)
    x = torch.randn(1, 3, 32, 32)
    perm = torch.randperm(16, generator=torch.Generator().manual_seed(1))
    tiles = x.reshape(1, 3, 4, 8, 4, 8).permute(0, 2, 4, 1, 3, 5).reshape(1, 16, 3, 8, 8)[:, perm]
    shuffled = tiles.reshape(1, 4, 4, 3, 8, 8).permute(0, 3, 1, 4, 2, 5).reshape(1, 3, 32, 32)
    with torch.no_grad():
        assert (model(shuffled) - model(x)).abs().max() > 1e-3
        assert (plain(shuffled) - plain(x)).abs().max() < 1e-5


@pytest.mark.parametrize("name", ["vit", "eva"])
@pytest.mark.parametrize("kind", [k for k in KINDS if not type(build(k, 2)).position_free])
def test_a_broken_encoding_moves_the_model_far_past_the_tolerance(kind, name, monkeypatch):
    """Kill test: a model built by ``use`` depends on the kind through its positions, by far more than the 2e-5 the
    equality tests allow. The same model (same seed and weights: sharp attention, the encoding's parameters at a
    trained scale) with the kind's positions collapsed, every token encoded at the first token's position (a rotation,
    bias or table entry the same for all: relative rotations become the identity), moves its token features by
    > 100 x 2e-5. It also fails if ``use`` stops applying the encoding (a dropped ``apply_qk`` or bias leaves both
    models the same)."""
    side = 28 if name == "eva" else 32
    x = torch.randn(1, 3, side, side, generator=torch.Generator().manual_seed(1))
    cls = type(build(kind, 2))

    def features():
        torch.manual_seed(0)
        model = sharpen_attention(ndpe.timm.use(tiny_models()[name](), kind, **cls.example_options(2))).eval()
        with torch.no_grad():
            for p in model.ndpe_pe.parameters():  # zero-initialized tables (relative, cpb) encode nothing yet
                p.normal_(0.0, 0.5)
            return model.forward_features(x)

    out = features()
    encode = cls.encode
    monkeypatch.setattr(cls, "encode", lambda self, positions, grid_shape, **kw: encode(
        self, positions[..., :1, :].expand_as(positions), grid_shape, **kw))
    gap = (features() - out).abs().max().item()
    assert gap > 100 * 2e-5, f"{kind} in timm's {name}: collapsing its positions moves the features by only {gap:.3g}"


def test_state_dict_pickle_and_refusals():
    model = ndpe.timm.use(tiny_models()["vit"](), "learned", grid_shape=(4, 4), resize="bicubic")
    assert any(k.startswith("ndpe_pe.") for k in model.state_dict())
    clone = pickle.loads(pickle.dumps(model))
    with torch.no_grad():
        x = torch.randn(1, 3, 32, 32)
        torch.testing.assert_close(clone.eval()(x), model.eval()(x))
    with pytest.raises(ValueError, match="already uses an ndpe encoding"):
        ndpe.timm.use(model, "rope")
    with pytest.raises(ValueError, match="concatenates 2 channels"):
        ndpe.timm.use(tiny_models()["vit"](), "coord")
    with pytest.raises(TypeError, match="VisionTransformer, Eva and NaFlexVit"):
        ndpe.timm.use(torch.nn.Linear(2, 2), "rope")
    with pytest.raises(ValueError, match="unknown kind"):
        ndpe.timm.use(tiny_models()["vit"](), "nope")


def naflex_batch(images, patch=8):
    from timm.data.naflex_transforms import patchify_image
    parts = [patchify_image(img, (patch, patch)) for img in images]
    n = max(p[0].shape[0] for p in parts)
    pad = lambda t, v=0: torch.nn.functional.pad(t, (0, 0) * (t.ndim - 1) + (0, n - t.shape[0]), value=v)  # noqa: E731
    return dict(patches=torch.stack([pad(p[0]) for p in parts]), patch_coord=torch.stack([pad(p[1]) for p in parts]),
                patch_valid=torch.stack([pad(p[2], False) for p in parts])), [p[0].shape[0] for p in parts]


def naflexvit(**kw):
    torch.manual_seed(0)
    return timm.create_model("naflexvit_base_patch16_gap", pretrained=False, patch_size=8, embed_dim=48, depth=2,
                             num_heads=2, num_classes=5, **kw)


@pytest.mark.parametrize("table", ["none", "learned"])
def test_naflexvit_axial_rope_equals_timm(table):
    """NaFlexVit's axial rope on a NaFlex batch of three sizes, with or without its learned table (which stays)."""
    batch, _ = naflex_batch([torch.randn(3, 32, 32), torch.randn(3, 24, 40), torch.randn(3, 16, 8)])
    outputs_equal_after_use(lambda: naflexvit(rope_type="axial", rope_temperature=100.0, pos_embed=table), batch,
                            "rope", lambda m: ndpe.timm.use(m, "rope", theta=100.0, pairing="half"),
                            atol=1e-5, theta=100.0, pairing="interleaved")


@pytest.mark.parametrize("kind", KINDS)
def test_naflexvit_every_kind_per_sample(kind):
    """A NaFlex batch of three sizes gives each image what it gives alone; a training step runs on it."""
    model = ndpe.timm.use(naflexvit(), kind, **type(build(kind, 2)).example_options(2)).eval()
    images = [torch.randn(3, 32, 32), torch.randn(3, 24, 40), torch.randn(3, 16, 8)]
    batch, sizes = naflex_batch(images)
    with torch.no_grad():
        out = model(batch)
        alone = torch.cat([model({k: v[i:i + 1, :sizes[i]] for k, v in batch.items()}) for i in range(3)])
    torch.testing.assert_close(out, alone, rtol=1e-4, atol=1e-4)
    loss = model.train()(batch).sum()
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(model(torch.randn(1, 3, 32, 48))).all()


def test_naflex_batch_out_of_row_major_order_is_refused():
    model = ndpe.timm.use(naflexvit(), "rope").eval()
    batch, _ = naflex_batch([torch.randn(3, 16, 16)])
    batch["patch_coord"] = batch["patch_coord"].flip(1)
    with pytest.raises(ValueError, match="row-major order"):
        model(batch)


def test_naflex_fractional_patch_coords_are_refused():
    """Coordinates are whole patch indices; fractions were truncated to another grid."""
    model = ndpe.timm.use(naflexvit(), "rope").eval()
    batch, _ = naflex_batch([torch.randn(3, 16, 16)])
    batch["patch_coord"] = batch["patch_coord"].float() + 0.5
    with pytest.raises(ValueError, match=r"whole \(row, col\) patch indices, got fractions \(e.g. 0.5\)"):
        model(batch)


@pytest.mark.parametrize("name", ["vit", "eva"])
@pytest.mark.parametrize("kind", KINDS)
def test_patch_dropout_refuses_kinds_that_act_in_attention(name, kind):
    """timm's patch dropout keeps a random subset of the patches: in a ViT, after the encoding, so a kind that adds to
    the tokens follows them and trains, and one that acts in attention is refused at use(), the model left as it
    was; in Eva, before ndpe's encoding meets the tokens, so every kind with a position is refused."""
    torch.manual_seed(0)
    model = VisionTransformer(img_size=32, patch_size=8, embed_dim=48, depth=1, num_heads=2, num_classes=5,
                              patch_drop_rate=0.5) if name == "vit" else \
        timm.create_model("eva02_tiny_patch14_224", pretrained=False, img_size=32, patch_size=8, embed_dim=48,
                          num_heads=2, depth=1, num_classes=5, patch_drop_rate=0.5)
    pe = build(kind, 2)
    if ndpe.contract.attention_fields(pe((4, 4), num_prefix=1), tokens_too=name == "eva"):  # Eva drops them first
        with pytest.raises(ValueError, match=r"drops patches \(patch_drop_rate > 0\) where kind .* build the model "
                                             r"with patch_drop_rate=0") as err:
            ndpe.timm.use(model, kind, **type(pe).example_options(2))
        assert "\n" not in str(err.value) and getattr(model, "ndpe_pe", None) is None
    else:
        model = ndpe.timm.use(model, kind, **type(pe).example_options(2)).train()
        model(torch.randn(2, 3, 32, 32)).sum().backward()


def test_rope_mixed_one_block_equals_timm():
    """timm's RoPE-Mixed ViT learns one frequency set per block, ndpe's rope-mixed one per encoding: with one block
    and timm's frequencies copied (its xy order: freqs[0] turns with the column), the outputs are timm's; copied in
    ij order they are another model."""
    def fresh():
        torch.manual_seed(0)
        return sharpen_attention(timm.create_model("vit_small_patch16_rope_mixed_224", pretrained=False, img_size=64,
                                                   depth=1, num_classes=0)).eval()  # positions matter (conftest.py)

    model = fresh()
    freqs = model.rope.freqs.detach().clone()  # (2, depth, heads, head_dim / 2)
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        ref = model(x)
        ndpe.timm.use(model, "rope-mixed", pairing="interleaved")
        model.ndpe_pe.freqs.copy_(torch.stack([freqs[1, 0], freqs[0, 0]], dim=1))  # (heads, (row, col), head_dim / 2)
        out = model(x)
        other = ndpe.timm.use(fresh(), "rope-mixed", pairing="interleaved")
        other.ndpe_pe.freqs.copy_(torch.stack([freqs[0, 0], freqs[1, 0]], dim=1))  # ij order: another model
        assert_tells_apart(out, other(x), ref, rtol=1e-5, atol=2e-5)


@pytest.mark.parametrize("name,match", [("deit_tiny_distilled_patch16_224", "has its own _pos_embed"),
                                        ("vit_small_patch16_18x2_224", "block 0 is a ParallelThingsBlock")])
def test_unsupported_models_are_refused_at_use_time(name, match):
    """DeiT's distilled model adds its table in its own _pos_embed; parallel blocks hold several attentions: refused
    in one line by use(), the model left as it was."""
    model = timm.create_model(name, pretrained=False, img_size=32, depth=1, num_classes=0)
    with pytest.raises(TypeError, match=match) as err:
        ndpe.timm.use(model, "rope")
    assert "\n" not in str(err.value) and getattr(model, "ndpe_pe", None) is None and model.pos_embed is not None


def vit_pair(**config):
    """The same random ViT twice: as built (224-style, fixed size) and with ``dynamic_img_size=True`` (timm's own
    way to other sizes), with sharp attention and a table of the tokens' scale, so positions matter."""
    torch.manual_seed(0)
    native = sharpen_attention(VisionTransformer(img_size=32, patch_size=8, embed_dim=48, depth=2, num_heads=2,
                                                 num_classes=5, dynamic_img_size=True, **config))
    with torch.no_grad():
        native.pos_embed.normal_()  # timm's 0.02 init leaves a table too small beside the tokens to matter
    model = VisionTransformer(img_size=32, patch_size=8, embed_dim=48, depth=2, num_heads=2, num_classes=5, **config)
    model.load_state_dict(native.state_dict())
    return model.eval(), native.eval()


@pytest.mark.parametrize("config", [dict(reg_tokens=2), dict(no_embed_class=True, reg_tokens=1),
                                    dict(class_token=False, global_pool="avg")])
def test_learned_starts_from_the_models_table(config):
    """``kind="learned"`` is the model's own table (class / register entries folded into those tokens): at the built
    size the outputs are the model's, at others those of the model built with ``dynamic_img_size=True``. A table off
    by one row moves the outputs by more than 100 times the tolerance."""
    model, native = vit_pair(**config)
    x, other = torch.randn(2, 3, 32, 32), torch.randn(2, 3, 48, 40)
    with torch.no_grad():
        refs = native(x), native(other)
        ndpe.timm.use(model, "learned")
        outs = model(x), model(other)
        for out, ref in zip(outs, refs):
            torch.testing.assert_close(out, ref, rtol=1e-5, atol=2e-5)
        model.ndpe_pe.table.copy_(model.ndpe_pe.table.roll(1, dims=0))  # a wrong table is seen
        assert (model(x) - refs[0]).abs().max() > 100 * 2e-5


def test_learned_table_resampled_to_another_grid_shape():
    """A ``grid_shape`` other than the model's gets the model's table resampled as timm does (the table a model built
    at that size would have after loading the weights)."""
    model, native = vit_pair(reg_tokens=1)
    x = torch.randn(2, 3, 48, 48)
    with torch.no_grad():
        ref = native(x)
        out = ndpe.timm.use(model, "learned", grid_shape=(6, 6), resize=None)(x)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=2e-5)


@pytest.mark.parametrize("kind", ["alibi", "rope", "learned"])
def test_a_fixed_size_model_takes_other_sizes(kind):
    """A model built without ``dynamic_img_size`` (timm would refuse 320 px at 224) takes any multiple of the patch,
    its outputs unchanged at the built size; its intermediates come back on the new grid."""
    torch.manual_seed(0)
    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, depth=1, num_classes=5).eval()
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        model_out = model(x) if kind == "learned" else None
        ndpe.timm.use(model, kind)
        assert model(torch.randn(1, 3, 320, 288)).shape == (1, 5)
        feats = model.forward_intermediates(torch.randn(1, 3, 320, 288), intermediates_only=True)
        if model_out is not None:
            torch.testing.assert_close(model(x), model_out)
    assert feats[-1].shape == (1, 192, 20, 18)


def test_a_patch_embedding_that_cannot_change_size_is_refused():
    class FixedEmbed(torch.nn.Module):  # a custom embed_layer with none of timm's size switches
        def __init__(self, img_size, patch_size, in_chans, embed_dim, **_):
            super().__init__()
            self.proj = torch.nn.Conv2d(in_chans, embed_dim, patch_size, patch_size)
            self.num_patches, self.grid_size = (img_size // patch_size) ** 2, (img_size // patch_size,) * 2

        def forward(self, x):
            return self.proj(x).flatten(2).transpose(1, 2)

    model = VisionTransformer(img_size=32, patch_size=8, embed_dim=48, depth=1, num_heads=2, embed_layer=FixedEmbed)
    with pytest.raises(ValueError, match="build the model with dynamic_img_size=True"):
        ndpe.timm.use(model, "rope")


def test_the_trained_at_224_run_at_320_recipe_runs():
    """docs/integrations.md, "Trained at 224, run at 320", as written: YaRN swapped into a used model changes its
    320 px output, and swapping back restores the trained encoding."""
    import re
    from pathlib import Path
    doc = (Path(__file__).resolve().parents[1] / "docs" / "integrations.md").read_text()
    block = re.search(r"### Trained at 224, run at 320\n+```python\n(.*?)```", doc, re.S).group(1)
    scope: dict = {}
    torch.manual_seed(0)
    exec(block, scope)
    assert scope["plain"].shape == scope["zoomed"].shape == (1, 10)
    assert (scope["plain"] - scope["zoomed"]).abs().max() > 1e-4
    assert scope["vit"].ndpe_pe is scope["trained"] and scope["trained"].rope_scaling is None


@pytest.mark.parametrize("config", [dict(reg_tokens=1), dict(no_embed_class=True, reg_tokens=1)])
def test_a_timm_checkpoint_loads_after_use(config):
    """A timm checkpoint loaded after ``use(model, "learned")`` becomes ndpe's table as at ``use`` (resampled to its
    grid_shape, the prefix rows folded into the checkpoint's class / register tokens): the outputs are the
    checkpoint's model's. Every kind loads timm's attention weights (ndpe's wrapper saves and loads them under timm's
    names); a kind with no place for the table leaves it out with ``strict=False``."""
    _, native = vit_pair(**config)
    x, other = torch.randn(2, 3, 32, 32), torch.randn(2, 3, 48, 40)
    checkpoint = native.state_dict()
    build = lambda: VisionTransformer(img_size=32, patch_size=8, embed_dim=48, depth=2, num_heads=2,  # noqa: E731
                                      num_classes=5, **config).eval()
    with torch.no_grad():
        torch.manual_seed(1)
        model = ndpe.timm.use(build(), "learned")
        model.load_state_dict(checkpoint)
        for image in (x, other):
            torch.testing.assert_close(model(image), native(image), rtol=1e-5, atol=2e-5)
        resized = ndpe.timm.use(build(), "learned", grid_shape=(6, 6), resize=None)
        resized.load_state_dict(checkpoint)
        y = torch.randn(2, 3, 48, 48)
        torch.testing.assert_close(resized(y), native(y), rtol=1e-5, atol=2e-5)  # the table resampled as timm does
    alibi = ndpe.timm.use(build(), "alibi")
    with pytest.raises(RuntimeError, match='Unexpected key.*"pos_embed"'):
        alibi.load_state_dict(checkpoint)
    assert alibi.load_state_dict(checkpoint, strict=False).unexpected_keys == ["pos_embed"]


def test_a_term_after_the_softmax_is_hidden_by_timms_float_mask():
    """timm's masks (NaFlex padding) may be additive with finfo.min: the attention hides those keys from a term after
    the softmax (eRPE's prob_bias) as from the logits, equal to the boolean mask's result."""
    torch.manual_seed(0)
    model = tiny_models()["vit"]()
    attn = ndpe.timm.use(model, "none").blocks[0].attn
    pe = ndpe.make(dims=1, kind="erpe", dim=attn.attn.num_heads * attn.attn.head_dim, heads=attn.attn.num_heads,
                   length=8)
    with torch.no_grad():
        pe.table.normal_()
    attn._holder.pos = pe((8,))
    keep = torch.ones(2, 1, 1, 8, dtype=torch.bool)
    keep[0, ..., 5:] = False
    x = torch.randn(2, 8, attn.attn.num_heads * attn.attn.head_dim)
    with torch.no_grad():
        ref = attn(x, attn_mask=keep)
        additive = torch.zeros(keep.shape).masked_fill(~keep, torch.finfo(torch.float32).min)
        torch.testing.assert_close(attn(x, attn_mask=additive), ref)
