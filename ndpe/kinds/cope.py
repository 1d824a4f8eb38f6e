"""``cope``: Contextual Position Encoding (Golovneva et al. 2024, "Contextual Position Encoding: Learning to
Count What's Important"), 1D, causal attention only.

Conventions (the paper's Appendix B code; pinned against x-transformers 2.31.10 ``CoPE`` as its ``Attend``
calls it, ``tests/test_cope.py``):
- Gates. ``g_ij = sigmoid(q_i . k_j / sqrt(head_dim))``: the SCALED logits, as the paper's code
  (``attn_logits / sqrt(head_dim)`` then ``cope(query, attn_logits)``) and x-transformers (``sim * scale``).
  The queries and keys are the ones attention uses (after :func:`ndpe.apply_qk`). x-transformers also adds
  its other attention biases (``attn_bias``) to ``sim`` before the gates; here the gates see ``q.k`` alone,
  so a CoPE merged with a bias kind (``ndpe.merge(alibi_pos, cope_pos)``) gates on the content logits only.
  Keys after the query get gate 0 (x-transformers masks them with ``-finfo.max`` first, ``sigmoid -> 0``).
- Positions. ``p_ij = sum_{t=j}^{i} g_it`` (the reversed cumulative sum over keys), clamped to
  ``max_pos - 1`` as the reference (``pos.clamp(max=max_pos - 1)``): a key more than ``max_pos - 1``
  gated tokens back shares the last position.
- Term. ``e_ij = q_i . E[p_ij]`` interpolated linearly between the integer positions
  ``floor(p_ij)`` and ``ceil(p_ij)`` of the learned table ``E`` ``(max_pos, head_dim)`` (the reference's
  ``logits_ceil * w + logits_floor * (1 - w)``, ``w = p - floor(p)``), NOT divided by ``sqrt(head_dim)``
  (the reference adds ``q . E`` to the scaled ``sim`` as is). ``E`` is shared by all heads, as the reference.
- Causal only (``CoPE.causal_only``): the term is a :class:`ndpe.LogitsTerm` with ``causal_only=True``, so
  ``attn_bias(pos, q=, k=, causal=False)`` (and ``ndpe.Attention(causal=False)``) raises. Keys after the
  query get term 0; the attention masks them. In flex attention (:meth:`CoPE.score_bias`) they get ``-inf``:
  score_bias cannot see whether the caller asked for a causal mask, so the grid rows mask themselves (prefix
  rows get no term from a score_mod; pass ``causal=True``).
- Positions (the tokens' coordinates) only order the tokens: query ``i`` sees keys with
  ``key_position <= query_position``, and they must increase along the sequence (the counting runs in token
  order); beyond that CoPE ignores their values. Not coordinate-based (no position augmentation).
  KV-cache decoding (``pe((n,), past=p)``): queries at ``p .. p + n - 1`` against keys ``0 .. p + n - 1``
  give exactly the full sequence's rows.
- Prefix tokens (``num_prefix``) get term 0 and are not counted by the gates.
- ``talking_heads=True`` (an x-transformers extra, not in the paper): the scaled logits are mixed across heads
  by a learned ``(heads, heads)`` matrix (x-transformers' 1x1 ``Conv2d(heads, heads)`` weight) before the
  gates. x-transformers' ``soft_onehot`` (softmax over positions instead of linear interpolation) is not
  offered: it is not in the paper and raises an einx ``RankError`` in x-transformers 2.31.10.
- Init: ``E = 0`` as the paper and the reference (the term starts at 0 and learns from the first step);
  ``talking_heads`` starts at the identity (plain CoPE), where x-transformers keeps ``Conv2d``'s random init.
- Cost: per attention call, a few ``(B, heads, Nq, Nk)`` tensors (logits, gates, positions, two int64 indices)
  and ``(B, heads, Nq, max_pos)``; float32 whatever q's dtype. The term depends on q and k, so it is built in
  every layer (nothing to cache per grid). Memory (:mod:`ndpe.memory`): the table and the talking-heads matrix
  are checked against the budget when built, the ``(Nq, Nk)`` visibility mask when encoded, and the term per
  sample of the batch when called (:meth:`CoPE.term_bytes`), each before it is allocated.

>>> import ndpe, torch
>>> pe = ndpe.make(dims=1, kind="cope", dim=32, heads=2, max_pos=8)
>>> pos = pe((6,))
>>> q = k = torch.randn(1, 2, 6, 16)
>>> pos.logits(q, k).shape, pos.logits.causal_only
(torch.Size([1, 2, 6, 6]), True)
>>> ndpe.Attention(32, heads=2, causal=True)(torch.randn(1, 6, 32), pos).shape
torch.Size([1, 6, 32])
"""
from __future__ import annotations

