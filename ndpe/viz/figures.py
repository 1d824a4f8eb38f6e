"""The teaching figures drawn with matplotlib, from the numbers of :mod:`ndpe.viz.fields`.

:func:`draw` writes every figure of an encoding; :func:`make_figure` makes one, from the panels of
:mod:`ndpe.viz.panels` (:func:`show_relation`, :func:`shades`, ...), with which a script composes its own
(``docs/make_figures.py``). Without matplotlib, drawing raises :class:`MissingDependencyError` naming the ``viz``
extra.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import cast

import torch
from torch import Tensor

from ..contract import LogitsTerm, PosOut
from .fields import (FIELD_ORDER, Content, centre_index, color_scale, content_of, encoding_relation, is_pairwise,
                     kind_colour, num_heads, offset_curve, quantity_of, relation, shown_field, table)
from .panels import (axis_names, bias_contour, mark_trained_range, shade_outside, shades, show_relation,
                     trained_window)
from .style import colourbar_label

MAX_HEADS_SHOWN = 8
"""The most heads a ``heads`` figure draws, one panel each."""


class MissingDependencyError(ModuleNotFoundError):
    """An optional dependency is not installed; the message says which extra brings it."""


def require_matplotlib() -> None:
    """Raise :class:`MissingDependencyError` (naming the ``viz`` extra) when matplotlib cannot be imported."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as err:
        raise MissingDependencyError('drawing figures needs matplotlib, which is not installed: '
                                     'pip install "ndpe[viz]"', name="matplotlib") from err


def _style(pos: PosOut, *values: Tensor) -> dict:
    """Colour scale of ``pos``'s relation maps: its quantity's (:func:`quantity_of`), one scale for all ``values``."""
    return color_scale(*values, pos=pos)


def _colourbar_label(pos: PosOut) -> str:
    """The colourbar label of ``pos``'s relation maps: the quantity's words and unit, and how it is measured."""
    return colourbar_label(quantity_of(pos), _what(pos))


def _table_figure(pos: PosOut, name: str, grid: tuple[int, ...], content: Content | None = None):
    import matplotlib.pyplot as plt

    values, field = table(pos, content=content), shown_field(pos)
    heads = num_heads(pos, content=content)
    # query x key maps are relations (or a bias); tokens x channels tables are values of the encoding
    quantity = quantity_of(pos) if is_pairwise(pos) else "encoding"
    fig, ax = plt.subplots(figsize=(6, 4.5), layout="constrained")
    if is_pairwise(pos):  # bias, logits, or rot with rot_k: query x key, blank (NaN) where a causal term has none
        image = ax.imshow(values.numpy(), interpolation="nearest", **color_scale(values, quantity=quantity))
        ax.set(xlabel="key token (row-major)", ylabel="query token (row-major)")
        if quantity == "bias" and len(grid) == 1:  # a 1D grid's keys in order: the contour is each query's window
            bias_contour(ax, values)
    else:
        image = ax.imshow(values.numpy(), aspect="auto", interpolation="nearest",
                          **color_scale(values, quantity=quantity))
        ax.set(xlabel="frequency pair" if field == "rot" else "channel", ylabel="grid token (row-major)")
    what = {"rot": "rot, cos(angle)", "tokens": "a constant token after the tokens term",
            "logits": "logits term for constant q, k", "frame": "q.k for constant q, k in each token's frame"}.get(
        field, field)
    if field == "rot" and pos.rot_k is not None:
        what = "q_i.k_j of content-free q, k (keys rotated by rot_k)"
    what += (f", head 0 of {heads}" if heads > 1 else "") + _causal_note(pos)
    ax.set_title(f"{name}: {what}, grid {grid}")
    if len(what) > 40:  # long (content terms, rot_k): the default title size would not fit
        ax.title.set_fontsize(10)
    fig.colorbar(image, ax=ax, label=colourbar_label(quantity, _table_label(pos)))
    return fig


def _table_label(pos: PosOut) -> str:
    field = shown_field(pos)
    if field == "rot":
        return "q.k (1 at i = j)" if pos.rot_k is not None else "cos(angle)"
    return {"bias": "attention bias", "prob_bias": "term after softmax", "logits": "logits term",
            "tokens": "transformed token", "frame": "logit q.k / sqrt(d)"}.get(field, field)


