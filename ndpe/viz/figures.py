"""The teaching figures drawn with matplotlib, from the numbers of :mod:`ndpe.viz.fields`.

:func:`draw` writes every figure of an encoding; :func:`make_figure` makes one; :func:`show_relation` and
:func:`shades` let a script compose its own (``docs/make_figures.py``). Without matplotlib, drawing raises
:class:`MissingDependencyError` naming the ``viz`` extra.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import cast

import torch
from torch import Tensor

from ..contract import LogitsTerm, PosOut
from .style import BIAS_CONTOUR, OUTSIDE_HATCH, TRAINED_RANGE_COLOUR, colourbar_label
from .fields import (FIELD_ORDER, Content, as_image, centre_index, color_scale, content_of, encoding_relation,
                     is_pairwise, kind_colour, num_heads, offset_curve, quantity_of, relation, shown_field, table)

MAX_HEADS_SHOWN = 8


class MissingDependencyError(ModuleNotFoundError):
    """An optional dependency is not installed; the message says which extra brings it."""


def require_matplotlib() -> None:
    """Raise :class:`MissingDependencyError` (naming the ``viz`` extra) when matplotlib cannot be imported."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as err:
        raise MissingDependencyError('drawing figures needs matplotlib, which is not installed: '
                                     'pip install "ndpe[viz]"', name="matplotlib") from err


def shades(kind: str | None, n: int) -> list:
    """``n`` shades of ``kind``'s colour, dark to light (one per head or variant of a single kind)."""
    from matplotlib.colors import to_rgb

    base = to_rgb(kind_colour(kind))
    darkest = tuple(0.45 * c for c in base)
    out = []
    for i in range(n):
        t = i / max(n - 1, 1) * 1.6  # 0: dark, 0.8: the kind's colour, 1.6: light
        if t <= 0.8:
            mix = t / 0.8
            out.append(tuple(d + (b - d) * mix for d, b in zip(darkest, base)))
        else:
            mix = (t - 0.8) / 0.8 * 0.75
            out.append(tuple(b + (1.0 - b) * mix for b in base))
    return out


def _style(pos: PosOut, *values: Tensor) -> dict:
    """Colour scale of ``pos``'s relation maps: its quantity's (:func:`quantity_of`), one scale for all ``values``."""
    return color_scale(*values, pos=pos)


def _colourbar_label(pos: PosOut) -> str:
    """The colourbar label of ``pos``'s relation maps: the quantity's words and unit, and how it is measured."""
    return colourbar_label(quantity_of(pos), _what(pos))


def _axis_names(dims: int) -> tuple[str, ...]:
    return {1: ("position",), 2: ("row (axis 0)", "column (axis 1)"),
            3: ("frame (axis 0)", "row (axis 1)", "column (axis 2)")}[dims]


def show_relation(ax, values: Tensor, grid: tuple[int, ...], query: int, style: dict | None = None,
                  label: str | None = None, color=None, quantity: str = "relation"):
    """Draw a relation ``(N,)`` on ``ax``: a curve (1D, in ``color``) or a map with the query marked (2D, 3D: its
    frame) in ``style`` (``imshow`` keywords; default: ``quantity``'s scale fitted to ``values``, see
    :func:`ndpe.viz.style.scale`). A ``"bias"`` map gets the ``bias = -1`` contour (:func:`bias_contour`)."""
    if len(grid) == 1:
        ax.plot(values.detach().numpy(), label=label, color=color)
        if bool(values.isnan().any()):  # blank keys (a causal-only term): still show every key position
            ax.set_xlim(-0.5, values.shape[0] - 0.5)
        ax.axvline(query, color="gray", ls=":", lw=1)
        ax.set(xlabel="key position", ylabel="relation to the query")
        return None
    style = color_scale(values, quantity=quantity) if style is None else style
    coord = list(torch.unravel_index(torch.tensor(query), grid))
    frame = int(coord[0]) if len(grid) == 3 else None
    picture = as_image(values.detach(), grid, frame)
    image = ax.imshow(picture.numpy(), interpolation="nearest", **style)
    if quantity == "bias":
        bias_contour(ax, picture)
    from matplotlib.patheffects import withStroke
    from matplotlib.ticker import MaxNLocator

    # the query: black with a white rim, visible on the dark and the light ends of a map
    ax.plot(int(coord[-1]), int(coord[-2]), "k+", ms=8, mew=1.5, path_effects=[withStroke(linewidth=3, foreground="w")])

    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_locator(MaxNLocator(integer=True))
    names = _axis_names(len(grid))
    ax.set(xlabel=names[-1], ylabel=names[-2])
    return image


