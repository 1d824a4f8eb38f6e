"""Grid shapes and coordinates: validation and the ``ij`` (row-major) coordinate grids.

>>> grid_coords((2, 3))
tensor([[0., 0.],
        [0., 1.],
        [0., 2.],
        [1., 0.],
        [1., 1.],
        [1., 2.]])
"""
from __future__ import annotations

import math
from typing import Sequence

import torch
from einops import rearrange
from torch import Tensor

from .memory import check_memory, coords_bytes

COORD_MODES = ("index", "pixel", "centered")
MAX_ANGLE = 2.0 ** 46
"""Rotary angles (radians) past which float64 keeps no 1e-2 rad precision (its spacing there is 2**-6 rad): a rotation
by a larger angle no longer depends on the position offset alone (:func:`angle_limit`)."""
FLOAT32_MAX = torch.finfo(torch.float32).max
"""The largest finite float32, the dtype kinds compute in: the ceiling of every limit that :func:`tightest` picks."""


def check_grid_shape(grid_shape: Sequence[int], dims: int) -> tuple[int, ...]:
    """Validate ``grid_shape`` as ``dims`` positive ints and return it as a tuple."""
    if isinstance(grid_shape, int):
        grid_shape = (grid_shape,)
    if isinstance(grid_shape, Tensor):
        grid_shape = tuple(grid_shape.tolist())
    if isinstance(grid_shape, (str, bytes)):
        raise TypeError(f"grid_shape must be a tuple of {dims} ints, got {grid_shape!r}")
    try:
        shape = tuple(grid_shape)
    except TypeError:
        raise TypeError(f"grid_shape must be a tuple of {dims} ints, got {grid_shape!r}") from None
    if len(shape) != dims:
        raise ValueError(f"grid_shape {shape} has {len(shape)} axes but the encoding has dims={dims}")
    for n in shape:
        if isinstance(n, bool) or not isinstance(n, int) and not (hasattr(n, "__index__") or _is_symint(n)):
            raise TypeError(f"grid_shape must hold ints, got {shape!r}")
        if not _is_symint(n) and n < 1:
            raise ValueError(f"grid_shape sizes must be >= 1, got {shape}")
    return shape


def _is_symint(n) -> bool:
    return isinstance(n, torch.SymInt)


def axis_coords(n: int, mode: str = "index", *, device: torch.device | str | None = None,
                dtype: torch.dtype = torch.float32) -> Tensor:
    """Coordinates ``(n,)`` along one axis.

    ``index``: 0 .. n-1; ``pixel``: -1 .. 1 inclusive (0 when n = 1);
    ``centered``: pixel centres ``(i + 0.5) / n * 2 - 1``, inside (-1, 1).
    """
    if not torch.compiler.is_compiling():
        check_memory(8 * n, lambda: f"coordinates of an axis of {n} points (float32)", "use a shorter axis")
    i = torch.arange(n, device=device, dtype=dtype)
    if mode == "index":
        return i
    if mode == "pixel":
        return i * (2.0 / max(n - 1, 1)) - (1.0 if n > 1 else 0.0)
    if mode == "centered":
        return (i + 0.5) * (2.0 / n) - 1.0
    raise ValueError(f"coordinate mode must be one of {COORD_MODES}, got {mode!r}")


def grid_coords(grid_shape: Sequence[int], mode: str = "index", *, device: torch.device | str | None = None,
                dtype: torch.dtype = torch.float32) -> Tensor:
    """Coordinates of every grid point, ``(N, dims)``, row-major (``ij``: first axis slowest).

    Their size is checked against the memory budget (:mod:`ndpe.memory`) before anything is allocated.
    """
    if not torch.compiler.is_compiling():
        check_memory(coords_bytes(grid_shape),
                     lambda: f"coordinates of grid {tuple(grid_shape)} ({math.prod(grid_shape)} tokens x "
                             f"{len(grid_shape)} float32)",
                     "encode a smaller grid (or pass positions= for the tokens you need)")
    axes = [axis_coords(n, mode, device=device, dtype=dtype) for n in grid_shape]
    mesh = torch.meshgrid(*axes, indexing="ij")
    return rearrange(torch.stack(mesh), "d ... -> (...) d")


