"""``learned``: a trainable absolute position table added to tokens (BERT, GPT-2, ViT).

Full table (``factorized=False``, ViT): ``T`` of shape ``(*grid_shape, dim)``; token at ``(i, j)``
gets ``T[i, j]``. Factorized (``factorized=True``, e.g. ViViT / TimeSformer space-time tables):
one table ``T_a`` of shape ``(n_a, d_a)`` per axis, combined by ``"add"`` (``d_a = dim``,
``T_0[i] + T_1[j]``) or ``"concat"`` (``d_a = dim / dims``, ``[T_0[i] | T_1[j]]``).

Grids other than the table size:
    ``resize=None``: a smaller grid uses the leading rows of each axis (``T[:h, :w]``); a larger one raises.
    ``resize="linear"`` (1D), ``"bilinear"`` / ``"bicubic"`` (2D), ``"trilinear"`` (3D): the table is
    interpolated to the requested grid, each axis separately sized (non-square safe). 2D uses timm's
    ``resample_abs_pos_embed`` (``align_corners=False``, ``antialias=True``); 1D / 3D use
    ``F.interpolate`` (``align_corners=False``, no antialias: torch supports it for 2D only).
    Factorized tables are 1D per axis: they take ``resize="linear"``.

Added or concatenated (``cat_dim``): by default (``cat_dim=0``) the table has ``dim`` channels, added to the tokens.
``cat_dim=c`` makes a ``c``-channel table (factorized ``"concat"``: ``c / dims`` per axis) concatenated to tokens of
``dim - c`` channels (``cat``, ``pe.cat_dim``), as ``coord`` concatenates its coordinates.

Explicit ``positions`` are integer indices into the table in use (the resized one when ``resize`` is
set and ``grid_shape`` is given, else the stored one), looked up by gather. The kind is not
coordinate based: fractional positions and position augmentation are refused.
Init: ``trunc_normal_(std=init_std)``, default 0.02 as in timm's ViT and BERT. A table trained from
scratch next to tokens of unit scale (a patch embedding's output, or token embeddings scaled by
``sqrt(dim)``) barely moves from 0.02 in a short run — measured in the ndpe benchmark, its RMS went
from 0.02 to 0.05 in 300 steps while the patch embedding's output has std 0.3-0.7 — so the model
hardly sees it; ``init_std=1.0`` starts it at the tokens' scale. A timm ViT's ``pos_embed`` ``(1, P + h * w, dim)``
maps to ``table`` by ``rearrange(pos_embed[:, P:], "1 (h w) c -> h w c", h=h)``; its prefix rows have
no counterpart (prefix tokens get zeros here: learn a cls embedding in the model).
"""
from __future__ import annotations

import importlib.util
import math
from typing import Any, cast

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor, nn

from ..base import Encoding
from ..checks import check_bool, check_cat_dim, check_choice
from ..contract import PosOut
from ..coords import check_grid_shape
from ..memory import check_tables
from ..registry import register

RESIZE_MODES = {1: ("linear",), 2: ("bilinear", "bicubic"), 3: ("trilinear",)}
COMBINES = ("add", "concat")
_HAS_TIMM = importlib.util.find_spec("timm") is not None  # optional: ndpe needs only torch and einops


