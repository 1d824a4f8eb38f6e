"""Is the "spoken" dataset (train/data/spoken.py) learnable in a small CPU budget, and does it need both axes?

Measures, on 2048 train / 512 val items (1 s clips; val uses the train voices) and 512 test items
(held-out voices):

1. clips/second of item generation on this process's threads (first pass: synthesis + resampling
   + noise + log-mel; second pass: with the per-process word cache warm);
2. position-free summary baselines, logistic regression (scikit-learn) on (a) the mean over time of
   the log-mel (a frequency profile, 64 numbers), (b) the mean over frequency (a time profile, 101
   numbers), (c) the full flattened log-mel (6464 numbers): val and test accuracy;
3. the reference audio transformer (dim 48, depth 2, heads 4, mean pooling, batch 32, lr 2e-3,
   300 steps) per PE kind (none, sinusoidal, rope, learned) and patch size (8x8, 16x16): val and
   test accuracy and wall seconds per run (after the word cache is warm).

    OMP_NUM_THREADS=1 python benchmarks/probe_spoken.py                  # everything, one thread
    OMP_NUM_THREADS=1 python benchmarks/probe_spoken.py --kinds rope --patches 8 --steps 300 --no-baselines

One run from the command line (same numbers, the word cache then starts cold)::

    OMP_NUM_THREADS=1 python -m train.main --config configs/spoken_words.yaml \
        data.name=benchmarks.probe_spoken:sized data.allow_import=true model.dim=48 model.depth=2 model.heads=4 model.pool=mean \
        model.patch_size=[8,8] model.pe.kind=learned model.pe.options.grid_shape=[13,8] \
        train.steps=300 train.batch_size=32 optim.lr=2e-3 optim.warmup_steps=30 train.amp=false \
        train.device=cpu train.out_dir=runs/probe_spoken
"""
from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from train.data.spoken import SpokenWords  # noqa: E402

SIZES = {"train": 2048, "val": 512, "test": 512}


def sized(split: str, *, seed: int = 0, root=None, **opts) -> SpokenWords:
    """``data.name=benchmarks.probe_spoken:sized``: SpokenWords with the probe's sizes per split."""
    opts.pop("size", None)
    return SpokenWords(split, seed=seed, size=SIZES[split], **opts)


def features(split: str) -> tuple[np.ndarray, np.ndarray, float]:
    """``(items, 64, frames)`` log-mels, labels and the seconds it took."""
    data = sized(split)
    t0 = time.perf_counter()
    items = [data[i] for i in range(len(data))]
    return np.stack([m[0].numpy() for m, _ in items]), np.array([y for _, y in items]), time.perf_counter() - t0


def baselines(mels: dict, labels: dict) -> dict[str, tuple[float, float]]:
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    views = {"freq profile (mean over time)": lambda m: m.mean(2), "time profile (mean over freq)": lambda m: m.mean(1),
             "full log-mel (flattened)": lambda m: m.reshape(len(m), -1)}
    out = {}
    for name, view in views.items():
        scaler = StandardScaler().fit(view(mels["train"]))
        clf = LogisticRegression(max_iter=300, C=0.1).fit(scaler.transform(view(mels["train"])), labels["train"])
        out[name] = tuple(float(clf.score(scaler.transform(view(mels[s])), labels[s])) for s in ("val", "test"))
    return out


def train_run(kind: str, patch: int, steps: int) -> tuple[float, float, float]:
    from train.config import load_config
    from train.main import evaluate_model, fit

    grid = [math.ceil(101 / patch), 64 // patch]
    overrides = ["data.name=benchmarks.probe_spoken:sized", "data.allow_import=true", "model.dim=48", "model.depth=2", "model.heads=4",
                 "model.pool=mean", f"model.patch_size=[{patch},{patch}]", f"model.pe.kind={kind}",
                 f"train.steps={steps}", "train.batch_size=32", "optim.lr=2e-3", f"optim.warmup_steps={steps // 10}",
                 "train.amp=false", "train.device=cpu", "train.log_every=100000",
                 f"train.out_dir={tempfile.mkdtemp(prefix='probe_spoken_')}"]
    if kind == "learned":
        overrides.append(f"model.pe.options.grid_shape={grid}")
    cfg = load_config("configs/spoken_words.yaml", overrides)
    t0 = time.perf_counter()
    model, metrics = fit(cfg)
    seconds = time.perf_counter() - t0
    test = evaluate_model(model, cfg, split="test")
    return metrics["eval"]["acc"], test["acc"], seconds


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kinds", nargs="+", default=["none", "sinusoidal", "rope", "learned"])
    p.add_argument("--patches", nargs="+", type=int, default=[8, 16])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--no-baselines", action="store_true")
    args = p.parse_args(argv)
    torch.set_num_threads(int(__import__("os").environ.get("OMP_NUM_THREADS", "1")))

    mels, labels = {}, {}
    for split in ("train", "val", "test"):
        mels[split], labels[split], sec = features(split)
        print(f"{split}: {len(labels[split])} clips in {sec:.1f} s = {len(labels[split]) / sec:.0f} clips/s (cold cache)", flush=True)
    _, _, sec = features("train")
    print(f"train again: {SIZES['train'] / sec:.0f} clips/s (warm word cache)", flush=True)
    if not args.no_baselines:
        for name, (val, test) in baselines(mels, labels).items():
            print(f"logreg {name:32s} val {val:.3f}  test {test:.3f}", flush=True)
    print(f"\n{'kind':12s} {'patch':6s} {'val acc':>8s} {'test acc':>9s} {'seconds':>8s}")
    for patch in args.patches:
        for kind in args.kinds:
            val, test, seconds = train_run(kind, patch, args.steps)
            print(f"{kind:12s} {patch}x{patch:<4d} {val:8.3f} {test:9.3f} {seconds:8.1f}", flush=True)


if __name__ == "__main__":
    main()
