"""RoPE with learned angles ``angle[..., h, n, j] = sum_a pos[..., n, a] * freqs[h, a, j]`` (``rope-mixed``).

:class:`MixedCosSin` turns the frequencies into the rotation's ``(cos, sin)``, the tables every rotary path takes.
Rotating q and k by them through :class:`ndpe.kernels.autograd.Rotary` would send the gradient back through the
tables: ``d cos`` and ``d sin`` summed over the batch (a cast, two ``complex``, a product and a sum), then the
angle's, ``d sin cos - d cos sin``, then the frequencies'. :class:`MixedRotary` skips the tables: the derivative of
a rotation by its angle is the rotation by 90 degrees more, so with ``dx = R(-angle) g`` (the inverse rotation,
which q's and k's gradients need anyway) the angle's gradient is

    d angle = sum over the batch, q and k of  x1 dx2 - x2 dx1      (= g2 out1 - g1 out2)

two ops on q and k stacked (exact products, accumulated in at least float32), then one sum over the batch and one
``bmm`` onto the frequencies. ``ndpe.functional`` takes this path when the ``(cos, sin)`` it is handed are
:class:`MixedCosSin`'s outputs as they came (or padded with prefix tokens by ``pad_prefix``): :func:`source`.
"""
from __future__ import annotations

from typing import Any, NamedTuple, cast

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from . import eager
from .autograd import acc_dtype, rotate_forward

_ZEROS: dict = {}  # (device, dtype) -> a zero scalar: the float32 first operand that keeps bfloat16 products exact


def mixed_angle(pos: Tensor, freqs: Tensor) -> Tensor:
    """``angle[..., h, n, j] = sum_a pos[..., n, a] * freqs[h, a, j]`` ``(..., H, N, rot/2)``, summed elementwise in
    float32 (a matmul may run in TF32 on a GPU: 1e-3 relative on the angles)."""
    terms = [pos[..., None, :, a, None] * freqs[:, None, a, :] for a in range(pos.shape[-1])]
    angle = terms[0]
    for t in terms[1:]:
        angle = angle + t
    return angle


class MixedCosSin(torch.autograd.Function):
    """``cos`` and ``sin`` of :func:`mixed_angle` with the frequencies' gradient in two ops: the angle's,
    ``gsin cos - gcos sin`` (one ``addcmul`` on a product), then its contraction with the positions (one matmul).
    Keeps ``pos`` and ``freqs`` for :class:`MixedRotary` (:func:`source`)."""

    @staticmethod
    def forward(ctx, pos, freqs):
        angle = mixed_angle(pos, freqs)
        cos, sin = angle.cos(), angle.sin()
        ctx.save_for_backward(pos, cos, sin)
        ctx.source = (freqs, pos)  # inputs, held as they are (no saved-tensor hooks run when MixedRotary reads them)
        return cos, sin

    @staticmethod
    @once_differentiable
    def backward(ctx, gcos, gsin):
        pos, cos, sin = ctx.saved_tensors
        grad = torch.addcmul(gsin * cos if gsin is not None else torch.zeros_like(cos), gcos, sin, value=-1) \
            if gcos is not None else gsin * cos  # d angle
        return None, to_freqs(pos, grad)


def to_freqs(pos: Tensor, grad: Tensor) -> Tensor:
    """``d freqs[h, a, j] = sum over samples and tokens n of pos[..., n, a] * d angle[..., h, n, j]``."""
    if pos.dim() == 2:  # one bmm over the heads (pos broadcast, not copied)
        return torch.bmm(pos.mT.expand(grad.shape[0], -1, -1), grad)
    return torch.einsum("...na,...hnj->haj", pos, grad)


class Source(NamedTuple):
    """Where a rotation's ``(cos, sin)`` came from: :class:`MixedCosSin` of ``freqs`` and ``pos``, after ``prefix``
    identity tokens (:class:`MixedRotary`'s first arguments)."""
    freqs: Tensor
    pos: Tensor
    prefix: int


def source(cos: Tensor, sin: Tensor) -> Source | None:
    """The :class:`Source` of ``cos`` and ``sin`` when they are :class:`MixedCosSin`'s two outputs of one call,
    unchanged or both padded at the front of the token axis by the same ``F.pad`` (``ndpe.pad_prefix``); else None
    (any other op in between, an in-place change included, makes them plain tables)."""
    c, s = _unpadded(cos), _unpadded(sin)
    if c is None or s is None or c[0] is not s[0] or type(c[0]) is not MixedCosSin._backward_cls:
        return None
    if (c[1], s[1]) != (0, 1) or c[2] != s[2]:
        return None
    freqs, pos = cast(Any, c[0]).source
    return Source(freqs, pos, c[2])