@register("learned")
class Learned(Encoding):
    """A trainable table added to tokens: ``add`` is ``(N, dim)`` (``(B, N, dim)`` for batched positions).

    Args:
        grid_shape: the table's size per axis, ``ij`` order, e.g. ``(14, 14)`` (required).
        factorized: one table per axis instead of one full table.
        combine: how factorized tables combine, ``"add"`` or ``"concat"`` (ignored when not factorized).
        resize: ``None`` (crop smaller grids, refuse larger) or an interpolation mode (see module doc).
        init_std: standard deviation of the truncated-normal init (truncated at +-2, as timm does).
        cat_dim: 0 (default): the table is added to the tokens; ``c`` in ``1 .. dim - 1``: a ``c``-channel table
            concatenated to tokens of ``dim - c`` channels (see the module doc).

    >>> import ndpe
    >>> pe = ndpe.make(dims=2, kind="learned", dim=64, grid_shape=(14, 14), resize="bicubic")
    >>> pe((16, 12)).add.shape
    torch.Size([192, 64])
    """

    takes_key_positions = True  # refuses options that cannot decode
    has_parameters = True
    description = "trainable table, full or axis-factorized, resizable"
    colour, marker = "#1f77b4", "s"

    @classmethod
    def task_options(cls, *, dims: int, causal: bool, train_grid: tuple[int, ...] | None,
                     max_grid: tuple[int, ...] | None) -> dict[str, Any]:
        """1D: a table as long as the longest test sequence, used as it is (positions beyond the training length
        stay untrained, as in Kazemnejad et al. 2023); 2D/3D: the training grid's table, resized to larger grids (as
        timm's ViT). Either starts at the tokens' scale (``init_std=1``; at 0.02 it hardly trains in a short run)."""
        if train_grid is None:
            raise ValueError("learned sizes its table by the task's grids: pass train_grid (and max_grid, for 1D)")
        if dims == 1:
            return {"grid_shape": list(max_grid or train_grid), "resize": None, "init_std": 1.0}
        return {"grid_shape": list(train_grid), "resize": RESIZE_MODES[dims][-1], "init_std": 1.0}

    coordinate_based = False

    def __init__(self, *, dims: int, dim: int, heads: int = 1, grid_shape: tuple[int, ...],
                 factorized: bool = False, combine: str = "add", resize: str | None = None, init_std: float = 0.02,
                 cat_dim: int = 0):
        super().__init__(dims=dims, dim=dim, heads=heads)
        self.cat_dim = check_cat_dim(cat_dim, dim, "learned")
        width = cat_dim or dim  # the table's channels
        if isinstance(init_std, bool) or not isinstance(init_std, (int, float)) or not 0 < init_std < math.inf:
            raise ValueError(f"init_std must be a finite number > 0, got {init_std!r}")
        self.init_std = float(init_std)
        self.table_shape = check_grid_shape(grid_shape, dims)
        check_choice(combine, "combine", COMBINES)
        check_bool(factorized, "factorized")
        valid = ("linear",) if factorized else RESIZE_MODES[dims]
        if resize is not None and (not isinstance(resize, str) or resize not in valid):
            what = "factorized tables (1D per axis)" if factorized else f"dims={dims}"
            raise ValueError(f"resize for {what} must be None or one of {valid}, got {resize!r}")
        if factorized and combine == "concat" and width % dims:
            what = f"cat_dim={cat_dim}" if cat_dim else f"dim={dim}"
            raise ValueError(f"factorized combine='concat' splits the table's channels across {dims} axes; {what} is "
                             f"not divisible by {dims}")
        self.factorized, self.combine, self.resize = factorized, combine, resize
        axis_dim = width // dims if factorized and combine == "concat" else width
        shapes = ({f"axis-{a} table": (n, axis_dim) for a, n in enumerate(self.table_shape)} if factorized
                  else {"table": (*self.table_shape, width)})
        check_tables("learned", shapes, "build it with a smaller grid_shape (resize= interpolates a small table to "
                     "larger grids) or factorized=True (one table per axis)")
        if factorized:
            self.axis_tables = nn.ParameterList([nn.Parameter(torch.empty(n, axis_dim)) for n in self.table_shape])
        else:
            self.table = nn.Parameter(torch.empty(*self.table_shape, width))  # (*grid_shape, dim or cat_dim)
        self.reset_parameters()

    repr_attributes = {"coords": "coords_mode", "grid_shape": "table_shape"}

    @classmethod
    def example_options(cls, dims: int) -> dict[str, Any]:
        return {"grid_shape": (6,) * dims, "resize": RESIZE_MODES[dims][-1]}

    def reset_parameters(self) -> None:
        for p in self.parameters():
            nn.init.trunc_normal_(p, std=self.init_std)  # truncated at +-2, as timm

    # -- tables ----------------------------------------------------------------------------
    def tables(self, grid_shape: tuple[int, ...] | None) -> list[Tensor]:
        """The tables positions index for ``grid_shape``: ``[(*grid, dim)]`` or one ``(n_a, d_a)`` per axis."""
        stored = list(self.axis_tables) if self.factorized else [self.table]
        if grid_shape is None or tuple(grid_shape) == self.table_shape:
            return stored
        if self.resize is None:
            for a, (n, size) in enumerate(zip(grid_shape, self.table_shape)):
                if n > size:
                    modes = " / ".join(f"{d}D {m}" for d, m in RESIZE_MODES.items())
                    raise ValueError(
                        f"grid {tuple(grid_shape)} exceeds the learned table {self.table_shape} along axis {a}; "
                        f"build with a larger grid_shape or resize=<mode> to interpolate the table ({modes})")
            return stored  # positions 0..n-1 pick the leading rows
        if self.factorized:
            return [_interp(t.t()[None], n, "linear")[0].t() for t, n in zip(stored, grid_shape)]
        return [self._resize_full(grid_shape)]

    def _resize_full(self, grid_shape: tuple[int, ...]) -> Tensor:
        if self.dims == 2:
            flat = rearrange(self.table, "h w c -> 1 (h w) c")
            out = _resample_2d(flat, list(grid_shape), list(self.table_shape), cast(str, self.resize))
            return rearrange(out, "1 (h w) c -> h w c", h=grid_shape[0])
        channels_first = rearrange(self.table, "... c -> 1 c ...")
        return rearrange(_interp(channels_first, grid_shape, cast(str, self.resize)), "1 c ... -> ... c")

    # -- encode ----------------------------------------------------------------------------
    def encode(self, positions: Tensor, grid_shape, key_positions: Tensor | None = None) -> PosOut:
        if key_positions is not None:  # KV-cache decoding: rows of the stored table, never a resized one
            if self.resize is not None:
                raise ValueError(f"learned resize={self.resize!r} interpolates the table to each sequence length, so "
                                 "keys cached at other lengths used other rows: decoding with a KV cache needs "
                                 "resize=None (and a table covering the positions)")
            length = key_positions.shape[-2]
            if length > self.table_shape[0]:
                raise ValueError(f"decoding to {length} tokens with a KV cache needs a learned table that covers "
                                 f"them, got a table of {self.table_shape[0]} (a resized table would change with "
                                 "every new token, so resize= does not apply to cached decoding)")
            grid_shape = None
        tables = self.tables(grid_shape)
        sizes = tuple(t.shape[0] for t in tables) if self.factorized else tuple(tables[0].shape[:-1])
        index = _as_indices(positions, sizes)  # (*, N, dims) long
        if not self.factorized:
            strides = [math.prod(sizes[a + 1:]) for a in range(self.dims)]
            flat = sum(index[..., a] * s for a, s in enumerate(strides))  # row-major ravel, (*, N)
            rows = rearrange(tables[0], "... c -> (...) c")[flat]
        else:
            parts = [t[index[..., a]] for a, t in enumerate(tables)]  # each (*, N, d_a)
            rows = sum(parts[1:], parts[0]) if self.combine == "add" else torch.cat(parts, -1)
        return PosOut(cat=rows) if self.cat_dim else PosOut(add=rows)  # (*, N, dim or cat_dim)

