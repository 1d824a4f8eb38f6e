"""``transformer-xl``: Transformer-XL relative attention (Dai et al. 2019, "Transformer-XL: Attentive Language
Models Beyond a Fixed-Length Context", section 3.3), 1D, bidirectional or causal.

Conventions (the paper's formula and its code, kimiyoung/transformer-xl ``pytorch/mem_transformer.py``
``RelPartialLearnableMultiHeadAttn`` and ``PositionalEmbedding``; ``tests/test_transformer_xl.py`` pins it
against a per-pair loop of the four terms):
- Logits. ``A_ij = (q_i.k_j + q_i.W_R R(i-j) + u.k_j + v.W_R R(i-j)) / sqrt(head_dim)`` per head: the original
  scales the whole sum (``attn_score = AC + BD; attn_score.mul_(self.scale)``). SDPA already adds
  ``q.k / sqrt(head_dim)``, so the term here is the other three, divided by ``sqrt(head_dim)``. q and k are the
  ones attention uses (after :func:`ndpe.apply_qk`); the paper's ``W_{k,E}`` projection is the model's key
  projection.
- ``R``. The original's sinusoid of the offset ``i - j`` (query minus key): ``inv_freq = 1 / 10000 **
  (arange(0, dim, 2) / dim)``, ``R = [sin(o * inv_freq), cos(o * inv_freq)]`` concatenated, ``dim`` channels
  (the model width, ``d_model``; ``dim`` must be even). Negative offsets (keys after the query, bidirectional)
  use the same sinusoid at ``o < 0``. ``clamp_len`` clamps ``|o|`` as the original's ``pos_seq.clamp_(max=
  clamp_len)``.
- Parameters. ``w_r`` ``(dim, dim)`` is ``W_R`` (the original's ``r_net.weight``, ``Linear(d_model, heads *
  head_dim, bias=False)``; output row ``h * head_dim + d`` is head ``h``), ``u`` and ``v`` ``(heads, head_dim)``
  the original's ``r_w_bias`` and ``r_r_bias``. Init ``N(0, 0.02^2)`` for all three, the original's
  ``train.py`` (``init="normal"``, ``init_std=0.02`` for Linear weights, ``r_w_bias`` and ``r_r_bias``).
- Sharing across layers. An ndpe encoding is called once per model forward and its output is applied in every
  layer, so ``W_R``, ``u`` and ``v`` are SHARED by all layers. The original shares ``u`` and ``v`` (one pair on
  the model, unless its ``untie_r``) but gives each layer its own ``r_net``; per-layer ``W_R`` is one encoding
  per layer here.
- Causal. ``causal=True`` gives keys after the query term 0 and makes the :class:`ndpe.LogitsTerm`
  ``causal_only`` (a non-causal attention raises); on the visible keys it equals ``causal=False``, so a causal
  model gets the same logits either way, as ``alibi``'s ``causal``.
- Efficiency. ``encode`` runs once per forward: the distinct offsets (``Nq + Nk - 1`` of them for contiguous
  integer positions, ``2N - 1`` for a grid) are projected once, ``W_R R`` ``(heads, head_dim, offsets)``, with an
  index ``(Nq, Nk)`` of every pair's offset. Each layer then computes ``(q + v) . W_R R`` ``(B, heads, Nq,
  offsets)`` by one matmul, gathers it by the index (the original's ``_rel_shift``), and adds ``u . k``
  ``(B, heads, 1, Nk)``. Integer positions with gaps (eager only) project their distinct offsets instead.
  Under torch.compile the offsets count must be static: positions there must be contiguous integers (a grid,
  a shifted grid, decoding), checked by an assert in the graph.
- Memory (:mod:`ndpe.memory`), each checked against the budget before it is allocated: ``W_R`` when built, the
  ``(Nq, Nk)`` offsets, index and mask (``PAIR_BYTES`` a pair) and the projected offsets when encoded, and the
  term per sample of the batch when called (:meth:`TransformerXL.term_bytes`).
- Positions: integer (index) units; fractional ones raise (offsets index the projected table). KV-cache
  decoding (``pe((n,), past=p)``): queries ``p .. p + n - 1`` against keys ``0 .. p + n - 1``, equal to the full
  sequence's rows. Prefix tokens (``num_prefix``) get term 0 (no ``u . k`` on prefix keys either).

>>> import ndpe, torch
>>> pe = ndpe.make(dims=1, kind="transformer-xl", dim=32, heads=2)
>>> pe.w_r.shape, pe.u.shape, pe.v.shape
(torch.Size([32, 32]), torch.Size([2, 16]), torch.Size([2, 16]))
>>> pos = pe((6,))
>>> q = k = torch.randn(1, 2, 6, 16)
>>> pos.logits(q, k).shape
torch.Size([1, 2, 6, 6])
>>> ndpe.Attention(32, heads=2)(torch.randn(1, 6, 32), pos).shape
torch.Size([1, 6, 32])
"""
from __future__ import annotations

