"""Where an encoding's fields meet a model's tensors: their token counts and leading (batch, heads) dims.

Each check refuses in one line that names the layout the tensor must have and the likely cause: the token axis
swapped with another, prefix tokens (cls, registers) counted on one side only, per-sample positions of another
batch size, another ``heads=``. The apply functions (:func:`ndpe.apply_tokens`, :func:`ndpe.apply_qk`,
:func:`ndpe.attend`, ...) call them; they read shapes only, never values.
"""
from __future__ import annotations

from torch import Tensor

MAX_PREFIX_HINTED = 8  # more tokens than the encoding by up to this: prefix tokens (cls, registers) it was not told of


def check_leading(lead: tuple[int, ...], x: Tensor, field: str) -> None:
    """Refuse an encoding field whose leading dims would broadcast ``x`` ``(B, heads, T, head_dim)`` to a larger
    batch or more heads (per-sample positions of another batch size, another ``heads=``): the one heads check."""
    have = tuple(x.shape[:-2])
    lead = tuple(lead)
    if len(have) == 2 and len(lead) >= 1 and lead[-1] not in (1, have[-1]):
        raise ValueError(f"the encoding's {field} has {lead[-1]} heads but the attention has heads={have[-1]}; "
                         f"build the encoding with heads={have[-1]}")
    if len(lead) > len(have) or any(a != 1 and a != b for a, b in zip(reversed(lead), reversed(have))):
        raise ValueError(f"the encoding's {field} has leading dims {lead} (batch, heads) but the attention's tensors "
                         f"are {have} (batch, heads): per-sample positions of another batch size?")


def check_token_count(x: Tensor, covered: int, num_prefix: int, name: str, layout: tuple[str, ...],
                      what: str = "") -> None:
    """Refuse ``x``, laid out as ``layout`` (its axis names, tokens at -2), unless it has the ``covered`` tokens of an
    encoding built with ``num_prefix``. The one-line error names the layout and the likely cause: the token axis
    swapped with another (another axis holds ``covered``), or prefix tokens counted on one side only. ``what``: the
    encoding's field ``x`` meets (``"add"``), if one.

    >>> import torch
    >>> check_token_count(torch.zeros(2, 197, 6, 64), 197, 1, "q", ("B", "heads", "T", "head_dim"))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ValueError: q has 6 tokens but ... einops.rearrange(q, 'b t heads head_dim -> b heads t head_dim')
    """
    have = x.shape[-2]
    if have == covered:
        return
    shape = tuple(x.shape)
    says = (f"tokens have length {have} but the encoding's {what}" if what
            else f"{name} has {have} tokens but the encoding")
    text = (f"{says} covers {covered} ({covered - num_prefix} grid + {num_prefix} prefix); {name} must be "
            f"({', '.join(layout)}), got {shape}")
    swapped = [a for a in range(x.dim() - 2) if shape[a] == covered] if len(layout) == x.dim() else []
    if swapped:
        names = [n.lower() for n in layout]
        given = list(names)
        given[swapped[0]], given[-2] = names[-2], names[swapped[0]]
        text += (f": its axis {swapped[0]} looks like the tokens: einops.rearrange({name}, '{' '.join(given)} -> "
                 f"{' '.join(names)}')")
    elif -num_prefix <= have - covered < 0:  # the prefix (cls, registers) counted by the encoding only
        text += (f": the encoding counts {covered - have} prefix token(s) more than {name} has: put the cls / register "
                 f"tokens first in {name}, or build the encoding with num_prefix={num_prefix + have - covered}")
    elif 0 < have - covered <= MAX_PREFIX_HINTED:  # by the tokens only
        text += (f": if {name}'s first {num_prefix + have - covered} tokens are cls / register tokens, build the "
                 f"encoding with num_prefix={num_prefix + have - covered}")
    raise ValueError(text)


def check_tokens(x: Tensor, t: Tensor, name: str, num_prefix: int) -> None:
    """Refuse tokens ``x`` ``(B, T, C)`` that the encoding's token field ``name`` (``t``, ``(*, T, C)``) does not cover:
    another token count, or (``add``) another channel count."""
    check_token_count(x, t.shape[-2], num_prefix, "x", ("B", "T", "C"), name)
    if name == "add" and x.shape[-1] != t.shape[-1]:
        raise ValueError(f"tokens have {x.shape[-1]} channels but the encoding adds {t.shape[-1]}; build it with dim={x.shape[-1]}")
