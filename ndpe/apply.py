"""The one recipe that applies a :class:`~ndpe.PosOut` inside attention; every attention of ndpe calls it.

:func:`attention` is the whole recipe: the encoding's maps of q and k (its rotation, and every field declared with
``stage="qk"`` or ``"qkvo"``), of the values (``"qkvo"``: ``frame``), the caller's KV cache, the logits terms (every
``pair`` field, a ``LogitsTerm``) beside the caller's mask, the fields acting after the softmax (``"probs"``:
``prob_bias``), and the map of the output per query (``"qkvo"``). :class:`ndpe.Attention`, ``ndpe.timm``'s
``NdpeAttention`` and ``ndpe.hf.use``'s attention call it; :mod:`ndpe.flex` asks :func:`refuse` what a score_mod
cannot carry. None of them names a field: a field's act is declared beside it, in ``PosOut``'s table
(:class:`~ndpe.fields.Field`), so a new field is one declaration and its act, and every integration applies it.

The masks: a boolean mask (True: attend) or an additive one of q's dtype, as SDPA takes them; a key is hidden (from
a term after the softmax too) where the boolean mask is False or the additive one at or below :data:`HIDDEN`. An
integer mask is neither: refused, as SDPA refuses it. :func:`check_call` checks q, k, v, the mask and the options in
one line each.
"""
from __future__ import annotations

from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor

from .checks import check_bool, check_devices, check_number
from .contract import QK, PosOut, attention_fields, attn_term, check_pos, check_token_count, derive, prob_fields
from .fields import acting, parts, specs
from .functional import rotate_qk, transform_heads

__all__ = ["HIDDEN", "attend", "attend_probs", "attention", "beyond_rotation", "causal_mask", "check_call", "refuse",
           "refuse_states", "state_fields", "token_fields"]


ROTATION = "rotate q, k"  # the declared act of the rotation a cos / sin rotary path carries
HIDDEN = -1e4  # an additive mask value at or below this hides its key from a term after the softmax too


class Cache(Protocol):
    def update(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]: ...


def attention(q: Tensor, k: Tensor, v: Tensor, pos: PosOut | None, *, keys: PosOut | None = None,
              cache: Cache | None = None, attn_mask: Tensor | None = None, is_causal: bool = False,
              dropout_p: float = 0.0, scale: float | None = None, x: Tensor | None = None) -> Tensor:
    """Attention ``(B, heads, Tq, d)`` -> ``(B, heads, Tq, d_v)`` (heads not merged) with every field of ``pos``.

    ``pos``: the encoding of the queries (its pairwise fields: queries x keys). ``keys``: the encoding of every key,
    where ``k`` and ``v`` hold more tokens than the queries unencoded (a KV cache of raw keys, as transformers keeps
    it); its per-token fields map the keys and values, ``pos``'s the queries and the output. ``cache``: an object
    with ``update(k, v) -> (k, v)`` (:class:`ndpe.KVCache`) that stores the keys and values as attention uses them
    (mapped), before attending. ``attn_mask``, ``is_causal``, ``dropout_p``, ``scale``, ``x``: as
    :func:`attend`.
    """
    if pos is not None:
        check_meets(pos, keys, q, k, cache, x)
    if keys is None or pos is None:
        q, k = rotate_qk(q, k, pos)
    else:
        q, k = rotate_qk(q, q, queries_only(pos))[0], rotate_qk(k, k, keys)[1]
    maps = pos is not None and any(getattr(pos, name) is not None for name, _ in acting(type(pos), "qkvo"))
    if maps:  # of the values before the cache stores them (a frame: D^-1 v)
        v = transform_heads(v, pos if keys is None else keys, "v")
    if cache is not None:
        k, v = cache.update(k, v)
    check_call(q, k, v, attn_mask, dropout_p, is_causal, scale)
    out = attend_checked(q, k, v, pos, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale,
                         x=x)
    return transform_heads(out, pos, "out") if maps else out


