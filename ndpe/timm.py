"""One call puts any ndpe kind into a timm vision transformer: ``ndpe.timm.use(model, kind, **options)``.

Supported: timm's ``VisionTransformer`` (class token, register tokens, ``dynamic_img_size``, ``no_embed_class``),
``Eva`` (EVA02, the ``vit_*_rope_*`` RoPE-ViT models, DINOv3) and ``NaFlexVit`` (images, and NaFlex batches of several
sizes: each sample encoded for its own grid), pinned against timm 1.0.31. The call

- builds ``pe = ndpe.make(dims=2, kind=kind, dim=heads * head_dim, heads=heads, **options)`` and registers it as
  ``model.ndpe_pe`` (its parameters train with the model and are in its ``state_dict``);
- removes the model's own encoding (``pos_embed``, ``rope``; NaFlexVit's embedding tables). In a model with both a
  learned table and a rope (EVA02, a NaFlexVit built with both) the kind takes the rope's place and the table stays,
  as the model has it, unless the kind is ``none`` or adds to the tokens itself: ``"rope"`` on EVA02 is EVA02 (set
  ``model.pos_embed = None`` first for ndpe's kind alone);
- makes the model take any image size (a multiple of the patch, or any with ``dynamic_img_pad``), as timm's
  ``dynamic_img_size=True`` does, and encodes once per forward, in ``_pos_embed``, for the grid the patches form,
  with the model's class and register tokens as ndpe's prefix tokens, adding or transforming the tokens there
  (``apply_tokens``);
- for ``kind="learned"``, starts from the model's own ``pos_embed``: by default at its grid, resized to other grids
  with timm's ``resample_abs_pos_embed`` (bicubic), its class / register entries folded into those tokens as
  timm does: the outputs are the model's own (at other sizes, those of the model built with ``dynamic_img_size``);
  ``model.ndpe_pe.reset_parameters()`` starts afresh;
- replaces each block's attention by :class:`NdpeAttention`, which keeps the block's own weights and computes
  q, k, v as timm does, rotates q and k (``apply_qk``), and hands SDPA ndpe's bias or logits term (with any
  ``attn_mask`` timm passes). A kind with no attention term keeps SDPA's fused kernel without a mask.

Kinds that concatenate channels (``cat_dim > 0``) are refused: a timm model's token width is fixed.

>>> import timm, torch, ndpe.timm
>>> model = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=64, depth=1)
>>> model = ndpe.timm.use(model, "alibi")
>>> model(torch.randn(1, 3, 64, 96)).shape   # any image size: the encoding follows the grid
torch.Size([1, 1000])
"""
from __future__ import annotations

from typing import Any, cast

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor, nn

from .apply import attention as apply_attention
from .contract import PosOut, apply_tokens, attention_fields
from .kinds.learned import Learned
from .packing import stack
from .registry import make

try:
    import timm as _timm  # noqa: F401
except ImportError as err:  # pragma: no cover - exercised only without timm
    raise ImportError("ndpe.timm needs timm: pip install timm (or pip install 'ndpe[timm]')") from err

from timm.layers import Attention as _TimmAttention
from timm.layers import Format, resample_abs_pos_embed
from timm.layers.attention import AttentionRope
from timm.layers.pos_embed_sincos import RotaryEmbeddingCat, RotaryEmbeddingDinoV3
from timm.models.eva import Eva, EvaAttention
from timm.models.naflexvit import NaFlexVit, calculate_naflex_grid_sizes
from timm.models.vision_transformer import VisionTransformer

from .timm_windows import WINDOWED
from .timm_windows import use as use_windows

__all__ = ["NdpeAttention", "use"]


class _Holder:
    """The encoding of the current forward, shared by the model's ``_pos_embed`` and its attention modules."""
    pos: PosOut | None = None


