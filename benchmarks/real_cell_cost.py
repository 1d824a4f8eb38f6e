"""What one cell of the real-data preset (configs/bench/real.yaml) costs: measured on this machine's CPU, and the
GPU and Ray cluster estimates the preset states, derived from that measurement and from counted FLOPs.

    python benchmarks/real_cell_cost.py [--steps 12] [--kinds none rope] [--json out.json]

For each real task (image/cifar10, audio/speech_commands, image/mnist-zoom, image/mnist-pair) and kind, the cell's own model and optimizer are built
exactly as the benchmark builds them (``train.evaluate.train_config`` with the preset), then timed on random batches
of the item shape (data loading and augmentation are timed separately, per item, on synthetic items of the same
format, since the datasets are not on this machine): ``--steps`` optimizer steps after 2 warm-up steps, and
forward passes at the evaluation batch size for every test size. FLOPs per training step and per evaluated item
come from ``torch.utils.flop_counter.FlopCounterMode`` (matmuls and attention; element-wise work not counted).

A cell = ``default_steps`` optimizer steps + evaluation of the val split at the training size and of the test
split at every test size (rope: also its 3 scaling variants at the sizes beyond training). Item counts: CIFAR-10
45,000 train / 5,000 val / 10,000 test (the official test batch); Speech Commands v0.02, 12 classes: the split
lists hold 9,981 val and 11,005 test clips, of which the ten commands are ~36.4 % (38,546 of 105,829 clips),
plus 10 % unknown and 10 % silence of that: ~4,360 val and ~4,810 test items (an estimate from the counts).
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # reference models live in a checkout
from models import build_model  # noqa: E402
from train.bench import CellSpec, load_bench_config, train_config  # noqa: E402
from train.main import build_optimizer  # noqa: E402
from train.protocol import TASKS  # noqa: E402

PRESET = Path(__file__).resolve().parents[1] / "configs" / "bench" / "real.yaml"
ITEM = {"image/cifar10": (3, 32, 32), "audio/speech_commands": (1, 64, 101), "image/mnist-zoom": (1, 28, 28),
        "image/mnist-pair": (1, 28, 64)}  # at the training size
EVAL_ITEMS = {"image/cifar10": (5_000, 10_000), "audio/speech_commands": (4_360, 4_810),
              "image/mnist-zoom": (5_000, 5_000), "image/mnist-pair": (5_000, 5_000)}  # (val, test per size)
NUM_CLASSES = {"image/cifar10": 10, "audio/speech_commands": 12, "image/mnist-zoom": 10, "image/mnist-pair": 10}
H100_BF16_DENSE = 989e12  # FLOP/s, NVIDIA's H100 SXM datasheet (dense bf16)
# Assumptions of the GPU estimate (no GPU was measured): the model FLOPs utilisation a 192-wide, 6-block model reaches
# (small matmuls: far below a large model's 40 %), and the per-step floor of ~500 kernel launches (forward, backward,
# AdamW) at ~10 us each; data is made by the cell's one process (data.num_workers=0), at the speed measured here.
GPU_MFU, GPU_STEP_FLOOR_S = 0.10, 0.005
DATA_WORKERS = (0, 8)  # the preset's data_workers: 0 (its default) and 8 (what a GPU user sets)


def item_shape(task: str, size) -> tuple[int, ...]:
    c, h, w = ITEM[task]
    if task in ("image/cifar10", "image/mnist-zoom"):
        return (c, size, size)
    if task == "image/mnist-pair":
        return (c, h, size)
    return (c, h, 1 + int(round(100 * size)))


def grids(task: str, cfg) -> tuple[tuple, tuple]:
    from models import grid_shape

    probe = train_config(cfg, TASKS[task], CellSpec(task, "none", 0, 0), Path("/tmp"))
    largest = TASKS[task].test_sizes[-1]
    return (grid_shape(probe.model, item_shape(task, TASKS[task].train_size)),
            grid_shape(probe.model, item_shape(task, largest)))


def cell_model(task: str, kind: str, cfg):
    train_grid, max_grid = grids(task, cfg)
    tcfg = train_config(cfg, TASKS[task], CellSpec(task, kind, 0, 0), Path("/tmp"), train_grid, max_grid)
    tcfg.model.num_classes = NUM_CLASSES[task]
    return build_model(tcfg.model), tcfg


def flops(fn) -> int:
    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


def time_steps(model, tcfg, x, y, steps: int) -> tuple[float, int]:
    """Seconds per optimizer step (median of ``steps`` after 2 warm-up steps) and FLOPs per step."""
    opt = build_optimizer(model, tcfg)
    model.train()

    def step():
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    for _ in range(2):
        step()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2], flops(step)


@torch.no_grad()
def time_eval(model, x, repeats: int = 3) -> tuple[float, int]:
    """Seconds per evaluated item at ``x``'s shape (batch of ``len(x)``) and FLOPs per item."""
    model.eval()
    model(x)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        model(x)
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2] / len(x), flops(lambda: model(x)) // len(x)


