"""Same-run speed check of the rotary kernel move (issue 15): today's dispatch against a saved copy of the
previous ``ndpe/functional.py`` (``--old``, e.g. ``git show <rev>:ndpe/functional.py > old.py``).

    python benchmarks/bench_rope_refactor.py --old old_functional.py --threads 1 --repeats 15

Both apply RoPE to q and k split from one fused qkv buffer, forward only, interleaved rounds in one
process; prints the median milliseconds per call and the ratio new / old per shape and pairing.
"""
from __future__ import annotations

import argparse
import importlib.util
import random
import statistics
import time

import torch
from einops import rearrange

import ndpe
from ndpe import functional as new

SHAPES = {"vit-s 14x14": (14, 14), "32x32": (32, 32), "video 8x14x14": (8, 14, 14), "1D 4096": (4096,)}


def load_old(path: str):
    spec = importlib.util.spec_from_file_location("ndpe.functional_old", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--old", required=True)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=15)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    old = load_old(a.old)
    batch, heads, head_dim = 8, 6, 64
    for name, grid in SHAPES.items():
        n = int(torch.Size(grid).numel())
        for pairing in ("half", "interleaved"):
            pe = ndpe.make(dims=len(grid), kind="rope", dim=heads * head_dim, heads=heads, pairing=pairing)
            cos, sin = pe(grid).rot
            qkv = torch.randn(batch, n, 3, heads, head_dim)
            q, k = rearrange(qkv[:, :, :2], "b n two h d -> two b h n d").unbind(0)
            fns = {"new": new.apply_rotary_many, "old": old.apply_rotary_many}
            for fn in fns.values():  # warm up, and check both agree
                out = fn((q, k), cos, sin, pairing)
            torch.testing.assert_close(fns["new"]((q, k), cos, sin, pairing), fns["old"]((q, k), cos, sin, pairing),
                                       rtol=0, atol=0)
            times = {k: [] for k in fns}
            for _ in range(a.repeats):
                for key in random.sample(list(fns), len(fns)):
                    start = time.process_time()
                    fns[key]((q, k), cos, sin, pairing)
                    times[key].append(time.process_time() - start)
            med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
            print(f"{name:14s} {pairing:11s} new {med['new']:7.2f} ms  old {med['old']:7.2f} ms  "
                  f"new/old {med['new'] / med['old']:.2f}", flush=True)
            del out


if __name__ == "__main__":
    main()
