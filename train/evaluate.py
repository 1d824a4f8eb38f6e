"""One benchmark cell: its training config, its training, and its evaluation at the training size and beyond.

:func:`run_cell` (run in a worker) trains the reference model of a :class:`~train.cells.CellSpec` with
``train.main.fit``, records its training and validation metric, and tests it at every test size of its task, a
rotary kind also with test-time scaling (position interpolation, NTK, YaRN); each test set is built once. A floor
cell computes its task's floors (train/floors.py) from the data of one data seed; a search cell is scored on the
validation split, as the bar is judged. Every number becomes a :class:`~train.results.Row`.
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import math
import os
import time
from pathlib import Path

import ndpe

from .bench_config import SCALINGS, BenchConfig, label_coords, split_label
from .bench_data import cell_data, data_options, test_options
from .cells import CellSpec
from .config import Config, from_dict
from .continuing import fit_cell
from .protocol import TASKS, Task
from .results import FLOOR, SEARCH, SEARCH_LOSS, Row


def pe_config(kind: str, task: Task, train_grid: tuple[int, ...] | None, max_grid: tuple[int, ...] | None = None) -> dict:
    """The model's ``pe`` entry for a benchmark kind name like ``"rope"`` or ``"sinusoidal+cape"``.

    The options are the kind's own for the task (``Encoding.task_options``: e.g. a learned table sized by the
    grids, the causal form of a bias in causal attention), then the protocol's choices for that task
    (``Task.kind_options``, train/protocol.py); ``train_grid`` / ``max_grid``: the grids the encoder sees at the
    training and the largest test size.
    """
    base, augment, _ = split_label(kind)
    options = ndpe.registry.kind_class(base).task_options(
        dims=task.dims, causal=bool(task.model_opts.get("causal")), train_grid=train_grid, max_grid=max_grid)
    if base in task.kind_options:  # the protocol's choices (train/protocol.py, each with its reason)
        options = {**options, **task.kind_options[base].options(tuple(train_grid or ()), tuple(max_grid or ()))}
    if coords := label_coords(kind):  # the label's coordinate convention wins
        options = {**options, "coords": coords}
    return {"kind": base, "options": options, "augment": augment}


def train_config(cfg: BenchConfig, task: Task, cell: CellSpec, run_dir: Path, train_grid=None,
                 max_grid=None) -> Config:
    """The ``train.config.Config`` of one cell; its data is built by :func:`train.bench_data.cell_data`'s factory
    (passed to ``train.main.fit`` as ``data``), from the cache in ``run_dir``."""
    model = {"name": task.model}
    if task.conv:
        model["add_coords"] = cell.kind == "conv+coord"
        model.update(task.archs.get(cell.kind, {}))
    else:
        model.update({"dim": cfg.dim, "depth": cfg.depth, "heads": cfg.heads, **cfg.models.get(task.name, {}),
                      "pe": pe_config(cell.kind, task, train_grid, max_grid), **split_label(cell.kind)[2]})
    model.update(task.model_opts)
    steps = cfg.steps_for(task.name)
    lr = cell.lr or float(cfg.lrs.get(task.name, cfg.lr))
    raw = {
        "data": {"name": task.dataset, "root": cfg.data_root, "seed": cell.data_seed, "num_workers": cfg.data_workers,
                 "options": data_options(task), "eval_split": "val"},  # built by bench_data.cell_data's factory
        "model": model,
        "optim": {"lr": lr, "warmup_steps": min(cfg.warmup_steps, steps // 5),
                  "weight_decay": cell.weight_decay if cell.lr else cfg.weight_decay},
        "train": {"steps": steps, "batch_size": cfg.batch_size, "seed": cell.seed, "device": cfg.device,
                  "out_dir": str(cell_dir(run_dir, cell)), "log_every": 10 ** 9, "save_every": 10 ** 9,
                  "save_every_s": cfg.checkpoint_s,
                  "eval_steps": -(-steps // cfg.curve_points) if cfg.curve_points else 0,  # its learning curve
                  "overwrite": True},  # a cell not in results.csv is unfinished: trained anew, or continued
    }  # from its checkpoint where it was killed mid-training (train/continuing.py)
    return from_dict(Config, raw)


def scaled_rope(pe, variant: str, train_grid: tuple[int, ...], test_grid: tuple[int, ...]):
    """The trained rope encoding ``pe`` rebuilt with test-time scaling ``variant`` (pi, ntk, yarn)."""
    scale = tuple(max(t / s, 1.0) for t, s in zip(test_grid, train_grid))
    return pe.replace(scaling=SCALINGS[variant], scale=scale, **({"train_shape": train_grid} if variant == "yarn" else {}))


def with_encoding(model, pe):
    """A copy of ``model`` whose encoder uses ``pe`` (the trained model is left as it is)."""
    variant = copy.deepcopy(model)
    variant.encoder.pe = pe
    return variant


def cell_dir(run_dir, cell: CellSpec) -> Path:
    name = f"{cell.task.replace('/', '_')}_{cell.kind}_{cell.seed}_d{cell.data_seed}"
    return Path(run_dir) / "cells" / (name + (f"_lr{cell.lr:g}_wd{cell.weight_decay:g}" if cell.search else ""))


def run_cell(args: tuple) -> tuple[list[Row], float]:
    """Train and test one cell (or compute a floor cell); returns its rows and wall time. Runs in a worker.

    Everything the cell prints goes to ``cells/<cell>/console.log`` (the training log to ``log.jsonl``), appended
    under a line naming the start, so a killed cell's log stays beside the one that continues it; the console gets one
    line per finished cell from the driver.
    """
    cfg, cell, run_dir = args
    if cfg.memory_budget_gib is not None:  # each worker process has its own budget
        ndpe.set_memory_budget(int(cfg.memory_budget_gib * 2 ** 30))
    out = cell_dir(run_dir, cell)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "console.log", "a") as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        print(f"=== cell started {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} (pid {os.getpid()})", flush=True)
        return _run_cell(cfg, TASKS[cell.task], cell, run_dir)


def cell_row(task: Task, cell: CellSpec, variant: str, size, value: float, train_time: float, split: str = "test") -> Row:
    ratio = 1.0 if task.conv else float(size) / float(task.train_size)
    label = task.data["split_mode"] if task.conv else None
    return Row(domain=task.name.split("/")[0], task=task.name, kind=cell.kind, variant=variant, seed=cell.seed,
               train_size=label or f"{task.train_size:g}{task.unit}", test_size=label or f"{size:g}{task.unit}",
               size_ratio=ratio, metric=task.metric, value=float(value), higher_is_better=task.higher_is_better,
               train_time_s=round(train_time, 2), data_seed=cell.data_seed, split=split, lr=cell.lr,
               weight_decay=cell.weight_decay)


def data_cell(cell: CellSpec) -> CellSpec:
    """A floor cell as a cell whose configuration builds its data (a floor has no encoding: ``none``)."""
    return dataclasses.replace(cell, kind="none") if cell.kind == FLOOR else cell


def floor_rows(cfg: BenchConfig, task: Task, cell: CellSpec, run_dir) -> list[Row]:
    """The task's floors (train.floors) at every test size, computed from the data of ``cell.data_seed``."""
    from .floors import floors
    from .main import build_data

    tcfg, data = train_config(cfg, task, data_cell(cell), run_dir), cell_data(cfg, task, run_dir)  # only its data
    train, val = build_data(tcfg, "train", data=data), build_data(tcfg, "val", data=data)
    rows = []
    for size in task.test_sizes:
        test = build_data(tcfg, "test", data=data, **test_options(task, size))
        for name, value in floors(train, val, test, task.metric).items():
            rows.append(cell_row(task, cell, name, size, value, 0.0))
    if task.competence_split == "val":  # the bar is judged on the validation split: its floors too
        rows += [cell_row(task, cell, name, task.train_size, value, 0.0, split="val")
                 for name, value in floors(train, val, val, task.metric).items()]
    return rows


