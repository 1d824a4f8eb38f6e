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
shown through one, the first of ``bias, logits, rot, tokens, add, cat`` (:func:`shown_field`). Colour scales fit the
values drawn (:func:`color_scale`: diverging around 0 only when they straddle 0); per-head panels get one
scale each; a kind's curves are drawn in its colour (:data:`KIND_COLOURS`, as in the benchmark report).
The numbers
(:func:`relation`, :func:`table`, :func:`offset_curve`) need only torch; :func:`make_figure` and
:func:`show_relation` let a script compose its own figures (``docs/make_figures.py``).
Pictures need matplotlib: ``pip install "ndpe[viz]"`` (without it, drawing raises
:class:`MissingDependencyError`, a ``ModuleNotFoundError`` whose one-line message names the extra).
"""
from __future__ import annotations

import argparse
import ast
import inspect
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import NoReturn, Sequence, cast

import torch
from einops import rearrange
from torch import Tensor

from .contract import LogitsTerm, PosOut, TokenTerm, apply_qk
from .registry import available, make, options

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


# -- numbers -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Content:
    """The fixed content that content-dependent fields (``logits``, ``tokens``) are drawn for.

    Every grid token gets the same query vector ``q`` and the same key vector ``k`` (``(head_dim,)``, also the
    same for every head) and the same token vector ``x`` (``(heads * head_dim,)``), each drawn ``N(0, 1)`` from
    a generator seeded with ``seed`` (torch's global generator is left alone). Content is then constant, so a
    term computed from it varies with the positions alone. ``num_tokens``: the ``N`` grid tokens.

    >>> c = Content(heads=2, head_dim=4, num_tokens=3)
    >>> q, k = c.qk(); q.shape, bool((q == q[:, :, :1]).all()), bool((q[:, 0] == q[:, 1]).all())
    (torch.Size([1, 2, 3, 4]), True, True)
    >>> c.tokens().shape
    torch.Size([1, 3, 8])
    """

    heads: int
    head_dim: int
    num_tokens: int
    seed: int = 0

    @classmethod
    def of(cls, pe, grid: Sequence[int], seed: int = 0) -> "Content":
        """The content for encoding ``pe`` (its ``heads`` and ``head_dim``) on ``grid``."""
        heads = int(getattr(pe, "heads", 1))
        head_dim = int(getattr(pe, "head_dim", 0) or getattr(pe, "dim") // heads)
        return cls(heads=heads, head_dim=head_dim, num_tokens=math.prod(grid), seed=seed)

    def _vectors(self) -> tuple[Tensor, Tensor, Tensor]:
        g = torch.Generator().manual_seed(self.seed)
        q = torch.randn(self.head_dim, generator=g)
        k = torch.randn(self.head_dim, generator=g)
        return q, k, torch.randn(self.heads * self.head_dim, generator=g)

    def qk(self) -> tuple[Tensor, Tensor]:
        """Queries and keys ``(1, heads, N, head_dim)`` float32, the same vector at every token and head."""
        q, k, _ = self._vectors()
        shape = (1, self.heads, self.num_tokens, self.head_dim)
        return q.expand(shape), k.expand(shape)

    def tokens(self) -> Tensor:
        """Token embeddings ``(1, N, heads * head_dim)`` float32, the same vector at every token."""
        x = self._vectors()[2]
        return x.expand(1, self.num_tokens, x.shape[0])


def _per_head(t: Tensor) -> Tensor:
    """``(*, T, C)`` -> ``(H, T, C)``: the leading axes (heads, or size 1) flattened."""
    return t.float().reshape(-1, *t.shape[-2:])


def _rot(rot: tuple[Tensor, Tensor] | None, p: int) -> tuple[Tensor, Tensor] | None:
    return None if rot is None else (_per_head(rot[0])[:, p:], _per_head(rot[1])[:, p:])


def grid_fields(pos: PosOut) -> PosOut:
    """``pos`` without its ``num_prefix`` leading tokens, every tensor field ``(H, N, .)`` float32 (H = 1 if shared).

    The ``logits`` and ``tokens`` functions come back taking the grid tokens alone (prefix counts set to 0).
    """
    p = pos.num_prefix
    return PosOut(add=None if pos.add is None else _per_head(pos.add)[:, p:],
                  cat=None if pos.cat is None else _per_head(pos.cat)[:, p:],
                  rot=_rot(pos.rot, p), bias=None if pos.bias is None else _per_head(pos.bias)[:, p:, p:],
                  pairing=pos.pairing, rot_k=_rot(pos.rot_k, p),
                  logits=None if pos.logits is None else replace(pos.logits, q_prefix=0, k_prefix=0),
                  tokens=None if pos.tokens is None else replace(pos.tokens, num_prefix=0))


FIELD_ORDER = ("bias", "logits", "rot", "tokens", "add", "cat")
CONTENT_FIELDS = ("logits", "tokens")  # drawn for the fixed content of :class:`Content`


def shown_field(pos: PosOut) -> str:
    """The field the pictures use: the first present of :data:`FIELD_ORDER` (a combined PosOut shows its bias).

    ``rot_k`` is no field of its own: it changes how ``rot`` is drawn (keys rotate by it).
    """
    for name in FIELD_ORDER:
        if getattr(pos, name) is not None:
            return name
    raise ValueError("this encoding outputs nothing (kind 'none'?): there is no relation between positions to show")


def _need_content(content: Content | None, field: str) -> Content:
    if content is None:
        raise ValueError(f"this encoding's {field} term depends on the content (q, k or the tokens): pass "
                         "content=ndpe.viz.Content.of(pe, grid_shape) to draw it for constant content")
    return content


def content_term(pos: PosOut, content: Content | None) -> Tensor:
    """The content-dependent field :func:`shown_field` picks, evaluated on ``content`` (grid tokens only).

    ``logits``: the term for constant ``q``, ``k`` (:class:`Content`; rotated first by ``pos.rot`` / ``rot_k``
    when the PosOut also rotates, as attention does), ``(H, N, N)`` query x key; a term defined for causal
    attention only (``causal_only``) is NaN on keys after the query (row-major order). ``tokens``: the
    constant token after the kind's function, ``(1, N, C)``.

    >>> from ndpe.contract import LogitsTerm
    >>> pos = PosOut(logits=LogitsTerm(lambda q, k: q @ k.transpose(-1, -2), causal_only=True))
    >>> content_term(pos, Content(heads=1, head_dim=4, num_tokens=3)).isnan().int()
    tensor([[[0, 1, 1],
             [0, 0, 1],
             [0, 0, 0]]], dtype=torch.int32)
    """
    field, pos = shown_field(pos), grid_fields(pos)
    content = _need_content(content, field)
    if field == "tokens":
        return cast(TokenTerm, pos.tokens)(content.tokens()).float().reshape(-1, *content.tokens().shape[-2:])
    if field != "logits":
        raise ValueError(f"content_term draws the logits or tokens field; this PosOut shows its {field}")
    term_fn = cast(LogitsTerm, pos.logits)
    q, k = content.qk()
    if pos.rot is not None:  # what attention hands the term: q, k after the rotation
        q, k = apply_qk(q.contiguous(), k.contiguous(), PosOut(rot=pos.rot, rot_k=pos.rot_k, pairing=pos.pairing))
    term = term_fn(q, k).float()
    term = term.reshape(-1, *term.shape[-2:])  # (H, N, N)
    if term_fn.causal_only:
        n = term.shape[-1]
        future = torch.ones(n, n, dtype=torch.bool).triu(1)
        term = term.masked_fill(future, float("nan"))
    return term


def _rot_scores(pos: PosOut) -> Tensor:
    """``(H, N, N)`` score of content-free queries (rotated by ``rot``) and keys (by ``rot_k``, else ``rot``),
    each row normalized at its query. ``pos``: grid fields."""
    cos, sin = cast("tuple[Tensor, Tensor]", pos.rot)  # (H, N, rot_dim / 2)
    cos_k, sin_k = (cos, sin) if pos.rot_k is None else pos.rot_k
    score = cos @ cos_k.transpose(-1, -2) + sin @ sin_k.transpose(-1, -2)  # (H, N, N): sum_p cos_ip cos_jp + ...
    return score / score.diagonal(dim1=-2, dim2=-1)[..., None]


def _shown(pos: PosOut, content: Content | None) -> Tensor:
    """The per-head tensor behind the pictures: ``(H, N, N)`` for bias / logits, ``(H, N, C)`` otherwise (``rot``:
    its cos, or with ``rot_k`` the normalized query x key scores ``(H, N, N)``)."""
    field = shown_field(pos)
    if field in CONTENT_FIELDS:
        return content_term(pos, content)
    grid = grid_fields(pos)
    if field == "rot":
        return _rot_scores(grid) if grid.rot_k is not None else cast("tuple[Tensor, Tensor]", grid.rot)[0]
    return getattr(grid, field)


def num_heads(pos: PosOut, *, content: Content | None = None) -> int:
    """How many per-head pictures the field :func:`shown_field` uses holds (1 when every head shares it).

    A content term (``logits``) counts its heads only when they differ for the same ``content``.
    """
    field = shown_field(pos)
    if field in CONTENT_FIELDS:
        term = content_term(pos, content)
        same = all(torch.equal(term[h].nan_to_num(), term[0].nan_to_num()) for h in range(term.shape[0]))
        return 1 if same else term.shape[0]
    grid = grid_fields(pos)
    if field == "rot":
        return max(r[0].shape[0] for r in (grid.rot, grid.rot_k) if r is not None)
    return getattr(grid, field).shape[0]


def relation(pos: PosOut, query: int, *, head: int | None = None, content: Content | None = None) -> Tensor:
    """How grid token ``query`` relates to all ``N`` grid tokens, ``(N,)`` float32.

    Prefix tokens are dropped (``query`` indexes grid tokens, row-major). Positions must be
    unbatched. The field used (:func:`shown_field`, first present in this order):

    - ``bias`` ``(heads, N, N)``: the bias row ``bias[h, query, :]``.
    - ``logits`` (content-dependent): the term's row for constant ``q``, ``k`` (:func:`content_term`;
      ``content`` required); NaN on keys after the query for a term defined for causal attention only.
    - ``rot``: the attention score of content-free queries and keys, every rotary pair ``(1, 0)``:
      ``s_h(i, j) = sum_p cos(a_hip - a_hjp) = sum_p cos_ip cos_jp + sin_ip sin_jp``, normalized by
      ``s_h(i, i)`` so it is 1 at the query (this also divides out YaRN's cos/sin factor).
      Equal to rotating such ``q``, ``k`` with :func:`ndpe.apply_qk` and taking ``q_i . k_j``. With ``rot_k``
      the keys rotate by it: ``s_h(i, j)`` pairs query ``i``'s rotation with key ``j``'s (xPos: a decay
      ``zeta ** ((i - j) / scale_base)`` on top of the rotation), still normalized at ``j = i``.
    - ``tokens`` (content-dependent): cosine similarity of the constant token after the kind's function.
    - ``add`` / ``cat``: cosine similarity of the position vectors ``cos(e_i, e_j)``.

    ``head=None`` averages over heads; ``head=h`` picks one (any ``h`` when all heads share it).

    >>> import ndpe
    >>> pe = ndpe.make(dims=2, kind="rope", dim=32)
    >>> r = relation(pe((4, 5)), query=7); r.shape, round(float(r[7]), 6)
    (torch.Size([20]), 1.0)
    """
    field = shown_field(pos)
    if field in ("bias", "logits"):
        rows = _shown(pos, content)[:, query]  # (H, N)
    elif field == "rot":
        grid = grid_fields(pos)
        cos, sin = cast("tuple[Tensor, Tensor]", grid.rot)  # (H, N, rot_dim / 2)
        cos_k, sin_k = (cos, sin) if grid.rot_k is None else grid.rot_k
        score = (cos[:, query, None] * cos_k + sin[:, query, None] * sin_k).sum(-1)  # (H, N)
        rows = score / score[:, query, None]
    else:
        vec = _shown(pos, content)  # (H, N, C)
        rows = torch.nn.functional.cosine_similarity(vec[:, query, None], vec, dim=-1)  # (H, N)
    if head is None:
        return rows.mean(0)
    return rows[head % rows.shape[0]]


def table(pos: PosOut, *, head: int = 0, content: Content | None = None) -> Tensor:
    """The encoding as one matrix for a heatmap (grid tokens only, head ``head``).

    ``add``: ``(N, dim)``; ``cat``: ``(N, cat_dim)``; ``rot``: ``cos`` of the angles ``(N, rot_dim / 2)``
    (``sin`` is the same picture shifted), or with ``rot_k`` the query x key scores ``(N, N)`` of
    :func:`relation` (one row per query); ``bias``: ``(N, N)`` query x key; ``logits``: ``(N, N)`` query x key
    for constant ``q``, ``k``; ``tokens``: ``(N, dim)`` the constant token after the kind's function
    (``content``: :class:`Content`, for the last two). The field is :func:`shown_field`'s.

    >>> import ndpe
    >>> table(ndpe.make(dims=1, kind="sinusoidal", dim=16)((10,))).shape
    torch.Size([10, 16])
    """
    t = _shown(pos, content)
    return t[head % t.shape[0]]


def _is_pairwise(pos: PosOut) -> bool:
    """Whether :func:`table` is query x key (bias, logits, rot with rot_k) rather than tokens x channels."""
    field = shown_field(pos)
    return field in ("bias", "logits") or (field == "rot" and pos.rot_k is not None)


def centre_index(grid: tuple[int, ...]) -> int:
    """Row-major index of the grid's centre token ``(n_0 // 2, n_1 // 2, ...)``.

    >>> centre_index((3, 4))
    6
    """
    index = 0
    for n in grid:
        index = index * n + n // 2
    return index


def as_image(values: Tensor, grid: tuple[int, ...], frame: int | None = None) -> Tensor:
    """Row-major ``(N,)`` values as a map: 1D ``(1, n)``, 2D ``(rows, cols)``, 3D frame ``frame`` (default middle)."""
    if len(grid) == 1:
        return rearrange(values, "n -> 1 n")
    image = values.reshape(grid)
    if len(grid) == 3:
        return image[grid[0] // 2 if frame is None else frame]
    return image


def encoding_relation(pe, grid: Sequence[int], query: int, *, head: int | None = None) -> Tensor:
    """:func:`relation` of encoding ``pe`` on ``grid`` (content terms for ``Content.of(pe, grid)``).

    >>> import ndpe
    >>> pe = ndpe.make(dims=1, kind="sinusoidal", dim=16)
    >>> torch.equal(encoding_relation(pe, (6,), 2), relation(pe((6,)), 2))
    True
    """
    return relation(pe(tuple(grid)), query, head=head, content=_content(pe, grid))


def _content(pe, grid: Sequence[int]) -> Content | None:
    """``Content.of(pe, grid)``, or None for an object without heads / dim (it can have no content terms)."""
    if not hasattr(pe, "dim") and not hasattr(pe, "head_dim"):
        return None
    return Content.of(pe, grid)


@torch.no_grad()
def offset_curve(pe, grid: tuple[int, ...], *, axis: int = 0, span: int = 4, head: int | None = None):
    """Relation against the offset from the query along ``axis``, on a grid ``span`` times longer there.

    The query sits at the centre of the longer grid; returns ``(offsets, values)``, each ``(span * n,)``.
    Raises whatever ``pe`` raises when it cannot encode the longer grid (a learned table without resize).
    Content-dependent terms are drawn for constant content (:class:`Content`).

    >>> import ndpe
    >>> off, rel = offset_curve(ndpe.make(dims=1, kind="alibi", dim=16, heads=2), (8,))
    >>> off.shape, float(rel[off == 0])
    (torch.Size([32]), 0.0)
    """
    long_grid = tuple(n * span if a == axis else n for a, n in enumerate(grid))
    query = centre_index(long_grid)
    values = encoding_relation(pe, long_grid, query, head=head).reshape(long_grid)
    centre = [n // 2 for n in long_grid]
    line = values[tuple(slice(None) if a == axis else c for a, c in enumerate(centre))]  # (span * n,)
    offsets = torch.arange(long_grid[axis]) - centre[axis]
    return offsets, line


# -- pictures ----------------------------------------------------------------------------
# kind -> colour of its curves, the same in every figure of the guide and of the benchmark report
# (``train/plots.py`` takes its colours from here).
KIND_COLOURS = {
    "none": "#000000", "learned": "#1f77b4", "sinusoidal": "#ff7f0e", "alibi": "#2ca02c", "rope": "#d62728",
    "rope-mixed": "#9467bd", "coord": "#8c564b", "fourier": "#bcbd22", "relative": "#17becf",
    # issue 11's kinds: picked at least as far apart (CIE76) from each other and from the colours above (and
    # train/plots.py's own) as those are from each other
    "xpos": "#882255", "complex": "#e7298a", "cope": "#1b9e77", "transformer-xl": "#00008b", "fire": "#b15928",
    "cpb": "#800080",
}
OTHER_COLOUR = "#636363"


def kind_colour(kind: str | None) -> str:
    """The colour of ``kind``'s curves (:data:`KIND_COLOURS`; grey for a kind not listed)."""
    return KIND_COLOURS.get(kind or "", OTHER_COLOUR)


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


def color_scale(*values: Tensor) -> dict:
    """``imshow`` keywords (cmap, vmin, vmax) fitted to ``values``: a diverging scale centred on 0 when they
    straddle 0, else a sequential one over their own range. NaN / inf entries (blanked keys, masks) are left out.

    >>> color_scale(torch.tensor([0.4, 1.0]))
    {'cmap': 'viridis', 'vmin': 0.4000000059604645, 'vmax': 1.0}
    >>> color_scale(torch.tensor([-0.2, 1.0]))
    {'cmap': 'RdBu_r', 'vmin': -1.0, 'vmax': 1.0}
    """
    flat = torch.cat([v.detach().float().flatten() for v in values])
    flat = flat[flat.isfinite()]
    if flat.numel() == 0:
        flat = torch.zeros(1)
    lo, hi = float(flat.min()), float(flat.max())
    if lo < 0 < hi:
        m = max(-lo, hi)
        return {"cmap": "RdBu_r", "vmin": -m, "vmax": m}
    if hi - lo < 1e-6:  # a constant map: any small range around it
        lo, hi = lo - 0.5, hi + 0.5
    return {"cmap": "viridis", "vmin": lo, "vmax": hi}


def _style(pos: PosOut, *values: Tensor) -> dict:
    """Colour scale of relation maps: :func:`color_scale` of ``values`` (the maps drawn with one scale)."""
    return color_scale(*values)


def _axis_names(dims: int) -> tuple[str, ...]:
    return {1: ("position",), 2: ("row (axis 0)", "column (axis 1)"),
            3: ("frame (axis 0)", "row (axis 1)", "column (axis 2)")}[dims]


def show_relation(ax, values: Tensor, grid: tuple[int, ...], query: int, style: dict | None = None,
                  label: str | None = None, color=None):
    """Draw a relation ``(N,)`` on ``ax``: a curve (1D, in ``color``) or a map with the query marked (2D, 3D: its
    frame) in ``style`` (``imshow`` keywords; default :func:`color_scale` of ``values``)."""
    if len(grid) == 1:
        ax.plot(values.detach().numpy(), label=label, color=color)
        if bool(values.isnan().any()):  # blank keys (a causal-only term): still show every key position
            ax.set_xlim(-0.5, values.shape[0] - 0.5)
        ax.axvline(query, color="gray", ls=":", lw=1)
        ax.set(xlabel="key position", ylabel="relation to the query")
        return None
    style = color_scale(values) if style is None else style
    coord = list(torch.unravel_index(torch.tensor(query), grid))
    frame = int(coord[0]) if len(grid) == 3 else None
    image = ax.imshow(as_image(values.detach(), grid, frame).numpy(), interpolation="nearest", **style)
    ax.plot(int(coord[-1]), int(coord[-2]), "k+", ms=8, mew=1.5)
    from matplotlib.ticker import MaxNLocator

    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_locator(MaxNLocator(integer=True))
    names = _axis_names(len(grid))
    ax.set(xlabel=names[-1], ylabel=names[-2])
    return image


def _table_figure(pos: PosOut, name: str, grid: tuple[int, ...], content: Content | None = None):
    import matplotlib.pyplot as plt

    values, field = table(pos, content=content), shown_field(pos)
    heads = num_heads(pos, content=content)
    fig, ax = plt.subplots(figsize=(6, 4.5), layout="constrained")
    if field == "bias":
        image = ax.imshow(values.numpy(), cmap="viridis", interpolation="nearest")
    elif _is_pairwise(pos):  # logits, or rot with rot_k: query x key, blank (NaN) where a causal term has none
        image = ax.imshow(values.numpy(), interpolation="nearest", **color_scale(values))
    else:
        image = ax.imshow(values.numpy(), aspect="auto", interpolation="nearest", **color_scale(values))
        ax.set(xlabel="frequency pair" if field == "rot" else "channel", ylabel="grid token (row-major)")
    if _is_pairwise(pos):
        ax.set(xlabel="key token (row-major)", ylabel="query token (row-major)")
    what = {"rot": "rot, cos(angle)", "tokens": "a constant token after the tokens term",
            "logits": "logits term for constant q, k"}.get(field, field)
    if field == "rot" and pos.rot_k is not None:
        what = "q_i.k_j of content-free q, k (keys rotated by rot_k)"
    what += (f", head 0 of {heads}" if heads > 1 else "") + _causal_note(pos)
    ax.set_title(f"{name}: {what}, grid {grid}")
    if len(what) > 40:  # long (content terms, rot_k): the default title size would not fit
        ax.title.set_fontsize(10)
    fig.colorbar(image, ax=ax, label=_table_label(pos))
    return fig


def _table_label(pos: PosOut) -> str:
    field = shown_field(pos)
    if field == "rot":
        return "q.k (1 at i = j)" if pos.rot_k is not None else "cos(angle)"
    return {"bias": "attention bias", "logits": "logits term", "tokens": "transformed token"}.get(field, "value")


def _causal_note(pos: PosOut) -> str:
    """A title's note that keys after the query are blank (a logits term defined for causal attention only)."""
    shown = shown_field(pos) == "logits" and cast(LogitsTerm, pos.logits).causal_only
    return "\n(causal only: keys after the query blank)" if shown else ""


def _similarity_figure(pos: PosOut, name: str, grid: tuple[int, ...], colour=None, content: Content | None = None):
    import matplotlib.pyplot as plt

    query = centre_index(grid)
    fig, ax = plt.subplots(figsize=(5.5, 4.2) if len(grid) > 1 else (6, 3.6), layout="constrained")
    values = relation(pos, query, content=content)
    image = show_relation(ax, values, grid, query, _style(pos, values), color=colour)
    if image is not None:
        fig.colorbar(image, ax=ax, label=_what(pos))
    where = f"frame {grid[0] // 2}, " if len(grid) == 3 else ""
    ax.set_title(f"{name}: relation to the centre token\n({where}grid {grid}, {_what(pos)}){_causal_note(pos)}",
                 fontsize=10)
    return fig


def _offset_figure(pe, name: str, grid: tuple[int, ...], colour=None):
    import matplotlib.pyplot as plt

    offsets, values = offset_curve(pe, grid)
    fig, ax = plt.subplots(figsize=(6, 3.6), layout="constrained")
    ax.plot(offsets.numpy(), values.numpy(), marker=".", ms=3, color=colour)
    for x in (-(grid[0] - 1), grid[0] - 1):
        ax.axvline(x, color="gray", ls=":", lw=1)
    pos = pe(grid)
    ax.set(xlabel="offset along axis 0 (key - query)", ylabel=_ylabel("relation", pos),
           title=f"{name}: relation vs offset on a 4x longer axis 0\n(dotted: largest offset of grid {grid})"
                 f"{_causal_note(pos)}")
    ax.title.set_fontsize(10)
    return fig


def _grow_figure(pe, pos: PosOut, name: str, grid: tuple[int, ...], grow: tuple[int, ...]):
    import matplotlib.pyplot as plt

    if len(grid) == 1:
        fig, ax = plt.subplots(figsize=(6, 3.6), layout="constrained")
        for g, colour, ls in zip((grid, grow), shades(getattr(pe, "kind", None), 3)[1:], ("-", "--")):
            q = centre_index(g)
            ax.plot(torch.arange(g[0]) - q, encoding_relation(pe, g, q).numpy(), marker=".", ms=3, label=f"grid {g}",
                    color=colour, ls=ls)
        ax.set(xlabel="offset from the centre token", ylabel=_ylabel("relation", pos),
               title=f"{name}: relation as the grid grows{_causal_note(pos)}")
        ax.legend()
        return fig
    rel = {g: encoding_relation(pe, g, centre_index(g)) for g in (grid, grow)}
    style = _style(pos, *rel.values())  # one colour scale for both panels
    fig, axes = plt.subplots(1, 2, figsize=(9, 4.2), gridspec_kw={"width_ratios": [grid[-1], grow[-1]]},
                             layout="constrained")
    for ax, (g, r) in zip(axes, rel.items()):
        image = show_relation(ax, r, g, centre_index(g), style)
        ax.set_title(f"grid {g}" + (f", frame {g[0] // 2}" if len(g) == 3 else ""))
    fig.colorbar(image, ax=axes, shrink=0.8, label=_what(pos))
    fig.suptitle(f"{name}: relation to the centre token as the grid grows ({_what(pos)})", fontsize=10)
    return fig


def _heads_figure(pos: PosOut, name: str, grid: tuple[int, ...], kind: str | None = None,
                  content: Content | None = None):
    """One panel per head, each with its own colour scale and colorbar (heads can differ by orders of magnitude)."""
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
    fig, axes = plt.subplots(nrows, cols, figsize=(3.1 * cols + 0.5, 2.9 * nrows + 0.6), squeeze=False,
                             layout="constrained")
    names = _axis_names(len(grid))
    for h, ax in enumerate(axes.flat):
        if h >= heads:
            ax.axis("off")
            continue
        image = show_relation(ax, rows[h], grid, query, _style(pos, rows[h]))
        fig.colorbar(image, ax=ax, shrink=0.85)
        ax.set_title(f"head {h}" + (f", frame {grid[0] // 2}" if len(grid) == 3 else "") + " (own scale)", fontsize=9)
        ax.set_xlabel(names[-1], fontsize=8)
        ax.set_ylabel(names[-2], fontsize=8)
    gap = "\n" if cols < 3 else " "  # two panels are too narrow for the title on one line
    fig.suptitle(f"{name}: relation to the centre token, per head{gap}({_what(pos)}; each head its own colour scale)"
                 f"{_causal_note(pos)}", fontsize=10)
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
    content = _content(pe, grid)
    with torch.no_grad():
        pos = pe(grid)
        if figure == "table":
            return _table_figure(pos, name, grid, content)
        if figure == "similarity":
            return _similarity_figure(pos, name, grid, kind_colour(kind), content)
        if figure == "offset":
            return _offset_figure(pe, name, grid, kind_colour(kind))
        if figure == "grow":
            if grow is None or len(grow) != len(grid):
                raise ValueError(f"the grow figure needs grow= with one size per axis of grid {grid}, got {grow}")
            return _grow_figure(pe, pos, name, grid, tuple(grow))
        if figure == "heads":
            return _heads_figure(pos, name, grid, kind, content)
    raise ValueError(f"figure must be one of {FIGURES}, got {figure!r}")


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
        if all(getattr(pos, f) is None for f in FIELD_ORDER):
            print(f"{name}: the encoding outputs nothing; no figures")
            return []
        applies = {"grow": grow is not None, "heads": num_heads(pos, content=_content(pe, grid)) > 1}
        wanted = [f for f in FIGURES if f in figures and applies.get(f, True)]
        paths = []
        for figure in wanted:
            try:
                fig = make_figure(figure, pe, grid, grow=grow, name=name)
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


# -- command line ------------------------------------------------------------------------
def parse_option(text: str) -> tuple[str, object]:
    """``"key=value"`` -> ``(key, value)``; the value is a Python literal if it parses as one, else a string.

    >>> parse_option("grid_shape=(8, 8)"), parse_option("resize=bicubic"), parse_option("scaling=None")
    (('grid_shape', (8, 8)), ('resize', 'bicubic'), ('scaling', None))
    """
    key, sep, value = text.partition("=")
    if not sep or not key.isidentifier():
        raise argparse.ArgumentTypeError(f"an option is KEY=VALUE with KEY a kind's keyword option "
                                         f"(e.g. theta=100.0, resize=bicubic), got {text!r}")
    try:
        return key, ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return key, value


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line on stderr (exit status 2), without the usage block."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see: {self.prog} --help)\n")


