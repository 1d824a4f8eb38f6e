"""Fused Triton kernel for RoPE on CUDA: q and k rotated in one launch (same semantics as ``ndpe.kernels.eager.rotate``).

Layout. ``x`` ``(..., T, head_dim)`` and cos/sin ``(*, T, half)`` are broadcast to one lead shape
``(L0, L1, L2, T)`` (missing axes padded with size 1) through strides only: a broadcast axis is
stride 0, nothing is materialized, and q/k are read through their own strides (views of a fused qkv
projection are read in place; the last stride must be 1). The grid is 1-D: program ``pid`` handles
lead row ``r = pid % (L0 L1 L2)`` and token block ``pid // (L0 L1 L2)`` (``BLOCK_T`` tokens), so
neighbouring programs share a token block (and its cos/sin tile, from L2). Each program

- loads its ``(BLOCK_T, HALF_P)`` cos and sin tiles once, in float32 whatever their dtype (float64 for float32 q/k)
  (``HALF_P`` = ``half`` padded to a power of two, masked), negating sin for ``inverse``;
- for q and then k (``NUM`` = 2; 1 for a single tensor) loads the pairs, rotates them in float32 (float64 for
  float32 q/k, so that every output is one rounding of the exact rotation of its tables: within 1 ulp)
  and stores them in x's dtype: "half" pairs as two ``(BLOCK_T, HALF_P)`` loads at channels
  ``c`` and ``c + half``; "interleaved" pairs as one contiguous ``(BLOCK_T, 2 HALF_P)`` load
  split into even and odd channels (joined back for the store);
- copies the ``head_dim - rot_dim`` pass-through channels (any count, even or odd) in the same pass.

The output is a new tensor in x's memory order (``eager.empty_in_memory_order``), or dense in the
broadcast shape when cos/sin widen x. No autograd: callers wrap it (the backward is
``inverse=True``; :mod:`.qkv` rotates a packed qkv buffer in place through :func:`rotary_into`). Supported dtypes:
float32, float16, bfloat16 (float64 is not; the eager path keeps it). At most 4 lead axes after broadcasting (``x.dim() <= 5``).

Triton is optional: without it ``available`` is False. ``triton.jit`` picks compiled or interpreted
when it decorates, from ``TRITON_INTERPRET``, so the kernel is decorated lazily, once per value of
that flag (``_kernel``): with ``TRITON_INTERPRET=1`` it runs on CPU tensors (tests), otherwise on CUDA.
(The interpreter rounds float32 -> bfloat16 toward zero; the GPU stores round to nearest.)
"""
from __future__ import annotations

import torch
from torch import Tensor

from ..checks import check_pairing
from .eager import empty_in_memory_order

try:
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - exercised where triton is missing
    triton = tl = None

_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_TILE = 2048           # elements of one (BLOCK_T, HALF_P) tile
_KERNELS: dict = {}    # interpret flag -> decorated kernel
# Launch options, stated so that the compiled code does not move with Triton's defaults: Triton 3.9 warns that its
# default multiply-add fusion turns off in 3.10; the rotation keeps it (x c - y s as one fma and one rounding less,
# the code every Triton release compiled until then and the GPU checks measured).
LAUNCH_OPTIONS = {"num_warps": 4, "enable_fp_fusion": True}


def _interpreting() -> bool:
    return bool(triton.knobs.runtime.interpret)


def available(*xs: Tensor) -> bool:
    """Whether :func:`rotary` can take these tensors: triton importable, all on one CUDA device (or on
    CPU with ``TRITON_INTERPRET=1``), dtype float32/float16/bfloat16, 1 to 5 dims, unit last stride."""
    if triton is None or not xs:
        return False
    device = xs[0].device
    if device.type == "cpu":
        if not _interpreting():
            return False
    elif device.type != "cuda":
        return False
    return all(x.device == device and x.dtype in _DTYPES and 1 <= x.dim() <= 5
               and (x.stride(-1) == 1 or x.shape[-1] <= 1) for x in xs)


def rotary(xs: tuple[Tensor, ...], cos: Tensor, sin: Tensor, pairing: str,
           inverse: bool = False) -> tuple[Tensor, ...]:
    """``eager.rotate(x, cos, sin, pairing, inverse)`` for every ``x`` of ``xs``, on the Triton kernel.

    Consecutive tensors of the same shape, dtype and strides (q and k) go through one launch that
    loads each cos/sin tile once for both. cos/sin may be any of the supported dtypes; the rotation
    is computed in float32 and stored in x's dtype. Check :func:`available` first.
    """
    check_pairing(pairing)
    outs, i = [], 0
    while i < len(xs):
        x = xs[i]
        k = xs[i + 1] if i + 1 < len(xs) else None
        if k is not None and (k.shape != x.shape or k.dtype != x.dtype or k.stride() != x.stride()):
            k = None
        outs += _launch(x, k, cos, sin, pairing, inverse)
        i += 1 if k is None else 2
    return tuple(outs)


