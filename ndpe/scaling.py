"""RoPE frequencies and their scaling for extrapolation: pure functions, one axis at a time.

Notation (per positional axis): ``d`` rotary channels (``d / 2`` frequencies), base ``b``
(``theta``), scale ``s >= 1`` (target length / trained length; ``"linear"`` takes any ``s > 0``),
trained length ``L``.

- Axial RoPE (Su et al. 2021):   ``f_j = b ** (-2j / d)``, ``j = 0 .. d/2 - 1``; angle ``= m * f_j``.
- Position interpolation ("linear", Chen et al. 2023): ``m -> m / s``, i.e. ``f_j / s``; any ``s > 0``
  (``s < 1`` stretches positions, as timm EVA's ``ref_feat_shape`` larger than the grid does).
- NTK-aware ("ntk", bloc97 2023):  ``b' = b * s ** (d / (d - 2))``; the lowest frequency is
  interpolated by ``s``, the highest left alone.
- Dynamic NTK ("dynamic-ntk", emozilla 2023, as in HF ``_compute_dynamic_ntk_parameters``):
  ``b' = b * (s * l / L - (s - 1)) ** (d / (d - 2))`` with ``l = max(current length, L)``,
  so nothing changes up to the trained length.
- YaRN ("yarn", Peng et al. 2023, as in the official code and HF ``_compute_yarn_parameters``):
  ``f'_j = f_j / s * ramp_j + f_j * (1 - ramp_j)``, ``ramp_j = clamp((j - lo) / (hi - lo), 0, 1)``,
  ``lo = floor(j(beta_fast))``, ``hi = ceil(j(beta_slow))``, where ``j(r) = d ln(L / (2 pi r)) / (2 ln b)``
  is the frequency index that turns ``r`` times over ``L`` positions. Frequencies turning more
  than ``beta_fast = 32`` times are kept, fewer than ``beta_slow = 1`` time are interpolated.
  The paper writes the ramp linearly in ``r = L / wavelength``; the reference code (and every
  released YaRN checkpoint) ramps linearly in the index ``j``: we follow the code. cos and sin
  are multiplied by the attention factor ``0.1 ln s + 1`` (1 when ``s <= 1``). HF's full option set:
  ``truncate=False`` keeps the ramp ends fractional (no floor / ceil); with ``mscale`` and
  ``mscale_all_dim`` both non-zero (DeepSeek) the factor is ``g(s, mscale) / g(s, mscale_all_dim)``,
  ``g(s, m) = 0.1 m ln s + 1``; ``attention_factor`` replaces the factor outright.
- Llama 3.1 ("llama3", HF ``_compute_llama3_parameters``): wavelength ``w_j = 2 pi / f_j``; kept when
  ``w_j < L / high_freq_factor``, divided by ``s`` when ``w_j > L / low_freq_factor``, in between
  ``(1 - k) f_j / s + k f_j`` with ``k = (L / w_j - low_freq_factor) / (high_freq_factor - low_freq_factor)``.
- LongRoPE ("longrope", Phi-3, HF ``_compute_longrope_parameters``): ``f_j / e_j`` with the per-frequency
  factors ``e = short_factor`` up to the trained length, ``long_factor`` beyond it (the encoding picks
  by the current length ``max(position) + 1 > L``); cos and sin multiplied by
  ``sqrt(1 + ln s / ln L)`` (1 when ``s <= 1``) unless ``attention_factor`` is given.

Every function returns float64 (or the dtype asked for): angles are built from these.

>>> axial_inv_freq(4, 10000.0)
tensor([1.0000, 0.0100], dtype=torch.float64)
>>> ntk_theta(4, 10000.0, 4.0)
160000.0
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Sequence, cast

import torch
from torch import Tensor

from .checks import check_bool, check_number, per_axis

SCALINGS = ("linear", "ntk", "dynamic-ntk", "yarn", "llama3", "longrope")
NEEDS_TRAIN_SHAPE = ("dynamic-ntk", "yarn", "llama3", "longrope")
BETA_FAST, BETA_SLOW = 32.0, 1.0
LOW_FREQ_FACTOR, HIGH_FREQ_FACTOR = 1.0, 4.0  # Llama 3.1's values (HF requires them in the config)


def axial_inv_freq(dim: int, theta: float | Tensor, *, device=None, dtype=torch.float64) -> Tensor:
    """Frequencies ``theta ** (-arange(0, dim, 2) / dim)``, shape ``(dim // 2,)``.

    ``theta`` may be a 0-d tensor (dynamic NTK computes it from the current length).
    """
    exponent = torch.arange(0, dim, 2, device=device, dtype=dtype) / dim
    theta = torch.as_tensor(theta, device=device, dtype=dtype)
    return theta ** (-exponent)


def period_inv_freq(dim: int, theta: float | None = None, min_period: float | None = None,
                    max_period: float | None = None, *, device=None, dtype=torch.float64) -> Tensor:
    """DINOv3's period schedule, shape ``(dim // 2,)``: ``2 pi / period_j`` with ``period_j = theta ** (2j / dim)``
    (its base mode: the theta series in turns instead of radians) or, given ``min_period`` and ``max_period``,
    log-spaced from the one to the other (timm ``RotaryEmbeddingDinoV3``, HF ``DINOv3ViTRopePositionEmbedding``).

    >>> [round(f, 4) for f in period_inv_freq(6, min_period=0.5, max_period=8.0).tolist()]   # 2 pi / (0.5, 2, 8)
    [12.5664, 3.1416, 0.7854]
    """
    n = dim // 2
    if min_period is not None and max_period is not None:
        periods = min_period * (max_period / min_period) ** torch.linspace(0.0, 1.0, n, device=device, dtype=dtype)
    else:
        assert theta is not None
        periods = torch.as_tensor(theta, device=device, dtype=dtype) ** (torch.arange(n, device=device, dtype=dtype) * 2 / dim)
    return 2 * math.pi / periods


def pixel_inv_freq(dim: int, max_res: float, *, linear: bool = False, device=None, dtype=torch.float64) -> Tensor:
    """Pixel bands for coordinates in ``[-1, 1]``, shape ``(dim // 2,)``: ``pi * 2 ** linspace(0, log2(max_res) - 1)``
    (timm's ``pixel_freq_bands``, its default log spacing) or, with ``linear``, ``pi * linspace(1, max_res / 2)``
    (timm ``linear_bands=True``; rotary-embedding-torch ``freqs_for="pixel"``, ``max_freq=max_res``). The fastest
    band turns ``max_res / 2`` half-turns over the unit: the Nyquist rate of a ``max_res``-pixel image.

    >>> [round(f / math.pi, 3) for f in pixel_inv_freq(6, 16.0).tolist()]   # 2 ** (0, 1.5, 3)
    [1.0, 2.828, 8.0]
    """
    n = dim // 2
    if linear:
        return torch.linspace(1.0, max_res / 2, n, device=device, dtype=dtype) * math.pi
    return 2 ** torch.linspace(0.0, math.log2(max_res) - 1, n, device=device, dtype=dtype) * math.pi


def ntk_exponent(dim: int) -> float:
    """``d / (d - 2)``: the power of the scale that NTK-aware scaling puts on the base."""
    if dim <= 2:
        raise ValueError(f"NTK scaling needs at least 4 rotary channels on an axis (d / (d - 2)), got d={dim}")
    return dim / (dim - 2)


def ntk_theta(dim: int, theta: float, scale: float) -> float:
    """NTK-aware base ``theta * scale ** (d / (d - 2))``."""
    return theta * scale ** ntk_exponent(dim)


def dynamic_ntk_theta(dim: int, theta: float, scale: float, length: float | Tensor, train_length: float):
    """Dynamic NTK base ``theta * (s * l / L - (s - 1)) ** (d / (d - 2))``, ``l = max(length, L)``.

    ``length`` (the current length, max position + 1) may be a tensor: no host sync.
    """
    if isinstance(length, Tensor):
        ratio: Tensor | float = torch.clamp(length / train_length, min=1.0)
    else:
        ratio = max(length / train_length, 1.0)
    return theta * (scale * ratio - (scale - 1.0)) ** ntk_exponent(dim)


def yarn_correction_dim(num_rotations: float, dim: int, theta: float, train_length: float) -> float:
    """The (fractional) frequency index that turns ``num_rotations`` times over ``train_length``."""
    return dim * math.log(train_length / (num_rotations * 2 * math.pi)) / (2 * math.log(theta))


def yarn_inv_freq(dim: int, theta: float, scale: float, train_length: float, *, beta_fast: float = BETA_FAST,
                  beta_slow: float = BETA_SLOW, truncate: bool = True, device=None, dtype=torch.float64) -> Tensor:
    """YaRN "NTK-by-parts" frequencies ``(dim // 2,)``: extrapolate fast ones, interpolate slow ones."""
    lo: float = yarn_correction_dim(beta_fast, dim, theta, train_length)
    hi: float = yarn_correction_dim(beta_slow, dim, theta, train_length)
    if truncate:
        lo, hi = math.floor(lo), math.ceil(hi)
    lo, hi = max(lo, 0), min(hi, dim - 1)
    if lo == hi:
        hi += 0.001  # as the reference code: avoid a zero-width ramp
    j = torch.arange(dim // 2, device=device, dtype=dtype)
    ramp = torch.clamp((j - lo) / (hi - lo), 0.0, 1.0)  # 0: keep (extrapolate), 1: divide by s
    freq = axial_inv_freq(dim, theta, device=device, dtype=dtype)
    return freq / scale * ramp + freq * (1.0 - ramp)


def yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    """``0.1 * mscale * ln s + 1`` (1 when ``s <= 1``)."""
    return 1.0 if scale <= 1.0 else 0.1 * mscale * math.log(scale) + 1.0


def yarn_attention_factor(scale: float, mscale: float | None = None, mscale_all_dim: float | None = None) -> float:
    """YaRN's ``sqrt(1/t) = 0.1 ln s + 1`` multiplying cos and sin (so the logits by its square).

    With ``mscale`` and ``mscale_all_dim`` both non-zero (DeepSeek): ``g(s, mscale) / g(s, mscale_all_dim)``.
    """
    if mscale and mscale_all_dim:
        return yarn_mscale(scale, mscale) / yarn_mscale(scale, mscale_all_dim)
    return yarn_mscale(scale)


def llama3_inv_freq(dim: int, theta: float, scale: float, train_length: float, *,
                    low_freq_factor: float = LOW_FREQ_FACTOR, high_freq_factor: float = HIGH_FREQ_FACTOR,
                    device=None, dtype=torch.float64) -> Tensor:
    """Llama 3.1 frequencies ``(dim // 2,)``: keep short wavelengths, divide long ones by ``s``, blend between."""
    freq = axial_inv_freq(dim, theta, device=device, dtype=dtype)
    wavelen = 2 * math.pi / freq
    low_wavelen, high_wavelen = train_length / low_freq_factor, train_length / high_freq_factor
    out = torch.where(wavelen > low_wavelen, freq / scale, freq)
    k = (train_length / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed = (1 - k) * out / scale + k * out
    medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return torch.where(medium, smoothed, out)


def longrope_inv_freq(dim: int, theta: float, factors, *, device=None, dtype=torch.float64) -> Tensor:
    """LongRoPE frequencies ``f_j / factors[j]``, ``(dim // 2,)``."""
    freq = axial_inv_freq(dim, theta, device=device, dtype=dtype)
    return freq / torch.as_tensor(factors, device=device, dtype=dtype)


def longrope_attention_factor(scale: float, train_length: float) -> float:
    """LongRoPE's cos/sin factor ``sqrt(1 + ln s / ln L)`` (1 when ``s <= 1``)."""
    return 1.0 if scale <= 1.0 else math.sqrt(1 + math.log(scale) / math.log(train_length))


def scaled_inv_freq(dim: int, theta: float, scaling: str | None = None, scale: float = 1.0,
                    train_length: float | None = None, *, beta_fast: float = BETA_FAST, beta_slow: float = BETA_SLOW,
                    truncate: bool = True, mscale: float | None = None, mscale_all_dim: float | None = None,
                    attention_factor: float | None = None, low_freq_factor: float = LOW_FREQ_FACTOR,
                    high_freq_factor: float = HIGH_FREQ_FACTOR, factors=None, device=None) -> tuple[Tensor, float]:
    """One axis' frequencies ``(dim // 2,)`` float64 under ``scaling`` and its cos/sin factor.

    ``"dynamic-ntk"`` gives the frequencies at or below the trained length (no change): the
    encoding recomputes them from the current length with :func:`dynamic_ntk_theta`.
    ``"longrope"`` uses ``factors`` (the short ones; the encoding switches to the long ones).
    ``attention_factor`` (``"yarn"`` and ``"longrope"``) replaces the computed cos/sin factor.

    >>> scaled_inv_freq(4, 10000.0, "linear", 2.0)
    (tensor([0.5000, 0.0050], dtype=torch.float64), 1.0)
    """
    if scaling is None or scaling == "dynamic-ntk":
        return axial_inv_freq(dim, theta, device=device), 1.0
    if scaling == "linear":
        return axial_inv_freq(dim, theta, device=device) / scale, 1.0
    if scaling == "ntk":
        return axial_inv_freq(dim, ntk_theta(dim, theta, scale), device=device), 1.0
    length = cast(float, train_length)  # checked by the kind
    if scaling == "yarn":
        factor = yarn_attention_factor(scale, mscale, mscale_all_dim) if attention_factor is None else attention_factor
        return (yarn_inv_freq(dim, theta, scale, length, beta_fast=beta_fast, beta_slow=beta_slow, truncate=truncate,
                              device=device), factor)
    if scaling == "llama3":
        return (llama3_inv_freq(dim, theta, scale, length, low_freq_factor=low_freq_factor,
                                high_freq_factor=high_freq_factor, device=device), 1.0)
    if scaling == "longrope":
        factor = longrope_attention_factor(scale, length) if attention_factor is None else attention_factor
        ext = [1.0] * (dim // 2) if factors is None else factors
        return longrope_inv_freq(dim, theta, ext, device=device), factor
    raise ValueError(f"scaling must be None or one of {SCALINGS}, got {scaling!r}")


# the options of a scaling type beyond scale and train_shape, and the types that read them
_OWNERS: dict[str, tuple[str, ...]] = {
    "beta_fast": ("yarn",), "beta_slow": ("yarn",), "mscale": ("yarn",), "mscale_all_dim": ("yarn",),
    "truncate": ("yarn",), "attention_factor": ("yarn", "longrope"), "low_freq_factor": ("llama3",),
    "high_freq_factor": ("llama3",), "short_factor": ("longrope",), "long_factor": ("longrope",),
}


@dataclass(frozen=True)
class RopeScaling:
    """RoPE scaling for extrapolation as one typed object (Hugging Face's ``rope_parameters``), validated once here.

    ``type``: ``"linear"``, ``"ntk"``, ``"dynamic-ntk"``, ``"yarn"``, ``"llama3"`` or ``"longrope"`` (HF's
    ``rope_type``; HF's ``dynamic`` is ``"dynamic-ntk"``). ``scale``: target / trained length, one or per axis (HF's
    ``factor``); ``>= 1``, ``"linear"`` any ``> 0``. ``train_shape``: the trained length per axis (HF's
    ``original_max_position_embeddings``; ``max_position_embeddings`` for dynamic NTK), needed by every type but
    ``linear`` and ``ntk``. The other fields are HF's, with its defaults, each read by the types in ``_OWNERS``
    (a field set away from its default for another type raises): YaRN ``beta_fast``, ``beta_slow``, ``mscale``,
    ``mscale_all_dim``, ``truncate``; YaRN and LongRoPE ``attention_factor``; Llama 3 ``low_freq_factor``,
    ``high_freq_factor``; LongRoPE ``short_factor``, ``long_factor`` (``rot_dim / 2`` numbers each, axes in order).
    Formulas: the module docstring. ``rope`` takes it as ``scaling=`` (or builds it from ``scaling="yarn",
    scale=..., ...``); :func:`ndpe.from_hf_rope` builds it from a HF config with :meth:`from_hf`.

    >>> RopeScaling("yarn", scale=4.0, train_shape=2048).for_axes((64,)).scale
    (4.0,)
    >>> RopeScaling("ntk", scale=0.5)
    Traceback (most recent call last):
    ValueError: scale must be >= 1.0, got 0.5
    """

    type: str
    scale: float | tuple[float, ...] | None = None
    train_shape: float | tuple[float, ...] | None = None
    beta_fast: float = BETA_FAST
    beta_slow: float = BETA_SLOW
    mscale: float | None = None
    mscale_all_dim: float | None = None
    attention_factor: float | None = None
    truncate: bool = True
    low_freq_factor: float = LOW_FREQ_FACTOR
    high_freq_factor: float = HIGH_FREQ_FACTOR
    short_factor: tuple[float, ...] | None = None
    long_factor: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        kind = self.type
        if not isinstance(kind, str) or kind not in SCALINGS:
            raise ValueError(f"scaling must be None or one of {SCALINGS}, got {kind!r}")
        if self.scale is None:
            raise ValueError(f"scaling={kind!r} needs scale= (target length / trained length, "
                             f"{'> 0' if kind == 'linear' else '>= 1'}, one or per axis)")
        self._set("scale", _numbers(self.scale, "scale", *self._scale_range()))
        if kind in NEEDS_TRAIN_SHAPE:
            if self.train_shape is None:
                raise ValueError(f"scaling={kind!r} needs train_shape= (the grid the model was trained on)")
            self._set("train_shape", _numbers(self.train_shape, "train_shape", 1.0, True))
        elif self.train_shape is not None:
            raise ValueError(f"train_shape is used by {NEEDS_TRAIN_SHAPE} only, not by scaling={kind!r}")
        for name in ("beta_fast", "beta_slow", "low_freq_factor", "high_freq_factor"):
            check_number(getattr(self, name), name, low=0.0, inclusive=False)
        for name in ("mscale", "mscale_all_dim"):
            if getattr(self, name) is not None:
                check_number(getattr(self, name), name, low=0.0)  # 0 counts as unset, as in HF
        if self.attention_factor is not None:
            check_number(self.attention_factor, "attention_factor", low=0.0, inclusive=False)
        check_bool(self.truncate, "truncate")
        if self.beta_fast < self.beta_slow:
            raise ValueError(f"beta_fast must be >= beta_slow, got beta_fast={self.beta_fast!r}, "
                             f"beta_slow={self.beta_slow!r}")
        if self.high_freq_factor <= self.low_freq_factor:
            raise ValueError(f"high_freq_factor must be > low_freq_factor, got high_freq_factor="
                             f"{self.high_freq_factor!r}, low_freq_factor={self.low_freq_factor!r}")
        for name in ("short_factor", "long_factor"):
            if getattr(self, name) is not None:
                self._set(name, _factors(getattr(self, name), name))
        defaults = {f.name: f.default for f in dataclasses.fields(self)}
        for name, owners in _OWNERS.items():
            if getattr(self, name) != defaults[name] and kind not in owners:
                raise ValueError(f"{name} is used by scaling={' or '.join(map(repr, owners))} only, "
                                 f"not by scaling={kind!r}")
        missing = [n for n in ("short_factor", "long_factor") if kind == "longrope" and getattr(self, n) is None]
        if missing:
            raise ValueError(f"scaling='longrope' needs {' and '.join(missing)}= (rot_dim / 2 numbers each)")

    def _set(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)  # normalizing a field of the frozen instance, once

    def _scale_range(self) -> tuple[float, bool]:
        # position interpolation divides positions by any s > 0 (s < 1 stretches them: timm EVA's
        # ref_feat_shape larger than the grid); the other formulas extrapolate and need s >= 1
        return (0.0, False) if self.type == "linear" else (1.0, True)

    def for_axes(self, axis_dims: Sequence[int]) -> "RopeScaling":
        """This scaling with ``scale`` and ``train_shape`` one per axis, checked against the rotary channels per
        axis ``axis_dims`` (NTK needs 4 channels on a scaled axis; LongRoPE's factors cover ``sum / 2``)."""
        dims = len(axis_dims)
        scale = per_axis(self.scale, dims, "scale", low=self._scale_range()[0], inclusive=self._scale_range()[1])
        train = None if self.train_shape is None else per_axis(self.train_shape, dims, "train_shape", low=1.0)
        if self.type in ("ntk", "dynamic-ntk"):
            for d in axis_dims:
                if d:
                    ntk_exponent(d)  # raises for d = 2
        n = sum(axis_dims) // 2
        for name in ("short_factor", "long_factor"):
            factors = getattr(self, name)
            if factors is not None and len(factors) != n:
                raise ValueError(f"{name} must hold {n} numbers (rot_dim / 2, axes in order), got {len(factors)}")
        return dataclasses.replace(self, scale=scale, train_shape=train)

    @classmethod
    def from_hf(cls, params: dict, max_position_embeddings: int | None = None) -> "RopeScaling | None":
        """The scaling of HF ``rope_parameters`` (``rope_type`` and its options; None for ``"default"``).

        A missing ``factor`` is ``max_position_embeddings / original_max_position_embeddings``, as HF; dynamic NTK's
        trained length is ``max_position_embeddings``.
        """
        rope_type = params.get("rope_type", params.get("type", "default"))
        if not isinstance(rope_type, str) or rope_type not in HF_TYPES:
            raise ValueError(f"rope_parameters['rope_type'] {rope_type!r} has no ndpe equivalent; supported: "
                             f"{sorted(HF_TYPES)}")
        kind = HF_TYPES[rope_type]
        if kind is None:
            return None

        def number(key: str, default: Any = None, required: bool = False) -> Any:
            value = params.get(key)
            if value is None:
                if required:
                    raise ValueError(f"rope_type {rope_type!r} needs rope_parameters[{key!r}] (a number), which the "
                                     "config lacks")
                return default
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"rope_parameters[{key!r}] must be a number, got {value!r}")
            return float(value)

        original = number("original_max_position_embeddings")
        if original is None and kind in ("yarn", "llama3", "longrope"):
            original = max_position_embeddings  # HF's default (standardize_rope_params)
        factor = number("factor")
        if factor is None and kind in ("yarn", "longrope") and original and max_position_embeddings:
            factor = max_position_embeddings / original  # yarn / longrope, as HF
        if factor is None:
            number("factor", required=True)
        opts: dict[str, Any] = {}
        if kind == "yarn":
            opts.update(beta_fast=number("beta_fast") or BETA_FAST, beta_slow=number("beta_slow") or BETA_SLOW,
                        mscale=number("mscale"), mscale_all_dim=number("mscale_all_dim"),
                        truncate=bool(params.get("truncate", True)))
        if kind == "llama3":
            opts.update(low_freq_factor=number("low_freq_factor", required=True),
                        high_freq_factor=number("high_freq_factor", required=True))
        if kind == "longrope":
            for key in ("short_factor", "long_factor"):
                if not isinstance(params.get(key), (list, tuple)):
                    raise ValueError(f"rope_type 'longrope' needs rope_parameters[{key!r}] (a list of numbers, one "
                                     f"per rotary pair), got {params.get(key)!r}")
            opts.update(short_factor=params["short_factor"], long_factor=params["long_factor"])
        if kind in ("yarn", "longrope") and params.get("attention_factor") is not None:
            opts["attention_factor"] = number("attention_factor")
        train = {"linear": None, "dynamic-ntk": max_position_embeddings}.get(kind, original)
        if kind in ("dynamic-ntk", "yarn", "llama3", "longrope") and train is None:
            raise ValueError(f"rope_type {rope_type!r} needs config.max_position_embeddings (or "
                             "rope_parameters['original_max_position_embeddings']): the trained length")
        return cls(kind, scale=float(factor), train_shape=train, **opts)

    def axis_inv_freq(self, axis: int, dim: int, theta: float, short_factor: Sequence[float] | None = None, *,
                      device=None) -> tuple[Tensor, float]:
        """Axis ``axis``'s static frequencies ``(dim // 2,)`` float64 and cos/sin factor (:func:`scaled_inv_freq`);
        ``scale`` and ``train_shape`` per axis (:meth:`for_axes`), ``short_factor`` the axis' share of LongRoPE's."""
        scale, train = cast(tuple, self.scale), self.train_shape
        return scaled_inv_freq(dim, theta, self.type, scale[axis], None if train is None else cast(tuple, train)[axis],
                               beta_fast=self.beta_fast, beta_slow=self.beta_slow, truncate=self.truncate,
                               mscale=self.mscale, mscale_all_dim=self.mscale_all_dim,
                               attention_factor=self.attention_factor, low_freq_factor=self.low_freq_factor,
                               high_freq_factor=self.high_freq_factor, factors=short_factor, device=device)


HF_TYPES = {"default": None, "linear": "linear", "dynamic": "dynamic-ntk", "yarn": "yarn", "llama3": "llama3",
            "longrope": "longrope"}  # HF rope_type -> RopeScaling.type


def rope_scaling(scaling: "str | RopeScaling | None", **options: Any) -> "RopeScaling | None":
    """The :class:`RopeScaling` of ``rope``'s options: ``scaling`` (a type name, an object or None) and the keyword
    fields of a type name (``scale=``, ``train_shape=``, ``beta_fast=``...; left at their defaults otherwise)."""
    defaults = {f.name: f.default for f in dataclasses.fields(RopeScaling)}
    changed = [n for n, v in options.items() if v is not None and v != defaults[n]]
    if isinstance(scaling, RopeScaling):
        if changed:
            raise ValueError(f"scaling= is a RopeScaling: pass {', '.join(changed)} inside it, "
                             f"not as options of the encoding")
        return scaling
    if scaling is None:
        if {"scale", "train_shape"} & set(changed):
            raise ValueError("scale and train_shape need a scaling ('linear', 'ntk', 'dynamic-ntk' or 'yarn')")
        for name in changed:
            raise ValueError(f"{name} is used by scaling={' or '.join(map(repr, _OWNERS[name]))} only, "
                             "not by scaling=None")
        return None
    return RopeScaling(scaling, **options)


def _numbers(value, name: str, low: float, inclusive: bool) -> float | tuple[float, ...]:
    """One number, or a tuple/list of numbers (one per axis), each checked; as float or tuple of floats."""
    if isinstance(value, (tuple, list)):
        return per_axis(value, len(value), name, low=low, inclusive=inclusive)
    return per_axis(value, 1, name, low=low, inclusive=inclusive)[0]


def _factors(value, name: str) -> tuple[float, ...]:
    """LongRoPE's per-frequency divisors: a sequence of positive numbers, as a tuple of floats."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise TypeError(f"{name} must be a sequence of numbers (one per frequency, rot_dim / 2), got {value!r}")
    return tuple(check_number(v, name, low=0.0, inclusive=False) for v in value)
