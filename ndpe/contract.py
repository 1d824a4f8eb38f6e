"""The one contract between encodings and models: :class:`PosOut` and the three ways to apply it.

Every kind returns a ``PosOut`` from ``pe(grid_shape, num_prefix=...)``. Fields cover all
``P + N`` tokens (``P = num_prefix`` cls/register tokens first, then ``N`` grid tokens in
row-major ``ij`` order); prefix tokens get the identity (zero add, zero cat, no rotation,
zero bias), so a model applies a ``PosOut`` without slicing or branching on the kind::

    pos = pe(grid_shape, num_prefix=1, dtype=x.dtype)   # once per forward
    x = ndpe.apply_tokens(x, pos)                       # add / concat
    q, k = ndpe.apply_qk(q, k, pos)                     # rotate (inside attention)
    mask = ndpe.attn_bias(pos)                          # additive logits bias or None
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace

import torch
import torch.utils._pytree as pytree
from torch import Tensor

from .checks import check_float_dtype, check_float_tensor, check_pairing
from .functional import apply_rotary_many



@dataclass(frozen=True)
class PosOut:
    """What an encoding does to a model; every field optional.

    Shapes (``T = P + N`` tokens, leading ``*`` broadcastable to the batch or ``(B, heads)``):
        add:  ``(*, T, dim)``            added to token embeddings
        cat:  ``(*, T, cat_dim)``        concatenated to token embeddings
        rot:  ``(cos, sin)`` each ``(*, T, rot_dim // 2)``; ``*`` broadcasts to ``(B, heads)``
        bias: ``(*, T, T)``              added to attention logits; ``*`` broadcasts to ``(B, heads)``
        pairing: RoPE channel pairing, ``"half"`` (x[i], x[i + rot_dim/2]) or ``"interleaved"``
            (x[2i], x[2i+1]); channels past ``rot_dim`` are not rotated.
        num_prefix: leading tokens left unencoded (already included in ``T``).
    """

    add: Tensor | None = None
    cat: Tensor | None = None
    rot: tuple[Tensor, Tensor] | None = None
    bias: Tensor | None = None
    pairing: str = "half"
    num_prefix: int = 0

    def __post_init__(self) -> None:
        check_pairing(self.pairing)

    @property
    def num_tokens(self) -> int:
        for t in (self.add, self.cat, self.bias):
            if t is not None:
                return t.shape[-2]
        if self.rot is not None:
            return self.rot[0].shape[-2]
        raise ValueError("an empty PosOut has no token count")

    def to(self, dtype: torch.dtype) -> "PosOut":
        """Cast every tensor to ``dtype`` (angles were already computed in float32)."""
        check_float_dtype(dtype)
        cast = {f.name: _cast(getattr(self, f.name), dtype) for f in fields(self) if f.name in ("add", "cat", "rot", "bias")}
        return replace(self, **cast)


def _flatten(out: PosOut):
    return [out.add, out.cat, out.rot, out.bias], (out.pairing, out.num_prefix)


def _unflatten(children, context) -> PosOut:
    add, cat, rot, bias = children
    return PosOut(add=add, cat=cat, rot=None if rot is None else tuple(rot), bias=bias,
                  pairing=context[0], num_prefix=context[1])


# A pytree node, so PosOut can cross torch.compile / torch.export boundaries.
pytree.register_pytree_node(PosOut, _flatten, _unflatten, serialized_type_name="ndpe.PosOut",
                            flatten_with_keys_fn=lambda o: ([(pytree.GetAttrKey(k), v) for k, v in
                                                             zip(("add", "cat", "rot", "bias"), _flatten(o)[0])],
                                                            _flatten(o)[1]))


def _cast(value, dtype):
    if value is None:
        return None
    if isinstance(value, tuple):
        return tuple(v.to(dtype) for v in value)
    return value.to(dtype)


def merge(*outs: PosOut) -> PosOut:
    """Combine encodings: adds and biases sum, cats concatenate, at most one rotation.

    >>> a = PosOut(add=torch.ones(4, 8)); b = PosOut(bias=torch.zeros(2, 4, 4))
    >>> m = merge(a, b); (m.add.shape, m.bias.shape)
    (torch.Size([4, 8]), torch.Size([2, 4, 4]))
    """
    if not outs:
        raise ValueError("merge() needs at least one PosOut")
    prefixes = {o.num_prefix for o in outs}
    if len(prefixes) != 1:
        raise ValueError(f"cannot merge PosOuts with different num_prefix {sorted(prefixes)}")
    rots = [o for o in outs if o.rot is not None]
    if len(rots) > 1:
        raise ValueError("cannot merge two rotary encodings: rotate q and k with one of them")

    def total(name):
        ts = [getattr(o, name) for o in outs if getattr(o, name) is not None]
        return None if not ts else sum(ts[1:], ts[0])

    cats = [o.cat for o in outs if o.cat is not None]
    if cats:  # batched and unbatched outputs: broadcast the leading dims, as add and bias do
        lead = torch.broadcast_shapes(*(c.shape[:-1] for c in cats))
        cats = [c.expand(*lead, c.shape[-1]) for c in cats]
    return PosOut(
        add=total("add"),
        cat=torch.cat(cats, dim=-1) if cats else None,
        rot=rots[0].rot if rots else None,
        bias=total("bias"),
        pairing=rots[0].pairing if rots else "half",
        num_prefix=prefixes.pop(),
    )


def apply_tokens(x: Tensor, pos: PosOut | None) -> Tensor:
    """Add and/or concatenate the encoding to tokens ``x`` of shape ``(B, T, C)``.

    With a ``cat`` field the result has ``C + cat_dim`` channels.
    """
    if pos is None:
        return x
    _check_pos(pos)
    check_float_tensor(x, "tokens x")
    if pos.add is not None:
        _check_tokens(x, pos.add, "add")
        x = x + pos.add.to(x.dtype)
    if pos.cat is not None:
        _check_tokens(x, pos.cat, "cat")
        cat = pos.cat.to(x.dtype).expand(*x.shape[:-1], pos.cat.shape[-1])
        x = torch.cat([x, cat], dim=-1)
    return x


def apply_qk(q: Tensor, k: Tensor, pos: PosOut | None) -> tuple[Tensor, Tensor]:
    """Rotate queries and keys ``(B, heads, T, head_dim)`` by the encoding's rotation, if any.

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
        _check_pos(pos)
    if pos is None or pos.rot is None:
        return q, k
    check_float_tensor(q, "q")
    check_float_tensor(k, "k")
    cos, sin = pos.rot
    if q.shape[-2] != cos.shape[-2]:
        raise ValueError(f"q has {q.shape[-2]} tokens but the encoding covers {cos.shape[-2]} (grid + prefix)")
    if k.shape[-2] != cos.shape[-2]:
        raise ValueError(f"k has {k.shape[-2]} tokens but the encoding covers {cos.shape[-2]} (grid + prefix)")
    q, k = apply_rotary_many((q, k), cos, sin, pos.pairing)
    return q, k


def attn_bias(pos: PosOut | None, dtype: torch.dtype | None = None) -> Tensor | None:
    """The additive attention-logit bias to hand to SDPA as ``attn_mask``, or None.

    A per-head ``(heads, T, T)`` bias comes back as the view ``(1, heads, T, T)``: SDPA's fused CPU
    kernel takes 2-D and 4-D masks only and falls back to the unfused math path (2-3x slower at
    T = 1024, with an extra ``B x heads x T x T`` buffer) for a 3-D one.

    >>> attn_bias(PosOut(bias=torch.zeros(4, 9, 9))).shape
    torch.Size([1, 4, 9, 9])
    """
    check_float_dtype(dtype)
    if pos is not None:
        _check_pos(pos)
    if pos is None or pos.bias is None:
        return None
    bias = pos.bias if dtype is None else pos.bias.to(dtype)
    return bias.unsqueeze(0) if bias.dim() == 3 else bias


def _check_pos(pos) -> None:
    if not isinstance(pos, PosOut):
        raise TypeError(f"pos must be an ndpe.PosOut (what pe(grid_shape) returns) or None, got {type(pos).__name__}")


def _check_tokens(x: Tensor, t: Tensor, name: str) -> None:
    if x.shape[-2] != t.shape[-2]:
        raise ValueError(f"tokens have length {x.shape[-2]} but the encoding's {name} covers {t.shape[-2]} (grid + prefix)")
    if name == "add" and x.shape[-1] != t.shape[-1]:
        raise ValueError(f"tokens have {x.shape[-1]} channels but the encoding adds {t.shape[-1]}; build it with dim={x.shape[-1]}")
