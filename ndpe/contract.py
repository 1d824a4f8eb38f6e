"""The one contract between encodings and models: :class:`PosOut` and the ways to apply it.

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

Each field is declared once, in :class:`PosOut`'s body, by a :class:`~ndpe.fields.Field`; prefix padding
(:func:`pad_prefix`), the dtype cast, the pytree, the cache's tensors (:func:`tensors`), :func:`merge` and, in
:mod:`ndpe.packing`, :func:`~ndpe.packing.pack` and :func:`~ndpe.packing.stack` read those declarations. A
``PosOut`` is checked when it is built (each tensor by its ``Field.check``); the apply functions check only how it
meets their tensors (:mod:`ndpe.layout`). ``apply_tokens`` and ``attn_bias`` live here; ``apply_qk`` lives in
:mod:`ndpe.functional` beside the rotation kernels it dispatches to, so this module (a data type) imports no kernel.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from .checks import check_float_dtype, check_float_tensor, check_int, check_pairing
from .fields import (Field, LogitsTerm, TokenTerm, acting, add_after_softmax, declare, declared, derive, each, parts,
                     register_pytree, specs, transform_frame)
from .layout import MAX_PREFIX_HINTED, check_leading, check_token_count, check_tokens  # noqa: F401  (re-exported)

__all__ = ["Field", "LogitsTerm", "PosOut", "TokenTerm", "apply_tokens", "attn_bias", "merge", "pad_prefix",
           "take_tokens"]

TOKENS, QK = ("batch",), ("batch", "heads")  # what leading dims broadcast to: tokens (B, T, C), q/k (B, heads, T, d)
_CONTENT = "(content-dependent kinds): use one of them"


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
            inversely); shapes as ``rot``, over the keys ``apply_qk`` meets (a decoder whose cache holds
            unrotated keys rotates all of them, ``rot`` only the new queries).
        basis: ``(*, d_b, d_b)`` orthogonal, ``*`` broadcast to ``(B, heads)``: a change of basis of the first ``d_b``
            channels applied to q and k before ``rot`` (``q[..., :d_b] @ basis``), for rotations that are pairwise
            only in a learned basis (STRING: RoPE composed with a learned orthogonal matrix). Orthogonal, so it
            leaves ``q . k`` of unrotated (prefix) tokens unchanged.
        prob_bias: ``(*, T, T)`` added to the attention probabilities after the softmax (eRPE); ``*`` broadcasts to
            ``(B, heads)``. Attention with it takes the explicit softmax path (:func:`ndpe.attend`).
        frame: ``(D - I, D^-1 - I)``, each ``(*, T, 16 n)``: a per-token linear map ``D`` of each head's first ``4 n``
            channels in ``n`` 4 x 4 blocks (GTA, PRoPE: a camera's SE(3) or projective matrix, two 2D rotations),
            stored minus the identity so that 0 leaves a token alone. q becomes ``D^T q`` and k ``D^-1 k``
            (:func:`ndpe.apply_qk`, after ``rot``), v ``D^-1 v`` before attention (:func:`ndpe.apply_v`) and the
            output ``D o`` per query token (:func:`ndpe.apply_out`): ``q_i . k_j`` sees ``D_i D_j^-1`` alone.
        logits: :class:`LogitsTerm`, a term of the logits computed from q and k (``attn_bias(pos, q=q, k=k)``).
        tokens: :class:`TokenTerm`, a function of the token embeddings (``apply_tokens`` calls it first).
        past: the number of keys a KV cache must hold before these tokens: ``P + p`` for
            ``pe((n,), num_prefix=P, past=p)`` (the prefix is cached first), 0 outside decoding.
            :class:`ndpe.Attention` refuses a cache of another length, so a forgotten or stale
            ``past=`` is an error rather than positions silently off by the cache length.

    Pairwise fields (``bias``, ``prob_bias``, ``logits``) cover queries x keys; in KV-cache decoding
    (``pe((n,), past=p)``) those are ``n`` new queries against ``p + n`` keys, while the per-token fields
    cover the ``n`` new tokens.

    The constructor checks types, shapes and dtypes, never values (that would wait on the accelerator at every
    call): a ``PosOut`` built by hand with NaN in a field carries it. The kinds return finite fields or refuse
    their inputs in one line (``tests/test_finite.py``).

    Each field's declaration (its :class:`~ndpe.fields.Field`) says what it is per token, pair or head, its
    identity, and how it merges, packs and stacks; a subclass declaring one more field is carried by every
    operation (``tests/test_contract_fields.py``).
    """

    add: Tensor | None = declare(Field("token", TOKENS, merge="sum", acts="add"))
    cat: Tensor | None = declare(Field("token", TOKENS, merge="concat", acts="concat"))
    rot: tuple[Tensor, Tensor] | None = declare(Field(
        "token", QK, identity=(1.0, 0.0), acts="rotate q, k",
        refusal="cannot merge two rotary encodings: rotate q and k with one of them"))
    bias: Tensor | None = declare(Field("pair", QK, merge="sum", off_block=float("-inf"), acts="bias"))
    pairing: str = declare(Field("meta", merge="rot"), "half")
    num_prefix: int = declare(Field("meta", merge="same", per_sample=True,
                                    refusal="cannot merge PosOuts with different num_prefix {values}"), 0)
    rot_k: tuple[Tensor, Tensor] | None = declare(Field("token", QK, identity=(1.0, 0.0), merge="rot", keys=True,
                                                        acts="rotate q, k apart"))
    logits: LogitsTerm | None = declare(Field("term", QK, acts="logits from q, k",
                                              refusal=f"cannot merge two encodings with a logits term {_CONTENT}"))
    tokens: TokenTerm | None = declare(Field("term", TOKENS, acts="transforms tokens",
                                             refusal=f"cannot merge two encodings with a tokens term {_CONTENT}"))
    past: int = declare(Field("meta", merge="same", per_sample=True, refusal=(
        "cannot merge PosOuts built for different KV-cache lengths past={values}: encode every part with the same "
        "past=")), 0)
    basis: Tensor | None = declare(Field("whole", QK, merge="rot"))
    prob_bias: Tensor | None = declare(Field("pair", QK, merge="sum", acts="bias after softmax", stage="probs",
                                             act=add_after_softmax))
    frame: tuple[Tensor, Tensor] | None = declare(Field(
        "token", QK, identity=(0.0, 0.0), acts="transforms q, k, v, out", stage="qkvo", act=transform_frame,
        refusal="cannot merge two encodings with a frame (a per-token map of q, k, v): use one of them"))

    def __init_subclass__(cls, **kwargs: Any) -> None:  # a PosOut with more fields: its declarations, its pytree
        super().__init_subclass__(**kwargs)
        declared(cls, specs(cls.__mro__[1]))
        register_pytree(cls, f"{cls.__module__}.{cls.__qualname__}")

    def __post_init__(self) -> None:
        check_pairing(self.pairing)
        check_int(self.past, "PosOut.past", low=0)
        check_int(self.num_prefix, "PosOut.num_prefix", low=0)
        count = None
        for name, spec, _ in specs(type(self)):
            value = getattr(self, name)
            if value is not None and spec.is_tensor:
                spec.check(name, value)
                if spec.role != "whole" and not spec.keys:
                    n = parts(value)[0].shape[-2]
                    if count is not None and n != count:
                        raise ValueError(f"PosOut.{name} covers {n} tokens but the fields before it {count}: build "
                                         "every field for the same tokens (grid + prefix)")
                    count = n
            elif value is not None and spec.role == "term" and not callable(value):
                raise TypeError(f"PosOut.{name} must be a callable term, got {type(value).__name__}")
        if self.frame is not None and self.frame[0].shape[-1] % 16:
            raise ValueError(f"PosOut.frame holds 4 x 4 blocks per token, (*, T, 16 n): got width "
                             f"{self.frame[0].shape[-1]}, not a multiple of 16")
        if self.rot_k is not None and self.rot is None:
            raise ValueError("PosOut.rot_k (the keys' rotation) needs rot (the queries' rotation)")
        if self.basis is not None and (self.rot is None or self.basis.dim() < 2 or self.basis.shape[-1] != self.basis.shape[-2]
                                       or self.basis.shape[-1] < 2 * self.rot[0].shape[-1]):
            raise ValueError("PosOut.basis must be a square (*, d_b, d_b) change of basis of at least the rot_dim rotated "
                             "channels, given with rot")

    @property
    def num_tokens(self) -> int:
        """The tokens the fields cover (the queries of the pairwise ones)."""
        count = token_count(self)
        if count is None:
            raise ValueError("an empty PosOut has no token count")
        return count

    def to(self, dtype: torch.dtype) -> "PosOut":
        """Cast every tensor to ``dtype`` (angles were already computed in float32)."""
        check_float_dtype(dtype)
        return derive(type(self), {name: each(spec, value, lambda t, _: t.to(dtype)) if spec.is_tensor else value
                                   for name, spec, value in _items(self)})


