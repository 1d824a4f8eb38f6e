"""A timm vision transformer (``VisionTransformer``, ``Eva``) built from its name, positioned by ``ndpe.timm.use``.

The drop-in path, trained by ``train.main`` as the reference models are: ``model.name=timm``, ``model.timm_name`` a
timm model name, built untrained with this config's sizes, its own encoding replaced by ``model.pe``'s kind.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import timm
from torch import Tensor, nn

import ndpe.timm

from .vit import ViT


class TimmViT(nn.Module):
    """``(B, C, H, W) -> (B, num_classes)`` logits of timm's ``timm_name`` with ndpe's ``pe["kind"]``.

    >>> import torch
    >>> m = TimmViT(timm_name="vit_tiny_patch16_224", num_classes=10, pe={"kind": "rope"}, dim=16, depth=1, heads=2,
    ...             img_size=16, patch_size=4)
    >>> type(m.model.blocks[0].attn).__name__, m(torch.randn(2, 3, 16, 24)).shape   # any H, W divisible by the patch
    ('NdpeAttention', torch.Size([2, 10]))
    """

    def __init__(self, *, timm_name: str | None = None, num_classes: int, pe: Mapping[str, Any], dim: int = 64,
                 depth: int = 4, heads: int = 4, patch_size: int = 4, img_size: int | Sequence[int] = 32,
                 in_chans: int = 3, mlp_ratio: float = 4.0, drop: float = 0.0, drop_path: float = 0.0):
        super().__init__()
        if timm_name is None or not timm.is_model(timm_name):
            raise ValueError(f"model 'timm' needs model.timm_name, a timm VisionTransformer or Eva name such as "
                             f"vit_tiny_patch16_224 (timm.list_models()), got {timm_name!r}")
        if not isinstance(pe.get("kind"), str) or pe.get("augment") is not None:
            raise ValueError(f"model 'timm' takes one model.pe.kind by name (ndpe.timm.use) and no model.pe.augment, "
                             f"got kind {pe.get('kind')!r}, augment {pe.get('augment')!r}")
        try:
            model = timm.create_model(timm_name, pretrained=False, num_classes=num_classes, img_size=img_size,
                                      patch_size=patch_size, in_chans=in_chans, embed_dim=dim, depth=depth,
                                      num_heads=heads, mlp_ratio=mlp_ratio, drop_rate=drop, drop_path_rate=drop_path)
        except TypeError as err:  # a timm model of another family (a convnet) takes none of these sizes
            raise ValueError(f"model.timm_name {timm_name!r} is not a timm VisionTransformer or Eva built from sizes "
                             f"({err})") from None
        self.model = ndpe.timm.use(model, pe["kind"], **pe.get("options", {}))

    grid_for = staticmethod(ViT.grid_for)  # the same patch grid

    def forward(self, x: Tensor) -> Tensor:
        return self.model(x)
