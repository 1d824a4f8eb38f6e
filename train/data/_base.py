"""Shared pieces of the built-in datasets: split names, per-item seeding, normalisation."""
from __future__ import annotations

import os
import zlib
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

SPLITS = ("train", "val", "test")
# how a user fetches the on-disk datasets (CIFAR-10, Speech Commands) into the data folder, named by their errors
FETCH = ("python -m train.bench --config configs/bench/real.yaml download=true (the benchmark), or "
         "python -m train.main ... data.download=true (one training run)")
DEFAULT_SIZE = {"train": 8192, "val": 1024, "test": 1024}


def check_split(split: str) -> str:
    """Return ``split`` or raise naming the valid splits."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")
    return split


def check_choice(name: str, value, choices) -> None:
    """Raise if ``value`` is not one of ``choices``."""
    if value not in choices:
        raise ValueError(f"{name}={value!r} is not supported; expected one of {tuple(choices)}")


def check_min(name: str, value: int | float, minimum: int | float) -> None:
    """Raise if ``value < minimum``."""
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")


def to_unit_range(x: np.ndarray) -> torch.Tensor:
    """Pixels in [0, 1] -> float32 tensor normalised with mean = std = 0.5 (values in [-1, 1])."""
    return torch.from_numpy((np.asarray(x, dtype=np.float32) - 0.5) / 0.5)


class SyntheticDataset(Dataset):
    """A dataset whose item ``i`` is generated from its own seed ``(name, seed, split, i)``.

    Items are made lazily in ``__getitem__`` and are identical whatever the access order,
    the worker or the process. Subclasses set ``name``, ``domain``, ``task``, ``num_classes``
    and implement ``make(rng) -> item``.
    """

    name = "synthetic"
    domain = task = ""
    num_classes = 0

    def __init__(self, split: str, *, seed: int = 0, size: int | None = None):
        self.split, self.seed = check_split(split), int(seed)
        self.size = DEFAULT_SIZE[split] if size is None else int(size)
        check_min("size", self.size, 1)

    def __len__(self) -> int:
        return self.size

    def rng(self, index: int) -> np.random.Generator:
        """The generator of item ``index`` (independent streams via numpy's SeedSequence)."""
        salt = zlib.crc32(self.name.encode())
        return np.random.default_rng([salt, self.seed, SPLITS.index(self.split), index])

    def __getitem__(self, index: int):
        if not 0 <= index < self.size:
            raise IndexError(f"index {index} out of range for {self.name} {self.split} of size {self.size}")
        return self.make(self.rng(index))

    def make(self, rng: np.random.Generator):
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}(split={self.split!r}, seed={self.seed}, size={self.size})"


def default_root() -> Path:
    """Where on-disk datasets live when ``root`` is not given: ``$NDPE_DATA`` or ``~/.cache/ndpe/data``."""
    return Path(os.environ.get("NDPE_DATA", Path.home() / ".cache" / "ndpe" / "data")).expanduser()
