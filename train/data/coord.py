"""Coordinate regression "not_so_clevr" (CoordConv, Liu et al. 2018): where is the one 9x9 square?

A 64x64 canvas holds one 9x9 square of ones whose centre is any pixel ``(r, c)`` with
``4 <= r, c <= 59`` (all 56 x 56 = 3136 positions where it fits). Target: the centre in the
``pixel`` convention of ``ndpe.coords`` (index 0 -> -1, index S-1 -> +1): ``2 c / (S - 1) - 1``,
float ``(2,)`` as (row, col). Splits of the positions (each position appears once):

- ``uniform``: a seeded random 20% of positions is test, as in the paper's uniform split;
- ``quadrant``: test = every position in the bottom-right quadrant (row, col >= S/2, 784 at
  S = 64), the paper's held-out-quadrant split;

then a seeded 10% of the remaining positions is val, the rest train.
"""
from __future__ import annotations

import zlib

import numpy as np
import torch
from torch.utils.data import Dataset

from ._base import check_choice, check_min, check_split

SQUARE = 9
SPLIT_MODES = ("uniform", "quadrant")


def position_splits(image_size: int, split_mode: str, seed: int) -> dict[str, np.ndarray]:
    """Disjoint ``(n, 2)`` int arrays of square centres (row, col) for train / val / test."""
    half = SQUARE // 2
    axis = np.arange(half, image_size - half)
    centres = np.stack(np.meshgrid(axis, axis, indexing="ij"), -1).reshape(-1, 2)  # row-major (P, 2)
    rng = np.random.default_rng([zlib.crc32(b"not_so_clevr"), seed])
    if split_mode == "uniform":
        order = rng.permutation(len(centres))
        n_test = len(centres) // 5
        test, rest = centres[np.sort(order[:n_test])], centres[np.sort(order[n_test:])]
    else:
        held = (centres >= image_size // 2).all(axis=1)
        test, rest = centres[held], centres[~held]
    is_val = np.zeros(len(rest), bool)
    is_val[rng.permutation(len(rest))[: len(rest) // 10]] = True
    return {"train": rest[~is_val], "val": rest[is_val], "test": test}


class NotSoClevr(Dataset):
    """Items ``(image (1, S, S) float in {0, 1}, target (2,) float (row, col) in [-1, 1])``.

    >>> image, target = NotSoClevr("test", split_mode="quadrant")[0]
    >>> image.shape, bool((target > 0).all())
    (torch.Size([1, 64, 64]), True)
    """

    name, domain, task, num_classes = "not_so_clevr", "coord", "regress", 2

    def __init__(self, split: str, *, seed: int = 0, split_mode: str = "uniform", image_size: int = 64):
        check_choice("split_mode", split_mode, SPLIT_MODES)
        check_min("image_size", image_size, SQUARE + 1)
        self.split, self.seed, self.split_mode, self.image_size = check_split(split), int(seed), split_mode, int(image_size)
        self.centres = position_splits(self.image_size, split_mode, self.seed)[split]

    def __len__(self) -> int:
        return len(self.centres)

    def __getitem__(self, index: int):
        row, col = (int(v) for v in self.centres[index])
        image = torch.zeros(1, self.image_size, self.image_size)
        half = SQUARE // 2
        image[:, row - half : row + half + 1, col - half : col + half + 1] = 1.0
        target = torch.tensor([row, col], dtype=torch.float32) * (2.0 / (self.image_size - 1)) - 1.0
        return image, target
