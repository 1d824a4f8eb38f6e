"""Hugging Face transformers glue: the ``rope`` of a HF config, and cos/sin in HF's layout.

transformers is not a dependency: these functions only read a config's attributes.

- :func:`from_hf_rope` reads ``config.rope_parameters`` (transformers >= 5) or ``rope_scaling`` +
  ``rope_theta`` (older configs), ``head_dim`` (or ``hidden_size // num_attention_heads``),
  ``partial_rotary_factor`` and ``max_position_embeddings``, and builds the equivalent ``rope``:
  1D (``dims=1``), or 3D M-RoPE when the parameters hold ``mrope_section`` (Qwen2-VL; Qwen3-VL
  configs, ``model_type`` starting with ``qwen3_vl``, or ``mrope_interleaved=True``, get the
  interleaved layout). HF ``rope_type`` -> ndpe ``scaling``: ``default`` -> None, ``linear``,
  ``dynamic`` -> ``"dynamic-ntk"`` (``train_shape = max_position_embeddings``), ``yarn``, ``llama3``,
  ``longrope`` (``train_shape = original_max_position_embeddings``; a missing ``factor`` is
  ``max_position_embeddings / original_max_position_embeddings``, as HF): one :class:`ndpe.RopeScaling`
  (:meth:`ndpe.RopeScaling.from_hf`), the encoding's ``rope_scaling``.
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

from .checks import check_float_dtype
from .kinds.rope import RoPE
from .registry import make
from .scaling import RopeScaling

def _rope_parameters(config: Any) -> dict:
    params = getattr(config, "rope_parameters", None)
    if isinstance(params, dict) and params and all(isinstance(v, dict) for v in params.values()):
        raise ValueError("per-layer-type rope_parameters (e.g. Gemma's sliding / full attention) hold several "
                         f"ropes: pass one of them as config.rope_parameters, got keys {sorted(params)}")
    if not isinstance(params, dict):  # transformers < 5: rope_scaling + rope_theta
        params = dict(getattr(config, "rope_scaling", None) or {})
        params.setdefault("rope_theta", getattr(config, "rope_theta", 10000.0))
    params = dict(params)
    params.setdefault("rope_type", params.get("type", "default"))  # the oldest configs say "type"
    return params


def from_hf_rope(config: Any, *, dim: int | None = None, heads: int | None = None, **overrides: Any) -> RoPE:
    """The ``rope`` encoding equal to the rotary embedding of the HF ``config`` (see the module doc).

    ``dim`` / ``heads`` default to one head of ``head_dim``; ``overrides`` are passed to
    ``ndpe.make`` over the options read from the config (e.g. ``pairing="interleaved"``).
    """
    p = _rope_parameters(config)
    max_pos = getattr(config, "max_position_embeddings", None)
    scaling = RopeScaling.from_hf(p, max_pos)  # checks rope_type first
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    partial = p.get("partial_rotary_factor", getattr(config, "partial_rotary_factor", 1.0)) or 1.0
    rot_dim = int(head_dim * partial)
    rot_dim -= rot_dim % 2
    opts: dict[str, Any] = {"theta": float(p.get("rope_theta", 10000.0)), "scaling": scaling}
    dims = 1
    if p.get("mrope_section") is not None:
        dims = len(p["mrope_section"])
        interleaved = p.get("mrope_interleaved", str(getattr(config, "model_type", "")).startswith("qwen3_vl"))
        opts.update(mrope_section=tuple(int(n) for n in p["mrope_section"]), mrope_interleaved=bool(interleaved))
    else:
        opts["axis_dims"] = (rot_dim,)
    opts.update(overrides)
    pe = make(dims=dims, kind="rope", dim=dim or head_dim, heads=heads or (dim or head_dim) // head_dim, **opts)
    return cast(RoPE, pe)


def hf_cos_sin(pe: RoPE, position_ids: Tensor, *, dtype: torch.dtype | None = None) -> tuple[Tensor, Tensor]:
    """``(cos, sin)`` ``(B, T, rot_dim)`` in HF's layout for ``position_ids`` ``(B, T)``, or ``(3, B, T)``
    (``(dims, B, T)``) for M-RoPE; ``pe`` must use ``pairing="half"`` (HF's ``rotate_half``)."""
    if not isinstance(pe, RoPE):
        raise TypeError(f"hf_cos_sin needs a 'rope' encoding, got {type(pe).__name__}")
    if pe.pairing != "half":
        raise ValueError(f"HF's rotate_half layout needs pairing='half', got {pe.pairing!r}")
    check_float_dtype(dtype)
    if not isinstance(position_ids, Tensor):
        raise TypeError(f"position_ids must be a tensor, got {type(position_ids).__name__}")
    if position_ids.ndim == 3 and position_ids.shape[0] == pe.dims:  # (dims, B, T), HF's M-RoPE ids
        positions = position_ids.permute(1, 2, 0)
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
