"""``ndpe.timm.use`` on timm's vision transformers with relative-position biases: Swin Transformer V1
(``SwinTransformer``) and V2 (``SwinTransformerV2``), MaxViT and CoAtNet (``MaxxVit``: block and grid attentions),
BEiT (``Beit``: a table per block, or one shared by every block) and ViT-RelPos (``VisionTransformerRelPos``: per
block or shared, with or without a class token).

Each adds a relative-position bias to its attention logits, from a module ndpe calls a site: a learned table
(``relative_position_bias_table``, ``(2 Wh - 1)(2 Ww - 1)`` rows per head: Swin V1's ``WindowAttention``, timm's
``RelPosBias`` and ``RelPosBiasTf``, BEiT's ``Attention`` and shared ``RelativePositionBias``; with a class token, 3
more rows bias it) or a continuous-position-bias MLP of log-spaced offsets (Swin V2's ``cpb_mlp``, timm's
``RelPosMlp``). ``use(model, kind)`` gives each site an ndpe encoding of its window (a ViT's: its patch grid, the
class token a prefix token) with its own heads, registered at ``ndpe_pe`` on the site (its parameters train with the
model), whose bias takes the site's place:

- the model's own kind with no options, ``"relative"`` for a table and ``"cpb"`` for an MLP, is the model's own
  bias: each table is copied into its encoding (``max_distance = window - 1`` is the table and its index; the
  class-token rows stay at ``ndpe_prefix_bias``), each MLP's weights into a ``cpb`` of the same form (Swin V2 and
  ``RelPosMlp``'s ``"swin"`` mode: ``style="swin"`` with the pretrained window as ``train_shape``; its ``"cr"`` mode:
  ``style="dynamic"``, natural-log offsets; ``RelPosMlp``'s ReLU and dropout), so the outputs are timm's. timm's
  resize (``set_input_size``, which calls each site's ``set_window_size``) resizes the copied tables as timm resizes
  its own (``resize_rel_pos_bias_table``), and an MLP follows the new window as timm's does: the outputs stay those
  of timm's model resized the same way. A timm checkpoint loaded after ``use()`` lands in the encodings the same way;
- any other kind whose encoding only biases attention (``alibi``, ``cpb``, ``fire``, ``none``, ``relative`` with
  options, ...) replaces it, at the site's grid (a class token unbiased); a kind that rotates q and k, reads the
  tokens or adds to them is refused in one line (the attention these models are built around takes a bias only), and
  so is a model without a relative bias (a BEiT built without, a CoAtNet without attention).
"""
from __future__ import annotations

import math
from types import MethodType
from typing import Any, Callable

import torch
import torch.nn.functional as F
from timm.layers import resize_rel_pos_bias_table
from timm.layers.pos_embed_rel import RelPosBias, RelPosBiasTf, RelPosMlp
from timm.models.beit import Attention as BeitAttention
from timm.models.beit import Beit, RelativePositionBias
from timm.models.maxxvit import MaxxVit
from timm.models.swin_transformer import SwinTransformer, WindowAttention
from timm.models.swin_transformer_v2 import SwinTransformerV2
from timm.models.swin_transformer_v2 import WindowAttention as WindowAttentionV2
from timm.models.vision_transformer_relpos import VisionTransformerRelPos
from torch import Tensor, nn

from .contract import attention_fields
from .registry import make

__all__ = ["use", "WINDOWED"]

# the classes ndpe.timm.use hands to this module
WINDOWED = (SwinTransformer, SwinTransformerV2, MaxxVit, Beit, VisionTransformerRelPos)
_TABLES = (WindowAttention, RelPosBias, RelPosBiasTf, BeitAttention, RelativePositionBias)


