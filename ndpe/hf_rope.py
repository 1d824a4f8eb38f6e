"""Hugging Face transformers glue: the ``rope`` of a HF config, and cos/sin in HF's layout.

transformers is not a dependency: these functions only read a config's attributes.

- :func:`from_hf_rope` reads ``config.rope_parameters`` (transformers >= 5) or ``rope_scaling`` +
  ``rope_theta`` (older configs), ``head_dim`` (or ``hidden_size // num_attention_heads``),
  ``partial_rotary_factor`` and ``max_position_embeddings``, and builds the equivalent ``rope``:
  1D (``dims=1``), or 3D M-RoPE when the parameters hold ``mrope_section`` (Qwen2-VL; Qwen3-VL
  configs, ``model_type`` starting with ``qwen3_vl``, or ``mrope_interleaved=True``, get the
  interleaved layout), or the 2D ``(h, w)`` rope of a vision tower's ``rope_type`` ``axial`` (Qwen2.5-VL,
  Qwen3-VL: ``axis_dims=(head_dim / 2, head_dim / 2)``). HF ``rope_type`` -> ndpe ``scaling``: ``default`` -> None, ``linear``,
  ``dynamic`` -> ``"dynamic-ntk"`` (``train_shape = max_position_embeddings``), ``yarn``, ``llama3``,
  ``longrope`` (``train_shape = original_max_position_embeddings``; a missing ``factor`` is
  ``max_position_embeddings / original_max_position_embeddings``, as HF): one :class:`ndpe.RopeScaling`
  (:meth:`ndpe.RopeScaling.from_hf`), the encoding's ``rope_scaling``. Missing values are filled as transformers
  5.23 fills them (``rope_theta`` from the config, the original length from ``max_position_embeddings``, ...);
  every error names the ``rope_parameters`` key. Per-layer-type parameters (Gemma 3's ``sliding_attention`` and
  ``full_attention``) give ``{layer_type: rope}``, each with its layer type's ``head_dim`` where
  ``config.per_layer_config`` sets one (Gemma 4).
- :func:`hf_cos_sin` returns ``(cos, sin)`` of shape ``(B, T, rot_dim)`` as HF's rotary embedding
  module does (``emb = cat(freqs, freqs)``, times the attention factor), for ``position_ids``
  ``(B, T)`` (or ``(3, B, T)`` for M-RoPE, HF's layout), ready for ``apply_rotary_pos_emb`` or a
  decoder layer's ``position_embeddings=``.

>>> from types import SimpleNamespace
>>> import torch, ndpe
>>> cfg = SimpleNamespace(head_dim=64, max_position_embeddings=4096, rope_parameters=dict(
...     rope_type="llama3", rope_theta=500000.0, factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
...     original_max_position_embeddings=512))
>>> pe = ndpe.from_hf_rope(cfg)
>>> pe.scaling, pe.train_shape
('llama3', (512.0,))
>>> cos, sin = ndpe.hf_cos_sin(pe, torch.arange(10)[None])
>>> cos.shape
torch.Size([1, 10, 64])
"""
from __future__ import annotations

from typing import Any, cast

import torch
from torch import Tensor

from .checks import check_bool, check_float_dtype
from .kinds.rope import RoPE
from .registry import make
from .scaling import SCALINGS
from .scaling_config import RopeScaling, hf_types

__all__ = ["from_hf_rope", "hf_cos_sin"]


def _config_dict(config: Any, name: str) -> dict | None:
    value = getattr(config, name, None)
    if value is not None and not isinstance(value, dict):
        raise TypeError(f"config.{name} must be a dict of rope parameters or None, got {type(value).__name__}")
    return value


