"""``rope`` equals the peers' axial RoPE under these option mappings (timm 1.0.31, rotary-embedding-torch 0.9.1).

timm ``RotaryEmbeddingCat(dim=D, in_pixels=False, temperature=T, grid_type=G, rotate_half=H)``
+ ``apply_rot_embed_cat(x, emb, half=H)`` on a 1/2/3-D ``feat_shape``:
    each axis gets ``D // 4`` bands       == ``axis_dims = (2 * (D // 4),) * dims`` (D % 4 == 0: ``D / 2`` per axis)
    ``temperature=T``                    == ``theta=T``
    ``grid_type`` index / pixel / centered == ``coords`` of the same name (pixel: we give 0, timm -1 when n = 1)
    ``rotate_half=True`` / ``False``       == ``pairing="half"`` / ``"interleaved"``
    ``grid_indexing="ij"`` / ``"xy"``      == ``grid_indexing=`` of the same name (tests/test_integrations_timm.py)
    ``ref_feat_shape=R`` (EVA resize)      == ``scaling="linear", scale=feat_shape / R`` per axis
    timm rotates every channel of ``x``: we compare on the first ``rot_dim`` channels.
    ``in_pixels=True, max_res=R, linear_bands=L`` == ``max_res=R, linear_bands=L`` (pixel bands).
rotary-embedding-torch ``RotaryEmbedding(dim=d, theta=T)``:
    ``rotate_queries_or_keys(q)`` (1D)    == ``dims=1, axis_dims=(d,), theta=T, pairing="interleaved"``
                                            (their ``start_index=0``: the first d channels rotate, as ours)
    ``get_axial_freqs(*grid)`` + ``apply_rotary_emb`` == ``axis_dims=(d,) * dims`` (one d for every axis)
    ``interpolate_factor=s``              == ``scaling="linear", scale=s``
    ``theta_rescale_factor=s``            == ``scaling="ntk", scale=s`` (``theta * s ** (d / (d - 2))``)
    ``freqs_for="pixel", max_freq=R``     == ``coords="pixel", max_res=R, linear_bands=True`` (its axial grid is
                                            ``linspace(-1, 1)``, our ``coords="pixel"``)
    Not expressible: ``freqs_for="constant"``, learned freqs (``use_xpos`` is the ``xpos`` kind).
    Their positions are built in the input's dtype: the equality is pinned in float32.
"""
from __future__ import annotations

import math

import pytest
import torch
from rotary_embedding_torch import RotaryEmbedding, apply_rotary_emb
from timm.layers.pos_embed_sincos import RotaryEmbeddingCat, apply_rot_embed_cat

import ndpe
from tests.conftest import assert_tells_apart

torch.manual_seed(0)


def ours(q: torch.Tensor, grid, **opts) -> torch.Tensor:
    """Rotate ``q`` ``(B, H, N, head_dim)`` with ndpe's ``rope``."""
    pe = ndpe.make(dims=len(grid), kind="rope", dim=q.shape[-1], heads=1, **opts)
    return ndpe.apply_qk(q, q, pe(grid))[0]


TIMM_CASES = [  # grid, timm dim D (bands D // 4 per axis), head_dim, grid_type
    ((11,), 16, 8, "index"),
    ((3, 5), 16, 16, "index"),
    ((5, 3), 16, 16, "pixel"),
    ((4, 4), 32, 40, "centered"),  # 8 channels past rot_dim
    ((2, 3, 4), 16, 24, "index"),
    ((3, 2, 2), 8, 12, "pixel"),
]


