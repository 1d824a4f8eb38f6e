"""The eager RoPE kernel: PyTorch ops at the memory floor.

Applying RoPE is memory traffic: read q and k once, write them once. :func:`rotate_with` writes into one
preallocated output (laid out in the input's memory order) with ``out=`` and one ``_foreach_addcmul_``
on views: no ``cat``, no temporaries the size of ``x``; interleaved pairs in float32/float64 take a
single complex multiply; q and k split from one fused qkv buffer go through one stacked view
(:func:`rotate_many`). The tables are cast to the compute dtype and joined once a grid (:func:`prepare`), so a
block's forward on q and k is three kernels (a multiply, two ``addcmul``) and its backward four (a stack of the
two gradients, then the same three). ``ndpe.kernels.autograd.Rotary`` carries autograd for this kernel and the
Triton one. ``ndpe.functional.rotate_reference`` is the formula all of them are tested against
(tests/test_functional.py, tests/test_triton.py). This module imports no other kernel.
"""
from __future__ import annotations

import weakref
from typing import cast

import torch
from torch import Tensor
from torch.utils.weak import WeakIdKeyDictionary

# Stack q and k only while the joint output stays within 32 MiB: above it glibc serves every
# allocation with fresh mmap pages (page faults on every call), which two separate buffers avoid.
STACK_MAX_BYTES = 32 << 20
# prepared tables of fixed cos / sin (a cached encoding's), kept per cos tensor while it lives: one cast and join a grid
_TABLES: WeakIdKeyDictionary = WeakIdKeyDictionary()
_LAST: list = [None]  # (cos ref, sin ref, key, versions, tables) of the last call


