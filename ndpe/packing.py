"""Several samples in one :class:`~ndpe.PosOut`: :func:`pack` along the tokens, :func:`stack` along the batch.

Both read each field's declaration (:class:`ndpe.fields.Field`): per-token fields are concatenated (``pack``) or
padded with their identity and stacked (``stack``); pairwise ones become block-diagonal or padded; a ``whole`` field
is the first sample's; a term field composes its samples' terms (``LogitsTerm.pack`` / ``.stack``); a
``per_sample`` meta field (``num_prefix``, ``past``) is reset.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Sequence, cast

import torch
import torch.nn.functional as F
from torch import Tensor

from .checks import check_devices, check_dtypes, check_int
from .contract import PosOut, check_pos, derive, tensors, token_count
from .fields import Field, parts, specs
from .memory import check_memory, floats

__all__ = ["pack", "stack"]


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
    size_list = _samples(outs, sizes, "pack")
    device = next((t.device for o in outs for t in tensors(o)), device)

    def along_tokens(spec: Field, name: str, values: list[Any]) -> Any:
        if spec.role == "token":
            return _each(spec, values, lambda ts, _: _cat_tokens(ts))
        if spec.role == "pair":
            return _block_diagonal(spec, values, size_list, device)
        return type(values[0]).pack(values, size_list)

    return _compose(outs, along_tokens)


def stack(outs: Sequence[PosOut], length: int | None = None, sizes: Sequence[int] | None = None) -> PosOut:
    """One ``PosOut`` for a batch of samples of different sizes (NaFlex batches): sample ``b`` is ``outs[b]``
    (what ``pe(grid_shapes[b], num_prefix=P)`` returns), padded to ``length`` tokens (default: the longest) with
    each field's identity (no rotation, 0 add and bias: the caller's mask keeps padding out) and stacked along a
    new batch axis: per-token fields become ``(B, T, C)`` (or ``(B, heads | 1, T, C)`` for those meeting q and k),
    ``bias`` ``(B, heads | 1, T, T)``; a ``logits`` or ``tokens`` term is applied per sample. ``sizes``: the
    samples' token counts, needed only where a ``PosOut`` has no tensor to count.

    >>> s = stack([PosOut(add=torch.ones(2, 8)), PosOut(add=torch.ones(3, 8))])
    >>> s.add.shape, s.add[0, :, 0].tolist()
    (torch.Size([2, 3, 8]), [1.0, 1.0, 0.0])
    """
    size_list = _samples(outs, sizes, "stack")
    longest = max(size_list)
    length = longest if length is None else check_int(length, "stack() length", low=longest)
    check_stack_memory(outs, length)

    def along_batch(spec: Field, name: str, values: list[Any]) -> Any:
        if values[0] is None:  # a pair field no sample has: no mask needed along the batch
            return None
        if spec.role == "term":
            return type(values[0]).stack(values, size_list, length)

        def padded(t: Tensor, identity: float) -> Tensor:  # (..., T, C) -> (..., length, C); pairs to (length, length)
            keys = (0, 0) if spec.role == "token" else (0, length - t.shape[-1])
            return F.pad(_one_sample(spec, name, t), (*keys, 0, length - t.shape[-2]), value=identity)

        return _each(spec, values, lambda ts, identity: torch.stack(_broadcast([padded(t, identity) for t in ts])))

    return _compose(outs, along_batch)


def _compose(outs: Sequence[PosOut], fn: Callable[[Field, str, list[Any]], Any]) -> PosOut:
    """The samples' ``PosOut``, ``fn(spec, name, values)`` composing each token, pair or term field they have."""
    cls, ref = type(outs[0]), outs[0]
    values: dict[str, Any] = {}
    for name, spec, default in specs(cls):
        given = [getattr(o, name) for o in outs]
        if spec.role == "meta":
            values[name] = default if spec.per_sample else getattr(ref, name)
        elif spec.role == "whole" or (given[0] is None and spec.off_block is None):
            values[name] = given[0]  # one value for every token (the samples come from one encoding)
        else:
            values[name] = fn(spec, name, given)
    return derive(cls, values)


def _samples(outs: Sequence[PosOut], sizes: Sequence[int] | None, what: str) -> list[int]:
    """Check ``outs`` are whole samples of one encoding; their token counts (``sizes`` where given)."""
    if isinstance(outs, PosOut) or not isinstance(outs, (list, tuple)) or not outs:
        raise TypeError(f"{what}() takes a non-empty list of PosOut (one per sample), got {type(outs).__name__}")
    for o in outs:
        check_pos(o)
        if o.past:
            raise ValueError(f"{what}() is for whole samples: a PosOut built for KV-cache decoding (past > 0) "
                             f"cannot be {what}ed")
    table = specs(type(outs[0]))
    mixed = [name for name, spec, _ in table if spec.role != "meta"
             and len({getattr(o, name, None) is None for o in outs}) > 1]
    shared = [name for name, spec, _ in table if spec.role == "meta" and not spec.per_sample]
    if mixed or any(type(o) is not type(outs[0]) or any(getattr(o, n) != getattr(outs[0], n) for n in shared)
                    for o in outs):
        raise ValueError(f"{what}() needs the outputs of one encoding: fields {mixed} or the {'/'.join(shared)} differ "
                         "between samples")
    check_devices(f"{what}()", **{f"sample {i}": t.device for i, o in enumerate(outs) for t in tensors(o)[:1]})
    for name, spec, _ in table:
        if spec.is_tensor:
            _check_alike(outs, name, spec, what)
        leads = [t.shape[:-2] for o in outs for t in parts(getattr(o, name))] if spec.is_tensor else []
        try:
            torch.broadcast_shapes(*leads)
        except RuntimeError:
            raise ValueError(f"{what}() needs samples of one batch: their {name} fields have leading dims "
                             f"{sorted({tuple(lead) for lead in leads})} ({'/'.join(spec.lead)}), which do not "
                             "broadcast") from None
    counted = [token_count(o) for o in outs]
    if sizes is not None:
        size_list = [check_int(n, f"{what} sizes", low=1) for n in sizes]
        if len(size_list) != len(outs) or any(c is not None and c != n for c, n in zip(counted, size_list)):
            raise ValueError(f"{what}() sizes {list(sizes)} do not match the samples' token counts {counted}")
        return size_list
    if None in counted:
        raise ValueError(f"{what}() needs each sample's token count: a PosOut with no tensor field has none; pass "
                         f"sizes= (pe.packed() does)")
    return cast("list[int]", counted)


