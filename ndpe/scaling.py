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

import math
from typing import cast

import torch
from torch import Tensor

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