def use(model: Any, kind: str, **options: Any) -> Any:
    """Give each relative-position site of the timm Swin (V1, V2), MaxViT / CoAtNet, BEiT or ViT-RelPos ``model`` an
    ndpe ``kind`` (see the module doc); in place."""
    sites = _sites(model)
    if not sites:
        raise ValueError(f"ndpe.timm.use replaces the relative position biases of {type(model).__name__}'s attentions; "
                         "this one has none (a BEiT built with use_rel_pos_bias=False, a CoAtNet without attention)")
    if any(getattr(site, "ndpe_pe", None) is not None for site, _, _ in sites):
        raise ValueError("this model already uses an ndpe encoding (ndpe_pe): build a fresh model to use another")
    pes = []
    for site, heads, dim in sites:
        own_kind, own_options = _own(site)
        own = kind == own_kind and not options
        pe: Any = make(dims=2, kind=kind, dim=dim, heads=heads, **(own_options if own else options))
        fields = attention_fields(pe(_window(site), num_prefix=_prefix(site)), tokens_too=True)
        if set(fields) - {"bias"}:
            raise ValueError(f"{type(model).__name__}'s attention takes a kind that only biases attention (relative, "
                             f"alibi, cpb, fire, ...); kind {kind!r} gives {', '.join(fields)}")
        pes.append((pe, own))
    for (site, heads, _), (pe, own) in zip(sites, pes):  # once every site has taken its kind: a refusal changes nothing
        if own:
            _copy(site, pe)
        for name in ("relative_position_bias_table", "cpb_mlp", "mlp"):
            if name in site._parameters or name in site._modules:
                delattr(site, name)
        site.ndpe_pe, site._ndpe_own, site._ndpe_heads = pe.train(site.training), own, heads
        if isinstance(site, BeitAttention):  # timm's forward then adds only the bias it is handed: ndpe's
            setattr(site, "relative_position_bias_table", None)
        for name, method in (("set_window_size", _set_window_size), _hook(site)):
            setattr(site, name, MethodType(method, site))
        if own:  # a timm checkpoint loaded after use()
            site.register_load_state_dict_pre_hook(_load_timm)
    return model


def _hook(site: Any) -> tuple[str, Callable]:
    """The method of ``site`` that gives timm its bias, and ndpe's in its place: Swin V1's ``_get_rel_pos_bias``,
    MaxViT's ``get_bias``, the forward of Swin V2's attention (its bias is inline), BEiT's attention and shared
    module."""
    if isinstance(site, WindowAttention):
        return "_get_rel_pos_bias", _bias
    if isinstance(site, (RelPosBias, RelPosBiasTf, RelPosMlp)):
        return "get_bias", _bias
    if isinstance(site, WindowAttentionV2):
        return "forward", _cosine_forward
    return "forward", _beit_forward if isinstance(site, BeitAttention) else _shared_forward


