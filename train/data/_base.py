"""Shared pieces of the built-in datasets: split names, per-item seeding, normalisation."""
from __future__ import annotations

import os
import zlib
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset, default_collate

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


class MixedSizes(Dataset):
    """Item ``i`` of one of ``datasets`` (the same items at several image sizes), the size picked per item from
    ``seed`` (the same pick every epoch and on every process): what a model trained on mixed resolutions sees
    (NaViT). Batches are lists of images, :func:`packed_collate`; the model packs them (``forward_packed``).

    >>> from train.data import build_dataset
    >>> mixed = MixedSizes([build_dataset("shapes", "train", image_size=s) for s in (32, 48)], seed=0)
    >>> sorted({mixed[i][0].shape[-1] for i in range(8)})
    [32, 48]
    """

    def __init__(self, datasets: list, *, seed: int = 0):
        if len(datasets) < 1 or len({len(d) for d in datasets}) != 1:
            raise ValueError(f"MixedSizes needs datasets of one length (the same items), got lengths "
                             f"{[len(d) for d in datasets]}")
        self.datasets = datasets
        self.task = getattr(datasets[0], "task", None)
        self.pick = torch.randint(len(datasets), (len(datasets[0]),), generator=torch.Generator().manual_seed(seed))

    def __len__(self) -> int:
        return len(self.datasets[0])

    def __getitem__(self, i: int):
        return self.datasets[int(self.pick[i])][i]

    def __getattr__(self, name: str):  # domain, num_classes, ... of the underlying dataset; never its fetch methods
        if name.startswith("_") or name in ("datasets", "pick", "task"):  # (a Subset's __getitems__ would bypass the pick)
            raise AttributeError(name)
        return getattr(self.datasets[0], name)


def packed_collate(batch: list) -> tuple[list, torch.Tensor]:
    """``[(image, target)]`` of several sizes -> ``([image], targets)``: the images stay a list (packed later)."""
    return [x for x, _ in batch], default_collate([y for _, y in batch])

