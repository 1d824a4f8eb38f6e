"""RoPE channel layouts: which positional axis turns each rotary pair of a head, one registered entry each.

:data:`LAYOUTS` is the table ``rope`` picks from with ``channels=`` (as it picks a frequency scheme from
:data:`ndpe.frequencies.FREQUENCIES` and a scaling type from :data:`ndpe.scaling.SCALINGS`); left None, the layout
whose options are set (``mrope_section=`` picks ``"mrope"``), else ``"axial"``. Each entry is a function
``fn(dims, head_dim, axis_dims, *, <its options>) -> Channels``; its keyword-only parameters are its options
(:mod:`ndpe.tables`), so an option of one layout set with another is refused in one line.

- ``"axial"`` (default): every axis its own frequency series over its ``axis_dims`` channels, in one block per axis.
  ``grid_indexing="xy"`` (timm's) puts axis 1's block first; ``proportion=p < 1`` (p-RoPE, HF's ``proportional``)
  zeroes the slowest ``1 - p`` of each axis' frequencies; ``head_axes=`` maps heads to axes (:func:`check_head_axes`).
- ``"mrope"`` (Qwen2-VL's M-RoPE): ONE series over ``rot_dim = 2 * sum(mrope_section)`` channels, axis ``a`` taking
  ``mrope_section[a]`` of its frequencies, in consecutive sections or (``mrope_interleaved=True``, Qwen3-VL) dealt
  out: frequency ``j`` to axis ``a >= 1`` when ``j % dims == a`` and ``j < dims * mrope_section[a]``, else axis 0.

>>> LAYOUTS["mrope"].fn(3, 16, None, mrope_section=(2, 3, 3)).freq_axis.tolist()
[0, 0, 1, 1, 1, 2, 2, 2]
>>> LAYOUTS["axial"].fn(2, 8, None, grid_indexing="xy").order.tolist()     # axis 1's two pairs first
[2, 3, 0, 1]
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, NamedTuple, Sequence

import torch
from torch import Tensor

from .checks import check_bool, check_choice, check_number, per_axis
from .tables import Formula, Table


class Channels(NamedTuple):
    """A layout of a head's rotary pairs: ``axis_dims`` (rotary channels per axis), and per pair, in channel order,
    ``freq_axis`` (the axis whose coordinate turns it) and ``order`` (its frequency's index in the axes' series
    concatenated in axis order), each ``(rot_dim / 2,)`` int64."""

    axis_dims: tuple[int, ...]
    freq_axis: Tensor
    order: Tensor


@dataclass(frozen=True)
class ChannelLayout(Formula):
    """A layout of :data:`LAYOUTS`. ``shared_series``: one frequency series over all ``rot_dim`` channels, cut among
    the axes (theta's series, one theta, no scaling), else one series per axis; ``summary``: for errors."""

    shared_series: bool = False
    summary: str = ""


LAYOUTS: Table[ChannelLayout] = Table("channels", "channel layouts")


def channel_layout(name: str, *, shared_series: bool = False, summary: str = "") -> Callable:
    """Register the decorated ``fn(dims, head_dim, axis_dims, *, <options>) -> Channels`` as layout ``name``."""
    def wrap(fn: Callable[..., Channels]) -> Callable[..., Channels]:
        LAYOUTS.register(ChannelLayout(name, fn, None, shared_series, summary or f"the {name!r} layout"))
        return fn

    return wrap


def resolve_axis_dims(head_dim: int, dims: int, axis_dims: Sequence[int] | None) -> tuple[int, ...]:
    """Rotary channels per axis: checked ``axis_dims`` or the default equal even split of ``head_dim``."""
    if head_dim % 2:
        raise ValueError(f"rotary encodings need an even head_dim (dim // heads), got head_dim={head_dim}")
    if axis_dims is None:
        share = 2 * (head_dim // (2 * dims))
        if share == 0:
            raise ValueError(f"head_dim={head_dim} is too small to rotate {dims} axes: need head_dim >= {2 * dims}")
        return (share,) * dims
    if isinstance(axis_dims, int) or not all(isinstance(d, int) and not isinstance(d, bool) for d in axis_dims):
        raise TypeError(f"axis_dims must be a tuple of {dims} ints (rotary channels per axis), got {axis_dims!r}")
    axis_dims = tuple(axis_dims)
    if len(axis_dims) != dims:
        raise ValueError(f"axis_dims must have one entry per axis ({dims}), got {axis_dims}")
    if any(d < 0 or d % 2 for d in axis_dims) or sum(axis_dims) == 0:
        raise ValueError(f"axis_dims entries must be even and >= 0 (pairs of channels) with a positive sum, "
                         f"got {axis_dims}")
    if sum(axis_dims) > head_dim:
        raise ValueError(f"axis_dims {axis_dims} rotate {sum(axis_dims)} channels but head_dim is {head_dim}")
    return axis_dims


@channel_layout("axial", summary="one series per axis, in blocks")
def axial_channels(dims: int, head_dim: int, axis_dims: Sequence[int] | None, *, grid_indexing: str = "ij",
                   proportion: float = 1.0, head_axes: Sequence[int | str | None] | None = None) -> Channels:
    check_choice(grid_indexing, "grid_indexing", ("ij", "xy"))
    if grid_indexing == "xy" and dims < 2:
        raise ValueError(f"grid_indexing='xy' swaps the channel blocks of the first two axes: it needs dims >= 2, got "
                         f"dims={dims}")
    check_number(proportion, "proportion", low=0.0, inclusive=False, high=1.0)
    axis_dims = resolve_axis_dims(head_dim, dims, axis_dims)
    if proportion != 1.0 and min(int(proportion * d // 2) for d in axis_dims) == 0:
        raise ValueError(f"proportion={proportion!r} keeps no frequency of an axis of {min(axis_dims) // 2} "
                         f"(axis_dims {axis_dims}): nothing would rotate; use proportion >= {2 / min(axis_dims):g}")
    blocks = (1, 0, *range(2, dims)) if grid_indexing == "xy" else tuple(range(dims))  # the axes in channel order
    starts = [sum(axis_dims[:a]) // 2 for a in range(dims)]
    pairs = torch.tensor([axis_dims[a] // 2 for a in blocks])
    order = torch.cat([torch.arange(starts[a], starts[a] + axis_dims[a] // 2) for a in blocks])
    return Channels(axis_dims, torch.repeat_interleave(torch.tensor(blocks), pairs), order)


@channel_layout("mrope", shared_series=True, summary="M-RoPE's one series cut in mrope_section")
def mrope_channels(dims: int, head_dim: int, axis_dims: Sequence[int] | None, *, mrope_section: Sequence[int],
                   mrope_interleaved: bool = False) -> Channels:
    check_bool(mrope_interleaved, "mrope_interleaved")
    if axis_dims is not None:
        raise ValueError("pass mrope_section (frequencies per axis) or axis_dims (channels per axis), not both")
    section = per_axis(mrope_section, dims, "mrope_section", low=0, integer=True)
    if sum(section) == 0 or 2 * sum(section) > head_dim:
        raise ValueError(f"mrope_section {section} must hold 1 to head_dim / 2 = {head_dim // 2} "
                         f"frequencies in all, got {sum(section)}")
    n = sum(section)
    if not mrope_interleaved:
        axis = torch.repeat_interleave(torch.arange(dims), torch.tensor(section))
    else:
        j = torch.arange(n)
        axis = torch.zeros_like(j)
        for a in range(1, dims):
            axis[(j % dims == a) & (j < dims * section[a])] = a
    return Channels(tuple(2 * s for s in section), axis, torch.arange(n))


def resolve_channels(channels: str | None, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The layout's name and its options, every one: ``channels``, or else the one layout whose options are set
    (``mrope_section=`` picks ``"mrope"``), else ``"axial"``; options of two layouts refuse in one line."""
    channels = LAYOUTS.pick(channels, options, "axial")
    return channels, LAYOUTS.resolve(channels, options)


def check_head_axes(head_axes: Any, heads: int, dims: int) -> tuple[int | str | None, ...] | None:
    """``head_axes`` checked: one entry per head, each an axis (the head's ``rot_dim`` channels all turn by it, the
    whole rotary budget spent on that axis), None (the head is not rotated) or ``"all"`` (the axial split)."""
    if head_axes is None:
        return None
    choices = f"an axis 0..{dims - 1}, None (unrotated) or 'all'"
    if isinstance(head_axes, (str, bytes)) or not isinstance(head_axes, Sequence) or len(head_axes) != heads:
        raise ValueError(f"head_axes must list one entry per head ({heads}), each {choices}; got {head_axes!r}")
    for entry in head_axes:
        if not (entry is None or entry == "all" or (isinstance(entry, int) and not isinstance(entry, bool)
                                                     and 0 <= entry < dims)):
            raise ValueError(f"head_axes entries must each be {choices}; got {entry!r} in {head_axes!r}")
    return tuple(head_axes)
