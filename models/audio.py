"""Spectrogram transformer (KWT / AST-like): a ViT on (time, frequency) patches of a log-mel spectrogram.

The input is ``(B, 1, n_mels, frames)`` (channels, freq, time, as torchaudio / AST). The patch grid is
``(time, freq)`` in ``ij`` order: time is the first (slow) axis, so longer audio adds grid rows and the
token order is frame-major. Inputs whose sizes are not multiples of the patch are zero-padded.

``pe`` takes one kind for the grid (``{"kind": "rope"}``) or one per axis by name (:class:`ndpe.PerAxis`), e.g.
RoPE on time and a learned vector per frequency patch (64 mels / 16 = 4): ``{"kind": {"time": "rope", "freq":
{"kind": "learned", "size": 4}}}``; ``size`` also refuses an input whose frequency axis has another length.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch
from einops import rearrange
from timm.layers import PatchEmbed, trunc_normal_
from torch import Tensor, nn

from .block import Encoder, check_pool, init_weights, make_pe, pool


class AudioTransformer(nn.Module):
    """``(B, 1, n_mels, frames) -> (B, num_classes)`` logits; ``patch_size`` is ``(time, freq)``.

    >>> m = AudioTransformer(num_classes=5, pe={"kind": "rope"}, dim=32, depth=1, heads=4, patch_size=(4, 8))
    >>> m(torch.randn(2, 1, 16, 40)).shape, m(torch.randn(2, 1, 16, 80)).shape   # longer audio
    (torch.Size([2, 5]), torch.Size([2, 5]))
    """

    axes = ("time", "freq")  # the grid's axes, in order: what a per-axis pe names

    def __init__(self, *, num_classes: int, pe: Mapping[str, Any], dim: int = 64, depth: int = 4, heads: int = 4,
                 patch_size: Sequence[int] = (4, 8), in_chans: int = 1, pool: str = "cls", mlp_ratio: float = 4.0,
                 drop: float = 0.0, drop_path: float = 0.0):
        super().__init__()
        self.num_prefix, self.pool = check_pool(pool), pool
        self.encoder = Encoder(make_pe(pe, dims=2, dim=dim, heads=heads, axes=self.axes), dim=dim, depth=depth,
                               heads=heads, mlp_ratio=mlp_ratio, drop=drop, drop_path=drop_path)
        c = self.encoder.token_dim
        self.patch_embed = PatchEmbed(None, tuple(patch_size), in_chans, c, strict_img_size=False,
                                      dynamic_img_pad=True, output_fmt="NHWC")
        self.cls_token = nn.Parameter(torch.zeros(1, self.num_prefix, c))
        self.head = nn.Linear(dim, num_classes)
        trunc_normal_(self.cls_token, std=0.02)
        self.head.apply(init_weights)

    @staticmethod
    def grid_for(input_shape, *, patch_size: Sequence[int] = (4, 8)) -> tuple[int, int]:
        """The ``(time, freq)`` patch grid of one ``(1, n_mels, frames)`` log-mel (padded up to whole patches)."""
        return -(-input_shape[-1] // patch_size[0]), -(-input_shape[-2] // patch_size[1])

    def forward(self, x: Tensor) -> Tensor:
        x = rearrange(x, "b c f t -> b c t f")  # (B, 1, frames, n_mels): time is the first grid axis
        x = self.patch_embed(x)  # (B, t, f, c)
        grid_shape = x.shape[1:3]
        x = rearrange(x, "b t f c -> b (t f) c")
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)  # (B, P + N, c)
        x = self.encoder(x, grid_shape, self.num_prefix)  # (B, P + N, dim)
        return self.head(pool(x, self.pool, self.num_prefix))
