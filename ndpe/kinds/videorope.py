"""``videorope``: VideoRoPE (Wei et al. 2025, "VideoRoPE: What Makes for Good Video Rotary Position Embedding?").

Three changes to Qwen2-VL's M-RoPE for video, each from the paper's public code (``get_t_scale_rope_index`` and
``apply_m_modify_multimodal_rotary_pos_emb`` in Wiselnn570/VideoRoPE, ported in ``tests/test_videorope.py``):

- Low-frequency temporal allocation (LTA). One series ``theta ** (-2j / d)`` over the head; the time axis takes
  the ``temporal_frequencies`` SLOWEST frequencies (M-RoPE gives it the fastest), so distant frames do not alias;
  rows and columns share the fast ones, alternating (frequency ``j``: rows for even ``j``, columns for odd).
- Diagonal layout (DL). A token at frame ``t``, row ``h``, column ``w`` of a ``T x H x W`` grid has ids
  ``t' = delta t``, ``h' = h - (H - 1) // 2 + t'``, ``w' = w - (W - 1) // 2 + t'``: each frame's spatial ids are
  centred on its time id, so the frames run along the diagonal of the (t, h, w) space.
- Adjustable temporal spacing (ATS): ``delta = temporal_spacing`` (the paper's 2).

On a grid (``pe(grid)``, or ``positions=`` of (frame, row, column) indices with ``grid_shape``) the kind applies the
layout itself; ``positions=`` alone are ids already laid out (``(t', h', w')``, e.g. a text + video sequence whose
text tokens have ``t = h = w`` continuing after the video's largest time id, as the reference builds them), used as
they are. Angles in float64, ``pairing="half"`` as the reference.

>>> import ndpe
>>> pe = ndpe.make(dims=3, kind="videorope", dim=256, heads=4)      # head_dim 64: 8 time, 24 spatial pairs
>>> [pe.freq_axis.tolist().count(a) for a in range(3)], pe.freq_axis[-8:].tolist()
([8, 12, 12], [0, 0, 0, 0, 0, 0, 0, 0])
"""
from __future__ import annotations

import torch
from torch import Tensor

from ..checks import check_int, check_number
from ..contract import PosOut
from ..registry import register
from .rope import RoPE


@register("videorope", dims=(3,))
class VideoRoPE(RoPE):
    """VideoRoPE: low-frequency time, diagonal layout, temporal spacing (see the module doc).

    Args:
        temporal_frequencies: the slowest frequencies given to time (default a quarter of the ``head_dim / 2``: the
            reference's 16 of 64 at head_dim 128).
        temporal_spacing: ``delta``, time ids per frame (the reference's 2).
        theta: the frequency base.
        pairing: ``"half"`` (the reference's ``rotate_half``) or ``"interleaved"``.
    """

    description = "VideoRoPE (Wei et al. 2025): time on the slowest frequencies, diagonal spatial layout, spacing"
    colour, marker = "#e6ab02", "^"

    def __init__(self, *, dims: int, dim: int, heads: int = 1, temporal_frequencies: int | None = None,
                 temporal_spacing: float = 2.0, theta: float = 10000.0, pairing: str = "half"):
        half = (dim // heads) // 2 if heads and dim % max(heads, 1) == 0 else 0
        t = half // 4 if temporal_frequencies is None else check_int(temporal_frequencies, "temporal_frequencies", low=0)
        if half and not 0 <= t < half:
            raise ValueError(f"temporal_frequencies must leave rows and columns at least one of the head_dim / 2 = "
                             f"{half} frequencies, got {t}")
        spatial = half - t
        self.temporal_frequencies = t
        super().__init__(dims=dims, dim=dim, heads=heads, theta=theta, pairing=pairing,
                         mrope_section=(t, (spatial + 1) // 2, spatial // 2))
        self.temporal_spacing = check_number(temporal_spacing, "temporal_spacing", low=0.0, inclusive=False)

    def _mrope_freq_axis(self, freq_axis: Tensor) -> Tensor:
        """Frequency ``j`` of the ``rot_dim / 2``: rows (1) for even ``j`` and columns (2) for odd ``j`` among the fast
        ones, time (0) for the last ``temporal_frequencies``."""
        n, t = self.rot_dim // 2, self.temporal_frequencies
        j = torch.arange(n)
        return torch.where(j >= n - t, 0, torch.where(j % 2 == 0, 1, 2))

    def layout(self, positions: Tensor, grid_shape) -> Tensor:
        """The diagonal layout ``(t', h', w')`` of grid indices ``(..., N, 3)`` on ``grid_shape``."""
        t = positions[..., 0] * self.temporal_spacing
        h = positions[..., 1] - (grid_shape[1] - 1) // 2 + t
        w = positions[..., 2] - (grid_shape[2] - 1) // 2 + t
        return torch.stack([t, h, w], dim=-1)

    def encode(self, positions: Tensor, grid_shape, key_positions: Tensor | None = None) -> PosOut:
        ids = positions if grid_shape is None else self.layout(positions, grid_shape)  # explicit ids: as they are
        return super().encode(ids, grid_shape)
