"""RoPE scaling for extrapolation: one registered function per type (:data:`SCALINGS`), one axis at a time.

Notation (per positional axis): ``d`` rotary channels (``d / 2`` frequencies), base ``b``
(``theta``), scale ``s >= 1`` (target length / trained length; ``"linear"`` takes any ``s > 0``),
trained length ``L``.

- Axial RoPE (Su et al. 2021):   ``f_j = b ** (-2j / d)``, ``j = 0 .. d/2 - 1``; angle ``= m * f_j``.
- Position interpolation ("linear", Chen et al. 2023): ``m -> m / s``, i.e. ``f_j / s``; any ``s > 0``
  (``s < 1`` stretches positions, as timm EVA's ``ref_feat_shape`` larger than the grid does).
- NTK-aware ("ntk", bloc97 2023):  ``b' = b * s ** (d / (d - 2))``; the lowest frequency is
  interpolated by ``s``, the highest left alone. Hunyuan's ``ntk_alpha`` (its checkpoints' ``"dynamic"`` with a fixed
  ``alpha``, HF ``HunYuanMoEV1RotaryEmbedding.compute_ntk_alpha_rope_parameters``) is this with ``s = alpha``.
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

The table. :data:`SCALINGS` holds one entry per type, as Hugging Face's ``ROPE_INIT_FUNCTIONS``: a function
``fn(dim, theta, scale, train_length, *, <its options>, device=None) -> (frequencies (dim // 2,), cos/sin factor)``
registered with :func:`scaling_type`. Its keyword-only parameters are the type's options, declared once
(:mod:`ndpe.tables`): :class:`ndpe.RopeScaling` validates them, ``rope`` takes them as keywords, errors name their
owners. A type that picks its frequencies by the current length (dynamic NTK, LongRoPE) adds ``at_length``.

>>> axial_inv_freq(4, 10000.0)
tensor([1.0000, 0.0100], dtype=torch.float64)
>>> ntk_theta(4, 10000.0, 4.0)
160000.0
>>> tuple(SCALINGS)
('linear', 'ntk', 'dynamic-ntk', 'yarn', 'llama3', 'longrope')
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch
from torch import Tensor

from .checks import check_bool, check_number
from .frequencies import axial_inv_freq
from .tables import Formula, Table

BETA_FAST, BETA_SLOW = 32.0, 1.0
LOW_FREQ_FACTOR, HIGH_FREQ_FACTOR = 1.0, 4.0  # Llama 3.1's values (HF requires them in the config)


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


@dataclass(frozen=True)
class ScalingType(Formula):
    """A scaling type of :data:`SCALINGS` (see :func:`scaling_type` for its fields)."""

    at_length: Callable[..., Tensor] | None = None
    train_shape: bool = True
    any_scale: bool = False
    per_frequency: tuple[str, ...] = ()
    hf: str | None = None
    hf_train: str = "original_max_position_embeddings"
    hf_required: tuple[str, ...] = ()
    hf_factor_from_lengths: bool = False
    hf_factor: str = "factor"

    @property
    def scale_range(self) -> tuple[float, bool]:
        """The lowest scale and whether it is allowed: position interpolation divides positions by any s > 0 (s < 1
        stretches them: timm EVA's ref_feat_shape larger than the grid); the other formulas need s >= 1."""
        return (0.0, False) if self.any_scale else (1.0, True)


SCALINGS: Table[ScalingType] = Table("scaling", "scaling types")


def scaling_type(name: str, *, at_length: Callable[..., Tensor] | None = None,
                 check: Callable[[dict[str, Any]], dict[str, Any]] | None = None, train_shape: bool = True,
                 any_scale: bool = False, per_frequency: tuple[str, ...] = (), hf: str | None = None,
                 hf_train: str = "original_max_position_embeddings", hf_required: tuple[str, ...] = (),
                 hf_factor_from_lengths: bool = False, hf_factor: str = "factor") -> Callable:
    """Register the decorated ``fn(dim, theta, scale, train_length, *, <options>, device=None) -> (freq, factor)``.

    Args:
        at_length: ``(freq, length, dim, theta, scale, train_length, **options) -> freq``, the axis' frequencies at
            the current length ``max(position) + 1`` (a 0-d tensor), for a type that picks them by it.
        check: validates the options once all are filled (may normalize them; returns them).
        train_shape: the type reads the trained length (``train_shape=``); ``any_scale``: any ``scale > 0``.
        per_frequency: options holding ``rot_dim / 2`` numbers, axes in order (each axis gets its share).
        hf, hf_train, hf_required, hf_factor_from_lengths, hf_factor: Hugging Face's ``rope_type``, the config length
            that is the trained one, the options its configs must hold, whether a missing ``factor`` is
            ``max_position_embeddings / original_max_position_embeddings``, and the key that holds the scale
            (``"factor"``; Hunyuan's ``"alpha"``) (:meth:`ndpe.RopeScaling.from_hf`).
    """
    def wrap(fn: Callable[..., tuple[Tensor, float]]) -> Callable[..., tuple[Tensor, float]]:
        SCALINGS.register(ScalingType(name, fn, check, at_length, train_shape, any_scale, tuple(per_frequency), hf,
                                      hf_train, tuple(hf_required), hf_factor_from_lengths, hf_factor))
        return fn

    return wrap


def needs_train_shape(scaling: str) -> bool:
    """Whether scaling type ``scaling`` reads the trained length (``train_shape=``)."""
    return SCALINGS[scaling].train_shape


def _positive(options: dict[str, Any], *names: str, inclusive: bool = False, optional: bool = False) -> None:
    """Check ``options[name] > 0`` (``>= 0`` with ``inclusive``); ``optional``: None is allowed (unset)."""
    for name in names:
        if not (optional and options[name] is None):
            check_number(options[name], name, low=0.0, inclusive=inclusive)


@scaling_type("linear", train_shape=False, any_scale=True, hf="linear")
def linear_scaling(dim: int, theta: float, scale: float, train_length: float | None, *, device=None):
    return axial_inv_freq(dim, theta, device=device) / scale, 1.0


@scaling_type("ntk", train_shape=False, hf="ntk_alpha", hf_factor="alpha")
def ntk_scaling(dim: int, theta: float, scale: float, train_length: float | None, *, device=None):
    return axial_inv_freq(dim, ntk_theta(dim, theta, scale), device=device), 1.0


def _dynamic_ntk_at_length(freq: Tensor, length: Tensor, dim: int, theta: float, scale: float, train_length: float,
                           **options: Any) -> Tensor:
    theta_now = dynamic_ntk_theta(dim, theta, scale, length, train_length)
    return axial_inv_freq(dim, theta_now, device=length.device, dtype=length.dtype)  # the positions' dtype


@scaling_type("dynamic-ntk", at_length=_dynamic_ntk_at_length, hf="dynamic", hf_train="max_position_embeddings")
def dynamic_ntk_scaling(dim: int, theta: float, scale: float, train_length: float | None, *, device=None):
    """Up to the trained length nothing changes; beyond it ``at_length`` recomputes the base."""
    if dim:
        ntk_exponent(dim)  # refuses d = 2 now rather than at the first long input
    return axial_inv_freq(dim, theta, device=device), 1.0


def _check_yarn(options: dict[str, Any]) -> dict[str, Any]:
    _positive(options, "beta_fast", "beta_slow")
    _positive(options, "mscale", "mscale_all_dim", inclusive=True, optional=True)  # 0 counts as unset, as in HF
    _positive(options, "attention_factor", optional=True)
    check_bool(options["truncate"], "truncate")
    if options["beta_fast"] < options["beta_slow"]:
        raise ValueError(f"beta_fast must be >= beta_slow, got beta_fast={options['beta_fast']!r}, "
                         f"beta_slow={options['beta_slow']!r}")
    return options


@scaling_type("yarn", check=_check_yarn, hf="yarn", hf_factor_from_lengths=True)
def yarn_scaling(dim: int, theta: float, scale: float, train_length: float, *, beta_fast: float = BETA_FAST,
                 beta_slow: float = BETA_SLOW, mscale: float | None = None, mscale_all_dim: float | None = None,
                 attention_factor: float | None = None, truncate: bool = True, device=None):
    factor = yarn_attention_factor(scale, mscale, mscale_all_dim) if attention_factor is None else attention_factor
    freq = yarn_inv_freq(dim, theta, scale, train_length, beta_fast=beta_fast, beta_slow=beta_slow, truncate=truncate,
                         device=device)
    return freq, factor


def _check_llama3(options: dict[str, Any]) -> dict[str, Any]:
    _positive(options, "low_freq_factor", "high_freq_factor")
    if options["high_freq_factor"] <= options["low_freq_factor"]:
        raise ValueError(f"high_freq_factor must be > low_freq_factor, got high_freq_factor="
                         f"{options['high_freq_factor']!r}, low_freq_factor={options['low_freq_factor']!r}")
    return options


@scaling_type("llama3", check=_check_llama3, hf="llama3", hf_required=("low_freq_factor", "high_freq_factor"))
def llama3_scaling(dim: int, theta: float, scale: float, train_length: float, *,
                   low_freq_factor: float = LOW_FREQ_FACTOR, high_freq_factor: float = HIGH_FREQ_FACTOR, device=None):
    return llama3_inv_freq(dim, theta, scale, train_length, low_freq_factor=low_freq_factor,
                           high_freq_factor=high_freq_factor, device=device), 1.0


def _check_longrope(options: dict[str, Any]) -> dict[str, Any]:
    _positive(options, "attention_factor", optional=True)
    return {**options, "short_factor": _factors(options["short_factor"], "short_factor"),
            "long_factor": _factors(options["long_factor"], "long_factor")}


def _longrope_at_length(freq: Tensor, length: Tensor, dim: int, theta: float, scale: float, train_length: float, *,
                        long_factor: Sequence[float], **options: Any) -> Tensor:
    long_freq = longrope_inv_freq(dim, theta, long_factor, device=length.device, dtype=freq.dtype)
    return torch.where(length > train_length, long_freq, freq)  # the long factors beyond the trained length


@scaling_type("longrope", at_length=_longrope_at_length, check=_check_longrope,
              per_frequency=("short_factor", "long_factor"), hf="longrope", hf_required=("short_factor", "long_factor"),
              hf_factor_from_lengths=True)
def longrope_scaling(dim: int, theta: float, scale: float, train_length: float, *, short_factor: Sequence[float],
                     long_factor: Sequence[float], attention_factor: float | None = None, device=None):
    factor = longrope_attention_factor(scale, train_length) if attention_factor is None else attention_factor
    return longrope_inv_freq(dim, theta, short_factor, device=device), factor


def scaled_inv_freq(dim: int, theta: float, scaling: str | None = None, scale: float = 1.0,
                    train_length: float | None = None, *, device=None, **options: Any) -> tuple[Tensor, float]:
    """One axis' static frequencies ``(dim // 2,)`` float64 under ``scaling`` and its cos/sin factor: the formula of
    the table's entry, with the type's ``options`` (unchecked: :class:`ndpe.RopeScaling` checks them).

    >>> scaled_inv_freq(4, 10000.0, "linear", 2.0)
    (tensor([0.5000, 0.0050], dtype=torch.float64), 1.0)
    """
    if scaling is None:
        return axial_inv_freq(dim, theta, device=device), 1.0
    entry = SCALINGS[scaling]
    unknown = sorted(set(options) - set(entry.options))
    if unknown:
        raise TypeError(f"scaling={scaling!r} takes the options {list(entry.options)}, got {unknown}")
    return entry.fn(dim, theta, scale, train_length, **options, device=device)


def _factors(value, name: str) -> tuple[float, ...]:
    """Per-frequency divisors (LongRoPE's): a sequence of positive numbers, as a tuple of floats."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise TypeError(f"{name} must be a sequence of numbers (one per frequency, rot_dim / 2), got {value!r}")
    return tuple(check_number(v, name, low=0.0, inclusive=False) for v in value)
