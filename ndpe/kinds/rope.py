"""``rope``: axial rotary position embedding on 1, 2 or 3 positional axes (RoPE-ND).

Conventions:
- Channels. Each head rotates its first ``rot_dim = sum(axis_dims)`` channels; channels past
  ``rot_dim`` are passed through unrotated (partial rotation). The default ``axis_dims`` gives
  every axis the same even share, ``2 * (head_dim // (2 * dims))``: head_dim 64 in 3D rotates
  3 x 20 channels and leaves 4 unrotated.
- Axis order ``ij``: axis 0 = rows (frames in 3D) owns the first ``axis_dims[0] / 2`` frequencies
  of the ``rot_dim / 2``, then axis 1, ... Frequency ``j`` of axis ``a`` is
  ``theta_a ** (-2j / d_a)`` and its angle is ``coord_a * freq``.
- Pairing. ``"half"`` (default; HF / GPT-NeoX ``rotate_half``, timm ``rotate_half=True``):
  frequency ``i`` rotates channels ``(i, i + rot_dim / 2)``. ``"interleaved"`` (RoFormer,
  rotary-embedding-torch, timm's default): it rotates ``(2i, 2i + 1)``. Same rotation up to a
  channel permutation.
- Coordinates (``coords``): ``"index"`` 0..n-1 (default), ``"pixel"`` -1..1 (0 when n = 1),
  ``"centered"`` ``(i + 0.5) / n * 2 - 1``.
- Scaling for extrapolation, per axis (formulas in :mod:`ndpe.scaling`): ``"linear"``
  (position interpolation), ``"ntk"``, ``"dynamic-ntk"`` and ``"yarn"`` (both need
  ``train_shape``); ``scale`` is target / trained length. Scaling needs ``coords="index"``.
- Precision. Angles are computed in float64 (float32 on MPS) from float32 positions, cos/sin
  returned in float32 (or ``dtype=``). Integer positions are exact up to 2**24 and angles keep
  an error below 1e-10 rad up to position 100,000, so the only rounding left is that of the
  output dtype (``tests/test_precision.py``).
- Output. ``rot = (cos, sin)`` of shape ``(1, N, rot_dim / 2)`` (heads axis of size 1), or
  ``(B, 1, N, rot_dim / 2)`` for batched positions ``(B, N, dims)``.

>>> import ndpe, torch
>>> pe = ndpe.make(dims=2, kind="rope", dim=384, heads=6)        # head_dim 64: 32 + 32 channels
>>> pos = pe((14, 14), num_prefix=1)
>>> pos.rot[0].shape, pos.pairing
(torch.Size([1, 197, 32]), 'half')
>>> q = k = torch.randn(2, 6, 197, 64)
>>> ndpe.apply_qk(q, k, pos)[0].shape
torch.Size([2, 6, 197, 64])
"""
from __future__ import annotations

from typing import Sequence

import torch
from einops import rearrange
from torch import Tensor

from ..base import Encoding
from ..checks import check_choice, per_axis
from ..contract import PAIRINGS, PosOut
from ..registry import register
from ..scaling import NEEDS_TRAIN_SHAPE, SCALINGS, axial_inv_freq, dynamic_ntk_theta, ntk_exponent, scaled_inv_freq


