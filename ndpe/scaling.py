"""RoPE frequencies and their scaling for extrapolation: pure functions, one axis at a time.

Notation (per positional axis): ``d`` rotary channels (``d / 2`` frequencies), base ``b``
(``theta``), scale ``s >= 1`` (target length / trained length), trained length ``L``.

- Axial RoPE (Su et al. 2021):   ``f_j = b ** (-2j / d)``, ``j = 0 .. d/2 - 1``; angle ``= m * f_j``.
- Position interpolation ("linear", Chen et al. 2023): ``m -> m / s``, i.e. ``f_j / s``.
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
  are multiplied by the attention factor ``0.1 ln s + 1`` (1 when ``s <= 1``).

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

SCALINGS = ("linear", "ntk", "dynamic-ntk", "yarn")
NEEDS_TRAIN_SHAPE = ("dynamic-ntk", "yarn")
BETA_FAST, BETA_SLOW = 32.0, 1.0


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
                  beta_slow: float = BETA_SLOW, device=None, dtype=torch.float64) -> Tensor:
    """YaRN "NTK-by-parts" frequencies ``(dim // 2,)``: extrapolate fast ones, interpolate slow ones."""
    lo = max(math.floor(yarn_correction_dim(beta_fast, dim, theta, train_length)), 0)
    hi: float = min(math.ceil(yarn_correction_dim(beta_slow, dim, theta, train_length)), dim - 1)
    if lo == hi:
        hi += 0.001  # as the reference code: avoid a zero-width ramp
    j = torch.arange(dim // 2, device=device, dtype=dtype)
    ramp = torch.clamp((j - lo) / (hi - lo), 0.0, 1.0)  # 0: keep (extrapolate), 1: divide by s
    freq = axial_inv_freq(dim, theta, device=device, dtype=dtype)
    return freq / scale * ramp + freq * (1.0 - ramp)


def yarn_attention_factor(scale: float) -> float:
    """YaRN's ``sqrt(1/t) = 0.1 ln s + 1`` multiplying cos and sin (so the logits by its square)."""
    return 1.0 if scale <= 1.0 else 0.1 * math.log(scale) + 1.0


def scaled_inv_freq(dim: int, theta: float, scaling: str | None = None, scale: float = 1.0,
                    train_length: float | None = None, *, device=None) -> tuple[Tensor, float]:
    """One axis' frequencies ``(dim // 2,)`` float64 under ``scaling`` and its cos/sin factor.

    ``"dynamic-ntk"`` gives the frequencies at or below the trained length (no change): the
    encoding recomputes them from the current length with :func:`dynamic_ntk_theta`.

    >>> scaled_inv_freq(4, 10000.0, "linear", 2.0)
    (tensor([0.5000, 0.0050], dtype=torch.float64), 1.0)
    """
    if scaling is None or scaling == "dynamic-ntk":
        return axial_inv_freq(dim, theta, device=device), 1.0
    if scaling == "linear":
        return axial_inv_freq(dim, theta, device=device) / scale, 1.0
    if scaling == "ntk":
        return axial_inv_freq(dim, ntk_theta(dim, theta, scale), device=device), 1.0
    if scaling == "yarn":
        return (yarn_inv_freq(dim, theta, scale, cast(float, train_length), device=device),  # checked by the kind
                yarn_attention_factor(scale))
    raise ValueError(f"scaling must be None or one of {SCALINGS}, got {scaling!r}")
