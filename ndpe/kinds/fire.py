"""``fire``: Functional Interpolation for Relative Positions (Li et al., ICLR 2024), a learned attention bias.

Conventions:
- Formula. ``bias[h, i, j] = f(psi(d_ij) / psi(max(L, r_i)))[h]``, ``psi(x) = log(c x + 1)``, where
  ``f`` is the MLP ``Linear(1, mlp_width) -> ReLU -> Linear(mlp_width, heads)`` (width 32), ``c`` a
  learned scalar (init ``init_c = 0.1``) and ``L`` a learned threshold. As in the public PyTorch
  code of the paper (mcleish7/arithmetic ``cramming/architectures/embeddings.py`` ``FIRE``),
  ``L = |L_multiplier * init_L|`` with the parameter ``L_multiplier`` (init 1) and the fixed
  ``init_L`` (default 512), ``c`` and ``L`` are kept positive by absolute values
  (``psi(x) = log(|c x| + 1)``) and ``1e-6`` is added to the denominator. Parameter names equal
  that code's, so its ``state_dict`` loads (drop its ``init_L`` entry, an option here).
- Causal (``causal=True``, 1D only: the paper). ``d_ij = p_i - p_j`` and ``r_i = p_i``, the
  query's position (0-based index units), so ``r_i`` is the longest distance to a key ``j <= i``.
  Keys after the query (``p_j > p_i``) get 0 and must be masked by the attention
  (``ndpe.Attention(causal=True)``), as alibi's causal form. A decoder uses this form.
- Bidirectional (default; 1D, 2D, 3D). ``d_ij = ||p_i - p_j||`` (euclidean; ``|i - j|`` in 1D)
  and ``r_i`` = the distance from the query to the farthest corner of the keys' bounding box
  (per axis ``max(p_i - min_k, max_k - p_i)``): on a full grid, the longest distance from the
  query to any key, as ``i`` is in the causal case. Not the distance from the grid origin: the
  origin is arbitrary (``coords="centered"`` puts it mid-grid) and keys beyond ``r_i`` would leave
  ``[0, 1]``. With it the normalised distance ``psi(d) / psi(max(L, r))`` is in ``[0, 1]`` for
  every pair at every grid size (the paper's progressive interpolation), and translating all
  positions together leaves the bias unchanged. It depends on the keys present: a decoder must
  use ``causal=True`` (the bidirectional ``r_i`` of an early query sees the sequence length; decoding
  with ``causal=False`` raises).
- Translation. While ``r_i <= L`` (every query of a grid smaller than ``L``) the bias depends on
  the offset alone, a learned function of the log distance; beyond ``L`` it interpolates: a fixed
  offset maps to a smaller normalised distance as the query's range grows.
- Decoding (``pe((n,), past=p)``): queries ``p .. p + n - 1`` against keys ``0 .. p + n - 1``,
  equal to the last ``n`` rows of the ``p + n`` sequence.
- Output ``(heads, N, N)`` float32, ``(B, heads, N, N)`` for batched positions. Memory: the MLP
  runs per pair, ``~4 * N * N * (2 * mlp_width + 2 * heads + dims + 3)`` bytes (docs/bias.md);
  :mod:`ndpe.flex` evaluates it per logit instead.

>>> import ndpe
>>> pe = ndpe.make(dims=1, kind="fire", dim=64, heads=4, causal=True)
>>> pe((6,)).bias.shape
torch.Size([4, 6, 6])
>>> x = pe.normalized_distance(pe.coords((1000,))).detach()   # beyond L = 512: still in [0, 1]
>>> bool(x.tril().max() <= 1), round(float(x[999, 0]), 4)
(True, 1.0)
"""
from __future__ import annotations

import math
from typing import Any, cast

import torch
from torch import Tensor, nn

from ..base import Encoding
from ..checks import check_bool, check_int, check_number
from ..contract import PosOut
from ..coords import FLOAT32_MAX, pair_limit, tightest
from ..memory import check_tables
from ..pairs import euclidean, pair_axes, token_axes
from ..registry import register
from .relative import heads_first