def check_positions(positions: Tensor, dims: int, num_tokens: int | None = None,
                    limit: tuple[float, str] | None = None) -> Tensor:
    """Validate explicit coordinates ``(N, dims)`` or ``(B, N, dims)``; returns them as float32 (float64 kept).

    They must be finite and, with ``limit`` (the largest ``|coordinate|`` the encoding's arithmetic represents and
    why: :meth:`ndpe.Encoding.position_limit`), within ``limit``: both from one reduction."""
    if not isinstance(positions, Tensor):
        raise TypeError(f"positions must be a tensor of shape (N, {dims}) or (B, N, {dims}), got {type(positions).__name__}")
    if positions.device.type == "meta":
        raise ValueError("positions are on the meta device (shape only, no values); pass real coordinates")
    if positions.ndim not in (2, 3) or positions.shape[-1] != dims:
        raise ValueError(f"positions must have shape (N, {dims}) or (B, N, {dims}), got {tuple(positions.shape)}")
    if num_tokens is not None and positions.shape[-2] != num_tokens:
        raise ValueError(f"positions hold {positions.shape[-2]} tokens but grid_shape has {num_tokens}")
    if positions.dtype != torch.float64:
        positions = positions.to(torch.float32)
    if _is_compiling() or positions.numel() == 0:
        return positions
    reach = float(positions.abs().amax())  # NaN if any is
    if not math.isfinite(reach):
        raise ValueError("positions contain NaN or inf; expected finite coordinates")
    if limit is not None and reach > limit[0]:
        raise ValueError(f"positions reach {reach:g}, past {limit[0]:.3g}, {limit[1]}: use smaller positions (e.g. "
                         "offsets from the sequence's start)")
    return positions


def check_finite_output(values: Sequence[Tensor], kind: str, positions: Tensor, dtype: torch.dtype) -> None:
    """Refuse (``ValueError``, one line) an output of explicit ``positions`` that holds NaN or inf in ``dtype``: the
    check of a kind that declares no position limit (:meth:`ndpe.Encoding.position_limit`), after it encoded them. One
    reduction over the output's tensors ``values``; none under ``torch.compile``."""
    if _is_compiling() or not values or bool(torch.stack([torch.isfinite(t).all() for t in values]).all()):
        return
    raise ValueError(f"{kind}'s output is not finite in {str(dtype).removeprefix('torch.')} for positions reaching "
                     f"{float(positions.abs().amax()):g}: use smaller positions (e.g. offsets from the sequence's "
                     "start) or a wider dtype (the kind declares no position_limit: docs/guide.md, \"Adding a kind\")")


def angle_limit(kind: str, fastest: float) -> tuple[float, str] | None:
    """The largest ``|coordinate|`` a rotary kind whose fastest frequency is ``fastest`` (radians per unit) turns by
    at most :data:`MAX_ANGLE`, and why (for :func:`check_positions`); None if nothing turns.

    >>> angle_limit("rope", 1.0)[0] == 2.0 ** 46
    True
    """
    if not fastest > 0:
        return None
    return MAX_ANGLE / fastest, (f"where {kind}'s fastest frequency ({fastest:.3g} rad per unit) turns float64 angles "
                                 "by 2**46 rad, past which they keep no 1e-2 rad precision")


def output_max(dtype: torch.dtype) -> float:
    """The largest finite value of an output returned in ``dtype``: ``dtype``'s own, or float32's for a wider dtype
    (the math runs in float32 first).

    >>> output_max(torch.float16), output_max(torch.float64) == FLOAT32_MAX
    (65504.0, True)
    """
    return min(torch.finfo(dtype).max, FLOAT32_MAX)


def pair_limit(kind: str, dims: int, squared: bool) -> tuple[float, str]:
    """The largest ``|coordinate|`` whose pairwise offsets ``p_i - p_j`` (up to twice it per axis) stay finite in
    float32, and with ``squared`` their squared Euclidean length ``sum_a o_a ** 2`` over ``dims`` axes too; and why.

    >>> pair_limit("alibi", 1, False)[0] == FLOAT32_MAX / 2
    True
    """
    if squared:
        return math.sqrt(FLOAT32_MAX / dims) / 2, f"where {kind}'s squared float32 offsets overflow"
    return FLOAT32_MAX / 2, f"where {kind}'s float32 offsets p_i - p_j overflow"


