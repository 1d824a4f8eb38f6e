"""Bias and logits kinds on ``torch.nn.attention.flex_attention``: a ``score_mod`` instead of an N x N tensor.

``score_mod(pe, grid_shape)`` turns an encoding that adds to the attention logits into the function
flex_attention calls per logit, ``(score, b, h, q_idx, kv_idx) -> score + term``. Each kind supplies
its term as :meth:`ndpe.Encoding.score_bias`; this module knows no kind. A position-only bias
(alibi, relative, fire, cpb) captures per-token coordinates ``(N, dims)`` and small tables or
weights (whose gradient flows), never the ``(heads, N, N)`` bias; a logits kind (transformer-xl,
cope) also takes the queries and keys (``q=``, ``k=``). Prefix tokens get 0, as in the materialized
``PosOut``; ``causal=True`` adds the ``-inf`` upper triangle.

On CPU (torch 2.14) flex_attention runs both eagerly (a slow reference that materializes the
scores; forward only) and under ``torch.compile`` (a fused CPU kernel, compiled once per
score_mod and shape: ~15 s on 2 cores). Neither has a backward on CPU, so there it is an
inference path (:func:`attention` refuses a call that needs gradients); on GPU the compiled
kernel trains, learned tables included. :func:`attention` uses the compiled one by default.

>>> import ndpe, torch
>>> pe = ndpe.make(dims=2, kind="alibi", dim=32, heads=2)
>>> q = k = v = torch.randn(1, 2, 12, 16)
>>> attention(q, k, v, pe, (3, 4), compiled=False).shape
torch.Size([1, 2, 12, 16])
"""
from __future__ import annotations

import functools
from typing import Callable, Sequence

import torch
from torch import Tensor

from .checks import check_bool, check_float_tensor, check_int

__all__ = ["attention", "flex_available", "packed_attention", "score_mod"]



def flex_available() -> tuple[bool, str]:
    """Whether ``torch.nn.attention.flex_attention`` can be imported here, and why not."""
    try:
        from torch.nn.attention.flex_attention import flex_attention  # noqa: F401
    except ImportError as err:
        return False, f"torch {torch.__version__} has no flex_attention: {err}"
    return True, ""


def score_mod(pe, grid_shape: Sequence[int], *, num_prefix: int = 0, causal: bool = False,
              q: Tensor | None = None, k: Tensor | None = None) -> Callable:
    """The flex_attention ``score_mod`` adding ``pe``'s logit term for ``num_prefix + N`` tokens.

    ``pe`` is an encoding whose kind supplies :meth:`ndpe.base.Encoding.score_bias` (unbatched default grid
    coordinates); ``q``, ``k`` ``(B, heads, num_prefix + N, head_dim)`` are required by logits kinds. This
    module knows no kind: a new kind works here by implementing ``score_bias``.
    """
    check_int(num_prefix, "num_prefix", low=0)
    check_bool(causal, "causal")
    if not causal and pe.causal_only:
        raise ValueError(f"kind {pe.kind!r} is defined for causal attention only; call score_mod / attention with causal=True")
    p = num_prefix
    grid_q = None if q is None else q[..., p:, :]
    grid_k = None if k is None else k[..., p:, :]
    bias_fn = pe.score_bias(pe.coords(grid_shape), q=grid_q, k=grid_k)  # (b, h, i, j) -> term of grid tokens i, j

    def mod(score, b, h, q_idx, kv_idx):
        gi, gj = (q_idx - p).clamp(min=0), (kv_idx - p).clamp(min=0)  # grid token indices
        bias = torch.where((q_idx < p) | (kv_idx < p), 0.0, bias_fn(b, h, gi, gj))
        score = score + bias
        return torch.where(kv_idx > q_idx, float("-inf"), score) if causal else score

    return mod


@functools.lru_cache(maxsize=1)
def _compiled_flex():
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=False)


def attention(q: Tensor, k: Tensor, v: Tensor, pe, grid_shape: Sequence[int], *, num_prefix: int = 0,
              causal: bool = False, compiled: bool = True) -> Tensor:
    """Attention ``(B, heads, T, head_dim)`` with ``pe``'s logit term as a score_mod; ``T = num_prefix + N``.

    Equal to ``F.scaled_dot_product_attention(q, k, v, attn_mask=attn_bias(pos, q=q, k=k))`` with
    ``pos = pe(grid_shape, num_prefix=P)`` (plus the causal triangle) without building the ``(heads, T, T)``
    bias. ``q``, ``k`` are the tensors attention uses (rotate them first with ``apply_qk`` for a rotary kind).
    """
    check_int(num_prefix, "num_prefix", low=0)
    for t, name in ((q, "q"), (k, "k"), (v, "v")):
        check_float_tensor(t, name)
        if t.dim() != 4:
            raise ValueError(f"{name} must be (B, heads, T, head_dim), got shape {tuple(t.shape)}")
    if k.shape[:-1] != v.shape[:-1] or q.shape[0] != k.shape[0] or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)} do not match: one batch, k and v "
                         "one token count, q and k one head_dim")
    ok, why = flex_available()
    if not ok:
        raise RuntimeError(why)
    if q.shape[1] != pe.heads:
        raise ValueError(f"q has {q.shape[1]} heads but the encoding was built with heads={pe.heads}")
    n = num_prefix + int(torch.Size(grid_shape).numel())
    if q.shape[-2] != n or k.shape[-2] != n:
        raise ValueError(f"q/k have {q.shape[-2]}/{k.shape[-2]} tokens but grid {tuple(grid_shape)} "
                         f"+ {num_prefix} prefix tokens is {n}")
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v, *pe.parameters()))
    if needs_grad and (not compiled or q.device.type == "cpu"):
        raise NotImplementedError("flex_attention has no backward here (eager flex, or compiled on CPU in torch "
                                  f"{torch.__version__}): run it under torch.no_grad() / inference, or train "
                                  "with the materialized PosOut.bias")
    mod = score_mod(pe, grid_shape, num_prefix=num_prefix, causal=causal, q=q, k=k)
    if compiled:
        return _compiled_flex()(q, k, v, score_mod=mod)
    from torch.nn.attention.flex_attention import flex_attention

    return flex_attention(q, k, v, score_mod=mod)