from typing import Any, Callable

import torch
from torch import Tensor, nn

from ..base import Encoding
from ..checks import check_bool, check_int
from ..contract import LogitsTerm, PosOut
from ..coords import check_increasing
from ..memory import check_memory, check_tables
from ..registry import register


def cope_term(q: Tensor, k: Tensor, table: Tensor, visible: Tensor, head_mix: Tensor | None = None) -> Tensor:
    """CoPE's logit term ``(B, heads, Nq, Nk)`` float32 of queries ``(B, heads, Nq, hd)`` and keys
    ``(B, heads, Nk, hd)``: table ``(max_pos, hd)``, ``visible`` ``(..., Nq, Nk)`` bool (key at or before the
    query), optional head mixing ``(heads, heads)`` of the scaled logits. Keys not visible get 0.

    Every gate below is ``sigmoid(4 / 2) = 0.881``; q . E = (6, 22, 38) at positions 0, 1, 2, so the key
    ``0.881`` gated tokens back gets ``6 + 0.881 * 16`` and the one ``1.762`` back ``22 + 0.762 * 16``:

    >>> q = k = torch.ones(1, 1, 2, 4)
    >>> cope_term(q, k, torch.arange(12.0).reshape(3, 4), torch.ones(2, 2, dtype=torch.bool).tril())[0, 0]
    tensor([[20.0928,  0.0000],
            [34.1855, 20.0928]])
    """
    qf, kf, table = q.float(), k.float(), table.float()  # float32 math, also for a model cast to half precision
    head_mix = None if head_mix is None else head_mix.float()
    logits = (qf @ kf.transpose(-1, -2)) * qf.shape[-1] ** -0.5  # what SDPA computes
    if head_mix is not None:  # x-transformers' talking heads: a 1x1 conv over the heads axis
        logits = torch.einsum("gh,bhij->bgij", head_mix, logits)
    gates = torch.where(visible, logits.sigmoid(), 0.0)
    pos = gates.flip(-1).cumsum(-1).flip(-1).clamp(max=table.shape[0] - 1)  # sum_{t=j}^{i} g_it
    per_pos = qf @ table.t()  # (B, heads, Nq, max_pos): q_i . E[p] at every integer p
    floor = pos.floor()
    w = pos - floor
    term = per_pos.gather(-1, pos.ceil().long()) * w + per_pos.gather(-1, floor.long()) * (1 - w)
    return torch.where(visible, term, 0.0)


def _term_bytes(heads: int, max_pos: int, talking_heads: bool, nq: int, nk: int) -> int:
    """See :meth:`CoPE.term_bytes`."""
    return 4 * heads * nq * ((15 if talking_heads else 14) * nk + max_pos)


def _check_term(heads: int, max_pos: int, talking_heads: bool, nq: int, nk: int) -> None:
    """Refuse a term of one sample over the memory budget, before :func:`cope_term` builds it."""
    if not torch.compiler.is_compiling():
        check_memory(_term_bytes(heads, max_pos, talking_heads, nq, nk),
                     lambda: f"cope logits term of one sample ({heads} heads x {nq} queries x {nk} keys, float32, "
                             f"and q . E over max_pos={max_pos})",
                     "use shorter sequences", detail="with intermediates")


def _visible(positions: Tensor, keys: Tensor) -> Tensor:
    """``(..., Nq, Nk)`` bool: key position <= query position; batched positions get a heads axis."""
    vis = keys[..., None, :, 0] <= positions[..., :, None, 0]
    return vis[:, None] if vis.ndim == 3 else vis


