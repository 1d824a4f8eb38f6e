"""RoPE scaling as one typed object: :class:`RopeScaling` (Hugging Face's ``rope_parameters``), validated once.

Its type's formula and options come from :data:`ndpe.scaling.SCALINGS` (one registered function per type); this
module holds what travels with an encoding: the type, ``scale``, ``train_shape`` and the type's options, read from
an encoding's keywords (:func:`rope_scaling`) or a Hugging Face config (:meth:`RopeScaling.from_hf`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence, cast

from torch import Tensor

from .checks import per_axis
from .scaling import SCALINGS, ScalingType


@dataclass(frozen=True, init=False)
class RopeScaling:
    """RoPE scaling for extrapolation as one typed object (Hugging Face's ``rope_parameters``), validated once here.

    ``type``: a name of :data:`SCALINGS` (``"linear"``, ``"ntk"``, ``"dynamic-ntk"``, ``"yarn"``, ``"llama3"``,
    ``"longrope"``; HF's ``rope_type``, its ``dynamic`` is ``"dynamic-ntk"``). ``scale``: target / trained length,
    one or per axis (HF's ``factor``); ``>= 1``, ``"linear"`` any ``> 0``. ``train_shape``: the trained length per
    axis (HF's ``original_max_position_embeddings``; ``max_position_embeddings`` for dynamic NTK), needed by every
    type but ``linear`` and ``ntk``. ``**options``: the type's own, as its table entry declares them, with HF's
    names and defaults (YaRN ``beta_fast``, ``beta_slow``, ``mscale``, ``mscale_all_dim``, ``truncate``; YaRN and
    LongRoPE ``attention_factor``; Llama 3 ``low_freq_factor``, ``high_freq_factor``; LongRoPE ``short_factor``,
    ``long_factor``, ``rot_dim / 2`` numbers each, axes in order), read back as attributes (``s.beta_fast``); another
    type's option set away from its default raises. Formulas: the module docstring. ``rope`` takes it as
    ``scaling=`` (or builds it from ``scaling="yarn", scale=..., ...``); :func:`ndpe.from_hf_rope` builds it from a
    HF config with :meth:`from_hf`.

    >>> RopeScaling("yarn", scale=4.0, train_shape=2048).for_axes((64,)).scale
    (4.0,)
    >>> RopeScaling("ntk", scale=0.5)
    Traceback (most recent call last):
    ValueError: scale must be >= 1.0, got 0.5
    """

    type: str
    scale: float | tuple[float, ...]
    train_shape: float | tuple[float, ...] | None
    options: tuple[tuple[str, Any], ...]  # the type's options, every one, in its signature's order

    def __init__(self, type: str, scale: float | Sequence[float] | None = None,
                 train_shape: float | Sequence[float] | None = None, **options: Any):
        entry = SCALINGS[type]
        if scale is None:
            raise ValueError(f"scaling={type!r} needs scale= (target length / trained length, "
                             f"{'> 0' if entry.any_scale else '>= 1'}, one or per axis)")
        scale = _numbers(scale, "scale", *entry.scale_range)
        if entry.train_shape:
            if train_shape is None:
                raise ValueError(f"scaling={type!r} needs train_shape= (the grid the model was trained on)")
            train_shape = _numbers(train_shape, "train_shape", 1.0, True)
        elif train_shape is not None:
            readers = tuple(n for n in SCALINGS if SCALINGS[n].train_shape)
            raise ValueError(f"train_shape is used by {readers} only, not by scaling={type!r}")
        resolved = tuple(SCALINGS.resolve(type, options).items())
        for name, value in (("type", type), ("scale", scale), ("train_shape", train_shape), ("options", resolved)):
            object.__setattr__(self, name, value)  # the frozen fields, set once

    def __getattr__(self, name: str) -> Any:  # the type's options as attributes
        for key, value in self.__dict__.get("options", ()):
            if key == name:
                return value
        raise AttributeError(f"RopeScaling {self.__dict__.get('type')!r} has no option {name!r}")

    def __repr__(self) -> str:
        fields = [f"scale={self.scale!r}", f"train_shape={self.train_shape!r}", *(f"{k}={v!r}" for k, v in self.options)]
        return f"RopeScaling({self.type!r}, {', '.join(fields)})"

    @property
    def entry(self) -> ScalingType:
        """The type's entry in :data:`SCALINGS`."""
        return SCALINGS[self.type]

    @property
    def dynamic(self) -> bool:
        """Whether the frequencies depend on the current length (dynamic NTK, LongRoPE): no KV-cache decoding."""
        return self.entry.at_length is not None

    def for_axes(self, axis_dims: Sequence[int]) -> "RopeScaling":
        """This scaling with ``scale`` and ``train_shape`` one per axis, checked against the rotary channels per
        axis ``axis_dims`` (per-frequency options such as LongRoPE's factors cover ``sum / 2``)."""
        dims, (low, inclusive) = len(axis_dims), self.entry.scale_range
        scale = per_axis(self.scale, dims, "scale", low=low, inclusive=inclusive)
        train = None if self.train_shape is None else per_axis(self.train_shape, dims, "train_shape", low=1.0)
        n = sum(axis_dims) // 2
        for name in self.entry.per_frequency:
            factors = getattr(self, name)
            if factors is not None and len(factors) != n:
                raise ValueError(f"{name} must hold {n} numbers (rot_dim / 2, axes in order), got {len(factors)}")
        return RopeScaling(self.type, scale=scale, train_shape=train, **dict(self.options))

    def axis_options(self, axis: int, axis_dims: Sequence[int]) -> dict[str, Any]:
        """The options of axis ``axis``: its share of each per-frequency one (:meth:`for_axes` first)."""
        start, stop = sum(axis_dims[:axis]) // 2, sum(axis_dims[:axis + 1]) // 2
        per_frequency = self.entry.per_frequency
        return {k: v[start:stop] if k in per_frequency and v is not None else v for k, v in self.options}

    def axis_inv_freq(self, axis: int, axis_dims: Sequence[int], theta: float, *,
                      device=None) -> tuple[Tensor, float]:
        """Axis ``axis``'s static frequencies ``(axis_dims[axis] // 2,)`` float64 and cos/sin factor, ``scale`` and
        ``train_shape`` per axis (:meth:`for_axes`)."""
        if isinstance(axis_dims, int):
            raise TypeError(f"axis_dims must be the rotary channels of every axis (a tuple, e.g. ({axis_dims},) for "
                            f"one axis), got the int {axis_dims}")
        train = None if self.train_shape is None else cast(tuple, self.train_shape)[axis]
        return self.entry.fn(axis_dims[axis], theta, cast(tuple, self.scale)[axis], train,
                             **self.axis_options(axis, axis_dims), device=device)

    def at_length(self, axis: int, axis_dims: Sequence[int], freq: Tensor, length: Tensor, theta: float) -> Tensor:
        """Axis ``axis``'s frequencies at the current length ``max(position) + 1`` (``freq``: its static ones)."""
        at_length = self.entry.at_length
        if at_length is None:
            return freq
        train = None if self.train_shape is None else cast(tuple, self.train_shape)[axis]
        return at_length(freq, length, axis_dims[axis], theta, cast(tuple, self.scale)[axis], train,
                         **self.axis_options(axis, axis_dims))

    @classmethod
    def from_hf(cls, params: dict, max_position_embeddings: int | None = None) -> "RopeScaling | None":
        """The scaling of HF ``rope_parameters`` (``rope_type`` and its options; None for ``"default"``).

        A missing ``factor`` is ``max_position_embeddings / original_max_position_embeddings`` where HF does so;
        dynamic NTK's trained length is ``max_position_embeddings``. Each type's options are read by name; a missing
        one (or, as HF's ``beta_fast or 32``, a zero where the default is positive) takes the default.
        """
        rope_type = params.get("rope_type", params.get("type", "default"))
        if rope_type == "dynamic" and params.get("alpha"):  # Hunyuan's checkpoints: static NTK by a fixed alpha, as HF
            rope_type = "ntk_alpha"
        types = hf_types()
        if not isinstance(rope_type, str) or rope_type not in types:
            raise ValueError(f"rope_parameters['rope_type'] {rope_type!r} has no ndpe equivalent; supported: "
                             f"{sorted(types)}")
        kind = types[rope_type]
        if kind is None:
            return None
        entry = SCALINGS[kind]

        def number(key: str, required: bool = False) -> Any:
            value = params.get(key)
            if value is None:
                if required:
                    raise ValueError(f"rope_type {rope_type!r} needs rope_parameters[{key!r}] (a number), which the "
                                     "config lacks")
                return None
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"rope_parameters[{key!r}] must be a number, got {value!r}")
            return float(value)

        original = number("original_max_position_embeddings")
        if original is None and entry.train_shape and entry.hf_train == "original_max_position_embeddings":
            original = max_position_embeddings  # HF's default (standardize_rope_params)
        factor = number(entry.hf_factor)
        if factor is None and entry.hf_factor_from_lengths and original and max_position_embeddings:
            factor = max_position_embeddings / original  # yarn / longrope, as HF
        if factor is None:
            number(entry.hf_factor, required=True)
        opts: dict[str, Any] = {}
        for key, default in entry.options.items():
            required = key in entry.hf_required
            if key in entry.per_frequency:
                if params.get(key) is not None or required:
                    if not isinstance(params.get(key), (list, tuple)):
                        raise ValueError(f"rope_type {rope_type!r} needs rope_parameters[{key!r}] (a list of numbers, "
                                         f"one per rotary pair), got {params.get(key)!r}")
                    opts[key] = params[key]
            elif isinstance(default, bool):
                opts[key] = bool(params.get(key, default))
            else:
                value = number(key, required)
                if value is not None and not (value == 0 and not required and isinstance(default, float) and default > 0):
                    opts[key] = value
        train = None if not entry.train_shape else (
            max_position_embeddings if entry.hf_train == "max_position_embeddings" else original)
        if entry.train_shape and train is None:
            raise ValueError(f"rope_type {rope_type!r} needs config.max_position_embeddings (or "
                             "rope_parameters['original_max_position_embeddings']): the trained length")
        return cls(kind, scale=float(factor), train_shape=train, **opts)


def hf_types() -> dict[str, str | None]:
    """Hugging Face ``rope_type`` -> :class:`RopeScaling` type (``"default"``: None, no scaling)."""
    types: dict[str, str | None] = {"default": None}
    for name in SCALINGS:
        hf = SCALINGS[name].hf
        if hf is not None:
            types[hf] = name
    return types


def rope_scaling(scaling: "str | RopeScaling | None", scale: Any = None, train_shape: Any = None,
                 **options: Any) -> "RopeScaling | None":
    """The :class:`RopeScaling` of an encoding's options: ``scaling`` (a type name, an object or None), ``scale``,
    ``train_shape`` and the type's options as keywords (left at their defaults otherwise)."""
    changed = [n for n, v in (("scale", scale), ("train_shape", train_shape)) if v is not None]
    changed += list(SCALINGS.given(options))
    if isinstance(scaling, RopeScaling):
        if changed:
            raise ValueError(f"scaling= is a RopeScaling: pass {', '.join(changed)} inside it, "
                             f"not as options of the encoding")
        return scaling
    if scaling is None:
        if {"scale", "train_shape"} & set(changed):
            raise ValueError(f"scale and train_shape need a scaling (one of {tuple(SCALINGS)})")
        for name in changed:
            raise SCALINGS.refuse(name, None)
        return None
    return RopeScaling(scaling, scale=scale, train_shape=train_shape, **options)


def _numbers(value, name: str, low: float, inclusive: bool) -> float | tuple[float, ...]:
    """One number, or a tuple/list of numbers (one per axis), each checked; as float or tuple of floats."""
    if isinstance(value, (tuple, list)):
        return per_axis(value, len(value), name, low=low, inclusive=inclusive)
    return per_axis(value, 1, name, low=low, inclusive=inclusive)[0]
