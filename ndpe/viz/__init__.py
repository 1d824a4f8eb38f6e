"""Teaching figures: what an encoding looks like and how it behaves when the grid grows.

    ndpe viz --kind sinusoidal --grid 64 --out docs/figures
    ndpe viz --kind rope --grid 8 8 --grow 16 16 --heads 4 --out docs/figures
    ndpe viz --kind learned --grid 8 8 --grow 12 12 --option resize=bicubic

(``python -m ndpe viz``, ``python -m ndpe.viz`` and ``ndpe-viz`` are the same command.)

Everything is computed from the encoding's :class:`~ndpe.PosOut` alone, so it works for every
kind, present or future. :func:`draw` writes, one figure per file, ``<name>_<figure>.png``:

- ``table``: the encoding as a matrix (the classic sinusoidal picture): tokens x channels for
  ``add``/``cat``/``tokens``; tokens x frequencies, ``cos`` of the angle, for ``rot``; query x key for
  ``bias``, ``logits`` and ``rot`` with ``rot_k``.
- ``similarity``: :func:`relation` of the centre token to every token (1D curve, 2D map, 3D: the
  query's frame).
- ``offset``: that relation along axis 0 on a grid 4 times longer, against the offset from the
  query; dotted lines mark the offsets seen on the training grid.
- ``grow`` (with ``grow=``): the relation on the training grid beside a larger grid.
- ``heads`` (when the encoding differs per head: ALiBi slopes, relative tables, RoPE-Mixed):
  the relation for each head.

Content-dependent fields are drawn for fixed content (:class:`Content`: one seeded query vector at every
position, one key vector, one token vector), so the picture shows how they depend on positions alone:
``logits`` is the term for constant q, k (titles say so; a term defined for causal attention only is
blank, NaN, on keys after the query); ``tokens`` is the constant token after the kind's function, drawn
as an ``add`` table and its cosine similarity across positions; ``rot_k`` rotates the keys apart from the
queries, so the relation pairs query i's rotation with key j's (xPos: a decay with the offset).

``--figures`` (``figures=``) picks a subset. A ``PosOut`` with several fields (``ndpe.Combine``) is
shown through one, the first of ``bias, prob_bias, logits, rot, tokens, add, cat`` (:func:`shown_field`). Every map is drawn in
its quantity's colour map (:mod:`ndpe.viz.style`: a relation or a bias red-blue centred on 0, an encoding's values
purple-orange; :func:`quantity_of`, :func:`color_scale`), with one scale for the panels of a figure (per-head panels
included, so heads compare; 2D bias maps outline ``bias = -1``) and a colourbar naming the quantity and its unit; the
grow figure outlines the offsets seen on the training grid and hatches the rest. A kind's curves are drawn in its
colour (:data:`KIND_COLOURS`, as in the benchmark report). The numbers
(:func:`relation`, :func:`table`, :func:`offset_curve`) need only torch (:mod:`ndpe.viz.fields`); the pictures
are drawn in :mod:`ndpe.viz.figures` from the panels of :mod:`ndpe.viz.panels`; :func:`make_figure` and
:func:`show_relation` let a script compose its own figures (``docs/make_figures.py``); the command's arguments are parsed in :mod:`ndpe.cli`.
Pictures need matplotlib: ``pip install "ndpe[viz]"`` (without it, drawing raises
:class:`MissingDependencyError`, a ``ModuleNotFoundError`` whose one-line message names the extra).
"""
from . import style
from .fields import (CONTENT_FIELDS, FIELD_ORDER, KIND_COLOURS, OTHER_COLOUR, Content, as_image, centre_index,
                     color_scale, content_term, encoding_relation, grid_fields, kind_colour, num_heads, offset_curve,
                     quantity_of, relation, shown_field, table)
from .figures import FIGURES, MAX_HEADS_SHOWN, MissingDependencyError, draw, make_figure, require_matplotlib, save
from .panels import mark_trained_range, shades, show_relation, trained_window
from .style import QUANTITIES, Quantity

__all__ = ["CONTENT_FIELDS", "FIELD_ORDER", "FIGURES", "KIND_COLOURS", "MAX_HEADS_SHOWN", "OTHER_COLOUR", "QUANTITIES",
           "Content", "MissingDependencyError", "Quantity", "as_image", "centre_index", "color_scale", "content_term",
           "draw", "encoding_relation", "grid_fields", "kind_colour", "make_figure", "mark_trained_range", "num_heads",
           "offset_curve", "quantity_of", "relation", "require_matplotlib", "save", "shades", "show_relation",
           "shown_field", "style", "table", "trained_window"]