def _sites(model: Any) -> list[tuple[Any, int, int]]:
    """``(site, heads, width)`` of each module holding a relative-position bias (refusing, in one line, what ndpe does
    not map)."""
    if isinstance(model, (SwinTransformer, SwinTransformerV2)):
        kind = WindowAttention if isinstance(model, SwinTransformer) else WindowAttentionV2
        return [(m, m.num_heads, m.qkv.in_features) for m in model.modules() if isinstance(m, kind)]
    if isinstance(model, Beit):
        shared: Any = model.rel_pos_bias
        sites: list[tuple[Any, int, int]] = [
            (m, m.num_heads, m.qkv.out_features // 3) for m in model.modules()
            if isinstance(m, BeitAttention) and m.relative_position_bias_table is not None]
        if shared is not None:
            attn: Any = model.blocks[0].attn
            sites.append((shared, shared.relative_position_bias_table.shape[1], attn.qkv.out_features // 3))
        return sites
    sites = []
    for m in model.modules():  # MaxViT / CoAtNet: each attention's rel_pos; ViT-RelPos: also its shared_rel_pos
        rel_pos: Any = getattr(m, "rel_pos", None) if m is not model else getattr(m, "shared_rel_pos", None)
        if rel_pos is None:
            continue
        if not isinstance(rel_pos, (RelPosBias, RelPosBiasTf, RelPosMlp)) or getattr(rel_pos, "mode", "cr") == "rw":
            raise ValueError(f"ndpe.timm.use takes timm's RelPosBias, RelPosBiasTf and RelPosMlp ('cr' or 'swin' "
                             f"modes); this model's attention has a {type(rel_pos).__name__}")
        heads = rel_pos.relative_position_bias_table.shape[1] if isinstance(rel_pos, RelPosBias) else rel_pos.num_heads
        width = model.embed_dim if m is model else heads * (getattr(m, "dim_head", None) or m.head_dim)
        sites.append((rel_pos, heads, width))
    return sites


def _window(site: Any) -> tuple[int, int]:
    return tuple(site.window_size)


def _prefix(site: Any) -> int:
    """The class token in BEiT's and a ViT-RelPos's window (``num_prefix`` of the site's encoding)."""
    return 1 if isinstance(site, (BeitAttention, RelativePositionBias)) else getattr(site, "prefix_tokens", 0)


def _own(site: Any) -> tuple[str, dict[str, Any]]:
    """The kind and options of the site's own bias at its current window."""
    if isinstance(site, _TABLES):
        return "relative", {"max_distance": tuple(w - 1 for w in _window(site))}
    if isinstance(site, WindowAttentionV2):
        pretrained = tuple(site.pretrained_window_size)
        return "cpb", {"mlp_hidden": site.cpb_mlp[0].out_features,
                       **({"train_shape": pretrained} if pretrained[0] > 0 else {})}
    mlp = site.mlp  # RelPosMlp: timm's Mlp (fc1, act, drop1, fc2), 'swin' or 'cr' log coordinates
    opts: dict[str, Any] = {"mlp_hidden": mlp.fc1.out_features, "depth": 1, "act": "relu",
                            "dropout": float(mlp.drop1.p)}
    pretrained = tuple(site.pretrained_window_size)
    if site.mode == "swin":
        return "cpb", {**opts, **({"train_shape": pretrained} if pretrained[0] > 0 else {})}
    return "cpb", {**opts, "style": "dynamic", "log_distance": True}


@torch.no_grad()
def _copy(site: Any, pe: Any) -> None:
    """The site's own weights into its encoding ``pe`` (and the class-token rows of a table into
    ``ndpe_prefix_bias``)."""
    weights = _from_timm(site, pe, {k: v for k, v in site.state_dict().items() if _timm_key(k)})
    if "ndpe_prefix_bias" in weights:
        site.ndpe_prefix_bias = nn.Parameter(weights.pop("ndpe_prefix_bias").clone())
    pe.load_state_dict({k[len("ndpe_pe."):]: v for k, v in weights.items()})


def _timm_key(key: str) -> bool:
    """A state-dict key (local to a site) of timm's bias weights: a table, Swin V2's CPB MLP, ``RelPosMlp``'s."""
    return key == "relative_position_bias_table" or key.startswith(("cpb_mlp.", "mlp.fc"))


def _from_timm(site: Any, pe: Any, weights: dict[str, Tensor]) -> dict[str, Tensor]:
    """timm's bias weights of ``site`` (its local state-dict keys) under ndpe's keys: a table as ``ndpe_pe.table``
    (MaxViT TF's ``(heads, 2 Wh - 1, 2 Ww - 1)``, indexed by key minus query, flipped to query minus key) and its
    class-token rows (BEiT, ViT-RelPos) as ``ndpe_prefix_bias``; an MLP's linears as ``ndpe_pe.mlp``'s."""
    if "relative_position_bias_table" in weights:
        own = weights["relative_position_bias_table"]
        table = own.flip(1, 2).permute(1, 2, 0).reshape(-1, own.shape[0]) if own.ndim == 3 else own
        rows = pe.table.shape[0]
        return {"ndpe_pe.table": table[:rows], **({"ndpe_prefix_bias": table[rows:]} if table.shape[0] > rows else {})}
    if isinstance(site, WindowAttentionV2):  # the same Linear, ReLU, Linear (no bias)
        return {"ndpe_pe.mlp." + k[len("cpb_mlp."):]: v for k, v in weights.items() if k.startswith("cpb_mlp.")}
    last = len(pe.mlp) - 1  # RelPosMlp: fc1, act, drop1, fc2 as Linear, ReLU, Dropout, Linear
    names = {"mlp.fc1.weight": "ndpe_pe.mlp.0.weight", "mlp.fc1.bias": "ndpe_pe.mlp.0.bias",
             "mlp.fc2.weight": f"ndpe_pe.mlp.{last}.weight", "mlp.fc2.bias": f"ndpe_pe.mlp.{last}.bias"}
    return {names[k]: v for k, v in weights.items() if k in names}


def _load_timm(site: Any, state_dict: dict, prefix: str, *args: Any) -> None:
    """A ``load_state_dict`` pre-hook of a site that took the model's own kind: a timm checkpoint's table or MLP
    (loaded after ``use()``) becomes its encoding's, as ``use()`` copied the model's."""
    keys = [k for k in state_dict if k.startswith(prefix) and _timm_key(k[len(prefix):])]
    weights = {k[len(prefix):]: state_dict.pop(k) for k in keys}
    if weights:
        state_dict.update({prefix + k: v for k, v in _from_timm(site, site.ndpe_pe, weights).items()})


def _bias(site: Any) -> Tensor:
    """The site's bias ``(1, heads, T, T)`` (``T``: the window's tokens, BEiT's class token first), where timm's
    hooks give their table's or MLP's."""
    window, prefix = _window(site), _prefix(site)
    bias = site.ndpe_pe(window, num_prefix=prefix).bias
    t = prefix + window[0] * window[1]
    if bias is None:
        bias = torch.zeros(site._ndpe_heads, t, t, device=site.ndpe_pe.device)
    extra = getattr(site, "ndpe_prefix_bias", None)
    if extra is not None:  # BEiT's own class-token rows (timm's gen_relative_position_index)
        heads = bias.shape[0]
        top = torch.cat([extra[2][:, None, None], extra[0][:, None, None].expand(heads, 1, t - 1)], -1)
        left = extra[1][:, None, None].expand(heads, t - 1, 1)
        bias = torch.cat([top, torch.cat([left, bias[:, 1:, 1:]], -1)], 1)
    return bias.unsqueeze(0)


def _set_window_size(site: Any, window_size: Any) -> None:
    """timm's ``set_window_size`` for an ndpe bias: an own table resized as timm resizes its own
    (``resize_rel_pos_bias_table``; BEiT's class-token rows kept, as there); an MLP, or another kind, follows the new
    window as it is."""
    window_size = (window_size, window_size) if isinstance(window_size, int) else tuple(window_size)
    if window_size == _window(site):
        return
    old, pe = _window(site), site.ndpe_pe
    site.window_size = window_size
    if hasattr(site, "window_area"):
        site.window_area = window_size[0] * window_size[1]
    if not (site._ndpe_own and pe.kind == "relative"):
        return
    new = pe.replace(max_distance=tuple(w - 1 for w in window_size))
    with torch.no_grad():
        new.table.copy_(resize_rel_pos_bias_table(pe.table, new_window_size=window_size, old_window_size=old,
                                                  new_bias_shape=tuple(new.table.shape)))
    site.ndpe_pe = new


def _beit_forward(attn: Any, x: Tensor, shared_rel_pos_bias: Tensor | None = None) -> Tensor:
    """BEiT's attention with ndpe's bias, added to the shared one timm's forward is handed."""
    bias = _bias(attn)
    return type(attn).forward(attn, x, shared_rel_pos_bias=bias if shared_rel_pos_bias is None
                              else bias + shared_rel_pos_bias)


def _shared_forward(module: Any) -> Tensor:
    """BEiT's shared ``RelativePositionBias.forward``: the bias ``(heads, T, T)`` every block is handed."""
    return _bias(module)[0]


def _cosine_forward(attn: Any, x: Tensor, mask: Tensor | None = None) -> Tensor:
    """Swin V2's window attention (timm's ``WindowAttention.forward``: scaled cosine logits, the shifted windows'
    ``mask``) with ndpe's bias where the CPB MLP's was."""
    B_, N, C = x.shape
    if attn.q_bias is None:
        qkv = attn.qkv(x)
    else:
        qkv_bias = torch.cat((attn.q_bias, attn.k_bias, attn.v_bias))
        qkv = attn.qkv(x) + qkv_bias if attn.qkv_bias_separate else F.linear(x, attn.qkv.weight, qkv_bias)
    q, k, v = qkv.reshape(B_, N, 3, attn.num_heads, -1).permute(2, 0, 3, 1, 4).unbind(0)
    logits = F.normalize(q, dim=-1) @ F.normalize(k, dim=-1).transpose(-2, -1)
    logits = logits * torch.clamp(attn.logit_scale, max=math.log(1.0 / 0.01)).exp()
    logits = logits + _bias(attn).to(logits.dtype)
    if mask is not None:
        num_win = mask.shape[0]
        logits = (logits.view(-1, num_win, attn.num_heads, N, N) + mask.unsqueeze(1).unsqueeze(0))
        logits = logits.view(-1, attn.num_heads, N, N)
    out = attn.attn_drop(attn.softmax(logits)) @ v
    return attn.proj_drop(attn.proj(out.transpose(1, 2).reshape(B_, N, C)))
