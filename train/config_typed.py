"""Dataclasses built from plain data and from ``key=value`` overrides, strictly typed (the run config and the
benchmark presets): an unknown key or a value of the wrong type is a one-line :class:`ConfigError` naming the key
and what it expects.

>>> from dataclasses import dataclass
>>> @dataclass
... class Opts:
...     lr: float = 0.1
>>> opts = from_dict(Opts, {"lr": 0.5})
>>> apply_override(opts, "lr=1e-3"); opts.lr
0.001
"""
from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Union

from .config_yaml import ConfigError, load_yaml_text


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
        if value is None:  # `model: null` (or `model:`) is not "the defaults": a section left empty by mistake
            raise ConfigError(f"config section {key} is null; expected a mapping of its keys (leave the section out "
                              "for its defaults)")
        return from_dict(tp, value, key + ".")
    if _matches(value, tp):
        if type(value) is int and _accepts(tp, float) and not _accepts(tp, int):
            return float(value)
        return list(value) if isinstance(value, tuple) else value
    raise ConfigError(f"config key {key} expects {type_name(tp)}, got {_short(value)} ({type(value).__name__})")


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


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


def type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        return " | ".join(type_name(a) for a in typing.get_args(tp))
    if origin is list:
        return f"list[{type_name(typing.get_args(tp)[0])}]"
    return "None" if tp is type(None) else getattr(tp, "__name__", str(tp))


def apply_override(cfg: Any, item: str) -> None:
    """Apply ``"a.b.c=value"`` in place; the value is parsed as YAML and typed by the field.

    Keys inside a dict field (``model.pe.options.grid_shape=[8,8]``) are set as given.
    """
    if "=" not in item:
        raise ConfigError(f"override {_short(item)} must look like key.sub=value")
    key, raw = item.split("=", 1)
    parts = key.strip().split(".")
    value = load_yaml_text(raw, f"override {key.strip()}") if raw.strip() else None
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
    raise ConfigError(f"config key {key} expects {type_name(tp)}, got {_short(raw)}")


def _accepts(tp: Any, cls: type) -> bool:
    return tp is cls or cls in typing.get_args(tp)