@pytest.mark.parametrize("rotate_half", [True, False])
@pytest.mark.parametrize("grid,timm_dim,head_dim,grid_type", TIMM_CASES)
def test_equals_timm_rotary_embedding_cat(grid, timm_dim, head_dim, grid_type, rotate_half):
    timm_pe = RotaryEmbeddingCat(timm_dim, temperature=100.0, in_pixels=False, grid_type=grid_type, rotate_half=rotate_half)
    emb = timm_pe.get_embed(list(grid))  # (N, 2 * rot_dim): sin, cos
    rot_dim = emb.shape[-1] // 2
    q = torch.randn(2, 3, math.prod(grid), head_dim)
    ref = apply_rot_embed_cat(q[..., :rot_dim], emb, half=rotate_half)
    opts = dict(axis_dims=(2 * (timm_dim // 4),) * len(grid), theta=100.0, coords=grid_type)
    mine = ours(q, grid, pairing="half" if rotate_half else "interleaved", **opts)
    other = ours(q, grid, pairing="interleaved" if rotate_half else "half", **opts)  # the other pairing
    assert_tells_apart(mine[..., :rot_dim], other[..., :rot_dim], ref, rtol=1e-5, atol=1e-5)
    assert torch.equal(mine[..., rot_dim:], q[..., rot_dim:])


@pytest.mark.parametrize("grid,ref_shape", [((8, 6), (4, 3)), ((6, 10), (3, 4))])
def test_timm_ref_feat_shape_is_linear_scaling(grid, ref_shape):
    timm_pe = RotaryEmbeddingCat(16, temperature=10000.0, in_pixels=False, ref_feat_shape=list(ref_shape), rotate_half=True)
    q = torch.randn(1, 2, math.prod(grid), 16)
    ref = apply_rot_embed_cat(q, timm_pe.get_embed(list(grid)), half=True)
    scale = tuple(g / r for g, r in zip(grid, ref_shape))
    assert_tells_apart(ours(q, grid, scaling="linear", scale=scale), ours(q, grid), ref, rtol=1e-5, atol=1e-5)


def test_timm_pixel_grid_differs_only_for_single_token_axes():
    """timm's pixel grid is linspace(-1, 1, n): -1 when n = 1, where ours is 0 (documented)."""
    timm_pe = RotaryEmbeddingCat(8, temperature=100.0, in_pixels=False, grid_type="pixel", rotate_half=True)
    sin_timm = timm_pe.get_embed([1, 3])[:, :2]  # axis-0 sines
    pe = ndpe.make(dims=2, kind="rope", dim=8, heads=1, theta=100.0, coords="pixel")
    assert torch.allclose(sin_timm, torch.sin(-torch.tensor([1.0, 0.1])).expand(3, 2))
    assert torch.equal(pe((1, 3)).rot[1][0, :, :2], torch.zeros(3, 2))


@pytest.mark.parametrize("interpolate,rescale,scaling", [(1.0, 1.0, None), (4.0, 1.0, "linear"), (1.0, 8.0, "ntk")])
@pytest.mark.parametrize("d,head_dim", [(8, 8), (8, 12), (16, 32)])
def test_equals_rotary_embedding_torch_1d(d, head_dim, interpolate, rescale, scaling):
    peer = RotaryEmbedding(dim=d, theta=500, interpolate_factor=interpolate, theta_rescale_factor=rescale)
    q = torch.randn(2, 3, 40, head_dim)
    scale = interpolate if scaling == "linear" else rescale if scaling == "ntk" else None
    mine = ours(q, (40,), axis_dims=(d,), theta=500.0, pairing="interleaved", scaling=scaling, scale=scale)
    other = ours(q, (40,), axis_dims=(d,), theta=500.0, pairing="half", scaling=scaling, scale=scale)
    assert_tells_apart(mine, other, peer.rotate_queries_or_keys(q), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("grid", [(4, 6), (6, 4), (2, 3, 5)])
@pytest.mark.parametrize("max_freq", [10, 64])
def test_pixel_bands_equal_rotary_embedding_torch(grid, max_freq):
    d = 8
    peer = RotaryEmbedding(dim=d, freqs_for="pixel", max_freq=max_freq)
    freqs = peer.get_axial_freqs(*grid).reshape(math.prod(grid), -1)
    q = torch.randn(2, 3, math.prod(grid), d * len(grid) + 4)
    ref = apply_rotary_emb(freqs, q)
    mine = ours(q, grid, axis_dims=(d,) * len(grid), pairing="interleaved", coords="pixel", max_res=float(max_freq),
                linear_bands=True)
    torch.testing.assert_close(mine, ref, rtol=0, atol=1e-4)  # its angles in float32, up to pi * 32 rad
    theta = ours(q, grid, axis_dims=(d,) * len(grid), pairing="interleaved", coords="pixel")
    assert (theta - ref).abs().max() > 0.1  # theta's series is another encoding: the test can tell


@pytest.mark.parametrize("opts, match", [({"linear_bands": True}, "needs max_res"), ({"max_res": 0.5}, "max_res must be"),
                                         ({"max_res": 64, "theta": 100.0}, "takes no theta"),
                                         ({"max_res": 64, "scaling": "linear", "scale": 2.0}, "takes no theta, scaling")])
def test_pixel_band_refusals(opts, match):
    with pytest.raises(ValueError, match=match):
        ndpe.make(dims=2, kind="rope", dim=32, **opts)


@pytest.mark.parametrize("grid", [(4, 6), (6, 4), (2, 3, 4)])
def test_equals_rotary_embedding_torch_axial(grid):
    d = 8
    peer = RotaryEmbedding(dim=d, theta=10000)
    freqs = peer.get_axial_freqs(*grid).reshape(math.prod(grid), -1)  # (N, d * dims), interleaved layout
    q = torch.randn(2, 3, math.prod(grid), d * len(grid) + 4)
    ref = apply_rotary_emb(freqs, q)
    mine = ours(q, grid, axis_dims=(d,) * len(grid), pairing="interleaved")
    assert_tells_apart(mine, ours(q, grid, axis_dims=(d,) * len(grid), pairing="half"), ref, rtol=1e-5, atol=1e-5)