EPS = 1e-6  # added to the denominator, as the paper's code


@register("fire", dims=(1, 2, 3))
class FIRE(Encoding):
    """FIRE attention bias ``f(psi(d) / psi(max(L, r)))``; see the module docstring for conventions.

    Args:
        causal: 1D only; the paper's form (``d = i - j``, ``r = i``, 0 above the diagonal, to be masked).
        mlp_width: hidden units of ``f`` (default 32).
        init_c: initial ``c`` of ``psi(x) = log(c x + 1)`` (default 0.1).
        init_L: the threshold ``L`` at init, in index units (default 512); learned through a multiplier.
    """

    takes_key_positions = True  # decodes its pairwise term against cached keys
    has_parameters = True
    description = "FIRE (Li et al. 2024): MLP of the log distance, progressively normalized; N-D by Euclidean distance"
    colour, marker = "#b15928", "8"
    causal_options = {"causal": True}  # the paper's causal form

    def __init__(self, *, dims: int, dim: int, heads: int = 1, causal: bool = False, mlp_width: int = 32,
                 init_c: float = 0.1, init_L: float = 512.0):
        super().__init__(dims=dims, dim=dim, heads=heads)
        check_bool(causal, "causal")
        if causal and dims != 1:
            raise ValueError(f"fire causal=True needs dims=1 (a token order), got dims={dims}; "
                             "use the bidirectional N-D form (causal=False)")
        check_int(mlp_width, "mlp_width", low=1)
        self.causal, self.mlp_width = causal, mlp_width
        self.init_c = check_number(init_c, "init_c", low=0.0, inclusive=False, dtype=torch.float32)
        self.init_L = check_number(init_L, "init_L", low=0.0, inclusive=False, dtype=torch.float32)
        check_tables("fire", {"MLP": (mlp_width, 3 + heads)}, "use a smaller mlp_width")  # two layers, their biases
        self.mlp = nn.Sequential(nn.Linear(1, mlp_width), nn.ReLU(), nn.Linear(mlp_width, heads))
        self.c = nn.Parameter(torch.tensor(self.init_c))
        self.L_multiplier = nn.Parameter(torch.tensor(1.0))

    @classmethod
    def example_options(cls, dims: int) -> dict[str, Any]:
        """A small threshold, so a short test grid has queries on both sides of ``L``."""
        return {"init_L": 4.0}

    @property
    def threshold(self) -> Tensor:
        """The learned threshold ``L = |L_multiplier * init_L|`` (0-d)."""
        return (self.L_multiplier.float() * self.init_L).abs()

    def position_limit(self, dtype: torch.dtype = torch.float32) -> tuple[float, str] | None:
        """Coordinates whose float32 offsets (and, N-D, their squares) stay finite, and ``|c| d`` in ``psi``: a distance
        ``d`` (or range ``r``) is at most ``2 sqrt(dims) |coordinate|``; the MLP then sees finite ratios of logarithms
        (reads ``c``: explicit positions only, which are read anyway)."""
        c = float(self.c.detach().abs())
        psi = None if not c else (FLOAT32_MAX / (2 * math.sqrt(self.dims) * c), "where fire's float32 c * distance "
                                                                                "overflows")
        return tightest(pair_limit(self.kind, self.dims, self.dims > 1), psi)

    def _psi(self, x: Tensor) -> Tensor:
        return torch.log((self.c.float() * x).abs() + 1)

    def _ranges(self, q: Tensor, k: Tensor) -> Tensor:
        """``r (..., Nq)``: the query's position (causal) or its distance to the farthest corner of the keys' box."""
        if self.causal:
            return q[..., 0]
        far = torch.maximum(q - k.amin(-2, keepdim=True), k.amax(-2, keepdim=True) - q)  # (..., Nq, dims)
        return far[..., 0] if self.dims == 1 else torch.linalg.vector_norm(far, dim=-1)

    def _distance(self, qc: list[Tensor], kc: list[Tensor]) -> Tensor:
        """``d``: ``p_i - p_j`` when causal (negative for keys after the query), else ``||p_i - p_j||``, of per-axis
        query and key coordinates (broadcasting, :mod:`ndpe.pairs`)."""
        offsets = [q - k for q, k in zip(qc, kc)]
        if self.causal:
            return offsets[0]
        return offsets[0].abs() if self.dims == 1 else euclidean(offsets)

    def _normalizer(self, r: Tensor) -> Tensor:
        """``psi(max(L, r)) + eps`` per query."""
        return self._psi(torch.maximum(r, self.threshold)) + EPS

    def normalized_distance(self, positions: Tensor, key_positions: Tensor | None = None) -> Tensor:
        """The MLP's input ``psi(d_ij) / psi(max(L, r_i))`` ``(..., Nq, Nk)`` for positions ``(..., N, dims)``
        (keys = queries unless ``key_positions``); in ``[0, 1]`` on keys the query attends to."""
        q = positions.float()
        k = q if key_positions is None else key_positions.float()
        qc, kc = pair_axes(q, k)
        return self._psi(self._distance(qc, kc)) / self._normalizer(self._ranges(q, k))[..., None]

    def pair_words(self) -> int:
        """Float32 words per pair at the peak: the offsets, distances and normalised distances, the MLP's hidden
        units before and after ReLU, its output and the masked copy."""
        return self.dims + 3 + 2 * self.mlp_width + 2 * self.heads

    def pair_bias(self, qc: list[Tensor], kc: list[Tensor], norm: Tensor, h: Tensor | None = None) -> Tensor:
        """``f(psi(d_ij) / norm_i)`` of per-axis query and key coordinates (:mod:`ndpe.pairs`) and the query's
        normaliser ``psi(max(L, r_i)) + eps``: every head ``(..., heads)``, or head ``h`` (flex, one per logit).
        The one formula of both the materialized bias and the flex score_mod."""
        d = self._distance(qc, kc)
        out = self._f(self._psi(d) / norm, h)
        if not self.causal:
            return out
        return torch.where(d[..., None] < 0 if h is None else d < 0, 0.0, out)  # keys after the query: masked

    def _f(self, x: Tensor, h: Tensor | None = None) -> Tensor:
        """The MLP ``f`` of inputs ``x``: every head ``(..., heads)`` (in the model's dtype, a half-precision model
        too), or head ``h`` of one logit's 0-d ``x`` (flex lowers scalar ops only: a loop over the hidden units)."""
        first, last = cast(nn.Linear, self.mlp[0]), cast(nn.Linear, self.mlp[2])
        if h is None:
            return self.mlp(x.unsqueeze(-1).to(first.weight.dtype)).float()
        w1, b1, w2, b2 = first.weight[:, 0].float(), first.bias.float(), last.weight.float(), last.bias.float()
        out = b2[h]
        for u in range(self.mlp_width):
            out = out + w2[h, u] * torch.relu(w1[u] * x + b1[u])
        return out

    def encode(self, positions: Tensor, grid_shape, key_positions: Tensor | None = None) -> PosOut:
        if key_positions is not None and not self.causal:
            raise ValueError("fire causal=False normalizes by the query's farthest key, which in a full sequence "
                             "includes later keys; decoding with a KV cache needs fire causal=True")
        q = positions.float()
        k = q if key_positions is None else key_positions.float()
        norm = self._normalizer(self._ranges(q, k))[..., None]  # (..., Nq, 1)
        bias = self.pair_bias(*pair_axes(q, k), norm)  # (..., Nq, Nk, heads)
        return PosOut(bias=heads_first(bias))

    def score_bias(self, coords: Tensor, *, q: Tensor | None = None, k: Tensor | None = None):
        """``(b, h, i, j) -> f(psi(d_ij) / psi(max(L, r_i)))[h]`` for flex attention (see :meth:`Encoding.score_bias`):
        :meth:`pair_bias` per logit; only the per-query normaliser ``(N,)`` is precomputed."""
        pos = coords.float()
        axes, norm = token_axes(pos), self._normalizer(self._ranges(pos, pos))  # per-axis (N,), (N,)
        return lambda b, h, i, j: self.pair_bias([ax[i] for ax in axes], [ax[j] for ax in axes], norm[i], h)