def _interp(x: Tensor, size, mode: str) -> Tensor:
    """``F.interpolate`` of a channels-first table in float32, back in its dtype."""
    size = [size] if isinstance(size, int) else list(size)
    return F.interpolate(x.float(), size=size, mode=mode, align_corners=False).to(x.dtype)


def _resample_2d(flat: Tensor, new_size: list[int], old_size: list[int], mode: str) -> Tensor:
    """timm's ``resample_abs_pos_embed`` on a ``(1, h * w, C)`` table; without timm, the call it makes."""
    if _HAS_TIMM:
        from timm.layers import resample_abs_pos_embed

        return resample_abs_pos_embed(flat, new_size, old_size, num_prefix_tokens=0, interpolation=mode, antialias=True)
    grid = rearrange(flat.float(), "1 (h w) c -> 1 c h w", h=old_size[0])
    out = F.interpolate(grid, size=new_size, mode=mode, antialias=True)
    return rearrange(out, "1 c h w -> 1 (h w) c").to(flat.dtype)


def _as_indices(positions: Tensor, sizes: tuple[int, ...]) -> Tensor:
    """Integer-valued float positions ``(*, N, dims)`` -> long indices, checked against the table ``sizes``."""
    if not torch.compiler.is_compiling():
        if not bool((positions == positions.round()).all()):
            raise ValueError("learned positions must be integer indices into the table; got fractional values "
                             "(use a coordinate-based kind such as 'sinusoidal' for continuous positions)")
        high = torch.tensor(sizes, device=positions.device, dtype=positions.dtype)
        if bool((positions < 0).any()) or bool((positions >= high).any()):
            raise ValueError(f"learned positions must lie in [0, n) per axis of the table {sizes}; got min "
                             f"{positions.amin().item()}, max per axis {positions.flatten(0, -2).amax(0).tolist()}")
    return positions.long()
