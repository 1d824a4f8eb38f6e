"""``Combine``: several encodings acting together (e.g. learned absolute + ALiBi), merged per forward."""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence, cast

import torch
from torch import Tensor, nn

from .base import Encoding
from .contract import PosOut, merge


class Combine(nn.Module):
    """Run encodings on the same grid and merge their outputs with :func:`ndpe.merge`.

    Adds and biases sum, concatenated channels append, at most one encoding may rotate.

    >>> import ndpe
    >>> pe = ndpe.Combine(ndpe.make(dims=1, kind="none", dim=32, heads=4),
    ...                   ndpe.make(dims=1, kind="none", dim=32, heads=4))
    >>> pe((16,)).rot is None
    True
    """

    if TYPE_CHECKING:  # nn.Module types __call__ as returning Any
        def __call__(self, grid_shape: Sequence[int] | None = None, *, positions: Tensor | None = None,
                     num_prefix: int = 0, dtype: torch.dtype | None = None, past: int = 0) -> PosOut: ...

    def __init__(self, *encodings: Encoding):
        super().__init__()
        if not encodings:
            raise ValueError("Combine needs at least one encoding")
        for pe in encodings:
            if not isinstance(pe, nn.Module) or not all(hasattr(pe, a) for a in ("dims", "dim", "heads")):
                raise TypeError(f"Combine takes encodings built by ndpe.make, got {type(pe).__name__}")
        first = encodings[0]
        for pe in encodings[1:]:
            if (pe.dims, pe.dim, pe.heads) != (first.dims, first.dim, first.heads):
                raise ValueError("Combine needs encodings with the same dims, dim and heads, got "
                                 f"{[(e.kind, e.dims, e.dim, e.heads) for e in encodings]}")
        self.encodings = nn.ModuleList(encodings)
        self.dims, self.dim, self.heads, self.head_dim = first.dims, first.dim, first.heads, first.head_dim
        self.cat_dim = sum(pe.cat_dim for pe in encodings)
        self.coordinate_based = all(pe.coordinate_based for pe in encodings)
        self.kind = "+".join(pe.kind for pe in encodings)

    def _check_one_unit(self) -> None:
        modes = {pe.kind: pe.coords_mode for pe in self.encodings}
        if len(set(modes.values())) > 1:
            raise ValueError(f"explicit positions need one coordinate unit, but the combined kinds use {modes}; "
                             "build them with the same coords= option")

    def coords(self, grid_shape: Sequence[int]) -> Tensor:
        """Default coordinates ``(N, dims)``, shared by every combined encoding (one unit required)."""
        self._check_one_unit()
        return cast(Encoding, self.encodings[0]).coords(grid_shape)

    def forward(self, grid_shape: Sequence[int] | None = None, *, positions: Tensor | None = None,
                num_prefix: int = 0, dtype: torch.dtype | None = None, past: int = 0) -> PosOut:
        """Each encoding called with these arguments (:meth:`ndpe.Encoding.forward`), the outputs merged."""
        if positions is not None:
            self._check_one_unit()
        return merge(*(pe(grid_shape, positions=positions, num_prefix=num_prefix, dtype=dtype, past=past)
                       for pe in self.encodings))