def data_seconds_per_item(task: str, n: int = 64) -> float:
    """CPU seconds to make one training item from its stored form: CIFAR-10 (uint8 HWC -> crop, flip, normalise),
    Speech Commands (16-bit PCM -> background mix -> log-mel). Synthetic stored items of the real formats."""
    import numpy as np

    rng = np.random.default_rng(0)
    if task.startswith("image/mnist"):  # cached as tensors once per cell (train/cache.py): no per-item work
        return 0.0
    if task == "image/cifar10":
        from train.data.cifar import transforms

        tf = transforms(augment=True)
        images = rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8)
        start = time.perf_counter()
        for im in images:
            tf(im)
        return (time.perf_counter() - start) / n
    from train.data.audio_features import LogMel

    mel = LogMel(sample_rate=16000)
    clips = (rng.integers(-3000, 3000, (n, 16000)).astype(np.int16) / 32768.0).astype(np.float32)
    noise = rng.uniform(-0.1, 0.1, 16000).astype(np.float32)
    start = time.perf_counter()
    for clip in clips:
        mel(torch.from_numpy(np.clip(clip + 0.05 * noise, -1, 1)))
    return (time.perf_counter() - start) / n


def passes_at(task: str, kind: str, cfg, size) -> int:
    """Items one cell evaluates at ``size``: the test split (rope: once per scaling variant beyond the training size),
    and the val split at the training size."""
    t, (val_n, test_n) = TASKS[task], EVAL_ITEMS[task]
    variants = 1 + (len(cfg.rope_variants) if kind == "rope" and float(size) > float(t.train_size) else 0)
    return test_n * variants + (val_n if size == t.train_size else 0)


def passes_total(task: str, kind: str, cfg) -> int:
    """Items evaluated by one cell, over every test size."""
    return sum(passes_at(task, kind, cfg, size) for size in TASKS[task].test_sizes)