def build_parser(prog: str = "ndpe viz") -> argparse.ArgumentParser:
    """The ``ndpe viz`` argument parser (``--kind`` choices are the registered kinds)."""
    parser = OneLineParser(prog=prog, description=(__doc__ or "").split("\n")[0],
                           epilog=f"Example: {prog} --kind rope --grid 8 8 --grow 16 16 --heads 4")
    parser.add_argument("--kind", required=True, choices=sorted(available()))
    parser.add_argument("--grid", type=int, nargs="+", required=True,
                        help="grid sizes in ij order (dims = their count)")
    parser.add_argument("--grow", type=int, nargs="+", default=None, help="a larger grid to compare with")
    parser.add_argument("--dim", type=int, default=64, help="model width (default 64)")
    parser.add_argument("--heads", type=int, default=1, help="attention heads (default 1)")
    parser.add_argument("--option", type=parse_option, action="append", default=[], metavar="KEY=VALUE",
                        help="a keyword option of the kind, value a Python literal or a bare string; "
                             "repeatable. learned's grid_shape defaults to --grid")
    parser.add_argument("--figures", nargs="+", choices=FIGURES, default=FIGURES,
                        help="which figures to draw (default: all that apply)")
    parser.add_argument("--seed", type=int, default=0, help="seed for learned/random parameters (default 0)")
    parser.add_argument("--out", type=Path, default=Path("figures"), help="output folder (default ./figures)")
    parser.add_argument("--name", default=None, help="file name prefix (default <kind>_<dims>d)")
    return parser


