"""``gta``: GTA, geometric transform attention (Miyato et al. 2024, "GTA: A Geometry-Aware Attention Mechanism for
Multi-View Transformers"), with one camera per token.

A token of a multi-view transformer carries its view's camera, the world-to-camera extrinsic ``E`` (4 x 4, SE(3)),
and its patch's place in the image. GTA turns both into one per-token linear map ``D`` of each head's channels and
attends with ``q -> D^T q``, ``k -> D^-1 k``, ``v -> D^-1 v`` and the output ``o -> D o`` (the contract's ``frame``),
so ``q_i . k_j = q^T D_i D_j^-1 k`` and ``o_i = D_i sum_j a_ij D_j^-1 v_j``. ``E_i E_j^-1`` is the pose of camera
``j`` seen from camera ``i``: a change of world frame (every ``E`` times the same SE(3) ``G`` on the right) leaves
attention, its output included, unchanged. The output's ``D_i`` brings what token ``i`` gathered from the other
views back into its own frame; without it the output would move with the world.

``D`` is block-diagonal, as in the PRoPE authors' implementation of GTA (liruilong940607/prope,
``prope/per_token_camera.py``, its ``Ks=None`` branch, "GTA formula"; ported in ``tests/test_prope.py``): ``E``
repeated on the first ``head_dim / 2`` channels in blocks of 4, then RoPE of the patch's column on ``head_dim / 4``
channels and of its row on the last ``head_dim / 4``, frequencies ``theta ** (-i / (head_dim / 8))`` (``theta`` 100)
of the patch index. ndpe pairs the rotated channels interleaved (``x[2i], x[2i+1]``) so that every block of ``D`` is
4 x 4; the reference pairs each quarter's halves: the same attention up to a fixed permutation of the channels. A
head_dim that 8 does not divide (a multiple of 4, e.g. 12) gives the camera ``4 * (head_dim // 8)`` channels and each
patch axis half of the rest.

Cameras: ``pe(grid_shape, extrinsics=E)`` with ``E`` ``(N, 4, 4)`` or ``(B, N, 4, 4)``, one per grid token (a view's
camera repeated over its patches). Without them (a model given no cameras, ``ndpe viz``), view ``v`` of a
``(views, rows, cols)`` grid is seen from the default ring :func:`ring_extrinsics` and a 2D grid is view 0.
Positions are ``(view, row, col)`` (2D: ``(row, col)``) indices; only the camera and the patch are encoded.
Cameras are finite or refused in one line, as positions are (:meth:`position_limit`): extrinsics rigid (``det R =
+1``, ``R R^T = I`` within :func:`rigid_tolerance` of their dtype, so float16 cameras pass), and every entry of ``P``
and ``P^-1`` within a quarter of what the output dtype holds (:func:`check_frames`).

>>> import ndpe, torch
>>> pe = ndpe.make(dims=3, kind="gta", dim=64, heads=2)
>>> pos = pe((2, 3, 4))
>>> [t.shape for t in pos.frame]            # D - I and D^-1 - I: 8 blocks of 4 x 4 per token
[torch.Size([1, 24, 128]), torch.Size([1, 24, 128])]
"""
from __future__ import annotations

import math
from typing import Sequence, cast

import torch
from einops import rearrange, repeat
from torch import Tensor

from ..base import Encoding, pad_prefix
from ..checks import check_number
from ..coords import angle_limit, output_max
from ..contract import PosOut
from ..registry import register


RING_STEP, RING_RADIUS = math.pi / 4, 2.0  # the default cameras: view v at azimuth v * 45 degrees, 2 from the origin


