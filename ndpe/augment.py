"""Position augmentation for coordinate-based kinds: CAPE, randomized positions and DINOv3's.

An augmentation is a module ``aug(positions, grid_shape) -> positions`` on float32 coordinates
``(N, dims)`` or ``(B, N, dims)`` in the kind's units. ``Encoding`` calls it in training mode
only, so ``pe.eval()`` gives exactly the un-augmented positions. Both augmentations below are
per sample: a ``(B, N, dims)`` input, or ``batch_size=B`` with an ``(N, dims)`` input, gives
``(B, N, dims)`` with one independent draw per sample; otherwise one draw per call, shared by
the batch. Randomness comes from ``generator`` (a ``torch.Generator`` on the positions' device)
or, when None, the global RNG, so ``torch.manual_seed`` reproduces a run.

>>> import ndpe, torch
>>> pe = ndpe.make(dims=2, kind="rope", dim=64, heads=4, augment="cape")
>>> pe.train()((3, 4)).rot[0].shape, pe.eval()((3, 4)).rot[0].shape
(torch.Size([1, 12, 8]), torch.Size([1, 12, 8]))
"""
from __future__ import annotations

import inspect
import math
from typing import Sequence

import torch
from einops import rearrange
from torch import Tensor, nn

from .checks import check_number, per_axis
from .memory import check_memory

__all__ = ["AUGMENTS", "CAPE", "CoordAug", "RandomPositions", "make_augment"]


def _check_batch(positions: Tensor, batch_size: int | None, dims: int) -> tuple[Tensor, bool]:
    """Positions as ``(B, N, dims)`` and whether the input was unbatched and should stay so."""
    if positions.ndim not in (2, 3) or positions.shape[-1] != dims:
        raise ValueError(f"positions must be (N, {dims}) or (B, N, {dims}), got {tuple(positions.shape)}")
    if positions.ndim == 3:
        if batch_size is not None and positions.shape[0] != batch_size:
            raise ValueError(f"positions hold a batch of {positions.shape[0]} but batch_size={batch_size}")
        return positions, False
    b = 1 if batch_size is None else batch_size
    return positions.expand(b, *positions.shape), batch_size is None


def _axis_spacing(positions: Tensor, grid_shape: Sequence[int] | None) -> Tensor:
    """Grid step per axis ``(dims,)`` (1 where unknown): ``(max - min) / (n - 1)`` of a regular grid."""
    dims = positions.shape[-1]
    if grid_shape is None:
        return positions.new_ones(dims)
    flat = rearrange(positions, "... n d -> (... n) d")
    span = flat.amax(0) - flat.amin(0)
    steps = positions.new_tensor([max(n - 1, 1) for n in grid_shape])
    return (span / steps).where(span > 0, 1.0)  # a single point or a flat axis: step 1


class CAPE(nn.Module):
    """CAPE (Likhomanenko et al. 2021): global shift, local shift and global scaling of coordinates.

    Per sample ``b`` and axis ``a``: ``p' = (p + delta_a + eps_{n,a}) * lambda`` with
    ``delta_a ~ U(-max_global_shift_a, max_global_shift_a)`` (coordinate units),
    ``eps_{n,a} ~ U(-s_a L_a / 2, s_a L_a / 2)`` per token (``s_a`` the grid step, ``L_a =
    max_local_shift_a``; ``L <= 1`` keeps token order) and ``log lambda ~ U(-log S, log S)``,
    one ``lambda`` for all axes (aspect ratio kept), ``S = max_global_scaling >= 1``.
    As in the CAPE reference code, scaling is about the coordinate origin.

    >>> aug = CAPE(dims=2, max_global_shift=0.5, batch_size=3).train()
    >>> aug(torch.zeros(12, 2), (3, 4)).shape
    torch.Size([3, 12, 2])
    """

    continuous = True  # makes fractional positions

    def __init__(self, *, dims: int, max_global_shift: float | Sequence[float] = 0.5,
                 max_local_shift: float | Sequence[float] = 0.5, max_global_scaling: float = 1.4,
                 batch_size: int | None = None, generator: torch.Generator | None = None):
        super().__init__()
        self.dims = dims
        self.max_global_shift = per_axis(max_global_shift, dims, "max_global_shift", low=0.0, what="finite and >= 0")
        self.max_local_shift = per_axis(max_local_shift, dims, "max_local_shift", low=0.0, what="finite and >= 0")
        self.max_global_scaling = per_axis(max_global_scaling, 1, "max_global_scaling", low=1.0,
                                           what="finite and >= 1")[0]
        self.batch_size = _check_batch_size(batch_size)
        self.generator = generator

    def _uniform(self, shape, bound: Tensor, like: Tensor) -> Tensor:
        u = torch.rand(shape, generator=self.generator, device=like.device, dtype=like.dtype)
        return (2 * u - 1) * bound  # U(-bound, bound)

    def forward(self, positions: Tensor, grid_shape: Sequence[int] | None = None) -> Tensor:
        """``positions`` ``(N, dims)`` or ``(B, N, dims)`` augmented as the class says (``grid_shape``: axis sizes)."""
        pos, squeeze = _check_batch(positions, self.batch_size, self.dims)  # (B, N, dims)
        b, n, d = pos.shape
        shift = self._uniform((b, 1, d), pos.new_tensor(self.max_global_shift), pos)
        local = self._uniform((b, n, d), pos.new_tensor(self.max_local_shift) * _axis_spacing(pos, grid_shape) / 2, pos)
        log_scale = self._uniform((b, 1, 1), pos.new_tensor(math.log(self.max_global_scaling)), pos)
        out = (pos + shift + local) * log_scale.exp()
        return out[0] if squeeze else out

    def extra_repr(self) -> str:
        return (f"dims={self.dims}, max_global_shift={self.max_global_shift}, max_local_shift={self.max_local_shift}, "
                f"max_global_scaling={self.max_global_scaling}, batch_size={self.batch_size}")