def check_meets(pos: PosOut, keys: PosOut | None, q: Tensor, k: Tensor, cache: Cache | None, x: Tensor | None) -> None:
    """The encoding at the door: a ``PosOut`` (and ``keys``), built for the keys before the queries (``pos.past``:
    the cache's length plus the keys ``k`` holds beyond the queries) and, with ``x``, for its tokens where a field acts in
    attention (what was added to the tokens may have followed a subset of them: timm's patch dropout)."""
    check_pos(pos)
    if keys is not None:
        check_pos(keys)
    length = getattr(cache, "length", None)
    if cache is not None and (not callable(getattr(cache, "update", None)) or not isinstance(length, int)):
        raise TypeError(f"cache must be an ndpe.KVCache (update(k, v), length) or None, got {type(cache).__name__}")
    before = (length or 0) + k.shape[-2] - q.shape[-2]  # the keys before the first query
    if pos.past != before and cache is None and before == 0:
        raise ValueError(f"the encoding was built for decoding after {pos.past} cached tokens (past=) but no "
                         "KVCache was given: pass the cache the earlier tokens filled")
    if pos.past != before:
        held = f"the KVCache holds {length}" if cache is not None else f"the attention has {before} keys before its queries"
        raise ValueError(f"the encoding was built for {pos.past} cached tokens but {held}: encode the new tokens with "
                         "pe((n,), past=cache.length) (past=cache.length - num_prefix with num_prefix= when the prefix "
                         "is cached)")
    if x is None:
        return
    covered = next((parts(value)[0].shape[-2] for name, spec, _ in specs(type(pos))  # the fields acting here
                    if spec.lead == QK and spec.role in ("token", "pair") and not spec.keys
                    and (value := getattr(pos, name)) is not None), None)
    if covered is not None:
        check_token_count(x, covered, pos.num_prefix, "x", ("B", "T", "dim"))


def queries_only(pos: PosOut) -> PosOut:
    """``pos`` without the fields that cover the keys apart from the queries (declared ``keys=True``)."""
    return derive(type(pos), {name: default if spec.keys else getattr(pos, name)
                              for name, spec, default in specs(type(pos))})


def token_fields(pos: PosOut) -> list[str]:
    """The fields of ``pos`` set that map q, k or v per token (a rotation, a frame): a caller whose keys are cached
    unencoded needs the encoding of every key (``keys=``) for them."""
    return [name for name, spec, _ in specs(type(pos)) if spec.role == "token" and spec.lead == QK
            and getattr(pos, name) is not None]


def refuse(pos: PosOut, who: str, where: str, instead: str) -> None:
    """Refuse, in one line, a ``pos`` with a field acting after the softmax (``stage="probs"``) where ``where``
    (a flex ``score_mod``) cannot carry it; ``who``: the encoding, ``instead``: what to call."""
    if after := prob_fields(pos):
        raise ValueError(f"{who} acts on the attention probabilities after the softmax ({', '.join(after)}), which "
                         f"{where} cannot carry: {instead}")


def state_fields(pos: PosOut) -> list[str]:
    """The fields of ``pos`` set whose act reads the layer's token states ``x`` (a term declaring ``uses_states``:
    data-dependent ALiBi), which an attention that is not handed ``x`` cannot apply."""
    return [name for name, _, _ in specs(type(pos)) if getattr(getattr(pos, name), "uses_states", False)]


def refuse_states(pos: PosOut, who: str, where: str, instead: str) -> None:
    """Refuse, in one line, a ``pos`` with a field reading the token states where ``where`` does not receive them."""
    if fields := state_fields(pos):
        raise ValueError(f"{who} reads the token states ({', '.join(fields)}), which {where} does not receive: "
                         f"{instead}")


def beyond_rotation(pos: PosOut) -> list[str]:
    """The fields of ``pos`` set that act in attention other than as the one rotation of q and k (declared
    ``acts="rotate q, k"``): keys rotated apart, a basis, a bias or logits term, a term after the softmax, a map of
    the values. A caller that only hands attention cos / sin (a HF model's own rotary path) would drop them."""
    declared = {name: spec for name, spec, _ in specs(type(pos))}
    return [name for name in attention_fields(pos) if declared[name].acts != ROTATION]


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
    check_call(q, k, v, attn_mask, dropout_p, is_causal, scale)
    if pos is not None:
        check_pos(pos)
    return attend_checked(q, k, v, pos, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale,
                          x=x)


