"""Datasets of the reference training runs: ``build_dataset(name, split, seed=..., root=..., **opts)``.

==================  ======  ========  ===================================  =====================================
name                domain  task      item                                 options (default)
==================  ======  ========  ===================================  =====================================
``copy``            text    tag       tokens (2L+1,), targets (2L+1,)      length (8), size
``reverse``         text    tag       tokens (2L+1,), targets (2L+1,)      length (8), size
``addition``        text    tag       tokens (3L+3,), targets (3L+3,)      length (8), size
``stdlib_lm``       text    lm        x (C,), y (C,) next characters       context (128)
``shapes``          image   classify  (3, S, S), 4 relations               image_size (32; 48, 64), growth ("canvas"), size
``cifar10``         image   classify  (3, 32, 32), 10 classes              download, augment, val_size, image_size
``digits``          image   classify  (3, S, S), 10 digits (sklearn 8x8)   image_size (32), growth ("zoom"), digit_size,
                                                                           split_seed (None: from ``seed``)
``mnist``           image   classify  (1, S, S), 10 digits (MNIST 28x28)   image_size (28; 42, 56), channels (1), size,
                                                                           download, source, val_size (5000)
``mnist_pair``      image   classify  (1, 28, W), is the left digit        width (64; 96, 128), channels (1), size,
                                      larger (2 classes)                   download, source, val_size (5000)
``tones``           audio   classify  (1, 64, 1+100 d), 27 sequences       duration (1.0 s; 1.5, 2.0), size
``speech_commands`` audio   classify  (1, 64, 1+100 d), 12 or 35 words     classes (12), duration, download, ...
``spoken``          audio   classify  (1, 64, 1+100 d), 35 words (espeak)  duration (1.0 s; 1.5, 2.0), size
``trajectory``      video   classify  (3, T, 16, 16), 8 paths              frames (8; 12, 16), frame_size, size
``not_so_clevr``    coord   regress   (1, 64, 64) -> (row, col) in [-1,1]  split_mode ("uniform" | "quadrant")
``onehot_pixel``    coord   regress   (1, 64, 64) -> (row, col) in [-1,1]  split_mode, image_size (64), margin (0)
==================  ======  ========  ===================================  =====================================

Splits: "train", "val", "test". Every dataset has ``domain``, ``task``, ``num_classes``
(classes; vocabulary size for "lm"; output size for "regress") and, for text, ``vocab_size``.
Tag targets are -100 where not scored. Built-in datasets (all but cifar10, speech_commands
and the two MNIST ones) need no download and are a pure function of ``(seed, split, options)``;
``size`` sets how many items they have (default 8192 train, 1024 val/test;
``digits`` has a 1077 / 180 / 540 stratified split drawn from ``seed``, or from ``split_seed``
when given; ``spoken`` needs the extra ``speech``). ``mnist`` and ``mnist_pair`` read MNIST's
files (``download=True``, or ``$NDPE_MNIST_FILES``: a folder of the official files, staged into
``root``) and are then a pure function of ``(seed, split, options)`` too: ``seed`` draws the
train / val split of MNIST's 60,000 training images, the ``size`` subset and the pairs. ``root`` is
where on-disk data lives (default ``$NDPE_DATA`` or ``~/.cache/ndpe/data``); for
``stdlib_lm`` it replaces the stdlib folder; the generated datasets ignore it.

>>> data = build_dataset("copy", "val", length=4)
>>> data.domain, data.task, data[0][0].shape
('text', 'tag', torch.Size([9]))
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass

from torch.utils.data import Dataset

from ._base import SPLITS, check_split
from .cifar import CIFAR10
from .coord import NotSoClevr, OneHotPixel
from .digits import Digits
from .mnist import MNIST, MNISTPair
from .shapes import Shapes
from .speech_commands import SpeechCommands
from .spoken import SpokenWords
from .text import AdditionTask, CopyTask, ReverseTask, StdlibLM
from .tones import Tones
from .trajectory import Trajectory


@dataclass(frozen=True)
class DatasetInfo:
    """What ``build_dataset`` knows about one name: its class, domain, task and options with defaults."""

    cls: type
    domain: str
    task: str
    options: dict  # option -> default (seed and root excluded)
    takes_root: bool
    summary: str


def _info(cls: type) -> DatasetInfo:
    params = inspect.signature(cls.__init__).parameters
    options = {k: p.default for k, p in params.items() if p.kind is p.KEYWORD_ONLY and k not in ("seed", "root")}
    summary = (inspect.getdoc(cls) or "").splitlines()[0]
    return DatasetInfo(cls, cls.domain, cls.task, options, "root" in params, summary)


DATASETS: dict[str, DatasetInfo] = {
    cls.name: _info(cls)
    for cls in (CopyTask, ReverseTask, AdditionTask, StdlibLM, Shapes, CIFAR10, Digits, MNIST, MNISTPair, Tones,
                SpeechCommands, SpokenWords, Trajectory, NotSoClevr, OneHotPixel)
}


def build_dataset(name: str, split: str, *, seed: int = 0, root: str | None = None, **opts) -> Dataset:
    """The dataset ``name`` for ``split`` ("train" | "val" | "test"); see the module docstring for options.

    >>> build_dataset("shapes", "test", image_size=64)[0][0].shape
    torch.Size([3, 64, 64])
    """
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; expected one of {sorted(DATASETS)}")
    check_split(split)
    info = DATASETS[name]
    unknown = sorted(set(opts) - set(info.options))
    if unknown:
        raise TypeError(f"unknown option(s) {unknown} for dataset {name!r}; valid options (default): {info.options}")
    if info.takes_root:
        opts["root"] = root
    return info.cls(split, seed=seed, **opts)


__all__ = ["DATASETS", "SPLITS", "DatasetInfo", "build_dataset"]
