"""The benchmark's data: each task's dataset, materialized once per (split, seed, options) in the run's ``data/``
folder and read back by every encoding's cells (train/cache.py); the real datasets (:data:`REAL`) are read from
``data_root`` instead.

A cell's ``train.config.Config`` names the task's dataset and its options (:func:`data_options`); the cell hands
``train.main.fit`` / ``evaluate_model`` the factory that reads them from the cache (:func:`cell_data`), sized by the
preset (``train_items`` / ``items``, ``test_items``).
"""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Callable

import torch
from torch.utils.data import Dataset

from .bench_config import REAL, BenchConfig
from .protocol import TASKS, Task


def bench_dataset(split: str, *, seed: int, root: str | None, dataset: str, cache: str, train_items: int,
                  eval_items: int, scale_crop: tuple[float, float] | None = None, **opts):
    """The data factory of the benchmark's cells (:func:`cell_data` fills ``dataset`` ... ``scale_crop``).

    Built-in datasets are materialized once per (split, seed, options) in ``cache`` and shared by
    every encoding; ``train_items`` / ``eval_items`` size the training and val/test splits. ``scale_crop``
    (the task's ``train_scale_crop``): the training split's images pass through a random resized crop of that
    area range, drawn anew each time an item is read.
    """
    from .cache import cached_dataset
    from .data import DATASETS, build_dataset

    if dataset in REAL:
        return build_dataset(dataset, split, seed=seed, root=root, **opts)
    items = train_items if split == "train" else eval_items
    sized = {"size": items} if "size" in DATASETS[dataset].options else {"limit": items}
    data = cached_dataset(split, seed=seed, root=root, dataset=dataset, cache=cache, **sized, **opts)
    return ScaleCrop(data, scale_crop) if split == "train" and scale_crop else data


class ScaleCrop(Dataset):
    """A dataset's images through torchvision's ``RandomResizedCrop`` back to their own size (square crops of
    ``scale`` of the area: the content seen 1 to 1 / sqrt(min scale) times larger), as DeiT-III and RoPE-ViT train;
    labels and the dataset's attributes unchanged. The crop draws from torch's generator (the training seed)."""

    def __init__(self, data: Dataset, scale: tuple[float, float]):
        from torchvision.transforms import v2

        self.data, self.scale = data, tuple(float(x) for x in scale)
        if len(self.scale) != 2 or not 0 < self.scale[0] <= self.scale[1] <= 1:
            raise ValueError(f"scale_crop must be (low, high) with 0 < low <= high <= 1, got {scale!r}")
        size = tuple(data[0][0].shape[-2:])
        self.crop = v2.RandomResizedCrop(size, scale=self.scale, ratio=(1.0, 1.0), antialias=True)

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int):
        x, y = self.data[index]
        return self.crop(x), y

    def __getattr__(self, name: str):  # task, num_classes, ...: the wrapped dataset's
        if name in ("data", "scale", "crop"):
            raise AttributeError(name)
        return getattr(self.data, name)


def cell_data(cfg: BenchConfig, task: Task, run_dir) -> Callable[..., Dataset]:
    """The data factory of ``task``'s cells in ``run_dir``: :func:`bench_dataset` with the task's dataset, the run's
    cache and the preset's sizes; called as ``factory(split, seed=..., root=..., **options)`` (train.main)."""
    return functools.partial(bench_dataset, dataset=task.dataset, cache=str(Path(run_dir) / "data"),
                             train_items=int(cfg.items.get(task.name, cfg.train_items)), eval_items=cfg.test_items,
                             scale_crop=task.train_scale_crop)


def data_options(task: Task, size=None) -> dict:
    """The dataset options of ``task`` at ``size`` (the training size by default): its cells' ``data.options``."""
    opts = dict(task.data)
    if not task.conv:
        opts[task.size_key] = task.train_size if size is None else size
    return opts


def test_options(task: Task, size) -> dict:
    """The dataset options that turn a cell's data into its test split at ``size``."""
    return {**task.test_data, **({} if task.conv else {task.size_key: size})}


def data_jobs(cfg: BenchConfig) -> list[tuple]:
    """Every built-in dataset the cells will read, as ``materialize`` jobs (generated once, in parallel)."""
    jobs = []
    for task_name in cfg.tasks:
        task = TASKS[task_name]
        if task.dataset in REAL:
            continue
        splits = [("train", None), ("val", None)] + [("test", size) for size in task.test_sizes]
        jobs += [(cfg, task_name, split, size, d) for d in sorted(set(cfg.data_seeds)) for split, size in splits]
    return jobs


def fetch_real(cfg: BenchConfig) -> None:
    """Open (with ``download``: fetch) every real dataset the tasks read, in the driver before any cell, so that a
    missing one is one error (with the command that fetches it) and the cells never download concurrently. With
    the Ray executor on several machines, ``data_root`` must be a folder every worker sees. Every dataset with a
    ``download`` option is read from disk (MNIST too, though it is cached like a built-in one)."""
    from .data import DATASETS, build_dataset

    for name in dict.fromkeys(TASKS[t].dataset for t in cfg.tasks if "download" in DATASETS[TASKS[t].dataset].options):
        print(f"{name}: {'fetching if missing' if cfg.download else 'checking'} in {cfg.data_root or 'the default data folder'}",
              flush=True)
        build_dataset(name, "test", root=cfg.data_root, download=cfg.download)


def run_data_job(args: tuple) -> None:
    """Materialize one dataset of :func:`data_jobs` (in a worker, one thread)."""
    cfg, task_name, split, size, data_seed = args
    torch.set_num_threads(1)
    task = TASKS[task_name]
    opts = data_options(task) if size is None else {**data_options(task), **test_options(task, size)}
    cell_data(cfg, task, Path(cfg.out_root) / cfg.name)(split, seed=data_seed, root=cfg.data_root, **opts)
