"""Bias and logits kinds on ``torch.nn.attention.flex_attention``: a ``score_mod`` instead of an N x N tensor.

``score_mod(pe, grid_shape)`` turns an encoding that adds to the attention logits into the function
flex_attention calls per logit, ``(score, b, h, q_idx, kv_idx) -> score + term``. A kind supplies its term as
:meth:`ndpe.Encoding.score_bias`; this module knows no kind. A position-only bias (alibi, relative, fire, cpb)
captures per-token coordinates ``(N, dims)`` and small tables or weights (whose gradient flows), never the
``(heads, N, N)`` bias; a logits kind (transformer-xl, cope) also takes the queries and keys (``q=``, ``k=``).
A kind with no ``score_bias`` of its own whose ``PosOut`` still adds to the logits (a field declared ``pair``, or a
``term`` meeting q and k: liere, comrope, pope) gets that term materialized ``(B, heads, N, N)`` from q and k and
indexed per logit: equal to SDPA, no memory saved (as cope's). A term that reads the token states (dd-alibi) is
refused in one line. Prefix tokens get 0, as in the materialized ``PosOut``; ``causal=True`` adds the ``-inf``
upper triangle.

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

from .base import Encoding
from .checks import check_bool, check_devices, check_float_tensor, check_int
from .apply import refuse, refuse_states
from .contract import attn_term, logit_fields
from .memory import check_memory

__all__ = ["attention", "flex_available", "packed_attention", "score_mod"]


def flex_available() -> tuple[bool, str]:
    """Whether ``torch.nn.attention.flex_attention`` can be imported here, and why not."""
    try:
        from torch.nn.attention.flex_attention import flex_attention  # noqa: F401
    except ImportError as err:
        return False, f"torch {torch.__version__} has no flex_attention: {err}"
    return True, ""


def check_encoding(pe) -> Encoding:
    """``pe`` must be an encoding (what :func:`ndpe.make` returns), not its kind's name."""
    if not isinstance(pe, Encoding):
        raise TypeError(f"pe must be an ndpe encoding (pe = ndpe.make(dims=..., kind=..., dim=..., heads=...)), got "
                        f"{pe!r} ({type(pe).__name__})")
    return pe


def grid_term(pe: Encoding, grid_shape: Sequence[int], *, q: Tensor | None = None, k: Tensor | None = None,
              causal: bool = False) -> Callable[[Tensor, Tensor, Tensor, Tensor], Tensor] | None:
    """``(b, h, i, j) -> term`` that ``pe`` adds to the logit of grid tokens ``i``, ``j`` (None: it adds nothing).

    The kind's :meth:`~ndpe.Encoding.score_bias` where it has one (no ``N x N`` tensor); otherwise the fields of its
    ``PosOut`` declared to add to the logits (:func:`ndpe.contract.logit_fields`), materialized
    ``(B, heads, N, N)`` from the grid tokens' ``q``, ``k`` as SDPA's ``attn_bias`` would be, and indexed.
    """
    if type(pe).has_score_bias():
        return pe.score_bias(pe.coords(grid_shape), q=q, k=k)
    out = pe(grid_shape)
    refuse(out, f"kind {pe.kind!r}", "a flex score_mod", "use ndpe.attend (or ndpe.Attention)")
    if not logit_fields(out):
        return None
    refuse_states(out, f"kind {pe.kind!r}", "flex attention", "use ndpe.attend(q, k, v, pos, x=x) (ndpe.Attention "
                  "does)")
    if out.logits is not None and (q is None or k is None):
        raise ValueError(f"kind {pe.kind!r}'s logits term depends on the queries and keys: pass q= and k= "
                         "(B, heads, N, head_dim)")
    term = attn_term(out, q=q, k=k, causal=causal)  # (B | 1, heads | 1, N, N)
    assert term is not None  # a field adds to the logits
    lead = (1, 1) if q is None else (q.shape[0], q.shape[1])
    term = term.expand(*lead, *term.shape[-2:])
    return lambda b, h, i, j: term[b, h, i, j]