def main(argv: list[str] | None = None, prog: str = "ndpe viz") -> list[Path]:
    """Build one encoding from command-line arguments and :func:`draw` it; return the written paths.

    The ``ndpe viz`` command (:mod:`ndpe.cli`) calls it and exits 0; argument errors exit 2 with one line.
    """
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    require_matplotlib()
    grid = tuple(args.grid)
    if args.grow is not None and len(args.grow) != len(grid):
        parser.error(f"--grow needs one size per axis of --grid ({len(grid)}), got {args.grow}")
    opts = dict(args.option)
    params = options(args.kind)
    if params.get("grid_shape", None) is inspect.Parameter.empty and "grid_shape" not in opts:
        opts["grid_shape"] = grid  # a learned table sized to the training grid
    torch.manual_seed(args.seed)
    try:
        pe = make(dims=len(grid), kind=args.kind, dim=args.dim, heads=args.heads, **opts)
    except (TypeError, ValueError) as err:
        parser.error(str(err))
    paths = draw(pe, grid, tuple(args.grow) if args.grow else None, args.out, args.name, tuple(args.figures))
    for p in paths:
        print(p)
    return paths


if __name__ == "__main__":
    from ndpe.cli import viz_alias

    raise SystemExit(viz_alias(prog="python -m ndpe.viz"))
