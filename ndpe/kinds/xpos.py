"""``xpos``: rotary embedding with an exponential decay on the logits (Sun et al. 2023, "A Length-Extrapolatable
Transformer"), 1D.

Conventions (those of rotary-embedding-torch 0.9.1 ``RotaryEmbedding(rot_dim, use_xpos=True,
xpos_scale_base=scale_base)`` + ``rotate_queries_and_keys(q, k)``, which ``tests/test_xpos.py`` pins q and k
against):
- Rotation. RoPE on the first ``rot_dim`` channels of each head (default ``head_dim``; later channels pass
  through, neither rotated nor scaled), frequencies ``theta ** (-2j / rot_dim)`` (:func:`ndpe.scaling.axial_inv_freq`,
  as ``rope``), angle ``p * freq_j``. Pairing ``"interleaved"`` (``(x[2j], x[2j+1])``, the reference's
  ``rotate_half``) by default; ``"half"`` is the same encoding up to a channel permutation.
- Scale. Frequency ``j`` gets ``zeta_j = (2j + 0.4 rot_dim) / (1.4 rot_dim)`` (the paper's
  ``(2j / d + gamma) / (1 + gamma)``, ``gamma = 0.4``; reference: ``(arange(0, dim, 2) + 0.4 * dim) / (1.4 * dim)``),
  and token ``p`` the power ``(p - center) / scale_base``. Queries are rotated and multiplied by
  ``s = zeta ** power``, keys rotated and divided by it: ``rot = (cos * s, sin * s)``,
  ``rot_k = (cos / s, sin / s)``. So ``q_i . k_j`` carries ``zeta ** ((i - j) / scale_base)``: a decay with the
  offset alone (< 1 for a key before the query, since ``zeta < 1``); the center cancels.
- Center. ``center=None`` (default) is the reference's ``len(t) // 2``: half the number of positions encoded in
  this call (``N // 2`` for a grid ``(N,)``), so q and k themselves (not their products) change with the length.
  KV-cache decoding (``pe((n,), past=p)``) reuses keys scaled in earlier calls, so it needs one center for all
  calls: pass an int (``center=0`` is the simplest) or decoding raises. With a fixed center, q and k depend on
  the absolute position alone. (The reference's ``rotate_queries_with_cached_keys`` centers q on ``q_len // 2``
  and k on ``k_len // 2``, which breaks the offset-only decay; we do not copy that.)
- Range. ``zeta_0 = 0.4 / 1.4``: ``1 / s`` overflows float32 once ``|p - center| > ~70.8 * scale_base``
  (~36k tokens for 512), and ``s`` underflows to 0 there (the reference returns inf there); ``center`` near the
  middle of the longest sequence and a larger ``scale_base`` push that out. In float16 (``dtype=torch.float16``) the
  limit is ~8.8 * scale_base (~4.5k tokens for 512): use bfloat16 or float32 there. Each call checks its positions
  against the limit of the dtype it returns and refuses beyond it (:meth:`XPos.check_range`) rather than return
  inf or NaN.
- Coordinates are ``index`` units; fractional or augmented positions are fine. Angles and scales are computed
  in float64 (float32 on MPS) and returned in float32. Parameter-free: the base caches per grid. Output
  ``rot`` / ``rot_k`` of shape ``(1, N, rot_dim / 2)`` (heads axis of size 1), ``(B, 1, N, rot_dim / 2)`` for
  batched positions.

>>> import ndpe, torch
>>> pe = ndpe.make(dims=1, kind="xpos", dim=64, heads=4, scale_base=512.0, center=0)
>>> pos = pe((10,))
>>> pos.rot[0].shape, pos.rot_k[0].shape, pos.pairing
(torch.Size([1, 10, 8]), torch.Size([1, 10, 8]), 'interleaved')
>>> q = k = torch.randn(2, 4, 10, 16)
>>> [t.shape for t in ndpe.apply_qk(q, k, pos)]
[torch.Size([2, 4, 10, 16]), torch.Size([2, 4, 10, 16])]
"""
from __future__ import annotations

import math
from typing import Any

import torch
from einops import rearrange
from torch import Tensor