def score_mod(pe, grid_shape: Sequence[int], *, num_prefix: int = 0, causal: bool = False,
              q: Tensor | None = None, k: Tensor | None = None) -> Callable:
    """The flex_attention ``score_mod`` adding ``pe``'s logit term for ``num_prefix + N`` tokens.

    ``pe`` is an encoding whose output adds to the logits (:func:`grid_term`: its kind's
    :meth:`ndpe.base.Encoding.score_bias`, or its ``PosOut``'s term materialized); ``q``, ``k``
    ``(B, heads, num_prefix + N, head_dim)`` are required by logits kinds. This module knows no kind: a new kind
    works here by implementing ``score_bias`` (or by its ``PosOut`` alone, materialized).
    """
    check_encoding(pe)
    check_int(num_prefix, "num_prefix", low=0)
    check_bool(causal, "causal")
    if not causal and pe.causal_only:
        raise ValueError(f"kind {pe.kind!r} is defined for causal attention only; call score_mod / attention with causal=True")
    p = num_prefix
    grid_q = None if q is None else q[..., p:, :]
    grid_k = None if k is None else k[..., p:, :]
    bias_fn = grid_term(pe, grid_shape, q=grid_q, k=grid_k, causal=causal)  # (b, h, i, j) -> term of grid tokens
    if bias_fn is None:
        raise ValueError(f"kind {pe.kind!r} adds nothing to the attention logits (its PosOut has no bias or logits), "
                         "so it has no flex score_mod; apply its PosOut with apply_tokens / apply_qk (and apply_v / "
                         "apply_out for a frame)")

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


def _check_call(q: Tensor, k: Tensor, v: Tensor, pe, compiled: bool) -> None:
    """What :func:`attention` and :func:`packed_attention` take: an encoding, ``(B, heads, T, head_dim)`` q, k, v of
    one batch, on the encoding's device, and no gradient where flex has no backward."""
    check_encoding(pe)
    check_bool(compiled, "compiled")
    for t, name in ((q, "q"), (k, "k"), (v, "v")):
        check_float_tensor(t, name)
        if t.dim() != 4:
            raise ValueError(f"{name} must be (B, heads, T, head_dim), got shape {tuple(t.shape)}")
    if k.shape[:-1] != v.shape[:-1] or q.shape[0] != k.shape[0] or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)} do not match: one batch, k and v "
                         "one token count, q and k one head_dim")
    check_devices("flex attention", q=q, k=k, v=v, encoding=pe.device)
    ok, why = flex_available()
    if not ok:
        raise RuntimeError(why)
    if q.shape[1] != pe.heads:
        raise ValueError(f"q has {q.shape[1]} heads but the encoding was built with heads={pe.heads}")
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v, *pe.parameters()))
    if needs_grad and (not compiled or q.device.type == "cpu"):
        raise NotImplementedError("flex_attention has no backward here (eager flex, or compiled on CPU in torch "
                                  f"{torch.__version__}): run it under torch.no_grad() / inference, or train "
                                  "with the materialized PosOut.bias")


def attention(q: Tensor, k: Tensor, v: Tensor, pe, grid_shape: Sequence[int], *, num_prefix: int = 0,
              causal: bool = False, compiled: bool = True) -> Tensor:
    """Attention ``(B, heads, T, head_dim)`` with ``pe``'s logit term as a score_mod; ``T = num_prefix + N``.

    Equal to ``F.scaled_dot_product_attention(q, k, v, attn_mask=attn_bias(pos, q=q, k=k))`` with
    ``pos = pe(grid_shape, num_prefix=P)`` (plus the causal triangle) without building the ``(heads, T, T)``
    bias where the kind has a ``score_bias``. ``q``, ``k`` are the tensors attention uses (rotate them first with
    ``apply_qk`` for a rotary kind; a ``frame``, GTA's, also maps ``v`` with ``apply_v`` and the output with
    ``apply_out``).
    """
    check_int(num_prefix, "num_prefix", low=0)
    _check_call(q, k, v, pe, compiled)
    n = num_prefix + int(torch.Size(grid_shape).numel())
    if q.shape[-2] != n or k.shape[-2] != n:
        raise ValueError(f"q/k have {q.shape[-2]}/{k.shape[-2]} tokens but grid {tuple(grid_shape)} "
                         f"+ {num_prefix} prefix tokens is {n}")
    mod = score_mod(pe, grid_shape, num_prefix=num_prefix, causal=causal, q=q, k=k)
    if compiled:
        return _compiled_flex()(q, k, v, score_mod=mod)
    from torch.nn.attention.flex_attention import flex_attention

    return flex_attention(q, k, v, score_mod=mod)


