"""Image datasets "mnist" (zoom) and "mnist_pair" (canvas) on the real MNIST digits (LeCun, Cortes and Burges).

Files: torchvision's ``MNIST`` reads the four unpacked idx files from ``<root>/MNIST/raw/`` (``root``: the data
folder of every dataset, default ``$NDPE_DATA`` or ``~/.cache/ndpe/data``). Before reading, each file's sha256 is
checked against :data:`SHA256` (the official files). When they are missing or damaged they come from, in order:

- ``source`` (a dataset option) or ``$NDPE_MNIST_FILES``: a folder holding the four official files, gzipped
  (``train-images-idx3-ubyte.gz``, ...) or unpacked; :func:`stage_mnist` unpacks and checks them and writes them
  into ``<root>/MNIST/raw/`` only (a temporary file in that folder, renamed into place once its sha256 matches);
- ``download=True``: torchvision's own download (its mirrors, the md5 of each ``.gz`` checked), then the sha256.

The idx format is parsed by torchvision (a header and raw bytes); nothing in the files is executed. (Where an old
torchvision left ``MNIST/processed/training.pt`` and ``test.pt``, torchvision reads those instead, with
``torch.load(weights_only=True)``: tensors only; delete that folder to read the checked files.)

Splits: "train" and "val" split MNIST's 60,000 training images with a permutation drawn from ``seed``
(``val_size`` of them, default 5,000, go to val); "test" is its 10,000 test images. Pixels are scaled to
[0, 1], then normalised with mean = std = 0.5 (as ``digits``); the grey image is repeated over ``channels``.

- ``mnist`` (zoom, Heo et al. 2024's protocol on real images): the 28x28 digit resized to ``image_size``
  (bilinear, antialiased: values stay in [0, 1]). ``size``: a subset of the split drawn from ``seed`` (not from
  ``image_size``), so item ``i`` is the same digit at every size. Item ``(float (C, S, S), int 0-9)``.
- ``mnist_pair`` (canvas, position matters): a black canvas of height 28 and ``width`` px holding two MNIST
  digits of different values, 28x28 each, at y = 0 and x offsets drawn uniformly over every placement where they
  do not overlap horizontally. ``target="larger"``: label 1 iff the LEFT digit's value is larger;
  ``target="left"``: the label is the LEFT digit's value (10 classes). Each placement and the one with the two
  digits' offsets swapped are equally likely and have other labels, so a model that sees the two digits but not
  which is left (blind to the order of patches) cannot beat 0.5 (``order_blind_ceiling``). (A bag of patches still sees each
  digit's alignment to the patch grid, ``x mod patch``, a weak cue.) A wider canvas puts digits at offsets never
  seen in training: position extrapolation. ``size`` pairs (default 8192 train, 1024 val / test), a pure
  function of ``(seed, split, width, index)``. Item ``(float (C, 28, width), int 0-1)``.
"""
from __future__ import annotations

import gzip
import os
import tempfile
import zlib
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
import torchvision
from torch.utils.data import Dataset

from ._base import DEFAULT_SIZE, SPLITS, check_choice, check_min, check_split, default_root
from .download import NETWORK_ERRORS, file_lock, sha256_of

ENV = "NDPE_MNIST_FILES"  # a folder of the four official files, staged into the data folder when they are missing
SHA256 = {  # of each unpacked official file (module constant: tests swap in their fixture's)
    "train-images-idx3-ubyte": "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db",
    "train-labels-idx1-ubyte": "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5",
    "t10k-images-idx3-ubyte": "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7",
    "t10k-labels-idx1-ubyte": "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2",
}
TARGETS = ("larger", "left")  # mnist_pair: is the left digit larger, or which digit is left
MAX_FILE_BYTES = 64 << 20  # an unpacked file larger than this is refused (the largest official one: 47 MB)
DIGIT = 28
TorchvisionMNIST = torchvision.datasets.MNIST  # looked up at call time (tests swap in a subclass with fixture md5s)
HOW = f"get them with download=true, or set {ENV} (or the option source) to a folder of the official files"