def ring_extrinsics(view: Tensor) -> Tensor:
    """World-to-camera ``(..., 4, 4)`` of the default cameras: view ``v`` ``(...)`` sits on a circle of radius 2 in
    the world's x-z plane at azimuth ``v * 45`` degrees, looking at the origin, its y axis along the world's
    (OpenCV axes: x right, y down, z forward). View 0 is ``R = I``, ``t = (0, 0, 2)``.

    >>> ring = ring_extrinsics(torch.arange(8.0))
    >>> ring.shape, torch.equal(ring[0, :3, :3], torch.eye(3)), ring[0, 2, 3].item()
    (torch.Size([8, 4, 4]), True, 2.0)
    """
    phi = view.double() * RING_STEP  # float64 angles, so that a far view index keeps its place on the ring
    c, s = phi.cos().float(), phi.sin().float()
    zero, one = torch.zeros_like(c), torch.ones_like(c)
    rows = torch.stack([torch.stack([c, zero, s], -1), torch.stack([zero, one, zero], -1),
                        torch.stack([-s, zero, c], -1)], -2)  # camera axes in world coordinates: right, down, forward
    centre = RING_RADIUS * torch.stack([s, zero, -c], -1)
    t = -torch.einsum("...ij,...j->...i", rows, centre)
    top = torch.cat([rows, t[..., None]], -1)
    return torch.cat([top, torch.stack([zero, zero, zero, one], -1)[..., None, :]], -2)


def invert_se3(e: Tensor) -> Tensor:
    """The inverse ``(..., 4, 4)`` of rigid transforms ``e``: ``[R^T | -R^T t]``."""
    r_t = e[..., :3, :3].transpose(-1, -2)
    top = torch.cat([r_t, -r_t @ e[..., :3, 3:]], -1)
    return torch.cat([top, e[..., 3:, :]], -2)


def rigid_tolerance(dtype: torch.dtype) -> float:
    """The ``R R^T = I`` tolerance of extrinsics given in ``dtype``: 1e-4, or twice the epsilon of a coarser dtype
    (a rotation rounded to float16 is off by up to 8e-4, to bfloat16 by 6e-3)."""
    return max(1e-4, 2 * torch.finfo(dtype).eps)


def check_extrinsics(extrinsics, num_tokens: int) -> Tensor:
    """World-to-camera SE(3) matrices ``(N, 4, 4)`` or ``(B, N, 4, 4)``, one per grid token: finite, rigid (``R`` a
    rotation, ``det R = +1``, within :func:`rigid_tolerance` of their dtype); returned as float32."""
    if not isinstance(extrinsics, Tensor) or not extrinsics.is_floating_point() or extrinsics.dim() not in (3, 4) \
            or extrinsics.shape[-3:] != (num_tokens, 4, 4) or extrinsics.numel() == 0:
        got = tuple(extrinsics.shape) if isinstance(extrinsics, Tensor) else type(extrinsics).__name__
        raise ValueError(f"extrinsics must be a floating (N, 4, 4) or (B, N, 4, 4) tensor of world-to-camera matrices, "
                         f"one per grid token (N = {num_tokens}, B >= 1), got {got}")
    if extrinsics.device.type == "meta":
        raise ValueError("extrinsics are on the meta device (shape only, no values); pass real cameras")
    e = extrinsics.float()
    if torch.compiler.is_compiling():
        return e
    if not bool(torch.isfinite(e).all()):
        raise ValueError("extrinsics contain NaN or inf; expected finite world-to-camera matrices")
    eye = torch.eye(3, device=e.device)
    bottom = torch.tensor([0.0, 0.0, 0.0, 1.0], device=e.device)
    r = e[..., :3, :3]
    if not (torch.allclose(e[..., 3, :], bottom.expand_as(e[..., 3, :]))
            and torch.allclose(r @ r.transpose(-1, -2), eye.expand_as(r), atol=rigid_tolerance(extrinsics.dtype))):
        raise ValueError("extrinsics must be rigid transforms [R | t; 0 0 0 1] with R a rotation (R R^T = I); "
                         "a camera-to-world pose becomes world-to-camera by inverting it")
    if not bool((torch.linalg.det(r) > 0).all()):
        raise ValueError("extrinsics' R must be a rotation (det R = +1), got a reflection (det R = -1): flip an axis "
                         "of the camera frame to make it right-handed")
    return e


