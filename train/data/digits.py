"""Image dataset "digits": scikit-learn's 1,797 real 8x8 handwritten digits, 10 classes.

The images come with scikit-learn (``sklearn.datasets.load_digits``, UCI "Optical Recognition of
Handwritten Digits", 16 grey levels), so there is nothing to download; scikit-learn is a
training-side dependency (``pip install 'ndpe[train]'``). Two ways to grow the image (``growth``):

- ``"zoom"`` (default): the 8x8 digit is upsampled to ``image_size`` (bilinear, ``align_corners=False``;
  ``antialias`` has no effect when upsampling). Item ``i`` is the same digit at every size, objects
  scale with the image (Heo et al. 2024's "higher resolution" test). Bilinear rather than bicubic:
  it keeps pixels in [0, 1] (bicubic overshoots and rings around strokes), and rather than nearest:
  with nearest at 32 px and patch 4 every patch would be one constant digit pixel.
- ``"canvas"``: the digit is upsampled (bilinear) to ``digit_size`` px and pasted, on a black
  background, at an offset drawn per item, uniform over every position where it fits in the
  ``image_size`` field. The offset is random in every split and at every size (not centred), so a
  model trained at 32 px (where ``digit_size=32`` fills the field) sees the digit at new absolute
  positions in a larger field, with the same object size in pixels: an extrapolation of the
  position range. Offsets are a pure function of ``(seed, split, index, image_size, digit_size)``.

Splits: a stratified split of the 1,797 images, 1,077 train / 180 val / 540 test (60 / 10 / 30 % of each
class), drawn from ``seed`` (the benchmark's data seed), so each data seed trains and tests on other images;
``seed`` also drives the canvas offsets. ``split_seed`` (an int) draws the split from that number instead, the
same for every ``seed``: ``split_seed=SPLIT_SEED`` (20240101) is the fixed split of earlier versions. Pixels are
scaled to [0, 1] (grey level / 16), then normalised with mean = std = 0.5; the grey image is
repeated over ``channels`` (3 by default, so the RGB ViT configs run unchanged). Item
``(float (C, S, S), int)``.
"""
from __future__ import annotations

import zlib
from functools import lru_cache

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import Dataset

from ._base import SPLITS, check_choice, check_min, check_split

GROWTHS = ("zoom", "canvas")
SPLIT_SIZES = {"train": 1077, "val": 180, "test": 540}  # 60 / 10 / 30 % of 1,797
SPLIT_SEED = 20240101  # split_seed=SPLIT_SEED: the fixed split of earlier versions (the same for every seed)


@lru_cache(maxsize=1)
def load() -> tuple[np.ndarray, np.ndarray]:
    """All 1,797 images as float32 ``(N, 8, 8)`` in [0, 1] and int64 labels ``(N,)``."""
    try:
        from sklearn.datasets import load_digits
    except ImportError as err:
        raise ImportError("the 'digits' dataset needs scikit-learn: pip install 'ndpe[train]'") from err
    bunch = load_digits()
    return (bunch.images / 16.0).astype(np.float32), bunch.target.astype(np.int64)


def split_entropy(seed: int, split_seed: int | None) -> int | tuple[int, int]:
    """The generator seed of the split: ``split_seed`` when given, else drawn from the dataset's ``seed``."""
    return int(split_seed) if split_seed is not None else (zlib.crc32(b"digits-split"), int(seed))


@lru_cache(maxsize=8)
def split_indices(entropy: int | tuple[int, int] = SPLIT_SEED) -> dict[str, np.ndarray]:
    """Disjoint sorted indices of each split: per class, a permutation (``numpy`` seeded with ``entropy``) cut in
    60 / 10 / 30 % shares. The default is the fixed split (:data:`SPLIT_SEED`)."""
    _, labels = load()
    rng = np.random.default_rng(entropy)
    per_class = [rng.permutation(np.flatnonzero(labels == c)) for c in range(10)]
    # largest-remainder allocation of each split's size over the classes, in class proportion
    out, start = {}, np.zeros(10, int)
    counts = np.array([len(p) for p in per_class])
    for split in ("test", "val"):
        share = counts * SPLIT_SIZES[split] / counts.sum()
        take = np.floor(share).astype(int)
        take[np.argsort(take - share)[: SPLIT_SIZES[split] - take.sum()]] += 1
        out[split] = np.sort(np.concatenate([p[s:s + t] for p, s, t in zip(per_class, start, take)]))
        start += take
    out["train"] = np.sort(np.concatenate([p[s:] for p, s in zip(per_class, start)]))
    return out


class Digits(Dataset):
    """Handwritten digits 0-9 (8x8 originals) drawn at ``image_size``, zoomed or on a larger canvas.

    >>> image, label = Digits("test")[0]
    >>> image.shape, label in range(10), len(Digits("train")), len(Digits("test"))
    (torch.Size([3, 32, 32]), True, 1077, 540)
    >>> Digits("test", growth="canvas", image_size=64, digit_size=32)[0][0].shape
    torch.Size([3, 64, 64])
    >>> bool((Digits("test", seed=1).indices != Digits("test", seed=2).indices).any())  # the seed draws the split
    True
    """

    name, domain, task, num_classes = "digits", "image", "classify", 10
    classes = tuple(str(d) for d in range(10))

    def __init__(self, split: str, *, seed: int = 0, image_size: int = 32, growth: str = "zoom",
                 digit_size: int = 32, channels: int = 3, split_seed: int | None = None):
        self.split, self.seed = check_split(split), int(seed)
        check_choice("growth", growth, GROWTHS)
        check_choice("channels", channels, (1, 3))
        check_min("image_size", image_size, 8)
        check_min("digit_size", digit_size, 8)
        if growth == "canvas" and digit_size > image_size:
            raise ValueError(f"digit_size={digit_size} must be <= image_size={image_size} with growth='canvas'")
        self.image_size, self.growth, self.digit_size, self.channels = int(image_size), growth, int(digit_size), channels
        images, labels = load()
        self.split_seed = split_seed
        self.indices = split_indices(split_entropy(self.seed, split_seed))[split]
        self.images, self.labels = images[self.indices], labels[self.indices]

    def __len__(self) -> int:
        return len(self.indices)

    def offset(self, index: int) -> tuple[int, int]:
        """Canvas mode: the (row, col) of the digit's top-left corner for item ``index``."""
        room = self.image_size - self.digit_size + 1
        rng = np.random.default_rng([zlib.crc32(b"digits"), self.seed, SPLITS.index(self.split), index,
                                     self.image_size, self.digit_size])
        return int(rng.integers(room)), int(rng.integers(room))

    def __getitem__(self, index: int):
        if not 0 <= index < len(self):
            raise IndexError(f"index {index} out of range for digits {self.split} of size {len(self)}")
        digit = torch.from_numpy(self.images[index])[None, None]  # (1, 1, 8, 8) in [0, 1]
        side = self.image_size if self.growth == "zoom" else self.digit_size
        digit = F.interpolate(digit, size=(side, side), mode="bilinear", align_corners=False, antialias=True)[0, 0]
        if self.growth == "zoom":
            image = digit
        else:
            image = torch.zeros(self.image_size, self.image_size)
            r, c = self.offset(index)
            image[r:r + side, c:c + side] = digit
        image = ((image.clamp(0, 1) - 0.5) / 0.5).expand(self.channels, -1, -1).contiguous()
        return image, int(self.labels[index])

    def __repr__(self) -> str:
        return (f"Digits(split={self.split!r}, seed={self.seed}, image_size={self.image_size}, "
                f"growth={self.growth!r}, size={len(self)})")