def _causal_note(pos: PosOut) -> str:
    """A title's note that keys after the query are blank (a logits term defined for causal attention only)."""
    shown = shown_field(pos) == "logits" and cast(LogitsTerm, pos.logits).causal_only
    return "\n(causal only: keys after the query blank)" if shown else ""


def _contour_note(pos: PosOut, grid: tuple[int, ...]) -> str:
    """A title's note saying what the contour of a 2D bias map is."""
    return "; black line: bias = -1" if quantity_of(pos) == "bias" and len(grid) > 1 else ""


def _similarity_figure(pos: PosOut, name: str, grid: tuple[int, ...], colour=None, content: Content | None = None):
    import matplotlib.pyplot as plt

    query = centre_index(grid)
    fig, ax = plt.subplots(figsize=(5.5, 4.2) if len(grid) > 1 else (6, 3.6), layout="constrained")
    values = relation(pos, query, content=content)
    image = show_relation(ax, values, grid, query, _style(pos, values), color=colour, quantity=quantity_of(pos))
    if image is not None:
        fig.colorbar(image, ax=ax, label=_colourbar_label(pos))
    where = f"frame {grid[0] // 2}, " if len(grid) == 3 else ""
    ax.set_title(f"{name}: relation to the centre token\n({where}grid {grid}, {_what(pos)}{_contour_note(pos, grid)})"
                 f"{_causal_note(pos)}", fontsize=10)
    return fig


def _offset_figure(pe, name: str, grid: tuple[int, ...], colour=None):
    import matplotlib.pyplot as plt

    offsets, values = offset_curve(pe, grid)
    fig, ax = plt.subplots(figsize=(6, 3.6), layout="constrained")
    ax.plot(offsets.numpy(), values.numpy(), marker=".", ms=3, color=colour)
    for x in (-(grid[0] - 1), grid[0] - 1):
        ax.axvline(x, color="gray", ls=":", lw=1)
    shade_outside(ax, -(grid[0] - 1), grid[0] - 1)
    pos = pe(grid)
    ax.set(xlabel="offset along axis 0 (key - query)", ylabel=_ylabel("relation", pos),
           title=f"{name}: relation vs offset on a 4x longer axis 0\n(hatched: offsets beyond those of grid {grid})"
                 f"{_causal_note(pos)}")
    ax.title.set_fontsize(10)
    return fig


def _grow_figure(pe, pos: PosOut, name: str, grid: tuple[int, ...], grow: tuple[int, ...]):
    """The relation on the training grid beside the grown grid, on one scale; on the grown grid the offsets seen at
    the training size are outlined (dashed) and the others hatched: there the encoding extrapolates."""
    import matplotlib.pyplot as plt

    if len(grid) == 1:
        fig, ax = plt.subplots(figsize=(6, 3.6), layout="constrained")
        for g, colour, ls in zip((grid, grow), shades(getattr(pe, "kind", None), 3)[1:], ("-", "--")):
            q = centre_index(g)
            ax.plot(torch.arange(g[0]) - q, encoding_relation(pe, g, q).numpy(), marker=".", ms=3, label=f"grid {g}",
                    color=colour, ls=ls)
        q = centre_index(grow)
        (lo, hi), = trained_window(pe, grid, grow, q)
        shade_outside(ax, lo - q - 0.5, hi - q + 0.5)
        ax.set(xlabel="offset from the centre token", ylabel=_ylabel("relation", pos),
               title=f"{name}: relation as the grid grows\n(hatched: offsets not seen on grid {grid})"
                     f"{_causal_note(pos)}")
        ax.title.set_fontsize(10)
        ax.legend()
        return fig
    rel = {g: encoding_relation(pe, g, centre_index(g)) for g in (grid, grow)}
    scale = _style(pos, *rel.values())  # one colour scale for both panels
    fig, axes = plt.subplots(1, 2, figsize=(9, 4.2), gridspec_kw={"width_ratios": [grid[-1], grow[-1]]},
                             layout="constrained")
    for ax, (g, r) in zip(axes, rel.items()):
        image = show_relation(ax, r, g, centre_index(g), scale, quantity=quantity_of(pos))
        ax.set_title(f"grid {g}" + (f", frame {g[0] // 2}" if len(g) == 3 else ""))
    window = trained_window(pe, grid, grow, centre_index(grow))[-2:]  # rows, cols of the map (3D: the query's frame)
    mark_trained_range(axes[1], window, (grow[-2], grow[-1]))
    axes[1].set_title(axes[1].get_title() + "\ndashed: offsets seen on the training grid", fontsize=9)
    fig.colorbar(image, ax=axes, shrink=0.8, label=_colourbar_label(pos))
    fig.suptitle(f"{name}: relation to the centre token as the grid grows ({_what(pos)}; hatched: "
                 f"extrapolation{_contour_note(pos, grid)})", fontsize=10)
    return fig