def raw_folder(root: str | Path) -> Path:
    """Where torchvision's ``MNIST`` reads the unpacked files: ``<root>/MNIST/raw``."""
    return Path(root) / "MNIST" / "raw"


def split_files(train: bool) -> tuple[str, str]:
    prefix = "train" if train else "t10k"
    return f"{prefix}-images-idx3-ubyte", f"{prefix}-labels-idx1-ubyte"


@lru_cache(maxsize=16)
def _digest(path: str, size: int, mtime_ns: int) -> str:  # keyed by size and time: a rewritten file is hashed again
    return sha256_of(path)


def bad_files(folder: Path, names) -> list[str]:
    """Which of ``names`` in ``folder`` are missing or differ from :data:`SHA256` ("name (missing)", ...)."""
    out = []
    for name in names:
        path = folder / name
        if not path.is_file():
            out.append(f"{name} (missing)")
            continue
        stat = path.stat()
        if _digest(str(path), stat.st_size, stat.st_mtime_ns) != SHA256[name]:
            out.append(f"{name} (corrupted: sha256 differs)")
    return out


def _source_of(source_dir: Path, name: str) -> Path | None:
    for candidate in (source_dir / name, source_dir / f"{name}.gz"):
        if candidate.is_file():
            return candidate
    return None


def _stage_one(src: Path, name: str, folder: Path) -> None:
    """Unpack (or copy) ``src`` into a temporary file of ``folder``, check its sha256, rename it to ``name``."""
    import hashlib

    digest, total = hashlib.sha256(), 0
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".part", dir=folder)
    try:
        with (gzip.open(src, "rb") if src.suffix == ".gz" else open(src, "rb")) as f_in, os.fdopen(fd, "wb") as f_out:
            while block := f_in.read(1 << 20):
                total += len(block)
                if total > MAX_FILE_BYTES:
                    raise ValueError(f"MNIST file {src} unpacks to more than {MAX_FILE_BYTES} bytes; expected the "
                                     f"official {name} (sha256 {SHA256[name]}); {HOW}")
                digest.update(block)
                f_out.write(block)
        if digest.hexdigest() != SHA256[name]:
            raise ValueError(f"MNIST file {src} is not the official {name}: sha256 {digest.hexdigest()}, expected "
                             f"{SHA256[name]}; {HOW}")
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide the data from the other users of a shared data folder
        os.replace(tmp, folder / name)  # replaces a link of that name, never writes through it
    except (OSError, EOFError, zlib.error) as err:
        raise ValueError(f"MNIST file {src} cannot be read as {name} ({type(err).__name__}: {err}); {HOW}") from err
    finally:
        Path(tmp).unlink(missing_ok=True)


def stage_mnist(source_dir: str | Path, root: str | Path | None = None) -> Path:
    """Copy the four official files from ``source_dir`` (``.gz`` or unpacked) into ``<root>/MNIST/raw``, checked.

    Nothing is written outside that folder; a file whose sha256 differs from :data:`SHA256` is refused (one line)
    and leaves the folder as it was. Returns the folder.
    """
    source_dir = Path(source_dir).expanduser()
    folder = raw_folder(default_root() if root is None else root)
    sources = {name: _source_of(source_dir, name) for name in SHA256}
    missing = [name for name, src in sources.items() if src is None]
    if missing:
        raise FileNotFoundError(f"MNIST files {missing} (or .gz) not found in {source_dir}; expected the four official "
                                f"files {list(SHA256)}; {HOW}")
    folder.mkdir(parents=True, exist_ok=True)
    with file_lock(folder / ".stage.lock"):
        for name, src in sources.items():
            if bad_files(folder, [name]):
                _stage_one(src, name, folder)
    return folder


