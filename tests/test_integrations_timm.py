"""timm glue, pinned against timm 1.0.31: EVA's ``ref_feat_shape`` as ``scaling="linear"`` (scale below and above 1,
per axis), and the two recipes of docs/integrations.md (EVA with ndpe's rope, VisionTransformer with ndpe's rope or
alibi). Everything runs on CPU in a few seconds."""
from __future__ import annotations

import math

import pytest
import torch

import ndpe
from tests.conftest import assert_tells_apart, sharpen_attention
from tests.test_attend import DIM, HEADS, WAYS, encoding

timm = pytest.importorskip("timm")
pytestmark = pytest.mark.peers  # also run against the newest transformers and timm (scripts/test_peers.sh)
from timm.layers import Attention  # noqa: E402
from timm.layers.pos_embed_sincos import RotaryEmbeddingCat, apply_rot_embed_cat  # noqa: E402
from timm.models.vision_transformer import VisionTransformer  # noqa: E402


# ---- ref_feat_shape == scaling="linear", scale = feat_shape / ref_feat_shape per axis ----------------------------

REF_CASES = [  # grid, ref_feat_shape, timm dim D, head_dim, rotate_half
    ((4, 6), (8, 12), 16, 16, True),     # ref larger than the grid: scale 0.5 on both axes
    ((6, 4), (16, 16), 32, 40, False),   # larger, unequal: (0.375, 0.25), 8 channels past rot_dim
    ((8, 6), (4, 3), 16, 16, False),     # smaller: scale 2
    ((8, 6), (4, 6), 16, 24, True),      # smaller on one axis only: (2, 1)
    ((6, 8), (3, 16), 16, 16, False),    # smaller on one axis, larger on the other: (2, 0.5)
]