def _heads_figure(pos: PosOut, name: str, grid: tuple[int, ...], kind: str | None = None,
                  content: Content | None = None):
    """One panel per head on ONE colour scale (so heads compare: ALiBi's slopes show as different widths), one
    colourbar; 2D bias maps get the ``bias = -1`` contour."""
    import matplotlib.pyplot as plt

    heads = min(num_heads(pos, content=content), MAX_HEADS_SHOWN)
    query = centre_index(grid)
    rows = [relation(pos, query, head=h, content=content) for h in range(heads)]
    if len(grid) == 1:
        fig, ax = plt.subplots(figsize=(6, 3.8), layout="constrained")
        for h, (r, colour) in enumerate(zip(rows, shades(kind, heads))):
            show_relation(ax, r, grid, query, label=f"head {h}", color=colour)
        ax.set_ylabel(_ylabel("relation to the query", pos))
        ax.legend(fontsize=7, ncol=2, loc="lower center")
        ax.set_title(f"{name}: relation to the centre token, per head{_causal_note(pos)}", fontsize=10)
        return fig
    cols = min(heads, 4)
    nrows = math.ceil(heads / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(3.0 * cols + 1.2, 2.9 * nrows + 0.6), squeeze=False,
                             layout="constrained")
    names = axis_names(len(grid))
    scale = _style(pos, *rows)  # shared by every head
    images = []
    for h, ax in enumerate(axes.flat):
        if h >= heads:
            ax.axis("off")
            continue
        images.append(show_relation(ax, rows[h], grid, query, scale, quantity=quantity_of(pos)))
        ax.set_title(f"head {h}" + (f", frame {grid[0] // 2}" if len(grid) == 3 else ""), fontsize=9)
        ax.set_xlabel(names[-1], fontsize=8)
        ax.set_ylabel(names[-2], fontsize=8)
    fig.colorbar(images[0], ax=axes, shrink=0.85, label=_colourbar_label(pos))  # one scale: any head's image
    gap = "\n" if cols < 3 else " "  # two panels are too narrow for the title on one line
    fig.suptitle(f"{name}: relation to the centre token, per head{gap}({_what(pos)}; one colour scale for all heads"
                 f"{_contour_note(pos, grid)}){_causal_note(pos)}", fontsize=10)
    return fig


def _ylabel(text: str, pos: PosOut) -> str:
    """``text (what)`` as an axis label, on two lines when :func:`_what` is long."""
    what = _what(pos)
    return f"{text}\n({what})" if len(what) > 25 else f"{text} ({what})"


def _what(pos: PosOut) -> str:
    """What :func:`relation` measures for ``pos`` (figure labels)."""
    field = shown_field(pos)
    if field == "rot" and pos.rot_k is not None:
        return "q.k of content-free q, k; keys by rot_k"
    return {"bias": "attention bias", "rot": "q.k of content-free q, k", "logits": "logits term for constant q, k",
            "frame": "logits for constant q, k (frames)", "tokens": "cosine sim. of a constant token",
            "prob_bias": "term added after the softmax"}.get(
        field, "cosine similarity")


FIGURES = ("table", "similarity", "offset", "grow", "heads")
"""The figures :func:`draw` makes (``ndpe viz --figures``)."""