def resolve_axis_dims(head_dim: int, dims: int, axis_dims: Sequence[int] | None) -> tuple[int, ...]:
    """Rotary channels per axis: checked ``axis_dims`` or the default equal even split of ``head_dim``."""
    if head_dim % 2:
        raise ValueError(f"rotary encodings need an even head_dim (dim // heads), got head_dim={head_dim}")
    if axis_dims is None:
        share = 2 * (head_dim // (2 * dims))
        if share == 0:
            raise ValueError(f"head_dim={head_dim} is too small to rotate {dims} axes: need head_dim >= {2 * dims}")
        return (share,) * dims
    if isinstance(axis_dims, int) or not all(isinstance(d, int) and not isinstance(d, bool) for d in axis_dims):
        raise TypeError(f"axis_dims must be a tuple of {dims} ints (rotary channels per axis), got {axis_dims!r}")
    axis_dims = tuple(axis_dims)
    if len(axis_dims) != dims:
        raise ValueError(f"axis_dims must have one entry per axis ({dims}), got {axis_dims}")
    if any(d < 0 or d % 2 for d in axis_dims) or sum(axis_dims) == 0:
        raise ValueError(f"axis_dims entries must be even and >= 0 (pairs of channels) with a positive sum, "
                         f"got {axis_dims}")
    if sum(axis_dims) > head_dim:
        raise ValueError(f"axis_dims {axis_dims} rotate {sum(axis_dims)} channels but head_dim is {head_dim}")
    return axis_dims


def check_pairing(pairing: str) -> None:
    """Validate the ``pairing`` option shared by the rotary kinds (``coords`` is checked by the base class)."""
    check_choice(pairing, "pairing", PAIRINGS)


def angle_dtype(device: torch.device) -> torch.dtype:
    """float64 for angles, except on MPS which has none."""
    return torch.float32 if device.type == "mps" else torch.float64


@register("rope", dims=(1, 2, 3))
class RoPE(Encoding):
    """Axial RoPE: each axis rotates its own share of every head's channels (see the module doc).

    Args:
        axis_dims: rotary channels per axis (even, sum <= head_dim); default equal even shares.
        theta: frequency base, one or per axis.
        coords: ``"index"``, ``"pixel"`` or ``"centered"`` coordinates.
        pairing: ``"half"`` or ``"interleaved"``.
        scaling: None, ``"linear"``, ``"ntk"``, ``"dynamic-ntk"`` or ``"yarn"``.
        scale: factor >= 1 (target / trained length), one or per axis; required with a scaling.
        train_shape: grid the model was trained on (``dynamic-ntk`` and ``yarn``).
    """

    inv_freq: Tensor  # (rot_dim / 2,) float64 buffer

    def __init__(self, *, dims: int, dim: int, heads: int = 1, axis_dims: Sequence[int] | None = None,
                 theta: float | Sequence[float] = 10000.0, coords: str = "index", pairing: str = "half",
                 scaling: str | None = None, scale: float | Sequence[float] | None = None,
                 train_shape: int | Sequence[int] | None = None):
        super().__init__(dims=dims, dim=dim, heads=heads)
        self.axis_dims = resolve_axis_dims(self.head_dim, dims, axis_dims)
        self.rot_dim = sum(self.axis_dims)
        self.theta = per_axis(theta, dims, "theta", low=1.0, inclusive=False)
        check_pairing(pairing)
        self.coords_mode, self.pairing = coords, pairing
        self.scaling, self.scale, self.train_shape = self._check_scaling(scaling, scale, train_shape)
        inv_freq, self.attn_factor = self._build_inv_freq(torch.device("cpu"))
        self.register_buffer("inv_freq", inv_freq, persistent=False)  # (rot_dim / 2,) float64

    def _check_scaling(self, scaling, scale, train_shape):
        dims = self.dims
        if scaling is None:
            if scale is not None or train_shape is not None:
                raise ValueError("scale and train_shape need a scaling ('linear', 'ntk', 'dynamic-ntk' or 'yarn')")
            return None, (1.0,) * dims, None
        if not isinstance(scaling, str) or scaling not in SCALINGS:
            raise ValueError(f"scaling must be None or one of {SCALINGS}, got {scaling!r}")
        if self.coords_mode != "index":
            raise ValueError(f"scaling={scaling!r} works on lengths in tokens: it needs coords='index', "
                             f"got {self.coords_mode!r}")
        if scale is None:
            raise ValueError(f"scaling={scaling!r} needs scale= (target length / trained length, >= 1, "
                             "one or per axis)")
        scale = per_axis(scale, dims, "scale", low=1.0)
        if scaling in NEEDS_TRAIN_SHAPE:
            if train_shape is None:
                raise ValueError(f"scaling={scaling!r} needs train_shape= (the grid the model was trained on)")
            train_shape = per_axis(train_shape, dims, "train_shape", low=1.0)
        elif train_shape is not None:
            raise ValueError(f"train_shape is used by {NEEDS_TRAIN_SHAPE} only, not by scaling={scaling!r}")
        if scaling in ("ntk", "dynamic-ntk"):
            for d in self.axis_dims:
                if d:
                    ntk_exponent(d)  # raises for d = 2
        return scaling, scale, train_shape

    def _build_inv_freq(self, device: torch.device) -> tuple[Tensor, tuple[float, ...]]:
        """Static per-axis frequencies concatenated ``(rot_dim / 2,)`` and the cos/sin factor per axis."""
        freqs, factors = [], []
        for a, d in enumerate(self.axis_dims):
            train = None if self.train_shape is None else self.train_shape[a]
            f, m = scaled_inv_freq(d, self.theta[a], self.scaling, self.scale[a], train, device=device)
            freqs.append(f)
            factors.append(m)
        return torch.cat(freqs).to(angle_dtype(device)), tuple(factors)

    def _apply(self, fn, *args, **kwargs):
        out = super()._apply(fn, *args, **kwargs)
        self.inv_freq = self._build_inv_freq(self.inv_freq.device)[0]  # .half() / .to(bf16) never reach it
        return out

    def axis_inv_freqs(self, positions: Tensor) -> list[Tensor]:
        """Per-axis frequencies ``(d_a / 2,)``; dynamic NTK recomputes them from ``max(positions) + 1``."""
        freqs = list(self.inv_freq.split([d // 2 for d in self.axis_dims]))
        if self.scaling == "dynamic-ntk":
            for a, d in enumerate(self.axis_dims):
                if d:
                    length = positions[..., a].max() + 1
                    theta = dynamic_ntk_theta(d, self.theta[a], self.scale[a], length, self.train_shape[a])
                    freqs[a] = axial_inv_freq(d, theta, device=positions.device, dtype=positions.dtype)
        return freqs

    def encode(self, positions: Tensor, grid_shape) -> PosOut:
        pos = positions.to(self.inv_freq.dtype)  # (..., N, dims), float64
        cos_axes, sin_axes = [], []
        for a, freq in enumerate(self.axis_inv_freqs(pos)):
            angle = pos[..., a, None] * freq  # (..., N, d_a / 2)
            m = self.attn_factor[a]
            cos_axes.append(angle.cos() * m if m != 1.0 else angle.cos())
            sin_axes.append(angle.sin() * m if m != 1.0 else angle.sin())
        cos = torch.cat(cos_axes, dim=-1).float()  # (..., N, rot_dim / 2)
        sin = torch.cat(sin_axes, dim=-1).float()
        pattern = "b n r -> b 1 n r" if positions.ndim == 3 else "n r -> 1 n r"  # heads axis
        return PosOut(rot=(rearrange(cos, pattern), rearrange(sin, pattern)), pairing=self.pairing)

    def extra_repr(self) -> str:
        s = (f"{super().extra_repr()}, axis_dims={self.axis_dims}, theta={self.theta}, "
             f"coords={self.coords_mode!r}, pairing={self.pairing!r}")
        if self.scaling is not None:
            s += f", scaling={self.scaling!r}, scale={self.scale}, train_shape={self.train_shape}"
        return s
