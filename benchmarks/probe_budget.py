"""Which training budget makes a benchmark task learnable? In-distribution probes only.

Trains one benchmark cell per (kind, steps, lr) through the benchmark's own cell configuration
(``train.evaluate.train_config``: the same data, model and optimizer as a preset's cells) and prints
the training metric (last epoch) and the validation metric **at the training size** with the wall
time; where the bar is judged on another draw (copy, reverse: exact match at exactly L, while validation
draws lengths 1..L), also ``val_as_bar``: the validation split drawn as the bar's test split. It never evaluates beyond the training size: budgets are chosen before any test size is seen.

    python benchmarks/probe_budget.py text/copy --kinds none rope --steps 400 1000 --lr 3e-3
    python benchmarks/probe_budget.py text/stdlib_lm --kinds rope --steps 2000 --set dim=64 depth=3

``--set key=value`` overrides the preset's keys (``dim``, ``depth``, ``batch_size``, ...; the quick preset unless
``--config`` names another); ``--set curve_points=10`` adds the cell's validation curve (``curve``: [step, metric] at
each of 10 evaluations), for the plateau rule (train/curves.py). The data seed is the preset's first unless ``--set
data_seeds=[...]`` names an unreported one. ``--task-set
key=value`` probes a variant of the task before the protocol is changed to it: ``train_size``, ``test_sizes`` or one
option of its ``data`` / ``model_opts`` (``model_opts.patch_size=7``), values read as YAML.

    python benchmarks/probe_budget.py image/mnist-pair --kinds rope --steps 2400 --task-set train_size=70 \
        test_sizes=[70,105,140] model_opts.patch_size=7
Run with ``OMP_NUM_THREADS=1`` to time a cell as a benchmark worker runs it (one thread each).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import yaml  # noqa: E402

from train.bench import (CONFIG_DIR, TASKS, CellSpec, Task, cell_grids, load_bench_config, test_options,  # noqa: E402
                         train_config)
from train.bench_data import cell_data  # noqa: E402
from train.curves import cell_curve  # noqa: E402
from train.evaluate import cell_dir  # noqa: E402
from train.main import evaluate_model, fit  # noqa: E402


def task_variant(task: Task, settings: list[str]) -> Task:
    """``task`` with ``key=value`` settings: ``train_size``, ``test_sizes``, ``data.<option>``, ``model_opts.<option>``."""
    for item in settings:
        key, eq, text = item.partition("=")
        if not eq:
            raise SystemExit(f"--task-set takes key=value, got {item!r}")
        value = yaml.safe_load(text)
        field, _, option = key.partition(".")
        if field in ("data", "model_opts") and option:
            task = dataclasses.replace(task, **{field: {**getattr(task, field), option: value}})
        elif key == "train_size" and isinstance(value, (int, float)):
            task = dataclasses.replace(task, train_size=value)
        elif key == "test_sizes" and isinstance(value, list) and value:
            task = dataclasses.replace(task, test_sizes=tuple(value))
        else:
            raise SystemExit(f"--task-set {item!r}: expected train_size=<number>, test_sizes=[...], "
                             "data.<option>=<value> or model_opts.<option>=<value>")
    return task


def probe(task_name: str, kind: str, steps: int, lr: float, overrides: list[str], seed: int, out: Path,
          task_settings: list[str] = (), config: Path = CONFIG_DIR / "quick.yaml") -> dict:
    cfg = load_bench_config(config, [*overrides, f"steps={{{task_name}: {steps}}}", f"lrs={{{task_name}: {lr}}}"])
    task = task_variant(TASKS[task_name], list(task_settings))
    grids = cell_grids(cfg, task, out)
    cell = CellSpec(task_name, kind, seed, cfg.data_seeds[0], lr, cfg.weight_decay)
    tcfg = train_config(cfg, task, cell, out, *grids)
    start = time.perf_counter()
    data = cell_data(cfg, task, out)  # the cells' cached data
    model, result = fit(tcfg, data)
    curve = [[int(step), round(value, 4)] for step, _, value, _ in cell_curve(cell_dir(out, cell) / "log.jsonl",
                                                                               task.metric)]
    out = {"task": task_name, "kind": kind, "steps": steps, "lr": lr, "seed": seed, "data_seed": cell.data_seed,
           "train": {k: round(v, 4) for k, v in result["train"].items() if k != "time"},
           "val": {k: round(v, 4) for k, v in result["eval"].items()}, **({"curve": curve} if curve else {})}
    if task.test_data:  # the bar's own split: validation drawn as the test split at the training size (copy: exactly L)
        bar = evaluate_model(model.eval(), tcfg, split="val", data=data, **test_options(task, task.train_size))
        out["val_as_bar"] = {task.metric: round(bar[task.metric], 4)}
    return {**out, "seconds": round(time.perf_counter() - start, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("task", choices=sorted(TASKS))
    parser.add_argument("--kinds", nargs="+", default=["none", "rope"])
    parser.add_argument("--steps", nargs="+", type=int, default=[300])
    parser.add_argument("--lr", nargs="+", type=float, default=[2e-3])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--config", type=Path, default=CONFIG_DIR / "quick.yaml", help="the preset (default: quick)")
    parser.add_argument("--set", nargs="*", default=[], help="the preset's overrides, key=value")
    parser.add_argument("--task-set", nargs="*", default=[], help="a variant of the task, key=value")
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        for kind in args.kinds:
            for steps in args.steps:
                for lr in args.lr:
                    for seed in args.seeds:
                        print(json.dumps(probe(args.task, kind, steps, lr, args.set, seed, Path(tmp),
                                               args.task_set, args.config)), flush=True)


if __name__ == "__main__":
    main()
