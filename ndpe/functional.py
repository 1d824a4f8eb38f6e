"""RoPE's formula, its one dispatch and :func:`apply_qk` (no modules; one setting, the rotary kernel).

:func:`rotate_reference` is the rotation written as one expression: what every path computes and is
tested against, and what ``torch.compile`` traces into a model's graph. :func:`apply_rotary_many`
validates its inputs and dispatches to a path of :mod:`ndpe.kernels` (chosen by
:func:`set_rotary_kernel`): the eager kernel (PyTorch ops near the memory floor), the reference
compiled by Inductor, or ndpe's Triton kernel (CUDA). ``benchmarks/bench_rope.py`` measures every
path against ``x.clone()``. :func:`apply_qk` (``ndpe.apply_qk``) rotates attention's q and k by a ``PosOut``.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import cast

import torch
from torch import Tensor

from .checks import check_float_tensor, check_pairing
from .contract import PosOut, check_leading, check_pos, check_token_count
from .fields import acting
from .kernels import angles
from .kernels import compile as compile_kernel
from .kernels import eager
from .kernels.autograd import Rotary

__all__ = ["KERNELS", "apply_out", "apply_qk", "apply_rotary", "apply_rotary_many", "apply_v", "change_basis",
           "rotary_kernel", "rotate_qk", "rotate_reference", "set_rotary_kernel", "transform_heads"]


_CHECKED: dict = {}  # (id(pos), q.shape, k.shape) -> pos: the shape checks of apply_qk passed for them
KERNELS = ("auto", "eager", "compile", "triton")
"""The rotary kernels :func:`set_rotary_kernel` takes."""
_kernel = "auto"


def set_rotary_kernel(name: str) -> str:
    """Choose how :func:`apply_rotary` / :func:`ndpe.apply_qk` run outside ``torch.compile``; returns the previous choice.

    - ``"auto"`` (default): today ``"eager"`` on every device. The Triton kernel is tested under
      Triton's interpreter and compiled for sm_90, but has not run on a GPU yet; it becomes the CUDA
      choice of ``"auto"`` once measured there (``benchmarks/bench_rope.py --device cuda``).
    - ``"eager"``: PyTorch ops. Interleaved float32 pairs take one pass over x; half pairs take three
      (no eager op reads channel i and i + rot_dim/2 together), about 3x a copy of q and k. The tables are cast to
      x's dtype and joined once a grid (``ndpe.kernels.eager.prepare``): 3 kernels a block forward, 4 backward.
    - ``"compile"``: the plain formula compiled by ``torch.compile``; Inductor fuses forward and
      backward into one loop each (C++ on CPU, Triton on GPU). The first call compiles a graph for
      its shape (seconds), the first new shape a dynamic graph that later sizes reuse. For eager
      models on CPU.
    - ``"triton"``: ndpe's Triton kernel (q and k in one launch, float32 angles and arithmetic, float64 for
      float32 q/k; one rounding to x's dtype: within 1 ulp of a float64 reference); CUDA tensors (CPU tensors only
      under ``TRITON_INTERPRET=1``), raises otherwise. ``ndpe.kernels.qkv.rotary_qkv_`` rotates a packed qkv
      buffer in place on it.

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
    check_pairing(pairing)
    return _rotate_many(xs, cos, sin, pairing)


