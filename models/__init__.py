"""Reference models for comparing positional encodings across domains (run from a checkout).

``build_model(cfg)`` builds one from a model config (a ``train.config.ModelConfig`` or a plain dict):
``name`` picks the architecture, ``pe`` the encoding (``{"kind", "options", "augment"}``), and the
remaining keys set that architecture's keyword options; a key the architecture does not take is an
error, never silently dropped.

>>> m = build_model({"name": "vit", "num_classes": 10, "dim": 32, "depth": 1, "heads": 4, "pe": {"kind": "rope"}})
>>> type(m).__name__
'ViT'
"""
from __future__ import annotations

import dataclasses
import inspect
from typing import Any, Mapping

from torch import nn

from .audio import AudioTransformer
from .conv import ConvNet
from .text import TextTransformer
from .timm_vit import TimmViT
from .video import VideoTransformer
from .vit import ViT

MODELS: dict[str, type[nn.Module]] = {
    "vit": ViT, "audio": AudioTransformer, "text": TextTransformer, "video": VideoTransformer, "conv": ConvNet,
    "timm": TimmViT,
}
__all__ = ["MODELS", "build_model", "grid_shape", "AudioTransformer", "ConvNet", "TextTransformer", "TimmViT", "VideoTransformer", "ViT"]


def build_model(cfg: Mapping[str, Any] | Any) -> nn.Module:
    """Build a model from ``cfg``; keys whose value is ``None`` take the architecture's default."""
    cfg = dataclasses.asdict(cfg) if dataclasses.is_dataclass(cfg) else dict(cfg)
    name = cfg.pop("name", None)
    if name not in MODELS:
        raise ValueError(f"unknown model name {name!r}; expected one of {sorted(MODELS)}")
    cls = MODELS[name]
    kwargs = {k: v for k, v in cfg.items() if v is not None}
    kwargs.setdefault("pe", {"kind": "none"})
    if name == "conv":  # a conv net takes coordinates through add_coords, not a token encoding
        pe = kwargs.pop("pe", None) or {}
        if pe.get("kind", "none") != "none":
            raise ValueError(f"model 'conv' takes no pe (got kind {pe['kind']!r}); use add_coords=true for CoordConv")
    accepted = set(inspect.signature(cls.__init__).parameters) - {"self"}
    unknown = sorted(set(kwargs) - accepted)
    if unknown:
        raise ValueError(f"model {name!r} has no option(s) {unknown}; it takes {sorted(accepted)}")
    for k, v in kwargs.items():  # YAML gives lists where the models take tuples
        if isinstance(v, list):
            kwargs[k] = tuple(v)
    return cls(**kwargs)


def grid_shape(cfg: Mapping[str, Any] | Any, input_shape) -> tuple[int, ...] | None:
    """The grid of positions the model of ``cfg`` encodes for one input item of ``input_shape`` (no batch axis);
    None for a conv net (it encodes no token grid). Each model class says it (``grid_for``).

    >>> grid_shape({"name": "vit", "patch_size": 4}, (3, 32, 48)), grid_shape({"name": "text"}, (17,))
    ((8, 12), (17,))
    """
    cfg = dataclasses.asdict(cfg) if dataclasses.is_dataclass(cfg) else dict(cfg)
    cls = MODELS[cfg["name"]]
    if not hasattr(cls, "grid_for"):
        return None
    accepted = set(inspect.signature(cls.grid_for).parameters) - {"input_shape"}
    return cls.grid_for(tuple(input_shape), **{k: tuple(v) if isinstance(v, list) else v for k, v in cfg.items()
                                                if k in accepted and v is not None})
