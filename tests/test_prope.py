"""``prope``: PRoPE pinned against a port of the authors' attention, and the property that makes it relative.

The oracle (:func:`reference_attention`) ports ``prope_dot_product_attention`` and ``_prepare_apply_fns`` of
liruilong940607/prope, ``prope/per_token_camera.py`` (cameras per token): the intrinsics normalized by the image
size, ``P = lift(K) E``, q by ``P^T``, k and v by ``P^-1 = E^-1 lift(K^-1)``, the output by ``P``, each on the first
half of the head in blocks of 4; RoPE of the patch column and row (base 100, each quarter's halves paired) on the
other half, the output rotated back. With ``Ks=None`` it is the same file's "GTA formula" (``P = E``), the oracle of
``tests/test_gta.py``. The reference's rotated channels are paired by halves, ndpe's interleaved:
:func:`to_ndpe` is the fixed channel permutation between them.
"""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import ndpe
from ndpe.kinds.gta import ring_extrinsics

HEAD_DIM, HEADS = 32, 2
VIEWS, ROWS, COLS = 3, 4, 5  # patches_y = ROWS, patches_x = COLS
IMAGE_H, IMAGE_W = 48, 64
N = VIEWS * ROWS * COLS


# --- the oracle: a port of liruilong940607/prope, prope/per_token_camera.py ---------------------------------------

def _invert_se3(e):
    r_inv = e[..., :3, :3].transpose(-1, -2)
    out = torch.zeros_like(e)
    out[..., :3, :3] = r_inv
    out[..., :3, 3] = -torch.einsum("...ij,...j->...i", r_inv, e[..., :3, 3])
    out[..., 3, 3] = 1.0
    return out


def _lift(k):
    out = torch.zeros(k.shape[:-2] + (4, 4), dtype=k.dtype)
    out[..., :3, :3] = k
    out[..., 3, 3] = 1.0
    return out


def _invert_k(k):
    out = torch.zeros_like(k)
    out[..., 0, 0], out[..., 1, 1] = 1.0 / k[..., 0, 0], 1.0 / k[..., 1, 1]
    out[..., 0, 2], out[..., 1, 2] = -k[..., 0, 2] / k[..., 0, 0], -k[..., 1, 2] / k[..., 1, 1]
    out[..., 2, 2] = 1.0
    return out


def _rope_coeffs(positions, feat_dim, base=100.0):
    num = feat_dim // 2
    angles = positions[None, None, :, None] * base ** (-torch.arange(num, dtype=positions.dtype) / num)
    return angles.cos(), angles.sin()


def _rope(feats, coeffs, inverse=False):
    cos, sin = coeffs
    x, y = feats.chunk(2, dim=-1)
    if inverse:
        return torch.cat([cos * x - sin * y, sin * x + cos * y], dim=-1)
    return torch.cat([cos * x + sin * y, -sin * x + cos * y], dim=-1)


