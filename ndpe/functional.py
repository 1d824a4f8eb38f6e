"""Pure tensor functions shared by kinds and models (no modules; one setting, the rotary kernel).

Applying RoPE is memory traffic: read q and k once, write them once. The eager path writes into
one preallocated output (laid out in the input's memory order) with ``out=`` and in-place
``addcmul_`` on views: no ``cat``, no temporaries the size of ``x``; interleaved pairs in
float32/float64 take a single complex multiply; q and k split from one fused qkv buffer are read
through one stacked view. Autograd goes through a small ``autograd.Function`` whose backward is
the inverse rotation. Under ``torch.compile`` the plain formula is traced instead, which Inductor
fuses into one kernel. Outside compile, :func:`set_rotary_kernel` picks a fused kernel instead of
the PyTorch ops (opt-in): ndpe's Triton kernel (``ndpe/_triton.py``, CUDA) or the plain formula
compiled by Inductor (any device). ``benchmarks/bench_rope.py`` measures every path against
``x.clone()``.
"""
from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import cast

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable


KERNELS = ("auto", "eager", "compile", "triton")
_kernel = "auto"


def set_rotary_kernel(name: str) -> str:
    """Choose how :func:`apply_rotary` / :func:`ndpe.apply_qk` run outside ``torch.compile``; returns the previous choice.

    - ``"auto"`` (default): today ``"eager"`` on every device. The Triton kernel is tested under
      Triton's interpreter and compiled for sm_90, but has not run on a GPU yet; it becomes the CUDA
      choice of ``"auto"`` once measured there (``benchmarks/bench_rope.py --device cuda``).
    - ``"eager"``: PyTorch ops. Interleaved float32 pairs take one pass over x; half pairs take three
      (no eager op reads channel i and i + rot_dim/2 together), about 3x a copy of q and k.
    - ``"compile"``: the plain formula compiled by ``torch.compile``; Inductor fuses forward and
      backward into one loop each (C++ on CPU, Triton on GPU). The first call compiles a graph for
      its shape (seconds), the first new shape a dynamic graph that later sizes reuse. For eager
      models on CPU.
    - ``"triton"``: ndpe's Triton kernel (q and k in one launch, float32 angles and arithmetic, stored
      in x's dtype); CUDA tensors (CPU tensors only under ``TRITON_INTERPRET=1``), raises otherwise.

    Under ``torch.compile`` the formula is always traced into the surrounding graph.

    >>> previous = set_rotary_kernel("eager"); set_rotary_kernel(previous)
    'eager'
    """
    global _kernel
    if name not in KERNELS:
        raise ValueError(f"rotary kernel must be one of {KERNELS}, got {name!r}")
    previous, _kernel = _kernel, name
    return previous


@contextlib.contextmanager
def rotary_kernel(name: str) -> Iterator[None]:
    """:func:`set_rotary_kernel` for a ``with`` block, restoring the previous choice on exit.

    >>> with rotary_kernel("eager"):
    ...     pass
    """
    previous = set_rotary_kernel(name)
    try:
        yield
    finally:
        set_rotary_kernel(previous)


