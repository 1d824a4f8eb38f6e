"""Speed of applying RoPE to q and k: ndpe (eager, compiled) vs timm vs rotary-embedding-torch vs the floor.

Applying RoPE reads q and k once and writes them once, so the floor is ``q.clone(); k.clone()``.
q and k are the non-contiguous views a fused qkv projection gives (``rearrange(qkv, "b t (three h
d) -> three b h t d")``), as inside ``ndpe.Attention``; grid tokens only (no cls token). Every
method is timed in the same rounds, in a shuffled order per round, so load noise hits all alike;
figures are medians. cos/sin construction (cached per forward in ndpe) is timed separately.

    python benchmarks/bench_rope.py --threads 1 --repeats 50 --json rope.json
    python benchmarks/bench_rope.py --grad --batch 4 --heads 3 --shapes "tiny 2x2" "vit-s 14x14"   # training share
"""
from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import time
from pathlib import Path

import torch
from einops import rearrange
from timm.layers.pos_embed_sincos import RotaryEmbeddingCat, apply_rot_embed_cat

try:  # the test extra; a GPU machine may not have it (its rows are then left out)
    from rotary_embedding_torch import RotaryEmbedding, apply_rotary_emb
except ImportError:
    RotaryEmbedding = apply_rotary_emb = None

import ndpe
from ndpe.kernels import triton as _triton
from ndpe.functional import rotate_reference, set_rotary_kernel

SHAPES = {"vit-s 14x14": (14, 14), "32x32": (32, 32), "video 8x14x14": (8, 14, 14), "1d 4096": (4096,),
          "1d 32k": (32768,), "tiny 2x2": (2, 2)}  # tiny: the fixed cost of a call; 1d 32k: a GPU's long context
DEFAULT_SHAPES = ["vit-s 14x14", "32x32", "video 8x14x14", "1d 4096"]


def save_json(args, results) -> None:
    """``results`` with the run's arguments to ``args.json`` (when given): what the README tables quote."""
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "results": results}, indent=2))


def get_args_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (CPU)")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--repeats", type=int, default=50, help="timed rounds per shape (median reported)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--heads", type=int, default=6)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--shapes", nargs="+", default=DEFAULT_SHAPES, choices=list(SHAPES))
    p.add_argument("--grad", action="store_true",
                   help="time forward + backward from the fused qkv (a training step's share); default forward under no_grad")
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile rows")
    p.add_argument("--compile-rows", choices=["all", "kernel"], default="all",
                   help="kernel: only set_rotary_kernel('compile') (one graph per shape; a GPU check's time budget)")
    p.add_argument("--clock", choices=["wall", "cpu"], default=None,
                   help="default: cpu time on CPU with 1 thread (shared machine), wall time otherwise")
    p.add_argument("--json", default=None, help="write all figures to this file")
    return p


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def clock(name: str):
    """``wall``: elapsed time. ``cpu``: this process's CPU time, which leaves out the time other jobs on a
    shared machine hold the core (honest for 1 thread; with more it sums the threads)."""
    return time.perf_counter if name == "wall" else time.process_time


