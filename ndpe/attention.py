"""A reference multi-head attention that takes any :class:`~ndpe.PosOut`."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor, nn

from .checks import check_bool, check_heads, check_number
from .contract import PosOut, attn_term, check_pos, check_token_count, token_count
from .fields import acting
from .functional import rotate_qk, transform_heads


class Attention(nn.Module):
    """Multi-head self-attention on ``F.scaled_dot_product_attention``.

    Rotary encodings rotate q and k, bias and logits encodings go in as ``attn_mask``, a ``prob_bias`` (eRPE) is added
    after the softmax (:func:`attend`: the explicit path for such a field, fused SDPA otherwise), a ``frame`` (GTA,
    PRoPE) maps q, k, v and the output per token (``apply_v`` / ``apply_out``); additive,
    concatenated and token-transforming encodings were already applied to the tokens by ``ndpe.apply_tokens``.

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
        check_cache(pos, cache)  # pos checked here; rotate_qk and attend relate it to q, k and x
        if pos is not None and (covered := token_count(pos)) is not None:
            check_token_count(x, covered, pos.num_prefix, "x", ("B", "T", "dim"))
        q, k, v = rearrange(self.qkv(x), "b t (three h d) -> three b h t d", three=3, h=self.heads)  # (B, H, T, hd)
        q, k = rotate_qk(q, k, pos)
        v = transform_heads(v, pos, "v")  # a per-token map of the values (GTA / PRoPE's frame), if any
        if cache is not None:
            k, v = cache.update(k, v)  # (B, H, past + T, hd)
        drop = self.attn_drop if self.training else 0.0
        out = attend(q, k, v, pos, dropout_p=drop, is_causal=self.causal, x=x)  # its bias, logits and prob_bias
        out = transform_heads(out, pos, "out")  # its inverse per query token
        return self.proj_drop(self.proj(rearrange(out, "b h t d -> b t (h d)")))


def attend(q: Tensor, k: Tensor, v: Tensor, pos: PosOut | None, *, attn_mask: Tensor | None = None,
           dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None,
           x: Tensor | None = None) -> Tensor:
    """``F.scaled_dot_product_attention`` that takes a :class:`~ndpe.PosOut`: attention with every field of ``pos``
    that acts inside it; ``(B, heads, Tq, d)`` -> ``(B, heads, Tq, d_v)``.

    The encoding's logits term (:func:`ndpe.attn_bias`: a bias, a ``LogitsTerm``) is added to ``attn_mask``, the
    caller's own mask as SDPA takes it (boolean, True: attend; or additive float), and a field acting after the
    softmax (``prob_bias``, eRPE) is applied to the probabilities; without such a field this is fused SDPA. ``q``, ``k``
    as attention uses them (after :func:`ndpe.apply_qk`), ``v`` after :func:`ndpe.apply_v`; the output still takes
    :func:`ndpe.apply_out` (GTA, PRoPE), so the recipe that is right for every kind is::

        q, k = ndpe.apply_qk(q, k, pos)
        out = ndpe.apply_out(ndpe.attend(q, k, ndpe.apply_v(v, pos), pos, attn_mask=mask, is_causal=causal), pos)

    ``is_causal``: query ``i`` of ``Tq`` sees keys ``j <= i + Tk - Tq``, the queries being the last ``Tq`` of the
    keys (decoding with a KV cache), as in :func:`causal_mask` and :class:`Attention` (SDPA's own ``is_causal``
    aligns a non-square mask top-left); it may be combined with ``attn_mask``, which SDPA refuses. ``x``: the
    layer's token states ``(B, T, C)``, for a term that reads them (data-dependent ALiBi).

    >>> import ndpe
    >>> pe = ndpe.make(dims=1, kind="alibi", dim=32, heads=4)
    >>> q = k = v = torch.randn(2, 4, 6, 8)
    >>> keep = torch.tensor([True] * 5 + [False])                  # the last key is padding
    >>> ndpe.attend(q, k, v, pe((6,)), attn_mask=keep, is_causal=True).shape
    torch.Size([2, 4, 6, 8])
    """
    for t, name in ((q, "q"), (k, "k"), (v, "v")):
        if not isinstance(t, Tensor):
            raise TypeError(f"{name} must be a (B, heads, T, head_dim) tensor, got {type(t).__name__}")
    if pos is not None:
        check_pos(pos)
    term = attn_term(pos, q.dtype, q=q, k=k, causal=is_causal, x=x)  # its heads checked there
    if term is not None and term.shape[-2:] != (q.shape[-2], k.shape[-2]):
        raise ValueError(f"tokens have length {q.shape[-2]} (keys {k.shape[-2]}) but the encoding's bias covers "
                         f"{tuple(term.shape[-2:])} (grid + prefix; with a KV cache build it with past=)")
    mask = add_masks(attn_mask, term, q.dtype)
    if is_causal and (mask is not None or q.shape[-2] != k.shape[-2]):  # else SDPA's own is_causal
        mask = add_masks(mask, causal_mask(q.shape[-2], k.shape[-2], device=q.device, dtype=q.dtype), q.dtype)
        is_causal = False
    return attend_probs(q, k, v, pos, attn_mask=mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale)


