"""A reference multi-head attention that takes any :class:`~ndpe.PosOut`."""
from __future__ import annotations

import torch
from einops import rearrange
from torch import Tensor, nn

from .apply import attention as apply_attention
from .apply import add_masks, additive_mask, attend, attend_probs, causal_mask  # noqa: F401  (ndpe.attention's API)
from .checks import check_bool, check_heads, check_number
from .contract import PosOut


class Attention(nn.Module):
    """Multi-head self-attention on ``F.scaled_dot_product_attention``, the encoding applied by
    :func:`ndpe.apply.attention` (the recipe every integration uses).

    Rotary encodings rotate q and k, bias and logits encodings go in as ``attn_mask``, a ``prob_bias`` (eRPE) is added
    after the softmax (the explicit path for such a field, fused SDPA otherwise), a ``frame`` (GTA, PRoPE) maps q, k,
    v and the output per token; additive, concatenated and token-transforming encodings were already applied to the
    tokens by ``ndpe.apply_tokens``.

    Decoding: pass a :class:`KVCache` and the encoding of the new tokens (``pe((n,), past=cache.length)``);
    the new keys and values (rotated, as attention uses them) are appended to the cache and the new queries
    attend to every cached key.

    >>> import ndpe
    >>> attn = Attention(64, heads=4)
    >>> pe = ndpe.make(dims=2, kind="rope", dim=64, heads=4)
    >>> attn(torch.randn(2, 1 + 12, 64), pe((3, 4), num_prefix=1)).shape
    torch.Size([2, 13, 64])
    """

    def __init__(self, dim: int, heads: int = 8, *, qkv_bias: bool = True, attn_drop: float = 0.0,
                 proj_drop: float = 0.0, causal: bool = False):
        super().__init__()
        check_heads(dim, heads)
        check_bool(qkv_bias, "qkv_bias")
        check_bool(causal, "causal")
        check_number(attn_drop, "attn_drop", low=0.0, high=1.0)
        check_number(proj_drop, "proj_drop", low=0.0, high=1.0)
        self.heads, self.causal, self.attn_drop = heads, causal, attn_drop
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)

    def forward(self, x: Tensor, pos: PosOut | None = None, cache: "KVCache | None" = None) -> Tensor:
        """Attend over the tokens ``x`` ``(B, T, dim)`` with the encoding ``pos``; returns ``(B, T, dim)``.

        Args:
            x: the tokens, batch first, prefix (cls / register) tokens first; ``ndpe.apply_tokens`` already applied.
            pos: what ``pe(grid_shape, num_prefix=P)`` returned for these ``T = P + N`` tokens (None: no encoding).
                Its rotation turns q and k, its bias or logits term goes to SDPA as ``attn_mask``.
            cache: this layer's :class:`KVCache` when decoding (one per layer); ``pos`` then encodes the ``T`` new
                tokens after the cached ones, ``pe((T,), past=cache.length)``.

        A ``pos`` built for other tokens (another grid, num_prefix or KV-cache length) is refused in one line.

        >>> import ndpe
        >>> pe, attn = ndpe.make(dims=1, kind="alibi", dim=32, heads=4), Attention(32, heads=4, causal=True)
        >>> attn(torch.randn(2, 6, 32), pe((6,))).shape
        torch.Size([2, 6, 32])
        """
        q, k, v = rearrange(self.qkv(x), "b t (three h d) -> three b h t d", three=3, h=self.heads)  # (B, H, T, hd)
        drop = self.attn_drop if self.training else 0.0
        out = apply_attention(q, k, v, pos, cache=cache, dropout_p=drop, is_causal=self.causal, x=x)
        return self.proj_drop(self.proj(rearrange(out, "b h t d -> b t (h d)")))


class KVCache:
    """Keys and values of one attention layer for decoding, as the attention used them (rotated keys).

    One per layer: each :class:`Attention` of a decoder gets its own (``[KVCache() for _ in blocks]``), and every
    layer's cache holds the same tokens, so any of them gives ``past=cache.length`` for the next encoding.
    ``update(k, v)`` appends the new tokens' ``(B, heads, n, head_dim)`` keys and values and returns all of
    them; ``length`` is the number of cached tokens (the next call's ``past``).

    >>> cache = KVCache()
    >>> k, v = cache.update(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4))
    >>> cache.length, cache.update(torch.zeros(1, 2, 1, 4), torch.zeros(1, 2, 1, 4))[0].shape
    (3, torch.Size([1, 2, 4, 4]))
    """

    def __init__(self) -> None:
        self.k: Tensor | None = None
        self.v: Tensor | None = None

    @property
    def length(self) -> int:
        """The number of cached tokens: the ``past=`` of the next tokens' encoding."""
        return 0 if self.k is None else self.k.shape[-2]

    def update(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Append the new tokens' keys and values ``(B, heads, n, head_dim)``; return all cached ones,
        ``(B, heads, length, head_dim)`` each."""
        for t, name in ((k, "keys"), (v, "values")):
            if not isinstance(t, Tensor) or t.dim() != 4 or not t.is_floating_point():
                raise ValueError(f"{name} must be a floating (B, heads, T, head_dim) tensor, got "
                                 f"{tuple(t.shape) if isinstance(t, Tensor) else type(t).__name__}")
        if k.shape[:-1] != v.shape[:-1] or k.device != v.device or k.dtype != v.dtype:
            raise ValueError(f"keys {tuple(k.shape)} {k.dtype} on {k.device} and values {tuple(v.shape)} {v.dtype} on "
                             f"{v.device} must have the same batch, heads, tokens, dtype and device")
        if self.k is None or self.v is None:
            self.k, self.v = k, v
        else:
            if (k.shape[:2] != self.k.shape[:2] or k.shape[-1] != self.k.shape[-1] or v.shape[-1] != self.v.shape[-1]
                    or k.dtype != self.k.dtype or k.device != self.k.device):
                raise ValueError(f"new keys {tuple(k.shape)} / values {tuple(v.shape)} {k.dtype} on {k.device} do not "
                                 f"extend the cached {tuple(self.k.shape)} / {tuple(self.v.shape)} {self.k.dtype} on "
                                 f"{self.k.device} (batch, heads, T, head_dim; one dtype and device)")
            self.k, self.v = torch.cat([self.k, k], dim=-2), torch.cat([self.v, v], dim=-2)
        return self.k, self.v
