"""``vrope``: VRoPE (Liu et al. 2025, "VRoPE: Rotary Position Embedding for Video Large Language Models").

A text model's RoPE (one frequency series over the head, ``theta ** (-2j / head_dim)``) in which every frequency
turns by its own position id, from the paper's public code (``VRoPE.generate_nd_positions`` in johncaged/VRoPE,
ported in ``tests/test_vrope.py``). A ``T x H x W`` video spans ``L = H + W - 1`` indices per frame; the token at
frame ``t``, row ``h``, column ``w`` has four ids

    c0 = tL + h + w,   c1 = tL + h + (W-1-w),   c2 = tL + (H-1-h) + w,   c3 = tL + (H-1-h) + (W-1-w)

and frequency ``j`` turns by ``c_{j mod 4}``. Two of the paper's changes to RoPE-3D:

- Symmetric bias mitigation: the spatial axes are rotated 45 degrees (``h + w`` and ``h - w``) and each direction
  is taken with both signs (``c3`` mirrors ``c0``, ``c2`` mirrors ``c1``), so no corner of the frame is favoured:
  for q = k = (1, ..., 1), the score of a spatial offset is the same for ``(dh, dw)``, ``(dw, dh)`` and their
  negatives.
- Continuity with text (the paper's temporal centred arrangement): frame ``t`` takes the ids ``tL .. tL + L - 1``,
  the four ids of a token average to its frame's centre ``tL + (L - 1) / 2``, and text after a ``T``-frame video
  continues at ``T L``, one past the last frame's largest id, as text continues after text.

The public code also computes a time id per frame for ``half_time_dim`` channels but sets ``half_time_dim`` to 0:
every frequency takes a spatial id, and time enters through the frame offset ``tL`` alone; ndpe follows the code.
Ids are laid out as three numbers ``(u, a, b)``, the frame centre ``u = tL + (H + W - 2) / 2``, the diagonal
``a = h + w - (H + W - 2) / 2`` and the anti-diagonal ``b = h - w + (W - H) / 2``, from which
``(c0, c1, c2, c3) = (u + a, u + b, u - b, u - a)``. On a grid (``pe(grid)``, or ``positions=`` of (frame, row,
column) indices with ``grid_shape``) the kind lays them out itself; ``positions=`` alone are ``(u, a, b)`` ids as they
are: a text token at index ``n`` is ``(n, 0, 0)`` (all four ids ``n``), so a text + video sequence is one
``positions=`` call. q . k depends on the offsets of ``(u, a, b)`` alone. Angles in float64, ``pairing="half"``
(HF's ``rotate_half``, as the video LLMs the paper trains). A 3D kind: an image is a one-frame video; ``past=``
(KV-cache decoding) is refused as for every 3D kind, and a decoder passes each new token's ``(u, a, b)`` ids.

>>> import ndpe
>>> pe = ndpe.make(dims=3, kind="vrope", dim=64, heads=2)
>>> pe.layout(pe.coords((2, 2, 3)), (2, 2, 3))[[0, 6]].tolist()     # frame 0 and frame 1, row 0, column 0
[[1.5, -1.5, 0.5], [5.5, -1.5, 0.5]]
"""
from __future__ import annotations

import torch
from torch import Tensor

from ..contract import PosOut
from ..registry import register
from .rope import RoPE


@register("vrope", dims=(3,))
class VRoPE(RoPE):
    """VRoPE: symmetric rotated spatial ids, frames laid along a text index (see the module doc).

    Args:
        theta: the frequency base.
        pairing: ``"half"`` (HF's ``rotate_half``) or ``"interleaved"``.
    """

    description = "VRoPE (Liu et al. 2025): spatial ids h+w, h-w with both signs per frequency, frames on a text index"
    colour, marker = "#35978f", "1"

    def __init__(self, *, dims: int, dim: int, heads: int = 1, theta: float = 10000.0, pairing: str = "half"):
        head_dim = dim // heads if isinstance(dim, int) and isinstance(heads, int) and heads > 0 else 0
        section = (head_dim // 2, 0, 0) if head_dim >= 2 and head_dim % 2 == 0 else None  # else rope's own error
        super().__init__(dims=dims, dim=dim, heads=heads, theta=theta, pairing=pairing, mrope_section=section)

    def position_limit(self, dtype: torch.dtype = torch.float32) -> tuple[float, str] | None:
        """Half of rope's: each id ``u + a``, ``u + b``, ... adds two coordinates."""
        limit = super().position_limit(dtype)
        return None if limit is None else (limit[0] / 2, f"{limit[1]} (each id adds two coordinates)")

    def _mrope_freq_axis(self, freq_axis: Tensor) -> Tensor:
        """Frequency ``j`` of the ``head_dim / 2`` turns by id ``c_{j mod 4}``."""
        return torch.arange(self.rot_dim // 2) % 4

    def layout(self, positions: Tensor, grid_shape) -> Tensor:
        """The ``(u, a, b)`` ids of (frame, row, column) indices ``(..., N, 3)`` on ``grid_shape`` (module doc)."""
        _, rows, cols = grid_shape
        t, h, w = positions.unbind(-1)
        centre = (rows + cols - 2) / 2
        return torch.stack([t * (rows + cols - 1) + centre, h + w - centre, h - w + (cols - rows) / 2], dim=-1)

    @staticmethod
    def ids(layout: Tensor) -> Tensor:
        """The four ids ``(c0, c1, c2, c3) = (u + a, u + b, u - b, u - a)`` of ``(u, a, b)`` ids ``(..., N, 3)``."""
        u, a, b = layout.unbind(-1)
        return torch.stack([u + a, u + b, u - b, u - a], dim=-1)

    def encode(self, positions: Tensor, grid_shape, key_positions: Tensor | None = None) -> PosOut:
        laid = positions if grid_shape is None else self.layout(positions, grid_shape)  # explicit ids: as they are
        return super().encode(self.ids(laid), grid_shape)