def make_figure(figure: str, pe, grid: tuple[int, ...], *, grow: tuple[int, ...] | None = None,
                name: str | None = None):
    """One of :data:`FIGURES` for encoding ``pe`` on ``grid`` as a matplotlib Figure (``grow`` for ``"grow"``)."""
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    grid = tuple(grid)
    name = name or f"{pe.kind}_{len(grid)}d"
    kind = getattr(pe, "kind", None)
    content = content_of(pe, grid)
    with torch.no_grad():
        pos = pe(grid)
        check_finite(pos, name, grid)
        if figure == "table":
            return _table_figure(pos, name, grid, content)
        if figure == "similarity":
            return _similarity_figure(pos, name, grid, kind_colour(kind), content)
        if figure == "offset":
            return _offset_figure(pe, name, grid, kind_colour(kind))
        if figure == "grow":
            if grow is None or len(grow) != len(grid):
                raise ValueError(f"the grow figure needs grow= with one size per axis of grid {grid}, got {grow}")
            check_finite(pe(tuple(grow)), name, tuple(grow))
            return _grow_figure(pe, pos, name, grid, tuple(grow))
        if figure == "heads":
            return _heads_figure(pos, name, grid, kind, content)
    raise ValueError(f"figure must be one of {FIGURES}, got {figure!r}")


class NonFinite(ValueError):
    """The encoding gave inf or NaN: a picture of it would show nothing true (``ndpe viz`` fails on it)."""


def check_finite(pos: PosOut, name: str, grid: tuple[int, ...]) -> None:
    """Refuse (:class:`NonFinite`, one line) an output with an inf or NaN value in any field."""
    for field in FIELD_ORDER:
        value = getattr(pos, field)
        for t in value if isinstance(value, tuple) else (value,):
            if isinstance(t, Tensor) and t.is_floating_point() and not bool(torch.isfinite(t).all()):
                raise NonFinite(f"{name}: the encoding's {field} has inf or NaN values on grid {grid}; no figure "
                                "drawn (an option out of its working range?)")


def check_prefix(name: str) -> str:
    """``name`` if it is a plain file-name prefix (no folder: every figure stays in ``out_dir``); raise otherwise.

    >>> check_prefix("rope_2d")
    'rope_2d'
    """
    if not isinstance(name, str) or any(c in name for c in "/\\\0"):
        raise ValueError(f"name {name!r} must be a file name prefix without folders (e.g. rope_2d): the figures are "
                         "written in the output folder only")
    return name


def draw(pe, grid: tuple[int, ...], grow: tuple[int, ...] | None = None, out_dir: Path = Path("figures"),
         name: str | None = None, figures: tuple[str, ...] = FIGURES) -> list[Path]:
    """Write the figures of encoding ``pe`` on ``grid`` (and ``grow``) to ``out_dir``; return their paths.

    Files are ``<name>_table.png``, ``_similarity.png``, ``_offset.png``, ``_grow.png`` (with ``grow``)
    and ``_heads.png`` (when heads differ); ``name`` (a file name prefix, no folder) defaults to ``<kind>_<dims>d``. A figure the
    encoding cannot make (a larger grid for a learned table without ``resize``) is skipped with a
    printed note; an encoding that outputs nothing (``none``) gives no figures. ``figures`` picks
    a subset of :data:`FIGURES`. Runs ``pe`` in eval mode (no position augmentation).
    """
    unknown = sorted(set(figures) - set(FIGURES))
    if unknown:
        raise ValueError(f"unknown figure(s) {unknown}; expected a subset of {FIGURES}")
    require_matplotlib()  # before anything is computed or created
    grid = tuple(grid)
    name = check_prefix(name) if name else f"{pe.kind}_{len(grid)}d"
    out_dir = Path(out_dir)
    was_training = pe.training
    pe.eval()
    try:
        with torch.no_grad():
            pos = pe(grid)
        check_finite(pos, name, grid)
        if all(getattr(pos, f) is None for f in FIELD_ORDER):
            print(f"{name}: the encoding outputs nothing; no figures")
            return []
        applies = {"grow": grow is not None, "heads": num_heads(pos, content=content_of(pe, grid)) > 1}
        wanted = [f for f in FIGURES if f in figures and applies.get(f, True)]
        paths = []
        for figure in wanted:
            try:
                fig = make_figure(figure, pe, grid, grow=grow, name=name)
            except NonFinite:
                raise
            except ValueError as err:  # the encoding refuses a larger grid
                print(f"{name}: skipped the {figure} figure: {err}")
                continue
            out_dir.mkdir(parents=True, exist_ok=True)  # only once there is a figure to write
            paths.append(save(fig, out_dir / f"{name}_{figure}.png"))
        return paths
    finally:
        pe.train(was_training)


def save(fig, path: Path, dpi: int = 90) -> Path:
    """Save ``fig`` as a PNG at ``path`` and close it."""
    import matplotlib.pyplot as plt

    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return Path(path)
