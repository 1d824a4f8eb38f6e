"""Forward + backward time of a timm model with ``ndpe.timm.use`` against the unmodified timm model with the same
encoding, side by side in the same rounds (goal: within 10%).

Pairs (each equal in outputs, ``tests/test_timm_use.py``): EVA02 rope (``eva02_tiny_patch14_224``: ``rope,
pairing="interleaved"``), RoPE-ViT (``vit_small_patch16_rope_224``: ``rope, theta=100, grid_indexing="xy"``) and
a learned table (``vit_tiny_patch16_224``: ``learned``, ndpe's table copied from timm's). Run from the repository
root:

    python benchmarks/bench_timm_use.py --threads 1 --repeats 7 --json timm_use.json
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import timm
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_rope import clock, save_json, time_interleaved  # noqa: E402  (same folder)

import ndpe.timm  # noqa: E402

PAIRS = {  # name: (timm model, its kwargs, ndpe kind, options)
    "eva02 rope": ("eva02_tiny_patch14_224", {}, "rope", {"pairing": "interleaved"}),
    "rope-vit xy": ("vit_small_patch16_rope_224", {}, "rope",
                    {"theta": 100.0, "pairing": "interleaved", "grid_indexing": "xy"}),
    "vit learned": ("vit_tiny_patch16_224", {"class_token": False, "global_pool": "avg"}, "learned",
                    {"grid_shape": (14, 14)}),
}


def get_args_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=7, help="timed rounds (median reported)")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--depth", type=int, default=4)
    p.add_argument("--pairs", nargs="+", default=list(PAIRS), choices=list(PAIRS))
    p.add_argument("--clock", choices=["wall", "cpu"], default=None)
    p.add_argument("--json", default=None)
    return p


def build(name: str, depth: int, swap: bool) -> torch.nn.Module:
    model_name, kwargs, kind, options = PAIRS[name]
    torch.manual_seed(0)
    model = timm.create_model(model_name, pretrained=False, depth=depth, num_classes=10, **kwargs)
    if swap:
        table = model.pos_embed.detach() if kind == "learned" else None
        ndpe.timm.use(model, kind, **options)
        if table is not None:
            with torch.no_grad():
                model.ndpe_pe.table.copy_(table.reshape(model.ndpe_pe.table.shape))
    return model.train()


def main(args) -> dict:
    torch.set_num_threads(args.threads)
    device = torch.device("cpu")
    results = {}
    for name in args.pairs:
        size = 224
        x = torch.randn(args.batch, 3, size, size)
        steps = {}
        for swap in (False, True):
            model = build(name, args.depth, swap)

            def step(model=model):
                model.zero_grad(set_to_none=True)
                model(x).sum().backward()
            steps["ndpe" if swap else "timm"] = step
        times = time_interleaved(steps, args.repeats, device, clock(args.clock), warmup=2)
        results[name] = {**times, "ratio": times["ndpe"] / times["timm"]}
        print(f"{name:12s} timm {times['timm'] * 1e3:8.1f} ms  ndpe {times['ndpe'] * 1e3:8.1f} ms  "
              f"ndpe / timm {results[name]['ratio']:.3f}", flush=True)
    save_json(args, results)
    return results


if __name__ == "__main__":
    main(get_args_parser().parse_args())
