"""The one contract between encodings and models: :class:`PosOut` and the three ways to apply it.

Every kind returns a ``PosOut`` from ``pe(grid_shape, num_prefix=...)``. Fields cover all
``P + N`` tokens (``P = num_prefix`` cls/register tokens first, then ``N`` grid tokens in
row-major ``ij`` order); prefix tokens get the identity (zero add, zero cat, no rotation,
zero bias), so a model applies a ``PosOut`` without slicing or branching on the kind::

    pos = pe(grid_shape, num_prefix=1, dtype=x.dtype)   # once per forward
    x = ndpe.apply_tokens(x, pos)                       # add / concat
    q, k = ndpe.apply_qk(q, k, pos)                     # rotate (inside attention)
    mask = ndpe.attn_bias(pos, q=q, k=k)                # additive logits term or None

Most kinds are data computed from positions alone (add, cat, rot, bias). Content-dependent kinds carry a
function instead: ``logits`` (a term of the attention logits computed from q and k: CoPE, Transformer-XL)
and ``tokens`` (a function of the token embeddings: complex word-order embeddings); ``rot_k`` lets keys
rotate differently from queries (xPos). The apply functions call them, so a model still never branches.

``apply_tokens`` and ``attn_bias`` live here; ``apply_qk`` lives in :mod:`ndpe.functional` beside the rotation
kernels it dispatches to, so this module (a data type) imports no kernel.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, fields, replace
from typing import Callable, Sequence, cast

import torch
import torch.nn.functional as F
import torch.utils._pytree as pytree
from torch import Tensor

from .checks import check_float_dtype, check_float_tensor, check_int, check_pairing



@dataclass(frozen=True)
class LogitsTerm:
    """A term of the attention logits computed from queries and keys (content-dependent kinds).

    ``fn(q, k)`` takes the grid tokens' queries ``(B, heads, Nq, head_dim)`` and keys ``(B, heads, Nk, head_dim)``
    as attention sees them (after :func:`apply_qk`) and returns the float32 term ``(B | 1, heads, Nq, Nk)`` that
    is added to SDPA's logits ``q.k / sqrt(head_dim)``. Calling the term with all tokens pads the prefix rows
    (``q_prefix``) and columns (``k_prefix``) with zeros, as for a bias. ``causal_only``: the term is defined
    for causal attention only (CoPE's gates count keys up to the query).

    ``uses_states``: the term also reads the token states ``x`` ``(B, T, C)``, what the attention layer
    receives (data-dependent ALiBi's forget gates); ``fn(q, k, x)`` then gets the grid tokens' states.
    ``ndpe.Attention`` passes them; a caller of :func:`attn_bias` passes ``x=``.
    """

    fn: Callable[..., Tensor]
    causal_only: bool = False
    q_prefix: int = 0
    k_prefix: int = 0
    uses_states: bool = False

    def __call__(self, q: Tensor, k: Tensor, x: Tensor | None = None) -> Tensor:
        check_float_tensor(q, "q")
        check_float_tensor(k, "k")
        pq, pk = self.q_prefix, self.k_prefix
        if not self.uses_states:
            term = self.fn(q[..., pq:, :], k[..., pk:, :])
        else:
            if x is None:
                raise ValueError("this encoding's logits read the token states: pass x= (B, T, C), the tokens the "
                                 "attention layer receives (ndpe.Attention does)")
            check_float_tensor(x, "x")
            term = self.fn(q[..., pq:, :], k[..., pk:, :], x[..., pq:, :])
        return F.pad(term, (pk, 0, pq, 0)) if pq or pk else term


@dataclass(frozen=True)
class TokenTerm:
    """A function of the token embeddings (kinds that transform tokens rather than add to them).

    ``fn(x)`` maps the grid tokens ``(B, N, C)`` to ``(B, N, C)``; the ``num_prefix`` leading tokens pass through.
    """

    fn: Callable[[Tensor], Tensor]
    num_prefix: int = 0

    def __call__(self, x: Tensor) -> Tensor:
        p = self.num_prefix
        return torch.cat([x[..., :p, :], self.fn(x[..., p:, :])], dim=-2) if p else self.fn(x)


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
        rot_k: the keys' ``(cos, sin)`` when they differ from the queries' ``rot`` (xPos scales q and k
            inversely); shapes as ``rot``.
        basis: ``(*, d_b, d_b)`` orthogonal, ``*`` broadcast to ``(B, heads)``: a change of basis of the first ``d_b``
            channels applied to q and k before ``rot`` (``q[..., :d_b] @ basis``), for rotations that are pairwise
            only in a learned basis (STRING: RoPE composed with a learned orthogonal matrix). Orthogonal, so it
            leaves ``q . k`` of unrotated (prefix) tokens unchanged.
        logits: :class:`LogitsTerm`, a term of the logits computed from q and k (``attn_bias(pos, q=q, k=k)``).
        tokens: :class:`TokenTerm`, a function of the token embeddings (``apply_tokens`` calls it first).
        past: the number of keys a KV cache must hold before these tokens: ``P + p`` for
            ``pe((n,), num_prefix=P, past=p)`` (the prefix is cached first), 0 outside decoding.
            :class:`ndpe.Attention` refuses a cache of another length, so a forgotten or stale
            ``past=`` is an error rather than positions silently off by the cache length.

    Pairwise fields (``bias``, ``logits``) cover queries x keys; in KV-cache decoding
    (``pe((n,), past=p)``) those are ``n`` new queries against ``p + n`` keys, while the per-token fields
    cover the ``n`` new tokens.
    """

    add: Tensor | None = None
    cat: Tensor | None = None
    rot: tuple[Tensor, Tensor] | None = None
    bias: Tensor | None = None
    pairing: str = "half"
    num_prefix: int = 0
    rot_k: tuple[Tensor, Tensor] | None = None
    logits: LogitsTerm | None = None
    tokens: TokenTerm | None = None
    past: int = 0
    basis: Tensor | None = None

    def __post_init__(self) -> None:
        check_pairing(self.pairing)
        check_int(self.past, "PosOut.past", low=0)
        if self.rot_k is not None and self.rot is None:
            raise ValueError("PosOut.rot_k (the keys' rotation) needs rot (the queries' rotation)")
        if self.basis is not None and (self.rot is None or self.basis.dim() < 2 or self.basis.shape[-1] != self.basis.shape[-2]
                                       or self.basis.shape[-1] < 2 * self.rot[0].shape[-1]):
            raise ValueError("PosOut.basis must be a square (*, d_b, d_b) change of basis of at least the rot_dim rotated "
                             "channels, given with rot")

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
        cast = {f.name: _cast(getattr(self, f.name), dtype) for f in fields(self) if f.name in _TENSOR_FIELDS}
        return replace(self, **cast)


_TENSOR_FIELDS = ("add", "cat", "rot", "bias", "rot_k", "basis")


def _flatten(out: PosOut):
    return [getattr(out, f) for f in _TENSOR_FIELDS], (out.pairing, out.num_prefix, out.logits, out.tokens, out.past)


def _unflatten(children, context) -> PosOut:
    add, cat, rot, bias, rot_k, basis = children
    return PosOut(add=add, cat=cat, rot=None if rot is None else tuple(rot), bias=bias, pairing=context[0],
                  num_prefix=context[1], rot_k=None if rot_k is None else tuple(rot_k), logits=context[2],
                  tokens=context[3], past=context[4], basis=basis)


# A pytree node, so PosOut can cross torch.compile / torch.export boundaries (the functions of content-dependent
# kinds travel in the context, as code does).
pytree.register_pytree_node(PosOut, _flatten, _unflatten, serialized_type_name="ndpe.PosOut",
                            flatten_with_keys_fn=lambda o: ([(pytree.GetAttrKey(k), v) for k, v in
                                                             zip(_TENSOR_FIELDS, _flatten(o)[0])],
                                                            _flatten(o)[1]))


def _has_tensors(out: PosOut) -> bool:
    return any(getattr(out, f) is not None for f in _TENSOR_FIELDS)


def _cast(value, dtype):
    if value is None:
        return None
    if isinstance(value, tuple):
        return tuple(v.to(dtype) for v in value)
    return value.to(dtype)


def merge(*outs: PosOut) -> PosOut:
    """Combine encodings: adds and biases sum, cats concatenate, at most one rotation, logits and tokens term.

    >>> a = PosOut(add=torch.ones(4, 8)); b = PosOut(bias=torch.zeros(2, 4, 4))
    >>> m = merge(a, b); (m.add.shape, m.bias.shape)
    (torch.Size([4, 8]), torch.Size([2, 4, 4]))
    """
    if not outs:
        raise ValueError("merge() needs at least one PosOut")
    for o in outs:
        check_pos(o)
    prefixes = {o.num_prefix for o in outs}
    if len(prefixes) != 1:
        raise ValueError(f"cannot merge PosOuts with different num_prefix {sorted(prefixes)}")
    pasts = {o.past for o in outs}
    if len(pasts) != 1:
        raise ValueError(f"cannot merge PosOuts built for different KV-cache lengths past={sorted(pasts)}: "
                         "encode every part with the same past=")
    tokens = {o.num_tokens for o in outs if _has_tensors(o)}
    if len(tokens) > 1:
        raise ValueError(f"cannot merge PosOuts covering different token counts {sorted(tokens)}: "
                         "encode every part for the same grid and num_prefix")
    rots = [o for o in outs if o.rot is not None]
    if len(rots) > 1:
        raise ValueError("cannot merge two rotary encodings: rotate q and k with one of them")
    for name in ("logits", "tokens"):
        if sum(getattr(o, name) is not None for o in outs) > 1:
            raise ValueError(f"cannot merge two encodings with a {name} term (content-dependent kinds): use one of them")

    def total(name):
        ts = [getattr(o, name) for o in outs if getattr(o, name) is not None]
        if not ts:
            return None
        try:
            torch.broadcast_shapes(*(t.shape for t in ts))
        except RuntimeError:
            what = " (heads, queries, keys)" if name == "bias" else " (tokens, channels)"
            raise ValueError(f"cannot merge the {name} fields of shapes {[tuple(t.shape) for t in ts]}: they do not "
                             f"broadcast{what}; build every encoding with the same dim and heads") from None
        return sum(ts[1:], ts[0])

    cats = [o.cat for o in outs if o.cat is not None]
    if cats:  # batched and unbatched outputs: broadcast the leading dims, as add and bias do
        try:
            lead = torch.broadcast_shapes(*(c.shape[:-1] for c in cats))
        except RuntimeError:
            raise ValueError(f"cannot merge the cat fields of shapes {[tuple(c.shape) for c in cats]}: their leading "
                             "(batch, tokens) dims do not broadcast") from None
        cats = [c.expand(*lead, c.shape[-1]) for c in cats]
    return PosOut(
        add=total("add"),
        cat=torch.cat(cats, dim=-1) if cats else None,
        rot=rots[0].rot if rots else None,
        bias=total("bias"),
        pairing=rots[0].pairing if rots else "half",
        num_prefix=prefixes.pop(),
        rot_k=rots[0].rot_k if rots else None,
        basis=rots[0].basis if rots else None,
        logits=next((o.logits for o in outs if o.logits is not None), None),
        tokens=next((o.tokens for o in outs if o.tokens is not None), None),
        past=pasts.pop(),
    )


def pack(outs: Sequence[PosOut], sizes: Sequence[int] | None = None, *,
         device: torch.device | str | None = None) -> PosOut:
    """One ``PosOut`` for samples packed into one sequence (NaViT's Patch n' Pack, packed documents): each sample's
    tokens (its prefix first) follow the previous sample's, positions restart per sample, and no token attends
    outside its sample.

    Per-token fields (``add``, ``cat``, ``rot``, ``rot_k``) are concatenated along the tokens; ``bias`` is
    block-diagonal, each sample's own bias (or 0) on its block and ``-inf`` elsewhere, so it is also the mask
    that keeps attention inside each sample (a ``(T, T)`` tensor for ``T`` packed tokens, even for kinds with no
    bias of their own); a ``logits`` or ``tokens`` term is applied per sample. Attention over the packed sequence
    then equals attention over each sample alone (``tests/test_packed.py``). Each ``outs[i]`` is what
    ``pe(grid_shapes[i], num_prefix=P)`` returns (:meth:`ndpe.Encoding.packed` builds them); ``sizes``: the
    samples' token counts, needed only where a ``PosOut`` has no tensor to count (``kind="none"``; ``device``: where
    its mask goes); not for decoding.

    >>> a, b = PosOut(add=torch.ones(2, 8)), PosOut(add=torch.zeros(3, 8))
    >>> p = pack([a, b]); p.add.shape, p.bias.shape, p.bias[0, 2].item()
    (torch.Size([5, 8]), torch.Size([5, 5]), -inf)
    """
    if isinstance(outs, PosOut) or not isinstance(outs, (list, tuple)) or not outs:
        raise TypeError(f"pack() takes a non-empty list of PosOut (one per sample), got {type(outs).__name__}")
    for o in outs:
        check_pos(o)
        if o.past:
            raise ValueError("pack() is for whole samples: a PosOut built for KV-cache decoding (past > 0) cannot be "
                             "packed")
    present = {name: [getattr(o, name) is not None for o in outs] for name in ("add", "cat", "rot", "rot_k", "bias",
                                                                               "logits", "tokens")}
    mixed = [name for name, flags in present.items() if any(flags) and not all(flags)]
    if mixed or len({o.pairing for o in outs}) > 1:
        raise ValueError(f"pack() needs the outputs of one encoding: fields {mixed} or the pairing differ between "
                         "samples")
    counted = [o.num_tokens if _has_tensors(o) else None for o in outs]
    if sizes is not None:
        size_list = [check_int(n, "pack sizes", low=1) for n in sizes]
        if len(size_list) != len(outs) or any(c is not None and c != n for c, n in zip(counted, size_list)):
            raise ValueError(f"pack() sizes {list(sizes)} do not match the samples' token counts {counted}")
    elif None in counted:
        raise ValueError("pack() needs each sample's token count: a PosOut with no tensor field has none; pass "
                         "sizes= (pe.packed() does)")
    else:
        size_list = cast("list[int]", counted)

    def cat_tokens(ts: list[Tensor]) -> Tensor:
        lead = torch.broadcast_shapes(*(t.shape[:-2] for t in ts))
        return torch.cat([t.expand(*lead, *t.shape[-2:]) for t in ts], dim=-2)

    def cat_rot(name: str):
        pairs = [getattr(o, name) for o in outs]
        return None if pairs[0] is None else (cat_tokens([p[0] for p in pairs]), cat_tokens([p[1] for p in pairs]))

    ref = outs[0]
    total = sum(size_list)
    biases = [o.bias for o in outs]
    lead = torch.broadcast_shapes(*(b.shape[:-2] for b in biases)) if biases[0] is not None else ()
    device = next((t.device for o in outs for t in _tensors(o)), device)
    dtype = biases[0].dtype if biases[0] is not None else torch.float32
    bias = torch.full((*lead, total, total), float("-inf"), device=device, dtype=dtype)
    start = 0
    for o, n in zip(outs, size_list):
        bias[..., start:start + n, start:start + n] = 0.0 if o.bias is None else o.bias
        start += n
    logits = None
    if ref.logits is not None:
        terms = [cast(LogitsTerm, o.logits) for o in outs]
        uses = any(t.uses_states for t in terms)
        logits = LogitsTerm(functools.partial(_packed_logits, terms, size_list),
                            causal_only=any(t.causal_only for t in terms), uses_states=uses)
    tokens = None
    if ref.tokens is not None:
        tokens = TokenTerm(functools.partial(_packed_tokens, [cast(TokenTerm, o.tokens) for o in outs], size_list))
    return PosOut(add=None if ref.add is None else cat_tokens([cast(Tensor, o.add) for o in outs]),
                  cat=None if ref.cat is None else cat_tokens([cast(Tensor, o.cat) for o in outs]),
                  rot=cat_rot("rot"), rot_k=cat_rot("rot_k"), bias=bias, pairing=ref.pairing, logits=logits,
                  tokens=tokens, basis=ref.basis)


def _tensors(out: PosOut):
    for name in _TENSOR_FIELDS:
        value = getattr(out, name)
        if isinstance(value, tuple):
            yield from value
        elif value is not None:
            yield value


def _packed_logits(terms: list[LogitsTerm], sizes: list[int], q: Tensor, k: Tensor, x: Tensor | None = None) -> Tensor:
    """Each sample's logits term on its block, 0 elsewhere (the packed bias masks those)."""
    out = q.new_zeros(*torch.broadcast_shapes(q.shape[:-2], k.shape[:-2]), q.shape[-2], k.shape[-2], dtype=torch.float32)
    start = 0
    for term, n in zip(terms, sizes):
        states = None if x is None else x[..., start:start + n, :]
        block = term(q[..., start:start + n, :], k[..., start:start + n, :], states)
        out[..., start:start + n, start:start + n] = block
        start += n
    return out


def _packed_tokens(terms: list[TokenTerm], sizes: list[int], x: Tensor) -> Tensor:
    return torch.cat([term(part) for term, part in zip(terms, x.split(sizes, dim=-2))], dim=-2)


def apply_tokens(x: Tensor, pos: PosOut | None) -> Tensor:
    """Transform, add and/or concatenate the encoding to tokens ``x`` of shape ``(B, T, C)``.

    A ``tokens`` term is applied first, then ``add``; with a ``cat`` field the result has ``C + cat_dim`` channels.
    """
    if pos is None:
        return x
    check_pos(pos)
    check_float_tensor(x, "tokens x")
    if pos.tokens is not None:
        x = pos.tokens(x)
    if pos.add is not None:
        _check_tokens(x, pos.add, "add")
        x = x + pos.add.to(x.dtype)
    if pos.cat is not None:
        _check_tokens(x, pos.cat, "cat")
        cat = pos.cat.to(x.dtype).expand(*x.shape[:-1], pos.cat.shape[-1])
        x = torch.cat([x, cat], dim=-1)
    return x


def attn_bias(pos: PosOut | None, dtype: torch.dtype | None = None, *, q: Tensor | None = None,
              k: Tensor | None = None, causal: bool | None = None, x: Tensor | None = None) -> Tensor | None:
    """The additive attention-logit term to hand to SDPA as ``attn_mask``, or None.

    It is ``pos.bias`` plus, for content-dependent kinds, ``pos.logits(q, k)`` (``q``, ``k``: the
    ``(B, heads, Tq, head_dim)`` / ``(B, heads, Tk, head_dim)`` tensors SDPA gets, after :func:`apply_qk`).
    ``causal``: whether the attention is causal; a term defined for causal attention only refuses ``False``.
    ``x``: the token states ``(B, T, C)`` the attention layer receives, for a term that reads them
    (``LogitsTerm.uses_states``: data-dependent ALiBi).

    A per-head ``(heads, T, T)`` bias comes back as the view ``(1, heads, T, T)``: SDPA's fused CPU
    kernel takes 2-D and 4-D masks only and falls back to the unfused math path (2-3x slower at
    T = 1024, with an extra ``B x heads x T x T`` buffer) for a 3-D one.

    >>> attn_bias(PosOut(bias=torch.zeros(4, 9, 9))).shape
    torch.Size([1, 4, 9, 9])
    """
    check_float_dtype(dtype)
    if pos is not None:
        check_pos(pos)
    if pos is None or (pos.bias is None and pos.logits is None):
        return None
    bias = pos.bias
    if bias is not None:
        bias = bias.unsqueeze(0) if bias.dim() == 3 else bias
    if pos.logits is not None:
        if q is None or k is None:
            raise ValueError("this encoding's logits depend on the queries and keys: call attn_bias(pos, q=q, k=k) "
                             "with the (B, heads, T, head_dim) tensors attention uses")
        if causal is False and pos.logits.causal_only:
            raise ValueError("this encoding is defined for causal attention only (e.g. CoPE counts keys up to the "
                             "query); use it with causal=True")
        term = pos.logits(q, k, x)
        bias = term if bias is None else bias + term
    assert bias is not None  # a bias or a logits term, checked above
    if q is not None:
        check_leading(bias.shape[:-2], q, "bias")
    return bias if dtype is None else bias.to(dtype)


def check_leading(lead: tuple[int, ...], x: Tensor, field: str) -> None:
    """Refuse an encoding field whose leading dims would broadcast ``x`` ``(B, heads, T, head_dim)`` to a larger
    batch or more heads (per-sample positions of another batch size, another ``heads=``)."""
    have = tuple(x.shape[:-2])
    lead = tuple(lead)
    if len(have) == 2 and len(lead) >= 1 and lead[-1] not in (1, have[-1]):
        raise ValueError(f"the encoding's {field} has {lead[-1]} heads but the attention has heads={have[-1]}; "
                         f"build the encoding with heads={have[-1]}")
    if len(lead) > len(have) or any(a != 1 and a != b for a, b in zip(reversed(lead), reversed(have))):
        raise ValueError(f"the encoding's {field} has leading dims {lead} (batch, heads) but the attention's tensors "
                         f"are {have} (batch, heads): per-sample positions of another batch size?")


def check_pos(pos) -> None:
    """Refuse anything but a :class:`PosOut` where an apply function takes one."""
    if not isinstance(pos, PosOut):
        raise TypeError(f"pos must be an ndpe.PosOut (what pe(grid_shape) returns) or None, got {type(pos).__name__}")


def _check_tokens(x: Tensor, t: Tensor, name: str) -> None:
    if x.shape[-2] != t.shape[-2]:
        raise ValueError(f"tokens have length {x.shape[-2]} but the encoding's {name} covers {t.shape[-2]} (grid + prefix)")
    if name == "add" and x.shape[-1] != t.shape[-1]:
        raise ValueError(f"tokens have {x.shape[-1]} channels but the encoding adds {t.shape[-1]}; build it with dim={x.shape[-1]}")