class NdpeAttention(nn.Module):
    """A timm ``Attention``, ``AttentionRope`` or ``EvaAttention`` with ndpe's encoding: the wrapped module's own weights and q, k, v,
    q/k norms, gate, output norm and projection, with the encoding applied between by :func:`ndpe.apply.attention`."""

    def __init__(self, attn: nn.Module, holder: _Holder):
        super().__init__()
        if not isinstance(attn, (_TimmAttention, AttentionRope, EvaAttention)):
            raise TypeError(f"ndpe.timm supports timm's Attention, AttentionRope and EvaAttention, got "
                            f"{type(attn).__name__}")
        self.attn = attn
        self._holder = holder
        self.register_state_dict_post_hook(_timm_keys)  # its weights under timm's names: a timm checkpoint loads
        self.register_load_state_dict_pre_hook(_wrapped_keys)

    def _qkv(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """q, k, v ``(B, heads, N, head_dim)`` as the wrapped module computes them (key/value heads repeated for
        grouped-query attention), after its q/k norms."""
        a: Any = self.attn
        B, N, _ = x.shape
        if getattr(a, "qkv", None) is None:  # separate projections (Eva qkv_fused=False, AttentionRope)
            kv_heads = getattr(a, "num_kv_heads", a.num_heads)
            q = a.q_proj(x).reshape(B, N, a.num_heads, -1).transpose(1, 2)
            k, v = (proj(x).reshape(B, N, kv_heads, -1).transpose(1, 2) for proj in (a.k_proj, a.v_proj))
        else:
            if getattr(a, "q_bias", None) is not None:  # EVA's q / v biases (k has none)
                bias = torch.cat((a.q_bias, a.k_bias, a.v_bias))
                qkv = a.qkv(x) + bias if a.qkv_bias_separate else F.linear(x, a.qkv.weight, bias)
            else:
                qkv = a.qkv(x)
            q, k, v = qkv.reshape(B, N, 3, a.num_heads, -1).permute(2, 0, 3, 1, 4).unbind(0)
        q, k = a.q_norm(q), a.k_norm(k)
        groups = getattr(a, "num_kv_groups", 1)
        if groups > 1:  # head h uses kv head h // groups (timm's repeat_interleave)
            k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        return q, k, v

    def forward(self, x: Tensor, rope: Any = None, attn_mask: Tensor | None = None, is_causal: bool = False) -> Tensor:
        """The wrapped timm attention on ``x`` ``(B, N, dim)`` with the model's ndpe encoding of this forward; ``rope``
        (timm's own) is ignored, ``attn_mask`` is added to the encoding's bias."""
        a: Any = self.attn
        B, N, _ = x.shape
        gate = a.gate(x).sigmoid() if getattr(a, "gate", None) is not None else None
        q, k, v = self._qkv(x)  # (B, heads, N, head_dim)
        drop = a.attn_drop.p if self.training else 0.0
        out = apply_attention(q, k, v, self._holder.pos, attn_mask=attn_mask, is_causal=is_causal, dropout_p=drop, x=x)
        out = a.norm(out.transpose(1, 2).reshape(B, N, -1))
        if gate is not None:
            out = out * gate
        return a.proj_drop(a.proj(out))


def _timm_keys(module: nn.Module, state_dict: dict, prefix: str, local_metadata: Any) -> None:
    """``NdpeAttention``'s state-dict keys as the wrapped attention's in timm (``attn.qkv.weight``, not
    ``attn.attn.qkv.weight``), the dict's order kept."""
    inner = prefix + "attn."
    items = [(prefix + k[len(inner):] if k.startswith(inner) else k, v) for k, v in state_dict.items()]
    state_dict.clear()
    state_dict.update(items)


def _wrapped_keys(module: nn.Module, state_dict: dict, prefix: str, *args: Any) -> None:
    """Load timm's keys (and those ndpe saved before it used them) into the wrapped attention."""
    inner = prefix + "attn."
    for key in [k for k in state_dict if k.startswith(prefix) and not k.startswith(inner)]:
        state_dict[inner + key[len(prefix):]] = state_dict.pop(key)


def use(model: Any, kind: str, **options: Any) -> Any:
    """Make the timm ``model`` (``VisionTransformer`` or ``Eva``) use ndpe's ``kind`` (see the module doc);
    returns the same model, changed in place (its class becomes a subclass that encodes in ``_pos_embed``)."""
    if isinstance(model, WINDOWED):  # relative-bias families (Swin, MaxViT, BEiT, ViT-RelPos): ndpe/timm_windows.py
        return use_windows(model, kind, **options)
    if not isinstance(model, (VisionTransformer, Eva, NaFlexVit)):
        raise TypeError(f"ndpe.timm.use supports timm's VisionTransformer, Eva and NaFlexVit (and Swin V1 / V2, MaxViT, "
                        f"BEiT, ViT-RelPos), got {type(model).__name__}")
    return _use(model, kind, options)


def _check_supported(model: Any) -> None:
    """Refuse, before changing anything, a model whose embedding or blocks ``use`` cannot take over: a subclass with
    its own ``_pos_embed`` (DeiT's distilled model adds its table there), a block without one timm attention at
    ``.attn`` (parallel blocks)."""
    base = next(c for c in (NaFlexVit, Eva, VisionTransformer) if isinstance(model, c))
    hook = "_forward_embeds" if base is NaFlexVit else "_pos_embed"
    if getattr(type(model), hook) is not getattr(base, hook):
        raise TypeError(f"ndpe.timm.use encodes in timm's {base.__name__}.{hook}; {type(model).__name__} has its own "
                        f"{hook}, which ndpe cannot take over")
    for i, blk in enumerate(model.blocks):
        if not isinstance(getattr(blk, "attn", None), (_TimmAttention, AttentionRope, EvaAttention)):
            raise TypeError(f"ndpe.timm.use replaces each block's attention (.attn: timm's Attention, AttentionRope "
                            f"or EvaAttention); block {i} is a {type(blk).__name__} without one")


def _use(model: Any, kind: str, options: dict) -> Any:
    if getattr(model, "ndpe_pe", None) is not None:
        raise ValueError("this model already uses an ndpe encoding (model.ndpe_pe): build a fresh model to use another")
    _check_supported(model)
    attn = model.blocks[0].attn
    if kind == "learned":
        options = {**_table_options(model), **options}
    options, follow = _eva_rope(model, kind, options)
    pe = make(dims=2, kind=kind, dim=attn.num_heads * attn.head_dim, heads=attn.num_heads, **options)
    if pe.cat_dim:
        raise ValueError(f"kind {kind!r} concatenates {pe.cat_dim} channels to the tokens; a timm model's token width "
                         "is fixed: use a kind that adds, rotates or biases")
    if hasattr(model, "embeds") and getattr(model, "patch_drop", None) is not None:
        raise ValueError("ndpe.timm.use: NaFlexVit's patch dropout reorders tokens after the encoding; build the "
                         "model with patch_drop_rate=0")
    if not isinstance(model, NaFlexVit):  # NaFlexVit takes any size as it is
        _check_patch_drop(model, pe, kind)
        _take_any_size(model)
        model._ndpe_from_table = isinstance(pe, Learned) and not pe.factorized and model.pos_embed is not None
        if model._ndpe_from_table:
            _start_from_table(cast(Learned, pe), model)
        model.register_load_state_dict_pre_hook(_load_timm_table)  # a timm checkpoint loaded after use()
    holder = _Holder()
    keep_table = _keeps_table(model, pe)
    model.ndpe_pe = pe
    model._ndpe_holder = holder
    model._ndpe_follow = follow
    if hasattr(model, "embeds") and not keep_table:  # NaFlexVit: its embedding module holds the tables
        model.embeds.pos_embed_type = "none"
        for name in ("pos_embed", "pos_embed_y", "pos_embed_x"):
            if getattr(model.embeds, name, None) is not None:
                setattr(model.embeds, name, None)
    elif not keep_table:
        model.pos_embed = None
    if hasattr(model, "rope"):  # Eva's and NaFlexVit's rope module
        model.rope = None
    for blk in model.blocks:
        blk.attn = NdpeAttention(blk.attn, holder)
    model.__class__ = _encoding_class(type(model))
    return model


def _eva_rope(model: Any, kind: str, options: dict) -> tuple[dict, tuple | None]:
    """EVA's own rope, where it is timm's ``RotaryEmbeddingCat`` of index coordinates (EVA02, the ``vit_*_rope_*`` and
    Perception Encoder models) or ``RotaryEmbeddingDinoV3`` (DINOv3, LingBot): ``"rope"`` with no options takes its
    theta (``temperature``), pairing (``rotate_half``), grid indexing (and DINOv3's centred coordinates and periods);
    a ``"rope"`` of index coordinates and no scaling of its own follows the model's ``grid_offset`` and
    ``ref_feat_shape`` on every grid, as timm's ``dynamic_img_size`` model does (:func:`_eva_positions`). Returns the
    options and ``(ref_feat_shape, grid_offset)`` to follow (None: ndpe's own coordinates)."""
    rope: Any = getattr(model, "rope", None)
    dinov3 = isinstance(rope, RotaryEmbeddingDinoV3) and rope.normalize_coords == "separate" and not rope.grid_offset \
        and rope.min_period is None and rope.max_period is None
    cat = isinstance(rope, RotaryEmbeddingCat) and not rope.in_pixels
    if kind != "rope" or not (cat or dinov3):
        return options, None
    if not options:
        options = {"theta": float(rope.temperature), "pairing": "half" if rope.rotate_half else "interleaved",
                   "grid_indexing": rope.grid_indexing, **({"coords": "centered", "periods": True} if dinov3 else {})}
    follow = cat and (rope.ref_feat_shape is not None or rope.grid_offset) \
        and not {"scaling", "scale", "coords"} & options.keys()
    if not follow:
        return options, None
    return options, (tuple(int(r) for r in rope.ref_feat_shape) if rope.ref_feat_shape is not None else None,
                     float(rope.grid_offset))


def _eva_positions(pe: Any, grid: tuple[int, ...], follow: tuple | None) -> dict[str, Tensor]:
    """``positions=`` for EVA's ``grid_offset`` and ``ref_feat_shape`` on ``grid``: index ``i`` of axis ``a`` at
    ``(i + offset) * ref[a] / grid[a]`` (timm's ``build_fourier_pos_embed``), ``{}`` where there is nothing to follow."""
    if follow is None:
        return {}
    ref, offset = follow
    scale = torch.tensor([r / g for r, g in zip(ref, grid)] if ref is not None else [1.0] * len(grid),
                         device=pe.device)
    return {"positions": (pe.coords(grid) + offset) * scale}


def _check_patch_drop(model: Any, pe: Any, kind: str) -> None:
    """Refuse a kind that would meet other tokens than it encoded in a model that drops patches. A
    ``VisionTransformer`` keeps a random subset of the tokens after ``_pos_embed``: what is added to the tokens there
    follows them, a rotation, bias or logits term built for every patch does not. ``Eva`` drops them inside its
    ``_pos_embed``, before ndpe's encoding meets the tokens: only a kind with no position fits."""
    if getattr(model, "patch_drop", None) is None or isinstance(model.patch_drop, nn.Identity):
        return
    eva = isinstance(model, Eva)
    fields = attention_fields(pe(tuple(model.patch_embed.grid_size), num_prefix=model.num_prefix_tokens), eva)
    if fields:
        instead = "" if eva else ", or use a kind that adds to the tokens (learned, sinusoidal)"
        raise ValueError(f"ndpe.timm.use: the model drops patches (patch_drop_rate > 0) where kind {kind!r} would act "
                         f"({', '.join(fields)}) on every patch: build the model with patch_drop_rate=0{instead}")


def _take_any_size(model: Any) -> None:
    """Let ``model`` take any image size, as timm builds it with ``dynamic_img_size=True``: the patch embedding skips
    its size check and hands ``_pos_embed`` the ``(B, H, W, C)`` grid, flattened there."""
    if model.dynamic_img_size:
        return
    embed = model.patch_embed
    if not all(hasattr(embed, name) for name in ("strict_img_size", "flatten", "output_fmt")):
        raise ValueError(f"ndpe.timm.use cannot make the patch embedding {type(embed).__name__} take other image "
                         "sizes (it has no strict_img_size / output_fmt): build the model with dynamic_img_size=True")
    embed.strict_img_size, embed.flatten, embed.output_fmt = False, False, Format.NHWC
    model.dynamic_img_size = True


def _table_options(model: Any) -> dict[str, Any]:
    """``learned`` options that fit the model's table: its grid, resized to other grids as timm's ``_pos_embed``
    does (bicubic, antialiased); ``{}`` for a model without one."""
    if isinstance(model, NaFlexVit) or model.pos_embed is None:
        return {}
    return {"grid_shape": tuple(model.patch_embed.grid_size), "resize": "bicubic"}


@torch.no_grad()
def _start_from_table(pe: Learned, model: Any) -> None:
    """Copy the model's ``pos_embed`` into ``pe``'s table (resampled by timm's ``resample_abs_pos_embed`` to another
    ``grid_shape``) and fold its class / register rows into those tokens, as timm's ``_load_weights`` does for a
    table without them: the model's outputs stay what they were."""
    tokens = {name: token for name in ("cls_token", "reg_token") if (token := getattr(model, name)) is not None}
    table, folded = _from_timm_table(pe, model, model.pos_embed, tokens)
    pe.table.copy_(table)
    for name, token in folded.items():
        getattr(model, name).copy_(token)


def _from_timm_table(pe: Learned, model: Any, pos_embed: Tensor, tokens: dict[str, Tensor]
                     ) -> tuple[Tensor, dict[str, Tensor]]:
    """``pe``'s table from a timm ``pos_embed`` ``(1, P + h * w, C)`` at the model's grid, and the class / register
    tokens (``tokens``, by name) with the table's prefix rows folded in (timm's prefix order: class, then registers)."""
    num_prefix = 0 if model.no_embed_class else model.num_prefix_tokens
    grid = list(model.patch_embed.grid_size)
    if pos_embed.dim() != 3 or pos_embed.shape[1] != num_prefix + grid[0] * grid[1]:
        raise ValueError(f"a timm pos_embed for this model is (1, {num_prefix} + {grid[0]} x {grid[1]}, C), got "
                         f"{tuple(pos_embed.shape)}")
    prefix, patches = pos_embed[:, :num_prefix], pos_embed[:, num_prefix:]  # (1, P, C), (1, h * w, C)
    patches = resample_abs_pos_embed(patches, new_size=list(pe.table_shape), old_size=grid, num_prefix_tokens=0)
    folded: dict[str, Tensor] = {}
    start = 0
    for name in ("cls_token", "reg_token"):
        if getattr(model, name) is not None and num_prefix:
            n = getattr(model, name).shape[1]
            if name not in tokens:
                raise ValueError(f"a timm checkpoint's pos_embed holds {name}'s position, which ndpe folds into "
                                 f"{name}: load {name} with it")
            folded[name] = tokens[name] + prefix[:, start:start + n]
            start += n
    return rearrange(patches, "1 (h w) c -> h w c", h=pe.table_shape[0]), folded


def _load_timm_table(model: Any, state_dict: dict, prefix: str, *args: Any) -> None:
    """A ``load_state_dict`` pre-hook of a model whose ``pos_embed`` ``use`` removed: a timm checkpoint's table
    becomes ``learned``'s (as at ``use``: resampled, its prefix rows folded into the checkpoint's class / register
    tokens); another kind has no place for it (an unexpected key: load with ``strict=False``)."""
    key = prefix + "pos_embed"
    if key not in state_dict or getattr(model, "pos_embed", None) is not None or not model._ndpe_from_table:
        return
    tokens = {name: state_dict[prefix + name] for name in ("cls_token", "reg_token") if prefix + name in state_dict}
    table, folded = _from_timm_table(model.ndpe_pe, model, state_dict.pop(key), tokens)
    state_dict[prefix + "ndpe_pe.table"] = table
    state_dict.update({prefix + name: token for name, token in folded.items()})


def _keeps_table(model: Any, pe: Any) -> bool:
    """Whether the model's learned absolute table stays: in a model with a table and a rope (EVA02; NaFlexVit built
    with both) ndpe's kind takes the rope's place, and the table stays, as in the model, unless the kind is
    position-free (``none``) or adds to the tokens itself (``learned``, ``sinusoidal``, ...)."""
    naflex = hasattr(model, "embeds")  # NaFlexVit's tables live in model.embeds
    has_table = model.embeds.pos_embed_type != "none" if naflex else model.pos_embed is not None
    if getattr(model, "rope", None) is None or not has_table or pe.position_free:
        return False
    grid = model.embeds.pos_embed_grid_size if naflex else model.patch_embed.grid_size  # the table's own grid
    probe = pe(tuple(grid), num_prefix=model.num_prefix_tokens)
    return probe.add is None and probe.tokens is None


_CLASSES: dict[type, type] = {}


def _encoding_class(base: type) -> type:
    """``base`` with a ``_pos_embed`` that also encodes (one subclass per timm class)."""
    if base not in _CLASSES:
        def _pos_embed(self, x: Tensor):
            grid = tuple(x.shape[1:3]) if x.dim() == 4 else tuple(self.patch_embed.grid_size)
            out = getattr(base, "_pos_embed")(self, x)  # prefix tokens concatenated (and the table, where it stays)
            tokens = out[0] if isinstance(out, tuple) else out  # Eva returns (tokens, rope)
            pos = self.ndpe_pe(grid, num_prefix=self.num_prefix_tokens, dtype=tokens.dtype,
                               **_eva_positions(self.ndpe_pe, grid, getattr(self, "_ndpe_follow", None)))
            self._ndpe_holder.pos = pos  # for this forward's attention modules
            tokens = apply_tokens(tokens, pos)
            return (tokens, None) if isinstance(out, tuple) else tokens

        def _forward_embeds(self, x: Tensor, patch_coord, patch_valid, attn_mask):
            out = getattr(base, "_forward_embeds")(self, x, patch_coord, patch_valid, attn_mask)  # no rope
            tokens, p = out["patches"], self.num_prefix_tokens
            if patch_coord is None:  # one grid for the batch
                size = self.embeds.patch_size
                pos = self.ndpe_pe((x.shape[-2] // size[0], x.shape[-1] // size[1]), num_prefix=p, dtype=tokens.dtype)
            else:  # NaFlex: one grid per sample, padded
                pos = _naflex_pos(self.ndpe_pe, patch_coord, patch_valid, p, tokens.shape[1], tokens.dtype)
            self._ndpe_holder.pos = pos
            return {**out, "patches": apply_tokens(tokens, pos)}

        name = f"Ndpe{base.__name__}"
        body = {"_forward_embeds": _forward_embeds} if issubclass(base, NaFlexVit) else {"_pos_embed": _pos_embed}
        _CLASSES[base] = globals()[name] = type(name, (base,), {**body, "__module__": __name__,
                                                                "__qualname__": name})  # picklable by name
    return _CLASSES[base]


def _naflex_pos(pe, patch_coord: Tensor, patch_valid: Tensor | None, num_prefix: int, length: int,
                dtype: torch.dtype) -> PosOut:
    """One ``PosOut`` for a NaFlex batch: each sample encoded for its own grid (its patches must be that grid in
    row-major order, as timm's ``patchify_image`` makes them), padded to ``length`` tokens (identity; timm's
    ``attn_mask`` keeps the padding out) and stacked along the batch."""
    if patch_coord.is_floating_point() and not torch.equal(patch_coord, patch_coord.round()):
        raise ValueError("ndpe.timm.use on a NaFlex batch: patch_coord must hold whole (row, col) patch indices, got "
                         f"fractions (e.g. {patch_coord[patch_coord != patch_coord.round()][0].item():g})")
    grids = calculate_naflex_grid_sizes(patch_coord)
    outs = []
    for b, (h, w) in enumerate(grids):
        n = h * w
        rows, cols = torch.meshgrid(torch.arange(h, device=patch_coord.device), torch.arange(w, device=patch_coord.device),
                                    indexing="ij")
        expect = torch.stack([rows.reshape(-1), cols.reshape(-1)], -1)
        valid = n if patch_valid is None else int(patch_valid[b].sum())
        if valid != n or not torch.equal(patch_coord[b, :n].long(), expect):
            raise ValueError(f"ndpe.timm.use on a NaFlex batch: sample {b}'s patches are not its {h} x {w} grid in "
                             "row-major order followed by padding (timm's patchify_image layout)")
        outs.append(pe((h, w), num_prefix=num_prefix, dtype=dtype))
    return stack(outs, length, [num_prefix + h * w for h, w in grids])