def add_masks(mask: Tensor | None, term: Tensor | None, dtype: torch.dtype) -> Tensor | None:
    """``mask + term``, two attention masks as SDPA takes them (boolean, True: attend; or additive), either None: the
    other as it is; both: one additive mask of ``dtype`` (a boolean one as 0 / -inf), broadcast to both shapes."""
    if mask is None or term is None:
        return term if mask is None else mask
    return additive_mask(mask, dtype) + additive_mask(term, dtype)


def additive_mask(mask: Tensor, dtype: torch.dtype) -> Tensor:
    """An attention mask as SDPA takes it, made additive: a boolean one (True: attend) as 0 / -inf of ``dtype``, a
    float one as it is."""
    return mask if mask.dtype != torch.bool else torch.zeros_like(mask, dtype=dtype).masked_fill(~mask, float("-inf"))


def attend_probs(q: Tensor, k: Tensor, v: Tensor, pos: PosOut | None, *, attn_mask: Tensor | None = None,
                 dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None) -> Tensor:
    """``F.scaled_dot_product_attention(q, k, v, ...)`` that also applies the fields of ``pos`` acting on the attention
    probabilities (declared with ``stage="probs"``: ``prob_bias``, eRPE); ``(B, heads, Tq, d)`` -> ``(B, heads, Tq, d_v)``.

    ``q``, ``k`` as attention uses them (after :func:`ndpe.apply_qk`), ``attn_mask`` with the encoding's logits term
    already added (:func:`attend` adds it, as ``ndpe.timm`` and ``ndpe.hf`` do). Without such a field this is fused
    SDPA itself. With one, the same attention written out: ``softmax(q.k * scale + mask)``, then each field's act, then
    the keys the mask hides (``-inf``: causal, packed samples, padding) set back to 0, so a term added after the softmax
    never reaches them; dropout; times v.

    >>> import ndpe
    >>> pe = ndpe.make(dims=1, kind="erpe", dim=16, heads=2, length=5)
    >>> q = k = v = torch.randn(1, 2, 5, 8)
    >>> attend_probs(q, k, v, pe((5,))).shape
    torch.Size([1, 2, 5, 8])
    """
    acts = [] if pos is None else [(act, value) for name, act in acting(type(pos), "probs")
                                   if (value := getattr(pos, name)) is not None]
    if not acts:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                                              scale=scale)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    logits = ((q * scale) @ k.transpose(-2, -1)).float()  # (B, heads, Tq, Tk), float32 as SDPA's softmax
    hidden = None  # the keys the mask hides, (Tq, Tk) or as attn_mask
    if is_causal:  # SDPA's is_causal: query i sees keys j <= i
        hidden = torch.ones(logits.shape[-2:], dtype=torch.bool, device=logits.device).triu(1)
        logits = logits.masked_fill(hidden, float("-inf"))
    if attn_mask is not None:
        logits = logits.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else logits + attn_mask
        hidden = torch.isneginf(logits)
    probs = logits.softmax(-1)
    for act, value in acts:
        probs = act(probs, value)
    if hidden is not None:
        probs = probs.masked_fill(hidden, 0.0)
    if dropout_p:
        probs = F.dropout(probs, dropout_p)
    return probs.to(v.dtype) @ v


def check_cache(pos: PosOut | None, cache: "KVCache | None") -> None:
    """Refuse an encoding built for another KV-cache length than ``cache`` holds (``pos.past``).

    Without this, a forgotten ``past=`` rotates the new tokens as if they came first: outputs off by the
    whole cache, no error. ``pos=None`` (no encoding) decodes with any cache.
    """
    if pos is None:
        return
    check_pos(pos)
    if cache is None:
        if pos.past:
            raise ValueError(f"the encoding was built for decoding after {pos.past} cached tokens (past=) but no "
                             "KVCache was given: pass the cache the earlier tokens filled")
        return
    if not isinstance(cache, KVCache):
        raise TypeError(f"cache must be an ndpe.KVCache or None, got {type(cache).__name__}")
    if pos.past != cache.length:
        raise ValueError(f"the encoding was built for {pos.past} cached tokens but the KVCache holds {cache.length}: "
                         "encode the new tokens with pe((n,), past=cache.length) (past=cache.length - num_prefix "
                         "with num_prefix= when the prefix is cached)")


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


def causal_mask(n: int, m: int | None = None, *, device: torch.device | str | None = None,
                dtype: torch.dtype = torch.float32) -> Tensor:
    """``(n, m)`` additive mask (``m`` defaults to ``n``): query ``i`` sees keys ``j <= i + m - n``, -inf elsewhere.

    With ``m > n`` the queries are the last ``n`` of ``m`` tokens (decoding with ``m - n`` cached ones).

    >>> causal_mask(2, 3)
    tensor([[0., 0., -inf],
            [0., 0., 0.]])
    """
    m = n if m is None else m
    return torch.full((n, m), float("-inf"), device=device, dtype=dtype).triu(m - n + 1)