class RandomPositions(nn.Module):
    """Randomized positions (Ruoss et al. 2023): per axis, ``n`` sorted distinct ints from ``[0, max_len)``.

    Replaces index ``k`` of axis ``a`` by the ``k``-th smallest of ``n_a`` distinct integers drawn
    uniformly from ``[0, max_len_a)`` (per sample when batched), so a model trained on short
    grids sees the position values of long ones. Results are in the units of the input grid:
    ``origin_a + r * step_a`` (exactly ``r`` for index coordinates). Needs ``grid_shape``.

    >>> aug = RandomPositions(dims=1, max_len=100).train()
    >>> p = aug(torch.arange(5.0)[:, None], (5,)); p.shape, bool((p.diff(dim=0) > 0).all())
    (torch.Size([5, 1]), True)
    """

    continuous = False  # integer positions stay integers

    def __init__(self, *, dims: int, max_len: int | Sequence[int] = 1024, batch_size: int | None = None,
                 generator: torch.Generator | None = None):
        super().__init__()
        self.dims = dims
        try:
            self.max_len = per_axis(max_len, dims, "max_len", low=1, integer=True)
        except (TypeError, ValueError):
            raise ValueError(f"max_len must be a positive int or a tuple of {dims} positive ints, got {max_len!r}") from None
        self.batch_size = _check_batch_size(batch_size)
        self.generator = generator

    def sample(self, batch: int, n: int, max_len: int, device=None) -> Tensor:
        """``(batch, n)`` sorted distinct integers (float32) drawn uniformly from ``[0, max_len)``."""
        if not torch.compiler.is_compiling():
            check_memory(8 * batch * max_len,
                         lambda: f"random positions draw {batch} x {max_len} float32 keys (max_len={max_len})",
                         "use a smaller max_len")
        keys = torch.rand(batch, max_len, generator=self.generator, device=device)
        return keys.topk(n, dim=-1).indices.sort(dim=-1).values.float()

    def forward(self, positions: Tensor, grid_shape: Sequence[int] | None = None) -> Tensor:
        """``positions`` ``(N, dims)`` or ``(B, N, dims)`` augmented as the class says (``grid_shape``: axis sizes)."""
        if grid_shape is None:
            raise ValueError("RandomPositions needs grid_shape (the size of each axis); call pe(grid_shape, ...)")
        pos, squeeze = _check_batch(positions, self.batch_size, self.dims)  # (B, N, dims)
        too_long = [(n, m) for n, m in zip(grid_shape, self.max_len) if n > m]
        if too_long:
            raise ValueError(f"grid_shape {tuple(grid_shape)} exceeds max_len {self.max_len}: cannot draw n distinct "
                             f"positions from [0, max_len); raise max_len above the largest evaluation length")
        b = pos.shape[0]
        axes = [self.sample(b, n, m, pos.device) for n, m in zip(grid_shape, self.max_len)]  # each (B, n_a)
        mesh = torch.stack(torch.meshgrid(*[torch.arange(n, device=pos.device) for n in grid_shape], indexing="ij"))
        index = rearrange(mesh, "d ... -> (...) d")  # (N, dims) integer grid index
        ranks = torch.stack([ax[:, index[:, a]] for a, ax in enumerate(axes)], dim=-1)  # (B, N, dims)
        origin = rearrange(pos, "b n d -> (b n) d").amin(0)
        out = origin + ranks * _axis_spacing(pos, grid_shape)
        return out[0] if squeeze else out

    def extra_repr(self) -> str:
        return f"dims={self.dims}, max_len={self.max_len}, batch_size={self.batch_size}"


