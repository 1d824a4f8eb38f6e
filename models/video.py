"""Tubelet video transformer (ViViT-style uniform tubelet embedding) on a 3D grid ``(frames, rows, cols)``.

``pe`` takes one kind (``{"kind": "rope"}``) or one per axis by name (:class:`ndpe.PerAxis`), e.g. sinusoids on
frames and RoPE on space: ``{"kind": {"frames": "sinusoidal", "rows": "rope", "cols": "rope"}}``.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch
from einops import rearrange
from timm.layers import trunc_normal_
from torch import Tensor, nn

from .block import Encoder, check_pool, init_weights, make_pe, pool


class VideoTransformer(nn.Module):
    """``(B, C, T, H, W) -> (B, num_classes)``; a ``Conv3d`` with kernel = stride = ``tubelet`` (t, h, w).

    >>> m = VideoTransformer(num_classes=4, pe={"kind": "rope"}, dim=48, depth=1, heads=4, tubelet=(2, 4, 4))
    >>> m(torch.randn(2, 3, 8, 16, 16)).shape, m(torch.randn(2, 3, 12, 16, 16)).shape   # more frames
    (torch.Size([2, 4]), torch.Size([2, 4]))
    """

    axes = ("frames", "rows", "cols")  # the grid's axes, in order: what a per-axis pe names

    def __init__(self, *, num_classes: int, pe: Mapping[str, Any], dim: int = 64, depth: int = 4, heads: int = 4,
                 tubelet: Sequence[int] = (2, 4, 4), in_chans: int = 3, pool: str = "cls", mlp_ratio: float = 4.0,
                 drop: float = 0.0, drop_path: float = 0.0):
        super().__init__()
        self.num_prefix, self.pool = check_pool(pool), pool
        self.tubelet = tuple(tubelet)
        self.encoder = Encoder(make_pe(pe, dims=3, dim=dim, heads=heads, axes=self.axes), dim=dim, depth=depth,
                               heads=heads, mlp_ratio=mlp_ratio, drop=drop, drop_path=drop_path)
        c = self.encoder.token_dim
        self.tubelet_embed = nn.Conv3d(in_chans, c, kernel_size=self.tubelet, stride=self.tubelet)
        self.cls_token = nn.Parameter(torch.zeros(1, self.num_prefix, c))
        self.head = nn.Linear(dim, num_classes)
        trunc_normal_(self.cls_token, std=0.02)
        self.head.apply(init_weights)

    @staticmethod
    def grid_for(input_shape, *, tubelet: Sequence[int] = (2, 4, 4)) -> tuple[int, int, int]:
        """The ``(frames, rows, cols)`` tubelet grid of one ``(C, T, H, W)`` clip."""
        return tuple(n // p for n, p in zip(input_shape[-3:], tubelet))  # type: ignore[return-value]

    def forward(self, x: Tensor) -> Tensor:
        bad = [n for n, p in zip(x.shape[2:], self.tubelet) if n % p]
        if x.ndim != 5 or bad:
            raise ValueError(f"expected (B, C, T, H, W) with T, H, W divisible by the tubelet {self.tubelet}, "
                             f"got {tuple(x.shape)}")
        x = self.tubelet_embed(x)  # (B, c, t, h, w)
        grid_shape = x.shape[2:]
        x = rearrange(x, "b c t h w -> b (t h w) c")  # frames before rows before cols
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)  # (B, P + N, c)
        x = self.encoder(x, grid_shape, self.num_prefix)  # (B, P + N, dim)
        return self.head(pool(x, self.pool, self.num_prefix))