from ..base import Encoding
from ..checks import check_int, check_number, check_pairing
from ..contract import PosOut
from ..registry import register
from ..frequencies import axial_inv_freq
from ..scaling import SCALINGS
from ..scaling_config import RopeScaling, rope_scaling
from .rope import angle_dtype

GAMMA = 0.4  # the paper's gamma (reference: 0.4 * dim and 1.4 * dim)


def xpos_zeta(rot_dim: int, *, device=None, dtype=torch.float64) -> Tensor:
    """The per-frequency decay bases ``(2j + 0.4 d) / (1.4 d)``, shape ``(rot_dim // 2,)``, all in ``(0, 1)``.

    >>> [round(z, 6) for z in xpos_zeta(4).tolist()]          # (0 + 1.6) / 5.6, (2 + 1.6) / 5.6
    [0.285714, 0.642857]
    """
    j2 = torch.arange(0, rot_dim, 2, device=device, dtype=dtype)
    return (j2 + GAMMA * rot_dim) / ((1.0 + GAMMA) * rot_dim)


@register("xpos", dims=(1,))
class XPos(Encoding):
    """xPos: RoPE with queries scaled by ``zeta ** ((p - center) / scale_base)`` and keys by its inverse.

    Args:
        rot_dim: rotated (and scaled) channels per head, even, ``2 .. head_dim`` (default ``head_dim``);
            rotary-embedding-torch's ``RotaryEmbedding(dim)``.
        theta: frequency base (> 1), as ``rope``.
        scale_base: the decay's length scale (> 0, finite); the reference's ``xpos_scale_base`` (512).
        center: the position where the scale is 1: ``None`` (half the positions of each call, as the
            reference; refused for KV-cache decoding) or an int ``>= 0`` (fixed).
        pairing: ``"interleaved"`` (default, the reference's) or ``"half"``.
        scaling, scale, train_shape: RoPE scaling of the rotation (a :class:`ndpe.RopeScaling` or its type with
            ``scale=`` / ``train_shape=``, as ``rope``); the static types only (``linear``, ``ntk``, ``yarn``,
            ``llama3``): frequencies and cos/sin factor as ``rope``'s, the decay untouched.
    """

    takes_key_positions = True  # refuses options that cannot decode
    description = "xPos (Sun et al. 2023): RoPE with the decay `zeta^(n/gamma)` on q, its inverse on k"
    colour, marker = "#882255", ">"

    inv_freq: Tensor  # (rot_dim / 2,) float64 buffer
    zeta: Tensor  # (rot_dim / 2,) float64 buffer

    def __init__(self, *, dims: int, dim: int, heads: int = 1, rot_dim: int | None = None, theta: float = 10000.0,
                 scale_base: float = 512.0, center: int | None = None, pairing: str = "interleaved",
                 scaling: str | RopeScaling | None = None, scale: float | None = None, train_shape: int | None = None):
        super().__init__(dims=dims, dim=dim, heads=heads)
        if self.head_dim % 2:
            raise ValueError(f"xpos rotates channel pairs: it needs an even head_dim (dim // heads), "
                             f"got head_dim={self.head_dim}")
        if rot_dim is None:
            rot_dim = self.head_dim
        check_int(rot_dim, "rot_dim", low=2)
        if rot_dim % 2 or rot_dim > self.head_dim:
            raise ValueError(f"rot_dim must be even and <= head_dim={self.head_dim}, got rot_dim={rot_dim}")
        self.rot_dim = rot_dim
        self.theta = check_number(theta, "theta", low=1.0, inclusive=False)
        self.scale_base = check_number(scale_base, "scale_base", low=0.0, inclusive=False)
        if center is not None:
            check_int(center, "center", low=0)
        self.center = center
        self.pairing = check_pairing(pairing)
        self.rope_scaling = rope_scaling(scaling, scale=scale, train_shape=train_shape)
        if self.rope_scaling is not None:
            if self.rope_scaling.dynamic:
                static = tuple(n for n in SCALINGS if SCALINGS[n].at_length is None)
                raise ValueError(f"xpos takes a static scaling {static}, got "
                                 f"{self.rope_scaling.type!r}, which picks frequencies by the current length")
            self.rope_scaling = self.rope_scaling.for_axes((rot_dim,))
        inv_freq, self.attn_factor = self._inv_freq(torch.device("cpu"), torch.float64)
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.register_buffer("zeta", xpos_zeta(rot_dim), persistent=False)

    def _apply(self, fn, *args, **kwargs):
        out = super()._apply(fn, *args, **kwargs)
        device = self.inv_freq.device  # .half() / .to(bf16) never reach the float64 angles
        self.inv_freq = self._inv_freq(device, angle_dtype(device))[0]
        self.zeta = xpos_zeta(self.rot_dim, device=device, dtype=angle_dtype(device))
        return out

    def _inv_freq(self, device: torch.device, dtype: torch.dtype) -> tuple[Tensor, float]:
        """The rotation's frequencies ``(rot_dim / 2,)`` and its cos/sin factor, scaled as ``rope``'s."""
        if self.rope_scaling is None:
            return axial_inv_freq(self.rot_dim, self.theta, device=device, dtype=dtype), 1.0
        freq, factor = self.rope_scaling.axis_inv_freq(0, (self.rot_dim,), self.theta, device=device)
        return freq.to(dtype), factor

    @classmethod
    def example_options(cls, dims: int) -> dict[str, Any]:
        """A small scale base, so a short test grid sees the scale move away from 1."""
        return {"scale_base": 8.0}

    def check_range(self, positions: Tensor, dtype: torch.dtype) -> None:
        """Refuse positions whose scale ``zeta_0 ** (|p - center| / scale_base)`` or its inverse overflows ``dtype`` (or
        float32, which the scales pass through): ``|p - center| * ln(1 / zeta_0) / scale_base`` must stay below
        ``ln(finfo(dtype).max)``. Meta positions have no values to check (shapes only)."""
        if positions.numel() == 0 or positions.device.type == "meta" or torch.compiler.is_compiling():
            return
        if torch.finfo(dtype).max >= torch.finfo(torch.float32).max:
            dtype = torch.float32  # the scales are returned in float32 first (a float64 output too)
        center = positions.shape[-2] // 2 if self.center is None else self.center
        lo, hi = float(positions.amin()), float(positions.amax())
        reach = max(abs(hi - center), abs(lo - center))
        limit = math.log(torch.finfo(dtype).max) / math.log((1.0 + GAMMA) / GAMMA) * self.scale_base
        if not reach < limit:
            raise ValueError(f"xpos scale overflows {dtype}: positions {lo:g}..{hi:g} reach {reach:g} from center "
                             f"{center} but {dtype} holds the scale only within {limit:.6g} "
                             f"(~{limit / self.scale_base:.3g} * scale_base={self.scale_base:g}); use a larger "
                             "scale_base, a center nearer the middle, shorter sequences or a wider dtype")

    def encode(self, positions: Tensor, grid_shape, key_positions: Tensor | None = None) -> PosOut:
        if key_positions is not None and self.center is None:
            raise ValueError("xpos decoding (past=...) needs a fixed center: build it with center=<int> (e.g. "
                             "center=0); center=None centers each call on its own length, which cached keys do not share")
        pos = positions.to(self.inv_freq.dtype)  # (..., N, 1)
        center = positions.shape[-2] // 2 if self.center is None else self.center
        angle = pos * self.inv_freq  # (..., N, rot_dim / 2)
        scale = self.zeta ** ((pos - center) / self.scale_base)  # (..., N, rot_dim / 2)
        cos, sin = angle.cos(), angle.sin()
        if self.attn_factor != 1.0:  # YaRN's factor, as rope's cos and sin carry it
            cos, sin = cos * self.attn_factor, sin * self.attn_factor
        pattern = "b n r -> b 1 n r" if positions.ndim == 3 else "n r -> 1 n r"  # heads axis

        def heads(t: Tensor) -> Tensor:
            return rearrange(t.float(), pattern)

        return PosOut(rot=(heads(cos * scale), heads(sin * scale)), rot_k=(heads(cos / scale), heads(sin / scale)),
                      pairing=self.pairing)
