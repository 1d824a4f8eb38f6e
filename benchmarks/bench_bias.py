"""Cost of attention-bias kinds on this machine: bias memory, bias build time, SDPA with the mask, flex.

Per token count N (a square 2D grid: 196 = 14 x 14, 1024 = 32 x 32, 4096 = 64 x 64; ``erpe``, 1D only, a series of N
tokens with ``length=N``) it prints
    bias MB       heads * N * N * 4 bytes of the float32 bias
    build ms      the first call on a grid: alibi the bias, relative index build + table gather
    fwd ms        every later call: alibi a cache hit, relative the table gather (the index is cached)
    sdpa ms       F.scaled_dot_product_attention with no mask, then with the bias as attn_mask:
                  ``ndpe.attn_bias`` hands it over as (1, heads, N, N), which SDPA's fused CPU kernel
                  takes; "3-D" is the raw (heads, N, N) PosOut.bias, which sends SDPA to its math path
                  (CPU only); "sdpa+build" builds the bias afresh per call (cache cleared), as a forward
                  of a kind whose bias is not cached pays it; ``erpe`` acts after the softmax, so its "sdpa+bias"
                  is its ``(1, heads, N, N)`` term handed to SDPA as a mask (the fused cost of a term that size)
    attend ms     a kind acting after the softmax (``erpe``'s ``prob_bias``), as ``ndpe.Attention`` runs it:
                  ``ndpe.attend``, the explicit softmax with the term added to the probabilities
    flex ms       the same attention through torch.compile(flex_attention) with a score_mod
                  (no N x N tensor), after one compile per shape (compile time printed apart); beside it
                  "flex plain" (no score_mod) and "flex minimal" (a hand-written score_mod of the same bias)
    heads-last    "sdpa+heads-last": the same mask laid out (1, N, N, heads) in memory, seen as (1, heads, N, N)
    peak MiB      on CUDA: the memory one call allocates above what was there before it (sdpa+build, flex);
                  a size whose materialized bias does not fit is reported as out of memory (the crossover)

    python benchmarks/bench_bias.py                  # all threads, N = 196 1024 4096
    python benchmarks/bench_bias.py --threads 1 --sizes 196 1024 --no-flex
    python benchmarks/bench_bias.py --threads 1 --sizes 196 1024 --kinds alibi great-circle   # the sphere beside alibi
    python benchmarks/bench_bias.py --threads 1 --clock cpu --kinds alibi relative erpe --no-flex   # after the softmax
    python benchmarks/bench_bias.py --kinds alibi relative fire cpb --sizes 196 1024 --no-sdpa   # bias kinds' paths
    python benchmarks/bench_bias.py --device cuda --dtype bfloat16 --kinds alibi relative fire cpb --sizes 1024 4096 16384

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
from ndpe.attention import attend


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, repeats: int, device: torch.device = torch.device("cpu"), peaks: dict | None = None,
          name: str = "", timer=time.perf_counter) -> float:
    """Median time of ``fn()`` in ms by ``timer`` (wall time), after one warm-up call; on CUDA ``peaks[name]`` gets the
    peak memory (MiB) one call allocates above what was allocated before it."""
    if device.type == "cuda":
        sync(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
    fn()
    sync(device)
    if device.type == "cuda" and peaks is not None and name:  # only the named columns
        peaks[name] = (torch.cuda.max_memory_allocated(device) - base) / 2**20
    times = []
    for _ in range(repeats):
        sync(device)
        t0 = timer()
        fn()
        sync(device)
        times.append(timer() - t0)
    return sorted(times)[len(times) // 2] * 1e3


def grid_of(kind: str, n: int) -> tuple[int, ...]:
    """The positions of ``n`` tokens: a series for a kind that is 1D only (erpe), else a square 2D grid."""
    if ndpe.available()[kind] == (1,):
        return (n,)
    side = math.isqrt(n)
    if side * side != n:
        raise SystemExit(f"--sizes must be square numbers (a 2D grid), got {n}")
    return side, side


def bench(kind: str, n: int, args) -> dict:
    grid = grid_of(kind, n)
    opts = {"relative": {"max_distance": grid[0] - 1}, "erpe": {"length": n}}.get(kind, {})
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    torch.manual_seed(0)
    pe = ndpe.make(dims=len(grid), kind=kind, dim=args.heads * args.head_dim, heads=args.heads, **opts)
    pe = pe.eval().to(device)
    q, k, v = (torch.randn(args.batch, args.heads, n, args.head_dim, device=device, dtype=dtype) for _ in range(3))
    row = {"kind": kind, "N": n, "bias MB": args.heads * n * n * 4 / 2**20}
    peaks: dict[str, float] = {}
    timer = time.process_time if args.clock == "cpu" else time.perf_counter
    timed_ = lambda fn, name="": timed(fn, args.repeats, device, peaks, name, timer)  # noqa: E731
    previous = ndpe.set_memory_budget(None)  # the materialized bias is what this measures: no guard
    with torch.no_grad():
        try:
            materialized(pe, grid, q, k, v, row, timed_, args)
        except torch.OutOfMemoryError as err:  # the crossover: the N x N bias no longer fits; flex still runs
            row["error"] = f"materialized: OutOfMemoryError: {str(err)[:120]}"
            torch.cuda.empty_cache()
        if args.flex and after_softmax(pe, grid):
            row["flex ms"] = "refused: a score_mod acts before the softmax"
        elif args.flex:
            torch._dynamo.reset()  # a fresh graph per row: past 8 recompiles flex falls back to its unfused eager path
            t0 = time.perf_counter()
            try:
                out = flex.attention(q, k, v, pe, grid)
                sync(device)
                row["compile s"] = time.perf_counter() - t0
                row["flex ms"] = timed_(lambda: flex.attention(q, k, v, pe, grid), "flex")
                if "error" not in row:
                    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=ndpe.attn_bias(pe(grid)).to(dtype))
                    row["flex err"] = (out - ref).abs().max().item()
                minimal_flex(pe, kind, grid, q, k, v, row, timed_)
            except Exception as err:  # report, keep going
                row["flex ms"] = f"unavailable: {type(err).__name__}: {str(err)[:200]}"
                torch.cuda.empty_cache()
    ndpe.set_memory_budget(previous)
    for name, mib in peaks.items():
        row[f"{name} peak MiB"] = mib
    return row


def materialized(pe, grid, q, k, v, row, timed_, args):
    """The columns of a materialized bias: built, forward, handed to SDPA (and the eager flex path)."""
    dtype = q.dtype

    def build():
        pe.clear_cache()
        return pe(grid).bias

    row["build ms"] = timed_(build)
    row["fwd ms"] = timed_(lambda: pe(grid))
    if args.flex and args.eager_flex and not after_softmax(pe, grid):
        row["eager flex ms"] = timed_(lambda: flex.attention(q, k, v, pe, grid, compiled=False))
    if args.sdpa:
        row["sdpa ms"] = timed_(lambda: F.scaled_dot_product_attention(q, k, v), "sdpa")
        pos = pe(grid)
        probs = after_softmax(pe, grid)
        mask = (pos.prob_bias.unsqueeze(0) if probs else ndpe.attn_bias(pos)).to(dtype)  # (1, heads, N, N)
        row["sdpa+bias ms"] = timed_(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
        if not probs:  # the same values laid out heads-last (the old layout of relative / fire / cpb)
            last = mask.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)
            row["sdpa+heads-last ms"] = timed_(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=last))
            del last
        del mask
        if probs:  # its attention is the explicit softmax, with the term added after it
            row["attend ms"] = timed_(lambda: attend(q, k, v, pos))
            return
        # the whole cost of a materialized bias: built (cache cleared) and handed to SDPA, per call
        row["sdpa+build ms"] = timed_(lambda: F.scaled_dot_product_attention(
            q, k, v, attn_mask=ndpe.attn_bias(build_pos(pe, grid)).to(dtype)), "sdpa+build")
        if args.device == "cpu":
            mask3 = pe(grid).bias
            row["3-D bias ms"] = timed_(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask3))


def minimal_flex(pe, kind: str, grid, q, k, v, row, timed_) -> None:
    """Flex attention with no ``score_mod`` ("flex plain": flex's own cost beside SDPA's) and with a minimal hand-written
    one of the same bias ("flex minimal": alibi's slope times the grid distance, relative's table row of the offset;
    other kinds read their materialized mask), compiled once each: what ndpe's ``score_mod`` adds over them."""
    from torch.nn.attention.flex_attention import flex_attention

    compiled = torch.compile(flex_attention)
    row["flex plain ms"] = timed_(lambda: compiled(q, k, v))
    side = grid[-1]
    if kind == "alibi" and len(grid) == 2:
        slopes = (2.0 ** (-8.0 * torch.arange(1, q.shape[1] + 1) / q.shape[1])).to(q.device, torch.float32)

        def mod(score, b, h, qi, ki):
            return score - slopes[h] * ((qi // side - ki // side).abs() + (qi % side - ki % side).abs())
    elif kind == "relative" and len(grid) == 2:
        table, m = pe.table.detach(), grid[0] - 1  # (rows, heads); offsets clipped to +-m per axis

        def mod(score, b, h, qi, ki):
            dr = (qi // side - ki // side).clamp(-m, m) + m
            dc = (qi % side - ki % side).clamp(-m, m) + m
            return score + table[dr * (2 * m + 1) + dc, h]
    else:
        mask = pe(grid).bias.to(q.dtype)  # (heads, N, N)

        def mod(score, b, h, qi, ki):
            return score + mask[h, qi, ki]
    row["flex minimal ms"] = timed_(lambda: compiled(q, k, v, score_mod=mod))


def after_softmax(pe, grid) -> bool:
    """Whether the kind's term acts on the attention probabilities (erpe's ``prob_bias``), not on the logits."""
    return pe(grid).prob_bias is not None


def build_pos(pe, grid):
    """The encoding's output for ``grid`` built afresh (its cache cleared): what one forward pays."""
    pe.clear_cache()
    return pe(grid)


def main(args) -> list[dict]:
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, device {args.device}, {args.dtype}, {torch.get_num_threads()} threads, batch "
          f"{args.batch}, heads {args.heads}, head_dim {args.head_dim}, median of {args.repeats}, {args.clock} clock")
    cols = (["kind", "N", "bias MB", "build ms", "fwd ms"]
            + (["sdpa ms", "sdpa+bias ms", "sdpa+heads-last ms", "sdpa+build ms", "3-D bias ms"] if args.sdpa else [])
            + (["attend ms"] if args.sdpa and "erpe" in args.kinds else [])
            + (["eager flex ms", "flex ms", "flex plain ms", "flex minimal ms", "compile s", "flex err"]
               if args.flex else [])
            + (["sdpa+build peak MiB", "flex peak MiB"] if args.device != "cpu" else []))
    print(" | ".join(f"{c:>12}" for c in cols))
    rows = []
    for n in args.sizes:
        for kind in args.kinds:
            try:
                row = bench(kind, n, args)
            except torch.OutOfMemoryError as err:  # the crossover: a materialized N x N bias no longer fits
                row = {"kind": kind, "N": n, "error": f"OutOfMemoryError: {str(err)[:200]}"}
                torch.cuda.empty_cache()
            rows.append(row)
            cells = [row.get(c, "") for c in cols]
            print(" | ".join(f"{c:>12.3g}" if isinstance(c, float) else f"{c!s:>12}" for c in cells)
                  + (f"  {row['error']}" if "error" in row else ""), flush=True)
    if args.json:
        import json

        meta = {"torch": torch.__version__, **{k: v for k, v in vars(args).items() if k != "json"}}
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)
    return rows


def get_args_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="+", default=[196, 1024, 4096], help="token counts (square grids)")
    p.add_argument("--kinds", nargs="+", default=["alibi", "relative"],
                   choices=["alibi", "relative", "fire", "cpb", "great-circle", "erpe"])
    p.add_argument("--heads", type=int, default=6)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--no-flex", dest="flex", action="store_false", help="skip the flex_attention columns")
    p.add_argument("--no-sdpa", dest="sdpa", action="store_false", help="skip the SDPA columns")
    p.add_argument("--no-eager-flex", dest="eager_flex", action="store_false", help="skip flex without compile")
    p.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                   help="cpu: this process's CPU time, which leaves out the time other jobs on a shared machine "
                        "hold the core (honest with --threads 1)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--json", default=None, help="write the rows to this file")
    return p


if __name__ == "__main__":
    main(get_args_parser().parse_args())
