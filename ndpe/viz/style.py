"""One visual language for every picture of ndpe: one colour map per quantity, shared scales, labelled units.

``ndpe viz`` (:mod:`ndpe.viz.figures`), the guide's figures (``docs/make_figures.py``) and the interactive page read
this module, so a quantity looks the same wherever it is drawn: a relation map of ``rope`` and one of
``rope-mixed`` share a colour map, every bias kind shares another's meaning (0 white, penalties blue), and panels
that are compared share one scale (:func:`scale` fits a single scale to all the values passed). A kind's colour and
marker for curves come from :mod:`ndpe.catalog` (``ndpe.viz.kind_colour``), not from here.

This module imports neither torch nor matplotlib: :func:`scale` reads any array-like (torch tensors, numpy arrays,
nested sequences, numbers), and :func:`lut` imports matplotlib only when called, so a page can paint its canvases
with exactly the colours of the figures.

>>> scale("relation", [0.4, 1.0], [-0.2])
{'cmap': 'RdBu_r', 'vmin': -1.0, 'vmax': 1.0}
>>> scale("count", [3, 7])
{'cmap': 'viridis', 'vmin': 3.0, 'vmax': 7.0}
>>> colourbar_label("bias")
'attention bias [logit]'
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

__all__ = ["BASELINE_COLOUR", "BIAS_CONTOUR", "OUTSIDE_HATCH", "QUANTITIES", "Quantity", "TRAINED_RANGE_COLOUR",
           "VARIANT_COLOURS", "colourbar_label", "lut", "quantity", "scale"]


@dataclass(frozen=True)
class Quantity:
    """A quantity the figures draw as a colour map.

    ``cmap``: the matplotlib colour map's name; ``diverging``: the scale is centred on 0 with symmetric limits (the
    sign means something: white is 0); ``unit``: what one step of the scale is ("" for a dimensionless ratio);
    ``label``: the colourbar's words; ``limits``: a fixed range when the quantity has a natural one (angles),
    else None (fitted to the values drawn).
    """

    name: str
    cmap: str
    diverging: bool
    unit: str
    label: str
    limits: tuple[float, float] | None = None


QUANTITIES: dict[str, Quantity] = {q.name: q for q in (
    # How strongly a query relates to a key through the encoding: rotary kinds' normalized score of content-free q, k
    # (1 at the query), cosine similarity of add / cat encodings, logits and tokens terms for constant content.
    # Diverging: a negative relation (anti-aligned) differs in kind from a weak one, and 0 is "unrelated".
    Quantity("relation", "RdBu_r", True, "", "relation to the query"),
    # An additive attention-logit bias (alibi, fire, cpb, relative, the bias of a combined encoding). The same map as
    # "relation", on purpose: both answer "does attention favour this key?", red for more, blue for less, white for
    # neither, so a reader never relearns the colours between an attention score and a bias; the colourbar's unit
    # (logits) tells the two apart. One map for every bias kind, whatever the sign of its values.
    Quantity("bias", "RdBu_r", True, "logit", "attention bias"),
    # Values of an encoding's table or channel (sinusoidal / learned / coord / fourier vectors, rotary cos): signed
    # numbers with no "favoured" direction, so a diverging map of other hues than the relation's.
    Quantity("encoding", "PuOr_r", True, "", "encoding value"),
    # Rotary angles, wrapped to (-pi, pi]: a cyclic map, so -pi and pi (the same rotation) get the same colour.
    Quantity("angle", "twilight", False, "rad", "rotary angle", (-math.pi, math.pi)),
    # Non-negative amounts: sequential.
    Quantity("count", "viridis", False, "", "count"),
    Quantity("magnitude", "viridis", False, "", "magnitude"),
)}
"""What a figure can draw, by name: its colour map, whether it diverges around 0, its unit and label."""

BIAS_CONTOUR = -1.0
"""The level drawn as a contour on 2D bias maps: a key at bias -1 gets e^-1 (about 0.37) times the attention weight
it would get at bias 0, so the contour shows how wide each head's window is."""

VARIANT_COLOURS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000")
"""Colours of the variants of one thing in one figure (RoPE's scalings, ...): the Okabe-Ito palette, told apart by
readers with any common colour-vision deficiency (its yellow left out: unreadable as a line on white)."""
BASELINE_COLOUR = "#4d4d4d"
"""The colour of the reference a figure's variants are compared with ("no scaling")."""
TRAINED_RANGE_COLOUR = "#000000"
"""The outline of the range of offsets seen at the training size, on a larger grid."""
OUTSIDE_HATCH = "///"
"""The hatch of what lies beyond the trained range."""


