"""Bias kinds on ``torch.nn.attention.flex_attention``: a ``score_mod`` instead of an N x N tensor.

``score_mod(pe, grid_shape)`` turns an ``alibi`` or ``relative`` encoding into the function
flex_attention calls per logit, ``(score, b, h, q_idx, kv_idx) -> score + bias``: it captures
only per-token coordinates ``(N, dims)``, the slopes ``(heads,)`` or the learned table (whose
gradient flows), never the ``(heads, N, N)`` bias. Prefix tokens get bias 0, as in the
materialized ``PosOut``; ``causal=True`` adds the ``-inf`` upper triangle.

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
from typing import Callable, Sequence, cast

import torch
from torch import Tensor

from .kinds.alibi import ALiBi
from .kinds.relative import RelativeBias, t5_bucket


def flex_available() -> tuple[bool, str]:
    """Whether ``torch.nn.attention.flex_attention`` can be imported here, and why not."""
    try:
        from torch.nn.attention.flex_attention import flex_attention  # noqa: F401
    except ImportError as err:
        return False, f"torch {torch.__version__} has no flex_attention: {err}"
    return True, ""


def score_mod(pe, grid_shape: Sequence[int], *, num_prefix: int = 0, causal: bool = False) -> Callable:
    """The flex_attention ``score_mod`` adding ``pe``'s bias for ``num_prefix + N`` tokens.

    ``pe`` is an ``alibi`` or ``relative`` encoding (unbatched default grid coordinates).
    """
    coords = pe.coords(grid_shape)  # (N, dims), the kind's default coordinates
    if isinstance(pe, ALiBi):
        bias_fn = _alibi_bias(pe, coords)
    elif isinstance(pe, RelativeBias):
        bias_fn = _relative_bias(pe, coords)
    else:
        raise TypeError(f"score_mod supports the alibi and relative kinds, got {type(pe).__name__} "
                        f"({getattr(pe, 'kind', '?')!r}); materialize its PosOut.bias instead")
    p = num_prefix

    def mod(score, b, h, q_idx, kv_idx):
        gi, gj = (q_idx - p).clamp(min=0), (kv_idx - p).clamp(min=0)  # grid token indices
        bias = torch.where((q_idx < p) | (kv_idx < p), 0.0, bias_fn(h, gi, gj))
        score = score + bias
        return torch.where(kv_idx > q_idx, float("-inf"), score) if causal else score

    return mod


def _alibi_bias(pe: ALiBi, coords: Tensor):
    axes, slopes = [coords[:, a].contiguous() for a in range(coords.shape[1])], pe.slopes

    def bias(h, i, j):
        offsets = [ax[i] - ax[j] for ax in axes]
        if pe.distance == "manhattan" or len(axes) == 1:
            length = sum(o.abs() for o in offsets)
        else:
            length = cast(Tensor, sum(o * o for o in offsets)).sqrt()
        if pe.causal:
            length = torch.where(j > i, 0.0, length)
        return -slopes[h] * length

    return bias


def _relative_bias(pe: RelativeBias, coords: Tensor):
    table, pos = pe.table, coords.round().long()  # (entries, heads), (N, dims)
    if pe.mode == "t5":
        n = pos.shape[0]
        buckets = t5_bucket(torch.arange(-(n - 1), n, device=pos.device), bidirectional=pe.bidirectional,
                            num_buckets=pe.num_buckets, max_distance=pe.max_distance[0])  # (2N - 1,): j - i

        def bias(h, i, j):
            return table[buckets[pos[j, 0] - pos[i, 0] + n - 1], h]

        return bias
    axes = [pos[:, a].contiguous() for a in range(pos.shape[1])]

    def bias_nd(h, i, j):
        index = 0
        for ax, m in zip(axes, pe.max_distance):
            index = index * (2 * m + 1) + ((ax[i] - ax[j]).clamp(-m, m) + m)
        return table[index, h]

    return bias_nd


@functools.lru_cache(maxsize=1)
def _compiled_flex():
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=False)


def attention(q: Tensor, k: Tensor, v: Tensor, pe, grid_shape: Sequence[int], *, num_prefix: int = 0,
              causal: bool = False, compiled: bool = True) -> Tensor:
    """Attention ``(B, heads, T, head_dim)`` with ``pe``'s bias as a score_mod; ``T = num_prefix + N``.

    Equal to ``F.scaled_dot_product_attention(q, k, v, attn_mask=pe(grid_shape, num_prefix=P).bias)``
    (plus the causal triangle) without building the ``(heads, T, T)`` bias.
    """
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
    mod = score_mod(pe, grid_shape, num_prefix=num_prefix, causal=causal)
    if compiled:
        return _compiled_flex()(q, k, v, score_mod=mod)
    from torch.nn.attention.flex_attention import flex_attention

    return flex_attention(q, k, v, score_mod=mod)