def _items(out: PosOut):
    """``(name, Field, value)`` of every field of ``out``."""
    return ((name, spec, getattr(out, name)) for name, spec, _ in specs(type(out)))


def tensors(out: PosOut) -> tuple[Tensor, ...]:
    """Every tensor of ``out`` (the components of ``rot`` included), e.g. for the cache's version checks."""
    return tuple(t for _, spec, value in _items(out) if spec.is_tensor for t in parts(value))


def logit_fields(out: PosOut) -> list[str]:
    """The fields of ``out`` that add to the attention logits, as declared: set, and per query-key pair (``pair``: a
    bias) or a ``term`` meeting q and k (``logits``), and acting through no ``act`` of their own (``prob_bias`` acts
    after the softmax). :func:`attn_term` sums them; :mod:`ndpe.flex` reads them."""
    return [name for name, spec, value in _items(out) if value is not None and not spec.stage
            and (spec.role == "pair" or (spec.role == "term" and spec.lead == QK))]


def prob_fields(out: PosOut) -> list[str]:
    """The fields of ``out`` set that act on the attention probabilities after the softmax (declared with
    ``stage="probs"``: ``prob_bias``, eRPE), which SDPA's ``attn_mask`` cannot carry: :func:`ndpe.attend` applies them,
    :func:`attn_bias` and :mod:`ndpe.flex` refuse them."""
    return [name for name, _ in acting(type(out), "probs") if getattr(out, name) is not None]


