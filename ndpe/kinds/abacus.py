"""``abacus``: Abacus embeddings (McLeish et al. 2024), a learned embedding of each digit's place in its number.

"Transformers Can Do Arithmetic with the Right Embeddings". Every digit gets the row of a table indexed by its place
within its number, so the units digits of both operands and of the sum share one embedding, the tens digits the
next, and so on, whatever the length of the numbers and wherever they sit in the sequence. Positions are **place
ids**, one per token: ``0`` for a token that is not a digit, ``i + 1`` for the ``i``-th digit of its number. The
paper writes numbers least significant digit first (its code: "integers must be reversed"), so the ``i``-th digit is
the digit of ``10**i``; ndpe's ``text/addition`` writes them the same way, and ``AdditionTask(place=True)`` supplies
these ids as data (its items carry them beside the token ids; the model hands them to the encoding as
``positions``, the same way for every kind).

During training one offset ``k``, drawn uniformly from ``0..max_k`` per call (per batch, as the reference), is added to
every digit's id (not to the non-digit id 0), so the rows of the places beyond the training length are trained too:
a model trained on numbers of up to ``n`` digits sees ids up to ``n + max_k``. In eval mode ``k = 0``.

Without explicit positions (``pe(grid_shape)``) the ids are the token indices ``0 .. N - 1``: a learned absolute table
(the first token's row is the non-digit row). Output: ``add`` ``(N, dim)``, or ``(B, N, dim)`` for batched ids.
Reference: ``Abacus`` in github.com/mcleish7/arithmetic ``abacus.py`` (ported in ``tests/test_abacus.py``).
"""
from __future__ import annotations

import random
from typing import Any

import torch
from torch import Tensor, nn

from ..base import Encoding
from ..checks import check_int
from ..contract import PosOut
from ..memory import check_tables
from ..registry import register


def check_place_ids(positions: Tensor, kind: str) -> None:
    """Refuse (one line) place ids that are not integers >= 0: ``positions`` ``(*, N, 1)``."""
    if torch.compiler.is_compiling():
        return
    if not bool((positions == positions.round()).all()) or bool((positions < 0).any()):
        raise ValueError(f"{kind} positions are place ids, integers >= 0 (0: not a digit, i + 1: the i-th digit of its "
                         f"number); got values from {positions.amin().item()} to {positions.amax().item()}")


class PlaceIds(Encoding):
    """Base of the kinds whose positions are place ids (``abacus``, ``coupling``): numbers, not flags, so a bool
    tensor (``True`` read as 1, the units digit) is refused before it is converted."""

    def explicit_positions(self, positions: Tensor, grid_shape: tuple[int, ...] | None,
                           dtype: torch.dtype | None) -> Tensor:
        if isinstance(positions, Tensor) and positions.dtype == torch.bool:
            raise TypeError(f"{self.kind} positions are place ids, integers >= 0 (0: not a digit, i + 1: the i-th "
                            "digit of its number), got a bool tensor: pass the ids (e.g. AdditionTask(place=True))")
        return super().explicit_positions(positions, grid_shape, dtype)


@register("abacus", dims=(1,))
class Abacus(PlaceIds):
    """A learned table indexed by each digit's place in its number, shifted by a random offset in training.

    Args:
        size: rows of the table (the reference's ``max_seq_length``, 1024): ids plus the offset stay below it.
        max_k: the largest training offset (the reference's default 99; the paper trains on 20 digits with 100), below
            ``size - 1`` (the first digit's id 1 plus it indexes the table).

    >>> import ndpe, torch
    >>> pe = ndpe.make(dims=1, kind="abacus", dim=16, size=32, max_k=8).eval()
    >>> place = torch.tensor([1., 2., 3., 0., 1., 2., 3., 0., 1., 2., 3.])[:, None]   # 123 + 456 = 579, reversed
    >>> out = pe(positions=place).add
    >>> out.shape, bool((out[0] == out[4]).all() and (out[4] == out[8]).all())      # the units share a row
    (torch.Size([11, 16]), True)
    """

    has_parameters = True
    coordinate_based = False
    integer_positions = True
    description = "Abacus: a learned row per digit place, shared by the numbers (McLeish et al. 2024)"

    def __init__(self, *, dims: int, dim: int, heads: int = 1, size: int = 1024, max_k: int = 99):
        super().__init__(dims=dims, dim=dim, heads=heads)
        self.size, self.max_k = check_int(size, "size", low=2), check_int(max_k, "max_k", low=0)
        if self.max_k + 1 >= self.size:
            raise ValueError(f"abacus max_k={max_k} leaves no row of its table (size={size}) for a digit in training: "
                             f"the first digit's id 1 plus the offset up to max_k needs size > max_k + 1 = {max_k + 1}")
        check_tables("abacus", {"table": (self.size, dim)}, "build it with a smaller size")
        self.embedding = nn.Embedding(self.size, dim)  # N(0, 1) rows, as the reference's nn.Embedding

    @classmethod
    def example_options(cls, dims: int) -> dict[str, Any]:
        return {"size": 256, "max_k": 0}  # deterministic in training mode, as the contract tests compare calls

    def check_range(self, positions: Tensor, dtype: torch.dtype) -> None:
        check_place_ids(positions, "abacus")
        shift = self.max_k if self.training else 0
        if not torch.compiler.is_compiling() and positions.amax().item() + shift >= self.size:
            raise ValueError(f"abacus place id {int(positions.amax().item())} plus the training offset (up to {shift}) "
                             f"does not fit its table of size={self.size}: build it with a larger size")

    def encode(self, positions: Tensor, grid_shape: tuple[int, ...] | None) -> PosOut:
        ids = positions[..., 0].long()  # (*, N)
        if self.training and self.max_k:
            k = random.randint(0, self.max_k)  # one offset per call, as the reference (Python's random, per batch)
            ids = torch.where(ids > 0, ids + k, ids)
        return PosOut(add=self.embedding(ids))  # (*, N, dim)
