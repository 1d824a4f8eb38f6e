"""``dd-alibi-row``: data-dependent ALiBi with per-row forget gates (x-transformers' ``PerRowDataDependentAlibi``).

The Forgetting Transformer's gates (``dd-alibi``) belong to a token; here each query has its own gate on every key
before it, from a small query and key of their own (``dim_head`` channels per head, one projection without bias):

    g[h, i, t] = post_log_scale * log sigmoid(q_{i,h} . k_{t,h} / sqrt(dim_head))      for t < i
    bias[h, i, j] = sum_{t = j}^{i - 1} g[h, i, t]   (j < i),      0   (j >= i)

so a key is down-weighted by the product of the gates that its query sets on it and on every key between them. With
every gate ``exp(-m)`` it is ALiBi's ``-m (i - j)``. Equal to x-transformers 2.31.10's ``PerRowDataDependentAlibi``
with its weights copied (``tests/test_dd_alibi_row.py``); as there, causal attention only (the reference has no
bidirectional form) and one gate projection per encoding (build one per block for one per layer).

The term reads the token states, so it travels as a ``logits`` term with ``uses_states`` (``ndpe.Attention`` hands it
the tokens it attends over); it is materialized ``(B, heads, N, N)`` float32. Decoding with a KV cache is refused (the
cached keys' gate keys would have to be kept beside the cache). Positions only order the tokens (as dd-alibi's).

>>> import ndpe, torch
>>> pe = ndpe.make(dims=1, kind="dd-alibi-row", dim=32, heads=4)
>>> attn = ndpe.Attention(32, heads=4, causal=True)
>>> attn(torch.randn(2, 10, 32), pe((10,))).shape
torch.Size([2, 10, 32])
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor, nn

from ..base import Encoding
from ..checks import check_int, check_number
from ..contract import LogitsTerm, PosOut
from ..coords import check_increasing
from ..registry import register
from .dd_alibi import check_states


def row_forget_bias(gates: Tensor) -> Tensor:
    """``(..., N, N)`` from log gates ``g[..., i, t]`` of query ``i`` on key ``t``: ``sum_{t=j}^{i-1} g[i, t]`` below
    the diagonal, 0 on and above it (the reference's masked reverse cumulative sum, in its order).

    >>> row_forget_bias(torch.log(torch.full((3, 3), 0.5))).exp()   # every gate 1/2: ALiBi with slope log 2
    tensor([[1.0000, 1.0000, 1.0000],
            [0.5000, 1.0000, 1.0000],
            [0.2500, 0.5000, 1.0000]])
    """
    n = gates.shape[-1]
    future = torch.ones(n, n, dtype=torch.bool, device=gates.device).triu()  # keys at or after the query
    return gates.masked_fill(future, 0.0).flip(-1).cumsum(-1).flip(-1)


@register("dd-alibi-row", dims=(1,))
class PerRowDataDependentAlibi(Encoding):
    """Data-dependent ALiBi with a forget gate per query and key (x-transformers' per-row form); see the module doc.

    Args:
        dim_head: channels per head of the gates' own queries and keys (x-transformers'
            ``data_dependent_alibi_per_row_dim_head``).
        post_log_scale: multiplies the log gates.
    """

    has_parameters = True
    coordinate_based = False  # the bias comes from the tokens; positions only order them
    takes_key_positions = True  # so that decoding reaches encode() and is refused there, in one line
    causal_only = True  # the reference's only form
    description = ("data-dependent ALiBi with per-row forget gates from a small q, k (x-transformers' "
                   "PerRowDataDependentAlibi)")
    colour, marker = "#5e3c99", "<"

    def __init__(self, *, dims: int, dim: int, heads: int = 1, dim_head: int = 8, post_log_scale: float = 1.0):
        super().__init__(dims=dims, dim=dim, heads=heads)
        self.dim_head = check_int(dim_head, "dim_head", low=1)
        self.post_log_scale = check_number(post_log_scale, "post_log_scale", low=0.0, dtype=torch.float32)
        self.to_gates = nn.Linear(dim, 2 * heads * dim_head, bias=False)  # (q, k) x heads x dim_head, as the reference

    def gates(self, x: Tensor) -> Tensor:
        """Log forget gates ``(B, heads, N, N)`` of the token states ``x`` ``(B, N, dim)``, before the causal mask."""
        qk = self.to_gates(x.to(self.to_gates.weight.dtype))
        q, k = rearrange(qk, "b n (qk h d) -> qk b h n d", qk=2, d=self.dim_head)
        return F.logsigmoid((q @ k.transpose(-1, -2)).float() * self.dim_head ** -0.5) * self.post_log_scale

    def encode(self, positions: Tensor, grid_shape, key_positions: Tensor | None = None) -> PosOut:
        if key_positions is not None:
            raise ValueError("dd-alibi-row cannot decode with a KV cache: its bias needs the gate keys of every cached "
                             "token, which the cache does not keep; run the full sequence (use_cache=False)")
        check_increasing(positions, "dd-alibi-row gates the tokens in token order (positions only order them)")
        n = positions.shape[-2]

        def term(q: Tensor, k: Tensor, x: Tensor) -> Tensor:
            check_states(self, x, k, n, n, 3 * n)
            return row_forget_bias(self.gates(x))

        return PosOut(logits=LogitsTerm(fn=term, causal_only=True, uses_states=True))