def tightest(*limits: tuple[float, str] | None) -> tuple[float, str] | None:
    """The smallest of several position limits ``(|coordinate|, why)`` (None ones skipped); None if all are.

    >>> tightest((4.0, "a"), None, (2.0, "b"))
    (2.0, 'b')
    """
    return min((limit for limit in limits if limit is not None), key=lambda limit: limit[0], default=None)


def check_increasing(positions: Tensor, why: str, name: str = "positions") -> None:
    """Refuse ``positions`` ``(..., N, 1)`` that do not increase along the tokens, for a kind whose positions only
    order the tokens (``why``: what it does in token order), naming the first offending step."""
    if torch.compiler.is_compiling():
        return
    steps = positions[..., 1:, 0] > positions[..., :-1, 0]
    if not bool(steps.all()):
        *sample, at = (int(i) for i in (~steps).nonzero()[0])  # the first offending step
        row = positions[tuple(sample)][..., 0]
        raise ValueError(f"{why}: {name} must increase along the sequence, but token {at + 1} is at "
                         f"{float(row[at + 1])} after {float(row[at])}")

def latlon_grid(grid_shape: Sequence[int], *, device: torch.device | str | None = None) -> Tensor:
    """(latitude, longitude) in degrees ``(H * W, 2)`` of the cell centres of an equiangular ``(H, W)`` grid over the
    whole sphere, row-major: row 0 is the northernmost band (a map's top row, as ERA5 stores it), column 0 starts at
    longitude -180. Latitude ``90 - (i + 0.5) * 180 / H``, longitude ``-180 + (j + 0.5) * 360 / W``.

    >>> latlon_grid((2, 4)).tolist()[:4]
    [[45.0, -135.0], [45.0, -45.0], [45.0, 45.0], [45.0, 135.0]]
    """
    if not torch.compiler.is_compiling():
        check_memory(coords_bytes(grid_shape),
                     lambda: f"coordinates of grid {tuple(grid_shape)} ({math.prod(grid_shape)} tokens x 2 float32)",
                     "encode a smaller grid (or pass positions= for the tokens you need)")
    rows, cols = grid_shape
    lat = 90.0 - (torch.arange(rows, device=device) + 0.5) * (180.0 / rows)  # (H,) north to south
    lon = (torch.arange(cols, device=device) + 0.5) * (360.0 / cols) - 180.0  # (W,) west to east
    mesh = torch.meshgrid(lat, lon, indexing="ij")
    return rearrange(torch.stack(mesh), "d h w -> (h w) d")


def check_latlon(positions: Tensor) -> None:
    """Refuse (one line) positions ``(..., 2)`` other than (latitude, longitude) degrees in [-90, 90] x [-180, 180]."""
    if positions.shape[-1] != 2:
        raise ValueError(f"positions must be (latitude, longitude) pairs in degrees, shape (..., 2), "
                         f"got shape {tuple(positions.shape)}")
    if _is_compiling():
        return
    lat, lon = positions[..., 0], positions[..., 1]
    if not bool((lat.abs() <= 90).all() and (lon.abs() <= 180).all()):
        raise ValueError(f"positions must be (latitude, longitude) in degrees, latitude in [-90, 90] and longitude in "
                         f"[-180, 180]; got latitudes in [{float(lat.min()):g}, {float(lat.max()):g}] and longitudes "
                         f"in [{float(lon.min()):g}, {float(lon.max()):g}] (radians? (lon, lat) order?)")


def unit_vectors(latlon: Tensor) -> Tensor:
    """Points on the unit sphere ``(..., 3)`` (x towards (0, 0), y towards (0, 90), z the north pole) of
    (latitude, longitude) degrees ``(..., 2)``."""
    lat, lon = torch.deg2rad(latlon).unbind(-1)
    return torch.stack([lat.cos() * lon.cos(), lat.cos() * lon.sin(), lat.sin()], dim=-1)


def num_grid_tokens(grid_shape: Sequence[int]) -> int:
    return math.prod(grid_shape)


def _is_compiling() -> bool:
    return torch.compiler.is_compiling()