def rotary_into(xs: tuple[Tensor, Tensor], outs: tuple[Tensor, Tensor], cos: Tensor, sin: Tensor, pairing: str,
                inverse: bool = False) -> None:
    """q and k (``xs``, one shape, dtype and strides) rotated into ``outs`` (one layout; ``outs is xs``: in place, the
    flash-attn / Liger design on a packed qkv buffer) in one launch; cos / sin must not widen them."""
    check_pairing(pairing)
    x, k = xs
    if k.shape != x.shape or k.dtype != x.dtype or k.stride() != x.stride():
        raise ValueError("rotary_into takes q and k of one shape, dtype and strides (views of one packed buffer)")
    if outs[0].stride() != outs[1].stride() or any(o.shape != x.shape or o.dtype != x.dtype for o in outs):
        raise ValueError("rotary_into writes q and k into two outputs of their shape and dtype, with one layout")
    _launch(x, k, cos, sin, pairing, inverse, outs)


def _launch(x: Tensor, k: Tensor | None, cos: Tensor, sin: Tensor, pairing: str, inverse: bool,
            into: tuple[Tensor, ...] | None = None) -> list[Tensor]:
    """One kernel launch rotating ``x`` (and ``k``, same shape/dtype/strides as ``x``), into ``into`` if given."""
    outs, args, grid = _prepare(x, k, cos, sin, pairing, inverse, into)
    if grid[0] > 0:
        kernel = _kernel()
        if x.is_cuda and x.device.index != torch.cuda.current_device():
            with torch.cuda.device(x.device):
                kernel[grid](**args, **LAUNCH_OPTIONS)
        else:
            kernel[grid](**args, **LAUNCH_OPTIONS)
    return outs