def bias_contour(ax, picture: Tensor, level: float = BIAS_CONTOUR):
    """Draw the contour ``bias = level`` (default -1: the keys whose attention weight is ``1/e`` of a key at bias 0)
    on a 2D bias map ``picture`` on ``ax`` when the map reaches it; returns the contour set, or None."""
    finite = picture[picture.isfinite()]
    if finite.numel() == 0 or not float(finite.min()) < level < float(finite.max()):
        return None
    return ax.contour(picture.nan_to_num(nan=0.0).numpy(), levels=[level], colors="k", linewidths=1.0)


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
            "logits": "logits term for constant q, k"}.get(field, field)
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
    return {"bias": "attention bias", "logits": "logits term", "tokens": "transformed token"}.get(field, field)


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


def _shade_outside(ax, lo: float, hi: float) -> None:
    """On a curve against the offset, hatch the offsets outside ``[lo, hi]`` (those not seen at training)."""
    left, right = ax.get_xlim()
    for a, b in ((left, lo), (hi, right)):
        if b > a:
            ax.axvspan(a, b, facecolor="0.92", edgecolor="0.6", hatch=OUTSIDE_HATCH, lw=0, zorder=0,
                       gid="outside-trained")
    ax.set_xlim(left, right)


def _offset_figure(pe, name: str, grid: tuple[int, ...], colour=None):
    import matplotlib.pyplot as plt

    offsets, values = offset_curve(pe, grid)
    fig, ax = plt.subplots(figsize=(6, 3.6), layout="constrained")
    ax.plot(offsets.numpy(), values.numpy(), marker=".", ms=3, color=colour)
    for x in (-(grid[0] - 1), grid[0] - 1):
        ax.axvline(x, color="gray", ls=":", lw=1)
    _shade_outside(ax, -(grid[0] - 1), grid[0] - 1)
    pos = pe(grid)
    ax.set(xlabel="offset along axis 0 (key - query)", ylabel=_ylabel("relation", pos),
           title=f"{name}: relation vs offset on a 4x longer axis 0\n(hatched: offsets beyond those of grid {grid})"
                 f"{_causal_note(pos)}")
    ax.title.set_fontsize(10)
    return fig


