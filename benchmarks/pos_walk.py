"""The walk of one ``PosOut`` through ``ndpe.Attention.forward``: the Python frames of ndpe entered with it among
their arguments (its stays), per file, for a rotation (rope), a bias (alibi), a term after the softmax (erpe) and a
map of q, k, v and the output (gta). Fewer stays: fewer places that pass the encoding on.

    PYTHONPATH=. python benchmarks/pos_walk.py [--names]
"""
from __future__ import annotations

import collections
import os
import sys

import torch

import ndpe

CASES = [("rope", 2, {}), ("alibi", 2, {}), ("erpe", 1, {"length": 6}), ("gta", 2, {})]


def walk(kind: str, dims: int, options: dict) -> tuple[int, dict[str, int], list[str]]:
    """``(stays, stays per file, the functions in call order)`` of one forward of ``ndpe.Attention``."""
    torch.manual_seed(0)
    pe = ndpe.make(dims=dims, kind=kind, dim=32, heads=4, **options)
    grid = (3, 4) if dims == 2 else (6,)
    pos, attn = pe(grid), ndpe.Attention(32, heads=4)
    x = torch.randn(1, pos.num_tokens, 32)
    files: collections.Counter[str] = collections.Counter()
    names: list[str] = []
    root = os.path.dirname(ndpe.__file__)

    def profile(frame, event, arg):
        code = frame.f_code
        if event != "call" or not code.co_filename.startswith(root):
            return
        arguments = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
        if any(frame.f_locals.get(name) is pos for name in arguments):
            files[os.path.relpath(code.co_filename, root)] += 1
            names.append(code.co_name)

    sys.setprofile(profile)
    try:
        attn(x, pos)
    finally:
        sys.setprofile(None)
    return sum(files.values()), dict(files), names


if __name__ == "__main__":
    for kind, dims, options in CASES:
        stays, files, names = walk(kind, dims, options)
        print(f"{kind:6s} {stays:3d} stays  {files}" + (f"\n       {' > '.join(names)}" if "--names" in sys.argv else ""))