@pytest.mark.parametrize("grid,ref_shape,timm_dim,head_dim,rotate_half", REF_CASES)
def test_timm_ref_feat_shape_any_scale(grid, ref_shape, timm_dim, head_dim, rotate_half):
    timm_pe = RotaryEmbeddingCat(timm_dim, temperature=100.0, in_pixels=False, ref_feat_shape=list(ref_shape),
                                 rotate_half=rotate_half)
    emb = timm_pe.get_embed(list(grid))  # (N, 2 * rot_dim): sin, cos
    rot_dim = emb.shape[-1] // 2
    q = torch.randn(2, 3, math.prod(grid), head_dim)
    ref = apply_rot_embed_cat(q[..., :rot_dim], emb, half=rotate_half)
    scale = tuple(g / r for g, r in zip(grid, ref_shape))
    pe = ndpe.make(dims=2, kind="rope", dim=head_dim, heads=1, axis_dims=(2 * (timm_dim // 4),) * 2, theta=100.0,
                   coords="index", pairing="half" if rotate_half else "interleaved", scaling="linear", scale=scale)
    mine = ndpe.apply_qk(q, q, pe(grid))[0]
    unscaled = ndpe.apply_qk(q, q, pe.replace(scaling=None, scale=None)(grid))[0]  # ref_feat_shape ignored
    assert_tells_apart(mine[..., :rot_dim], unscaled[..., :rot_dim], ref, rtol=1e-5, atol=1e-5)
    assert torch.equal(mine[..., rot_dim:], q[..., rot_dim:])


def test_linear_scale_below_one_stretches_positions():
    """``scale=s`` divides positions by ``s``: angles at scale 0.25 on grid n are those of positions 4i."""
    stretched = ndpe.make(dims=1, kind="rope", dim=8, scaling="linear", scale=0.25)((5,)).rot
    plain = ndpe.make(dims=1, kind="rope", dim=8)((17,)).rot
    for a, b in zip(stretched, plain):
        torch.testing.assert_close(a, b[:, ::4], rtol=0, atol=1e-6)


@pytest.mark.parametrize("opts,match", [
    (dict(scaling="linear", scale=0.0), "scale must be > 0"),
    (dict(scaling="linear", scale=(0.5, -1.0)), "scale must be > 0"),
    (dict(scaling="linear", scale=float("inf")), "finite"),
    (dict(scaling="linear", scale=float("nan")), "finite"),
    (dict(scaling="ntk", scale=0.5), "scale must be >= 1"),
    (dict(scaling="yarn", scale=0.5, train_shape=4), "scale must be >= 1"),
    (dict(scaling="llama3", scale=(2.0, 0.5), train_shape=4), "scale must be >= 1"),
])
def test_scale_ranges(opts, match):
    with pytest.raises(ValueError, match=match):
        ndpe.make(dims=2, kind="rope", dim=16, **opts)


# ---- recipe (a): timm EVA with ndpe's rope (docs/integrations.md) --------------------------------------------------

class NdpeEvaRope(torch.nn.Module):
    """Stands in for ``Eva.rope``: ``get_embed(shape)`` -> ``cat(sin, cos)``, timm's ``(N, 2 * rot_dim)`` layout."""

    def __init__(self, pe: ndpe.Encoding):
        super().__init__()
        self.pe = pe

    def get_embed(self, shape, dtype=None):
        pos = self.pe(tuple(shape))
        cos, sin = (t[0] for t in pos.rot)  # (N, rot_dim / 2) each
        if pos.pairing == "half":           # timm rotate_half=True: [f0, f1, .., f0, f1, ..]
            cos, sin = torch.cat([cos, cos], -1), torch.cat([sin, sin], -1)
        else:                               # interleaved: [f0, f0, f1, f1, ..]
            cos, sin = cos.repeat_interleave(2, -1), sin.repeat_interleave(2, -1)
        return torch.cat([sin, cos], -1)


@pytest.mark.parametrize("img_size,rotate_half", [(112, False), (336, False), (112, True)])
def test_recipe_eva_with_ndpe_rope(img_size, rotate_half):
    """Grid 8 x 8 (scale 0.5) and 24 x 24 (scale 1.5) against EVA02's ref_feat_shape (16, 16)."""
    torch.manual_seed(0)
    model = timm.create_model("eva02_tiny_patch14_224", pretrained=False, img_size=img_size, depth=2,
                              num_classes=0, rope_rotate_half=rotate_half).eval()  # pooled features
    sharpen_attention(model)  # positions must matter (tests/conftest.py)
    grid = model.patch_embed.grid_size
    pe = ndpe.make(dims=2, kind="rope", dim=192, heads=3, pairing="half" if rotate_half else "interleaved",
                   scaling="linear", scale=tuple(g / 16 for g in grid))
    x = torch.randn(2, 3, img_size, img_size)
    with torch.no_grad():
        ref = model(x)
        timm_rope, model.rope = model.rope, NdpeEvaRope(pe)  # no feat_shape: Eva calls get_embed(shape=grid_size)
        out = model(x)
        model.rope = NdpeEvaRope(ndpe.make(dims=2, kind="rope", dim=192, heads=3, pairing=pe.pairing))
        unscaled = model(x)  # ignoring ref_feat_shape is another model
    assert tuple(timm_rope.ref_feat_shape) == (16, 16)
    assert_tells_apart(out, unscaled, ref, rtol=1e-5, atol=1e-5)


# ---- timm's grid_indexing="xy" (its vit_*_rope_* models) ------------------------------------------------------------

@pytest.mark.parametrize("grid", [(3, 5), (4, 4), (7, 2), (1, 6)], ids=str)
@pytest.mark.parametrize("grid_type", ["index", "pixel", "centered"])
@pytest.mark.parametrize("rotate_half", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_grid_indexing_xy_equals_timm(grid, grid_type, rotate_half, dtype):
    from timm.layers import RotaryEmbeddingCat

    if grid_type == "pixel" and 1 in grid:
        pytest.skip("a 1-long axis: ndpe's pixel coordinate is 0 there, timm's linspace(-1, 1, 1) gives -1")
    peer = RotaryEmbeddingCat(dim=32, temperature=100.0, in_pixels=False, grid_indexing="xy", grid_type=grid_type,
                              rotate_half=rotate_half)
    pe = ndpe.make(dims=2, kind="rope", dim=32, theta=100.0, coords=grid_type, grid_indexing="xy",
                   pairing="half" if rotate_half else "interleaved")
    ref = peer.get_embed(shape=list(grid)).to(dtype)
    ours = NdpeEvaRope(pe).get_embed(grid).to(dtype)
    torch.testing.assert_close(ours, ref, rtol=0, atol=2e-6 if dtype == torch.float32 else 2 ** -8)  # bf16: 1 ulp
    ij = NdpeEvaRope(ndpe.make(dims=2, kind="rope", dim=32, theta=100.0, coords=grid_type, pairing=pe.pairing))
    if grid[0] > 1:  # ij rotates other channels by the rows: the test can tell the two layouts apart
        assert not torch.allclose(ij.get_embed(grid).to(dtype), ref, atol=1e-3)


@pytest.mark.parametrize("grid", [(3, 5), (4, 4), (6, 2)], ids=str)
@pytest.mark.parametrize("linear_bands", [False, True])
@pytest.mark.parametrize("max_res", [224, 32])
@pytest.mark.parametrize("grid_indexing", ["ij", "xy"])
def test_pixel_bands_equal_timm_in_pixels(grid, linear_bands, max_res, grid_indexing):
    """timm's in_pixels=True (its default): pixel bands on a pixel grid; angles reach pi * max_res / 2 at the edges."""
    from timm.layers import RotaryEmbeddingCat

    peer = RotaryEmbeddingCat(dim=32, in_pixels=True, max_res=max_res, linear_bands=linear_bands,
                              grid_indexing=grid_indexing)
    pe = ndpe.make(dims=2, kind="rope", dim=32, coords="pixel", max_res=max_res, linear_bands=linear_bands,
                   grid_indexing=grid_indexing, pairing="interleaved")
    ref = peer.get_embed(shape=list(grid))
    ours = NdpeEvaRope(pe).get_embed(grid)
    torch.testing.assert_close(ours, ref, rtol=0, atol=2e-4)  # timm's bands and angles in float32 (up to ~350 rad)
    other = NdpeEvaRope(ndpe.make(dims=2, kind="rope", dim=32, coords="pixel", max_res=max_res,
                                  linear_bands=not linear_bands, grid_indexing=grid_indexing, pairing="interleaved"))
    assert (other.get_embed(grid) - ref).abs().max() > 0.1  # the other spacing is visibly different


def test_grid_indexing_xy_3d_swaps_only_the_first_two_blocks():
    xy = ndpe.make(dims=3, kind="rope", dim=36, axis_dims=(4, 8, 6), grid_indexing="xy")((2, 3, 4)).rot[0][0]
    ij = ndpe.make(dims=3, kind="rope", dim=36, axis_dims=(4, 8, 6))((2, 3, 4)).rot[0][0]  # blocks 2 | 4 | 3 freqs
    torch.testing.assert_close(xy, torch.cat([ij[:, 2:6], ij[:, :2], ij[:, 6:]], -1), rtol=0, atol=0)


@pytest.mark.parametrize("kwargs, match", [({"dims": 1}, "needs dims >= 2"), ({"grid_indexing": "yx"}, "one of"),
                                           ({"mrope_section": (4, 6, 6), "dims": 3}, r"options of 2 channel layouts \('axial', 'mrope'\)")])
def test_grid_indexing_refusals(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ndpe.make(kind="rope", dim=64, **{"dims": 2, "grid_indexing": "xy", **kwargs})


@pytest.mark.parametrize("img_size", [64, 96])
def test_vit_rope_model_with_ndpe_rope(img_size):
    """timm's vit_small_patch16_rope_224 (RoPE-ViT, xy indexing, temperature 100) with its rope swapped for ndpe's."""
    torch.manual_seed(0)
    model = timm.create_model("vit_small_patch16_rope_224", pretrained=False, img_size=img_size, depth=2,
                              num_classes=0).eval()  # pooled features
    sharpen_attention(model)  # positions must matter (tests/conftest.py)
    pe = ndpe.make(dims=2, kind="rope", dim=384, heads=6, theta=100.0, pairing="interleaved", grid_indexing="xy")
    x = torch.randn(2, 3, img_size, img_size)
    with torch.no_grad():
        ref = model(x)
        model.rope = NdpeEvaRope(pe)
        out = model(x)
        model.rope = NdpeEvaRope(ndpe.make(dims=2, kind="rope", dim=384, heads=6, theta=100.0, pairing="interleaved"))
        ij = model(x)
    assert_tells_apart(out, ij, ref, rtol=1e-5, atol=1e-5)


# ---- recipe (b): timm VisionTransformer with ndpe's rope or alibi (docs/integrations.md) ---------------------------

class NdpeAttention(Attention):
    pos: ndpe.PosOut | None = None  # this forward's encoding, set by NdpeViT

    def forward(self, x, attn_mask=None, is_causal=False):
        B, N, _ = x.shape
        q, k, v = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        q, k = ndpe.apply_qk(self.q_norm(q), self.k_norm(k), self.pos)  # rotations (and cameras' maps)
        out = ndpe.attend(q, k, ndpe.apply_v(v, self.pos), self.pos, attn_mask=attn_mask, is_causal=is_causal, x=x)
        out = ndpe.apply_out(out, self.pos)  # cameras (gta, prope): undo the values' map per query
        return self.proj(out.transpose(1, 2).reshape(B, N, -1))


class NdpeViT(VisionTransformer):
    def __init__(self, kind="rope", embed_dim=768, num_heads=12, **kwargs):
        super().__init__(embed_dim=embed_dim, num_heads=num_heads, attn_layer=NdpeAttention, pos_embed="none",
                         dynamic_img_size=True, **kwargs)
        self.pe = ndpe.make(dims=2, kind=kind, dim=embed_dim, heads=num_heads)

    def _pos_embed(self, x):  # x: (B, H, W, C) patch tokens
        pos = self.pe(tuple(x.shape[1:3]), num_prefix=self.num_prefix_tokens)
        for block in self.blocks:
            block.attn.pos = pos
        return super()._pos_embed(x)


@pytest.mark.parametrize("kind, dims, grid, causal", [w for w in WAYS if w[0] != "rope"])
def test_recipe_attention_equals_ndpe_attention(kind, dims, grid, causal):
    """The recipe's attention is right for every way of acting: a bias (alibi), a logits term (cope, causal), a term
    after the softmax (erpe, which SDPA with attn_bias refuses) and a map of q, k, v and the output (gta, which
    apply_qk alone gets silently wrong) equal ``ndpe.Attention`` with the same weights."""
    pe, pos = encoding(kind, dims, grid)
    recipe, attn = NdpeAttention(DIM, num_heads=HEADS), ndpe.Attention(DIM, HEADS, qkv_bias=False, causal=causal)
    attn.load_state_dict(recipe.state_dict())
    x = torch.randn(2, math.prod(grid), DIM)
    with torch.no_grad():
        expected = attn(x, pos)
        recipe.pos = pos
        got = recipe(x, is_causal=causal)
        recipe.pos = None
        assert_tells_apart(got, recipe(x, is_causal=causal), expected, rtol=1e-5, atol=1e-5)


def shuffle_patches(img: torch.Tensor, patch: int, perm: torch.Tensor) -> torch.Tensor:
    """``img`` with its ``patch x patch`` tiles reordered by ``perm`` (row-major tile order)."""
    B, C, H, W = img.shape
    tiles = img.reshape(B, C, H // patch, patch, W // patch, patch).permute(0, 2, 4, 1, 3, 5).flatten(1, 2)
    tiles = tiles[:, perm].reshape(B, H // patch, W // patch, C, patch, patch)
    return tiles.permute(0, 3, 1, 4, 2, 5).reshape(B, C, H, W)


@pytest.mark.parametrize("kind", ["rope", "alibi", "none"])
def test_recipe_vit_with_ndpe(kind):
    torch.manual_seed(0)
    model = NdpeViT(kind, img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4, num_classes=5).eval()
    for size in [(32, 32), (48, 64)]:  # grids 4 x 4 and 6 x 8
        x = torch.randn(2, 3, *size)
        perm = torch.randperm((size[0] // 8) * (size[1] // 8))
        with torch.no_grad():
            out, shuffled = model(x), model(shuffle_patches(x, 8, perm))
        assert out.shape == (2, 5) and out.isfinite().all()
        change = (shuffled - out).abs().max()  # freshly initialised (near-uniform attention): small but clear
        if kind == "none":  # control: without positions a ViT cannot see the patch order (float noise ~1e-7)
            assert change < 1e-6
        else:
            assert change > 1e-5


def test_shuffle_patches_is_a_tile_permutation():
    img = torch.arange(2 * 16 * 24.0).reshape(1, 2, 16, 24)
    perm = torch.randperm(6)
    out = shuffle_patches(img, 8, perm)
    tile = lambda t, i: t[..., (i // 3) * 8:(i // 3 + 1) * 8, (i % 3) * 8:(i % 3 + 1) * 8]  # noqa: E731
    for i in range(6):
        assert torch.equal(tile(out, i), tile(img, int(perm[i])))


def test_docs_timm_recipes_run_verbatim():
    """The timm code blocks of docs/integrations.md run as written (the tests above are their checked copies)."""
    import pathlib
    import re
    text = (pathlib.Path(__file__).parents[1] / "docs" / "integrations.md").read_text()
    sections = [s for s in text.split("\n## ") if s.startswith("timm ")]
    blocks = [b for s in sections for b in re.findall(r"```python\n(.*?)```", s, flags=re.S)]
    assert len(blocks) == 3
    for block in blocks:
        exec(compile(block, "docs/integrations.md", "exec"), {"__name__": "docs_recipe"})
