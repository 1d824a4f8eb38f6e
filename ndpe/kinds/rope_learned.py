"""``rope-learned``: RoPE with learned or custom frequencies (rotary-embedding-torch's ``RotaryEmbedding``).

The rotation of ``rope``, with the frequency vector a tensor of its own: learned (``learned_freq=True``, the default
here: an ``nn.Parameter`` trained with the model), given (``custom_freqs=``), or one of rotary-embedding-torch's
schemes (``freqs_for``):

- ``"lang"``: ``theta ** (-2j / axis_dim)``, ``j < axis_dim / 2`` (``theta_rescale_factor=s`` first multiplies
  theta by ``s ** (axis_dim / (axis_dim - 2))``, the NTK-aware rescale);
- ``"pixel"``: ``pi * linspace(1, max_freq / 2, axis_dim / 2)`` for coordinates in ``[-1, 1]`` (``coords="pixel"`` by
  default with it, as the peer's ``get_axial_freqs``);
- ``"constant"``: ``num_freqs`` ones (a rotation of ``2 * num_freqs`` channels by the position itself).

Every axis rotates by the same ``F`` frequencies (the peer's ``get_axial_freqs``): axis ``a``'s angles are
``coord_a / interpolate_factor * freqs``, and the axes take consecutive blocks of ``2F`` channels, so a head rotates
its first ``rot_dim = dims * 2F`` channels (the rest pass through). ``interpolate_factor`` (``>= 1``) divides the
positions: position interpolation. Pairing is ``"interleaved"`` (channels ``(2i, 2i + 1)``, the peer's) by default.
Equal to rotary-embedding-torch 0.9.1's ``rotate_queries_or_keys`` (1D) and ``get_axial_freqs`` +
``apply_rotary_emb`` (2D, 3D) with its ``freqs`` copied (``tests/test_rope_learned.py``); the state dict's ``freqs``
is the peer's. A learned frequency vector keeps RoPE's relative property: ``q_m . k_n`` depends on ``m - n`` only,
whatever the frequencies. Angles are computed in float64 (float32 on MPS), cos/sin returned in float32.

>>> import ndpe
>>> pe = ndpe.make(dims=2, kind="rope-learned", dim=64, heads=2)     # head_dim 32: 2 x 16 channels, 8 frequencies
>>> pe.freqs.shape, pe.freqs.requires_grad, pe((4, 4)).rot[0].shape
(torch.Size([8]), True, torch.Size([1, 16, 16]))
"""
from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import Tensor, nn

from ..base import Encoding
from ..checks import check_bool, check_choice, check_int, check_number, check_pairing, is_number, shown
from ..contract import PosOut
from ..coords import COORD_MODES, angle_limit
from ..frequencies import pixel_inv_freq
from ..registry import register
from .rope import angle_dtype

FREQS_FOR = ("lang", "pixel", "constant")


