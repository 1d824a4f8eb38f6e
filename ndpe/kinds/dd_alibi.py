"""``dd-alibi``: data-dependent ALiBi, the Forgetting Transformer's forget gates (Lin et al. 2025).

Each token ``t`` and head ``h`` gets a forget gate ``f_{t,h} = sigmoid(w_h . x_t + b_h)`` from the token state
``x_t`` the attention layer receives; the logit of query ``i`` and key ``j <= i`` gets

    bias[h, i, j] = post_log_scale * sum_{t = j + 1}^{i} log f_{t,h}  =  c_{i,h} - c_{j,h},   c = cumsum(log f)

so a key is down-weighted by the product of the gates between it and the query: ALiBi's ``-m (i - j)`` when every
gate is ``exp(-m)``, but learned and content-dependent (a token can close the gate on everything before it).
``bias_init=5`` (the reference's) starts the gates at ``sigmoid(5) = 0.993``: almost no forgetting. Bidirectional
(``causal=False``, x-transformers'): a second set of gates for keys after the query, ``bias[h, i, j] = c'_{j,h} -
c'_{i,h}`` for ``j >= i``. Equal to x-transformers' ``DataDependentAlibi`` with its weights
(``tests/test_dd_alibi.py``).

The term reads the token states, so it travels as a ``logits`` term with ``uses_states``: ``ndpe.Attention``
hands it the tokens it attends over. Differences from the reference: one gate projection per encoding (the paper
and x-transformers have one per layer: build one encoding per block to get that); the term is materialized
``(B, heads, N, N)`` (float32). Decoding with a KV cache is refused (the cached keys' gates would have to be kept
beside the cache). Positions are the token order only: explicit coordinates must increase along the tokens
(as cope's), and only their order counts.

>>> import ndpe, torch
>>> pe = ndpe.make(dims=1, kind="dd-alibi", dim=32, heads=4)
>>> attn = ndpe.Attention(32, heads=4, causal=True)
>>> attn(torch.randn(2, 10, 32), pe((10,))).shape
torch.Size([2, 10, 32])
"""
from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor, nn

from ..base import Encoding
from ..checks import check_bool, check_number
from ..contract import LogitsTerm, PosOut
from ..coords import check_increasing
from ..memory import check_memory
from ..registry import register


def forget_bias(gates: Tensor, causal: bool = True) -> Tensor:
    """``(B, heads, N, N)`` from log forget gates ``(B, N, heads)`` (``2 * heads`` when not ``causal``: forward gates
    first, then the backward ones): ``c_i - c_j`` below the diagonal, ``c'_j - c'_i`` above it.

    >>> g = torch.log(torch.full((1, 3, 1), 0.5))        # every gate 1/2
    >>> forget_bias(g)[0, 0].exp()                      # 1, 1/2, 1/4 ... back from each query
    tensor([[1.0000, 2.0000, 4.0000],
            [0.5000, 1.0000, 2.0000],
            [0.2500, 0.5000, 1.0000]])
    """
    c = rearrange(gates, "b n h -> b h n").float().cumsum(-1)
    if causal:
        return c[..., :, None] - c[..., None, :]
    forward, backward = c.chunk(2, dim=1)
    lower = (forward[..., :, None] - forward[..., None, :]).tril()
    upper = (backward[..., None, :] - backward[..., :, None]).triu()
    return lower + upper


def check_states(pe: Encoding, x: Tensor, k: Tensor, nq: int, nk: int, words: int) -> None:
    """The checks of a logits term that reads the token states (``uses_states``): states ``x`` ``(B, nq, dim)`` of the
    ``nq`` queries and keys ``k`` over ``nk`` tokens, and the term's memory, ``words`` float32 per batch, head and query
    (its intermediates included)."""
    if x.shape[-2] != nq or k.shape[-2] != nk:
        raise ValueError(f"{pe.kind} was encoded for {nq} queries and {nk} keys but got states {tuple(x.shape)} and "
                         f"keys {tuple(k.shape)}")
    if x.shape[-1] != pe.dim:
        raise ValueError(f"{pe.kind}'s term reads states of width dim={pe.dim}, got x {tuple(x.shape)}")
    if not torch.compiler.is_compiling():
        b = x.shape[0]
        check_memory(4 * b * pe.heads * nq * words, lambda: f"{pe.kind} term ({b} x {pe.heads} heads x {nq} queries x "
                     f"{words} float32 words, with intermediates)", "use shorter sequences")


@register("dd-alibi", dims=(1,))
class DataDependentAlibi(Encoding):
    """Data-dependent ALiBi (Forgetting Transformer): learned forget gates of the token states; see the module doc.

    Args:
        causal: the causal form (one gate per token and head; the term is for causal attention only) or the
            bidirectional one (a second gate set for the keys after the query).
        bias_init: initial bias of the gate projection (``sigmoid(5) = 0.993``: gates start open).
        post_log_scale: multiplies the log gates.
    """

    has_parameters = True
    coordinate_based = False  # the bias comes from the tokens; positions only order them
    takes_key_positions = True  # so that decoding reaches encode() and is refused there, in one line
    causal_only_option = "causal"  # its causal form is for causal attention only
    description = "data-dependent ALiBi (Lin et al. 2025, Forgetting Transformer): learned forget gates of the tokens"
    colour, marker = "#66a61e", "v"

    def __init__(self, *, dims: int, dim: int, heads: int = 1, causal: bool = True, bias_init: float = 5.0,
                 post_log_scale: float = 1.0):
        super().__init__(dims=dims, dim=dim, heads=heads)
        self.causal = check_bool(causal, "causal")  # the term says causal_only (as transformer-xl's)
        self.bias_init = check_number(bias_init, "bias_init", dtype=torch.float32)
        self.post_log_scale = check_number(post_log_scale, "post_log_scale", low=0.0, dtype=torch.float32)
        self.to_gates = nn.Linear(dim, heads * (1 if causal else 2))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.constant_(self.to_gates.bias, self.bias_init)  # the weight keeps nn.Linear's init (as the reference)

    @classmethod
    def example_options(cls, dims: int) -> dict[str, Any]:
        """The bidirectional form: usable with any attention (the causal one needs causal attention)."""
        return {"causal": False}

    @classmethod
    def task_options(cls, *, dims: int, causal: bool, train_grid: tuple[int, ...] | None,
                     max_grid: tuple[int, ...] | None) -> dict[str, Any]:
        """The form of the model's attention."""
        return {"causal": causal}

    def encode(self, positions: Tensor, grid_shape, key_positions: Tensor | None = None) -> PosOut:
        if key_positions is not None:
            raise ValueError("dd-alibi cannot decode with a KV cache: its bias needs the forget gates of every cached "
                             "token, which the cache does not keep; run the full sequence (use_cache=False)")
        check_increasing(positions, "dd-alibi gates the tokens in token order (positions only order them)")
        n = positions.shape[-2]

        def term(q: Tensor, k: Tensor, x: Tensor) -> Tensor:
            check_states(self, x, k, n, n, 3 * n)
            gates = F.logsigmoid(self.to_gates(x.to(self.to_gates.weight.dtype))) * self.post_log_scale
            return forget_bias(gates, self.causal)

        return PosOut(logits=LogitsTerm(fn=term, causal_only=self.causal, uses_states=True))