def grid_of(tcfg: Config, dataset) -> tuple[int, ...] | None:
    """The grid the model of ``tcfg`` builds for the items of ``dataset`` (None for a conv net)."""
    from models import grid_shape

    return grid_shape(tcfg.model, dataset[0][0].shape)


def eval_batch(cfg: BenchConfig, train_grid, test_grid) -> int | None:
    """The evaluation batch at a test grid: the training batch (None), or with ``eval_batch_by_size`` that batch
    divided by the growth in tokens per item, at least 1."""
    if not cfg.eval_batch_by_size or not train_grid or not test_grid:
        return None
    return max(1, cfg.batch_size * math.prod(train_grid) // math.prod(test_grid))


def cell_grids(cfg: BenchConfig, task: Task, run_dir, data_seed: int | None = None, largest=None):
    """The grids the encoder sees at the training size and at the largest test size (None, None for conv), read
    from the data of ``data_seed`` (the first data seed by default); ``largest``: that test set, if already built."""
    if task.conv:
        return None, None
    from .main import build_data

    seed = cfg.data_seeds[0] if data_seed is None else data_seed
    probe, data = train_config(cfg, task, CellSpec(task.name, "none", 0, seed), run_dir), cell_data(cfg, task, run_dir)
    if largest is None:
        largest = build_data(probe, "test", data=data, **test_options(task, task.test_sizes[-1]))
    return grid_of(probe, build_data(probe, "val", data=data)), grid_of(probe, largest)


def _run_cell(cfg: BenchConfig, task: Task, cell: CellSpec, run_dir) -> tuple[list[Row], float]:
    start = time.perf_counter()
    if cell.kind == FLOOR:
        return floor_rows(cfg, task, cell, run_dir), time.perf_counter() - start
    from . import main  # main.evaluate_model looked up when called (tests watch it)
    from .main import build_data, evaluate_dataset

    data, largest = cell_data(cfg, task, run_dir), task.test_sizes[-1]
    data_cfg = train_config(cfg, task, dataclasses.replace(cell, kind="none"), run_dir)  # the cell's data, no grids
    tests = {largest: build_data(data_cfg, "test", data=data, **test_options(task, largest))}  # each built once
    train_grid, max_grid = cell_grids(cfg, task, run_dir, cell.data_seed, tests[largest])  # the encoder's sizes
    tcfg = train_config(cfg, task, cell, run_dir, train_grid, max_grid)
    model, result = fit_cell(tcfg, data)
    train_time = time.perf_counter() - start + result["resumed_s"]  # a continued cell: with its killed part's
    model.eval()
    val = result["eval"][task.metric]
    if cell.search:  # scored as the bar is judged: the validation split drawn as the test split at the training size
        scored = result["eval"]
        if task.test_data:  # e.g. copy: exact match at exactly L (validation draws lengths 1..L)
            scored = main.evaluate_model(model, tcfg, split="val", data=data, **test_options(task, task.train_size))
        return [cell_row(task, cell, SEARCH, task.train_size, scored[task.metric], train_time, split="val"),
                dataclasses.replace(cell_row(task, cell, SEARCH, task.train_size, scored["loss"], train_time,
                                         split=SEARCH_LOSS), metric="loss", higher_is_better=False)
                ], time.perf_counter() - start
    rows = [cell_row(task, cell, "-", task.train_size, result["train"][task.metric], train_time, split="train"),
            cell_row(task, cell, "-", task.train_size, val, train_time, split="val")]
    variants = ["-"] + (list(cfg.rope_variants) if cell.kind == "rope" else [])
    for size in task.test_sizes:
        test = tests[size] if size in tests else build_data(tcfg, "test", data=data, **test_options(task, size))
        scaled = len(variants) > 1 and float(size) > float(task.train_size)  # scaling changes nothing at the training size
        test_grid = grid_of(tcfg, test) if scaled or cfg.eval_batch_by_size else None
        batch = eval_batch(cfg, train_grid, test_grid)
        for variant in variants:
            tested = model
            if variant != "-":
                if not scaled:
                    continue
                tested = with_encoding(model, scaled_rope(model.encoder.pe, variant, train_grid, test_grid))
            metrics = evaluate_dataset(tested, tcfg, test, batch_size=batch)
            rows.append(cell_row(task, cell, variant, size, metrics[task.metric], train_time))
    return rows, time.perf_counter() - start
