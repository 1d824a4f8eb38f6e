"""A reference multi-head attention that takes any :class:`~ndpe.PosOut`."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor, nn

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
        drop = self.attn_drop if self.training else 0.0
        if mask is None:
            out = F.scaled_dot_product_attention(q, k, v, dropout_p=drop, is_causal=self.causal)
        else:
            if self.causal:
                mask = mask + causal_mask(x.shape[1], device=x.device, dtype=mask.dtype)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=drop)
        return self.proj_drop(self.proj(rearrange(out, "b h t d -> b t (h d)")))


def causal_mask(n: int, *, device=None, dtype=torch.float32) -> Tensor:
    """``(n, n)`` additive mask: 0 on and below the diagonal, -inf above."""
    return torch.full((n, n), float("-inf"), device=device, dtype=dtype).triu(1)
