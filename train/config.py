"""Typed run configuration: dataclasses loaded from YAML, validated strictly, overridden from the command line.

>>> cfg = load_config(None, ["model.name=vit", "model.dim=32", "optim.lr=3e-4", "model.pe.kind=rope"])
>>> cfg.model.dim, cfg.optim.lr, cfg.model.pe.kind
(32, 0.0003, 'rope')

An unknown key or a value of the wrong type raises :class:`ConfigError` naming the key and the
expected type. ``None`` on an optional model field means "the architecture's default";
``model.num_classes`` / ``model.vocab_size`` left ``None`` are taken from the dataset.
"""
from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

import yaml


class ConfigError(ValueError):
    """A config key is unknown or holds a value of the wrong type."""


@dataclass
class DataConfig:
    name: str = "shapes"  # a name train.data.build_dataset knows
    root: str | None = None  # where real datasets live (downloaded there)
    seed: int = 0  # seed of the built-in synthetic datasets
    train_split: str = "train"
    eval_split: str = "val"
    options: dict = field(default_factory=dict)  # passed to build_dataset, e.g. {image_size: 32}
    num_workers: int = 0


@dataclass
class PEConfig:
    kind: str = "none"  # a name from ndpe.available()
    options: dict = field(default_factory=dict)  # the kind's keyword options (ndpe.options(kind))
    augment: str | None = None  # position augmentation ("cape", "random"), training mode only


@dataclass
class ModelConfig:
    name: str = "vit"  # vit | audio | text | video | conv
    num_classes: int | None = None
    vocab_size: int | None = None
    dim: int | None = None
    depth: int | None = None
    heads: int | None = None
    mlp_ratio: float | None = None
    drop: float | None = None
    drop_path: float | None = None
    patch_size: int | list[int] | None = None  # vit: int; audio: [time, freq]
    tubelet: list[int] | None = None  # video: [frames, rows, cols]
    in_chans: int | None = None
    pool: str | None = None  # cls | mean
    causal: bool | None = None
    tie_weights: bool | None = None
    channels: list[int] | None = None  # conv
    add_coords: bool | None = None  # conv: CoordConv layers
    arch: str | None = None  # conv: default | coordconv_regressor | conv_uniform | conv_quadrant (Liu et al. 2018)
    with_r: bool | None = None
    pe: PEConfig = field(default_factory=PEConfig)


@dataclass
class OptimConfig:
    opt: str = "adamw"  # any timm create_optimizer_v2 name
    lr: float = 1e-3
    weight_decay: float = 0.05
    warmup_steps: int = 0
    min_lr: float = 0.0
    clip_grad: float | None = 1.0  # max gradient norm; None disables


@dataclass
class TrainConfig:
    epochs: int = 1
    steps: int = 0  # > 0: total optimizer steps (overrides epochs); sets the cosine schedule's length
    stop_after: int = 0  # > 0: stop this run after that many steps and checkpoint (preemption, tests)
    batch_size: int = 32
    eval_batch_size: int = 0  # 0: same as batch_size
    loss: str = "mse"  # regression loss: mse | l1
    amp: bool = True  # bf16 autocast, on CUDA only
    seed: int = 0
    device: str = "auto"  # auto | cpu | cuda
    out_dir: str = "runs/default"
    resume: str | None = None  # checkpoint path to continue from
    log_every: int = 50  # steps between train log lines
    eval_every: int = 1  # epochs between evaluations (the last epoch is always evaluated)
    save_every: int = 1  # epochs between checkpoints (the last step is always saved)


@dataclass
class Config:
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: TrainConfig = field(default_factory=TrainConfig)


