"""``erpe``: efficient Relative Position Encoding (eRPE, Foumani et al. 2023, ConvTran), added after the softmax, 1D.

One learned scalar per head and offset, added to the attention *probabilities*, not to the logits::

    attn[h, i, j] = softmax_j(q_i . k_j * scale) + table[i - j + L - 1, h]

Conventions (ConvTran's ``Models/Attention.py``, class ``Attention_Rel_Scl``, ported in ``tests/test_erpe.py``):
- Offset ``i - j`` (query minus key), ``L = length`` the series length: a table ``(2L - 1, heads)``, row
  ``i - j + L - 1``, as ConvTran's ``relative_bias_table`` and ``relative_index`` (with ``seq_len = L``). On longer
  series, offsets beyond ``L - 1`` share the edge rows (``relative``'s clipping, ``max_distance = L - 1``), where
  ConvTran is built for one length.
- After the softmax: the ``PosOut`` field ``prob_bias`` (declared with ``stage="probs"``), which attention adds to
  the probabilities (:func:`ndpe.attend`); ``ndpe.Attention`` then leaves fused SDPA for the explicit
  softmax. The rows no longer sum to 1, as in ConvTran. Keys the mask hides (causal, packed samples) stay at 0.
- Init zeros, as ConvTran (the term's gradient does not pass through the softmax, so it trains from the first step).
- Integer positions (offsets index the table); decodes with a KV cache. Flex attention refuses it (a score_mod acts
  before the softmax).

>>> import ndpe
>>> pe = ndpe.make(dims=1, kind="erpe", dim=64, heads=8, length=12)
>>> pe.table.shape, pe((12,)).prob_bias.shape
(torch.Size([23, 8]), torch.Size([8, 12, 12]))
"""
from __future__ import annotations

from typing import Any

import torch
from einops import rearrange
from torch import Tensor, nn

from ..base import Encoding
from ..checks import check_int
from ..contract import PosOut
from ..memory import check_tables
from ..registry import register
from .relative import clip_index


@register("erpe", dims=(1,))
class ERPE(Encoding):
    """eRPE: a learned ``(2 length - 1, heads)`` table of offsets added after the softmax; see the module docstring.

    Args:
        length: the series length ``L`` the table covers (ConvTran's ``seq_len``): offsets ``-(L - 1) .. L - 1``.
    """

    takes_key_positions = True  # decodes its pairwise term against cached keys
    has_parameters = True
    integer_positions = True  # offsets index a table
    description = "eRPE (ConvTran, Foumani et al. 2023): learned relative scalar per head, added after the softmax"

    def __init__(self, *, dims: int, dim: int, heads: int = 1, length: int):
        super().__init__(dims=dims, dim=dim, heads=heads)
        check_int(length, "length", low=1)
        self.length = length
        check_tables("erpe", {"table": (2 * length - 1, heads)}, "use a smaller length (offsets beyond it share the "
                     "edge rows)")
        self.table = nn.Parameter(torch.zeros(2 * length - 1, heads))  # (2L - 1, heads), zeros as ConvTran

    @classmethod
    def example_options(cls, dims: int) -> dict[str, Any]:
        return {"length": 8}

    @classmethod
    def task_options(cls, *, dims: int, causal: bool, train_grid: tuple[int, ...] | None,
                     max_grid: tuple[int, ...] | None) -> dict[str, Any]:
        """The training series' length (ConvTran's ``seq_len``): longer test series share the edge offsets."""
        if train_grid is None:
            raise ValueError("erpe sizes its table by the training series: pass train_grid")
        return {"length": int(train_grid[0])}

    def pair_words(self) -> int:
        """Float32 words per pair at the peak: the int64 index with its temporaries, then the gather next to it."""
        return max(8, 2 + self.heads)

    def encode(self, positions: Tensor, grid_shape, key_positions: Tensor | None = None) -> PosOut:
        if not torch.compiler.is_compiling() and not bool((positions == positions.round()).all()):
            raise ValueError("erpe looks integer offsets up in a table but got fractional positions; pass integer "
                             "(index) positions")
        keys = None if key_positions is None else key_positions.round().long()
        index = clip_index(positions.round().long(), (self.length - 1,), keys)  # (..., N, M): i - j + L - 1
        return PosOut(prob_bias=rearrange(self.table.t()[:, index], "h ... i j -> ... h i j"))  # (..., heads, N, M)
