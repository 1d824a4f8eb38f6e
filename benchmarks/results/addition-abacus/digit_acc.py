"""Per-digit accuracy (the share of result digits right) of the trained cells of this folder at each test length:
the benchmark records exact match only, which is 0 wherever one digit of 9-17 is wrong.

    python benchmarks/results/addition-abacus/digit_acc.py benchmarks/results/addition-abacus[/long]
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch

from train.data.text import AdditionTask
from train.main import load_trained


@torch.no_grad()
def digit_accuracy(model, length: int, place: bool, items: int = 512) -> tuple[float, float]:
    """(digit accuracy, exact match) of teacher-forced decoding on ``items`` test sums of ``length`` digits."""
    data = AdditionTask("test", seed=0, length=length, causal=True, place=place, size=items)
    x = torch.stack([data[i][0] for i in range(items)])
    y = torch.stack([data[i][1] for i in range(items)])
    right = (model(x).argmax(-1) == y) | (y < 0)
    scored = (y >= 0).sum()
    return float((right & (y >= 0)).sum() / scored), float(right.all(-1).float().mean())


def main(run_dir: str) -> None:
    print("| cell | " + " | ".join(f"digits {n}: digit acc / exact" for n in (8, 12, 16)) + " |")
    print("|---|---|---|---|")
    for cell in sorted(Path(run_dir, "cells").glob("*_d0")):
        if not (cell / "checkpoint.pt").exists():
            continue
        model, cfg = load_trained(cell / "checkpoint.pt")
        model.eval()
        place = bool(cfg.data.options.get("place", False))
        accs = [digit_accuracy(model, n, place) for n in (8, 12, 16)]
        print(f"| {cell.name} | " + " | ".join(f"{a:.3f} / {e:.3f}" for a, e in accs) + " |")


if __name__ == "__main__":
    main(sys.argv[1])
