"""Probe: Liu et al. 2018 supervised coordinate regression (one-hot pixel -> (row, col)) on one thread.

Trains the paper's two networks (``models/conv.py``: ``coordconv_regressor`` with AddCoords, and the
plain-conv baselines ``conv_uniform`` / ``conv_quadrant``) on both splits of ``onehot_pixel``
(``train/data/coord.py``) through the training code (``python -m train.main``: AdamW via timm, linear
warmup + cosine, grad clip 1.0), and prints, per (net, split, seed), the test ``coord_err`` (mean
Euclidean distance in [-1, 1] units; one pixel is 2/63 = 0.032), the training seconds (the
optimizer steps, from the run's log) and the wall seconds of the whole run (with start-up and
evaluation), plus the error of the mean predictor (the training set's mean target) on each test split.

The defaults are the benchmark's quick-preset settings for the coord tasks: 150 steps, batch 32,
AdamW lr 2e-3, weight decay 0.05, 20 warmup steps, the paper code's 56 x 56 positions
(``margin=4``) and CoordConv's value-path init (``value_gain`` 10, see ``models/conv.py``).
``--paper-init`` trains CoordConv with the paper's plain He-normal init instead (``value_gain=0``),
``--margin 0`` on all 64 x 64 positions.

Run (from the repository root; one thread per run, runs one after another)::

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/probe_coord.py --seeds 0 1 2          # the table
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/probe_coord.py --only coordconv --paper-init
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/probe_coord.py --only coordconv --margin 0

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

NETS = {  # name -> model overrides (the conv baseline's arch is chosen per split, as in the paper's train.py)
    "coordconv": ["model.arch=coordconv_regressor", "model.add_coords=true"],
    "conv": ["model.add_coords=false"],
}
# ModelConfig has no value_gain key: the paper-init ablation sets the module default in the child process.
PAPER_INIT = "import sys, models.conv as c; c.VALUE_GAIN = 0.0; from train.main import cli; cli(sys.argv[1:])"


def mean_predictor_error(split_mode: str, seed: int, margin: int) -> float:
    from train.data.coord import OneHotPixel

    def targets(split):
        data = OneHotPixel(split, seed=seed, split_mode=split_mode, margin=margin)
        return torch.tensor(data.positions, dtype=torch.float32) * (2.0 / (data.image_size - 1)) - 1.0

    mean = targets("train").mean(0)
    return float((targets("test") - mean).norm(dim=1).mean())


def overrides(net: str, split_mode: str, seed: int, a: argparse.Namespace, out_dir: str) -> list[str]:
    model = NETS[net] + ([f"model.arch=conv_{split_mode}"] if net == "conv" else [])
    steps = a.conv_steps if net == "conv" and a.conv_steps else a.steps
    return ["data.name=onehot_pixel", f"data.options.split_mode={split_mode}", f"data.options.margin={a.margin}",
            "data.eval_split=test", "model.channels=null", *model, f"train.steps={steps}",
            f"train.batch_size={a.batch}", f"optim.lr={a.lr}", f"optim.warmup_steps={a.warmup}",
            f"optim.weight_decay={a.weight_decay}", "optim.min_lr=0", "optim.clip_grad=1.0",
            "train.eval_every=100000", "train.log_every=100000", f"train.seed={seed}", f"train.out_dir={out_dir}"]


def run(args: list[str], paper_init: bool) -> tuple[float, float, float]:
    """(test coord_err, training seconds, wall seconds) of one ``train.main`` run."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    entry = ["-c", PAPER_INIT] if paper_init else ["-m", "train.main"]
    start = time.time()
    proc = subprocess.run([sys.executable, *entry, "--config", "configs/coord.yaml", *args],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    seconds = time.time() - start
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-2000:])
    err, train_seconds = None, 0.0
    for line in proc.stdout.splitlines():
        if line.startswith("{") and '"phase": "epoch"' in line:
            record = json.loads(line)
            train_seconds += record.get("train_time", 0.0)
            err = record.get("eval_coord_err", err)
    return err, train_seconds, seconds


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--conv-steps", type=int, default=None, help="steps of the plain conv (default: --steps)")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--weight-decay", type=float, default=0.05)
    p.add_argument("--margin", type=int, default=4, help="4: the paper code's 56 x 56 positions; 0: all 64 x 64")
    p.add_argument("--splits", nargs="+", default=["uniform", "quadrant"])
    p.add_argument("--only", choices=sorted(NETS), default=None)
    p.add_argument("--paper-init", action="store_true", help="CoordConv with the paper's He-normal init (value_gain=0)")
    p.add_argument("--dry", action="store_true", help="print the commands only")
    a = p.parse_args()
    for split in a.splits:
        print(f"mean predictor, {split}: test coord_err {mean_predictor_error(split, a.seeds[0], a.margin):.4f}",
              flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for net in [a.only] if a.only else list(NETS):
            paper_init = a.paper_init and net == "coordconv"
            for split in a.splits:
                for seed in a.seeds:
                    args = overrides(net, split, seed, a, f"{tmp}/{net}_{split}_{seed}")
                    if a.dry:
                        entry = f"-c {PAPER_INIT!r}" if paper_init else "-m train.main"
                        print(f"python {entry} --config configs/coord.yaml " + " ".join(args))
                        continue
                    err, train_s, wall_s = run(args, paper_init)
                    name = net + (" (paper init)" if paper_init else "")
                    print(f"{name:9s} {split:8s} seed {seed}: coord_err {err:.4f}  (train {train_s:.1f} s, "
                          f"wall {wall_s:.1f} s)", flush=True)


if __name__ == "__main__":
    main()