BLOCK_MASK_BYTES = 12  # per (query, key) pair: create_block_mask evaluates the mask_mod densely (measured ~10)


def packed_attention(q: Tensor, k: Tensor, v: Tensor, pe, grid_shapes: Sequence[Sequence[int]], *,
                     num_prefix: int = 0, causal: bool = False, compiled: bool = True) -> Tensor:
    """Attention over samples packed into one sequence (``pe.packed(grid_shapes, num_prefix=P)``'s layout) with a
    flex ``BlockMask`` that keeps each sample to itself (blocks outside every sample are skipped, never computed)
    and, for a kind that adds to the logits, its term as a score_mod on each sample's own coordinates
    (:func:`grid_term`).

    Equal to SDPA with ``attn_bias(pe.packed(grid_shapes, num_prefix=P), q=q, k=k)`` (plus the causal triangle)
    without the ``(heads, T, T)`` tensor. ``q``, ``k`` are the tensors attention uses (rotated with
    ``apply_qk(q, k, pe.packed(...))`` for a rotary kind). Building the BlockMask evaluates the mask densely, ``T x T``
    pairs (about 12 bytes each), checked against the memory budget (:mod:`ndpe.memory`) first.
    """
    from .coords import check_grid_shape, num_grid_tokens

    check_int(num_prefix, "num_prefix", low=0)
    check_bool(causal, "causal")
    check_encoding(pe)
    if isinstance(grid_shapes, (str, bytes)) or not isinstance(grid_shapes, (list, tuple)) or not grid_shapes:
        raise TypeError(f"grid_shapes must be a non-empty list of grid shapes (one per sample), got {grid_shapes!r}")
    shapes = [check_grid_shape(g, pe.dims) for g in grid_shapes]
    sizes = [num_prefix + num_grid_tokens(g) for g in shapes]
    total = sum(sizes)
    for t, name in ((q, "q"), (k, "k"), (v, "v")):
        check_float_tensor(t, name)
        if t.dim() != 4 or t.shape[-2] != total:
            raise ValueError(f"q/k/v must be (B, heads, T, head_dim) with T = {total} packed tokens "
                             f"(samples {sizes}), got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    _check_call(q, k, v, pe, compiled)
    if not causal and pe.causal_only:
        raise ValueError(f"kind {pe.kind!r} is defined for causal attention only; call with causal=True")
    check_memory(BLOCK_MASK_BYTES * total * total, lambda: f"flex block mask of {len(sizes)} packed samples, {total} x "
                 f"{total} (query, key) pairs evaluated densely ({BLOCK_MASK_BYTES} bytes each)",
                 "pack fewer tokens per sequence")
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
    fns, first = [], 0  # each sample's own term (its grid, its q and k), picked by the query's sample
    for g, n in zip(shapes, sizes):
        grid = slice(first + num_prefix, first + n)
        fn = grid_term(pe, g, q=q[..., grid, :], k=k[..., grid, :], causal=causal)
        if fn is None:  # the kind adds nothing to the logits: the block mask alone
            break
        fns.append((fn, n - num_prefix - 1))
        first += n
    mod = None
    if fns:
        def mod(score, b, h, q_idx, kv_idx):
            i, j, term = local[q_idx].clamp(min=0), local[kv_idx].clamp(min=0), score * 0
            for s, (fn, last) in enumerate(fns):  # indices clamped into each sample's grid (its term is masked off)
                term = torch.where(doc[q_idx] == s, fn(b, h, i.clamp(max=last), j.clamp(max=last)), term)
            return score + torch.where(prefix[q_idx] | prefix[kv_idx], 0.0, term)
    attend = _compiled_flex() if compiled else flex_attention
    return attend(q, k, v, score_mod=mod, block_mask=block_mask)