def trained_window(pe, train_grid: tuple[int, ...], grid: tuple[int, ...], query: int,
                   stretch: float = 1.0) -> list[tuple[int, int]]:
    """Per axis of ``grid``, the first and last index of the keys whose offset from grid token ``query`` along that
    axis was seen on ``train_grid``: at most the extent of the training grid's coordinates there (``pe.coords``, in
    the kind's units: index coordinates reach ``n - 1``, pixel and centred ones keep their extent as the grid
    grows), times ``stretch`` (position interpolation by ``s`` divides every angle by ``s``: ``stretch=s``).

    >>> import ndpe
    >>> trained_window(ndpe.make(dims=2, kind="rope", dim=16), (4, 4), (12, 12), centre_index((12, 12)))
    [(3, 9), (3, 9)]
    >>> trained_window(ndpe.make(dims=1, kind="rope", dim=16, coords="pixel"), (4,), (12,), 6)
    [(0, 11)]
    """
    dims = len(grid)
    coords = getattr(pe, "coords", None)
    if callable(coords):
        train, grown = coords(train_grid).float().cpu(), coords(grid).float().cpu()
    else:  # an encoding without coordinates of its own: grid indices
        train = torch.stack(torch.meshgrid(*(torch.arange(n, dtype=torch.float32) for n in train_grid),
                                           indexing="ij"), -1).reshape(-1, dims)
        grown = torch.stack(torch.meshgrid(*(torch.arange(n, dtype=torch.float32) for n in grid),
                                           indexing="ij"), -1).reshape(-1, dims)
    grown = grown.reshape(*grid, dims)
    where = [int(i) for i in torch.unravel_index(torch.tensor(query), grid)]
    window = []
    for a in range(dims):
        reach = float(train[:, a].max() - train[:, a].min()) * stretch
        line = grown[tuple(slice(None) if b == a else 0 for b in range(dims))][:, a]  # axis a's coordinates
        inside = ((line - line[where[a]]).abs() <= reach * (1 + 1e-6) + 1e-9).nonzero().flatten()
        window.append((int(inside.min()), int(inside.max())))
    return window


def mark_trained_range(ax, window: list[tuple[int, int]], shape: tuple[int, int]):
    """On a map of ``shape`` (rows, cols) on ``ax``, outline the keys inside ``window`` (rows, cols: first and last
    index, :func:`trained_window`) and hatch those outside; returns the outline (a Rectangle, gid
    ``"trained-offsets"``)."""
    from matplotlib.patches import Rectangle

    (r0, r1), (c0, c1) = window
    rows, cols = shape
    bands = [(-0.5, -0.5, cols, r0), (-0.5, r1 + 0.5, cols, rows - 1 - r1),  # above, below
             (-0.5, r0 - 0.5, c0, r1 - r0 + 1), (c1 + 0.5, r0 - 0.5, cols - 1 - c1, r1 - r0 + 1)]  # left, right
    for x, y, w, h in bands:
        if w > 0 and h > 0:
            ax.add_patch(Rectangle((x, y), w, h, fill=False, hatch=OUTSIDE_HATCH, edgecolor="0.35", lw=0,
                                   gid="outside-trained"))
    outline = Rectangle((c0 - 0.5, r0 - 0.5), c1 - c0 + 1, r1 - r0 + 1, fill=False, lw=1.8, ls="--",
                        edgecolor=TRAINED_RANGE_COLOUR, gid="trained-offsets")
    ax.add_patch(outline)
    return outline


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
        _shade_outside(ax, lo - q - 0.5, hi - q + 0.5)
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
    names = _axis_names(len(grid))
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
            "tokens": "cosine sim. of a constant token"}.get(field, "cosine similarity")


FIGURES = ("table", "similarity", "offset", "grow", "heads")


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


def draw(pe, grid: tuple[int, ...], grow: tuple[int, ...] | None = None, out_dir: Path = Path("figures"),
         name: str | None = None, figures: tuple[str, ...] = FIGURES) -> list[Path]:
    """Write the figures of encoding ``pe`` on ``grid`` (and ``grow``) to ``out_dir``; return their paths.

    Files are ``<name>_table.png``, ``_similarity.png``, ``_offset.png``, ``_grow.png`` (with ``grow``)
    and ``_heads.png`` (when heads differ); ``name`` defaults to ``<kind>_<dims>d``. A figure the
    encoding cannot make (a larger grid for a learned table without ``resize``) is skipped with a
    printed note; an encoding that outputs nothing (``none``) gives no figures. ``figures`` picks
    a subset of :data:`FIGURES`. Runs ``pe`` in eval mode (no position augmentation).
    """
    unknown = sorted(set(figures) - set(FIGURES))
    if unknown:
        raise ValueError(f"unknown figure(s) {unknown}; expected a subset of {FIGURES}")
    require_matplotlib()  # before anything is computed or created
    grid = tuple(grid)
    name = name or f"{pe.kind}_{len(grid)}d"
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