def _prepare(x: Tensor, k: Tensor | None, cos: Tensor, sin: Tensor, pairing: str, inverse: bool,
             into: tuple[Tensor, ...] | None = None):
    """Outputs, kernel keyword arguments and grid for one launch (the launch itself is ``_launch``); ``into``: the
    outputs to write (x's shape; ``x`` itself rotates in place and its pass-through channels are left as they are)."""
    half, head_dim = cos.shape[-1], x.shape[-1]
    if 2 * half > head_dim:
        raise ValueError(f"rotation needs {2 * half} channels but x has head_dim {head_dim}")
    if x.stride(-1) != 1 and head_dim > 1:
        raise ValueError("the Triton rotary kernel needs channels with stride 1")
    lead = x.shape[:-1]
    if cos.dim() > x.dim() or any(c not in (1, n) for c, n in zip(reversed(cos.shape[:-1]), reversed(lead))):
        lead = torch.broadcast_shapes(lead, cos.shape[:-1])  # cos/sin widen x (or do not fit: raises)
        new_out = lambda t: t.new_empty(lead + (head_dim,))  # noqa: E731
    else:
        new_out = empty_in_memory_order
    if len(lead) > 4:
        raise ValueError(f"the Triton rotary kernel takes at most 4 lead axes, got shape {tuple(lead)}")
    if cos.shape != sin.shape:
        cos, sin = torch.broadcast_tensors(cos, sin)
    if cos.stride() != sin.stride():  # the kernel takes one set of strides for both tables
        cos, sin = cos.contiguous(), sin.contiguous()
    if into is not None:
        if lead != x.shape[:-1]:
            raise ValueError(f"cos/sin of shape {tuple(cos.shape)} widen x {tuple(x.shape)}: no output of x's shape")
        outs = list(into)
    else:
        outs = [new_out(x)]
        if k is not None:  # same shape and strides as x: same layout
            outs.append(torch.empty_strided(outs[0].shape, outs[0].stride(), dtype=k.dtype, device=k.device))
    sizes = (1,) * (4 - len(lead)) + tuple(lead)
    sx, so, sc = _lead_strides(x, lead), _lead_strides(outs[0], lead), _lead_strides(cos, lead)
    half_p, tail = _pow2(half), head_dim - 2 * half
    if into is not None and outs[0].data_ptr() == x.data_ptr():
        tail = 0  # in place: the pass-through channels are already where they belong
    block_t = min(_pow2(sizes[3]), max(1, _TILE // half_p))
    rows = sizes[0] * sizes[1] * sizes[2]
    args = dict(
        q_ptr=x, k_ptr=x if k is None else k, oq_ptr=outs[0], ok_ptr=outs[-1], cos_ptr=cos, sin_ptr=sin,
        R=rows, L1=sizes[1], L2=sizes[2], T=sizes[3],
        sx0=sx[0], sx1=sx[1], sx2=sx[2], sxt=sx[3],
        so0=so[0], so1=so[1], so2=so[2], sot=so[3],
        sc0=sc[0], sc1=sc[1], sc2=sc[2], sct=sc[3], scc=sc[4],
        NUM=len(outs), HALF=half, TAIL=tail, INTERLEAVED=pairing == "interleaved", INVERSE=bool(inverse),
        BLOCK_T=block_t, HALF_P=half_p, TAIL_P=_pow2(tail), WIDE=x.dtype == torch.float32,
    )
    return outs, args, (rows * -(-sizes[3] // block_t),)


def _lead_strides(t: Tensor, lead: tuple[int, ...]) -> tuple[int, ...]:
    """Strides of ``t`` broadcast to ``(*lead, t.shape[-1])``, lead padded in front to 4 axes (broadcast: 0)."""
    shape, stride, pad = t.shape, t.stride(), 4 - len(lead)
    off = t.dim() - 1 - len(lead)  # t's axis for lead axis i is i + off
    return (0,) * pad + tuple(stride[i + off] if i + off >= 0 and shape[i + off] != 1 else 0
                              for i in range(len(lead))) + (stride[-1],)


def _pow2(n: int) -> int:
    """The smallest power of two >= max(n, 1) (``triton.next_power_of_2`` costs a wrapper call)."""
    return 1 << max(n - 1, 0).bit_length()


def _kernel():
    """The kernel, decorated by ``triton.jit`` for the current ``TRITON_INTERPRET`` (cached per value)."""
    flag = _interpreting()
    if flag not in _KERNELS:
        _KERNELS[flag] = triton.jit(_rope_kernel)
    return _KERNELS[flag]


def _rope_kernel(q_ptr, k_ptr, oq_ptr, ok_ptr, cos_ptr, sin_ptr,
                 R, L1, L2, T,
                 sx0, sx1, sx2, sxt,
                 so0, so1, so2, sot,
                 sc0, sc1, sc2, sct, scc,
                 NUM: tl.constexpr, HALF: tl.constexpr, TAIL: tl.constexpr,
                 INTERLEAVED: tl.constexpr, INVERSE: tl.constexpr,
                 BLOCK_T: tl.constexpr, HALF_P: tl.constexpr, TAIL_P: tl.constexpr, WIDE: tl.constexpr):
    acc = tl.float64 if WIDE else tl.float32  # float32 q/k: float64 math, so one rounding (<= 0.5 ulp) at the store
    pid = tl.program_id(0).to(tl.int64)
    r = pid % R
    i2 = r % L2
    i1 = (r // L2) % L1
    i0 = r // (L2 * L1)
    t = ((pid // R) * BLOCK_T + tl.arange(0, BLOCK_T))[:, None]         # (BLOCK_T, 1) tokens
    rows = t < T
    c = tl.arange(0, HALF_P)[None, :]                                   # (1, HALF_P) frequencies
    m = rows & (c < HALF)
    cs = i0 * sc0 + i1 * sc1 + i2 * sc2 + t * sct + c * scc
    cos = tl.load(cos_ptr + cs, mask=m, other=0.0).to(acc)
    sin = tl.load(sin_ptr + cs, mask=m, other=0.0).to(acc)
    if INVERSE:
        sin = -sin
    x_off = i0 * sx0 + i1 * sx1 + i2 * sx2 + t * sxt
    o_off = i0 * so0 + i1 * so1 + i2 * so2 + t * sot
    cw = tl.arange(0, 2 * HALF_P)[None, :]                              # interleaved: both channels
    mw = rows & (cw < 2 * HALF)
    ct = tl.arange(0, TAIL_P)[None, :]                                  # pass-through channels
    mt = rows & (ct < TAIL)
    for j in tl.static_range(NUM):
        src = q_ptr
        dst = oq_ptr
        if j == 1:
            src = k_ptr
            dst = ok_ptr
        if INTERLEAVED:
            xw = tl.load(src + x_off + cw, mask=mw, other=0.0).to(acc)
            x1, x2 = tl.split(tl.reshape(xw, (BLOCK_T, HALF_P, 2)))
        else:
            x1 = tl.load(src + x_off + c, mask=m, other=0.0).to(acc)
            x2 = tl.load(src + x_off + HALF + c, mask=m, other=0.0).to(acc)
        o1 = x1 * cos - x2 * sin
        o2 = x2 * cos + x1 * sin
        if INTERLEAVED:
            ow = tl.reshape(tl.join(o1, o2), (BLOCK_T, 2 * HALF_P))
            tl.store(dst + o_off + cw, ow.to(dst.dtype.element_ty), mask=mw)
        else:
            tl.store(dst + o_off + c, o1.to(dst.dtype.element_ty), mask=m)
            tl.store(dst + o_off + HALF + c, o2.to(dst.dtype.element_ty), mask=m)
        if TAIL > 0:
            tl.store(dst + o_off + 2 * HALF + ct, tl.load(src + x_off + 2 * HALF + ct, mask=mt), mask=mt)
