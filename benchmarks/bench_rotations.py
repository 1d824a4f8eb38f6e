"""Time and memory of the learned rotations (``string``, ``liere``, ``comrope``), ``vrope`` and the camera kinds
(``gta``, ``prope``, their default ring of cameras) beside ``rope``: one attention layer at ViT-S (14 x 14 patches) and
on video (8 x 14 x 14 tubelets; for the camera kinds, 8 views), side by side in the same rounds.

One call = ``pe(grid)`` (LieRE's and ComRoPE's matrix exponentials are built there, once per forward) then one attention
layer: ``apply_qk`` + ``attn_bias`` (their ``(B, heads, N, N)`` term) + ``apply_v`` + SDPA + ``apply_out`` (the camera
kinds' frame), forward only. Memory: the bytes of the tensors each kind builds, read off them (LieRE's and ComRoPE's
rotations ``R`` and term; rope's cos/sin; the frames). A kind
that does not take a grid's dims (``comrope`` AP needs ``dims * block_size`` to divide head_dim 64; ``vrope`` is 3D)
is left out of that grid. Run from the repository root:

    python benchmarks/bench_rotations.py --threads 1 --repeats 5 --json rotations.json
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_rope import clock, save_json, time_interleaved  # noqa: E402  (same folder)

import ndpe  # noqa: E402

CASES = {"vit-s 14x14": ((14, 14), 384, 6), "video 8x14x14": ((8, 14, 14), 384, 6)}
KINDS = {"rope": {}, "string (cayley)": {"init_std": 0.1}, "string (circulant)": {"orthogonal": "circulant", "init_std": 0.1},
         "liere (blocks of 8)": {"block_size": 8}, "liere (dense)": {},
         "comrope (ld, blocks of 8)": {"block_size": 8}, "comrope (ap, blocks of 8)": {"variant": "ap", "block_size": 8},
         "vrope": {}, "gta": {}, "prope": {}}
ONLY = {"comrope (ap, blocks of 8)": (2,), "vrope": (3,)}  # the grids' dims a kind takes (default: every one)


def get_args_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--clock", choices=["wall", "cpu"], default=None)
    p.add_argument("--json", default=None)
    return p


def built_bytes(pe, grid, q, k) -> int:
    """Bytes of what the kind builds for one layer: its PosOut tensors and, for a logits kind, its term."""
    pos = pe(grid)
    tensors = [t for pair in (pos.rot or ()) for t in (pair if isinstance(pair, tuple) else (pair,))]
    tensors += [pos.basis] if pos.basis is not None else []
    tensors += list(pos.frame) if pos.frame is not None else []
    total = sum(t.numel() * t.element_size() for t in tensors)
    if pos.logits is not None:
        from ndpe.kinds.liere import LieRE
        if isinstance(pe, LieRE):
            total += pe._rotations(pe.coords(grid)).numel() * 4
        total += pos.logits(q, k).numel() * 4
    return total


def main(args) -> dict:
    torch.set_num_threads(args.threads)
    results: dict = {}
    for case, (grid, dim, heads) in CASES.items():
        n = 1
        for s in grid:
            n *= s
        q, k, v = (torch.randn(args.batch, heads, n, dim // heads) for _ in range(3))
        steps, sizes = {}, {}
        names = [name for name in KINDS if len(grid) in ONLY.get(name, (len(grid),))]
        for name in names:
            opts, kind = KINDS[name], name.split()[0]
            torch.manual_seed(0)
            pe = ndpe.make(dims=len(grid), kind=kind, dim=dim, heads=heads, **opts).eval()

            def step(pe=pe):
                with torch.no_grad():
                    pos = pe(grid)
                    rq, rk = ndpe.apply_qk(q, k, pos)
                    out = F.scaled_dot_product_attention(rq, rk, ndpe.apply_v(v, pos),
                                                         attn_mask=ndpe.attn_bias(pos, q=rq, k=rk))
                    ndpe.apply_out(out, pos)
            steps[name] = step
            with torch.no_grad():
                sizes[name] = built_bytes(pe, grid, q, k)
        times = time_interleaved(steps, args.repeats, torch.device("cpu"), clock(args.clock), warmup=1)
        results[case] = {name: {"seconds": times[name], "bytes": sizes[name], "x rope": times[name] / times["rope"]}
                         for name in names}
        for name, r in results[case].items():
            print(f"{case:14s} {name:26s} {r['seconds'] * 1e3:9.1f} ms  x{r['x rope']:7.1f}  "
                  f"{r['bytes'] / 2 ** 20:9.2f} MiB", flush=True)
    save_json(args, results)
    return results


if __name__ == "__main__":
    main(get_args_parser().parse_args())