# -- building and checking ---------------------------------------------------------------------
def from_dict(cls: type, data: dict | None, prefix: str = "") -> Any:
    """Build dataclass ``cls`` from nested plain data, rejecting unknown keys and wrong types."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{prefix.rstrip('.') or 'config'} must be a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = [k for k in data if k not in hints]
    if unknown:
        raise ConfigError(f"unknown config key {prefix}{unknown[0]!s}; expected one of {names}")
    return cls(**{k: _check(v, hints[k], f"{prefix}{k}") for k, v in data.items()})


def _check(value: Any, tp: Any, key: str) -> Any:
    if dataclasses.is_dataclass(tp):
        return from_dict(tp, value, key + ".")
    if _matches(value, tp):
        if type(value) is int and _accepts(tp, float) and not _accepts(tp, int):
            return float(value)
        return list(value) if isinstance(value, tuple) else value
    raise ConfigError(f"config key {key} expects {_name(tp)}, got {value!r} ({type(value).__name__})")


def _matches(value: Any, tp: Any) -> bool:
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        return any(_matches(value, a) or (a is float and type(value) is int) for a in typing.get_args(tp))
    if tp is type(None):
        return value is None
    if origin is list:
        (item,) = typing.get_args(tp)
        return isinstance(value, (list, tuple)) and all(_matches(v, item) for v in value)
    if tp is dict or origin is dict:
        return isinstance(value, dict)
    if tp in (int, float):
        return isinstance(value, tp) and not isinstance(value, bool)
    return isinstance(value, tp)


def _name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        return " | ".join(_name(a) for a in typing.get_args(tp))
    if origin is list:
        return f"list[{_name(typing.get_args(tp)[0])}]"
    return "None" if tp is type(None) else getattr(tp, "__name__", str(tp))


# -- overrides -----------------------------------------------------------------------------
def apply_override(cfg: Config, item: str) -> None:
    """Apply ``"a.b.c=value"`` in place; the value is parsed as YAML and typed by the field.

    Keys inside a dict field (``model.pe.options.grid_shape=[8,8]``) are set as given.
    """
    if "=" not in item:
        raise ConfigError(f"override {item!r} must look like key.sub=value")
    key, raw = item.split("=", 1)
    parts = key.strip().split(".")
    value = yaml.safe_load(raw) if raw.strip() else None
    node, path = cfg, ""
    for i, name in enumerate(parts):
        last = i == len(parts) - 1
        if isinstance(node, dict):
            if last:
                node[name] = value
            else:
                node = node.setdefault(name, {})
            path += name + "."
            continue
        hints = typing.get_type_hints(type(node))
        if name not in hints:
            raise ConfigError(f"unknown config key {path}{name}; expected one of {list(hints)}")
        if last:
            tp = hints[name]
            if isinstance(value, str) and value.lower() == "none" and _accepts(tp, type(None)):
                value = None
            if not (_matches(value, tp) or dataclasses.is_dataclass(tp)):
                value = _coerce(raw.strip(), tp, path + name)  # e.g. YAML reads "1e-3" as a string
            setattr(node, name, _check(value, tp, path + name))
        else:
            node = getattr(node, name)
        path += name + "."


def _coerce(raw: str, tp: Any, key: str) -> Any:
    for cast in (int, float):
        if _accepts(tp, cast):
            try:
                return cast(raw)
            except ValueError:
                pass
    if _accepts(tp, str):
        return raw
    raise ConfigError(f"config key {key} expects {_name(tp)}, got {raw!r}")


def _accepts(tp: Any, cls: type) -> bool:
    return tp is cls or cls in typing.get_args(tp)


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Read a YAML config (or start from the defaults) and apply ``key=value`` overrides."""
    data = yaml.safe_load(Path(path).read_text()) if path else {}
    cfg = from_dict(Config, data)
    for item in overrides:
        apply_override(cfg, item)
    return cfg


def to_dict(cfg: Config) -> dict:
    """The config as plain nested data (what goes in checkpoints and config.yaml)."""
    return dataclasses.asdict(cfg)


def save_config(cfg: Config, path: str | Path) -> None:
    """Write the resolved config as YAML (read back with :func:`load_config`)."""
    Path(path).write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))
