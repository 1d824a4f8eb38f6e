"""The eager RoPE kernel: PyTorch ops at the memory floor.

Applying RoPE is memory traffic: read q and k once, write them once. :func:`rotate` writes into one
preallocated output (laid out in the input's memory order) with ``out=`` and in-place ``addcmul_``
on views: no ``cat``, no temporaries the size of ``x``; interleaved pairs in float32/float64 take a
single complex multiply; q and k split from one fused qkv buffer go through one stacked view
(:func:`rotate_many`). ``ndpe.kernels.autograd.Rotary`` carries autograd for this kernel and the
Triton one. ``ndpe.functional.rotate_reference`` is the formula all of them are tested against
(tests/test_functional.py, tests/test_triton.py). This module imports no other kernel.
"""
from __future__ import annotations

from typing import cast

import torch
from torch import Tensor


# Stack q and k only while the joint output stays within 32 MiB: above it glibc serves every
# allocation with fresh mmap pages (page faults on every call), which two separate buffers avoid.
STACK_MAX_BYTES = 32 << 20


def rotate_many(xs: tuple[Tensor, ...], cos: Tensor, sin: Tensor, pairing: str) -> tuple[Tensor, ...]:
    """The eager kernel on each of ``xs``; q and k from one fused qkv buffer go through it in one pass."""
    stacked = stacked_view(xs)
    if stacked is None or stacked.numel() * stacked.element_size() > STACK_MAX_BYTES:
        return tuple(rotate(x, cos, sin, pairing) for x in xs)
    out = rotate(stacked, cos, sin, pairing)
    # separate tensors over the one buffer (not views of it): each may be modified in place, also
    # when they are the outputs of the autograd Function. The buffer lives while either does.
    storage = out.untyped_storage()
    return tuple(out.new_empty(0).set_(storage, o.storage_offset(), o.shape, o.stride()) for o in out.unbind(0))


def stacked_view(xs: tuple[Tensor, ...]) -> Tensor | None:
    """``(len(xs), *shape)`` view of same-shape, same-stride tensors in one storage (read-only use), else None."""
    x0 = xs[0]
    if len(xs) < 2 or any(x.shape != x0.shape or x.stride() != x0.stride() or x.device != x0.device
                          or x.untyped_storage().data_ptr() != x0.untyped_storage().data_ptr() for x in xs):
        return None
    steps = {b.storage_offset() - a.storage_offset() for a, b in zip(xs, xs[1:])}
    step = steps.pop() if len(steps) == 1 else -1
    if step < 0:  # irregular or backwards spacing: no strided view covers them
        return None
    return x0.as_strided((len(xs), *x0.shape), (step, *x0.stride()), x0.storage_offset())


def rotate(x: Tensor, cos: Tensor, sin: Tensor, pairing: str, inverse: bool = False) -> Tensor:
    """Eager kernel: one output buffer, filled with ``out=`` / in-place ops on views (``inverse``: angle -> -angle).

    The first pass multiplies every channel by a table padded with ones, so channels past ``rot_dim``
    are copied in that same pass (``x * 1`` is exact) instead of by a narrow copy of their own.
    """
    half, head_dim = cos.shape[-1], x.shape[-1]
    rot = 2 * half
    width = head_dim if (head_dim - rot) % 2 == 0 else rot  # an odd leftover channel is copied on its own
    lead = x.shape[:-1]
    if cos.dim() > x.dim() or any(c not in (1, n) for c, n in zip(reversed(cos.shape[:-1]), reversed(lead))):
        lead = torch.broadcast_shapes(lead, cos.shape[:-1])  # cos/sin widen x (or do not fit: raises)
        out = x.new_empty(lead + x.shape[-1:])
    else:
        out = empty_in_memory_order(x)
    xw, ow = x[..., :width], out[..., :width]
    if pairing == "interleaved" and x.dtype in (torch.float32, torch.float64) and complex_view_ok(xw):
        # (x[2i] + i x[2i+1]) * (cos + i sin): a single pass over x
        cis = pad_ones(torch.complex(cos, -sin if inverse else sin), (width - rot) // 2)
        torch.mul(torch.view_as_complex(xw.unflatten(-1, (width // 2, 2))), cis,
                  out=torch.view_as_complex(ow.unflatten(-1, (width // 2, 2))))
    else:
        if pairing == "half":
            table = torch.cat([cos, cos], dim=-1)
            x1, x2, o1, o2 = xw[..., :half], xw[..., half:rot], ow[..., :half], ow[..., half:rot]
        else:  # bf16 / fp16 interleaved: strided views
            table = cos.repeat_interleave(2, dim=-1)
            x1, x2, o1, o2 = xw[..., 0:rot:2], xw[..., 1:rot:2], ow[..., 0:rot:2], ow[..., 1:rot:2]
        torch.mul(xw, pad_ones(table, width - rot), out=ow)
        sign = -1.0 if inverse else 1.0
        o1.addcmul_(x2, sin, value=-sign)  # x1 cos - x2 sin
        o2.addcmul_(x1, sin, value=sign)   # x2 cos + x1 sin
    if width < head_dim:
        out[..., width:].copy_(x[..., width:])
    return out


def empty_in_memory_order(x: Tensor) -> Tensor:
    """A dense tensor shaped like ``x`` whose axes lie in memory in ``x``'s order (channels innermost).

    For q/k split from a fused qkv (memory ``(B, T, H, d)``, shape ``(B, H, T, d)``) both x and the
    result are then read/written front to back, as ``x * y`` would allocate it; a contiguous
    ``(B, H, T, d)`` result would make every pass stride across x.
    """
    if x.stride(-1) != 1:
        return torch.empty_like(x, memory_format=torch.contiguous_format)
    return torch.empty_like(x)  # preserve_format: dense strides in x's axis order (also for x with gaps)


def pad_ones(t: Tensor, n: int) -> Tensor:
    """``t`` ``(..., c)`` followed by ``n`` ones: ``(..., c + n)``."""
    return t if n == 0 else torch.cat([t, t.new_ones(*t.shape[:-1], n)], dim=-1)


def complex_view_ok(t: Tensor) -> bool:
    """Whether ``view_as_complex`` can read ``t`` ``(..., 2 * half)`` as pairs (unit last stride, even elsewhere)."""
    ok = t.stride(-1) == 1 and t.storage_offset() % 2 == 0 and all(s % 2 == 0 for s in t.stride()[:-1])
    return cast(bool, ok)  # a SymBool under torch.compile