def _rotate_many(xs: tuple[Tensor, ...], cos: Tensor, sin: Tensor, pairing: str) -> tuple[Tensor, ...]:
    """:func:`apply_rotary_many` for a pairing already checked (a ``PosOut``'s, checked when it was built)."""
    rot_dim = 2 * cos.shape[-1]
    for x in xs:
        if rot_dim > x.shape[-1]:
            raise ValueError(f"rotation needs {rot_dim} channels but x has head_dim {x.shape[-1]}; "
                             f"build the encoding with dim = heads * head_dim of this attention")
    if len({x.dtype for x in xs}) > 1:
        return tuple(_rotate_many((x,), cos, sin, pairing)[0] for x in xs)
    if torch.compiler.is_compiling():  # plain formula: Inductor fuses it into one kernel
        return _rotate_reference_many(xs, cos.to(xs[0].dtype), sin.to(xs[0].dtype), pairing)
    kernel = _kernel
    if kernel == "compile":
        return compile_kernel.compiled(_rotate_reference_many)(xs, cos.to(xs[0].dtype), sin.to(xs[0].dtype), pairing)
    fused = kernel == "triton"
    if fused:
        from .kernels import triton as triton_kernel
        if not triton_kernel.available(*xs):
            raise RuntimeError("set_rotary_kernel('triton') needs Triton and q/k as CUDA tensors of float32/float16/"
                               f"bfloat16 with unit channel stride; got {xs[0].device} {xs[0].dtype} tensors "
                               "(use 'auto', 'eager' or 'compile')")
        if cos.device != xs[0].device:
            cos, sin = cos.to(xs[0].device), sin.to(xs[0].device)
    if torch.is_grad_enabled() and (cos.requires_grad or sin.requires_grad or any(x.requires_grad for x in xs)):
        learned = angles.source(cos, sin) if cos.requires_grad else None  # rope-mixed's: the angles' gradient fused
        if learned is not None:
            return angles.MixedRotary.apply(*learned, cos.detach(), sin.detach(), pairing, fused, *xs)
        return Rotary.apply(cos, sin, pairing, fused, *xs)
    tables = eager.prepare(cos, sin, torch.float32 if fused else xs[0].dtype, pairing)  # cast and joined once a grid
    if fused:
        return triton_kernel.rotary(xs, tables.cos, tables.sin, pairing)
    return eager.rotate_many(xs, tables, views=True)


def _rotate_reference_many(xs: tuple[Tensor, ...], cos: Tensor, sin: Tensor, pairing: str) -> tuple[Tensor, ...]:
    return tuple(rotate_reference(x, cos, sin, pairing) for x in xs)


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


def apply_qk(q: Tensor, k: Tensor, pos: PosOut | None) -> tuple[Tensor, Tensor]:
    """Rotate queries and keys ``(B, heads, T, head_dim)`` (or ``(B, T, head_dim)``) by the encoding's rotation, if any.

    The rotation's leading dims must broadcast to q's and k's without growing them (per-sample positions of
    another batch size, or another ``heads=``, are refused).

    Keys use ``pos.rot_k`` when set (xPos), else the queries' ``rot``; ``pos.rot_k`` may cover more tokens than
    ``rot`` (``k`` all the keys of a cache that holds them unrotated, ``q`` the new queries).
    New tensors are returned (q and k are not modified). q and k are rotated in one call:
    when they are same-shape views of one buffer (the usual split of a fused qkv projection)
    one pass reads both; with autograd, one node covers both.

    >>> q = k = torch.randn(2, 4, 6, 8)
    >>> angle = torch.arange(6.0)[:, None] * torch.tensor([1.0, 0.1])      # rotates 4 of 8 channels
    >>> pos = PosOut(rot=(angle.cos(), angle.sin()))
    >>> [t.shape for t in apply_qk(q, k, pos)]
    [torch.Size([2, 4, 6, 8]), torch.Size([2, 4, 6, 8])]
    """
    if pos is not None:
        check_pos(pos)
    return rotate_qk(q, k, pos)


def rotate_qk(q: Tensor, k: Tensor, pos: PosOut | None) -> tuple[Tensor, Tensor]:
    """:func:`apply_qk` of a ``pos`` already known to be a ``PosOut`` (``ndpe.Attention`` checks it once a call):
    only how the encoding meets ``q`` and ``k`` is checked (tokens, heads, batch, head_dim)."""
    acts = () if pos is None else acting(type(pos), "qk")
    if pos is None or (pos.rot is None and not acts
                       and all(getattr(pos, name) is None for name, _ in acting(type(pos), "qkvo"))):
        return q, k
    check_float_tensor(q, "q")
    check_float_tensor(k, "k")
    if pos.rot is not None:
        q, k = _rotate_qk(q, k, pos)
    for name, act in acts:  # fields declared with an act of their own, after the rotation
        if getattr(pos, name) is not None:
            q, k = act(q, k, getattr(pos, name))
    return transform_heads(q, pos, "q"), transform_heads(k, pos, "k")


def apply_v(v: Tensor, pos: PosOut | None) -> Tensor:
    """The values ``(B, heads, T, head_dim)`` as attention takes them: transformed per token by the encoding's fields
    that act on them (``frame``: ``D^-1 v``, GTA / PRoPE), else ``v`` itself. Call it before a KV cache stores them.

    >>> v = torch.randn(1, 2, 5, 8)
    >>> apply_v(v, PosOut(frame=(torch.zeros(5, 32), torch.zeros(5, 32)))).equal(v)   # the identity frame
    True
    """
    if pos is not None:
        check_pos(pos)
    return transform_heads(v, pos, "v")