def _check_alike(outs: Sequence[PosOut], name: str, spec: Field, what: str) -> None:
    """The samples' ``name`` fields have one dtype (one encoding returns one: torch.cat's type promotion would hide
    samples built with another ``dtype=``) and, for a per-token field, one width (channels)."""
    first = {f"sample {i}": parts(getattr(o, name))[0] for i, o in enumerate(outs) if getattr(o, name) is not None}
    check_dtypes(f"{what}() on the samples' {name} fields", **first)
    widths: dict[int, str] = {}
    for sample, t in first.items():
        widths.setdefault(t.shape[-1], sample)
    if spec.role == "token" and len(widths) > 1:
        raise ValueError(f"{what}() needs the outputs of one encoding: the samples' {name} fields have "
                         f"{', '.join(f'{w} channels ({s})' for w, s in widths.items())}")


def _each(spec: Field, values: list[Any], fn: Callable[[list[Tensor], float], Tensor]) -> Any:
    """``fn(the samples' tensors, identity)`` per component of a tensor field (a tuple back for a tuple field)."""
    if not isinstance(values[0], tuple):
        return fn(values, spec.identities(values[0])[0])
    return tuple(fn([v[i] for v in values], identity) for i, identity in enumerate(spec.identities(values[0])))


def _broadcast(ts: list[Tensor]) -> list[Tensor]:
    """The tensors with their leading dims (all but tokens and channels) broadcast to one shape."""
    lead = torch.broadcast_shapes(*(t.shape[:-2] for t in ts))
    return [t.expand(*lead, *t.shape[-2:]) for t in ts]


def _cat_tokens(ts: list[Tensor]) -> Tensor:
    return torch.cat(_broadcast(ts), dim=-2)


def _block_diagonal(spec: Field, values: list[Tensor | None], sizes: list[int], device) -> Tensor:
    """Each sample's pairs on its diagonal block (the identity where it has none), ``off_block`` elsewhere."""
    given = [v for v in values if v is not None]
    lead = torch.broadcast_shapes(*(v.shape[:-2] for v in given)) if given else ()
    dtype = given[0].dtype if given else torch.float32
    total = sum(sizes)
    check_mask_memory(tuple(lead), sizes, dtype)
    fill = spec.identity if spec.off_block is None else spec.off_block
    out = torch.full((*lead, total, total), cast(float, fill), device=device, dtype=dtype)
    start = 0
    for v, n in zip(values, sizes):
        out[..., start:start + n, start:start + n] = cast(float, spec.identity) if v is None else v
        start += n
    return out


def check_mask_memory(lead: tuple[int, ...], sizes: Sequence[int], dtype: torch.dtype) -> None:
    """Refuse the ``(*lead, T, T)`` packed bias of samples of ``sizes`` tokens over the memory budget, before it is
    built: it grows with the square of the packed tokens ``T``, even for kinds with no bias of their own."""
    total = sum(sizes)
    check_memory(torch.empty((), dtype=dtype).element_size() * math.prod(lead) * total * total,
                 lambda: f"the packed bias of {len(sizes)} samples ({floats((*lead, total, total))} {dtype}, the mask "
                         "that keeps them apart)", "pack fewer tokens per sequence, or attend with "
                 "ndpe.flex.packed_attention, which builds no bias")


def check_stack_memory(outs: Sequence[PosOut], length: int) -> None:
    """Refuse the stacked fields of ``outs`` padded to ``length`` tokens over the memory budget, before any is built:
    ``(B, *, length, C)`` per token field, ``(B, *, length, length)`` per pair field."""
    nbytes = 0
    for name, spec, _ in specs(type(outs[0])):
        value = getattr(outs[0], name)
        if spec.role not in ("token", "pair") or not isinstance(value, (Tensor, tuple)):
            continue
        for t in parts(value):
            lead = math.prod(t.shape[:-2][-len(spec.lead):]) if spec.lead and t.dim() > 2 else 1
            width = length if spec.role == "pair" else t.shape[-1]
            nbytes += len(outs) * lead * length * width * t.element_size()
    check_memory(nbytes, lambda: f"stack() of {len(outs)} samples padded to length={length} tokens",
                 "stack to a shorter length (the longest sample's, by default)")


def _one_sample(spec: Field, name: str, t: Tensor) -> Tensor:
    """A sample's tensor without its batch axis, with every other leading axis ``spec.lead`` names (size 1 if
    absent): ``(heads | 1, T, C)`` for a field meeting q and k, ``(T, C)`` for one added to the tokens."""
    rank = 2 + len(spec.lead)
    if "batch" in spec.lead and t.dim() == rank:
        if t.shape[0] != 1:
            raise ValueError(f"stack() takes one sample per PosOut, but its {name} has batch {t.shape[0]}")
        t = t[0]
    return t.reshape(*(1,) * (rank - 1 - t.dim()), *t.shape) if "batch" in spec.lead else t