def estimate(measured: dict) -> dict:
    """Hours per cell and for the whole preset: on the CPU measured, on one H100 (the assumptions above), and on a Ray
    cluster of G GPUs (cells are independent: the preset's GPU hours / G, never less than one cell)."""
    p = measured["preset"]
    out = {}
    for task, per_task in measured["tasks"].items():
        data_s = per_task["data_s_per_item"]
        for kind, m in per_task.items():
            if kind == "data_s_per_item":
                continue
            items = p["steps"] * p["batch_size"] + m["eval_passes"]
            cpu_h = (p["steps"] * m["step_s"] + m["eval_s"] + items * data_s) / 3600
            gpu_step = max(m["step_gflops"] * 1e9 / (H100_BF16_DENSE * GPU_MFU), GPU_STEP_FLOOR_S)
            compute_s = p["steps"] * gpu_step + m["eval_pflops"] * 1e15 / (H100_BF16_DENSE * GPU_MFU)
            # data_workers=0: the cell's process makes each batch, then computes; w workers: both overlap
            gpu_h = {w: (compute_s + items * data_s if w == 0 else max(compute_s, items * data_s / w)) / 3600
                     for w in DATA_WORKERS}
            out[f"{task} {kind}"] = {"cpu_h": round(cpu_h, 1), "gpu_compute_h": round(compute_s / 3600, 2),
                                     **{f"gpu_h_data_workers_{w}": round(h, 2) for w, h in gpu_h.items()}}
    cells, tasks = p["cells_per_task"], list(measured["tasks"])

    def total(key: str) -> float:  # every cell of a task costs what its most expensive measured kind costs
        return sum(max(v[key] for k, v in out.items() if k.startswith(t)) * cells for t in tasks)

    preset = {"cells": cells * len(tasks), "cpu_h": round(total("cpu_h")), "ray_64_cpus_h": round(total("cpu_h") / 64, 1)}
    for w in DATA_WORKERS:
        key = f"gpu_h_data_workers_{w}"
        longest = max(v[key] for v in out.values())
        preset[f"one_h100_{key}"] = round(total(key), 1)
        preset[f"ray_8_h100s_{key}"] = round(max(total(key) / 8, longest), 1)
    out["preset"] = preset
    return out


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=12, help="timed optimizer steps per cell (after 2 warm-up)")
    parser.add_argument("--kinds", nargs="+", default=["none", "rope"])
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--estimate", type=Path, default=None,
                        help="recompute the estimates of a measurement JSON (written back into it), measuring nothing")
    args = parser.parse_args(argv)
    if args.estimate:
        measured = json.loads(args.estimate.read_text())
        measured["estimate"] = estimate(measured)
        print(json.dumps(measured["estimate"], indent=1))
        args.estimate.write_text(json.dumps(measured, indent=1) + "\n")  # the measurement with today's estimate
        return measured
    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = load_bench_config(PRESET, [])
    cells_per_task = len(cfg.seeds) * len(cfg.kinds)
    out = {"machine": f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} torch threads",
           "preset": {"steps": cfg.default_steps, "batch_size": cfg.batch_size, "dim": cfg.dim, "depth": cfg.depth,
                      "heads": cfg.heads, "cells_per_task": cells_per_task}, "tasks": {}}
    for task in ITEM:
        t = TASKS[task]
        per_task = out["tasks"][task] = {"data_s_per_item": data_seconds_per_item(task)}
        for kind in args.kinds:
            torch.manual_seed(0)
            model, tcfg = cell_model(task, kind, cfg)
            x = torch.randn(cfg.batch_size, *item_shape(task, t.train_size))
            y = torch.randint(0, NUM_CLASSES[task], (cfg.batch_size,))
            step_s, step_flops = time_steps(model, tcfg, x, y, args.steps)
            eval_s = eval_flops = 0.0
            for size in t.test_sizes:
                s, f = time_eval(model, torch.randn(cfg.batch_size, *item_shape(task, size)))
                passes = passes_at(task, kind, cfg, size)
                eval_s, eval_flops = eval_s + s * passes, eval_flops + f * passes
            per_task[kind] = {"step_s": round(step_s, 4), "step_gflops": round(step_flops / 1e9, 2),
                              "eval_s": round(eval_s, 1), "eval_passes": passes_total(task, kind, cfg),
                              "eval_pflops": round(eval_flops / 1e15, 4)}
            print(f"{task} {kind}: {step_s * 1e3:.0f} ms/step ({step_flops / 1e9:.1f} GFLOP), eval {eval_s:.0f} s "
                  f"({eval_flops / 1e12:.0f} TFLOP)", flush=True)
    out["estimate"] = estimate(out)
    print(json.dumps(out["estimate"], indent=1))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return out


if __name__ == "__main__":
    main()
