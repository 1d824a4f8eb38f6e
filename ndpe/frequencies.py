"""RoPE frequency schemes: the rotation speeds of one axis' channel pairs, one registered function per scheme.

:data:`FREQUENCIES` is the table ``rope`` picks from with ``freqs=`` (timm keeps one class per scheme in
``pos_embed_sincos.py``, rotary-embedding-torch a ``freqs_for=`` switch). Each entry is a function
``fn(dim, theta, *, <its options>, device=None) -> Tensor (dim // 2,)`` float64 for one axis of ``dim`` rotary
channels and base ``theta``; its keyword-only parameters are its options (:mod:`ndpe.tables`):

- ``"theta"`` (default, Su et al. 2021): ``theta ** (-2j / dim)``, the only series RoPE scaling
  (:mod:`ndpe.scaling`) and M-RoPE's ``mrope_section`` apply to.
- ``"pixel"`` (timm ``in_pixels=True``; ``max_res=``, ``linear_bands=``): :func:`pixel_inv_freq`.
- ``"periods"`` (DINOv3; ``min_period=``, ``max_period=``): :func:`period_inv_freq`.

A scheme other than ``"theta"`` takes no scaling or ``mrope_section`` (and, with ``theta=False``, no theta).

>>> @frequency_scheme("harmonic")                 # f_j = 1 / (1 + j): registered, then ndpe.make(..., freqs="harmonic")
... def harmonic(dim, theta, *, device=None):
...     return 1 / (1 + torch.arange(dim // 2, device=device, dtype=torch.float64))
>>> harmonic(6, 1e4).tolist()
[1.0, 0.5, 0.3333333333333333]
>>> _ = FREQUENCIES.unregister("harmonic")
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import Tensor

from .checks import check_bool, check_number
from .tables import Formula, Table


def axial_inv_freq(dim: int, theta: float | Tensor, *, device=None, dtype=torch.float64) -> Tensor:
    """Frequencies ``theta ** (-arange(0, dim, 2) / dim)``, shape ``(dim // 2,)``.

    ``theta`` may be a 0-d tensor (dynamic NTK computes it from the current length).

    >>> axial_inv_freq(4, 10000.0)
    tensor([1.0000, 0.0100], dtype=torch.float64)
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


@dataclass(frozen=True)
class FreqScheme(Formula):
    """A frequency scheme of :data:`FREQUENCIES`. ``summary``: what it is and what it refuses, for errors;
    ``theta``: whether it reads ``theta``."""

    summary: str = ""
    theta: bool = True


FREQUENCIES: Table[FreqScheme] = Table("freqs", "frequency schemes")


def frequency_scheme(name: str, *, summary: str = "", theta: bool = True,
                     check: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> Callable:
    """Register the decorated ``fn(dim, theta, *, <options>, device=None) -> (dim // 2,)`` as scheme ``name``."""
    def wrap(fn: Callable[..., Tensor]) -> Callable[..., Tensor]:
        FREQUENCIES.register(FreqScheme(name, fn, check, summary or f"the {name!r} frequency scheme", theta))
        return fn

    return wrap


@frequency_scheme("theta", summary="theta's series theta ** (-2j / d) per axis")
def theta_freqs(dim: int, theta: float, *, device=None) -> Tensor:
    return axial_inv_freq(dim, theta, device=device)


def _check_pixel(options: dict[str, Any]) -> dict[str, Any]:
    return {"max_res": check_number(options["max_res"], "max_res", low=1.0, inclusive=False),
            "linear_bands": check_bool(options["linear_bands"], "linear_bands")}


@frequency_scheme("pixel", theta=False, check=_check_pixel,
                  summary="pixel bands (timm in_pixels=True) in place of theta's series: it takes no theta, scaling "
                          "or mrope_section")
def pixel_freqs(dim: int, theta: float, *, max_res: float, linear_bands: bool = False, device=None) -> Tensor:
    return pixel_inv_freq(dim, max_res, linear=linear_bands, device=device)


def _check_periods(options: dict[str, Any]) -> dict[str, Any]:
    low, high = options["min_period"], options["max_period"]
    if (low is None) != (high is None):
        raise ValueError(f"min_period and max_period go together (DINOv3's min/max mode), got min_period={low!r}, "
                         f"max_period={high!r}")
    if low is None:
        return options
    low = check_number(low, "min_period", low=0.0, inclusive=False, dtype=torch.float32)
    high = check_number(high, "max_period", low=low, inclusive=False, dtype=torch.float32,
                        what=f"above min_period={low:g} (the periods are spaced between them)")
    return {"min_period": low, "max_period": high}


@frequency_scheme("periods", check=_check_periods,
                  summary="DINOv3's schedule, theta's series in turns instead of radians: it takes no max_res, "
                          "mrope_section or scaling")
def period_freqs(dim: int, theta: float, *, min_period: float | None = None, max_period: float | None = None,
                 device=None) -> Tensor:
    return period_inv_freq(dim, theta, min_period, max_period, device=device)


def resolve_scheme(freqs: str | None, options: dict[str, Any], theta_series: dict[str, Any]) -> tuple[str, dict]:
    """The scheme's name and its options (checked): ``freqs``, or else the one scheme whose options are set
    (``max_res=`` picks ``"pixel"``), else ``"theta"``. ``theta_series``: the options that only ``"theta"`` reads
    (``theta``, ``scaling``, ``mrope_section``), those set; a scheme that does not read them raises, in one line."""
    given = FREQUENCIES.given(options)
    freqs = FREQUENCIES.pick(freqs, options, "theta")
    entry = FREQUENCIES[freqs]
    foreign = {n: v for n, v in given.items() if n not in entry.options}
    if freqs != "theta":
        refused = {**foreign, **{n: v for n, v in theta_series.items() if n != "theta" or not entry.theta}}
        if refused:
            raise ValueError(f"freqs={freqs!r} sets {entry.summary}, got "
                             f"{', '.join(f'{n}={v!r}' for n, v in refused.items())}")
    for name in foreign:
        raise FREQUENCIES.refuse(name, freqs)
    return freqs, FREQUENCIES.resolve(freqs, options)
