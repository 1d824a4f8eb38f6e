"""The GPU benchmark record's step of the one-call GPU check (``benchmarks/gpu_check.py``, step ``record``): the cells
of ``configs/bench/gpu.yaml`` with the device time a loan leaves.

``train.bench`` runs in a process group of its own with as many workers as the machine has cores (the cells are small
and launch-bound, so they share the GPU), resuming from ``benchmarks/results/gpu-v3/results.csv`` as the checkout
carries it; before the check's deadline it gets SIGTERM (the cells it finished stay in results.csv; the invocation's
end line says ``interrupted``). Its run directory, without the cell logs and data cache, is then copied to
``$OUT/gpu-v3``: commit it under ``benchmarks/results/gpu-v3`` and the next loan continues. The record needs the CPU
records' learning-rate choices (``lr_file``: every file); without them it says so and runs nothing. The step's result
(and summary.md) gives the loan's pace: cells and training steps a minute, and the loans like this one that the
preset's remaining steps need.
``--smoke``: one tiny task on the CPU with a choice file of its own (the dry run in tests/test_gpu_check.py).
"""
from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
NAME = "gpu-v3"
MARGIN_S = 30.0  # the run's share of the time left goes to its SIGTERM, the copy and the summary


def step_record(args, out: Path, plan: dict) -> dict:
    left = args.deadline - time.perf_counter() - MARGIN_S
    if left < 60:
        return {"skipped": f"{max(left, 0):.0f} s left: under a minute"}
    overrides = [f"workers={os.cpu_count() or 1}", f"device={args.device}"]
    with tempfile.TemporaryDirectory() as tmp:
        return run_record(args, out, overrides, Path(tmp), left)


def run_record(args, out: Path, overrides: list[str], tmp: Path, left: float) -> dict:
    if args.smoke:
        choices = tmp / "lr_choices.yaml"
        kinds = ("none", "learned", "sinusoidal", "rope", "alibi", "relative")
        choices.write_text(yaml.safe_dump({"text/copy": {k: {"lr": 0.002, "weight_decay": 0.05} for k in kinds}}))
        overrides += ["tasks=[text/copy]", "seeds=[0,1]", "data_seeds=[0,1]", "workers=1", "steps={}",
                      "default_steps=2", "items={}", "train_items=64", "test_items=8", "batch_size=8", "dim=16",
                      "heads=2", "depth=1", "rope_variants=[]", "curve_points=2", f"lr_file={choices}",
                      f"out_root={tmp}"]
        run_dir = tmp / NAME
    else:
        overrides.append("out_root=benchmarks/results")
        run_dir = ROOT / "benchmarks" / "results" / NAME
        from train.bench_config import load_bench_config
        from train.cells import lr_files

        files = lr_files(load_bench_config(ROOT / "configs" / "bench" / "gpu.yaml", []))
        missing = [os.path.relpath(f, ROOT) for f in files if not f.exists()]
        if missing:
            return {"skipped": f"{' and '.join(missing)} does not exist yet: the CPU record's search of a task comes "
                               "first"}
    config = ROOT / "configs" / "bench" / "gpu.yaml"
    before = (*left_to_train(config, overrides, run_dir), invocation_lines(run_dir))
    cmd = [sys.executable, "-m", "train.bench", "--config", str(config), *overrides]
    proc = subprocess.Popen(cmd, cwd=ROOT, start_new_session=True)
    try:
        code = proc.wait(timeout=left)
        stopped = False
    except subprocess.TimeoutExpired:  # the loan's time is up: stop as Ctrl-C would, then hard
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            code = proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            code = proc.wait()
        stopped = True
    kept = out / NAME
    if run_dir.exists():
        shutil.rmtree(kept, ignore_errors=True)
        shutil.copytree(run_dir, kept, ignore=shutil.ignore_patterns("cells", "data"))
    rows = max(sum(1 for _ in open(kept / "results.csv")) - 1, 0) if (kept / "results.csv").exists() else 0
    return {"exit": code, "stopped_for_time": stopped, "rows": rows, "copied_to": str(kept),
            **pace(run_dir, before, left_to_train(config, overrides, run_dir))}


def left_to_train(config: Path, overrides: list[str], run_dir: Path) -> tuple[int, int]:
    """(cells, training steps) of the preset that results.csv lacks: what the next loans must still run."""
    from train.bench_config import load_bench_config
    from train.invocation import plan

    cfg = load_bench_config(config, overrides)
    todo = plan(cfg, run_dir / "results.csv")
    cells = [c for c in (*todo.first, *todo.later) if c.kind != "floor"]
    return len(cells), sum(cfg.steps_for(c.task) for c in cells)


def invocation_lines(run_dir: Path) -> list[str]:
    path = run_dir / "invocations.jsonl"
    return path.read_text().splitlines() if path.exists() else []


def pace(run_dir: Path, before: tuple[int, int, list[str]], after: tuple[int, int]) -> dict:
    """The loan's pace, the GPU record's measure of a device: cells and training steps a minute, and the loans like
    this one the preset still needs, counted in steps (its tasks' cells differ 8x in steps); from this invocation's
    end line in invocations.jsonl (``before``: cells, steps left and the file's lines before it started)."""
    lines = invocation_lines(run_dir)
    if len(lines) == len(before[2]):
        return {"pace": "no invocation ran (it refused to start: see the log)"}
    last = json.loads(lines[-1])
    if last["status"] == "started":  # its start line is the last: it ended without writing its end
        return {"pace": "no end line: the invocation was killed before it wrote one"}
    minutes, steps = last["wall_s"] / 60, before[1] - after[1]
    return {"cells_trained": last["cells_trained"], "minutes": round(minutes, 2), "executor": last.get("executor"),
            "cells_per_minute": round(last["cells_trained"] / minutes, 2) if minutes else None,
            "steps_per_minute": round(steps / minutes) if minutes else None, "cells_left": after[0],
            "steps_left": after[1], "loans_left": math.ceil(after[1] / steps) if steps else None}