def rotary_freqs(axis_dim: int, freqs_for: str = "lang", *, theta: float = 10000.0, max_freq: float = 10.0,
                 num_freqs: int = 1) -> Tensor:
    """rotary-embedding-torch's frequencies ``(F,)`` float32 for ``axis_dim`` rotary channels of one axis.

    >>> rotary_freqs(8).tolist()
    [1.0, 0.10000000149011612, 0.009999999776482582, 0.0010000000474974513]
    """
    if freqs_for == "lang":
        return 1.0 / (theta ** (torch.arange(0, axis_dim, 2)[: axis_dim // 2].float() / axis_dim))
    if freqs_for == "pixel":
        return pixel_inv_freq(axis_dim, max_freq, linear=True, dtype=torch.float32)
    return torch.ones(num_freqs)


def check_custom_freqs(freqs: Sequence[float] | Tensor) -> Tensor:
    """Caller-supplied frequencies: a non-empty list or 1-D tensor of finite numbers, as float32 ``(F,)``."""
    values = freqs.tolist() if isinstance(freqs, Tensor) and freqs.ndim == 1 else freqs
    if (not isinstance(values, (list, tuple)) or not values
            or not all(is_number(v) and math.isfinite(v) for v in values)):
        raise ValueError(f"custom_freqs must be a non-empty list or 1-D tensor of finite numbers (radians per unit "
                         f"of position), got {shown(freqs)}")
    return torch.tensor([float(v) for v in values], dtype=torch.float32)


@register("rope-learned", dims=(1, 2, 3))
class LearnedFreqRope(Encoding):
    """RoPE whose frequencies are a learned (or given) vector shared by the axes; see the module docstring.

    Args:
        axis_dim: rotary channels per axis for ``freqs_for`` ``"lang"`` / ``"pixel"`` (the peer's ``dim``); default
            the even share ``2 * (head_dim // (2 * dims))``. With ``custom_freqs`` or ``"constant"`` it is
            ``2 * len(freqs)``.
        custom_freqs: the frequencies, one per channel pair of an axis (radians per unit of position).
        freqs_for: ``"lang"``, ``"pixel"`` or ``"constant"`` (rotary-embedding-torch's).
        theta, max_freq, num_freqs: of ``"lang"``, ``"pixel"``, ``"constant"`` respectively.
        learned_freq: train the frequencies (an ``nn.Parameter``); False: a fixed buffer.
        interpolate_factor: positions are divided by it (``>= 1``).
        theta_rescale_factor: ``"lang"``'s theta times ``factor ** (axis_dim / (axis_dim - 2))``.
        pairing: ``"interleaved"`` (the peer's) or ``"half"``.
        coords: coordinate units; default ``"pixel"`` for ``freqs_for="pixel"``, else ``"index"``.
    """

    has_parameters = True  # learned_freq=True by default
    description = "RoPE with learned or custom frequencies (rotary-embedding-torch's learned_freq, custom_freqs)"
    colour, marker = "#fb9a99", "s"

    freqs: Tensor

    def __init__(self, *, dims: int, dim: int, heads: int = 1, axis_dim: int | None = None,
                 custom_freqs: Sequence[float] | Tensor | None = None, freqs_for: str = "lang",
                 theta: float = 10000.0, max_freq: float = 10.0, num_freqs: int = 1, learned_freq: bool = True,
                 interpolate_factor: float = 1.0, theta_rescale_factor: float = 1.0, pairing: str = "interleaved",
                 coords: str | None = None):
        super().__init__(dims=dims, dim=dim, heads=heads)
        check_choice(freqs_for, "freqs_for", FREQS_FOR)
        self.freqs_for, self.learned_freq = freqs_for, check_bool(learned_freq, "learned_freq")
        self.theta = check_number(theta, "theta", low=0.0, inclusive=False)
        self.max_freq = check_number(max_freq, "max_freq", low=0.0, inclusive=False)
        self.num_freqs = check_int(num_freqs, "num_freqs", low=1)
        self.interpolate_factor = check_number(interpolate_factor, "interpolate_factor", low=1.0)
        self.theta_rescale_factor = check_number(theta_rescale_factor, "theta_rescale_factor", low=0.0, inclusive=False)
        self.pairing = check_pairing(pairing)
        self.coords_mode = check_choice(coords, "coords", COORD_MODES) if coords is not None else (
            "pixel" if freqs_for == "pixel" else "index")
        if axis_dim is None:
            axis_dim = 2 * (self.head_dim // (2 * dims))
        self.axis_dim = check_int(axis_dim, "axis_dim", low=2)
        if custom_freqs is not None:
            freqs = check_custom_freqs(custom_freqs)
        else:
            rescaled = self.theta * theta_rescale_factor ** (axis_dim / (axis_dim - 2)) if axis_dim > 2 else self.theta
            freqs = rotary_freqs(axis_dim, freqs_for, theta=rescaled, max_freq=self.max_freq, num_freqs=num_freqs)
        self.rot_dim = dims * 2 * freqs.numel()
        if self.head_dim % 2 or self.rot_dim > self.head_dim:
            raise ValueError(f"rope-learned rotates {dims} axes x {2 * freqs.numel()} channels = {self.rot_dim}, which "
                             f"must fit an even head_dim, got head_dim={self.head_dim}: pass a smaller axis_dim or fewer "
                             "frequencies")
        if learned_freq:
            self.freqs = nn.Parameter(freqs)
        else:
            self.register_buffer("freqs", freqs)

    def position_limit(self, dtype: torch.dtype = torch.float32) -> tuple[float, str] | None:
        """Where the fastest frequency's float64 angles keep no 1e-2 rad precision (reads the frequencies)."""
        return angle_limit(self.kind, float(self.freqs.detach().abs().max()) / self.interpolate_factor)

    def encode(self, positions: Tensor, grid_shape) -> PosOut:
        dtype = angle_dtype(positions.device)
        pos = positions.to(dtype) / self.interpolate_factor  # (..., N, dims)
        angle = (pos[..., :, None] * self.freqs.to(dtype)).flatten(-2)  # (..., N, dims * F): axis 0's block first
        pattern = (slice(None), None) if positions.ndim == 3 else (None,)  # the heads axis
        return PosOut(rot=(angle.cos().float()[pattern], angle.sin().float()[pattern]), pairing=self.pairing)
