"""Error of every RoPE kernel against a float64 reference, in units in the last place (ulp) of the output dtype.

The reference rotates q and k (as float64) by the very cos / sin tables the kernel is given (as float64), so the
error is the kernel's own arithmetic and rounding. It is measured in ulps of the output dtype at the scale the
rotation preserves: the norm of each rotated pair (``|(o1, o2)| = |(x1, x2)|``; ``|x|`` on pass-through channels):
a kernel that computes exactly and rounds once to nearest is within 0.5 ulp; Triton's interpreter rounds float32 ->
bfloat16 toward zero, so within 1 ulp there. Kernels:

- ``triton``: :func:`ndpe.kernels.triton.rotary` on q and k (views of one qkv buffer), forward and ``inverse``
  (its backward); ``triton qkv``: :func:`ndpe.kernels.qkv.rotary_qkv_` in place, forward and its autograd backward;
- ``eager``: :func:`ndpe.kernels.eager.rotate` (PyTorch ops in x's dtype, tables cast to it, as HF's formula).

Tables: 1D ``(T, half)``, a 2D grid's with a prefix token and partial rotation (``ndpe.make(dims=2, kind="rope")``),
per head ``(heads, T, half)``, per sample ``(B, 1, T, half)``.

    TRITON_INTERPRET=1 python benchmarks/kernel_ulps.py          # CPU, the Triton interpreter
    python benchmarks/kernel_ulps.py --device cuda [--json ulps.json]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

import ndpe
from ndpe.functional import rotate_reference
from ndpe.kernels import eager

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
B, HEADS, HEAD_DIM = 2, 3, 64


def tables(name: str, device) -> tuple[torch.Tensor, torch.Tensor]:
    """cos / sin (float32) of each table layout the kernels take; T = 1 + 8 * 6 tokens."""
    g = torch.Generator().manual_seed(1)
    t = 49
    if name == "2d grid":
        cos, sin = ndpe.make(dims=2, kind="rope", dim=HEADS * 60, heads=HEADS, theta=100.0)((8, 6), num_prefix=1).rot
        return cos.to(device), sin.to(device)  # (1, 49, 14): rot 56 of head_dim 64 (head_dim 60 // 4 * 2 per axis)
    shape = {"1d": (t, 32), "per head": (HEADS, t, 32), "per sample": (B, 1, t, 30)}[name]
    angle = torch.rand(*shape, generator=g, dtype=torch.float64) * 2000 - 1000
    return angle.cos().float().to(device), angle.sin().float().to(device)


def scale(ref: torch.Tensor, half: int, pairing: str) -> torch.Tensor:
    """The norm of each output's pair (the rotation keeps it), ``|ref|`` on channels past the rotation."""
    r1, r2 = eager.pairs(ref, half, pairing)
    norm, out = torch.hypot(r1, r2), ref.abs().clone()
    for view in eager.pairs(out, half, pairing):
        view.copy_(norm)
    return out


def ulps(out: torch.Tensor, ref: torch.Tensor, half: int, pairing: str) -> float:
    """Largest ``|out - ref|`` in ulps of ``out``'s dtype at the scale of :func:`scale`."""
    info = torch.finfo(out.dtype)
    unit = info.eps * torch.exp2(torch.floor(torch.log2(scale(ref, half, pairing).clamp_min(info.tiny))))
    return float(((out.double() - ref).abs() / unit).max())


def qkv_buffer(dtype, device, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(B, 49, 3, HEADS, HEAD_DIM, generator=g) * 3).to(device, dtype)


def measure(kernel: str, dtype, pairing: str, table: str, device) -> dict:
    """Worst error in ulps over q and k, forward and backward, for one kernel, dtype, pairing and table layout."""
    from ndpe.kernels.qkv import qk_views
    cos, sin = tables(table, device)
    half = cos.shape[-1]
    qkv = qkv_buffer(dtype, device)
    grad = qkv_buffer(dtype, device, seed=1)
    q, k = qk_views(qkv)
    gq, gk = qk_views(grad)
    c64, s64 = cos.double(), sin.double()
    want = [rotate_reference(t.double(), c64, s64, pairing) for t in (q, k)]
    want_back = [rotate_reference(t.double(), c64, -s64, pairing) for t in (gq, gk)]
    if kernel == "triton":
        from ndpe.kernels import triton
        got = triton.rotary((q, k), cos, sin, pairing)
        got_back = triton.rotary((gq, gk), cos, sin, pairing, inverse=True)
    elif kernel == "triton qkv":
        from ndpe.kernels.qkv import rotary_qkv_
        leaf = qkv.clone().requires_grad_()
        out = rotary_qkv_(leaf * 1, cos, sin, pairing)
        (grad_in,) = torch.autograd.grad(out, leaf, grad)
        got, got_back = qk_views(out.detach()), qk_views(grad_in)
    else:
        got = [eager.rotate(t, cos, sin, pairing) for t in (q, k)]
        got_back = [eager.rotate(t, cos, sin, pairing, inverse=True) for t in (gq, gk)]
    fwd = max(ulps(o, r, half, pairing) for o, r in zip(got, want))
    bwd = max(ulps(o, r, half, pairing) for o, r in zip(got_back, want_back))
    return {"kernel": kernel, "dtype": str(dtype).split(".")[-1], "pairing": pairing, "table": table,
            "fwd_ulps": fwd, "bwd_ulps": bwd}


def main(argv=None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--kernels", nargs="+", default=["triton", "triton qkv", "eager"])
    p.add_argument("--json", default="")
    args = p.parse_args(argv)
    rows = [measure(kern, dtype, pairing, table, torch.device(args.device)) for kern in args.kernels
            for dtype in DTYPES.values() for pairing in ("half", "interleaved")
            for table in ("1d", "2d grid", "per head", "per sample")]
    print(f"{'kernel':12s}{'dtype':10s}{'worst fwd ulps':>16s}{'worst bwd ulps':>16s}  (over pairings and tables)")
    for kern in args.kernels:
        for name in DTYPES:
            sel = [r for r in rows if r["kernel"] == kern and r["dtype"] == name]
            print(f"{kern:12s}{name:10s}{max(r['fwd_ulps'] for r in sel):16.3f}{max(r['bwd_ulps'] for r in sel):16.3f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"device": args.device, "rows": rows}, indent=1))
    return rows


if __name__ == "__main__":
    main()