def load(root: str | Path, train: bool, download: bool = False,
         source: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The split's images as uint8 ``(N, 28, 28)`` and int64 labels ``(N,)``, staged or fetched when missing."""
    source = source or os.environ.get(ENV) or None
    return _load(str(root), train, download, source, globals()["TorchvisionMNIST"], tuple(SHA256.items()))


@lru_cache(maxsize=4)
def _load(root: str, train: bool, download: bool, source: str | None, loader: type, pins: tuple):
    # loader and pins (the sha256 table) are part of the key: tests swap both
    folder, names = raw_folder(root), split_files(train)
    if bad_files(folder, names):
        if source:
            stage_mnist(source, root)
        elif download:
            for name in names:  # a damaged unpacked file is fetched again (torchvision only checks that it exists)
                if bad_files(folder, [name]) and (folder / name).is_file():
                    (folder / name).unlink()
            try:
                loader(str(root), train=train, download=True)
            except (RuntimeError, *NETWORK_ERRORS) as err:  # every mirror failed (no network, or they moved)
                raise FileNotFoundError(
                    f"MNIST could not be fetched from {', '.join(loader.mirrors)} ({str(err).splitlines()[-1]}): check "
                    f"the network, or put the official idx files {list(names)} in {folder}, or set {ENV} to a folder "
                    "of them") from None
        problems = bad_files(folder, names)
        if problems:
            raise FileNotFoundError(f"MNIST files not usable in {folder}: {', '.join(problems)}; expected the official "
                                    f"idx files {list(names)} (sha256-pinned); {HOW}")
    base = loader(str(root), train=train, download=False)
    return base.data.numpy(), base.targets.numpy().astype(np.int64)


def to_image(pixels: np.ndarray, size: tuple[int, int] | None = None, channels: int = 1) -> torch.Tensor:
    """uint8 ``(H, W)`` -> float ``(channels, *size)``: [0, 1], resized (bilinear, antialiased), mean = std = 0.5."""
    x = torch.from_numpy(np.asarray(pixels, dtype=np.float32) / 255.0)
    if size is not None and tuple(size) != tuple(x.shape):
        x = F.interpolate(x[None, None], size=size, mode="bilinear", align_corners=False, antialias=True)[0, 0]
    return ((x.clamp(0, 1) - 0.5) / 0.5).expand(channels, -1, -1).contiguous()


class _MNISTBase(Dataset):
    domain, task = "image", "classify"

    def __init__(self, split: str, *, seed: int, root, download: bool, source, val_size: int, channels: int):
        self.split, self.seed = check_split(split), int(seed)
        check_choice("channels", channels, (1, 3))
        self.channels = channels
        root = str(Path(root).expanduser() if root is not None else default_root())
        images, labels = load(root, split != "test", bool(download), None if source is None else str(source))
        pool = np.arange(len(images))
        if split != "test":
            if not 0 < val_size < len(images):
                raise ValueError(f"val_size={val_size} must be in (0, {len(images)}) (MNIST's training images)")
            order = np.random.default_rng([zlib.crc32(b"mnist"), self.seed]).permutation(len(images))
            pool = np.sort(order[:val_size] if split == "val" else order[val_size:])
        self.images, self.labels = images[pool], labels[pool]
        self.source_indices = pool  # into MNIST's training (train, val) or test file

    def rng(self, *key: int) -> np.random.Generator:
        return np.random.default_rng([zlib.crc32(self.name.encode()), self.seed, SPLITS.index(self.split), *key])

    def check_index(self, index: int) -> None:
        if not 0 <= index < len(self):
            raise IndexError(f"index {index} out of range for {self.name} {self.split} of size {len(self)}")


class MNIST(_MNISTBase):
    """MNIST digits 0-9 (28x28 originals) zoomed to ``image_size`` (Heo et al. 2024's resolution test).

    ``size``: a seeded subset of the split (default: the whole split).
    """

    name, num_classes = "mnist", 10
    classes = tuple(str(d) for d in range(10))

    def __init__(self, split: str, *, seed: int = 0, root: str | None = None, download: bool = False,
                 source: str | None = None, image_size: int = 28, channels: int = 1, size: int | None = None,
                 val_size: int = 5000):
        super().__init__(split, seed=seed, root=root, download=download, source=source, val_size=val_size,
                         channels=channels)
        check_min("image_size", image_size, 8)
        self.image_size = int(image_size)
        if size is not None:
            check_min("size", size, 1)
            if size > len(self.images):
                raise ValueError(f"size={size} must be <= {len(self.images)} (MNIST's {split} split)")
            pick = np.sort(self.rng().choice(len(self.images), int(size), replace=False))
            self.images, self.labels, self.source_indices = (a[pick] for a in
                                                             (self.images, self.labels, self.source_indices))

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int):
        self.check_index(index)
        size = (self.image_size, self.image_size)
        return to_image(self.images[index], size, self.channels), int(self.labels[index])


