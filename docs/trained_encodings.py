"""The numbers of the guide's Q6 ("what do trained encodings look like"), read from a quick benchmark run.

    bash scripts/bench.sh                     # runs/quick (the committed results keep no checkpoints)
    python docs/trained_encodings.py [RUN]    # RUN defaults to runs/quick

For each of the 3 runs: the trained learned table's neighbour similarity (image/shapes-zoom), how far
RoPE-Mixed's pairs fanned out from their group's shared direction (same task), and the T5 buckets of the causal
relative bias on text/copy (trained on lengths 1-8): the bias per head against the offset, and how far the buckets
of offsets 16 and more moved from zero (their init is N(0, 0.02^2)).
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # train/ of this checkout
import ndpe  # noqa: E402
from ndpe.scaling import axial_inv_freq  # noqa: E402
from train.checkpoint import load_checkpoint  # noqa: E402


def cells(run: Path, task: str, kind: str) -> list[Path]:
    return sorted(run.glob(f"cells/{task}_{kind}_*_d*/checkpoint.pt"))


def learned(run: Path) -> None:
    for path in cells(run, "image_shapes-zoom", "learned"):
        table = load_checkpoint(path)["model"]["encoder.pe.table"].float()  # (8, 8, C)
        cos = torch.nn.functional.cosine_similarity
        near = torch.cat([cos(table[1:], table[:-1], dim=-1).flatten(), cos(table[:, 1:], table[:, :-1], dim=-1).flatten()])
        print(f"learned {path.parent.name}: mean cosine of neighbouring rows {near.mean():.3f}")


def rope_mixed(run: Path) -> None:
    for path in cells(run, "image_shapes-zoom", "rope-mixed"):
        freqs = load_checkpoint(path)["model"]["encoder.pe.freqs"].double()  # (heads, 2, pairs)
        pairs = freqs.shape[-1] // 2
        spreads, ratios = [], []
        for group in (slice(0, pairs), slice(pairs, None)):
            f = freqs[..., group]  # (heads, 2, pairs): every pair of a group pointed one way at init
            angle = torch.atan2(f[:, 1], f[:, 0])  # (heads, pairs)
            diff = (angle[:, :, None] - angle[:, None, :] + math.pi) % (2 * math.pi) - math.pi
            spreads.append(diff.abs().amax(dim=(1, 2)))  # per head: the widest angle between two pairs
            ratios.append(f.norm(dim=1)[:, pairs // 2] / float(axial_inv_freq(2 * pairs, 10.0)[pairs // 2]))
        spread, ratio = torch.rad2deg(torch.cat(spreads)), torch.cat(ratios)
        print(f"rope-mixed {path.parent.name}: pairs of a group fan out by {spread.mean():.1f} degrees on average "
              f"(max {spread.max():.1f}); middle pair's length / initial {ratio.min():.2f}-{ratio.max():.2f}")


def relative(run: Path) -> None:
    for path in cells(run, "text_copy", "relative"):
        table = load_checkpoint(path)["model"]["encoder.pe.table"]  # (buckets, heads)
        pe = ndpe.make(dims=1, kind="relative", dim=48, heads=table.shape[1], mode="t5", bidirectional=False)
        pe.table.data.copy_(table)
        with torch.no_grad():
            bias = pe((64,)).bias.float()[:, -1].flip(-1)  # (heads, offset): the last query to keys 0..63 back
        top = bias[:, 5:9].amax(dim=1)
        head = int(top.argmax())
        far = bias[:, 16:].abs().max()
        print(f"relative {path.parent.name}: head {head} rises to {top[head]:.2f} over offsets 5-8, "
              f"{bias[head, 9:16].mean():.2f} on average over 9-15; offsets >= 16 within +-{far:.3f}")


if __name__ == "__main__":
    run = Path(sys.argv[1] if len(sys.argv) > 1 else "runs/quick")
    learned(run)
    rope_mixed(run)
    relative(run)
