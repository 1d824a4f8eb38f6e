"""CIFAR-10 through ``torchvision.datasets.CIFAR10`` with transforms v2.

Splits: "test" is the official test batch; "train" and "val" split the 50,000 training
images with a seeded permutation (``val_size`` images, default 5,000, go to val). Training
items (``augment``, default on for "train") use RandomCrop(32, padding=4) + horizontal flip.
All items are normalised with the CIFAR-10 training-set mean/std (the per-channel std of
pixels, 0.2470/0.2435/0.2616; the often-copied 0.2023/0.1994/0.2010 is a std of per-image
means). ``image_size`` other than 32 resizes (bilinear, antialiased) after augmentation.

Safety: torchvision's loader *unpickles* the batch files, and unpickling runs code. Load only
the official archive ``cifar-10-python.tar.gz`` (torchvision checks its md5 and each file's
md5 before loading), never batch files of unknown origin.

Download and interruption (torchvision 0.29's own path, not ``train.data.download``): the archive
is written straight to ``root/cifar-10-python.tar.gz`` (no ``.part``; a killed download leaves a
truncated file there, which fails the md5 on the next ``download=True`` and is overwritten, so
nothing accumulates) and its md5 is checked before extraction; extraction is
``tarfile.extractall`` without a filter, into ``root`` directly. That is safe only because the
archive must match the pinned md5 of the official file (the url and md5 are class attributes, not
options here), and a partial extraction is never used: every batch file is md5-checked before it is
unpickled, and ``download=True`` re-extracts the kept archive when one is missing or damaged.
Not covered by torchvision: a damaged ``batches.meta`` next to intact batches is not repaired by
``download=True`` (it raises "corrupted"; delete ``cifar-10-batches-py`` and retry).
"""
from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np
import torch
import torchvision
from torch.utils.data import Dataset
from torchvision.transforms import v2

from ._base import FETCH, check_min, check_split, default_root
from .download import NETWORK_ERRORS

MEAN, STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)
TorchvisionCIFAR10 = torchvision.datasets.CIFAR10  # looked up at call time (tests swap in a subclass with fixture md5s)


def transforms(*, augment: bool, image_size: int = 32) -> v2.Compose:
    """uint8 HWC array -> normalised float ``(3, image_size, image_size)``."""
    steps = [v2.ToImage()]
    if augment:
        steps += [v2.RandomCrop(32, padding=4), v2.RandomHorizontalFlip()]
    if image_size != 32:
        steps.append(v2.Resize(image_size, antialias=True))
    return v2.Compose([*steps, v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)])


class CIFAR10(Dataset):
    """Items ``(float (3, S, S), int)``; ``root``, the data folder of every dataset (default ``$NDPE_DATA`` or
    ``~/.cache/ndpe/data``), holds (or receives) ``cifar-10-batches-py/``.

    >>> transforms(augment=False)(np.zeros((32, 32, 3), np.uint8)).shape
    torch.Size([3, 32, 32])
    """

    name, domain, task, num_classes = "cifar10", "image", "classify", 10

    def __init__(
        self, split: str, *, seed: int = 0, root: str | None = None, download: bool = False,
        augment: bool | None = None, val_size: int = 5000, image_size: int = 32,
    ):
        self.split, self.seed = check_split(split), int(seed)
        check_min("image_size", image_size, 8)
        root = Path(root) if root is not None else default_root()  # the data folder: <root>/cifar-10-batches-py
        base_class = globals()["TorchvisionCIFAR10"]
        try:
            self.base = base_class(str(root), train=split != "test", download=download)
        except NETWORK_ERRORS as err:
            raise FileNotFoundError(
                f"CIFAR-10 could not be fetched from {base_class.url} ({getattr(err, 'reason', err)}): check the "
                f"network, or fetch that archive elsewhere and put it in {root} (md5 {base_class.tgz_md5}), or extract "
                f"it there") from None
        except RuntimeError as err:
            raise FileNotFoundError(
                f"CIFAR-10 not found or corrupted under {root / base_class.base_folder}: expected the python version's files "
                f"data_batch_1..5, test_batch and batches.meta (md5-checked). Fetch it with {FETCH}; download=True fetches "
                f"{base_class.url} (md5 {base_class.tgz_md5}); or extract that archive into {root}. ({err})"
            ) from err
        self.classes = tuple(self.base.classes)
        self.indices = np.arange(len(self.base))
        if split != "test":
            if not 0 <= val_size < len(self.base):
                raise ValueError(f"val_size={val_size} must be in [0, {len(self.base)}) (the training set size)")
            order = np.random.default_rng([zlib.crc32(b"cifar10"), self.seed]).permutation(len(self.base))
            self.indices = np.sort(order[:val_size] if split == "val" else order[val_size:])
        self.transform = transforms(augment=split == "train" if augment is None else augment, image_size=image_size)

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, index: int):
        i = int(self.indices[index])
        return self.transform(self.base.data[i]), int(self.base.targets[i])