@lru_cache(maxsize=8)
def placements(width: int) -> np.ndarray:
    """Every ``(left x, right x)`` of two 28-px digits on a ``width``-px row that do not overlap horizontally."""
    xs = np.arange(width - DIGIT + 1)
    left, right = np.nonzero(xs[None, :] - xs[:, None] >= DIGIT)
    return np.stack([xs[left], xs[right]], 1)


class MNISTPair(_MNISTBase):
    """Two MNIST digits side by side on a ``width``-px canvas: is the left one larger, or which is it? (position
    matters)."""

    name = "mnist_pair"
    order_blind_ceiling = 0.5  # knowing both digits but not which is left: a coin flip between the two labels

    def __init__(self, split: str, *, seed: int = 0, root: str | None = None, download: bool = False,
                 source: str | None = None, width: int = 64, channels: int = 1, size: int | None = None,
                 val_size: int = 5000, target: str = "larger"):
        check_choice("target", target, TARGETS)
        super().__init__(split, seed=seed, root=root, download=download, source=source, val_size=val_size,
                         channels=channels)
        self.target = target
        if target == "larger":
            self.num_classes, self.classes = 2, ("left smaller", "left larger")
            self.order_blind_groups = [0, 0]  # only the left/right order decides the label
        else:
            self.num_classes, self.classes = 10, tuple(str(d) for d in range(10))
        if width < 2 * DIGIT:
            raise ValueError(f"width must be >= {2 * DIGIT} (two 28-px digits side by side), got {width}")
        self.width = int(width)
        self.size = DEFAULT_SIZE[split] if size is None else int(size)
        check_min("size", self.size, 1)

    def __len__(self) -> int:
        return self.size

    def pair(self, index: int) -> tuple[int, int, int, int]:
        """Item ``index``'s ``(left image, right image, left x, right x)``; images index this split's pool."""
        rng = self.rng(index)
        a = int(rng.integers(len(self.labels)))
        b = int(rng.integers(len(self.labels)))
        while self.labels[b] == self.labels[a]:  # two different values
            b = int(rng.integers(len(self.labels)))
        options = placements(self.width)
        left_x, right_x = (int(v) for v in options[rng.integers(len(options))])
        if rng.integers(2):  # which digit goes left: each placement and its swap are equally likely
            a, b = b, a
        return a, b, left_x, right_x

    def render(self, left: int, right: int, left_x: int, right_x: int) -> tuple[torch.Tensor, int]:
        """The canvas with image ``left`` at ``left_x`` and ``right`` at ``right_x``, and its label."""
        canvas = np.zeros((DIGIT, self.width), np.uint8)
        for image, x in ((left, left_x), (right, right_x)):
            canvas[:, x:x + DIGIT] = self.images[image]
        first, second = (left, right) if left_x < right_x else (right, left)  # in reading order
        label = int(self.labels[first] > self.labels[second]) if self.target == "larger" else int(self.labels[first])
        return to_image(canvas, None, self.channels), label

    def __getitem__(self, index: int):
        self.check_index(index)
        return self.render(*self.pair(index))