def _rope_parameters(config: Any) -> dict[str | None, dict]:
    """The config's rope parameter dicts, standardized as Hugging Face's ``RotaryEmbeddingConfigMixin`` does
    (transformers 5.23 ``convert_rope_params_to_dict`` + ``standardize_rope_params``): ``{None: params}`` for one
    rope, ``{layer_type: params}`` for per-layer-type ones (Gemma 3's ``sliding_attention`` / ``full_attention``;
    a ``None`` entry, a layer type without rope, is left out). ``rope_scaling`` (the older name) or
    ``rope_parameters``; a missing ``rope_theta`` is ``config.rope_theta`` (else ``config.default_theta``, 10000),
    a missing ``partial_rotary_factor`` ``config.partial_rotary_factor``, a missing ``rope_type`` its older name
    ``type`` (else ``config.default_rope_type``, ``"default"``); for ``llama3``, ``yarn`` and ``longrope``
    ``original_max_position_embeddings`` is ``config.original_max_position_embeddings`` where a one-rope config
    has one (it wins, as HF), else ``max_position_embeddings``."""
    scaling, parameters = _config_dict(config, "rope_scaling"), _config_dict(config, "rope_parameters")
    if scaling and parameters and scaling != parameters:
        raise ValueError(f"config.rope_scaling {scaling} and config.rope_parameters {parameters} disagree: keep one "
                         "(rope_parameters, the newer name)")
    params = dict(scaling or parameters or {})
    labels = set(getattr(config, "layer_types", None) or ()) | set(getattr(config, "_rope_type_labels", None) or ())
    nested = sorted(k for k, v in params.items() if isinstance(v, dict) or (k in labels and v is None))
    if not nested:
        return {None: _standardize(params, config, nested=False)}
    flat = sorted(k for k in params if k not in nested)
    if flat:
        raise ValueError(f"rope_parameters mixes per-layer-type dicts {nested} with flat keys {flat}; expected one "
                         "or the other")
    return {k: _standardize(dict(params[k]), config, nested=True) for k in nested if params[k] is not None}


# what a rope parameter dict may hold: HF's shared keys, every scaling type's options (ndpe.scaling), and keys that
# models read elsewhere (Ministral 3 / Mistral 4 scale the queries with llama_4_scaling_beta, not the rotation)
KNOWN_KEYS = {"rope_type", "type", "rope_theta", "partial_rotary_factor", "factor", "original_max_position_embeddings",
              "max_position_embeddings", "mrope_section", "mrope_interleaved", "llama_4_scaling_beta"}


def _check_keys(params: dict) -> None:
    known = KNOWN_KEYS.union(*(SCALINGS[name].options for name in SCALINGS), {SCALINGS[n].hf_factor for n in SCALINGS})
    unknown = sorted(str(k) for k in params if k not in known)
    if unknown:
        raise ValueError(f"rope_parameters holds unknown key(s) {unknown}; expected some of {sorted(known)}")


def _standardize(params: dict, config: Any, *, nested: bool) -> dict:
    _check_keys(params)
    theta = getattr(config, "rope_theta", None)
    params.setdefault("rope_theta", theta if theta is not None else getattr(config, "default_theta", 10000.0))
    if getattr(config, "partial_rotary_factor", None) is not None:
        params.setdefault("partial_rotary_factor", config.partial_rotary_factor)
    params.setdefault("rope_type", params.get("type", "default"))  # the oldest configs say "type"
    default_type = getattr(config, "default_rope_type", "default")
    if params["rope_type"] == "default" and isinstance(default_type, str) and default_type != "default":
        params["rope_type"] = default_type
    if params["rope_type"] in ("llama3", "yarn", "longrope"):
        if not nested and getattr(config, "original_max_position_embeddings", None) is not None:
            params["original_max_position_embeddings"] = config.original_max_position_embeddings
        else:
            params.setdefault("original_max_position_embeddings", getattr(config, "max_position_embeddings", None))
    return params


def _number(params: dict, key: str) -> float:
    """``rope_parameters[key]`` as a float, refused in one line naming the key."""
    value = params[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"rope_parameters[{key!r}] must be a number, got {value!r}")
    return float(value)


