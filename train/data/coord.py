"""Coordinate regression "not_so_clevr" (CoordConv, Liu et al. 2018): where is the one 9x9 square?

A 64x64 canvas holds one 9x9 square of ones whose centre is any pixel ``(r, c)`` with
``4 <= r, c <= 59`` (all 56 x 56 = 3136 positions where it fits). Target: the centre in the
``pixel`` convention of ``ndpe.coords`` (index 0 -> -1, index S-1 -> +1): ``2 c / (S - 1) - 1``,
float ``(2,)`` as (row, col). Splits of the positions (each position appears once):

- ``uniform``: a seeded random 20% of positions is test, as in the paper's uniform split;
- ``quadrant``: test = every position in the bottom-right quadrant (row, col >= S/2, 784 at
  S = 64), the paper's held-out-quadrant split;

then a seeded 10% of the remaining positions is val, the rest train.

``onehot_pixel`` (:class:`OneHotPixel`) is the paper's *supervised coordinate regression* task
(Sec. 4.2): a 64x64 image that is zero except for a single 1 -> that pixel's coordinates. What the
official code does (uber-research/CoordConv, commit 27fab8b; files named below):

- data (``data/data_gen.py`` at commit 8f0d2f9, ``objectsweep_generator`` + ``dataset_writer``; read
  by ``train.py`` for ``--arch conv_regressor | coordconv_regressor``): the one-hot images are the
  ``onehots`` field of ``rectangle_4_{uniform,quadrant}.h5``, i.e. one hot pixel at every centre of
  the 9x9 Not-so-Clevr square, ``x, y in range(4, 60)`` (56 x 56 = 3136 images, not all 4096
  pixels). Target ``normalized_locations = (x, y) / 64`` ((col, row), in [0.06, 0.92]).
- splits: ``uniform`` = ``random_split`` (each position to test with probability 0.25, numpy seed
  20202; the paper's text says a random 80/20 split); ``quadrant`` = ``quadrant_split`` (test iff
  ``x / 64 > 0.5 and y / 64 > 0.5``, i.e. x, y >= 33). There is no separate val set: the held-out
  set is what the paper reports as test.
- loss / metric (``model_builders.py``, ``ConvRegressor.make_losses_and_metrics``): MSE on the
  normalised targets (+ L2 weight decay); reported error = mean Euclidean distance x 64 (pixels).

Here (closest faithful design, in this module's conventions): targets are ``(row, col)`` in the
``pixel`` convention ([-1, 1], like ``not_so_clevr``: an affine map of the paper's target, so the
MSE optimum is the same); ``margin=0`` (default) uses all ``S * S`` pixels as positions, as the
paper's text describes the task, ``margin=4`` the paper code's 56 x 56 centres; ``uniform`` holds out
an exact seeded 20% (the paper's 80/20), ``quadrant`` every position with row, col >= S/2 (1024 at
S = 64, margin 0; the code's strict ``> 0.5`` would hold out 31 x 31); then a seeded 10% of the
rest is val (the paper has no val), the rest train.
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
    return _split_positions(centres, image_size, split_mode, rng)


def _split_positions(centres: np.ndarray, image_size: int, split_mode: str, rng) -> dict[str, np.ndarray]:
    """Split row-major ``(P, 2)`` positions: 20% seeded test (uniform) or the row, col >= S/2 quadrant; 10% val."""
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


def onehot_splits(image_size: int, split_mode: str, seed: int, margin: int = 0) -> dict[str, np.ndarray]:
    """Disjoint ``(n, 2)`` int arrays of hot pixels (row, col) for train / val / test."""
    axis = np.arange(margin, image_size - margin)
    positions = np.stack(np.meshgrid(axis, axis, indexing="ij"), -1).reshape(-1, 2)  # row-major (P, 2)
    rng = np.random.default_rng([zlib.crc32(b"onehot_pixel"), seed])
    return _split_positions(positions, image_size, split_mode, rng)


class OneHotPixel(Dataset):
    """Items ``(image (1, S, S) one-hot float, target (2,) float (row, col) of the hot pixel in [-1, 1])``.

    >>> data = OneHotPixel("test", split_mode="quadrant")
    >>> image, target = data[0]
    >>> len(data), image.shape, float(image.sum()), bool((target > 0).all())
    (1024, torch.Size([1, 64, 64]), 1.0, True)
    """

    name, domain, task, num_classes = "onehot_pixel", "coord", "regress", 2

    def __init__(self, split: str, *, seed: int = 0, split_mode: str = "uniform", image_size: int = 64,
                 margin: int = 0):
        check_choice("split_mode", split_mode, SPLIT_MODES)
        check_min("image_size", image_size, 4)
        check_min("margin", margin, 0)
        if image_size - 2 * margin < 4:
            raise ValueError(f"margin={margin} leaves fewer than 4 positions per axis at image_size={image_size}")
        if split_mode == "quadrant" and margin >= image_size // 2:
            raise ValueError(f"margin={margin} leaves no position in the held-out quadrant at image_size={image_size}")
        self.split, self.seed, self.split_mode = check_split(split), int(seed), split_mode
        self.image_size, self.margin = int(image_size), int(margin)
        self.positions = onehot_splits(self.image_size, split_mode, self.seed, self.margin)[split]

    def __len__(self) -> int:
        return len(self.positions)

    def __getitem__(self, index: int):
        row, col = (int(v) for v in self.positions[index])
        image = torch.zeros(1, self.image_size, self.image_size)
        image[0, row, col] = 1.0
        target = torch.tensor([row, col], dtype=torch.float32) * (2.0 / (self.image_size - 1)) - 1.0
        return image, target