def time_interleaved(fns: dict, repeats: int, device: torch.device, timer=time.perf_counter,
                     warmup: int = 3) -> dict[str, float]:
    """Median seconds per call of each fn, all fns timed in every round in a shuffled order."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    times = {name: [] for name in fns}
    order, rng = list(fns), random.Random(0)
    for _ in range(repeats):
        rng.shuffle(order)
        for name in order:
            sync(device)
            t0 = timer()
            fns[name]()
            sync(device)
            times[name].append(timer() - t0)
    return {name: statistics.median(t) for name, t in times.items()}


def peer_tables(grid, head_dim: int, rot_dim: int, device, dtype):
    """timm's cat(sin, cos) table and rotary-embedding-torch's angle table, both for ``rot_dim`` channels."""
    dims = len(grid)
    timm_rope = RotaryEmbeddingCat(2 * rot_dim // dims, in_pixels=False, device=device)  # 2D: dim = head_dim
    build_timm = lambda: timm_rope.get_embed(list(grid)).to(dtype)  # (N, 2 * rot_dim)
    assert build_timm().shape[-1] == 2 * rot_dim
    if RotaryEmbedding is None:
        return build_timm, None
    ret_rope = RotaryEmbedding(rot_dim // dims, cache_if_possible=False).to(device)
    build_ret = lambda: ret_rope.get_axial_freqs(*grid).flatten(0, -2)  # (N, rot_dim) angles
    assert build_ret().shape[-1] == rot_dim
    return build_timm, build_ret


def bench_shape(name: str, grid, args, device, dtype) -> list[dict]:
    dims, n = len(grid), 1
    for g in grid:
        n *= g
    heads, head_dim = args.heads, args.head_dim
    pe = {p: ndpe.make(dims=dims, kind="rope", dim=heads * head_dim, heads=heads, pairing=p).to(device)
          for p in ("half", "interleaved")}
    rot_dim = pe["half"].rot_dim  # video: 3 x 20 of 64 channels rotated, 4 passed through
    qkv = torch.randn(args.batch, n, 3 * heads * head_dim, device=device, dtype=dtype, requires_grad=args.grad)
    split = lambda: rearrange(qkv, "b t (three h d) -> three b h t d", three=3, h=heads)[:2]  # noqa: E731
    q, k = split()
    pos = {p: m(grid, dtype=dtype) for p, m in pe.items()}
    build_timm, build_ret = peer_tables(grid, head_dim, rot_dim, device, dtype)
    timm_emb, ret_freqs = build_timm(), build_ret() if build_ret else None

    def timm_apply(x):  # timm rotates every channel it is given: pass through the rest by hand
        out = apply_rot_embed_cat(x[..., :rot_dim], timm_emb)
        return out if rot_dim == head_dim else torch.cat([out, x[..., rot_dim:]], dim=-1)

    def with_kernel(kernel, p):  # rows run in shuffled order: each sets its own rotary kernel
        def run(q, k):
            set_rotary_kernel(kernel)
            return ndpe.apply_qk(q, k, pos[p])
        return run

    # every method maps (q, k) to the rotated (q, k)
    apply = {
        "floor (q.clone, k.clone)": lambda q, k: (q.clone(), k.clone()),
        "ndpe eager half": with_kernel("eager", "half"),
        "ndpe eager interleaved": with_kernel("eager", "interleaved"),
        "plain formula (ndpe before)": lambda q, k: [rotate_reference(t, *pos["half"].rot, "half") for t in (q, k)],
        "timm apply_rot_embed_cat": lambda q, k: (timm_apply(q), timm_apply(k)),
    }
    if build_ret:
        apply["rotary-embedding-torch"] = lambda q, k: (apply_rotary_emb(ret_freqs, q), apply_rotary_emb(ret_freqs, k))
    if _triton.available(q, k):  # CUDA
        for p in ("half", "interleaved"):
            with torch.no_grad():
                # one rounding (triton, fp32 inside) against eager's rounding per op: a 16-bit ulp apart at most
                tol = {} if dtype == torch.float32 else dict(atol=1e-2, rtol=1e-2)
                torch.testing.assert_close(with_kernel("triton", p)(q, k)[0], with_kernel("eager", p)(q, k)[0], **tol)
            apply[f"ndpe triton {p}"] = with_kernel("triton", p)
    if not args.no_compile:
        torch._dynamo.reset()  # fresh graphs per shape (no recompile limit across shapes)
        apply["ndpe set_rotary_kernel('compile') half"] = with_kernel("compile", "half")
    if not args.no_compile and args.compile_rows == "all":
        for p in ("half", "interleaved"):
            fn = torch.compile(lambda q, k, cos, sin, p=p: ndpe.apply_qk(q, k, ndpe.PosOut(rot=(cos, sin), pairing=p)),
                               fullgraph=True, dynamic=False)
            apply[f"ndpe compiled {p}"] = lambda q, k, fn=fn, p=p: fn(q, k, *pos[p].rot)
        # dynamic batch and token axes (mark_dynamic): one graph for every batch and grid size
        dyn = torch.compile(lambda q, k, cos, sin: ndpe.apply_qk(q, k, ndpe.PosOut(rot=(cos, sin))), fullgraph=True)
        cos, sin = (t.clone() for t in pos["half"].rot)  # own marks
        for t in (cos, sin):  # (1, N, half)
            torch._dynamo.mark_dynamic(t, 1)

        def dynamic(q, k):
            q, k = q.view(q.shape), k.view(k.shape)  # fresh views to mark: (B, H, N, d)
            for t in (q, k):
                torch._dynamo.mark_dynamic(t, 0)
                torch._dynamo.mark_dynamic(t, 2)
            return dyn(q, k, cos, sin)
        apply["ndpe compiled half, dynamic B and N"] = dynamic
    with torch.no_grad():
        want = {p: ndpe.apply_qk(q, k, pos[p]) for p in pos}
        for method, f in apply.items():  # every ndpe path rotates like the default kernel (peers: tests/test_rope_peers.py)
            if method.startswith(("ndpe", "plain")):
                p = "interleaved" if "interleaved" in method else "half"
                tol = 1e-4 if dtype == torch.float32 else 2e-2  # bf16: the plain formula rounds each op
                torch.testing.assert_close(f(q, k)[0], want[p][0], rtol=tol, atol=tol)
    grads = [torch.randn_like(q), torch.randn_like(k)]

    def timed(f):
        if not args.grad:
            return lambda: f(q, k)

        def step():  # forward and backward from the fused qkv leaf, as in a training step
            torch.autograd.backward(list(f(*split())), grads)
            qkv.grad = None
        return step
    build = {
        "build ndpe pe(grid) (uncached)": lambda: (pe["half"].clear_cache(), pe["half"](grid, dtype=dtype)),
        "build timm get_embed": build_timm,
        **({"build rotary-embedding-torch get_axial_freqs": build_ret} if build_ret else {}),
    }
    timer = clock(args.clock)
    with torch.set_grad_enabled(args.grad):
        times = time_interleaved({m: timed(f) for m, f in apply.items()}, args.repeats, device, timer)
    with torch.no_grad():
        times.update(time_interleaved(build, args.repeats, device, timer))
    floor = times["floor (q.clone, k.clone)"]
    moved = 4 * q.numel() * q.element_size() * (2 if args.grad else 1)  # read q and k, write two outputs (and back)
    rows = []
    for method, t in times.items():
        row = {"shape": name, "grid": list(grid), "dtype": args.dtype, "batch": args.batch, "heads": heads,
               "head_dim": head_dim,
               "rot_dim": rot_dim, "grad": args.grad, "method": method, "ms": t * 1e3}
        if not method.startswith("build"):
            row.update(x_floor=t / floor, floor_fraction=floor / t, gb_s=moved / t / 1e9)
        rows.append(row)
    return rows


def main(args) -> list[dict]:
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    torch.set_num_threads(args.threads)
    if args.clock is None:
        args.clock = "cpu" if device.type == "cpu" and args.threads == 1 else "wall"
    print(f"torch {torch.__version__}, {platform.processor() or platform.machine()}, device {device}, "
          f"threads {torch.get_num_threads()}, dtype {args.dtype}, repeats {args.repeats}, {args.clock} clock, "
          f"B={args.batch} H={args.heads} head_dim={args.head_dim}, grid tokens only (no cls), "
          f"{'forward + backward' if args.grad else 'forward under no_grad'}")
    rows = []
    for name in args.shapes:
        shape_rows = bench_shape(name, SHAPES[name], args, device, dtype)
        r0 = shape_rows[0]
        print(f"\n{name}: grid {tuple(r0['grid'])}, N={torch.Size(r0['grid']).numel()}, rot_dim {r0['rot_dim']}")
        for r in shape_rows:
            extra = f"  x{r['x_floor']:5.2f} floor  {r['gb_s']:6.1f} GB/s" if "x_floor" in r else ""
            print(f"  {r['method']:46s} {r['ms']:8.3f} ms{extra}")
        rows += shape_rows
    if args.json:
        meta = {"torch": torch.__version__, "device": str(device), "threads": torch.get_num_threads(),
                "dtype": args.dtype, "grad": args.grad, "batch": args.batch, "heads": args.heads, "repeats": args.repeats, "clock": args.clock, "date": time.strftime("%Y-%m-%d %H:%M")}
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)
    return rows


if __name__ == "__main__":
    main(get_args_parser().parse_args())