class Tables:
    """cos / sin ``(*, T, half)`` of one rotation in the compute dtype, and the tables the kernel derives from them
    (cos joined over the pairs' channels, the complex ``cos + i sin``), each built on first use and kept."""

    __slots__ = ("cos", "sin", "half", "pairing", "_derived")

    def __init__(self, cos: Tensor, sin: Tensor, dtype: torch.dtype, pairing: str):
        # never the caller's tensor objects themselves (an alias when no cast is needed): a kept entry must not hold
        # the cos that keys it alive
        self.cos, self.sin = (t.to(dtype) if t.dtype != dtype else t.detach() for t in (cos, sin))
        self.half, self.pairing = cos.shape[-1], pairing
        self._derived: dict = {}

    def joined(self, width: int) -> Tensor:
        """cos over the rotated channels (``"half"``: ``cat(cos, cos)``; ``"interleaved"``: each twice), padded with
        ones to ``width`` channels."""
        table = self._derived.get(("joined", width))
        if table is None:
            c = self.cos
            table = torch.cat([c, c], -1) if self.pairing == "half" else c.repeat_interleave(2, dim=-1)
            table = self._derived[("joined", width)] = pad_ones(table, width - 2 * self.half)
        return table

    def cis(self, width: int, inverse: bool) -> Tensor:
        """``cos + i sin`` (``inverse``: ``cos - i sin``) padded with ones to ``width / 2`` complex channels."""
        table = self._derived.get(("cis", width, inverse))
        if table is None:
            cis = torch.complex(self.cos, -self.sin if inverse else self.sin)
            table = self._derived[("cis", width, inverse)] = pad_ones(cis, (width - 2 * self.half) // 2)
        return table


def prepare(cos: Tensor, sin: Tensor, dtype: torch.dtype, pairing: str) -> Tables:
    """:class:`Tables` of ``cos`` / ``sin`` in ``dtype``; fixed ones (no gradient: a cached encoding's) are kept on
    ``cos`` (weakly: the entry goes with it) per ``(sin, dtype, pairing)`` and served again while neither changed in
    place, so a model's blocks share one cast and one join per grid."""
    if cos.requires_grad or sin.requires_grad or torch.compiler.is_compiling():
        return Tables(cos, sin, dtype, pairing)
    key = (dtype, pairing, torch.is_inference_mode_enabled())
    last = _LAST[0]  # the previous block's: one identity test where a forward's blocks share one encoding
    if last is not None and last[0]() is cos and last[1]() is sin and last[2] == key and last[3] == (
            cos._version, sin._version):
        return last[4]
    tables = _prepare_kept(cos, sin, key)
    _LAST[0] = (weakref.ref(cos), weakref.ref(sin), key, (cos._version, sin._version), tables)
    return tables


def _prepare_kept(cos: Tensor, sin: Tensor, key: tuple) -> Tables:
    """:func:`prepare`'s tables kept on ``cos`` per ``key`` (dtype, pairing, inference mode)."""
    entries = _TABLES.get(cos)
    if entries is None:
        entries = _TABLES[cos] = {}
    hit = entries.get(key)
    if hit is not None and hit[0]() is sin and hit[1] == (cos._version, sin._version):
        return hit[2]
    tables = Tables(cos, sin, key[0], key[1])
    entries[key] = (weakref.ref(sin), (cos._version, sin._version), tables)
    return tables


def rotate_many(xs: tuple[Tensor, ...], tables: Tables, inverse: bool = False, stack: bool = False,
                views: bool = False) -> tuple[Tensor, ...]:
    """The eager kernel on each of ``xs``: q and k from one fused qkv buffer in one pass over a stacked view; other
    same-shape tensors copied into one stack first (``stack``: q's and k's gradients) or rotated by
    ``torch._foreach_*`` ops. The results are separate tensors over one buffer (``views``: plain views of it, for
    callers outside autograd, whose outputs are never a custom Function's)."""
    stacked = stacked_view(xs)
    if (stacked is None and stack and len(xs) > 1 and len({(x.shape, x.dtype) for x in xs}) == 1
            and len(xs) * xs[0].numel() * xs[0].element_size() <= STACK_MAX_BYTES):
        stacked = torch.stack(xs)
    if stacked is not None and stacked.numel() * stacked.element_size() <= STACK_MAX_BYTES:
        out = rotate_with(stacked, tables, inverse)
        if views:
            return out.unbind(0)
        # separate tensors over the one buffer (not views of it): each may be modified in place, also
        # when they are the outputs of the autograd Function. The buffer lives while either does.
        storage, offset, step, shape, stride = (out.untyped_storage(), out.storage_offset(), out.stride(0),
                                                out.shape[1:], out.stride()[1:])
        return tuple(out.new_empty(0).set_(storage, offset + i * step, shape, stride) for i in range(len(xs)))
    if len(xs) > 1 and all(x.shape == xs[0].shape for x in xs) and not widens(xs[0], tables.cos):
        outs = foreach_rotate(xs, tables, inverse)
        if outs is not None:
            return outs
    return tuple(rotate_with(x, tables, inverse) for x in xs)


def foreach_rotate(xs: tuple[Tensor, ...], tables: Tables, inverse: bool) -> tuple[Tensor, ...] | None:
    """Same-shape ``xs`` rotated by three ``torch._foreach_*`` ops (None where a channel is left to copy alone)."""
    half, head_dim, n = tables.half, xs[0].shape[-1], len(xs)
    rot = 2 * half
    if (head_dim - rot) % 2:
        return None
    if tables.pairing == "interleaved" and xs[0].dtype in (torch.float32, torch.float64) and all(
            complex_view_ok(x) for x in xs):
        cis = tables.cis(head_dim, inverse)
        outs = torch._foreach_mul([torch.view_as_complex(x.unflatten(-1, (head_dim // 2, 2))) for x in xs], [cis] * n)
        return tuple(torch.view_as_real(o).flatten(-2) for o in outs)
    outs = torch._foreach_mul(list(xs), [tables.joined(head_dim)] * n)
    x1s, x2s = zip(*(pairs(x, half, tables.pairing) for x in xs))
    o1s, o2s = zip(*(pairs(o, half, tables.pairing) for o in outs))
    sign = -1.0 if inverse else 1.0
    torch._foreach_addcmul_([*o1s, *o2s], [*x2s, *x1s], [tables.sin] * 2 * n, [-sign] * n + [sign] * n)
    return tuple(outs)


def pairs(t: Tensor, half: int, pairing: str) -> tuple[Tensor, Tensor]:
    """The two channel views ``(..., half)`` that one frequency rotates together."""
    if pairing == "half":
        rest = t.shape[-1] - 2 * half
        first, second = t.split_with_sizes((half, half, rest) if rest else (half, half), -1)[:2]  # one op, both views
        return first, second
    return t[..., 0:2 * half:2], t[..., 1:2 * half:2]


def stacked_view(xs: tuple[Tensor, ...]) -> Tensor | None:
    """``(len(xs), *shape)`` view of same-shape, same-stride tensors in one storage (read-only use), else None."""
    x0 = xs[0]
    if len(xs) < 2:
        return None
    shape, stride, base = x0.shape, x0.stride(), x0._base
    if any(x.shape != shape or x.stride() != stride for x in xs[1:]):
        return None
    if base is None or any(x._base is not base for x in xs[1:]):  # views of one tensor share its storage
        ptr = x0.untyped_storage().data_ptr()
        if any(x.device != x0.device or x.untyped_storage().data_ptr() != ptr for x in xs[1:]):
            return None
    steps = {b.storage_offset() - a.storage_offset() for a, b in zip(xs, xs[1:])}
    step = steps.pop() if len(steps) == 1 else -1
    if step < 0:  # irregular or backwards spacing: no strided view covers them
        return None
    return x0.as_strided((len(xs), *shape), (step, *stride), x0.storage_offset())


def widens(x: Tensor, cos: Tensor) -> bool:
    """Whether ``cos``'s lead axes ``(*, T)`` broadcast ``x`` ``(..., T, d)`` to a larger shape (or do not fit)."""
    lead = x.shape[:-1]
    return cos.dim() > x.dim() or any(c not in (1, n) for c, n in zip(reversed(cos.shape[:-1]), reversed(lead)))


def rotate(x: Tensor, cos: Tensor, sin: Tensor, pairing: str, inverse: bool = False) -> Tensor:
    """The eager kernel on one tensor, cos / sin cast to ``x``'s dtype (``inverse``: angle -> -angle)."""
    return rotate_with(x, Tables(cos, sin, x.dtype, pairing), inverse)


def rotate_with(x: Tensor, tables: Tables, inverse: bool = False, dtype: torch.dtype | None = None) -> Tensor:
    """Eager kernel: one output buffer, filled with ``out=`` / in-place ops on views (``inverse``: angle -> -angle;
    ``dtype``: the output's, default ``x``'s).

    The first pass multiplies every channel by a table padded with ones, so channels past ``rot_dim``
    are copied in that same pass (``x * 1`` is exact) instead of by a narrow copy of their own.
    """
    cos, sin, half, pairing = tables.cos, tables.sin, tables.half, tables.pairing
    head_dim = x.shape[-1]
    rot = 2 * half
    width = head_dim if (head_dim - rot) % 2 == 0 else rot  # an odd leftover channel is copied on its own
    if widens(x, cos):
        lead = torch.broadcast_shapes(x.shape[:-1], cos.shape[:-1])  # cos/sin widen x (or do not fit: raises)
        out = x.new_empty(lead + x.shape[-1:], dtype=dtype)
    else:
        out = empty_in_memory_order(x, dtype)
    xw, ow = (x, out) if width == head_dim else (x[..., :width], out[..., :width])
    if pairing == "interleaved" and x.dtype in (torch.float32, torch.float64) and cos.dtype in (
            torch.float32, torch.float64) and complex_view_ok(xw):  # float32 gradients of bfloat16 tables: no complex
        # (x[2i] + i x[2i+1]) * (cos + i sin): a single pass over x
        torch.mul(torch.view_as_complex(xw.unflatten(-1, (width // 2, 2))), tables.cis(width, inverse),
                  out=torch.view_as_complex(ow.unflatten(-1, (width // 2, 2))))
    else:
        x1, x2 = pairs(xw, half, pairing)
        o1, o2 = pairs(ow, half, pairing)
        torch.mul(xw, tables.joined(width), out=ow)
        sign = -1.0 if inverse else 1.0
        # x1 cos - x2 sin, x2 cos + x1 sin: one dispatch for both (two kernels: sin broadcasts)
        torch._foreach_addcmul_([o1, o2], [x2, x1], [sin, sin], [-sign, sign])
    if width < head_dim:
        out[..., width:].copy_(x[..., width:])
    return out


def empty_in_memory_order(x: Tensor, dtype: torch.dtype | None = None) -> Tensor:
    """A dense tensor shaped like ``x`` whose axes lie in memory in ``x``'s order (channels innermost).

    For q/k split from a fused qkv (memory ``(B, T, H, d)``, shape ``(B, H, T, d)``) both x and the
    result are then read/written front to back, as ``x * y`` would allocate it; a contiguous
    ``(B, H, T, d)`` result would make every pass stride across x.
    """
    if x.stride(-1) != 1:
        return torch.empty_like(x, dtype=dtype, memory_format=torch.contiguous_format)
    return torch.empty_like(x, dtype=dtype)  # preserve_format: dense strides in x's axis order (also for x with gaps)


def pad_ones(t: Tensor, n: int) -> Tensor:
    """``t`` ``(..., c)`` followed by ``n`` ones: ``(..., c + n)``."""
    return t if n == 0 else torch.cat([t, t.new_ones(*t.shape[:-1], n)], dim=-1)


def complex_view_ok(t: Tensor) -> bool:
    """Whether ``view_as_complex`` can read ``t`` ``(..., 2 * half)`` as pairs (unit last stride, even elsewhere)."""
    ok = t.stride(-1) == 1 and t.storage_offset() % 2 == 0 and all(s % 2 == 0 for s in t.stride()[:-1])
    return cast(bool, ok)  # a SymBool under torch.compile