def attention_fields(out: PosOut, tokens_too: bool = False) -> list[str]:
    """The fields of ``out`` that act in attention, as declared: set, and meeting q and k (a rotation, a bias, a
    logits term): what a model must hand every attention layer for exactly the tokens it encoded. ``tokens_too``:
    also those that act on the tokens (``add``, ``cat``, ``tokens``): every field that acts."""
    leads = (QK, TOKENS) if tokens_too else (QK,)
    return [name for name, spec, value in _items(out) if value is not None and spec.role != "meta" and spec.lead in leads]


def token_count(out: PosOut) -> int | None:
    """The tokens ``out``'s fields cover (the queries of the pairwise ones); None where no tensor counts them."""
    return next((parts(value)[0].shape[-2] for _, spec, value in _items(out)
                 if value is not None and spec.role in ("token", "pair") and not spec.keys), None)


declared(PosOut)
register_pytree(PosOut, "ndpe.PosOut")


def pad_prefix(out: PosOut, num_prefix: int, k_prefix: int | None = None) -> PosOut:
    """Extend every field over ``num_prefix`` leading tokens with its identity (0 add, no rotation, 0 bias).

    ``k_prefix`` (default ``num_prefix``): leading keys of the pairwise fields, when they differ from the
    queries' (decoding: the prefix is in the cache, so keys have it and the new queries do not).
    """
    p = num_prefix
    pk = p if k_prefix is None else k_prefix
    if p == 0 and pk == 0:
        return out
    pads = {"token": (0, 0, p, 0), "pair": (pk, 0, p, 0)}
    values = {}
    for name, spec, value in _items(out):
        if value is not None and spec.role in pads and (p or spec.role == "pair"):
            value = each(spec, value, lambda t, identity: F.pad(t, pads[spec.role], value=identity))
        elif value is not None and spec.role == "term":
            value = value.with_prefix(p, pk)
        values[name] = value
    return derive(type(out), {**values, "num_prefix": p})


def take_tokens(out: PosOut, index: Tensor) -> PosOut:
    """The tokens ``index`` ``(N,)`` of ``out`` (built without prefix), in that order: the rows of the token fields,
    the rows and columns of the pairwise ones; e.g. a 1D encoding of one axis spread over a grid's tokens.

    >>> take_tokens(PosOut(add=torch.arange(3.0)[:, None]), torch.tensor([0, 0, 2])).add.flatten()
    tensor([0., 0., 2.])
    """
    values = {}
    for name, spec, value in _items(out):
        if value is not None and spec.role == "term":
            raise ValueError(f"PosOut.{name} is a function of whole sequences: its tokens cannot be taken apart")
        if value is not None and spec.role == "token":
            value = each(spec, value, lambda t, _: t.index_select(-2, index))
        elif value is not None and spec.role == "pair":
            value = each(spec, value, lambda t, _: t.index_select(-2, index).index_select(-1, index))
        values[name] = value
    return derive(type(out), values)


