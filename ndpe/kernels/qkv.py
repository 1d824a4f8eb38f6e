"""RoPE in place on a packed qkv buffer (the flash-attn ``apply_rotary_emb_qkv_`` / Liger design), on the Triton kernel.

A fused projection's output ``(B, T, 3, heads, head_dim)`` (``qkv_linear(x).unflatten(-1, (3, heads, head_dim))``)
holds q at ``[:, :, 0]`` and k at ``[:, :, 1]``: :func:`rotary_qkv_` rotates both where they lie, in one launch that
reads and writes each element once (no output buffer, no copy of v), and returns the buffer. With autograd,
:class:`RotaryQKV` marks it modified in place; its backward writes the inverse rotation of the q and k gradients and
copies v's into a new gradient buffer (the incoming gradient is never written: autograd may hand the same tensor to
another branch). The tables are fixed (no gradient: ``ndpe.apply_qk`` takes learned ones), ``(*, T, rot_dim / 2)`` in
ndpe's layout (heads before tokens: ``(T, half)``, ``(heads, T, half)``, ``(B, 1, T, half)``), computed on in float32.
"""
from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from ..checks import check_pairing
from . import triton


def qk_views(qkv: Tensor) -> tuple[Tensor, Tensor]:
    """q and k of a packed ``(B, T, 3, heads, head_dim)`` buffer as ``(B, heads, T, head_dim)`` views."""
    return qkv[:, :, 0].transpose(1, 2), qkv[:, :, 1].transpose(1, 2)


def rotary_qkv_(qkv: Tensor, cos: Tensor, sin: Tensor, pairing: str = "half") -> Tensor:
    """Rotate q and k of ``qkv`` ``(B, T, 3, heads, head_dim)`` in place by ``cos`` / ``sin``; returns ``qkv``.

    Needs :func:`ndpe.kernels.triton.available` (CUDA, or CPU under ``TRITON_INTERPRET=1``)."""
    check_pairing(pairing)
    if not isinstance(qkv, Tensor) or qkv.dim() != 5 or qkv.shape[2] != 3:
        raise ValueError("rotary_qkv_ takes a packed qkv buffer of shape (B, T, 3, heads, head_dim), got "
                         f"{tuple(qkv.shape) if isinstance(qkv, Tensor) else type(qkv).__name__}")
    if cos.requires_grad or sin.requires_grad:
        raise ValueError("rotary_qkv_ takes fixed cos/sin tables (no gradient); learned ones go through ndpe.apply_qk")
    if not triton.available(qkv):
        raise RuntimeError("rotary_qkv_ needs Triton and a CUDA tensor of float32/float16/bfloat16 with unit channel "
                           f"stride (CPU only under TRITON_INTERPRET=1); got a {qkv.device} {qkv.dtype} tensor")
    cos, sin = cos.to(qkv.device, torch.float32), sin.to(qkv.device, torch.float32)
    if torch.is_grad_enabled() and qkv.requires_grad:
        return RotaryQKV.apply(qkv, cos, sin, pairing)
    q, k = qk_views(qkv)
    triton.rotary_into((q, k), (q, k), cos, sin, pairing)
    return qkv


class RotaryQKV(torch.autograd.Function):
    """:func:`rotary_qkv_` with autograd: forward in place, backward the inverse rotation into a new gradient."""

    @staticmethod
    def forward(ctx, qkv, cos, sin, pairing):
        q, k = qk_views(qkv)
        triton.rotary_into((q, k), (q, k), cos, sin, pairing)
        ctx.mark_dirty(qkv)
        ctx.save_for_backward(cos, sin)
        ctx.pairing = pairing
        return qkv

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        cos, sin = ctx.saved_tensors
        if grad.stride(-1) != 1:
            grad = grad.contiguous()
        out = torch.empty_like(grad, memory_format=torch.contiguous_format)
        triton.rotary_into(qk_views(grad), qk_views(out), cos, sin, ctx.pairing, inverse=True)
        out[:, :, 2].copy_(grad[:, :, 2])
        return out, None, None, None
