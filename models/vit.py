"""ViT on 2D patches (Dosovitskiy et al. 2021) with any ndpe encoding.

Patches come from timm's ``PatchEmbed`` with ``strict_img_size=False``, so a model trained at one
image size runs at any size divisible by the patch: the grid ``(rows, cols)`` is read off the input.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch
from einops import rearrange
from timm.layers import PatchEmbed, trunc_normal_
from torch import Tensor, nn

from .block import Encoder, check_pool, init_weights, make_pe, pool


class ViT(nn.Module):
    """``(B, C, H, W) -> (B, num_classes)`` logits.

    >>> m = ViT(num_classes=10, pe={"kind": "rope"}, dim=32, depth=1, heads=4, patch_size=4)
    >>> m(torch.randn(2, 3, 16, 24)).shape   # any H, W divisible by the patch
    torch.Size([2, 10])
    """

    def __init__(self, *, num_classes: int, pe: Mapping[str, Any], dim: int = 64, depth: int = 4, heads: int = 4,
                 patch_size: int = 4, in_chans: int = 3, pool: str = "cls", mlp_ratio: float = 4.0,
                 drop: float = 0.0, drop_path: float = 0.0):
        super().__init__()
        self.num_prefix, self.pool = check_pool(pool), pool
        self.encoder = Encoder(make_pe(pe, dims=2, dim=dim, heads=heads), dim=dim, depth=depth, heads=heads,
                               mlp_ratio=mlp_ratio, drop=drop, drop_path=drop_path)
        c = self.encoder.token_dim  # dim - pe.cat_dim
        self.patch_embed = PatchEmbed(None, patch_size, in_chans, c, strict_img_size=False, output_fmt="NHWC")
        self.cls_token = nn.Parameter(torch.zeros(1, self.num_prefix, c))
        self.head = nn.Linear(dim, num_classes)
        trunc_normal_(self.cls_token, std=0.02)
        self.head.apply(init_weights)

    @staticmethod
    def grid_for(input_shape, *, patch_size: int = 4) -> tuple[int, int]:
        """The ``(rows, cols)`` patch grid of one ``(C, H, W)`` image."""
        return input_shape[-2] // patch_size, input_shape[-1] // patch_size

    def forward(self, x: Tensor) -> Tensor:
        x = self.patch_embed(x)  # (B, h, w, c)
        grid_shape = x.shape[1:3]
        x = rearrange(x, "b h w c -> b (h w) c")  # row-major tokens, ij order
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)  # (B, P + N, c)
        x = self.encoder(x, grid_shape, self.num_prefix)  # (B, P + N, dim)
        return self.head(pool(x, self.pool, self.num_prefix))  # (B, num_classes)

    def forward_packed(self, images: Sequence[Tensor]) -> Tensor:
        """Images of several sizes ``[(C, H_i, W_i)]`` in one packed sequence (NaViT's Patch n' Pack): each image's
        cls token and patches follow the previous image's, positions restart per image and attention stays inside
        it (``pe.packed``); returns ``(len(images), num_classes)``, each row what ``forward`` gives that image alone.

        >>> m = ViT(num_classes=10, pe={"kind": "rope"}, dim=32, depth=1, heads=4, patch_size=4)
        >>> m.forward_packed([torch.randn(3, 16, 24), torch.randn(3, 8, 8)]).shape
        torch.Size([2, 10])
        """
        if isinstance(images, Tensor) or not images:
            raise TypeError("forward_packed takes a non-empty list of (C, H, W) images; a (B, C, H, W) batch of one "
                            "size goes to forward()")
        parts, grids = [], []
        for img in images:
            tokens = self.patch_embed(img[None])  # (1, h, w, c)
            grids.append(tuple(tokens.shape[1:3]))
            parts += [self.cls_token, rearrange(tokens, "1 h w c -> 1 (h w) c")]
        x = self.encoder.forward_packed(torch.cat(parts, dim=1), grids, self.num_prefix)  # (1, T, dim)
        sizes = [self.num_prefix + h * w for h, w in grids]
        return self.head(torch.cat([pool(s, self.pool, self.num_prefix) for s in x.split(sizes, dim=1)]))
