"""What the teaching figures are drawn from, one matplotlib ``Axes`` at a time: a relation as a curve or a map
(:func:`show_relation`, with the ``bias = -1`` contour of a bias map), the offsets seen on the training grid
(:func:`trained_window`, outlined by :func:`mark_trained_range`, the rest hatched) and shades of a kind's colour.
:mod:`ndpe.viz.figures` composes them into ``ndpe viz``'s figures; a script composes its own
(``docs/make_figures.py``). matplotlib is imported when something is drawn, never on import.
"""
from __future__ import annotations

import torch
from torch import Tensor

from .fields import as_image, color_scale, kind_colour
from .style import BIAS_CONTOUR, OUTSIDE_HATCH, TRAINED_RANGE_COLOUR


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


def axis_names(dims: int) -> tuple[str, ...]:
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
    names = axis_names(len(grid))
    ax.set(xlabel=names[-1], ylabel=names[-2])
    return image


def bias_contour(ax, picture: Tensor, level: float = BIAS_CONTOUR):
    """Draw the contour ``bias = level`` (default -1: the keys whose attention weight is ``1/e`` of a key at bias 0)
    on a 2D bias map ``picture`` on ``ax`` when the map reaches it; returns the contour set, or None."""
    finite = picture[picture.isfinite()]
    if finite.numel() == 0 or not float(finite.min()) < level < float(finite.max()):
        return None
    return ax.contour(picture.nan_to_num(nan=0.0).numpy(), levels=[level], colors="k", linewidths=1.0)


def shade_outside(ax, lo: float, hi: float) -> None:
    """On a curve against the offset, hatch the offsets outside ``[lo, hi]`` (those not seen at training)."""
    left, right = ax.get_xlim()
    for a, b in ((left, lo), (hi, right)):
        if b > a:
            ax.axvspan(a, b, facecolor="0.92", edgecolor="0.6", hatch=OUTSIDE_HATCH, lw=0, zorder=0,
                       gid="outside-trained")
    ax.set_xlim(left, right)


def trained_window(pe, train_grid: tuple[int, ...], grid: tuple[int, ...], query: int,
                   stretch: float = 1.0) -> list[tuple[int, int]]:
    """Per axis of ``grid``, the first and last index of the keys whose offset from grid token ``query`` along that
    axis was seen on ``train_grid``: at most the extent of the training grid's coordinates there (``pe.coords``, in
    the kind's units: index coordinates reach ``n - 1``, pixel and centred ones keep their extent as the grid
    grows), times ``stretch`` (position interpolation by ``s`` divides every angle by ``s``: ``stretch=s``).

    >>> import ndpe
    >>> from ndpe.viz import centre_index
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