def check_frames(kind: str, p: Tensor, p_inv: Tensor, dtype: torch.dtype) -> None:
    """Refuse (one line) camera matrices ``P`` and ``P^-1`` with an entry past a quarter of what ``dtype`` (the
    output's) holds: a 4 x 4 block applied to channels of magnitude 1 then stays finite."""
    if torch.compiler.is_compiling():
        return
    reach = max(float(p.abs().amax()), float(p_inv.abs().amax()))
    limit = output_max(dtype) / 4
    if not reach <= limit:
        name = str(dtype).removeprefix("torch.")
        raise ValueError(f"{kind}'s camera matrices P and P^-1 reach {reach:g}, past {limit:.3g}, where a block "
                         f"applied to q, k, v overflows {name}: express the translations in larger units")


@register("gta", dims=(2, 3))
class GTA(Encoding):
    """GTA: each token's camera (SE(3)) and patch (2D RoPE) as one map of q, k, v and the output (module doc).

    Args:
        theta: the frequency base of the patch rotations (the reference's 100).
    """

    description = "GTA (Miyato et al. 2024): each token's camera (SE(3)) and patch (2D RoPE) map q, k, v and the output"
    colour, marker = "#4d9221", "P"
    takes_intrinsics = False  # PRoPE's cameras also take their intrinsics

    def __init__(self, *, dims: int, dim: int, heads: int = 1, theta: float = 100.0):
        super().__init__(dims=dims, dim=dim, heads=heads)
        if self.head_dim % 4 or self.head_dim < 8:
            raise ValueError(f"{self.kind} needs head_dim a multiple of 4, at least 8 (the camera and the patch "
                             f"rotations in blocks of 4), got dim={dim}, heads={heads}: head_dim {self.head_dim}")
        self.theta = check_number(theta, "theta", low=0.0, inclusive=False)

    def forward(self, grid_shape: Sequence[int] | None = None, *, extrinsics: Tensor | None = None,
                intrinsics: Tensor | None = None, positions: Tensor | None = None, num_prefix: int = 0,
                dtype: torch.dtype | None = None, past: int = 0) -> PosOut:
        """As every kind's (:class:`~ndpe.base.Encoding`), plus the grid tokens' cameras: ``extrinsics``
        ``(N, 4, 4)`` or ``(B, N, 4, 4)`` world-to-camera (and, for ``prope``, ``intrinsics`` ``(N, 3, 3)`` or
        ``(B, N, 3, 3)``). Without them, the default ring of cameras (module doc)."""
        if extrinsics is None and intrinsics is None:
            return super().forward(grid_shape, positions=positions, num_prefix=num_prefix, dtype=dtype, past=past)
        if intrinsics is not None and not self.takes_intrinsics:
            raise ValueError(f"{self.kind} takes extrinsics alone; intrinsics are PRoPE's (kind='prope')")
        if extrinsics is None or (self.takes_intrinsics and intrinsics is None):
            raise ValueError(f"{self.kind} takes its cameras as extrinsics=" + (" and intrinsics=" if
                             self.takes_intrinsics else "") + ", one per grid token")
        shape = self.check_call(grid_shape, positions, num_prefix, dtype, past)
        if past:
            raise ValueError(f"past= (KV-cache decoding) needs a token order, dims=1; got dims={self.dims}")
        if positions is None:
            positions = self.coords(cast(tuple, shape))
        else:
            positions = self.explicit_positions(positions, shape, dtype)
        cameras = check_extrinsics(extrinsics, positions.shape[-2])
        check_batches(positions, cameras)
        frames = self.projections(cameras, intrinsics)
        check_frames(self.kind, *frames, dtype or torch.float32)
        out = pad_prefix(self.encode_frames(positions, *frames), num_prefix)
        return out if dtype is None else out.to(dtype)

    def position_limit(self, dtype: torch.dtype = torch.float32) -> tuple[float, str] | None:
        """The patch rotations' (fastest frequency 1 rad per unit), and the default ring's view angle (pi / 4)."""
        return angle_limit(self.kind, 1.0)

    def projections(self, extrinsics: Tensor, intrinsics: Tensor | None) -> tuple[Tensor, Tensor]:
        """Each token's camera matrix ``P`` and its inverse, ``(..., N, 4, 4)``: GTA's ``P = E``."""
        return extrinsics, invert_se3(extrinsics)

    def encode(self, positions: Tensor, grid_shape) -> PosOut:
        """The default cameras: the ring (:func:`ring_extrinsics`) at each token's view (2D: view 0)."""
        view = positions[..., 0] if self.dims == 3 else torch.zeros_like(positions[..., 0])
        return self.encode_frames(positions, *self.projections(ring_extrinsics(view), None))

    def encode_frames(self, positions: Tensor, p: Tensor, p_inv: Tensor) -> PosOut:
        """The ``frame`` of tokens at ``positions`` ``(..., N, dims)`` seen by cameras ``p`` (``p_inv`` its inverse),
        each ``(..., N, 4, 4)``: ``P`` repeated over half the channels, then the patch rotations."""
        pairs = self.head_dim // 4 - self.head_dim // 8  # rotated pairs per patch axis (head_dim / 8 if it divides)
        freqs = self.theta ** (-torch.arange(pairs, dtype=torch.float64, device=positions.device) / pairs)
        angles = positions[..., -2:, None].double() * freqs  # (..., N, 2, pairs): row, col, in float64
        angles = rearrange(angles.flip(-2), "... a f -> ... (a f)")  # the column's first, as the reference's x
        cos, sin = angles.cos().float(), angles.sin().float()
        rot, rot_inv = rotation_blocks(cos, sin), rotation_blocks(cos, -sin)  # (..., N, pairs, 4, 4)
        lead = torch.broadcast_shapes(p.shape[:-3], rot.shape[:-4])  # per-sample cameras or positions: (B,)
        heads = 0 if not lead else 1  # the heads axis (one map for every head), after the batch's
        blocks = self.head_dim // 8  # the camera's
        return PosOut(frame=(tiled(p, rot, blocks, lead).unsqueeze(heads),
                             tiled(p_inv, rot_inv, blocks, lead).unsqueeze(heads)))


