"""``rope-mixed``: RoPE with learnable frequencies that mix the axes (Heo et al. 2024, RoPE-Mixed).

Axial RoPE gives each frequency one axis; RoPE-Mixed ("Rotary Position Embedding for Vision
Transformer", ECCV 2024) learns, per head ``h`` and frequency ``j``, a vector over the axes:

    angle[h, n, j] = sum_a freqs[h, a, j] * coord_a[n]

so a head can rotate along diagonal directions. q.k still depends only on the offset between
tokens (angles stay linear in the coordinates). Initialisation as the paper and timm's
``RotaryEmbeddingMixed``: the axial frequencies ``theta ** (-2j / d_a)`` (theta = 10 for mixed)
with the axis unit vectors turned by a random rotation per head (2D: a uniform angle, the
paper's ``init_random_2d_freqs``; 3D: a uniform random rotation of SO(3)).

Differences from the paper: one set of frequencies shared by all layers (the paper and timm
learn one set per block; build one encoding per block to get that). Channels, pairing and
coordinates follow ``rope`` (``ndpe.kinds.rope``); the paper/timm pair channels interleaved,
``pairing="interleaved"`` reproduces them exactly. Angles are computed in float32 (as timm):
errors grow as ``|angle| * 6e-8``, below 1e-4 rad for coordinates up to ~1000.

Output ``rot = (cos, sin)`` of shape ``(heads, N, rot_dim / 2)``, or ``(B, heads, N, rot_dim / 2)``
for batched positions; never cached (learned). In training, ``apply_qk`` recognises these tables
(``ndpe.kernels.angles``) and takes the frequencies' gradient from the inverse rotation of q's and k's
gradients: 4 backward kernels besides rope's 4, no cos / sin gradients (those tables get none of their own there).

>>> import ndpe
>>> pe = ndpe.make(dims=2, kind="rope-mixed", dim=96, heads=3)
>>> pe((4, 6)).rot[0].shape
torch.Size([3, 24, 16])
"""
from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import Tensor, nn

from ..base import Encoding
from ..contract import PosOut
from ..kernels.angles import MixedCosSin, mixed_angle
from ..coords import FLOAT32_MAX
from ..registry import register
from ..scaling import axial_inv_freq
from ..checks import check_bool, check_pairing, per_axis
from .rope import resolve_axis_dims


def random_rotations(n: int, dims: int, *, generator: torch.Generator | None = None) -> Tensor:
    """``n`` rotation matrices ``(n, dims, dims)`` drawn uniformly from SO(dims)."""
    if dims == 2:  # the paper: one uniform angle per head
        t = torch.rand(n, generator=generator, dtype=torch.float64) * 2 * math.pi
        c, s = t.cos(), t.sin()
        return torch.stack([torch.stack([c, -s], -1), torch.stack([s, c], -1)], -2)
    q, r = torch.linalg.qr(torch.randn(n, dims, dims, generator=generator, dtype=torch.float64))
    q = q * torch.sign(torch.diagonal(r, dim1=-2, dim2=-1)).unsqueeze(-2)  # Haar on O(dims)
    q[..., 0] *= torch.sign(torch.linalg.det(q)).unsqueeze(-1)  # and into SO(dims)
    return q


def init_mixed_freqs(heads: int, axis_dims: Sequence[int], theta: float, *, rotate: bool = True,
                     generator: torch.Generator | None = None) -> Tensor:
    """Initial frequencies ``(heads, dims, sum(axis_dims) // 2)``.

    Group ``g`` (the ``axis_dims[g] / 2`` frequencies axis ``g`` owns in axial RoPE) keeps its
    magnitudes ``theta ** (-2j / d_g)`` along the direction ``R_h e_g``; ``rotate=False`` keeps
    ``R_h = I`` (exactly axial RoPE).
    """
    dims = len(axis_dims)
    if rotate:
        rot = random_rotations(heads, dims, generator=generator)  # (H, dims, dims)
    else:
        rot = torch.eye(dims, dtype=torch.float64).expand(heads, dims, dims)
    groups = [rot[:, :, g, None] * axial_inv_freq(d, theta) for g, d in enumerate(axis_dims)]  # (H, dims, d_g / 2)
    return torch.cat(groups, dim=-1).float()


@register("rope-mixed", dims=(2, 3))
class RoPEMixed(Encoding):
    """Learnable mixed-axis RoPE (see the module doc).

    Args:
        theta: base of the initial frequency magnitudes (paper: 10 for RoPE-Mixed).
        coords: ``"index"`` (default, as the paper), ``"pixel"`` or ``"centered"``.
        pairing: ``"half"`` (default) or ``"interleaved"`` (the paper / timm layout).
        rotate: random per-head rotation at init (False: starts as axial RoPE).
    """

    has_parameters = True
    description = "learnable per-head mixed-axis frequencies (Heo et al. 2024)"
    colour, marker = "#9467bd", "P"

    def __init__(self, *, dims: int, dim: int, heads: int = 1, theta: float = 10.0, coords: str = "index",
                 pairing: str = "half", rotate: bool = True):
        super().__init__(dims=dims, dim=dim, heads=heads)
        if isinstance(theta, (tuple, list)):
            raise TypeError(f"rope-mixed takes one theta (its frequencies mix the axes), got {theta!r}")
        self.theta = per_axis(theta, 1, "theta", low=1.0, inclusive=False)[0]
        check_pairing(pairing)
        check_bool(rotate, "rotate")
        self.axis_dims = resolve_axis_dims(self.head_dim, dims, None)
        self.rot_dim = sum(self.axis_dims)
        self.coords_mode, self.pairing = coords, pairing
        freqs = init_mixed_freqs(heads, self.axis_dims, self.theta, rotate=rotate)
        self.freqs = nn.Parameter(freqs)  # (heads, dims, rot_dim / 2)

    def position_limit(self, dtype: torch.dtype = torch.float32) -> tuple[float, str] | None:
        """Coordinates whose float32 angles ``sum_a p_a freqs[h, a, j]`` stay finite: each partial sum is at most
        ``|coordinate| sum_a |freqs[h, a, j]|`` (reads the learned frequencies: explicit positions only, which are read
        anyway)."""
        fastest = float(self.freqs.detach().abs().sum(1).amax())  # rad per unit of |coordinate|
        return (FLOAT32_MAX / fastest, "where rope-mixed's float32 angles overflow") if fastest > 0 else None

    def encode(self, positions: Tensor, grid_shape) -> PosOut:
        pos = positions.float()  # (..., N, dims)
        freqs = self.freqs.float()  # (H, dims, rot_dim / 2); elementwise, so autocast keeps float32
        if torch.compiler.is_compiling() or not torch.is_grad_enabled() or not freqs.requires_grad or pos.requires_grad:
            angle = mixed_angle(pos, freqs)
            return PosOut(rot=(angle.cos(), angle.sin()), pairing=self.pairing)
        return PosOut(rot=MixedCosSin.apply(pos, freqs), pairing=self.pairing)