class CoordAug(nn.Module):
    """DINOv3's coordinate augmentation (Simeoni et al. 2025): shift, per-axis jitter, shared rescale.

    Per sample and in this order, each step only when its bound is set: ``p + s_a`` with
    ``s_a ~ U(-shift, shift)`` (coordinate units); ``p * j_a`` with ``log j_a ~ U(-log jitter, log jitter)``
    per axis; ``p * r`` with ``log r ~ U(-log rescale, log rescale)`` for all axes. DINOv3 trains with
    ``rescale=2`` only (its default here) on centred coordinates in [-1, 1]. The draws are made as timm's
    ``_apply_coord_augs`` and HF's ``augment_patches_center_coordinates`` make them (``uniform_`` on
    ``dims`` numbers, then on one), so one draw per call from the same RNG state gives their transform
    exactly (``tests/test_rope_dinov3.py``); with ``grid_indexing="xy"`` timm draws per axis in x, y order.

    >>> aug = CoordAug(dims=2, shift=0.1, batch_size=3).train()
    >>> aug(torch.zeros(12, 2), (3, 4)).shape
    torch.Size([3, 12, 2])
    """

    continuous = True  # makes fractional positions
    coords_modes = ("pixel", "centered")  # its bounds are for coordinates in [-1, 1], centred on the image

    def __init__(self, *, dims: int, shift: float | None = None, jitter: float | None = None,
                 rescale: float | None = 2.0, batch_size: int | None = None,
                 generator: torch.Generator | None = None):
        super().__init__()
        if dims < 2:
            raise ValueError(f"augment 'dinov3' jitters each image axis apart from a shared rescale: it needs dims >= 2, "
                             f"got dims={dims} (for sequences use 'cape' or 'random')")
        self.dims = dims
        self.shift = None if shift is None else check_number(shift, "shift", low=0.0)
        self.jitter = None if jitter is None else check_number(jitter, "jitter", low=1.0, what="a factor >= 1")
        self.rescale = None if rescale is None else check_number(rescale, "rescale", low=1.0, what="a factor >= 1")
        self.batch_size = _check_batch_size(batch_size)
        self.generator = generator

    def _uniform(self, shape, bound: float, like: Tensor) -> Tensor:
        return torch.empty(shape, device=like.device, dtype=like.dtype).uniform_(-bound, bound, generator=self.generator)

    def forward(self, positions: Tensor, grid_shape: Sequence[int] | None = None) -> Tensor:
        """``positions`` ``(N, dims)`` or ``(B, N, dims)`` augmented as the class says (``grid_shape``: axis sizes)."""
        pos, squeeze = _check_batch(positions, self.batch_size, self.dims)  # (B, N, dims)
        b, d = pos.shape[0], self.dims
        if self.shift is not None:
            pos = pos + self._uniform((b, 1, d), self.shift, pos)
        if self.jitter is not None:
            pos = pos * self._uniform((b, 1, d), math.log(self.jitter), pos).exp()
        if self.rescale is not None:
            pos = pos * self._uniform((b, 1, 1), math.log(self.rescale), pos).exp()
        return pos[0] if squeeze else pos

    def extra_repr(self) -> str:
        return f"dims={self.dims}, shift={self.shift}, jitter={self.jitter}, rescale={self.rescale}, " \
               f"batch_size={self.batch_size}"


def _check_batch_size(batch_size):
    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1):
        raise ValueError(f"batch_size must be None or a positive int, got {batch_size!r}")
    return batch_size


AUGMENTS = {"cape": CAPE, "random": RandomPositions, "dinov3": CoordAug}
"""The names ``augment=`` takes, and their modules."""


def make_augment(spec, *, dims: int) -> nn.Module:
    """Build an augmentation from ``"cape"``, ``"random"``, ``{"name": ..., **options}`` or a module.

    >>> make_augment({"name": "cape", "max_global_shift": 2.0}, dims=1).max_global_shift
    (2.0,)
    """
    if isinstance(spec, nn.Module):
        return spec
    if isinstance(spec, str):
        spec = {"name": spec}
    if not isinstance(spec, dict) or "name" not in spec:
        raise TypeError(f"augment must be one of {sorted(AUGMENTS)}, a dict with a 'name' key, or an nn.Module; "
                        f"got {spec!r}")
    options = dict(spec)
    name = options.pop("name")
    if name not in AUGMENTS:
        raise ValueError(f"unknown augment {name!r}; expected one of {sorted(AUGMENTS)}")
    try:
        return AUGMENTS[name](dims=dims, **options)
    except TypeError as err:
        if "unexpected keyword" not in str(err):
            raise
        valid = [p for p in inspect.signature(AUGMENTS[name]).parameters if p != "dims"]
        raise TypeError(f"unknown option for augment {name!r}: {err}; valid options: {valid}") from None
