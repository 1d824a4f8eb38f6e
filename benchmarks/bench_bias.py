"""Cost of attention-bias kinds on this machine: bias memory, bias build time, SDPA with the mask, flex.

Per token count N (a square 2D grid: 196 = 14 x 14, 1024 = 32 x 32, 4096 = 64 x 64) it prints
    bias MB       heads * N * N * 4 bytes of the float32 bias
    build ms      the first call on a grid: alibi the bias, relative index build + table gather
    fwd ms        every later call: alibi a cache hit, relative the table gather (the index is cached)
    sdpa ms       F.scaled_dot_product_attention with no mask, then with the bias as attn_mask:
                  ``ndpe.attn_bias`` hands it over as (1, heads, N, N), which SDPA's fused CPU kernel
                  takes; "3-D" is the raw (heads, N, N) PosOut.bias, which sends SDPA to its math path
    flex ms       the same attention through torch.compile(flex_attention) with a score_mod
                  (no N x N tensor), after one compile per shape (compile time printed apart)

    python benchmarks/bench_bias.py                  # all threads, N = 196 1024 4096
    python benchmarks/bench_bias.py --threads 1 --sizes 196 1024 --no-flex
    python benchmarks/bench_bias.py --kinds alibi relative fire cpb --sizes 196 1024 --no-sdpa   # bias kinds' paths

Old against new code: run it back to back with ``PYTHONPATH=<other checkout>`` (ndpe comes from PYTHONPATH first).
"""
from __future__ import annotations

import argparse
import math
import time

import torch
import torch.nn.functional as F

import ndpe
from ndpe import flex


def timed(fn, repeats: int) -> float:
    """Median wall time of ``fn()`` in ms, after one warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2] * 1e3


def bench(kind: str, n: int, args) -> dict:
    side = math.isqrt(n)
    grid = (side, side) if side * side == n else None
    if grid is None:
        raise SystemExit(f"--sizes must be square numbers (a 2D grid), got {n}")
    opts = {"max_distance": side - 1} if kind == "relative" else {}
    torch.manual_seed(0)
    pe = ndpe.make(dims=2, kind=kind, dim=args.heads * args.head_dim, heads=args.heads, **opts).eval()
    q, k, v = (torch.randn(args.batch, args.heads, n, args.head_dim) for _ in range(3))
    row = {"kind": kind, "N": n, "bias MB": args.heads * n * n * 4 / 2**20}

    def build():
        pe.clear_cache()
        return pe(grid).bias

    with torch.no_grad():
        row["build ms"] = timed(build, args.repeats)
        row["fwd ms"] = timed(lambda: pe(grid), args.repeats)
        mask, mask3 = ndpe.attn_bias(pe(grid)), pe(grid).bias
        if args.flex:
            row["eager flex ms"] = timed(lambda: flex.attention(q, k, v, pe, grid, compiled=False), args.repeats)
        if args.sdpa:
            row["sdpa ms"] = timed(lambda: F.scaled_dot_product_attention(q, k, v), args.repeats)
            row["sdpa+bias ms"] = timed(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask), args.repeats)
            row["3-D bias ms"] = timed(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask3), args.repeats)
        if args.flex:
            t0 = time.perf_counter()
            try:
                out = flex.attention(q, k, v, pe, grid)
                row["compile s"] = time.perf_counter() - t0
                row["flex ms"] = timed(lambda: flex.attention(q, k, v, pe, grid), args.repeats)
                row["flex err"] = (out - F.scaled_dot_product_attention(q, k, v, attn_mask=mask)).abs().max().item()
            except Exception as err:  # report, keep going
                row["flex ms"] = f"unavailable: {type(err).__name__}"
    return row


def main(args) -> None:
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, batch {args.batch}, heads {args.heads}, "
          f"head_dim {args.head_dim}, median of {args.repeats}")
    cols = (["kind", "N", "bias MB", "build ms", "fwd ms"] + (["sdpa ms", "sdpa+bias ms", "3-D bias ms"] if args.sdpa else [])
            + (["eager flex ms", "flex ms", "compile s", "flex err"] if args.flex else []))
    print(" | ".join(f"{c:>12}" for c in cols))
    for n in args.sizes:
        for kind in args.kinds:
            row = bench(kind, n, args)
            cells = [row.get(c, "") for c in cols]
            print(" | ".join(f"{c:>12.3g}" if isinstance(c, float) else f"{c!s:>12}" for c in cells), flush=True)


def get_args_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="+", default=[196, 1024, 4096], help="token counts (square grids)")
    p.add_argument("--kinds", nargs="+", default=["alibi", "relative"], choices=["alibi", "relative", "fire", "cpb"])
    p.add_argument("--heads", type=int, default=6)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--no-flex", dest="flex", action="store_false", help="skip the flex_attention columns")
    p.add_argument("--no-sdpa", dest="sdpa", action="store_false", help="skip the SDPA columns")
    return p


if __name__ == "__main__":
    main(get_args_parser().parse_args())