from typing import Callable

import torch
from einops import rearrange
from torch import Tensor, nn

from ..base import Encoding
from ..checks import check_bool, check_int
from ..contract import LogitsTerm, PosOut
from ..coords import pair_limit
from ..memory import check_memory, check_tables
from ..registry import register
from .rope import angle_dtype

INIT_STD = 0.02  # the original train.py's init_std
PAIR_BYTES = 32  # at the peak of offset_table: float32 offsets and their shift, the int64 index, bool tests (unique:
# a sorted copy, the inverse and its permutation), then the index and the causal mask
OFFSET_WORDS = 8  # float32 words per channel of one offset while projected: float64 angles, sin, cos, their concat


def xl_sinusoid(offsets: Tensor, dim: int) -> Tensor:
    """Transformer-XL's ``PositionalEmbedding``: ``[sin(o f), cos(o f)]`` ``(..., dim)`` float32 of offsets
    ``(...)``, ``f = 1 / 10000 ** (arange(0, dim, 2) / dim)`` (angles in float64, except on MPS).

    >>> xl_sinusoid(torch.tensor([0.0, 1.0]), 4)
    tensor([[0.0000, 0.0000, 1.0000, 1.0000],
            [0.8415, 0.0100, 0.5403, 0.9999]])
    """
    dt = angle_dtype(offsets.device)
    inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2, device=offsets.device, dtype=dt) / dim))
    angle = offsets.to(dt)[..., None] * inv_freq
    return torch.cat([angle.sin(), angle.cos()], dim=-1).float()


def offset_table(positions: Tensor, keys: Tensor) -> tuple[Tensor, Tensor]:
    """The distinct offsets of query positions ``(..., Nq)`` and key positions ``(..., Nk)`` (integers) and each
    pair's row: ``(table (..., S) float, index (..., Nq, Nk) long)`` with ``table[index] = p_i - p_j``.

    Contiguous positions (any order) have ``S = Nq + Nk - 1`` offsets starting at the smallest; other integer
    positions (eager only) their ``torch.unique`` offsets, shared by the batch.

    >>> table, index = offset_table(torch.tensor([2.0, 3.0]), torch.tensor([0.0, 1.0, 2.0, 3.0]))
    >>> table.tolist(), index.tolist()
    ([-1.0, 0.0, 1.0, 2.0, 3.0], [[3, 2, 1, 0], [4, 3, 2, 1]])
    """
    offsets = positions[..., :, None] - keys[..., None, :]  # (..., Nq, Nk): p_i - p_j
    size = offsets.shape[-2] + offsets.shape[-1] - 1
    low = offsets.amin(dim=(-2, -1), keepdim=True)
    rel = offsets - low
    if torch.compiler.is_compiling():
        torch._assert_async(((rel < size) & (rel == rel.round())).all(),
                            "transformer-xl under torch.compile needs contiguous integer positions")
    elif not bool((rel < size).all()):  # gaps: project the distinct offsets themselves
        table, index = torch.unique(offsets, return_inverse=True)
        return table, index
    return low[..., 0] + torch.arange(size, device=offsets.device, dtype=offsets.dtype), rel.long()


