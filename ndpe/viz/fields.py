"""What the teaching figures show, computed from an encoding's :class:`~ndpe.PosOut` with torch alone (no matplotlib).

:func:`relation`, :func:`table` and :func:`offset_curve` are the numbers behind every figure of
:mod:`ndpe.viz.figures`; :func:`quantity_of` says which quantity a relation is (:mod:`ndpe.viz.style`),
:func:`color_scale` fits that quantity's colour scale to them and :func:`kind_colour` gives a kind's colour
(:mod:`ndpe.catalog`). ``ndpe.viz`` re-exports all of them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Mapping, Sequence, cast

import torch
from einops import rearrange
from torch import Tensor

from ..catalog import COLOURS, colour
from ..contract import LogitsTerm, PosOut, TokenTerm
from ..functional import apply_qk
from ..registry import available
from .style import scale as quantity_scale

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
                  prob_bias=None if pos.prob_bias is None else _per_head(pos.prob_bias)[:, p:, p:],
                  pairing=pos.pairing, rot_k=_rot(pos.rot_k, p),
                  logits=None if pos.logits is None else replace(pos.logits, q_prefix=0, k_prefix=0),
                  tokens=None if pos.tokens is None else replace(pos.tokens, num_prefix=0),
                  frame=None if pos.frame is None else (_per_head(pos.frame[0])[:, p:], _per_head(pos.frame[1])[:, p:]))


FIELD_ORDER = ("bias", "prob_bias", "logits", "frame", "rot", "tokens", "add", "cat")
"""The ``PosOut`` fields in the order a figure looks for the one it draws (:func:`shown_field`)."""
PAIR_FIELDS = ("bias", "prob_bias", "logits", "frame")
"""The fields :func:`table` draws query x key (``prob_bias``: the term eRPE adds after the softmax; ``frame``:
the logits of a constant q and k)."""
CONTENT_FIELDS = ("logits", "frame", "tokens")
"""The fields that need content to draw: drawn for the fixed content of :class:`Content`."""


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
    constant token after the kind's function, ``(1, N, C)``. ``frame`` (GTA, PRoPE): the logits ``q_i . k_j / sqrt(d)``
    of the constant ``q``, ``k`` after the frame (and any rotation), ``(H, N, N)``.

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
    if field == "frame":  # the logits of constant q, k mapped by each token's frame
        q, k = content.qk()
        q, k = apply_qk(q.contiguous(), k.contiguous(), pos)
        return (q @ k.transpose(-1, -2)).float().reshape(-1, q.shape[-2], k.shape[-2]) / math.sqrt(q.shape[-1])
    if field != "logits":
        raise ValueError(f"content_term draws the logits, frame or tokens field; this PosOut shows its {field}")
    term_fn = cast(LogitsTerm, pos.logits)
    q, k = content.qk()
    if pos.rot is not None:  # what attention hands the term: q, k after the rotation
        q, k = apply_qk(q.contiguous(), k.contiguous(), PosOut(rot=pos.rot, rot_k=pos.rot_k, pairing=pos.pairing))
    states = content.tokens() if term_fn.uses_states else None  # the constant token as the layer's states
    term = term_fn(q, k, states).float()
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
    - ``prob_bias`` ``(heads, N, N)``: the row of the term added to the attention probabilities after the softmax.
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
    if field in PAIR_FIELDS:
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


def is_pairwise(pos: PosOut) -> bool:
    """Whether :func:`table` is query x key (bias, logits, rot with rot_k) rather than tokens x channels."""
    field = shown_field(pos)
    return field in PAIR_FIELDS or (field == "rot" and pos.rot_k is not None)


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
    return relation(pe(tuple(grid)), query, head=head, content=content_of(pe, grid))


def content_of(pe, grid: Sequence[int]) -> Content | None:
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


# kind -> colour of its curves, the same in every figure of the guide and of the benchmark report: the kind
# declares it (``colour``), or it is derived from the kind's name (ndpe.catalog)
KIND_COLOURS: Mapping[str, str] = COLOURS
"""Kind -> the colour of its curves in every figure (:func:`kind_colour`)."""
OTHER_COLOUR = "#636363"
"""The colour of anything that is no registered kind."""


def kind_colour(kind: str | None) -> str:
    """The colour of ``kind``'s curves (:data:`KIND_COLOURS`; grey for a name that is no registered kind)."""
    return colour(kind) if kind in available() else OTHER_COLOUR


def quantity_of(pos: PosOut) -> str:
    """The :data:`~ndpe.viz.style.QUANTITIES` entry :func:`relation` of ``pos`` measures: ``"bias"`` when the field
    shown is an additive bias, else ``"relation"`` (rotary scores, cosine similarity, content terms).

    >>> import ndpe
    >>> alibi = ndpe.make(dims=1, kind="alibi", dim=16, heads=2)
    >>> quantity_of(alibi((4,))), quantity_of(ndpe.PosOut(add=torch.ones(4, 2)))
    ('bias', 'relation')
    """
    return "bias" if shown_field(pos) == "bias" else "relation"


def color_scale(*values: Tensor, pos: PosOut | None = None, quantity: str | None = None) -> dict:
    """``imshow`` keywords (cmap, vmin, vmax): :func:`ndpe.viz.style.scale` of the quantity shown, one scale for
    all ``values``. The quantity is ``quantity``, else :func:`quantity_of` ``pos``, else ``"relation"``; a
    diverging one (relation, bias) is centred on 0 with symmetric limits, whatever the sign of the values, so the
    same quantity always has the same colours. NaN / inf entries (blanked keys, masks) are left out.

    >>> color_scale(torch.tensor([0.4, 1.0]))
    {'cmap': 'RdBu_r', 'vmin': -1.0, 'vmax': 1.0}
    >>> color_scale(torch.tensor([-2.0, 0.0]), quantity="bias")
    {'cmap': 'RdBu_r', 'vmin': -2.0, 'vmax': 2.0}
    >>> color_scale(torch.tensor([0.5, 2.0]), quantity="magnitude")
    {'cmap': 'viridis', 'vmin': 0.5, 'vmax': 2.0}
    """
    if quantity is None:
        quantity = "relation" if pos is None else quantity_of(pos)
    return quantity_scale(quantity, *values)