def from_hf_rope(config: Any, *, dim: int | None = None, heads: int | None = None, per_layer: bool = False,
                 **overrides: Any) -> RoPE | dict[str, RoPE] | list[RoPE | None]:
    """The ``rope`` encoding equal to the rotary embedding of the HF ``config`` (see the module doc); for a config
    with per-layer-type rope parameters (Gemma 3: ``sliding_attention`` theta 10k, ``full_attention`` theta 1M with
    linear x8), ``{layer_type: rope}``, one per type that has a rope.

    ``per_layer=True``: one entry per layer (``config.num_hidden_layers``), the rope that layer applies or None
    where it applies none, so a model's layers can be set from it. A layer takes no rope where the config's
    ``no_rope_layers`` says 0 (iRoPE: Llama 4, SmolLM3; despite its name the list holds 1 for a layer that uses
    rope, 0 for a NoPE layer, as transformers reads it; missing, it is built as transformers does from
    ``no_rope_layer_interval``: every ``interval``-th layer NoPE) or where its ``layer_types`` entry has no rope
    parameters. Layers of one type share one encoding.

    ``dim`` / ``heads`` default to one head of ``head_dim``; ``overrides`` are passed to
    ``ndpe.make`` over the options read from the config (e.g. ``pairing="interleaved"``).

    >>> from types import SimpleNamespace
    >>> cfg = SimpleNamespace(head_dim=64, num_hidden_layers=4, no_rope_layers=[1, 1, 1, 0],
    ...                       rope_parameters=dict(rope_type="default", rope_theta=5e5))
    >>> [pe is not None for pe in from_hf_rope(cfg, per_layer=True)]
    [True, True, True, False]
    """
    check_bool(per_layer, "per_layer")
    ropes = {k: _from_parameters(p, _layer_config(config, k), dim, heads, overrides)
             for k, p in _rope_parameters(config).items()}
    if per_layer:
        return _per_layer(config, ropes)
    return ropes[None] if None in ropes else cast("dict[str, RoPE]", ropes)


def _per_layer(config: Any, ropes: dict[str | None, RoPE]) -> list[RoPE | None]:
    """Each layer's rope (None: a NoPE layer, or a layer type without rope parameters)."""
    layers = getattr(config, "num_hidden_layers", None)
    if not isinstance(layers, int) or isinstance(layers, bool) or layers < 1:
        raise ValueError(f"per_layer=True needs config.num_hidden_layers (an int >= 1), got {layers!r}")
    uses = _uses_rope(config, layers)
    if None in ropes:
        return [ropes[None] if use else None for use in uses]
    types = getattr(config, "layer_types", None)
    if not isinstance(types, (list, tuple)) or len(types) < layers:
        raise ValueError(f"per-layer-type rope parameters {sorted(map(str, ropes))} need config.layer_types, one per layer "
                         f"({layers}), got {types!r}")
    return [ropes.get(t) if use else None for t, use in zip(types, uses)]


def _uses_rope(config: Any, layers: int) -> list[bool]:
    """Whether each layer applies rope: ``config.no_rope_layers`` (1: rope, 0: NoPE, as transformers' Llama 4 and
    SmolLM3 read it), else transformers' default from ``no_rope_layer_interval``, else every layer."""
    flags = getattr(config, "no_rope_layers", None)
    interval = getattr(config, "no_rope_layer_interval", None)
    if not flags and interval is not None:  # transformers builds it so (Llama 4 also for an empty list)
        if not isinstance(interval, int) or isinstance(interval, bool) or interval < 1:
            raise ValueError(f"config.no_rope_layer_interval must be an int >= 1, got {interval!r}")
        return [(i + 1) % interval != 0 for i in range(layers)]
    if flags is None:
        return [True] * layers
    if (not isinstance(flags, (list, tuple)) or len(flags) < layers
            or not all(f in (0, 1) and not isinstance(f, float) for f in flags)):
        raise ValueError(f"config.no_rope_layers must list 1 (rope) or 0 (NoPE) for each of the {layers} layers, "
                         f"got {flags!r}")
    return [bool(f) for f in flags[:layers]]


