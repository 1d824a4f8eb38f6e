"""A small conv net for coordinate regression, with or without CoordConv's ``AddCoords`` (Liu et al. 2018).

Every conv layer sees the [-1, 1] coordinate channels when ``add_coords`` is on (CoordConv layers);
without them a conv net only learns position from padding effects. Global average pooling makes the
net run on any input size.
"""
from __future__ import annotations

from typing import Sequence

from torch import Tensor, nn


class ConvNet(nn.Module):
    """``(B, C, H, W) -> (B, num_classes)`` (``num_classes = 2`` for a (row, col) target).

    >>> import torch
    >>> m = ConvNet(num_classes=2, channels=(8, 16), add_coords=True)
    >>> m(torch.randn(2, 1, 64, 64)).shape, m(torch.randn(2, 1, 96, 80)).shape
    (torch.Size([2, 2]), torch.Size([2, 2]))
    """

    def __init__(self, *, num_classes: int, channels: Sequence[int] = (16, 32, 32), in_chans: int = 1,
                 add_coords: bool = False, with_r: bool = False):
        super().__init__()
        if not add_coords and with_r:
            raise ValueError("with_r=True needs add_coords=True")
        layers, c_in = [], in_chans
        for i, c in enumerate(channels):
            if add_coords:
                from ndpe.kinds.coord import AddCoords  # lazy: the conv baseline works without it

                layers.append(AddCoords(2, with_r=with_r))
            extra = (2 + int(with_r)) if add_coords else 0
            layers += [nn.Conv2d(c_in + extra, c, 3, stride=1 if i == 0 else 2, padding=1), nn.BatchNorm2d(c), nn.ReLU()]
            c_in = c
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(c_in, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        x = self.features(x)  # (B, c, h, w)
        return self.head(x.mean((2, 3)))  # (B, num_classes)