def _tiled(feats, matrix):  # (B, heads, T, d) by (B, T, 4, 4) on each 4 channels
    b, h, t, d = feats.shape
    return torch.einsum("btij,bntkj->bntki", matrix, feats.reshape(b, h, t, d // 4, 4)).reshape(feats.shape)


def reference_attention(q, k, v, viewmats, ks, *, patches_x, patches_y, image_width, image_height):
    """PRoPE attention (GTA's with ``ks=None``) over ``(B, heads, T, d)`` tokens with per-token cameras."""
    head_dim, seqlen = q.shape[-1], q.shape[-2]
    cameras = seqlen // (patches_x * patches_y)
    if ks is not None:
        kn = torch.zeros_like(ks)
        kn[..., 0, 0], kn[..., 1, 1] = ks[..., 0, 0] / image_width, ks[..., 1, 1] / image_height
        kn[..., 0, 2], kn[..., 1, 2] = ks[..., 0, 2] / image_width - 0.5, ks[..., 1, 2] / image_height - 0.5
        kn[..., 2, 2] = 1.0
        p = _lift(kn) @ viewmats
        p_inv = _invert_se3(viewmats) @ _lift(_invert_k(kn))
    else:
        p, p_inv = viewmats, _invert_se3(viewmats)
    xs = torch.arange(patches_x, dtype=q.dtype).tile(patches_y * cameras)
    ys = torch.arange(patches_y, dtype=q.dtype).repeat_interleave(patches_x).tile(cameras)
    cx, cy = _rope_coeffs(xs, head_dim // 4), _rope_coeffs(ys, head_dim // 4)
    sizes = (head_dim // 2, head_dim // 4, head_dim // 4)

    def apply(t, matrix, inverse):
        cam, x, y = t.split(sizes, dim=-1)
        return torch.cat([_tiled(cam, matrix), _rope(x, cx, inverse), _rope(y, cy, inverse)], dim=-1)

    out = F.scaled_dot_product_attention(apply(q, p.transpose(-1, -2), False), apply(k, p_inv, False),
                                         apply(v, p_inv, False))
    return apply(out, p, True)


# --- ndpe against it ---------------------------------------------------------------------------------------------

def to_ndpe(head_dim: int = HEAD_DIM) -> torch.Tensor:
    """ndpe's channel ``c`` is the reference's ``perm[c]``: the camera half as it is, then each rotated pair (column
    frequencies, then row frequencies) interleaved where the reference splits each quarter in halves."""
    half, eighth = head_dim // 2, head_dim // 8
    rotated = []
    for axis in range(2):
        for i in range(eighth):
            start = half + axis * 2 * eighth
            rotated += [start + i, start + eighth + i]
    return torch.tensor(list(range(half)) + rotated)


def random_rotation(g: torch.Generator, n: int) -> torch.Tensor:
    """``(n, 3, 3)`` rotations drawn through QR of Gaussian matrices (det +1)."""
    qr, r = torch.linalg.qr(torch.randn(n, 3, 3, generator=g, dtype=torch.float64))
    qr = qr * torch.sign(torch.diagonal(r, dim1=-2, dim2=-1))[:, None, :]
    return qr * torch.det(qr)[:, None, None]


def rigid(rotation: torch.Tensor, translation: torch.Tensor) -> torch.Tensor:
    out = torch.zeros(rotation.shape[:-2] + (4, 4), dtype=rotation.dtype)
    out[..., :3, :3], out[..., :3, 3], out[..., 3, 3] = rotation, translation, 1.0
    return out


def cameras(seed: int = 0, views: int = VIEWS):
    """Per-view cameras far from the identity (random rotations, translations of a few units, focal lengths and
    principal points that differ per view) and per-token copies ``(N, 4, 4)``, ``(N, 3, 3)`` in float64."""
    g = torch.Generator().manual_seed(seed)
    e = rigid(random_rotation(g, views), 3.0 * torch.randn(views, 3, generator=g, dtype=torch.float64))
    f = torch.rand(views, 2, generator=g, dtype=torch.float64) * 60 + 30
    c = torch.rand(views, 2, generator=g, dtype=torch.float64) * 20 + torch.tensor([IMAGE_W / 2 - 10, IMAGE_H / 2 - 10])
    k = torch.zeros(views, 3, 3, dtype=torch.float64)
    k[:, 0, 0], k[:, 1, 1], k[:, 0, 2], k[:, 1, 2], k[:, 2, 2] = f[:, 0], f[:, 1], c[:, 0], c[:, 1], 1.0
    per_token = N // views
    return e.repeat_interleave(per_token, 0), k.repeat_interleave(per_token, 0)


def qkv(seed: int = 1, batch: int = 1, tokens: int = N):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(batch, HEADS, tokens, HEAD_DIM, generator=g, dtype=torch.float64) for _ in range(3)]


def attend(pos: ndpe.PosOut, q, k, v):
    """Attention through the contract alone, as every attention layer applies it."""
    q, k = ndpe.apply_qk(q, k, pos)
    return ndpe.apply_out(F.scaled_dot_product_attention(q, k, ndpe.apply_v(v, pos)), pos)


def ours(kind: str, e, ks, q, k, v, **options):
    pe = ndpe.make(dims=3, kind=kind, dim=HEADS * HEAD_DIM, heads=HEADS, **options)
    cams = {"extrinsics": e} if ks is None else {"extrinsics": e, "intrinsics": ks}
    pos = pe((VIEWS, ROWS, COLS), **cams).to(torch.float64)
    perm = to_ndpe()
    return attend(pos, q[..., perm], k[..., perm], v[..., perm])


def reference(e, ks, q, k, v):
    return reference_attention(q, k, v, e[None], None if ks is None else ks[None], patches_x=COLS, patches_y=ROWS,
                               image_width=IMAGE_W, image_height=IMAGE_H)[..., to_ndpe()]


def test_equals_the_authors_attention():
    e, ks = cameras()
    q, k, v = qkv()
    got = ours("prope", e, ks, q, k, v, image_size=(IMAGE_H, IMAGE_W))
    want = reference(e, ks, q, k, v)
    assert want.abs().max() > 1.0  # cameras far from the identity: the outputs are not small
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)  # float32 frames, float64 attention


def test_a_shared_change_of_world_frame_changes_nothing():
    """Every extrinsic times the same SE(3) on the right: ``P_i P_j^-1`` and so the output are unchanged, to float
    precision; attention without the output's ``P`` (v still by ``P^-1``) moves by orders of magnitude more."""
    e, ks = cameras()
    g = torch.Generator().manual_seed(5)
    world = rigid(random_rotation(g, 1)[0], torch.tensor([4.0, -3.0, 2.0], dtype=torch.float64))
    q, k, v = qkv()
    opts = {"image_size": (IMAGE_H, IMAGE_W)}
    before, after = ours("prope", e, ks, q, k, v, **opts), ours("prope", e @ world, ks, q, k, v, **opts)
    change = (after - before).abs().max()
    assert change < 1e-4
    pe = ndpe.make(dims=3, kind="prope", dim=HEADS * HEAD_DIM, heads=HEADS, **opts)
    no_out = []
    for cams in (e, e @ world):
        pos = pe((VIEWS, ROWS, COLS), extrinsics=cams, intrinsics=ks).to(torch.float64)
        rq, rk = ndpe.apply_qk(q, k, pos)
        no_out.append(F.scaled_dot_product_attention(rq, rk, ndpe.apply_v(v, pos)))
    assert (no_out[1] - no_out[0]).abs().max() > 1e3 * max(change, 1e-6)


def test_the_default_cameras_normalize_to_gta():
    """No cameras: gta's ring with ``fx = W``, ``fy = H`` at the image's centre, so ``K`` normalizes to I."""
    pe = ndpe.make(dims=3, kind="prope", dim=64, heads=2, image_size=(48, 64))
    gta = ndpe.make(dims=3, kind="gta", dim=64, heads=2)
    grid = (3, 2, 2)
    for a, b in zip(pe(grid).frame, gta(grid).frame):
        torch.testing.assert_close(a, b)
    ring = ring_extrinsics(pe.coords(grid)[:, 0])
    k = torch.tensor([[64.0, 0, 32], [0, 48, 24], [0, 0, 1]]).expand(12, 3, 3)
    for a, b in zip(pe(grid).frame, pe(grid, extrinsics=ring, intrinsics=k).frame):
        torch.testing.assert_close(a, b)


def test_the_lens_matters_where_gta_sees_none():
    """Two cameras at the same pose with different focal lengths: GTA cannot tell them apart, PRoPE can."""
    e, ks = cameras()
    q, k, v = qkv()
    wide = ks.clone()
    wide[N // VIEWS:, :2, :2] *= 0.5  # views 1.. with half the focal length
    opts = {"image_size": (IMAGE_H, IMAGE_W)}
    assert (ours("prope", e, ks, q, k, v, **opts) - ours("prope", e, wide, q, k, v, **opts)).abs().max() > 1e-2


def test_refusals_are_one_line():
    pe = ndpe.make(dims=3, kind="prope", dim=64, heads=2)
    e = torch.eye(4).expand(12, 4, 4)
    for call, match in [(lambda: pe((3, 2, 2), extrinsics=e), "extrinsics= and intrinsics="),
                        (lambda: pe((3, 2, 2), extrinsics=e, intrinsics=torch.eye(3).expand(11, 3, 3)),
                         "one per grid token"),
                        (lambda: pe((3, 2, 2), extrinsics=e, intrinsics=-torch.eye(3).expand(12, 3, 3)),
                         "positive focal"),
                        (lambda: ndpe.make(dims=3, kind="prope", dim=64, heads=2, image_size=(0, 4)), "image_size")]:
        with pytest.raises(ValueError, match=match) as err:
            call()
        assert "\n" not in str(err.value)
    assert math.isclose(2 * math.degrees(math.atan(0.5)), 53.13, abs_tol=0.01)  # the ring's field of view (doc)