def merge(*outs: PosOut) -> PosOut:
    """Combine encodings, each field as it declares: adds and biases sum, cats concatenate, at most one rotation,
    logits and tokens term.

    >>> a = PosOut(add=torch.ones(4, 8)); b = PosOut(bias=torch.zeros(2, 4, 4))
    >>> m = merge(a, b); (m.add.shape, m.bias.shape)
    (torch.Size([4, 8]), torch.Size([2, 4, 4]))
    """
    if not outs:
        raise ValueError("merge() needs at least one PosOut")
    for o in outs:
        check_pos(o)
    cls = _common_class(outs)
    table = specs(cls)
    for name, spec, default in table:
        if spec.merge == "same" and len(found := {getattr(o, name, default) for o in outs}) != 1:
            raise ValueError((spec.refusal or f"cannot merge PosOuts with different {name} {{values}}").format(
                values=sorted(found)))
    tokens = {n for o in outs if (n := token_count(o)) is not None}
    if len(tokens) > 1:
        raise ValueError(f"cannot merge PosOuts covering different token counts {sorted(tokens)}: "
                         "encode every part for the same grid and num_prefix")
    for name, spec, _ in table:
        if spec.merge == "one" and sum(getattr(o, name, None) is not None for o in outs) > 1:
            raise ValueError(spec.refusal or f"cannot merge two encodings with a {name} field: use one of them")
    rotary = next((o for o in outs if o.rot is not None), None)
    values: dict[str, Any] = {}
    for name, spec, default in table:
        given = [v for o in outs if (v := getattr(o, name, None)) is not None]
        if spec.merge == "rot":
            values[name] = default if rotary is None else getattr(rotary, name, default)
        elif spec.merge == "same":
            values[name] = getattr(outs[0], name, default)
        elif spec.merge == "sum" and given:
            values[name] = _sum(name, spec, given)
        elif spec.merge == "concat" and given:
            values[name] = _concat(name, given)
        else:
            values[name] = given[0] if given else default
    return derive(cls, values)


def _common_class(outs: tuple[PosOut, ...]) -> type[PosOut]:
    """The most derived ``PosOut`` class among ``outs``, which every other one must be a base of."""
    cls = max((type(o) for o in outs), key=lambda c: len(c.__mro__))
    if not all(issubclass(cls, type(o)) for o in outs):
        raise TypeError(f"cannot merge PosOuts of unrelated classes {sorted({type(o).__name__ for o in outs})}")
    return cls


def _sum(name: str, spec: Field, ts: list[Tensor]) -> Tensor:
    try:
        torch.broadcast_shapes(*(t.shape for t in ts))
    except RuntimeError:
        what = " (heads, queries, keys)" if spec.role == "pair" else " (tokens, channels)"
        raise ValueError(f"cannot merge the {name} fields of shapes {[tuple(t.shape) for t in ts]}: they do not "
                         f"broadcast{what}; build every encoding with the same dim and heads") from None
    return sum(ts[1:], ts[0])


def _concat(name: str, ts: list[Tensor]) -> Tensor:
    """Along the channels, batched and unbatched outputs broadcast over their leading dims, as add and bias do."""
    try:
        lead = torch.broadcast_shapes(*(t.shape[:-1] for t in ts))
    except RuntimeError:
        raise ValueError(f"cannot merge the {name} fields of shapes {[tuple(t.shape) for t in ts]}: their leading "
                         "(batch, tokens) dims do not broadcast") from None
    return torch.cat([t.expand(*lead, t.shape[-1]) for t in ts], dim=-1)


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
        check_tokens(x, pos.add, "add", pos.num_prefix)
        x = x + pos.add.to(x.dtype)
    if pos.cat is not None:
        check_tokens(x, pos.cat, "cat", pos.num_prefix)
        cat = pos.cat.to(x.dtype).expand(*x.shape[:-1], pos.cat.shape[-1])
        x = torch.cat([x, cat], dim=-1)
    for name, act in acting(type(pos), "tokens"):  # fields declared with an act of their own
        if getattr(pos, name) is not None:
            x = act(x, getattr(pos, name))
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

    A ``pos`` with a field that acts after the softmax (``prob_bias``, eRPE), which ``attn_mask`` cannot carry, is
    refused: :func:`ndpe.attend` ``(q, k, v, pos)`` applies every field.

    >>> attn_bias(PosOut(bias=torch.zeros(4, 9, 9))).shape
    torch.Size([1, 4, 9, 9])
    """
    if pos is not None:
        check_pos(pos)
        if after := prob_fields(pos):
            raise ValueError(f"this encoding's {', '.join(after)} acts on the attention probabilities after the softmax, "
                             "which SDPA's attn_mask cannot carry: call ndpe.attend(q, k, v, pos, attn_mask=...) "
                             "instead of SDPA with attn_bias")
    return attn_term(pos, dtype, q=q, k=k, causal=causal, x=x)


def attn_term(pos: PosOut | None, dtype: torch.dtype | None = None, *, q: Tensor | None = None,
              k: Tensor | None = None, causal: bool | None = None, x: Tensor | None = None) -> Tensor | None:
    """:func:`attn_bias` of a ``pos`` already known to be a ``PosOut`` (``ndpe.Attention`` checks it once a call)."""
    check_float_dtype(dtype)
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


def check_pos(pos) -> None:
    """Refuse anything but a :class:`PosOut` where an apply function takes one."""
    if not isinstance(pos, PosOut):
        raise TypeError(f"pos must be an ndpe.PosOut (what pe(grid_shape) returns) or None, got {type(pos).__name__}")