# Stack q and k only while the joint output stays within 32 MiB: above it glibc serves every
# allocation with fresh mmap pages (page faults on every call), which two separate buffers avoid.
_STACK_MAX_BYTES = 32 << 20


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor, pairing: str = "half") -> Tensor:
    """Rotate the first ``rot_dim = 2 * cos.shape[-1]`` channels of ``x`` ``(..., T, head_dim)``.

    ``cos``/``sin`` are ``(*, T, rot_dim // 2)``, broadcastable against ``x[..., :rot_dim // 2]``
    (e.g. ``(T, half)``, ``(heads, T, half)``, ``(B, 1, T, half)``). ``pairing="half"`` rotates
    (x[i], x[i + rot_dim/2]) (GPT-NeoX / HF); ``"interleaved"`` rotates (x[2i], x[2i+1])
    (RoFormer, rotary-embedding-torch, timm). Channels past ``rot_dim`` pass through. cos/sin are
    cast to ``x``'s dtype (the ``"triton"`` kernel of :func:`set_rotary_kernel` keeps them and its
    arithmetic in float32); the result is a new dense tensor of ``x``'s dtype whose axes lie in memory
    in ``x``'s order, like ``x * 1`` (``x`` is not modified), differentiable in ``x``, ``cos``, ``sin``.

    >>> x = torch.randn(2, 4, 5, 8)                        # (B, heads, T, head_dim)
    >>> angle = torch.arange(5.0)[:, None] * torch.tensor([1.0, 0.1, 0.01])   # rot_dim 6
    >>> apply_rotary(x, angle.cos(), angle.sin()).shape
    torch.Size([2, 4, 5, 8])
    """
    return apply_rotary_many((x,), cos, sin, pairing)[0]


def apply_rotary_many(xs: tuple[Tensor, ...], cos: Tensor, sin: Tensor, pairing: str = "half") -> tuple[Tensor, ...]:
    """:func:`apply_rotary` on several tensors (q and k) with one cos/sin cast and one autograd node.

    >>> q = k = torch.randn(1, 2, 3, 4)
    >>> angle = torch.arange(3.0)[:, None] * torch.tensor([1.0, 0.5])
    >>> [t.shape for t in apply_rotary_many((q, k), angle.cos(), angle.sin())]
    [torch.Size([1, 2, 3, 4]), torch.Size([1, 2, 3, 4])]
    """
    if pairing not in ("half", "interleaved"):
        raise ValueError(f"pairing must be 'half' or 'interleaved', got {pairing!r}")
    rot_dim = 2 * cos.shape[-1]
    for x in xs:
        if rot_dim > x.shape[-1]:
            raise ValueError(f"rotation needs {rot_dim} channels but x has head_dim {x.shape[-1]}; "
                             f"build the encoding with dim = heads * head_dim of this attention")
    if len({x.dtype for x in xs}) > 1:
        return tuple(apply_rotary(x, cos, sin, pairing) for x in xs)
    if torch.compiler.is_compiling():  # plain formula: Inductor fuses it into one kernel
        return _rotate_reference_many(xs, cos.to(xs[0].dtype), sin.to(xs[0].dtype), pairing)
    kernel = _kernel
    if kernel == "compile":
        return _compiled()(xs, cos.to(xs[0].dtype), sin.to(xs[0].dtype), pairing)
    if kernel == "triton":
        from . import _triton
        if not _triton.available(*xs):
            raise RuntimeError("set_rotary_kernel('triton') needs Triton and q/k as CUDA tensors of float32/float16/"
                               f"bfloat16 with unit channel stride; got {xs[0].device} {xs[0].dtype} tensors "
                               "(use 'auto', 'eager' or 'compile')")
        cos, sin = cos.to(xs[0].device, torch.float32), sin.to(xs[0].device, torch.float32)  # float32 angles
        if torch.is_grad_enabled() and any(t.requires_grad for t in (cos, sin, *xs)):
            return _Rotary.apply(cos, sin, pairing, True, *xs)
        return _triton.rotary(xs, cos, sin, pairing)
    cos, sin = cos.to(xs[0].dtype), sin.to(xs[0].dtype)
    if torch.is_grad_enabled() and any(t.requires_grad for t in (cos, sin, *xs)):
        return _Rotary.apply(cos, sin, pairing, False, *xs)
    return _rotate_many(xs, cos, sin, pairing)