def packed_attention(q: Tensor, k: Tensor, v: Tensor, pe, grid_shapes: Sequence[Sequence[int]], *,
                     num_prefix: int = 0, causal: bool = False, compiled: bool = True) -> Tensor:
    """Attention over samples packed into one sequence (``pe.packed(grid_shapes, num_prefix=P)``'s layout) with a
    flex ``BlockMask`` that keeps each sample to itself (blocks outside every sample are skipped, never computed)
    and, for a kind that adds to the logits, its term as a score_mod on each sample's own coordinates.

    Equal to SDPA with ``attn_bias(pe.packed(grid_shapes, num_prefix=P), q=q, k=k)`` (plus the causal triangle)
    without the ``(heads, T, T)`` tensor. ``q``, ``k`` are the tensors attention uses (rotated with
    ``apply_qk(q, k, pe.packed(...))`` for a rotary kind).
    """
    from .coords import check_grid_shape, num_grid_tokens

    check_int(num_prefix, "num_prefix", low=0)
    check_bool(causal, "causal")
    if isinstance(grid_shapes, (str, bytes)) or not isinstance(grid_shapes, (list, tuple)) or not grid_shapes:
        raise TypeError(f"grid_shapes must be a non-empty list of grid shapes (one per sample), got {grid_shapes!r}")
    shapes = [check_grid_shape(g, pe.dims) for g in grid_shapes]
    for t, name in ((q, "q"), (k, "k"), (v, "v")):
        check_float_tensor(t, name)
    ok, why = flex_available()
    if not ok:
        raise RuntimeError(why)
    sizes = [num_prefix + num_grid_tokens(g) for g in shapes]
    total = sum(sizes)
    if q.dim() != 4 or q.shape[-2] != total or k.shape[-2] != total or v.shape[-2] != total:
        raise ValueError(f"q/k/v must be (B, heads, T, head_dim) with T = {total} packed tokens "
                         f"(samples {sizes}), got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if not causal and pe.causal_only:
        raise ValueError(f"kind {pe.kind!r} is defined for causal attention only; call with causal=True")
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v, *pe.parameters()))
    if needs_grad and (not compiled or q.device.type == "cpu"):
        raise NotImplementedError("flex_attention has no backward here (eager flex, or compiled on CPU in torch "
                                  f"{torch.__version__}): run it under torch.no_grad() / inference")
    device = q.device
    doc = torch.repeat_interleave(torch.arange(len(sizes), device=device), torch.tensor(sizes, device=device))
    start = torch.cumsum(torch.tensor([0] + sizes[:-1], device=device), 0)[doc]  # first token of each token's sample
    local = torch.arange(total, device=device) - start - num_prefix  # index among its sample's grid tokens
    prefix = local < 0  # (T,) the samples' prefix tokens

    def same_sample(b, h, q_idx, kv_idx):
        keep = doc[q_idx] == doc[kv_idx]
        return keep & (kv_idx <= q_idx) if causal else keep

    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    block_mask = create_block_mask(same_sample, None, None, total, total, device=str(device))
    mod = None
    if type(pe).has_score_bias():  # each sample's own term (its grid, its q and k), picked by the query's sample
        fns, first = [], 0
        for g, n in zip(shapes, sizes):
            grid = slice(first + num_prefix, first + n)
            fns.append((pe.score_bias(pe.coords(g), q=q[..., grid, :], k=k[..., grid, :]), n - num_prefix - 1))
            first += n

        def mod(score, b, h, q_idx, kv_idx):
            i, j, term = local[q_idx].clamp(min=0), local[kv_idx].clamp(min=0), score * 0
            for s, (fn, last) in enumerate(fns):  # indices clamped into each sample's grid (its term is masked off)
                term = torch.where(doc[q_idx] == s, fn(b, h, i.clamp(max=last), j.clamp(max=last)), term)
            return score + torch.where(prefix[q_idx] | prefix[kv_idx], 0.0, term)
    attend = _compiled_flex() if compiled else flex_attention
    return attend(q, k, v, score_mod=mod, block_mask=block_mask)