def quantity(name: str | Quantity) -> Quantity:
    """The :class:`Quantity` called ``name`` (a Quantity passes through); an unknown name lists the known ones."""
    if isinstance(name, Quantity):
        return name
    try:
        return QUANTITIES[name]
    except KeyError:
        raise ValueError(f"unknown quantity {name!r}; expected one of {sorted(QUANTITIES)}") from None


def _extremes(value: Any) -> tuple[float, float]:
    """``(min, max)`` of the finite numbers in ``value`` (``(inf, -inf)`` when there is none): a torch tensor or a
    numpy array (reduced by its own library, so a large map stays fast), a (nested) sequence or a number."""
    if hasattr(value, "isfinite"):  # a torch tensor, without importing torch
        t = value.detach().float().flatten()
        t = t[t.isfinite()]
        return (float(t.min()), float(t.max())) if t.numel() else (math.inf, -math.inf)
    if hasattr(value, "dtype") and hasattr(value, "ravel"):  # a numpy array (numpy is there when one exists)
        import numpy

        array = numpy.asarray(value, dtype=float).ravel()
        array = array[numpy.isfinite(array)]
        return (float(array.min()), float(array.max())) if array.size else (math.inf, -math.inf)
    if isinstance(value, (int, float)):
        x = float(value)
        return (x, x) if math.isfinite(x) else (math.inf, -math.inf)
    lo, hi = math.inf, -math.inf
    for item in value:
        item_lo, item_hi = _extremes(item)
        lo, hi = min(lo, item_lo), max(hi, item_hi)
    return lo, hi


def scale(name: str | Quantity, *values: Any) -> dict:
    """``imshow`` keywords ``{"cmap", "vmin", "vmax"}`` for quantity ``name``, one scale for all ``values``.

    Pass every map that is compared (the panels of one figure) in one call: they then share the scale. A
    diverging quantity is centred on 0 with symmetric limits ``+-max|v|``; a sequential one spans the values' range;
    a quantity with fixed ``limits`` (angles) ignores the values. NaN and inf (blanked keys, masks) are left out; a
    constant map gets a range around its value (``+-1`` when it is 0 and diverging).

    >>> scale("bias", [-3.0, -0.5, 0.0])
    {'cmap': 'RdBu_r', 'vmin': -3.0, 'vmax': 3.0}
    >>> scale("relation", [float("nan"), 0.0])
    {'cmap': 'RdBu_r', 'vmin': -1.0, 'vmax': 1.0}
    >>> scale("magnitude", [2.0, 2.0])
    {'cmap': 'viridis', 'vmin': 1.5, 'vmax': 2.5}
    """
    q = quantity(name)
    if q.limits is not None:
        return {"cmap": q.cmap, "vmin": q.limits[0], "vmax": q.limits[1]}
    lo, hi = _extremes(values)
    if lo > hi:  # nothing finite to fit
        lo = hi = 0.0
    if q.diverging:
        m = max(-lo, hi)
        m = m if m > 0 else 1.0
        return {"cmap": q.cmap, "vmin": -m, "vmax": m}
    if hi - lo <= 1e-6 * max(1.0, abs(hi)):  # a constant map: a small range around it
        lo, hi = lo - 0.5, hi + 0.5
    return {"cmap": q.cmap, "vmin": lo, "vmax": hi}


def colourbar_label(name: str | Quantity, detail: str | None = None) -> str:
    """The colourbar's label: the quantity's words, ``detail`` (how it is measured here) and its unit in brackets.

    >>> colourbar_label("relation", "cosine similarity")
    'relation to the query (cosine similarity)'
    """
    q = quantity(name)
    text = q.label if not detail or detail == q.label else f"{q.label} ({detail})"
    return f"{text} [{q.unit}]" if q.unit else text


def lut(name: str | Quantity, n: int = 256) -> list[str]:
    """``n`` colours ``"#rrggbb"`` sampling the colour map of quantity (or matplotlib colour map) ``name`` evenly
    from its low end (``vmin``) to its high end (``vmax``). With ``n = 256`` they are the colour map's own entries,
    and a page painting value ``v`` with entry ``min(n - 1, floor(t * n))``, ``t = (v - vmin) / (vmax - vmin)``
    clipped to [0, 1], picks what matplotlib picks: the figures' colours exactly. Needs matplotlib.
    """
    from matplotlib import colormaps
    from matplotlib.colors import to_hex

    if n < 2:
        raise ValueError(f"a lookup table needs n >= 2 colours, got {n}")
    if isinstance(name, Quantity):
        cmap_name = name.cmap
    else:  # a quantity's name, else a colour map's (an unknown one: matplotlib's error lists the valid names)
        cmap_name = QUANTITIES[name].cmap if name in QUANTITIES else name
    cmap = colormaps[cmap_name]
    return [to_hex(cmap(i / (n - 1))) for i in range(n)]