def _unpadded(t: Tensor) -> tuple[object, int, int] | None:
    """``(node, output index, prefix)`` of the autograd node that made ``t``, through a front pad of its tokens."""
    node, index, prefix = t.grad_fn, t.output_nr, 0
    if node is not None and type(node).__name__ == "ConstantPadNdBackward0":
        pad = tuple(getattr(node, "_saved_pad", ()))
        if len(pad) != 4 or pad[:2] != (0, 0) or pad[3] != 0:
            return None
        (node, index), prefix = node.next_functions[0], pad[2]
    return None if node is None else (node, index, prefix)


class MixedRotary(torch.autograd.Function):
    """The rotation of ``xs`` (q and k) by tables ``cos`` / ``sin`` of :func:`mixed_angle` (``prefix`` identity tokens
    first), differentiable in ``xs`` and ``freqs``: the forward is :class:`~ndpe.kernels.autograd.Rotary`'s (the
    same numbers), the backward the inverse rotation and the frequencies' gradient from it (the module doc)."""

    @staticmethod
    def forward(ctx, freqs, pos, prefix, cos, sin, pairing, fused, *xs):
        ctx.pairing, ctx.fused, ctx.prefix, ctx.freqs_dtype = pairing, fused, prefix, freqs.dtype
        ctx.shapes, ctx.table_shape = [x.shape for x in xs], cos.shape
        ctx.tables = tables = eager.Tables(cos, sin, torch.float32 if fused else xs[0].dtype, pairing)
        ctx.save_for_backward(pos, *xs)
        return rotate_forward(xs, tables, fused)

    @staticmethod
    @once_differentiable
    def backward(ctx, *grads):
        pos, *xs = ctx.saved_tensors
        tables, todo = ctx.tables, [i for i, g in enumerate(grads) if g is not None]
        gs, xs = [grads[i] for i in todo], [xs[i] for i in todo]
        if ctx.fused:
            from . import triton
            dxs = list(triton.rotary(tuple(g if g.stride(-1) == 1 else g.contiguous() for g in gs),
                                     tables.cos, tables.sin, ctx.pairing, inverse=True))
            groups = list(zip(xs, dxs))
        elif len(gs) > 1 and len({g.shape for g in gs}) == 1 and len({x.shape for x in xs}) == 1:
            # q's and k's gradients in one stack and one pass, as Rotary's; q and k read through one view when they
            # are views of one qkv buffer
            dx = eager.rotate_with(torch.stack(gs), tables, inverse=True)
            dxs, x = list(dx.unbind(0)), eager.stacked_view(tuple(xs))
            groups = [(torch.stack(xs) if x is None else x, dx)]
        else:
            dxs = [eager.rotate_with(g, tables, inverse=True) for g in gs]
            groups = list(zip(xs, dxs))
        gxs: list[Tensor | None] = [None] * len(grads)
        for i, dx in zip(todo, dxs):
            if ctx.needs_input_grad[7 + i]:
                gxs[i] = dx if dx.shape == ctx.shapes[i] else dx.sum_to_size(ctx.shapes[i])
        gfreqs = None
        if ctx.needs_input_grad[0] and groups:
            grad = angle_grad(groups, tables.half, ctx.pairing, ctx.table_shape)[..., ctx.prefix:, :]
            gfreqs = to_freqs(pos.to(grad.dtype), grad).to(ctx.freqs_dtype)
        return (gfreqs, None, None, None, None, None, None, *gxs)


def angle_grad(groups: list[tuple[Tensor, Tensor]], half: int, pairing: str, shape: torch.Size) -> Tensor:
    """``d angle`` ``shape`` of the rotations of ``(x, dx)`` (``dx`` the inverse rotation of the output's gradient):
    ``x1 dx2 - x2 dx1`` summed over what ``shape`` broadcasts (the batch, stacked q and k), in at least float32."""
    total = None
    for x, dx in groups:
        x1, x2 = eager.pairs(x, half, pairing)
        d1, d2 = eager.pairs(dx, half, pairing)
        acc = acc_dtype(x.dtype)
        key = (x.device, acc)
        zero = _ZEROS.get(key)
        if zero is None:
            zero = _ZEROS[key] = torch.zeros((), dtype=acc, device=x.device)
        # a float32 first operand: the products of bfloat16 x and dx are exact in it (out= alone would round them)
        p = torch.addcmul(zero.expand(x1.shape), x1, d2)
        p.addcmul_(x2, d1, value=-1)
        part = p.sum_to_size(shape)
        total = part if total is None else total + part
    return cast(Tensor, total)
