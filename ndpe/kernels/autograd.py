"""Autograd for the fast RoPE paths: :class:`Rotary` wraps the eager kernel and the Triton one.

The backward of a rotation is the inverse rotation (the same kernel with ``inverse=True``); the gradients of
cos and sin are sums over the rotated pairs, in at least float32. ``ndpe.functional`` applies it when q, k, cos
or sin need gradients.
"""
from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from . import eager


class Rotary(torch.autograd.Function):
    """Rotation with a hand-written backward: d/dx is the inverse rotation, d/dcos and d/dsin are sums."""

    @staticmethod
    def forward(ctx, cos, sin, pairing, fused, *xs):
        ctx.pairing, ctx.fused = pairing, fused
        ctx.shapes = [x.shape for x in xs]
        ctx.save_for_backward(cos, sin, *(xs if any(ctx.needs_input_grad[:2]) else ()))
        if fused:
            from . import triton  # lazily: it imports the triton package
            return triton.rotary(xs, cos, sin, pairing)
        return eager.rotate_many(xs, cos, sin, pairing)

    @staticmethod
    @once_differentiable
    def backward(ctx, *grads):
        cos, sin, *xs = ctx.saved_tensors
        need_x = ctx.needs_input_grad[4:]
        todo = [i for i, (g, need) in enumerate(zip(grads, need_x)) if g is not None and need]
        gxs: list[Tensor | None] = [None] * len(grads)
        if ctx.fused and todo:
            from . import triton
            # incoming gradients may have any strides (expanded, transposed by q @ k.mT): the kernel
            # needs unit channel stride
            gs = tuple(grads[i] if grads[i].stride(-1) == 1 else grads[i].contiguous() for i in todo)
            rotated = triton.rotary(gs, cos, sin, ctx.pairing, inverse=True)
        else:
            rotated = tuple(eager.rotate(grads[i], cos, sin, ctx.pairing, inverse=True) for i in todo)
        for i, r in zip(todo, rotated):
            gxs[i] = r.sum_to_size(ctx.shapes[i])
        gcos = gsin = None
        if any(ctx.needs_input_grad[:2]):
            acc = torch.promote_types(cos.dtype, torch.float32)  # sums over batch and heads: at least float32
            gcos, gsin = cos.new_zeros(cos.shape, dtype=acc), sin.new_zeros(sin.shape, dtype=acc)
            for g, x in zip(grads, xs):
                if g is not None:
                    x1, x2 = (t.to(acc) for t in pairs(x, cos.shape[-1], ctx.pairing))
                    g1, g2 = (t.to(acc) for t in pairs(g, cos.shape[-1], ctx.pairing))
                    gcos += (g1 * x1 + g2 * x2).sum_to_size(cos.shape)
                    gsin += (g2 * x1 - g1 * x2).sum_to_size(sin.shape)
            gcos, gsin = gcos.to(cos.dtype), gsin.to(sin.dtype)
        return (gcos, gsin, None, None, *gxs)


def pairs(t: Tensor, half: int, pairing: str) -> tuple[Tensor, Tensor]:
    """The two channel views ``(..., half)`` that one frequency rotates together."""
    if pairing == "half":
        return t[..., :half], t[..., half:2 * half]
    return t[..., 0:2 * half:2], t[..., 1:2 * half:2]