def check_call(q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None, dropout_p: float, is_causal: bool,
               scale: float | None) -> None:
    """Attention's door: ``q``, ``k``, ``v`` floating ``(B, heads, T, d)`` tensors of one dtype, device, batch and
    heads, k and v one length, q and k one head_dim; the mask boolean or additive (of q's dtype or float32, as SDPA
    takes it), on their device,
    broadcasting to ``(B, heads, Tq, Tk)``; ``dropout_p`` in ``[0, 1]``; each refused in one line."""
    for t, name in ((q, "q"), (k, "k"), (v, "v")):
        if not isinstance(t, Tensor):
            raise TypeError(f"{name} must be a (B, heads, T, head_dim) tensor, got {type(t).__name__}")
        if not t.is_floating_point() or t.dim() != q.dim() or t.dim() < 3:
            raise ValueError(f"{name} must be a floating (B, heads, T, head_dim) tensor like q, got {t.dtype} "
                             f"{tuple(t.shape)} (q: {q.dtype} {tuple(q.shape)})")
    if len({q.dtype, k.dtype, v.dtype}) > 1:
        raise ValueError(f"q, k, v must have one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not q.shape[:-2] == k.shape[:-2] == v.shape[:-2] or k.shape[-2] != v.shape[-2] or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)} do not match: one batch and "
                         "heads, k and v one number of keys, q and k one head_dim")
    check_devices("attention", q=q, k=k, v=v, **({} if attn_mask is None or not isinstance(attn_mask, Tensor)
                                                 else {"attn_mask": attn_mask}))
    check_bool(is_causal, "is_causal")
    check_number(dropout_p, "dropout_p", low=0.0, high=1.0)
    if scale is not None:
        check_number(scale, "scale")
    if attn_mask is None:
        return
    if not isinstance(attn_mask, Tensor):
        raise TypeError(f"attn_mask must be a tensor (boolean, True: attend; or additive of q's dtype) or None, got "
                        f"{type(attn_mask).__name__}")
    if attn_mask.dtype not in (torch.bool, q.dtype, torch.float32):  # SDPA's choices (float32 under autocast)
        what = "an integer mask is neither (as SDPA, ndpe refuses it): pass mask.bool()" if not \
            attn_mask.is_floating_point() else f"cast it with mask.to({q.dtype})"
        raise ValueError(f"attn_mask must be boolean (True: attend) or additive of q's dtype {q.dtype} (or float32), "
                         f"got {attn_mask.dtype}: {what}")
    scores = (*q.shape[:-2], q.shape[-2], k.shape[-2])
    try:
        fits = torch.broadcast_shapes(attn_mask.shape, scores) == scores
    except RuntimeError:
        fits = False
    if not fits:
        raise ValueError(f"attn_mask of shape {tuple(attn_mask.shape)} does not broadcast to the scores {scores} "
                         "(B, heads, queries, keys)")


def attend_checked(q: Tensor, k: Tensor, v: Tensor, pos: PosOut | None, *, attn_mask: Tensor | None,
                   dropout_p: float, is_causal: bool, scale: float | None, x: Tensor | None) -> Tensor:
    """:func:`attend` past its door."""
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
    already added (:func:`attend` adds it). Without such a field this is fused SDPA itself. With one, the same
    attention written out: ``softmax(q.k * scale + mask)``, then each field's act, then the keys the mask hides
    (causal, packed samples, padding) set back to 0, so a term added after the softmax never reaches them; dropout;
    times v. A key is hidden where a boolean mask is False or an additive one at or below :data:`HIDDEN` (-1e4: the
    conventions -1e4, -65504 and ``finfo.min`` of float16, ``finfo.min`` of every dtype as transformers' masks,
    -1e9, -inf).

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
    if attn_mask is not None:  # False, or an additive value at or below HIDDEN (-1e4, finfo.min, -inf)
        masked = ~attn_mask if attn_mask.dtype == torch.bool else attn_mask <= HIDDEN
        hidden = masked if hidden is None else hidden | masked
        logits = logits if attn_mask.dtype == torch.bool else logits + attn_mask
    if hidden is not None:
        logits = logits.masked_fill(hidden, float("-inf"))
    probs = logits.softmax(-1)
    for act, value in acts:
        probs = act(probs, value)
    if hidden is not None:
        probs = probs.masked_fill(hidden, 0.0)
    if dropout_p:
        probs = F.dropout(probs, dropout_p)
    return probs.to(v.dtype) @ v


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