def _rotate_many(xs: tuple[Tensor, ...], cos: Tensor, sin: Tensor, pairing: str) -> tuple[Tensor, ...]:
    """The eager kernel on each of ``xs``; q and k from one fused qkv buffer go through it in one pass."""
    stacked = _stacked_view(xs)
    if stacked is None or stacked.numel() * stacked.element_size() > _STACK_MAX_BYTES:
        return tuple(_rotate(x, cos, sin, pairing) for x in xs)
    out = _rotate(stacked, cos, sin, pairing)
    # separate tensors over the one buffer (not views of it): each may be modified in place, also
    # when they are the outputs of the autograd Function. The buffer lives while either does.
    storage = out.untyped_storage()
    return tuple(out.new_empty(0).set_(storage, o.storage_offset(), o.shape, o.stride()) for o in out.unbind(0))


def _stacked_view(xs: tuple[Tensor, ...]) -> Tensor | None:
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


def _rotate_reference_many(xs: tuple[Tensor, ...], cos: Tensor, sin: Tensor, pairing: str) -> tuple[Tensor, ...]:
    return tuple(rotate_reference(x, cos, sin, pairing) for x in xs)


@functools.cache
def _compiled():
    """The ``"compile"`` kernel, with torch.compile's automatic dynamic shapes: the first shape gets a
    graph specialized to it (the fastest code; compare the "compiled half" and "dynamic B and N" rows
    of bench_rope.py), the first new shape one dynamic graph that every later size reuses."""
    return torch.compile(_rotate_reference_many, fullgraph=True)


def rotate_reference(x: Tensor, cos: Tensor, sin: Tensor, pairing: str = "half") -> Tensor:
    """The rotation written as one expression (cos/sin already in ``x``'s dtype); used under compile."""
    half = cos.shape[-1]
    rot = 2 * half
    if pairing == "half":
        x1, x2 = x[..., :half], x[..., half:rot]
        parts = [x1 * cos - x2 * sin, x2 * cos + x1 * sin]
    else:
        x1, x2 = x[..., :rot].unflatten(-1, (half, 2)).unbind(-1)
        parts = [torch.stack([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).flatten(-2)]
    if rot == x.shape[-1]:
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)
    # one flat cat with the pass-through channels: Inductor emits one loop (a nested cat cost 1.5x more)
    return torch.cat([*parts, x[..., rot:].expand(*parts[0].shape[:-1], -1)], dim=-1)


