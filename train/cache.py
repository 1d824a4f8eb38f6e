"""Materialize a dataset once as tensors and load it back without executing code.

The benchmark trains many encodings on the same data; generating the built-in datasets item by
item costs more than a small model's training step, so each (dataset, split, seed, options) is
written once to a tensor file and every cell reads it back with ``torch.load(weights_only=True)``.

>>> import tempfile; from pathlib import Path
>>> path = materialize("copy", "val", seed=0, opts={"length": 4, "size": 8}, cache_dir=Path(tempfile.mkdtemp()))
>>> data = cached_dataset("val", seed=0, root=None, dataset="copy", cache=str(path.parent), length=4, size=8)
>>> len(data), data.task, data[0][0].shape
(8, 'tag', torch.Size([9]))
"""
from __future__ import annotations

import hashlib
import json
import os
import warnings
from pathlib import Path

import torch
from torch.utils.data import Dataset

META = ("domain", "task", "num_classes", "vocab_size", "order_blind_groups", "order_blind_bag", "order_blind_ceiling")


def cache_path(cache_dir: Path, name: str, split: str, seed: int, opts: dict) -> Path:
    key = json.dumps({"name": name, "split": split, "seed": seed, "opts": opts}, sort_keys=True)
    return Path(cache_dir) / f"{name}_{split}_{hashlib.sha1(key.encode()).hexdigest()[:12]}.pt"


def materialize(name: str, split: str, *, seed: int, opts: dict, cache_dir: Path, root: str | None = None,
                limit: int | None = None) -> Path:
    """Build ``train.data`` dataset ``name`` and write its items to a tensor file (atomically).

    ``limit`` keeps at most that many items, evenly spaced over the dataset (for datasets without a
    ``size`` option, such as the language-model corpus).
    """
    from .data import build_dataset

    path = cache_path(cache_dir, name, split, seed, {**opts, "limit": limit})
    if path.exists():
        return path
    data = build_dataset(name, split, seed=seed, root=root, **opts)
    n = len(data)
    index = range(n) if limit is None or n <= limit else torch.linspace(0, n - 1, limit).long().tolist()
    xs, ys = zip(*(data[i] for i in index))
    state = {"x": torch.stack(xs), "y": torch.stack([torch.as_tensor(y) for y in ys]),
             **{k: getattr(data, k) for k in META if getattr(data, k, None) is not None}}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    torch.save(state, tmp)
    os.replace(tmp, path)
    return path


class TensorData(Dataset):
    """Items ``(x[i], y[i])`` with the dataset attributes the training loop reads."""

    def __init__(self, state: dict):
        self.x, self.y = state["x"], state["y"]
        for k in META:
            setattr(self, k, state.get(k))

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        return self.x[i], self.y[i]


def cached_dataset(split: str, *, seed: int, root: str | None, dataset: str, cache: str, limit: int | None = None,
                   **opts) -> TensorData:
    """A ``train.main`` data factory (``data.name: "train.cache:cached_dataset"``): the materialized data.

    ``dataset`` names the ``train.data`` dataset, ``cache`` the folder, ``opts`` its options.
    """
    path = materialize(dataset, split, seed=seed, opts=opts, cache_dir=Path(cache), root=root, limit=limit)
    try:
        return TensorData(torch.load(path, weights_only=True))
    except Exception as e:  # a file cut or damaged on disk (the write itself is atomic): name it, make it again
        warnings.warn(f"cache file {path} is damaged ({type(e).__name__}: {e}); regenerating it", stacklevel=2)
        path.unlink(missing_ok=True)
        path = materialize(dataset, split, seed=seed, opts=opts, cache_dir=Path(cache), root=root, limit=limit)
        return TensorData(torch.load(path, weights_only=True))