def apply_out(out: Tensor, pos: PosOut | None) -> Tensor:
    """Attention's output ``(B, heads, T, head_dim)`` (before the heads are merged) transformed per query token by the
    encoding's fields that act on it (``frame``: ``D o``, undoing ``apply_v``'s ``D^-1``), else ``out`` itself."""
    if pos is not None:
        check_pos(pos)
    return transform_heads(out, pos, "out")


def transform_heads(t: Tensor, pos: PosOut | None, which: str) -> Tensor:
    """``t`` (``which``: ``"q"``, ``"k"``, ``"v"`` or ``"out"``) through every field of ``pos`` declared with
    ``stage="qkvo"`` (:class:`~ndpe.fields.Field`), after checking that the field covers ``t``'s tokens and heads."""
    if pos is None:
        return t
    for name, act in acting(type(pos), "qkvo"):
        value = getattr(pos, name)
        if value is None:
            continue
        check_float_tensor(t, which)
        first = value[0] if isinstance(value, tuple) else value
        check_token_count(t, first.shape[-2], pos.num_prefix, which, ("B", "heads", "T", "head_dim")[-t.dim():])
        check_leading(first.shape[:-2], t, name)
        t = act(t, value, which)
    return t


def _rotate_qk(q: Tensor, k: Tensor, pos: PosOut) -> tuple[Tensor, Tensor]:
    rot = cast("tuple[Tensor, Tensor]", pos.rot)
    rot_k = pos.rot_k or rot
    if q.dim() not in (3, 4) or k.dim() != q.dim():
        raise ValueError(f"apply_qk takes q and k of shape (B, heads, T, head_dim) (or (B, T, head_dim), one head); "
                         f"got q {tuple(q.shape)}, k {tuple(k.shape)}")
    if q.shape[0] != k.shape[0]:
        raise ValueError(f"q has batch {q.shape[0]} but k has batch {k.shape[0]}")
    cos, sin = rot
    compiling = torch.compiler.is_compiling()
    key = None if compiling else (id(pos), q.shape, k.shape)
    if compiling or _CHECKED.get(key) is not pos:  # once a forward: every block after the first meets the same shapes
        layout = ("B", "heads", "T", "head_dim") if q.dim() == 4 else ("B", "T", "head_dim")
        check_token_count(q, cos.shape[-2], pos.num_prefix, "q", layout)  # first: a swapped layout is no heads mismatch
        check_token_count(k, rot_k[0].shape[-2], pos.num_prefix, "k", layout)
        check_leading(cos.shape[:-2], q, "rotation")
        check_leading(rot_k[0].shape[:-2], k, "rotation")
        if not compiling:
            _CHECKED[key] = pos  # holds pos: its id is not reused while the entry lives
            if len(_CHECKED) > 16:
                del _CHECKED[next(iter(_CHECKED))]
    if pos.basis is not None:  # a learned orthogonal change of basis first (STRING): one matmul each
        q, k = change_basis(q, pos.basis), change_basis(k, pos.basis)
    if pos.rot_k is not None:
        return _rotate_many((q,), cos, sin, pos.pairing)[0], _rotate_many((k,), *rot_k, pos.pairing)[0]
    q, k = _rotate_many((q, k), cos, sin, pos.pairing)
    return q, k


def change_basis(x: Tensor, basis: Tensor) -> Tensor:
    """``x`` ``(B, heads, T, d)`` (or ``(B, T, d)``) with its first ``d_b`` channels multiplied by ``basis``
    ``(*, d_b, d_b)`` (row vectors: ``x[..., :d_b] @ basis``), the rest unchanged."""
    d_b = basis.shape[-1]
    if d_b > x.shape[-1]:
        raise ValueError(f"the encoding's basis covers {d_b} channels but q / k have head_dim {x.shape[-1]}")
    check_leading(basis.shape[:-2], x, "basis")
    head = x[..., :d_b] @ basis.to(x.dtype)  # (B, heads, T, d_b) @ (heads | 1, d_b, d_b): the heads broadcast
    return head if d_b == x.shape[-1] else torch.cat([head, x[..., d_b:]], dim=-1)