def _rotate(x: Tensor, cos: Tensor, sin: Tensor, pairing: str, inverse: bool = False) -> Tensor:
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
        out = _empty_in_memory_order(x)
    xw, ow = x[..., :width], out[..., :width]
    if pairing == "interleaved" and x.dtype in (torch.float32, torch.float64) and _complex_view_ok(xw):
        # (x[2i] + i x[2i+1]) * (cos + i sin): a single pass over x
        cis = _pad_ones(torch.complex(cos, -sin if inverse else sin), (width - rot) // 2)
        torch.mul(torch.view_as_complex(xw.unflatten(-1, (width // 2, 2))), cis,
                  out=torch.view_as_complex(ow.unflatten(-1, (width // 2, 2))))
    else:
        if pairing == "half":
            table = torch.cat([cos, cos], dim=-1)
            x1, x2, o1, o2 = xw[..., :half], xw[..., half:rot], ow[..., :half], ow[..., half:rot]
        else:  # bf16 / fp16 interleaved: strided views
            table = cos.repeat_interleave(2, dim=-1)
            x1, x2, o1, o2 = xw[..., 0:rot:2], xw[..., 1:rot:2], ow[..., 0:rot:2], ow[..., 1:rot:2]
        torch.mul(xw, _pad_ones(table, width - rot), out=ow)
        sign = -1.0 if inverse else 1.0
        o1.addcmul_(x2, sin, value=-sign)  # x1 cos - x2 sin
        o2.addcmul_(x1, sin, value=sign)   # x2 cos + x1 sin
    if width < head_dim:
        out[..., width:].copy_(x[..., width:])
    return out


def _empty_in_memory_order(x: Tensor) -> Tensor:
    """A dense tensor shaped like ``x`` whose axes lie in memory in ``x``'s order (channels innermost).

    For q/k split from a fused qkv (memory ``(B, T, H, d)``, shape ``(B, H, T, d)``) both x and the
    result are then read/written front to back, as ``x * y`` would allocate it; a contiguous
    ``(B, H, T, d)`` result would make every pass stride across x.
    """
    if x.stride(-1) != 1:
        return torch.empty_like(x, memory_format=torch.contiguous_format)
    return torch.empty_like(x)  # preserve_format: dense strides in x's axis order (also for x with gaps)


def _pad_ones(t: Tensor, n: int) -> Tensor:
    """``t`` ``(..., c)`` followed by ``n`` ones: ``(..., c + n)``."""
    return t if n == 0 else torch.cat([t, t.new_ones(*t.shape[:-1], n)], dim=-1)


def _complex_view_ok(t: Tensor) -> bool:
    """Whether ``view_as_complex`` can read ``t`` ``(..., 2 * half)`` as pairs (unit last stride, even elsewhere)."""
    ok = t.stride(-1) == 1 and t.storage_offset() % 2 == 0 and all(s % 2 == 0 for s in t.stride()[:-1])
    return cast(bool, ok)  # a SymBool under torch.compile


class _Rotary(torch.autograd.Function):
    """Rotation with a hand-written backward: d/dx is the inverse rotation, d/dcos and d/dsin are sums."""

    @staticmethod
    def forward(ctx, cos, sin, pairing, fused, *xs):
        ctx.pairing, ctx.fused = pairing, fused
        ctx.shapes = [x.shape for x in xs]
        ctx.save_for_backward(cos, sin, *(xs if any(ctx.needs_input_grad[:2]) else ()))
        if fused:
            from . import _triton
            return _triton.rotary(xs, cos, sin, pairing)
        return _rotate_many(xs, cos, sin, pairing)

    @staticmethod
    @once_differentiable
    def backward(ctx, *grads):
        cos, sin, *xs = ctx.saved_tensors
        need_x = ctx.needs_input_grad[4:]
        todo = [i for i, (g, need) in enumerate(zip(grads, need_x)) if g is not None and need]
        gxs: list[Tensor | None] = [None] * len(grads)
        if ctx.fused and todo:
            from . import _triton
            # incoming gradients may have any strides (expanded, transposed by q @ k.mT): the kernel
            # needs unit channel stride
            gs = tuple(grads[i] if grads[i].stride(-1) == 1 else grads[i].contiguous() for i in todo)
            rotated = _triton.rotary(gs, cos, sin, ctx.pairing, inverse=True)
        else:
            rotated = tuple(_rotate(grads[i], cos, sin, ctx.pairing, inverse=True) for i in todo)
        for i, r in zip(todo, rotated):
            gxs[i] = r.sum_to_size(ctx.shapes[i])
        gcos = gsin = None
        if any(ctx.needs_input_grad[:2]):
            acc = torch.promote_types(cos.dtype, torch.float32)  # sums over batch and heads: at least float32
            gcos, gsin = cos.new_zeros(cos.shape, dtype=acc), sin.new_zeros(sin.shape, dtype=acc)
            for g, x in zip(grads, xs):
                if g is not None:
                    x1, x2 = (t.to(acc) for t in _pairs(x, cos.shape[-1], ctx.pairing))
                    g1, g2 = (t.to(acc) for t in _pairs(g, cos.shape[-1], ctx.pairing))
                    gcos += (g1 * x1 + g2 * x2).sum_to_size(cos.shape)
                    gsin += (g2 * x1 - g1 * x2).sum_to_size(sin.shape)
            gcos, gsin = gcos.to(cos.dtype), gsin.to(sin.dtype)
        return (gcos, gsin, None, None, *gxs)


def _pairs(t: Tensor, half: int, pairing: str) -> tuple[Tensor, Tensor]:
    """The two channel views ``(..., half)`` that one frequency rotates together."""
    if pairing == "half":
        return t[..., :half], t[..., half:2 * half]
    return t[..., 0:2 * half:2], t[..., 1:2 * half:2]
