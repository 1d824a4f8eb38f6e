"""The ``"compile"`` RoPE kernel: the reference formula compiled by Inductor (forward and backward fused).

It compiles the function it is given (``ndpe.functional`` passes its reference formula), so this
module holds no formula of its own and imports nothing back.
"""
from __future__ import annotations

import functools
from typing import Callable

import torch


@functools.cache
def compiled(fn: Callable) -> Callable:
    """``fn`` under ``torch.compile(fullgraph=True)`` with automatic dynamic shapes: the first shape gets a
    graph specialized to it (the fastest code; compare the "compiled half" and "dynamic B and N" rows of
    bench_rope.py), the first new shape one dynamic graph that every later size reuses."""
    return torch.compile(fn, fullgraph=True)