def xl_token_terms(q: Tensor, k: Tensor, projected: Tensor, u: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
    """The per-token parts of the term, float32: ``(q + v) . W_R R(o)`` of every offset ``(B, heads, Nq, S)`` and
    ``u . k`` ``(B, heads, Nk)``, from q ``(B, heads, Nq, hd)``, k ``(B, heads, Nk, hd)``, ``projected`` ``(..., heads,
    hd, S)`` and ``u``, ``v`` ``(heads, hd)``."""
    by_offset = (q.float() + v.float()[:, None, :]) @ projected  # one matmul for every offset
    return by_offset, torch.einsum("bhjd,hd->bhj", k.float(), u.float())


def xl_pair_term(qr: Tensor, uk: Tensor, scale: float, future: Tensor | None) -> Tensor:
    """The term of a pair from its ``(q + v) . W_R R(i - j)`` and ``u . k_j`` (broadcasting): their sum times
    ``1 / sqrt(head_dim)``, 0 on keys after the query when ``future`` (causal) is given; the one formula of both
    the materialized term and the flex score_mod."""
    out = (qr + uk) * scale
    return out if future is None else torch.where(future, 0.0, out)


def _term_bytes(heads: int, nq: int, nk: int, offsets: int) -> int:
    """See :meth:`TransformerXL.term_bytes`."""
    return 4 * heads * nq * (5 * nk + offsets)


def _check_term(heads: int, nq: int, nk: int, offsets: int) -> None:
    """Refuse a term of one sample over the memory budget, before it is built."""
    if not torch.compiler.is_compiling():
        check_memory(_term_bytes(heads, nq, nk, offsets),
                     lambda: f"transformer-xl logits term of one sample ({heads} heads x {nq} queries x {nk} keys, "
                             f"float32, and (q + v) . W_R R over {offsets} offsets)",
                     "use shorter sequences", detail="with intermediates")


@register("transformer-xl", dims=(1,))
class TransformerXL(Encoding):
    """Transformer-XL relative attention terms ``q.W_R R + u.k + v.W_R R``; see the module docstring.

    Args:
        causal: term 0 for keys after the query, and non-causal attention raises.
        clamp_len: clamp offsets to ``[-clamp_len, clamp_len]`` (the original's ``clamp_len``); None: no clamp.
    """

    takes_key_positions = True  # decodes its pairwise term against cached keys
    has_parameters = True
    description = "Transformer-XL relative attention (Dai et al. 2019): `q.R(i-j) + u.k + v.R(i-j)`"
    colour, marker = "#00008b", "H"
    causal_options = {"causal": True}  # the paper's decoder form
    causal_only_option = "causal"  # its causal form is for causal attention only

    integer_positions = True  # offsets index the projected sinusoids

    def __init__(self, *, dims: int, dim: int, heads: int = 1, causal: bool = False, clamp_len: int | None = None):
        super().__init__(dims=dims, dim=dim, heads=heads)
        check_bool(causal, "causal")
        if clamp_len is not None:
            check_int(clamp_len, "clamp_len", low=0)
        if dim % 2:
            raise ValueError(f"transformer-xl needs an even dim (sin and cos halves of R), got dim={dim}")
        self.causal, self.clamp_len = causal, clamp_len
        check_tables("transformer-xl", {"W_R": (dim, dim)}, "use a smaller dim")
        self.w_r = nn.Parameter(torch.empty(dim, dim))  # W_R: R (dim) -> heads * head_dim
        self.u = nn.Parameter(torch.empty(heads, self.head_dim))  # r_w_bias: with the keys
        self.v = nn.Parameter(torch.empty(heads, self.head_dim))  # r_r_bias: with the relative encodings
        for p in (self.w_r, self.u, self.v):
            nn.init.normal_(p, std=INIT_STD)

    def position_limit(self, dtype: torch.dtype = torch.float32) -> tuple[float, str] | None:
        """Coordinates whose float32 offsets ``p_i - p_j`` stay finite (the sinusoid of an infinite offset is NaN); any
        with ``clamp_len``, which clamps an infinite offset too (the original's ``pos_seq.clamp_``)."""
        return None if self.clamp_len is not None else pair_limit(self.kind, 1, False)

    def projected(self, table: Tensor) -> Tensor:
        """``W_R R(o)`` per head, ``(..., heads, head_dim, S)``, for offsets ``(..., S)``."""
        if not torch.compiler.is_compiling():
            count = table.numel()
            check_memory(4 * OFFSET_WORDS * count * self.dim,
                         lambda: f"transformer-xl projected offsets ({count} offsets x dim={self.dim}, float32)",
                         "use positions with fewer distinct offsets (contiguous integers have Nq + Nk - 1)",
                         detail="with intermediates")
        if self.clamp_len is not None:
            table = table.clamp(-self.clamp_len, self.clamp_len)
        r = xl_sinusoid(table, self.dim) @ self.w_r.float().t()  # (..., S, heads * head_dim), float32 math
        return rearrange(r, "... s (h d) -> ... h d s", h=self.heads)

    def _tables(self, positions: Tensor, keys: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """(projected ``(..., heads, hd, S)``, index ``(1 | B, 1, Nq, Nk)``, future keys ``(..., Nq, Nk)`` bool)."""
        if not torch.compiler.is_compiling():
            for name, p in (("positions", positions), ("key positions", keys)):
                if not bool((p == p.round()).all()):
                    raise ValueError(f"transformer-xl looks integer offsets up in a table but got fractional {name}; "
                                     "pass integer (index) positions or round them yourself")
            batch, nq, nk = positions.shape[0] if positions.ndim == 3 else 1, positions.shape[-2], keys.shape[-2]
            check_memory(PAIR_BYTES * batch * nq * nk,
                         lambda: f"transformer-xl offsets of {nq} queries x {nk} keys ({batch} x {nq} x {nk} pairs: "
                                 "offsets, index and mask)",
                         "use shorter sequences", detail="with intermediates")
        table, index = offset_table(positions[..., 0], keys[..., 0])
        future = keys[..., None, :, 0] > positions[..., :, None, 0]
        index = index[:, None] if index.ndim == 3 else index[None, None]
        return self.projected(table), index, future[:, None] if future.ndim == 3 else future

    def term_bytes(self, num_queries: int, num_keys: int, num_offsets: int | None = None) -> int:
        """Estimated peak bytes of the term for ONE sample of the batch (the budget counts a logits term per sample,
        as a bias shared by the batch): ``(q + v) . W_R R`` ``(heads, Nq, S)`` and 5 float32 words per pair and head
        (the gathered ``qr``, the sum, its scaled copy, the causal ``where`` and the prefix padding).
        ``num_offsets`` S: default ``Nq + Nk - 1`` (contiguous integer positions)."""
        offsets = num_queries + num_keys - 1 if num_offsets is None else num_offsets
        return _term_bytes(self.heads, num_queries, num_keys, offsets)

    def encode(self, positions: Tensor, grid_shape, key_positions: Tensor | None = None) -> PosOut:
        keys = positions if key_positions is None else key_positions
        projected, index, future = self._tables(positions, keys)
        u, v, heads, head_dim = self.u, self.v, self.heads, self.head_dim
        mask = future if self.causal else None

        def term(q: Tensor, k: Tensor) -> Tensor:
            nq, nk = index.shape[-2:]
            if q.shape[-3:] != (heads, nq, head_dim) or k.shape[-3:] != (heads, nk, head_dim):
                raise ValueError(f"transformer-xl was encoded for {heads} heads of {head_dim} channels, {nq} queries "
                                 f"and {nk} keys (grid tokens), but got q {tuple(q.shape)} and k {tuple(k.shape)}")
            _check_term(heads, nq, nk, projected.shape[-1])
            by_offset, uk = xl_token_terms(q, k, projected, u, v)  # (B, H, Nq, S), (B, H, Nk)
            shape = torch.broadcast_shapes(by_offset.shape[:-1], index.shape[:-1]) + (nk,)
            qr = by_offset.expand(*shape[:-1], by_offset.shape[-1]).gather(-1, index.expand(shape))  # _rel_shift
            return xl_pair_term(qr, uk[:, :, None, :], q.shape[-1] ** -0.5, mask)

        return PosOut(logits=LogitsTerm(fn=term, causal_only=self.causal))

    def score_bias(self, coords: Tensor, *, q: Tensor | None = None,
                   k: Tensor | None = None) -> Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]:
        """``(b, h, i, j) -> term`` for flex attention (see :meth:`Encoding.score_bias`): precomputes
        ``(q + v) . W_R R`` ``(B, heads, N, offsets)`` and ``u . k`` ``(B, heads, N)`` from the grid tokens' q, k
        ``(B, heads, N, head_dim)`` and indexes them per pair (the ``(N, N)`` offset index, no ``N x N`` logits)."""
        if q is None or k is None:
            raise ValueError("transformer-xl's term depends on the queries and keys: pass q= and k= "
                             "(B, heads, N, head_dim)")
        projected, index4, future = self._tables(coords, coords)
        index = index4[0, 0]  # (N, N): each pair's offset column
        _check_term(self.heads, q.shape[-2], k.shape[-2], projected.shape[-1])
        by_offset, uk = xl_token_terms(q, k, projected, self.u, self.v)  # (B, H, N, S), (B, H, N)
        scale, causal = q.shape[-1] ** -0.5, self.causal
        return lambda b, h, i, j: xl_pair_term(by_offset[b, h, i, index[i, j]], uk[b, h, j], scale,
                                               future[i, j] if causal else None)
