"""Memory traffic of applying RoPE to q and k, counted on the CPU: a proxy for GPU time until one is measured.

RoPE is bandwidth-bound: on a GPU its time is the bytes it moves over the memory bandwidth. The floor reads q and
k once and writes them once, ``4 x |q|`` (``q.clone(); k.clone()``). Per kernel of ``ndpe.apply_qk``, forward, at
the shapes of ``benchmarks/bench_rope.py`` (q, k: views of a fused qkv, as inside ``ndpe.Attention``):

- ``eager``: every ATen op the call dispatches is counted as a kernel that streams its operands through memory
  (a ``TorchDispatchMode``): it reads each input once (broadcast axes, stride 0, count once), writes each output
  once; in-place ops read and write their target, ``out=`` and ``copy_`` targets are only written; views and
  ``empty`` cost nothing. On a GPU each op is a kernel launch, and above L2's size (50 MB on an H100) nothing stays
  in cache between them, so this is what the eager path must move.
- ``compile``: inductor's own count for the compiled graph (``GraphLowering.count_bytes``, the figure its
  bandwidth estimates use), from ``torch._logging.set_logs(inductor_metrics=True)``.
- ``triton``: the fused kernel's loads and stores, counted by Triton's interpreter (``TRITON_INTERPRET=1``): the
  active lanes of every ``tl.load`` / ``tl.store`` (``issued``), and the distinct bytes they touch (``unique``:
  what reaches DRAM when the cos/sin tiles, shared by heads, hit in L2).

The prediction is ``floor / moved``: the fraction of the floor's bandwidth a kernel can reach if it runs at the
same bytes per second as the floor. ``scripts/gpu_check.sh`` prints it beside the measured fraction.

    python benchmarks/rope_traffic.py [--shapes "vit-s 14x14" ...] [--dtypes float32 bfloat16] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
from contextlib import contextmanager
from pathlib import Path

import torch
from einops import rearrange
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_rope import SHAPES  # noqa: E402  (same folder)

import ndpe  # noqa: E402
from ndpe.functional import rotary_kernel  # noqa: E402

DEFAULT_SHAPES = ["vit-s 14x14", "32x32", "video 8x14x14", "1d 4096"]
FREE = ("empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "set_", "detach", "alias",
        "lift_fresh", "split", "split_with_sizes", "unbind", "chunk")  # no bytes moved (lists of views included)


def footprint(t: torch.Tensor) -> int:
    """Bytes of the distinct elements ``t`` addresses (a broadcast axis, stride 0, counts once)."""
    return math.prod(n for n, s in zip(t.shape, t.stride()) if s != 0) * t.element_size() if t.numel() else 0


class OpTraffic(TorchDispatchMode):
    """Bytes read and written by the ATen ops run under it, each op streaming its operands through memory."""

    def __init__(self):
        super().__init__()
        self.read = self.written = self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        schema, name = func._schema, func.__name__.split(".")[0]
        if name in FREE or (schema.returns and all(r.alias_info is not None and not r.alias_info.is_write
                                                    for r in schema.returns)):  # in-place foreach ops return nothing
            return out  # an allocation or a view: no kernel moves data
        self.ops += len(args[0]) if name.startswith("_foreach") else 1  # a foreach op: a kernel per tensor (broadcast)
        values = dict(zip((a.name for a in schema.arguments), args)) | kwargs
        for arg in schema.arguments:
            value = values.get(arg.name)
            ts = [t for t in value if isinstance(t, torch.Tensor)] if isinstance(value, (list, tuple)) else [value]
            write = arg.alias_info is not None and arg.alias_info.is_write  # a foreach op's list: on the list's type
            write = write or (name.endswith("_") and name.startswith("_foreach") and arg.name == "self")
            write_only = write and (arg.kwarg_only or name == "copy_")
            for t in ts:
                if isinstance(t, torch.Tensor):
                    self.read += 0 if write_only else footprint(t)
                    self.written += footprint(t) if write else 0
        for r, t in zip(schema.returns, out if isinstance(out, tuple) else (out,)):
            for fresh in (t if isinstance(t, (list, tuple)) else [t]):
                if r.alias_info is None and isinstance(fresh, torch.Tensor):
                    self.written += footprint(fresh)  # a fresh output (each of a foreach op's list)
        return out


@contextmanager
def triton_traffic():
    """Count the bytes of every ``tl.load`` / ``tl.store`` under Triton's interpreter: ``stats["issued"]`` (active
    lanes x element size) and ``stats["addresses"]`` (the element addresses, for the distinct bytes)."""
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    load, store = builder.create_masked_load, builder.create_masked_store
    stats = {"load": 0, "store": 0, "addresses": [], "itemsize": {}}

    def count(kind, ptrs, mask):
        size = interpreter._get_np_dtype(ptrs.get_element_ty()).itemsize
        active = ptrs.data[mask.data.astype(bool)] if mask.data.shape == ptrs.data.shape else ptrs.data.ravel()
        stats[kind] += int(active.size) * size
        stats["addresses"].append((kind, active.astype("uint64"), size))

    def counted_load(self, ptrs, mask, other, *rest):
        count("load", ptrs, mask)
        return load(self, ptrs, mask, other, *rest)

    def counted_store(self, ptrs, value, mask, *rest):
        count("store", ptrs, mask)
        return store(self, ptrs, value, mask, *rest)

    builder.create_masked_load, builder.create_masked_store = counted_load, counted_store
    try:
        yield stats
    finally:
        builder.create_masked_load, builder.create_masked_store = load, store


def distinct_bytes(stats: dict, kind: str) -> int:
    import numpy as np

    chunks = [(a, s) for k, a, s in stats["addresses"] if k == kind]
    if not chunks:
        return 0
    total = 0
    for size in {s for _, s in chunks}:  # elements of one size: distinct addresses x size
        total += int(np.unique(np.concatenate([a for a, s in chunks if s == size])).size) * size
    return total


def inputs(grid, args, dtype):
    heads, head_dim = args.heads, args.head_dim
    pe = ndpe.make(dims=len(grid), kind="rope", dim=heads * head_dim, heads=heads)
    pos = pe(grid, dtype=dtype)
    qkv = torch.randn(args.batch, math.prod(grid), 3 * heads * head_dim).to(dtype)
    q, k = rearrange(qkv, "b t (three h d) -> three b h t d", three=3, h=heads)[:2]
    return q, k, pos


def count_kernel(kernel: str, q, k, pos) -> dict:
    """Bytes one forward ``apply_qk(q, k, pos)`` moves with ``kernel`` (see the module docstring)."""
    if kernel in ("floor", "eager"):
        counter = OpTraffic()
        with torch.no_grad(), rotary_kernel("eager"), counter:
            if kernel == "floor":
                q.clone(), k.clone()
            else:
                ndpe.apply_qk(q, k, pos)
        return {"read": counter.read, "written": counter.written, "ops": counter.ops}
    if kernel == "compile":
        from torch._inductor import metrics

        torch._dynamo.reset()
        torch._logging.set_logs(inductor_metrics=True)
        metrics.reset()
        fn = torch.compile(lambda q, k, cos, sin: ndpe.apply_qk(q, k, ndpe.PosOut(rot=(cos, sin))), fullgraph=True,
                           dynamic=False)
        with torch.no_grad():
            fn(q, k, *pos.rot)
        torch._logging.set_logs()
        return {"moved": int(metrics.num_bytes_accessed)}
    if kernel == "triton":
        from ndpe.kernels import triton as T

        old = os.environ.get("TRITON_INTERPRET")
        os.environ["TRITON_INTERPRET"] = "1"
        try:
            with triton_traffic() as stats, torch.no_grad():
                T.rotary((q, k), *pos.rot, "half")
        finally:
            if old is None:
                os.environ.pop("TRITON_INTERPRET")
            else:
                os.environ["TRITON_INTERPRET"] = old
        return {"read": stats["load"], "written": stats["store"],
                "unique": distinct_bytes(stats, "load") + distinct_bytes(stats, "store")}
    raise ValueError(f"kernel must be one of floor, eager, compile, triton; got {kernel!r}")


def main(args) -> list[dict]:
    torch.manual_seed(0)
    rows = []
    for name in args.shapes:
        for dtype_name in args.dtypes:
            dtype = getattr(torch, dtype_name)
            q, k, pos = inputs(SHAPES[name], args, dtype)
            floor = 4 * q.numel() * q.element_size()
            for kernel in args.kernels:
                try:
                    c = count_kernel(kernel, q, k, pos)
                except Exception as err:  # e.g. triton not installed: say so, keep going
                    rows.append({"shape": name, "dtype": dtype_name, "kernel": kernel,
                                 "error": f"{type(err).__name__}: {err}"})
                    continue
                moved = c.get("moved", c.get("read", 0) + c.get("written", 0))
                row = {"shape": name, "dtype": dtype_name, "kernel": kernel, "floor_bytes": floor, **c,
                       "moved": moved, "x_floor": moved / floor, "predicted_floor_fraction": floor / moved}
                if "unique" in c:
                    row["predicted_floor_fraction_l2"] = floor / c["unique"]
                rows.append(row)
                print(f"{name:14s} {dtype_name:9s} {kernel:8s} {moved / 2**20:8.2f} MiB moved  x{moved / floor:5.2f} "
                      f"floor" + (f"  ({c['unique'] / 2**20:.2f} MiB distinct)" if "unique" in c else ""), flush=True)
    if args.json:
        meta = {"torch": torch.__version__, "batch": args.batch, "heads": args.heads, "head_dim": args.head_dim}
        Path(args.json).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    return rows


def get_args_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", nargs="+", default=DEFAULT_SHAPES, choices=list(SHAPES))
    p.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"], choices=["float32", "bfloat16"])
    p.add_argument("--kernels", nargs="+", default=["floor", "eager", "compile", "triton"],
                   choices=["floor", "eager", "compile", "triton"])
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--heads", type=int, default=6)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--json", default=None, help="write the rows to this file")
    return p


if __name__ == "__main__":
    main(get_args_parser().parse_args())
