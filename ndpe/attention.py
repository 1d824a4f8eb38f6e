"""A reference multi-head attention that takes any :class:`~ndpe.PosOut`."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor, nn

from .checks import check_bool, check_int, check_number
from .contract import PosOut, apply_qk, attn_bias


class Attention(nn.Module):
    """Multi-head self-attention on ``F.scaled_dot_product_attention``.

    Rotary encodings rotate q and k, bias encodings go in as ``attn_mask``; additive and
    concatenated encodings were already applied to the tokens by ``ndpe.apply_tokens``.

    >>> import ndpe
    >>> attn = Attention(64, heads=4)
    >>> pe = ndpe.make(dims=2, kind="rope", dim=64, heads=4)
    >>> attn(torch.randn(2, 1 + 12, 64), pe((3, 4), num_prefix=1)).shape
    torch.Size([2, 13, 64])
    """

    def __init__(self, dim: int, heads: int = 8, *, qkv_bias: bool = True, attn_drop: float = 0.0,
                 proj_drop: float = 0.0, causal: bool = False):
        super().__init__()
        check_int(dim, "dim", low=1)
        check_int(heads, "heads", low=1)
        check_bool(qkv_bias, "qkv_bias")
        check_bool(causal, "causal")
        check_number(attn_drop, "attn_drop", low=0.0, high=1.0)
        check_number(proj_drop, "proj_drop", low=0.0, high=1.0)
        if dim % heads:
            raise ValueError(f"dim={dim} is not divisible by heads={heads}")
        self.heads, self.causal, self.attn_drop = heads, causal, attn_drop
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)

    def forward(self, x: Tensor, pos: PosOut | None = None) -> Tensor:
        q, k, v = rearrange(self.qkv(x), "b t (three h d) -> three b h t d", three=3, h=self.heads)  # (B, H, T, hd)
        q, k = apply_qk(q, k, pos)
        mask = attn_bias(pos, q.dtype)
        if mask is not None and mask.dim() >= 3 and mask.shape[-3] not in (1, self.heads):
            raise ValueError(f"the encoding's bias has {mask.shape[-3]} heads but the attention has heads={self.heads}; "
                             f"build the encoding with heads={self.heads}")
        if mask is not None and mask.shape[-1] != x.shape[1]:
            raise ValueError(f"tokens have length {x.shape[1]} but the encoding's bias covers {mask.shape[-1]} "
                             "(grid + prefix)")
        drop = self.attn_drop if self.training else 0.0
        if mask is None:
            out = F.scaled_dot_product_attention(q, k, v, dropout_p=drop, is_causal=self.causal)
        else:
            if self.causal:
                mask = mask + causal_mask(x.shape[1], device=x.device, dtype=mask.dtype)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=drop)
        return self.proj_drop(self.proj(rearrange(out, "b h t d -> b t (h d)")))


def causal_mask(n: int, *, device: torch.device | str | None = None, dtype: torch.dtype = torch.float32) -> Tensor:
    """``(n, n)`` additive mask: 0 on and below the diagonal, -inf above."""
    return torch.full((n, n), float("-inf"), device=device, dtype=dtype).triu(1)