def check_batches(positions: Tensor, cameras: Tensor) -> None:
    """Batched positions ``(B, N, dims)`` and batched cameras ``(B', N, 4, 4)`` must agree on the batch (or one of
    them be 1, broadcast)."""
    if positions.dim() == 3 and cameras.dim() == 4 and 1 != positions.shape[0] != cameras.shape[0] != 1:
        raise ValueError(f"positions hold a batch of {positions.shape[0]} but the cameras one of {cameras.shape[0]}: "
                         "pass one camera set per sample (or one shared (N, 4, 4) set)")


def tiled(cam: Tensor, turn: Tensor, blocks: int, lead: tuple[int, ...]) -> Tensor:
    """``cam`` ``(..., N, 4, 4)`` repeated over ``blocks`` blocks, then ``turn``'s ``(..., N, m, 4, 4)``, minus the
    identity: ``(*lead, N, (blocks + m) * 16)``, the ``frame`` field's layout."""
    n, m = cam.shape[-3], turn.shape[-3]
    cams = repeat(cam, "... n i j -> ... n b i j", b=blocks).expand(*lead, n, blocks, 4, 4)
    mats = torch.cat([cams, turn.expand(*lead, n, m, 4, 4)], -3) - torch.eye(4, device=cam.device)
    return rearrange(mats, "... n b i j -> ... n (b i j)")


def rotation_blocks(cos: Tensor, sin: Tensor) -> Tensor:
    """``(..., 2m)`` angles' cos and sin -> ``(..., m, 4, 4)`` blocks, each two 2D rotations ``[[c, -s], [s, c]]``."""
    c, s = (rearrange(t, "... (m two) -> ... m two", two=2) for t in (cos, sin))
    zero = torch.zeros_like(c[..., 0])
    c0, c1, s0, s1 = c[..., 0], c[..., 1], s[..., 0], s[..., 1]
    entries = [c0, -s0, zero, zero, s0, c0, zero, zero, zero, zero, c1, -s1, zero, zero, s1, c1]
    return rearrange(torch.stack(entries, -1), "... (i j) -> ... i j", i=4)
