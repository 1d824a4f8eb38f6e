"""``ndpe.timm.use`` on timm's windowed vision transformers: Swin Transformer (V1, ``SwinTransformer``) and MaxViT
(``MaxxVit`` with ``rel_pos_type="bias"``: its block and grid attentions).

Both add one learned relative-position bias per window attention (``relative_position_bias_table``,
``(2 Wh - 1)(2 Ww - 1)`` rows per head, a table per attention: Swin's ``WindowAttention``, MaxViT's ``RelPosBias``).
``use(model, kind)`` gives each an ndpe encoding of its window grid with the attention's own heads, registered at
``ndpe_pe`` on the module that held the table (its parameters train with the model), whose bias takes the table's
place:

- ``kind="relative"`` with no ``max_distance`` is the model's own bias: ``max_distance = window - 1`` is Swin's table
  and index, and each table is copied into its encoding, so the outputs are timm's; ``set_window_size`` (Swin's
  ``set_input_size(..., window_size=)``, timm's own resize) resizes the copied tables as timm resizes its own
  (``resize_rel_pos_bias_table``): the outputs stay those of timm's model resized the same way;
- any other kind whose encoding only biases attention (``alibi``, ``cpb``, ``fire``, ``none``, ...) replaces it, at
  the window's grid; a kind that rotates q and k, reads the tokens or adds to them is refused in one line (the bias
  hook these attentions call hands nothing else), and so is a MaxViT whose relative positions are an MLP.

Swin V2 (cosine attention, a CPB MLP inside its forward) and BEiT are refused in one line (``ndpe.timm.use``'s check
of supported classes).
"""
from __future__ import annotations

from types import MethodType
from typing import Any

import torch
from timm.layers import resize_rel_pos_bias_table
from timm.layers.pos_embed_rel import RelPosBias
from timm.models.maxxvit import MaxxVit
from timm.models.swin_transformer import SwinTransformer, WindowAttention
from torch import Tensor

from .contract import attention_fields
from .registry import make

__all__ = ["use", "WINDOWED"]

WINDOWED = (SwinTransformer, MaxxVit)  # the classes ndpe.timm.use hands to this module


def use(model: Any, kind: str, **options: Any) -> Any:
    """Give each window attention of the timm Swin or MaxViT ``model`` an ndpe ``kind`` (see the module doc); in
    place."""
    sites = _sites(model)
    if any(getattr(site, "ndpe_pe", None) is not None for site, _, _ in sites):
        raise ValueError("this model already uses an ndpe encoding (ndpe_pe): build a fresh model to use another")
    own = kind == "relative" and "max_distance" not in options  # the model's own bias
    pes = []
    for site, heads, head_dim in sites:
        opts = {**options, "max_distance": tuple(w - 1 for w in site.window_size)} if own else options
        pe: Any = make(dims=2, kind=kind, dim=heads * head_dim, heads=heads, **opts)
        fields = attention_fields(pe(tuple(site.window_size)), tokens_too=True)
        if set(fields) - {"bias"}:
            raise ValueError(f"{type(model).__name__}'s window attention takes a kind that only biases attention "
                             f"(relative, alibi, cpb, fire, ...); kind {kind!r} gives {', '.join(fields)}")
        if own:
            with torch.no_grad():
                pe.table.copy_(site.relative_position_bias_table)
        pes.append(pe)
    for (site, heads, _), pe in zip(sites, pes):  # only once every site has taken its kind: a refusal changes nothing
        del site.relative_position_bias_table
        site.ndpe_pe, site._ndpe_own, site._ndpe_heads = pe, own, heads
        site._get_rel_pos_bias = site.get_bias = MethodType(_bias, site)  # Swin's hook, MaxViT's
        site.set_window_size = MethodType(_set_window_size, site)
    return model


def _sites(model: Any) -> list[tuple[Any, int, int]]:
    """``(module holding the table, heads, head_dim)`` of each window attention: Swin's ``WindowAttention``, MaxViT's
    ``RelPosBias`` (other relative-position modules refused in one line)."""
    if isinstance(model, SwinTransformer):
        return [(m, m.num_heads, m.qkv.in_features // m.num_heads) for m in model.modules()
                if isinstance(m, WindowAttention)]
    sites = []
    for m in model.modules():
        rel_pos = getattr(m, "rel_pos", None)
        if rel_pos is None:
            continue
        if not isinstance(rel_pos, RelPosBias) or rel_pos.prefix_tokens:
            raise ValueError(f"ndpe.timm.use takes MaxViT's RelPosBias windows (rel_pos_type='bias'); this model's "
                             f"attention has a {type(rel_pos).__name__}")
        heads = rel_pos.relative_position_bias_table.shape[1]
        sites.append((rel_pos, heads, getattr(m, "dim_head", 8)))
    return sites


def _bias(attn: Any) -> Tensor:
    """The window's bias ``(1, heads, N, N)``, where Swin's ``_get_rel_pos_bias`` gives its table's."""
    bias = attn.ndpe_pe(tuple(attn.window_size)).bias
    n = attn.window_area
    return torch.zeros(1, attn._ndpe_heads, n, n) if bias is None else bias.unsqueeze(0)


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
