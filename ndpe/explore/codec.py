"""How the explorer stores a map, one byte per value over the map's own range (no map loses levels a reader can
see), and the colours it paints it with.

A map's values are spread over ``[lo, hi]`` (its smallest and largest finite value) in 254 steps: ``lo + q * scale``
with ``q`` in 0 .. 254 and ``scale = (hi - lo) / 254``; 255 stands for a value that is not finite (NaN, -inf: a
masked key). The page's colour maps have 256 colours, so a map packed this way shows every level a colour can: a
map that lives in 8.22 .. 8.41 keeps its detail (a scale from 0 would leave it 3 levels). ``scale`` is also the
page's precision: it prints a map's numbers to the decimals that a step of ``scale`` holds.
"""
from __future__ import annotations

import base64
import math
from typing import Any

import torch
from torch import Tensor

__all__ = ["colour_maps", "pack", "unpack"]

LEVELS = 254  # steps between a map's smallest and largest value; code 255 is "not finite"


def pack(values: Tensor) -> dict[str, Any]:
    """Float values -> ``{"b64", "offset", "scale"}``: uint8 ``round((v - offset) / scale)`` (not finite: 255), base64.

    The page recovers ``v`` within ``scale / 2``.

    >>> p = pack(torch.tensor([8.0, 8.5, 10.54, float("nan")])); p["offset"], round(p["scale"], 6)
    (8.0, 0.01)
    >>> [round(v, 4) for v in unpack(p).tolist()]
    [8.0, 8.5, 10.54, nan]
    """
    v = values.detach().double().flatten()
    finite = v[v.isfinite()]
    lo = float(finite.min()) if finite.numel() else 0.0
    span = float(finite.max()) - lo if finite.numel() else 0.0
    scale = span / LEVELS if span > 0 else 1.0
    q = torch.where(v.isfinite(), ((v - lo) / scale).round().clamp(0, LEVELS), torch.full_like(v, LEVELS + 1.0))
    return {"b64": base64.b64encode(q.to(torch.uint8).numpy().tobytes()).decode("ascii"), "offset": lo, "scale": scale}


def unpack(packed: dict[str, Any]) -> Tensor:
    """The inverse of :func:`pack` (what the page computes): float32, 255 -> NaN."""
    q = torch.frombuffer(bytearray(base64.b64decode(packed["b64"])), dtype=torch.uint8).float()
    return torch.where(q == LEVELS + 1, torch.full_like(q, math.nan), packed["offset"] + q * packed["scale"])


def colour_maps() -> dict[str, Any]:
    """Each quantity's colour map as 256 ``#rrggbb`` (the figures' own maps, sampled by matplotlib)."""
    from ..viz.style import QUANTITIES, lut

    return {name: {"lut": lut(name), "label": q.label, "unit": q.unit, "diverging": q.diverging}
            for name, q in QUANTITIES.items()}
