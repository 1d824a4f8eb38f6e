"""``ndpe.timm.use`` on timm's windowed vision transformers: Swin Transformer (V1, ``SwinTransformer``).

Swin's attention runs inside windows and adds one learned relative-position bias per window attention
(``relative_position_bias_table``, ``(2 Wh - 1)(2 Ww - 1)`` rows per head, a table per block). ``use(model, kind)``
gives each window attention an ndpe encoding of its window grid, the block's own heads, registered at
``attn.ndpe_pe`` (its parameters train with the model), whose bias takes the table's place:

- ``kind="relative"`` with no ``max_distance`` is Swin's own bias: ``max_distance = window - 1`` is Swin's table and
  index, and each block's table is copied into its encoding, so the outputs are timm's; ``set_input_size(...,
  window_size=)`` (timm's own resize) resizes the copied tables as timm resizes its own
  (``resize_rel_pos_bias_table``): the outputs stay those of timm's model resized the same way;
- any other kind whose encoding only biases attention (``alibi``, ``cpb``, ``fire``, ``none``, ...) replaces it, at
  the window's grid; a kind that rotates q and k, reads the tokens or adds to them is refused in one line (Swin's
  window attention hands its bias hook nothing else).

Swin V2 (cosine attention, a CPB MLP inside its forward), MaxViT and BEiT are refused in one line
(``ndpe.timm.use``'s check of supported classes).
"""
from __future__ import annotations

from types import MethodType
from typing import Any

import torch
from timm.layers import resize_rel_pos_bias_table
from timm.models.swin_transformer import SwinTransformer, WindowAttention
from torch import Tensor

from .contract import attention_fields
from .registry import make

__all__ = ["use"]


def use(model: SwinTransformer, kind: str, **options: Any) -> SwinTransformer:
    """Give each window attention of the timm Swin ``model`` an ndpe ``kind`` (see the module doc); in place."""
    attns: list[Any] = [m for m in model.modules() if isinstance(m, WindowAttention)]
    if any(getattr(a, "ndpe_pe", None) is not None for a in attns):
        raise ValueError("this model already uses an ndpe encoding (attn.ndpe_pe): build a fresh model to use another")
    own = kind == "relative" and "max_distance" not in options  # Swin's own bias
    pes = []
    for attn in attns:
        opts = {**options, "max_distance": tuple(w - 1 for w in attn.window_size)} if own else options
        head_dim = attn.qkv.in_features // attn.num_heads
        pe: Any = make(dims=2, kind=kind, dim=attn.num_heads * head_dim, heads=attn.num_heads, **opts)
        fields = attention_fields(pe(tuple(attn.window_size)), tokens_too=True)
        if set(fields) - {"bias"}:
            raise ValueError(f"Swin's window attention takes a kind that only biases attention (relative, alibi, cpb, "
                             f"fire, ...); kind {kind!r} gives {', '.join(fields)}")
        if own:
            with torch.no_grad():
                pe.table.copy_(attn.relative_position_bias_table)
        pes.append(pe)
    for attn, pe in zip(attns, pes):  # only once every block has taken its kind: a refusal changes nothing
        del attn.relative_position_bias_table
        attn.ndpe_pe = pe
        attn._ndpe_own = own
        attn._get_rel_pos_bias = MethodType(_bias, attn)
        attn.set_window_size = MethodType(_set_window_size, attn)
    return model


def _bias(attn: Any) -> Tensor:
    """The window's bias ``(1, heads, N, N)``, where Swin's ``_get_rel_pos_bias`` gives its table's."""
    bias = attn.ndpe_pe(tuple(attn.window_size)).bias
    return torch.zeros(1, attn.num_heads, attn.window_area, attn.window_area) if bias is None else bias.unsqueeze(0)


def _set_window_size(attn: Any, window_size: Any) -> None:
    """timm's ``set_window_size`` for an ndpe bias: Swin's own table (``relative``) resized as timm resizes its own;
    another kind follows the new window as it is."""
    window_size = (window_size, window_size) if isinstance(window_size, int) else tuple(window_size)
    if window_size == tuple(attn.window_size):
        return
    old, pe = tuple(attn.window_size), attn.ndpe_pe
    attn.window_size, attn.window_area = window_size, window_size[0] * window_size[1]
    if not attn._ndpe_own:
        return
    new = pe.replace(max_distance=tuple(w - 1 for w in window_size))
    with torch.no_grad():
        new.table.copy_(resize_rel_pos_bias_table(pe.table, new_window_size=window_size, old_window_size=old,
                                                  new_bias_shape=tuple(new.table.shape)))
    attn.ndpe_pe = new
