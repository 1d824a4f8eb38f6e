"""The cross-domain benchmark: every encoding x every domain, trained at one size, tested beyond it.

    python -m train.bench --quick                       # built-in data, ~10 min on a 2-core CPU
    python -m train.bench --config configs/bench/full.yaml     # one GPU (sized for ~10 min on an H100; untimed)
    python -m train.bench --config configs/bench/real.yaml data_root=/data   # CIFAR-10, Speech Commands
    python -m train.bench --quick name=mine kinds=[rope,alibi] seeds=[0]   # any key=value override
    python -m train.bench --config configs/bench/full.yaml executor=ray ray_address=auto gpus_per_cell=1   # a Ray cluster

A *cell* is one (task, encoding, seed): it trains a reference model (``train.main.fit``) and
evaluates it at the training size and at every larger test size; rotary encodings are also
evaluated with test-time scaling (position interpolation, NTK, YaRN). Each finished cell's rows
are appended to ``runs/<name>/results.csv`` in one fsynced write, so an interrupted benchmark
resumes where it stopped (finished cells are skipped; a cell cut off midway is redone); a run
directory refuses cells trained under other settings (``fingerprint.txt``).
Cells run in a local process pool (``executor=local``) or as tasks on a Ray cluster (``executor=ray``,
see train/executors.py); either way workers return rows and only this driver writes results.csv.
``report.md`` and the plots are rewritten from the CSV at the end (``--report-only`` redoes them).
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import hashlib
import json
import math
import os
import platform
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import yaml

import ndpe

from .config import Config, ConfigError, apply_override, from_dict, load_yaml
from .report import FLOOR, Row, append_rows, read_rows, write_report

CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs" / "bench"
SCALINGS = {"pi": "linear", "ntk": "ntk", "yarn": "yarn"}


@dataclass(frozen=True)
class Task:
    """One line of the protocol: a dataset trained at one size and tested at larger ones."""

    name: str  # "<domain>/<task>"
    dataset: str  # train.data name
    model: str  # models name
    dims: int
    size_key: str  # the dataset option that grows
    train_size: float
    test_sizes: tuple  # values of size_key, the first equal to train_size
    metric: str  # key of train.engine.summarize
    higher_is_better: bool
    unit: str = ""
    data: dict = field(default_factory=dict)  # fixed dataset options (train and val; test too unless test_data says)
    model_opts: dict = field(default_factory=dict)  # model options; they win over the preset's dim / depth / heads
    conv: bool = False  # coordinate task: a conv net; kinds are "conv" / "conv+coord"
    test_data: dict = field(default_factory=dict)  # dataset options of the test splits only
    protocol: str = ""  # what the task tests and whose protocol it follows (printed in the report)
    archs: dict = field(default_factory=dict)  # coordinate tasks: kind ("conv", "conv+coord") -> ConvNet arch


KAZEMNEJAD = ("decoder-only (causal) model trained on lengths 1..L, tested at exactly L, 2L, 4L; per-token accuracy "
              "of the teacher-forced output (all tokens right = greedy decoding right): Kazemnejad et al. 2023")
PRESS = ("causal character LM trained on windows of C characters, perplexity on windows of C, 2C, 4C, 8C: "
         "Press et al. 2022")
ZOOM = "the same scene rendered at a higher resolution (more patches, same content): Heo et al. 2024"
CANVAS = "a larger field with objects of the same pixel size (position extrapolation; not Heo et al.'s protocol)"
LIU = ("a one-hot pixel in a 64x64 image -> its (row, col); CoordConv vs plain conv, as Liu et al. 2018 (their "
       "supervised coordinate regression task and split)")
CAUSAL_TEXT = {"data": {"causal": True, "min_length": 1}, "test_data": {"min_length": None},
               "model_opts": {"causal": True}, "protocol": KAZEMNEJAD}

TASKS = {t.name: t for t in [
    Task("image/shapes", "shapes", "vit", 2, "image_size", 32, (32, 48, 64), "acc", True, "px",
         model_opts={"patch_size": 4, "pool": "mean"}, protocol=CANVAS),
    Task("image/shapes-zoom", "shapes", "vit", 2, "image_size", 32, (32, 48, 64), "acc", True, "px",
         data={"growth": "zoom"}, model_opts={"patch_size": 4, "pool": "mean"}, protocol=ZOOM),
    Task("image/digits-zoom", "digits", "vit", 2, "image_size", 32, (32, 48, 64), "acc", True, "px",
         data={"growth": "zoom", "channels": 1}, model_opts={"patch_size": 4, "pool": "mean", "in_chans": 1},
         protocol=ZOOM),
    Task("image/digits-canvas", "digits", "vit", 2, "image_size", 32, (32, 48, 64), "acc", True, "px",
         data={"growth": "canvas", "digit_size": 24, "channels": 1},
         model_opts={"patch_size": 4, "pool": "mean", "in_chans": 1}, protocol=CANVAS),
    Task("image/cifar10", "cifar10", "vit", 2, "image_size", 32, (32, 48, 64), "acc", True, "px",
         model_opts={"patch_size": 4, "pool": "mean"}, protocol=ZOOM),
    Task("audio/tones", "tones", "audio", 2, "duration", 1.0, (1.0, 1.5, 2.0), "acc", True, "s",
         data={"syllables": 2}, model_opts={"patch_size": [8, 8], "pool": "mean"},
         protocol="the same syllables in a longer clip (more time patches)"),
    Task("audio/spoken", "spoken_words", "audio", 2, "duration", 1.0, (1.0, 1.5, 2.0), "acc", True, "s",
         model_opts={"patch_size": [8, 8], "pool": "mean"},
         protocol="a synthesized keyword (held-out voices) at a random offset in a longer clip (more time patches)"),
    Task("audio/speech_commands", "speech_commands", "audio", 2, "duration", 1.0, (1.0, 1.5, 2.0), "acc", True, "s",
         model_opts={"patch_size": [8, 8], "pool": "mean"}, protocol="a keyword in a longer clip"),
    Task("text/copy", "copy", "text", 1, "length", 8, (8, 16, 32), "acc", True, "L", **CAUSAL_TEXT),
    Task("text/reverse", "reverse", "text", 1, "length", 16, (16, 32, 64), "acc", True, "L", **CAUSAL_TEXT),
    Task("text/addition", "addition", "text", 1, "length", 8, (8, 16, 32), "acc", True, "L", **CAUSAL_TEXT),
    Task("text/stdlib_lm", "stdlib_lm", "text", 1, "context", 64, (64, 128, 256, 512), "ppl", False, "C",
         model_opts={"causal": True}, protocol=PRESS),
    Task("video/trajectory", "trajectory", "video", 3, "frames", 8, (8, 12, 16), "acc", True, "frames",
         data={"motions": "linear", "disk_radius": 2.2, "zero_background": True},
         model_opts={"tubelet": [1, 8, 8], "pool": "mean", "heads": 2},
         protocol="the same motion at a higher frame rate (more frames); one-frame tubelets, so only positions "
                  "tell the frame order (right/left, down/up)"),
    Task("coord/uniform", "onehot_pixel", "conv", 2, "split_mode", 1, (1,), "coord_err", False,
         data={"split_mode": "uniform", "margin": 4}, conv=True, protocol=LIU,
         archs={"conv": "conv_uniform", "conv+coord": "coordconv_regressor"}),
    Task("coord/quadrant", "onehot_pixel", "conv", 2, "split_mode", 1, (1,), "coord_err", False,
         data={"split_mode": "quadrant", "margin": 4}, conv=True, protocol=LIU,
         archs={"conv": "conv_quadrant", "conv+coord": "coordconv_regressor"}),
]}


ALL = "all"  # in `kinds` / `task_kinds`: every registered kind (ndpe.available()) that applies to the task


@dataclass
class BenchConfig:
    """A benchmark preset (configs/bench/*.yaml); every key can be overridden as ``key=value``."""

    name: str = "quick"
    tasks: list[str] = field(default_factory=lambda: ["image/shapes", "audio/tones", "text/copy", "text/stdlib_lm",
                                                      "video/trajectory", "coord/uniform", "coord/quadrant"])
    kinds: list[str] | str = ALL  # kind names ("rope", "rope+cape": with augmentation) and ALL: every registered kind
    rope_variants: list[str] = field(default_factory=lambda: ["pi", "ntk", "yarn"])
    task_kinds: dict = field(default_factory=dict)  # task -> kinds, replacing `kinds` for that task
    why: dict = field(default_factory=dict)  # task -> why these kinds (printed in the report)
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])  # model seeds (initialization, batch order)
    data_seed: int = 0  # one dataset for every encoding and seed: the floors and all cells see the same items
    workers: int = 2  # processes training cells in parallel (one thread each on CPU); executor=ray: the CPUs of a
    # local Ray instance the benchmark starts itself (ray_address null); a cluster's own resources otherwise
    executor: str = "local"  # local: a process pool on this machine | ray: one Ray task per cell (train/executors.py)
    ray_address: str | None = None  # executor=ray: "auto", "ray://head:10001", ...; null starts a local Ray instance
    gpus_per_cell: float = 0.0  # executor=ray: GPUs each cell's task asks for (0: it sees none; 0.5: two per GPU)
    device: str = "cpu"  # cpu | cuda | auto
    data_root: str | None = None  # where real datasets live
    train_items: int = 2048  # built-in datasets: items per training split
    test_items: int = 256  # built-in datasets: items per test split and size
    steps: dict = field(default_factory=lambda: {"audio/tones": 300})  # task -> optimizer steps (default_steps otherwise)
    default_steps: int = 150
    batch_size: int = 32
    lr: float = 2e-3
    lrs: dict = field(default_factory=dict)  # task -> peak learning rate (lr otherwise)
    warmup_steps: int = 20
    dim: int = 48
    depth: int = 2
    heads: int = 4
    out_root: str = "runs"


def load_bench_config(path: str | Path | None, overrides: list[str]) -> BenchConfig:
    data = load_yaml(path) if path else {}  # size- and alias-limited YAML
    cfg = from_dict(BenchConfig, data)
    for item in overrides:
        apply_override(cfg, item)
    unknown_tasks = sorted(set(cfg.tasks) - set(TASKS))
    if unknown_tasks:
        raise ConfigError(f"unknown task(s) {unknown_tasks}; expected some of {sorted(TASKS)}")
    bad_variants = sorted(set(cfg.rope_variants) - set(SCALINGS))
    if bad_variants:
        raise ConfigError(f"unknown rope_variants {bad_variants}; expected some of {sorted(SCALINGS)}")
    check_executor(cfg)
    check_per_task(cfg)
    for kinds in [cfg.kinds, *cfg.task_kinds.values()]:
        if isinstance(kinds, str) and kinds != ALL:
            raise ConfigError(f"kinds must be a list of kinds or {ALL!r} (every kind), got {kinds!r}")
    for kind in {k for kinds in [cfg.kinds, *cfg.task_kinds.values()] for k in expand_kinds(kinds)}:
        base = kind.split("+")[0]
        if base not in ndpe.available():
            raise ConfigError(f"unknown kind {kind!r}; expected {ALL!r} or a name from {sorted(ndpe.available())}, "
                              "optionally with '+cape' or '+random' augmentation")
    return cfg


def check_per_task(cfg: BenchConfig) -> None:
    """The per-task keys (``task_kinds``, ``steps``, ``lrs``, ``why``) name known tasks and hold usable values."""
    checks = {"task_kinds": (lambda v: v == ALL or isinstance(v, list) and all(isinstance(k, str) for k in v),
                             f"a list of kinds or {ALL!r}"),
              "steps": (lambda v: type(v) is int and v >= 1, "an int >= 1"),
              "lrs": (lambda v: type(v) in (int, float) and math.isfinite(v) and v > 0, "a finite number > 0"),
              "why": (lambda v: isinstance(v, str), "a string")}
    for key, (ok, expected) in checks.items():
        mapping = getattr(cfg, key)
        unknown = sorted(set(mapping) - set(TASKS))
        if unknown:
            raise ConfigError(f"{key} names unknown task(s) {unknown}; expected some of {sorted(TASKS)}")
        for task, value in mapping.items():
            if not ok(value):
                raise ConfigError(f"{key}[{task!r}] must be {expected}, got {value!r}")
    if cfg.data_seed < 0 or any(s < 0 for s in cfg.seeds):
        raise ConfigError(f"seeds and data_seed must be >= 0, got seeds={cfg.seeds}, data_seed={cfg.data_seed}")


EXECUTORS = ("local", "ray")


def check_executor(cfg: BenchConfig) -> None:
    """``executor`` / ``ray_address`` / ``gpus_per_cell`` values that work together (ConfigError otherwise)."""
    if cfg.executor not in EXECUTORS:
        raise ConfigError(f"config key executor must be one of {list(EXECUTORS)}, got {cfg.executor!r}")
    if cfg.workers < 1:
        raise ConfigError(f"config key workers must be >= 1, got {cfg.workers}")
    if not cfg.gpus_per_cell >= 0:
        raise ConfigError(f"config key gpus_per_cell must be >= 0, got {cfg.gpus_per_cell}")
    if cfg.executor == "local" and (cfg.ray_address is not None or cfg.gpus_per_cell):
        raise ConfigError("ray_address and gpus_per_cell apply to executor=ray (add executor=ray)")
    if cfg.executor == "ray" and cfg.device == "cuda" and not cfg.gpus_per_cell:
        raise ConfigError("device=cuda with executor=ray needs gpus_per_cell > 0 (a Ray task sees only the GPUs it asks for)")
    if cfg.executor == "ray" and cfg.device == "cpu" and cfg.gpus_per_cell:
        raise ConfigError("gpus_per_cell > 0 with device=cpu would hold GPUs the cells never use; "
                          "pass device=auto or device=cuda")


# -- cells -------------------------------------------------------------------------------------


def expand_kinds(kinds: list[str] | str) -> list[str]:
    """``kinds`` with :data:`ALL` replaced by every registered kind (``ndpe.available()``), each name once."""
    names: list[str] = []
    for kind in [kinds] if isinstance(kinds, str) else kinds:
        names += [k for k in (ndpe.available() if kind == ALL else [kind]) if k not in names]
    return names


def kinds_for(cfg: BenchConfig, task_name: str) -> list[str]:
    """The encodings trained on ``task_name``: ``task_kinds[task]`` or ``kinds`` (:func:`expand_kinds`), those that
    apply to its dims (and, for kinds defined for causal attention only, to causal tasks)."""
    task = TASKS[task_name]
    if task.conv:
        return ["conv", "conv+coord"]
    causal = bool(task.model_opts.get("causal"))

    def applies(kind: str) -> bool:
        base = kind.split("+")[0]
        return task.dims in ndpe.available()[base] and (causal or not ndpe.registry.kind_class(base).causal_only)

    return [k for k in expand_kinds(cfg.task_kinds.get(task_name, cfg.kinds)) if applies(k)]


def cells_for(cfg: BenchConfig) -> list[tuple[str, str, int]]:
    """Every (task, kind, seed) the preset asks for, and each task's floor cell ``(task, "floor", data_seed)``."""
    cells = []
    for task_name in cfg.tasks:
        cells.append((task_name, FLOOR, cfg.data_seed))
        cells += [(task_name, k, s) for k in kinds_for(cfg, task_name) for s in cfg.seeds]
    return cells


def pe_config(kind: str, task: Task, train_grid: tuple[int, ...] | None, max_grid: tuple[int, ...] | None = None) -> dict:
    """The model's ``pe`` entry for a benchmark kind name like ``"rope"`` or ``"sinusoidal+cape"``.

    The options are the kind's own for the task (``Encoding.task_options``: e.g. a learned table sized by the
    grids, the causal form of a bias in causal attention); ``train_grid`` / ``max_grid``: the grids the encoder
    sees at the training and the largest test size.
    """
    base, _, augment = kind.partition("+")
    options = ndpe.registry.kind_class(base).task_options(
        dims=task.dims, causal=bool(task.model_opts.get("causal")), train_grid=train_grid, max_grid=max_grid)
    return {"kind": base, "options": options, "augment": augment or None}


REAL = ("cifar10", "speech_commands")  # read from disk with training augmentation: never cached


def bench_dataset(split: str, *, seed: int, root: str | None, dataset: str, cache: str, train_items: int,
                  eval_items: int, **opts):
    """The data factory of the benchmark's cells (``data.name: "train.bench:bench_dataset"``).

    Built-in datasets are materialized once per (split, seed, options) in ``cache`` and shared by
    every encoding; ``train_items`` / ``eval_items`` size the training and val/test splits.
    """
    from .cache import cached_dataset
    from .data import DATASETS, build_dataset

    if dataset in REAL:
        return build_dataset(dataset, split, seed=seed, root=root, **opts)
    items = train_items if split == "train" else eval_items
    sized = {"size": items} if "size" in DATASETS[dataset].options else {"limit": items}
    return cached_dataset(split, seed=seed, root=root, dataset=dataset, cache=cache, **sized, **opts)


def data_options(cfg: BenchConfig, task: Task, run_dir: Path, size=None) -> dict:
    """Options of ``bench_dataset`` for ``task`` at ``size`` (the training size by default)."""
    opts = {"dataset": task.dataset, "cache": str(Path(run_dir) / "data"), "train_items": cfg.train_items,
            "eval_items": cfg.test_items, **task.data}
    if not task.conv:
        opts[task.size_key] = task.train_size if size is None else size
    return opts


def test_options(task: Task, size) -> dict:
    """The dataset options that turn a cell's data into its test split at ``size``."""
    return {**task.test_data, **({} if task.conv else {task.size_key: size})}


def train_config(cfg: BenchConfig, task: Task, kind: str, seed: int, run_dir: Path, train_grid=None,
                 max_grid=None) -> Config:
    """The ``train.config.Config`` of one cell."""
    model = {"name": task.model}
    if task.conv:
        model["add_coords"] = kind == "conv+coord"
        if kind in task.archs:
            model["arch"] = task.archs[kind]
    else:
        model.update(dim=cfg.dim, depth=cfg.depth, heads=cfg.heads, pe=pe_config(kind, task, train_grid, max_grid))
    model.update(task.model_opts)
    steps = int(cfg.steps.get(task.name, cfg.default_steps))
    out_dir = cell_dir(run_dir, task.name, kind, seed)
    raw = {
        "data": {"name": "train.bench:bench_dataset", "root": cfg.data_root, "seed": cfg.data_seed,
                 "options": data_options(cfg, task, run_dir), "eval_split": "val"},
        "model": model,
        "optim": {"lr": float(cfg.lrs.get(task.name, cfg.lr)), "warmup_steps": min(cfg.warmup_steps, steps // 5), "weight_decay": 0.05},
        "train": {"steps": steps, "batch_size": cfg.batch_size, "seed": seed, "device": cfg.device,
                  "out_dir": str(out_dir), "log_every": 10 ** 9, "save_every": 10 ** 9},
    }
    return from_dict(Config, raw)


def data_jobs(cfg: BenchConfig) -> list[tuple]:
    """Every built-in dataset the cells will read, as ``materialize`` jobs (generated once, in parallel)."""
    jobs = []
    for task_name in cfg.tasks:
        task = TASKS[task_name]
        if task.dataset in REAL:
            continue
        splits = [("train", None), ("val", None)] + [("test", size) for size in task.test_sizes]
        jobs += [(cfg, task_name, split, size) for split, size in splits]
    return jobs


def run_data_job(args: tuple) -> None:
    cfg, task_name, split, size = args
    torch.set_num_threads(1)
    task = TASKS[task_name]
    opts = data_options(cfg, task, Path(cfg.out_root) / cfg.name)
    if size is not None:
        opts.update(test_options(task, size))
    bench_dataset(split, seed=cfg.data_seed, root=cfg.data_root, **opts)


def encoder_grid(model, x: torch.Tensor) -> tuple[int, ...] | None:
    """The grid shape the model's encoder sees for input ``x`` (a forward with a hook), or None (conv)."""
    encoder = getattr(model, "encoder", None)
    if encoder is None:
        return None
    seen = {}

    def hook(module, args):  # returns None: the forward's arguments stay as they are
        seen.setdefault("grid", tuple(args[1]))

    handle = encoder.register_forward_pre_hook(hook)
    try:
        with torch.no_grad():
            model.eval()(x[None])
    finally:
        handle.remove()
    return tuple(int(n) for n in seen["grid"])


def scaled_rope(pe, variant: str, train_grid: tuple[int, ...], test_grid: tuple[int, ...]):
    """The trained rope encoding ``pe`` rebuilt with test-time scaling ``variant`` (pi, ntk, yarn)."""
    scale = tuple(max(t / s, 1.0) for t, s in zip(test_grid, train_grid))
    return pe.replace(scaling=SCALINGS[variant], scale=scale, **({"train_shape": train_grid} if variant == "yarn" else {}))


def with_encoding(model, pe):
    """A copy of ``model`` whose encoder uses ``pe`` (the trained model is left as it is)."""
    variant = copy.deepcopy(model)
    variant.encoder.pe = pe
    return variant


def run_cell_safe(args: tuple) -> tuple[list[Row], float, str | None]:
    """:func:`run_cell`, turning a failure into a message so one broken cell does not stop the benchmark."""
    start = time.perf_counter()
    try:
        rows, seconds = run_cell(args)
        return rows, seconds, None
    except Exception as e:  # reported per cell and in report.md; the cell is retried on the next run
        _, task_name, kind, seed, _ = args
        return [], time.perf_counter() - start, f"{task_name} {kind} seed {seed}: {type(e).__name__}: {e}"


def cell_dir(run_dir, task_name: str, kind: str, seed: int) -> Path:
    return Path(run_dir) / "cells" / f"{task_name.replace('/', '_')}_{kind}_{seed}"


def run_cell(args: tuple) -> tuple[list[Row], float]:
    """Train and test one cell (or compute a floor cell); returns its rows and wall time. Runs in a worker.

    Everything the cell prints goes to ``cells/<cell>/console.log`` (the training log to ``log.jsonl``);
    the console gets one line per finished cell from the driver.
    """
    cfg, task_name, kind, seed, run_dir = args
    out = cell_dir(run_dir, task_name, kind, seed)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "console.log", "w") as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        return _run_cell(cfg, TASKS[task_name], kind, seed, run_dir)


def _row(task: Task, kind: str, variant: str, seed: int, size, value: float, train_time: float) -> Row:
    ratio = 1.0 if task.conv else float(size) / float(task.train_size)
    label = task.data["split_mode"] if task.conv else None
    return Row(domain=task.name.split("/")[0], task=task.name, kind=kind, variant=variant, seed=seed,
               train_size=label or f"{task.train_size:g}{task.unit}", test_size=label or f"{size:g}{task.unit}",
               size_ratio=ratio, metric=task.metric, value=float(value), higher_is_better=task.higher_is_better,
               train_time_s=round(train_time, 2))


def floor_rows(cfg: BenchConfig, task: Task, run_dir) -> list[Row]:
    """The task's floors (train.floors) at every test size, computed from the cells' own data."""
    from .floors import floors
    from .main import build_data

    tcfg = train_config(cfg, task, "none", cfg.data_seed, run_dir)  # only its data is used
    train, val = build_data(tcfg, "train"), build_data(tcfg, "val")
    rows = []
    for size in task.test_sizes:
        for name, value in floors(train, val, build_data(tcfg, "test", **test_options(task, size))).items():
            rows.append(_row(task, FLOOR, name, cfg.data_seed, size, value, 0.0))
    return rows


def _run_cell(cfg: BenchConfig, task: Task, kind: str, seed: int, run_dir) -> tuple[list[Row], float]:
    start = time.perf_counter()
    if kind == FLOOR:
        return floor_rows(cfg, task, run_dir), time.perf_counter() - start
    from models import build_model

    from .main import build_data, evaluate_model, fit, resolve_model_config

    train_grid = max_grid = None
    if not task.conv:  # the grids the encoder sees at the training and largest sizes (learned tables are sized by them)
        probe_cfg = train_config(cfg, task, "none", seed, run_dir)
        probe = build_data(probe_cfg, "val")
        resolve_model_config(probe_cfg, probe)
        probe_model = build_model(probe_cfg.model)
        train_grid = encoder_grid(probe_model, probe[0][0])
        max_grid = encoder_grid(probe_model, build_data(probe_cfg, "test", **test_options(task, task.test_sizes[-1]))[0][0])
    tcfg = train_config(cfg, task, kind, seed, run_dir, train_grid, max_grid)
    model, _ = fit(tcfg)
    train_time = time.perf_counter() - start
    model.eval()
    rows = []
    variants = ["-"] + (list(cfg.rope_variants) if kind == "rope" else [])
    for size in task.test_sizes:
        opts = test_options(task, size)
        for variant in variants:
            tested = model
            if variant != "-":
                if float(size) <= float(task.train_size):
                    continue  # scaling changes nothing at the training size
                test_grid = encoder_grid(model, build_data(tcfg, "test", **opts)[0][0])
                tested = with_encoding(model, scaled_rope(model.encoder.pe, variant, train_grid, test_grid))
            metrics = evaluate_model(tested, tcfg, split="test", **opts)
            rows.append(_row(task, kind, variant, seed, size, metrics[task.metric], train_time))
    return rows, time.perf_counter() - start


# -- driver ------------------------------------------------------------------------------------
def fmt_time(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    return f"{m}:{s:02d}"


# what the numbers of a cell depend on; the selection (tasks, kinds, seeds) and the machinery do not count
SELECTION = ("name", "tasks", "kinds", "seeds", "workers", "out_root", "executor", "ray_address", "gpus_per_cell")


def fingerprint(cfg: BenchConfig) -> str:
    fields = {k: v for k, v in dataclasses.asdict(cfg).items() if k not in SELECTION}
    return hashlib.sha1(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]


def check_fingerprint(cfg: BenchConfig, run_dir: Path, *, resuming: bool) -> None:
    """Refuse to add cells trained under other settings to an existing run (and say how to start another)."""
    path = run_dir / "fingerprint.txt"
    if resuming and path.exists() and path.read_text().strip() != fingerprint(cfg):
        raise ConfigError(f"{run_dir} holds results trained with other settings (see its bench_config.yaml); "
                          f"pass name=<new name> to start another run, or delete {run_dir}")
    path.write_text(fingerprint(cfg) + "\n")


def selected_rows(cfg: BenchConfig, rows: list[Row]) -> list[Row]:
    """The rows of the cells this configuration selects (a run directory may hold more)."""
    cells = set(cells_for(cfg))
    return [r for r in rows if (r.task, r.kind, r.seed) in cells]


def run(cfg: BenchConfig, command: str, *, cell_fn=None) -> Path:
    """Train the cells ``cfg`` selects that results.csv lacks, then write the report.

    ``cell_fn`` replaces :func:`run_cell_safe` as the function run on each cell (tests; it must pickle).
    """
    import importlib.util

    from .executors import INSTALL_HINT, ExecutorError, make_executor

    if cfg.executor == "ray" and importlib.util.find_spec("ray") is None:
        raise SystemExit(f"error: {INSTALL_HINT}")
    cell_fn = cell_fn or run_cell_safe
    run_dir = Path(cfg.out_root) / cfg.name
    run_dir.mkdir(parents=True, exist_ok=True)
    results = run_dir / "results.csv"
    check_fingerprint(cfg, run_dir, resuming=results.exists())
    (run_dir / "bench_config.yaml").write_text(yaml.safe_dump(dataclasses.asdict(cfg), sort_keys=False))
    done = {(r.task, r.kind, r.seed) for r in read_rows(results)}
    todo = [c for c in cells_for(cfg) if c not in done]
    total = len(todo) + len(done & set(cells_for(cfg)))
    on_ray = bool(todo) and cfg.executor == "ray"  # nothing to train: no cluster needed
    if on_ray:
        try:
            executor = make_executor("ray", workers=cfg.workers, ray_address=cfg.ray_address,
                                     gpus_per_cell=cfg.gpus_per_cell)
        except ExecutorError as e:
            raise SystemExit(f"error: {e}") from None
        # workers elsewhere (or in another working directory) get absolute paths: the run directory's
        # data/ and cells/ are made at that path on the machine that runs the cell
        run_dir_w = run_dir.resolve()
        cfg_w = dataclasses.replace(cfg, out_root=str(run_dir_w.parent))
    else:
        executor = make_executor("local", workers=cfg.workers, jobs=len(todo))
        run_dir_w, cfg_w = run_dir, cfg
    workers_text = executor.describe()
    print(f"bench {cfg.name}: {total} cells ({total - len(todo)} already done), {workers_text} -> {run_dir}",
          flush=True)
    start = time.perf_counter()
    jobs = [(cfg_w, t, k, s, str(run_dir_w)) for t, k, s in todo]
    # longest cells first, so the last minutes are not one worker finishing a slow cell alone
    jobs.sort(key=lambda j: -int(cfg.steps.get(j[1], cfg.default_steps)) * (1 + len(TASKS[j[1]].test_sizes)))
    finished = 0

    def lost(job, error):  # the executor gave up on a cell (Ray: its worker died on every retry)
        _, task_name, kind, seed, _ = job
        return [], 0.0, f"{task_name} {kind} seed {seed}: lost ({type(error).__name__}: {str(error).splitlines()[0]})"

    failures = []
    try:
        data = data_jobs(cfg_w) if jobs else []
        print(f"generating {len(data)} built-in datasets (cached in {executor.where_data(run_dir_w / 'data')})",
              flush=True)
        executor.prepare(run_data_job, data)
        print(f"data ready after {fmt_time(time.perf_counter() - start)}", flush=True)
        results_iter = executor.map_unordered(cell_fn, jobs, lost)
        for rows, seconds, error in results_iter:
            finished += 1
            elapsed = time.perf_counter() - start
            progress = f"[{total - len(jobs) + finished}/{total}]"
            eta = f"elapsed {fmt_time(elapsed)}, ETA {fmt_time(elapsed / finished * (len(jobs) - finished))}"
            if error is not None:
                failures.append(error)
                print(f"{progress} FAILED {error} | {eta}", flush=True)
                continue
            append_rows(results, rows)
            at = ", ".join(f"{r.value:.3g}@×{r.size_ratio:g}" + ("" if r.variant == "-" else f" {r.variant}")
                           for r in rows if r.variant == "-" or r.kind == FLOOR)
            print(f"{progress} {rows[0].task} {rows[0].kind} seed {rows[0].seed}: {rows[0].metric} {at} "
                  f"({seconds:.0f} s) | {eta}", flush=True)
    finally:
        executor.close()
    wall = time.perf_counter() - start
    info_path = run_dir / "run_info.json"
    if jobs or not info_path.exists():  # an invocation that trained nothing keeps the last one's record
        info = {"command": command, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "wall_s": round(wall),
                **({"executor": workers_text} if on_ray else {})}
        info_path.write_text(json.dumps(info) + "\n")
    info = json.loads(info_path.read_text())
    head = header(cfg, info)
    if failures:
        head += "\n- **failed cells** (rerun the same command to retry them):\n" + "\n".join(f"  - {f}" for f in failures)
    report = write_report(run_dir, head, select=lambda rows: selected_rows(cfg, rows))
    print(f"wrote {results} and {report} in {fmt_time(wall)}" + (f"; {len(failures)} cell(s) FAILED" if failures else ""),
          flush=True)
    if failures:
        raise SystemExit(1)
    return report


def header(cfg: BenchConfig, info: dict) -> str:
    """The report's first lines: what ran, where, when, how long (``info`` from run_info.json), and the selection."""
    import ndpe

    cpu = platform.processor() or platform.machine()
    gpu = torch.cuda.get_device_name() if cfg.device != "cpu" and torch.cuda.is_available() else "none"
    lines = [
        f"# ndpe benchmark report: `{cfg.name}`", "",
        f"- command: `{info['command']}`",
        f"- finished: {info['date']}; wall time of that invocation: {fmt_time(info['wall_s'])} "
        f"({info.get('executor', f'{cfg.workers} worker process(es)')})",
        f"- machine: {platform.system()} {cpu}, {os.cpu_count()} CPU cores, GPU: {gpu}",
        f"- versions: python {platform.python_version()}, torch {torch.__version__}, ndpe {ndpe.__version__}",
        f"- seeds: {cfg.seeds} (model initialization and batch order); data seed {cfg.data_seed} for every cell; "
        f"model: dim {cfg.dim}, depth {cfg.depth}, heads {cfg.heads} (unless the task says otherwise); batch "
        f"{cfg.batch_size}, lr {cfg.lr} (per task: {cfg.lrs or 'none'}); steps: {cfg.default_steps} (per task: "
        f"{cfg.steps or 'none'}); {cfg.train_items} training items, {cfg.test_items} test items per size (fewer "
        "where the dataset has fewer)",
        "- protocol: each model is trained at the first size and evaluated at every size; `(pi)`, `(ntk)`, `(yarn)`"
        " rows are the same rope model evaluated with test-time scaling; floors are computed from the same data "
        "(train/floors.py).", "",
        "## Tasks and the encodings compared", "",
        "| task | protocol | encodings | why these |", "|---|---|---|---|",
    ]
    for name in cfg.tasks:
        task = TASKS[name]
        opts = {k: v for k, v in task.model_opts.items() if k in ("heads", "patch_size", "tubelet", "pool", "causal")}
        lines.append(f"| {name} | {task.protocol}{f' (model: {opts})' if opts else ''} | "
                     f"{', '.join(kinds_for(cfg, name))} | {cfg.why.get(name, '')} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="the CPU preset, configs/bench/quick.yaml")
    parser.add_argument("--config", default=None, help="a preset YAML (configs/bench/*.yaml)")
    parser.add_argument("--report-only", action="store_true", help="rewrite report.md from results.csv")
    parser.add_argument("overrides", nargs="*", help="key=value overrides of the preset (e.g. seeds=[0])")
    args = parser.parse_args(argv)
    if args.quick and args.config:
        parser.error("--quick is configs/bench/quick.yaml: give one of --quick and --config")
    path = CONFIG_DIR / "quick.yaml" if args.quick else args.config
    try:
        cfg = load_bench_config(path, args.overrides)
    except (ConfigError, FileNotFoundError) as e:
        parser.error(str(e))
    command = "python -m train.bench " + " ".join(argv if argv is not None else sys.argv[1:])
    if args.report_only:
        run_dir = Path(cfg.out_root) / cfg.name
        if not (run_dir / "run_info.json").exists():
            parser.error(f"{run_dir} holds no finished run (run_info.json): run the benchmark first")
        return write_report(run_dir, header(cfg, json.loads((run_dir / "run_info.json").read_text())),
                            select=lambda rows: selected_rows(cfg, rows))
    try:
        return run(cfg, command)
    except ConfigError as e:  # e.g. a run directory trained under other settings: one line, no traceback
        parser.error(str(e))


if __name__ == "__main__":
    main()
