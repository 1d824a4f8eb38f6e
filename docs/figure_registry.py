"""The registry of docs/make_figures.py: ``@figure("kind", ...)`` registers a figure builder under its function's name
(skipped with a note when a kind it draws is not registered), and the helpers every figure module shares.
"""
from __future__ import annotations

from pathlib import Path

import torch

import ndpe
from ndpe.viz import style

OUT = Path(__file__).parent / "figures"
FIGURES = {}
# line styles / markers of the variants of one kind in one figure (each in its own colour, style.VARIANT_COLOURS):
# the style and marker tell them apart in grey print too
VARIANT_LINES = [("-", "o"), ("--", "v"), (":", "^"), ("-.", "s"), ((0, (3, 1, 1, 1, 1, 1)), "d")]
RELATION = style.colourbar_label("relation", "normalized q.k")  # the colourbar of RoPE's relation maps


def figure(*kinds):
    """Register a figure builder; it is skipped (with a note) when one of ``kinds`` is not registered."""
    def wrap(fn):
        FIGURES[fn.__name__] = (fn, kinds)
        return fn
    return wrap


def seeded(**make_args):
    torch.manual_seed(0)
    return ndpe.make(**make_args).eval()
