"""Autograd for the fast RoPE paths: :class:`Rotary` wraps the eager kernel and the Triton one.

The backward of a rotation is the inverse rotation (the same kernel with ``inverse=True``), for q's and k's
gradients together (one Triton launch, or one stacked pass / one ``torch._foreach_*`` set of ops); the gradients
of cos and sin are sums over the rotated pairs in at least float32, for q and k at once:
``gsin + i gcos = sum (g2 + i g1) (x1 + i x2)`` over the batch, heads and both tensors (:func:`table_grads`).
``ndpe.functional`` applies it when q, k, cos or sin need gradients.
"""
from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from . import eager


class Rotary(torch.autograd.Function):
    """Rotation with a hand-written backward: d/dx is the inverse rotation, d/dcos and d/dsin are sums.

    ``cos`` / ``sin`` come in their own dtype; the forward prepares them once (:func:`ndpe.kernels.eager.prepare`:
    cast to the compute dtype, joined, kept per grid when fixed) and keeps them for the backward."""

    @staticmethod
    def forward(ctx, cos, sin, pairing, fused, *xs):
        ctx.pairing, ctx.fused, ctx.cos_dtype = pairing, fused, cos.dtype
        ctx.shapes = [x.shape for x in xs]
        ctx.tables = tables = eager.prepare(cos, sin, torch.float32 if fused else xs[0].dtype, pairing)
        if any(ctx.needs_input_grad[:2]):
            ctx.save_for_backward(*xs)
        return rotate_forward(xs, tables, fused)

    @staticmethod
    def backward(ctx, *grads):
        if torch.is_grad_enabled():  # create_graph=True: differentiable once (an error on the second derivative)
            return _backward_once(ctx, *grads)
        return _backward(ctx, *grads)  # once_differentiable's wrapper does nothing more here, at a few µs a call


def _backward(ctx, *grads):
    """:class:`Rotary`'s backward: the inverse rotation of q's and k's gradients, and the tables' where they need it."""
    tables, need_tables = ctx.tables, any(ctx.needs_input_grad[:2])
    if not (need_tables or ctx.fused) and all(g is not None for g in grads) and all(ctx.needs_input_grad[4:]):
        # the common case (fixed tables, every input needing its gradient): the inverse rotation alone
        rotated = eager.rotate_many(grads, tables, inverse=True, stack=True, views=True)
        return (None, None, None, None, *(r if r.shape == shape else r.sum_to_size(shape)
                                          for r, shape in zip(rotated, ctx.shapes)))
    todo = [i for i, (g, need) in enumerate(zip(grads, ctx.needs_input_grad[4:])) if g is not None and need]
    gxs: list[Tensor | None] = [None] * len(grads)
    # q's and k's gradients stacked once, in float32, when the tables need them too: the rotation reads the stack
    stack = stacked(grads) if need_tables and not ctx.fused and len(grads) > 1 and all(
        g is not None for g in grads) and len({g.shape for g in grads}) == 1 else None
    if todo:
        gs = tuple(grads[i] for i in todo)
        if stack is not None and len(todo) == len(grads):
            rotated = eager.rotate_with(stack, tables, inverse=True, dtype=grads[0].dtype).unbind(0)
        elif ctx.fused:
            from . import triton
            # incoming gradients may have any strides (expanded, transposed by q @ k.mT): the kernel
            # needs unit channel stride
            gs = tuple(g if g.stride(-1) == 1 else g.contiguous() for g in gs)
            rotated = triton.rotary(gs, tables.cos, tables.sin, ctx.pairing, inverse=True)
        else:
            rotated = eager.rotate_many(gs, tables, inverse=True, stack=True, views=True)  # q's and k's at once
        for i, r in zip(todo, rotated):
            gxs[i] = r if r.shape == ctx.shapes[i] else r.sum_to_size(ctx.shapes[i])
    gcos = gsin = None
    if need_tables:
        xs = ctx.saved_tensors
        if stack is not None:
            x = eager.stacked_view(xs)
            groups = [(stack, stacked(xs) if x is None else x)]
        else:
            groups = [(g, x) for g, x in zip(grads, xs) if g is not None]
        gcos, gsin = table_grads(groups, tables.cos.shape, tables.half, ctx.pairing, ctx.cos_dtype)
    return (gcos, gsin, None, None, *gxs)


_backward_once = once_differentiable(_backward)

def rotate_forward(xs: tuple[Tensor, ...], tables: eager.Tables, fused: bool) -> tuple[Tensor, ...]:
    """``xs`` rotated by prepared ``tables``: by the Triton kernel (``fused``) or the eager one."""
    if fused:
        from . import triton  # lazily: it imports the triton package
        return triton.rotary(xs, tables.cos, tables.sin, tables.pairing)
    return eager.rotate_many(xs, tables)


def table_grads(groups: list[tuple[Tensor, Tensor]], shape: torch.Size, half: int, pairing: str,
                dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """d/dcos and d/dsin ``shape`` of the rotation of each ``x`` of ``(gradient, x)`` (q and k, or their stacks):
    ``gsin + i gcos`` is the sum of ``(g2 + i g1)(x1 + i x2)`` over the pairs, accumulated in at least float32
    (for stacked q and k: a cast, two ``complex``, a product and a sum)."""
    acc = acc_dtype(dtype)
    rot, total = 2 * half, None
    for g, x in groups:
        g1, g2 = eager.pairs(g[..., :rot].to(acc), half, pairing)
        x1, x2 = eager.pairs(x[..., :rot].to(acc), half, pairing)
        w = (torch.complex(g2, g1) * torch.complex(x1, x2)).sum_to_size(shape)
        total = w if total is None else total + w
    assert total is not None
    return total.imag.to(dtype), total.real.to(dtype)


def stacked(ts) -> Tensor:
    """The tensors stacked on a new first axis, in at least float32 (one op: the cast happens in the copy)."""
    ts = list(ts)
    out = ts[0].new_empty((len(ts), *ts[0].shape), dtype=acc_dtype(ts[0].dtype))
    return torch.stack(ts, out=out)


def acc_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype sums over a floating ``dtype`` run in: at least float32 (no ``torch.promote_types``: under a
    dispatch mode that is an ATen call of its own)."""
    return torch.float64 if dtype == torch.float64 else torch.float32