def _layer_config(config: Any, layer_type: str | None) -> Any:
    """The config that holds ``layer_type``'s head_dim: ``config.per_layer_config[layer_type]`` where the head size
    varies by layer type (Gemma 4: sliding layers 256, full ones 512), else ``config``."""
    per_layer = getattr(config, "per_layer_config", None) if layer_type is not None else None
    if per_layer is None:
        return config
    try:
        return per_layer[layer_type]
    except (KeyError, IndexError, TypeError, ValueError):  # transformers 5.23: ValueError for a type no layer has
        return config


def _from_parameters(p: dict, config: Any, dim: int | None, heads: int | None, overrides: dict) -> RoPE:
    """The ``rope`` of one standardized parameter dict."""
    max_pos = getattr(config, "max_position_embeddings", None)
    rope_type = p.get("rope_type")
    supported = hf_types().keys() | {"proportional", "axial"}
    if not isinstance(rope_type, str) or rope_type not in supported:
        raise ValueError(f"rope_parameters['rope_type'] {rope_type!r} has no ndpe equivalent; supported: "
                         f"{sorted(supported)}")
    proportional = p.get("rope_type") == "proportional"  # p-RoPE: the whole head, its slowest frequencies 0
    axial = p.get("rope_type") == "axial"  # the Qwen2.5-VL / Qwen3-VL vision towers: (h, w), head_dim / 2 each
    if axial:
        p = {**p, "rope_type": "default"}
    if proportional:  # HF divides the series by `factor`: linear scaling
        p = {**p, "rope_type": "linear" if p.get("factor", 1.0) not in (None, 1, 1.0) else "default"}
    scaling = RopeScaling.from_hf(p, max_pos)  # checks rope_type first
    head_dim = getattr(config, "head_dim", None)
    if head_dim is None:
        hidden, heads_ = getattr(config, "hidden_size", None), getattr(config, "num_attention_heads", None)
        if not isinstance(hidden, int) or not isinstance(heads_, int) or heads_ < 1:
            raise ValueError("the config needs head_dim, or hidden_size and num_attention_heads (ints), got "
                             f"hidden_size={hidden!r}, num_attention_heads={heads_!r}")
        head_dim = hidden // heads_
    if not isinstance(head_dim, int) or isinstance(head_dim, bool) or head_dim < 2:
        raise ValueError(f"config.head_dim must be an int >= 2, got {head_dim!r}")
    partial = _number(p, "partial_rotary_factor") if p.get("partial_rotary_factor") is not None else 1.0
    if not 0.0 < partial <= 1.0:
        raise ValueError(f"rope_parameters['partial_rotary_factor'] must be in (0, 1], got {partial!r}")
    rot_dim = int(head_dim * partial)
    opts: dict[str, Any] = {"theta": _number(p, "rope_theta"), "scaling": scaling}
    if proportional:  # partial_rotary_factor is the share of frequencies kept, over the whole head
        rot_dim = head_dim - head_dim % 2
        opts["proportion"] = partial
    elif rot_dim % 2 and not axial and p.get("mrope_section") is None and "axis_dims" not in overrides:
        rot_dim, opts["theta"] = _odd_width(rot_dim, head_dim, opts["theta"], scaling)
    dims = 1
    if axial:
        if head_dim % 4:
            raise ValueError(f"rope_type 'axial' gives h and w head_dim / 2 channels each: head_dim must divide by 4, "
                             f"got {head_dim}")
        dims, opts["axis_dims"] = 2, (head_dim // 2, head_dim // 2)
    elif p.get("mrope_section") is not None:
        if str(getattr(config, "model_type", "")).startswith("hunyuan_vl"):
            raise ValueError("HunYuanVL's rope (xdrope) turns the two halves of a pair by the angles of two axes: it is "
                             "no rotation, so ndpe has no equivalent (its mrope_section is not Qwen2-VL's M-RoPE)")
        section = p["mrope_section"]
        if not isinstance(section, (list, tuple)) or not all(isinstance(n, int) and not isinstance(n, bool)
                                                              for n in section):
            raise ValueError(f"rope_parameters['mrope_section'] must be a list of ints (rotary pairs per axis), "
                             f"got {section!r}")
        if len(section) != 3:
            raise ValueError(f"rope_parameters['mrope_section'] must have 3 entries, the rotary pairs of the t, h and w "
                             f"axes of HF's M-RoPE ids (3, B, T), got {section!r}")
        dims = len(section)
        interleaved = p.get("mrope_interleaved", str(getattr(config, "model_type", "")).startswith("qwen3_vl"))
        opts.update(mrope_section=tuple(section), mrope_interleaved=bool(interleaved))
    else:
        opts["axis_dims"] = (rot_dim,)
    if _interleaved(config):
        opts["pairing"] = "interleaved"
    opts.update(overrides)
    pe = make(dims=dims, kind="rope", dim=dim or head_dim, heads=heads or (dim or head_dim) // head_dim, **opts)
    return cast(RoPE, pe)


# the model types whose attention rotates interleaved pairs (2i, 2i + 1) (transformers' rotate_half over x[..., ::2]
# and x[..., 1::2], or Llama 4's complex freqs_cis); every other one rotates HF's half pairs (i, i + rot_dim / 2).
# benchmarks/scan_dropins.py checks both lists against every decoder of the installed transformers.
INTERLEAVED = {"cohere", "cohere2", "cohere2_moe", "ernie4_5", "ernie4_5_moe", "glm", "glm4", "helium", "llama4",
               "llama4_text", "glm4v_text", "glm_ocr_text"}
# model types whose rope has no ndpe equivalent (refused in one line rather than built wrong)
UNSUPPORTED = {"ernie4_5_vl_moe_text": "deals its frequencies out to (h, w) pairs then t in a layout of its own",
               "nanochat": "rotates by minus the angle (its rotate_half flips the signs)"}


def _interleaved(config: Any) -> bool:
    """Whether the config's model rotates interleaved pairs: its ``model_type`` (:data:`INTERLEAVED`), or DeepSeek's
    ``rope_interleave=True``."""
    model_type = getattr(config, "model_type", None)
    if model_type in UNSUPPORTED:
        raise ValueError(f"the rope of model_type {model_type!r} {UNSUPPORTED[model_type]}: no ndpe equivalent")
    return model_type in INTERLEAVED or getattr(config, "rope_interleave", None) is True


def _odd_width(width: int, head_dim: int, theta: float, scaling: RopeScaling | None) -> tuple[int, float]:
    """An odd rotary width as transformers turns it: ``(width + 1) / 2`` pairs of the series ``theta ** (-2j / width)``
    (Glm4Moe: head_dim 42 x partial_rotary_factor 0.5 = 21 channels, 11 pairs), which is ndpe's series over
    ``width + 1`` channels with ``theta ** ((width + 1) / width)``; the scalings whose formula reads the width
    (dynamic NTK, YaRN, LongRoPE) are refused."""
    if scaling is not None and scaling.type not in ("linear", "llama3"):
        raise ValueError(f"an odd rotary width ({width} channels: head_dim x partial_rotary_factor) with rope_type "
                         f"{scaling.type!r}, whose formula reads the width, has no ndpe equivalent; supported: "
                         "'default', 'linear', 'llama3'")
    if width + 1 > head_dim:
        raise ValueError(f"an odd rotary width of {width} channels rotates {width + 1} of head_dim {head_dim}: "
                         "expected head_dim x partial_rotary_factor below head_dim")
    return width + 1, theta ** ((width + 1) / width)


def hf_cos_sin(pe: RoPE, position_ids: Tensor, *, dtype: torch.dtype | None = None) -> tuple[Tensor, Tensor]:
    """``(cos, sin)`` ``(B, T, rot_dim)`` in HF's layout for ``position_ids`` ``(B, T)``, or ``(3, B, T)``
    (``(dims, B, T)``) for M-RoPE; ``(N, rot_dim)`` for the ``(N, dims)`` ids of an axial N-D rope (a vision tower's
    ``(h, w)`` ids, rope_type ``axial``). ``pe`` must use ``pairing="half"`` (HF's ``rotate_half``)."""
    if not isinstance(pe, RoPE):
        raise TypeError(f"hf_cos_sin needs a 'rope' encoding, got {type(pe).__name__}")
    if pe.pairing != "half":
        raise ValueError(f"HF's rotate_half layout needs pairing='half', got {pe.pairing!r}")
    check_float_dtype(dtype)
    if not isinstance(position_ids, Tensor):
        raise TypeError(f"position_ids must be a tensor, got {type(position_ids).__name__}")
    if position_ids.ndim == 3 and position_ids.shape[0] == pe.dims:  # (dims, B, T), HF's M-RoPE ids
        positions = position_ids.permute(1, 2, 0)
    elif position_ids.ndim == 2 and pe.dims > 1 and pe.mrope_section is None:  # (N, dims) ids of an axial rope
        if position_ids.shape[1] != pe.dims:
            raise ValueError(f"an axial {pe.dims}-D rope takes position_ids of shape (N, {pe.dims}) (a vision tower's "
                             f"ids), got {tuple(position_ids.shape)}")
        cos, sin = hf_cos_sin(pe, position_ids.T[:, None], dtype=dtype)
        return cos[0], sin[0]
    elif position_ids.ndim == 2 and pe.dims == 1:
        positions = position_ids[..., None]
    elif position_ids.ndim == 2:  # text-only ids for M-RoPE: t = h = w
        positions = position_ids[..., None].expand(*position_ids.shape, pe.dims)
    else:
        raise ValueError(f"position_ids must have shape (B, T) or ({pe.dims}, B, T), got {tuple(position_ids.shape)}")
    rot = pe(positions=positions.to(torch.float64)).rot
    assert rot is not None
    cos, sin = rot  # (B, 1, T, rot_dim / 2)
    cos, sin = cos[:, 0], sin[:, 0]
    cos, sin = torch.cat((cos, cos), dim=-1), torch.cat((sin, sin), dim=-1)
    return (cos, sin) if dtype is None else (cos.to(dtype), sin.to(dtype))


def own_rope(pe: RoPE, rotary: Any, config: Any, head_dim: int) -> RoPE:
    """``pe`` (:func:`from_hf_rope` of the config) as the model's ``rotary_emb`` applies it (``rotary``: its
    :class:`ndpe.hf_rotary.ModelRotary`). Where the model's series has another width than the config's
    ``partial_rotary_factor`` gives, the Llama family's default rope ignores the factor (a full series over the head:
    so does ndpe's); a rope the model's attention cannot apply is refused, as transformers' model fails on it."""
    own = getattr(rotary.emb, "inv_freq", None)
    if not isinstance(own, Tensor):
        return pe
    if not rotary.runs_own():
        raise ValueError(f"this model's rope turns {2 * own.numel()} of its {head_dim} head channels "
                         f"(partial_rotary_factor), but its attention cannot apply that: transformers' model cannot "
                         "run this config either")
    if pe.rot_dim == 2 * own.numel():
        return pe
    if 2 * own.numel() != head_dim:
        raise ValueError(f"this model's rope turns {2 * own.numel()} of its {head_dim} head channels, its config's "
                         f"rope {pe.rot_dim}: ndpe cannot follow this model's reading of partial_rotary_factor")
    full = cast(RoPE, from_hf_rope(config, axis_dims=(head_dim,)))  # the model's default rope: the whole head
    if not torch.allclose(full.inv_freq.to(own), own, rtol=1e-5, atol=0):
        raise ValueError(f"this model's rope ignores partial_rotary_factor in a way ndpe cannot follow: its "
                         f"{own.numel()} frequencies are not ndpe's rope over the whole head")
    return full
