"""Probe: Liu et al. 2018 supervised coordinate regression (one-hot pixel -> (row, col)) on one thread.

Trains the paper's two networks (``models/conv.py``: ``coordconv_regressor`` with AddCoords, and the
plain-conv baselines ``conv_uniform`` / ``conv_quadrant``) on both splits of ``onehot_pixel``
(``train/data/coord.py``) through the training code (``python -m train.main``), and prints, per
(net, split, seed), the test ``coord_err`` (mean Euclidean distance in [-1, 1] units; one pixel is
2/63 = 0.032) and the wall seconds of the run, plus the error of the mean predictor (the training
set's mean target) on each test split.

Run (from the repository root; one thread per run, runs one after another)::

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/probe_coord.py --seeds 0 1 2
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/probe_coord.py --steps 500 --batch 16 --only coordconv

Each run is ``python -m train.main --config configs/coord.yaml data.name=onehot_pixel ...`` with the
overrides printed by ``--dry``.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

NETS = {  # name -> (model overrides, lr); lrs: CoordConv 3e-3 (paper 1e-2), conv 1e-3 (the paper's sweep)
    "coordconv": (["model.arch=coordconv_regressor", "model.add_coords=true"], 3e-3),
    "conv": (["model.add_coords=false"], 1e-3),  # arch per split, as in the paper's train.py
}


def mean_predictor_error(split_mode: str, seed: int) -> float:
    from train.data.coord import OneHotPixel

    def targets(split):
        data = OneHotPixel(split, seed=seed, split_mode=split_mode)
        return torch.tensor(data.positions, dtype=torch.float32) * (2.0 / (data.image_size - 1)) - 1.0

    mean = targets("train").mean(0)
    return float((targets("test") - mean).norm(dim=1).mean())


def overrides(net: str, split_mode: str, seed: int, steps: int, batch: int, out_dir: str) -> list[str]:
    model, lr = NETS[net]
    if net == "conv":
        model = model + [f"model.arch=conv_{split_mode}"]
    return ["data.name=onehot_pixel", f"data.options.split_mode={split_mode}", "data.eval_split=test",
            "model.channels=null", *model, f"train.steps={steps}", f"train.batch_size={batch}",
            f"optim.lr={lr}", "optim.warmup_steps=0", "optim.min_lr=0", "train.eval_every=100000",
            "train.log_every=100000", f"train.seed={seed}", f"train.out_dir={out_dir}"]


def run(args: list[str]) -> tuple[float, float]:
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    start = time.time()
    proc = subprocess.run([sys.executable, "-m", "train.main", "--config", "configs/coord.yaml", *args],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    seconds = time.time() - start
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-2000:])
    err = None
    for line in proc.stdout.splitlines():
        if line.startswith("{") and "eval_coord_err" in line:
            err = json.loads(line)["eval_coord_err"]
    return err, seconds


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--steps", type=int, default=500)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--splits", nargs="+", default=["uniform", "quadrant"])
    p.add_argument("--only", choices=sorted(NETS), default=None)
    p.add_argument("--dry", action="store_true", help="print the commands only")
    a = p.parse_args()
    for split in a.splits:
        print(f"mean predictor, {split}: test coord_err {mean_predictor_error(split, a.seeds[0]):.4f}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for net in [a.only] if a.only else list(NETS):
            for split in a.splits:
                for seed in a.seeds:
                    args = overrides(net, split, seed, a.steps, a.batch, f"{tmp}/{net}_{split}_{seed}")
                    if a.dry:
                        print("python -m train.main --config configs/coord.yaml " + " ".join(args))
                        continue
                    err, seconds = run(args)
                    print(f"{net:9s} {split:8s} seed {seed}: coord_err {err:.4f}  ({seconds:.1f} s)", flush=True)


if __name__ == "__main__":
    main()