@register("cope", dims=(1,))
class CoPE(Encoding):
    """Contextual position encoding: gated counts of keys index a learned table; see the module docstring.

    Args:
        max_pos: rows of the position table ``(max_pos, head_dim)`` (>= 1; default 16, x-transformers'
            ``cope_max_pos``); counted positions beyond ``max_pos - 1`` are clamped to it.
        talking_heads: mix the scaled logits across heads before the gates (x-transformers' option).
    """

    takes_key_positions = True  # decodes its pairwise term against cached keys
    has_parameters = True
    description = "CoPE (Golovneva et al. 2024): positions counted by gates `sigmoid(q.k)`"
    colour, marker = "#1b9e77", "d"

    @classmethod
    def task_options(cls, *, dims: int, causal: bool, train_grid: tuple[int, ...] | None,
                     max_grid: tuple[int, ...] | None) -> dict[str, Any]:
        """Counted positions reach the training length; beyond, they clamp (as the paper's table)."""
        return {"max_pos": int(train_grid[0]) if train_grid else 16}

    coordinate_based = False  # positions are counted from the content; coordinates only order the tokens
    causal_only = True  # the gates count keys up to the query: a bidirectional attention raises
    head_mix: nn.Parameter | None

    def __init__(self, *, dims: int, dim: int, heads: int = 1, max_pos: int = 16, talking_heads: bool = False):
        super().__init__(dims=dims, dim=dim, heads=heads)
        check_int(max_pos, "max_pos", low=1)
        check_bool(talking_heads, "talking_heads")
        self.max_pos, self.talking_heads = max_pos, talking_heads
        check_tables("cope", {"position table": (max_pos, self.head_dim)}, "use a smaller max_pos (counted positions "
                     "beyond it clamp to the last row)")
        if talking_heads:
            check_tables("cope", {"talking-heads matrix": (heads, heads)}, "use fewer heads or talking_heads=False")
        self.table = nn.Parameter(torch.zeros(max_pos, self.head_dim))  # the paper's pos_emb, zero-initialized
        self.head_mix = nn.Parameter(torch.eye(heads)) if talking_heads else None

    def term_bytes(self, num_queries: int, num_keys: int) -> int:
        """Estimated peak bytes of the term for ONE sample of the batch (the budget counts a logits term per sample,
        as a bias shared by the batch): 14 float32 words per pair and head at the peak of :func:`cope_term` (logits,
        gates, counted positions, their floor, weight and two int64 indices, the two gathers and their products;
        measured 13), 15 with talking heads, plus ``q . E`` ``(heads, Nq, max_pos)``."""
        return _term_bytes(self.heads, self.max_pos, self.talking_heads, num_queries, num_keys)

    def _check_visible(self, positions: Tensor, keys: Tensor) -> None:
        """Refuse the ``(..., Nq, Nk)`` bool visibility mask over the budget, before it is built."""
        if torch.compiler.is_compiling():
            return
        batch = positions.shape[0] if positions.ndim == 3 else 1
        nq, nk = positions.shape[-2], keys.shape[-2]
        check_memory(batch * nq * nk,
                     lambda: f"cope visibility mask of {nq} queries x {nk} keys ({batch} x {nq} x {nk} bool)",
                     "use shorter sequences")

    def encode(self, positions: Tensor, grid_shape, key_positions: Tensor | None = None) -> PosOut:
        keys = positions if key_positions is None else key_positions
        for name, p in (("positions", positions), ("key positions", keys)):
            check_increasing(p, "cope counts keys in token order", name)
        self._check_visible(positions, keys)
        visible = _visible(positions, keys)  # (..., Nq, Nk)
        table, head_mix = self.table, self.head_mix
        heads, max_pos, talking = self.heads, self.max_pos, self.talking_heads

        def term(q: Tensor, k: Tensor) -> Tensor:
            if q.shape[-2] != visible.shape[-2] or k.shape[-2] != visible.shape[-1]:
                raise ValueError(f"cope was encoded for {visible.shape[-2]} queries and {visible.shape[-1]} keys "
                                 f"(grid tokens) but got q {tuple(q.shape)} and k {tuple(k.shape)}")
            _check_term(heads, max_pos, talking, q.shape[-2], k.shape[-2])
            return cope_term(q, k, table, visible, head_mix)

        return PosOut(logits=LogitsTerm(fn=term, causal_only=True))

    def score_bias(self, coords: Tensor, *, q: Tensor | None = None,
                   k: Tensor | None = None) -> Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]:
        """``(b, h, i, j) -> term[b, h, i, j]`` for flex attention (see :meth:`Encoding.score_bias`).

        CoPE's positions are cumulative sums over keys, so this MATERIALIZES the ``(B, heads, N, N)`` term from
        ``q``, ``k`` (grid tokens, ``(B, heads, N, head_dim)``) and indexes it: flex saves nothing in memory here.
        Keys after the query get ``-inf`` (CoPE is causal whether or not the score_mod adds the mask).
        """
        if q is None or k is None:
            raise ValueError("cope's term depends on the queries and keys: pass q= and k= (B, heads, N, head_dim)")
        check_increasing(coords, "cope counts keys in token order")
        self._check_visible(coords, coords)
        _check_term(self.heads, self.max_pos, self.talking_heads, q.shape[-2], k.shape[-2])
        visible = _visible(coords, coords)
        term = torch.where(visible, cope_term(q, k, self.table, visible, self.head_mix), float("-inf"))

        def bias(b: Tensor, h: Tensor, i: Tensor, j: Tensor) -> Tensor:
            return term[b, h, i, j]

        return bias
