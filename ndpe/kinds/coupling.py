"""``coupling``: position coupling (Cho et al. 2024), one position id shared by the digits of equal significance.

"Position Coupling: Improving Length Generalization of Arithmetic Transformers Using Task Structure". The digits of
the operands and of the result that have the same significance get the same position id, and that id indexes a
learned absolute table (the reference's ``abs_learned``). Positions are the **place ids** that ``abacus`` takes, one
per token (0: not a digit, ``i + 1``: the digit of ``10**i``; ``AdditionTask(place=True)`` supplies them); the
coupled id is the reference's (``AdditionDatasetWithCoupledPositions``), in one of its two conventions, for operands
of ``n`` digits (zero-padded to one length, the reference's ``padding=True``)::

    convention="down" (default):  digit of place p:  start + n + 1 - p     "+", "=", every other non-digit:  start + n + 1
    convention="up":              digit of place p:  start + p             "+", "=", every other non-digit:  start

"down" is the reference's code from its first commit (01dd272, 2024-05-31) to e050132 (2024-09-28), the paper's
runs: the units of both operands and of the result share ``start + n``, the operators sit one past them, and the
result's carry-out digit (place ``n + 1``) gets ``start``. "up" is its code since e35e9de (2024-10-16, "least
significant digit has least position ID", still so at b9cad94): the mirror image, ids growing with significance,
with the operators at ``start`` (its ``reverse_output``, as ndpe's reversed numbers). Both read the digits in either
order (ndpe's reversed numbers keep each digit's id: only the order of the tokens differs, the ``revall`` ablation).
``n`` is the largest place id that two tokens hold (the two padded operands), or the largest place id when none
repeats (a single number; token indices), so a full sequence whose result has a carry-out digit ("99+99=891",
numbers reversed) keeps the operands' ids. ``start`` is drawn per sequence, uniformly from ``1 .. max_position - n -
1``, in training, and is 1 in eval mode: the reference's random start (the same range in both conventions), which
trains the rows that longer numbers use at test time.

Without explicit positions (``pe(grid_shape)``) the token indices are taken as place ids (a learned table read
backwards). Output: ``add`` ``(N, dim)``, or ``(B, N, dim)`` for batched ids.
Reference: github.com/HanseulJo/position-coupling ``src/data/addition.py`` at 01dd272 / e050132 ("down") and at
b9cad94 ("up"), both ported in ``tests/test_coupling.py``.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from ..checks import check_bool, check_choice, check_int
from ..contract import PosOut
from ..memory import check_tables
from ..registry import register
from .abacus import PlaceIds, check_place_ids


CONVENTIONS = ("down", "up")


def operand_length(place: Tensor) -> Tensor:
    """``n`` ``(*, 1)`` of place ids ``(*, N)`` (long): the largest place id two tokens hold, else the largest."""
    ordered = place.sort(-1).values
    repeated = torch.where((ordered[..., 1:] == ordered[..., :-1]) & (ordered[..., 1:] > 0), ordered[..., 1:], 0)
    top = ordered[..., -1:]
    shared = repeated.amax(-1, keepdim=True) if repeated.shape[-1] else torch.zeros_like(top)
    return torch.where(shared > 0, shared, top)


def coupled_ids(place: Tensor, start: Tensor | int, convention: str = "down") -> Tensor:
    """Coupled position ids ``(*, N)`` of place ids ``place`` ``(*, N)`` (long) with ``start`` per sequence
    (an int, or ``(*, 1)``) in ``convention`` ``"down"`` or ``"up"``; see the module doc.

    >>> place = torch.tensor([1, 2, 0, 1, 2, 0, 1, 2, 3])   # 99 + 99 = 198 reversed: 9 9 + 9 9 = 8 9 1
    >>> coupled_ids(place, 1), coupled_ids(place, 1, "up")
    (tensor([3, 2, 4, 3, 2, 4, 3, 2, 1]), tensor([2, 3, 1, 2, 3, 1, 2, 3, 4]))
    """
    if convention == "up":
        return start + place
    end = start + operand_length(place) + 1
    return torch.where(place > 0, end - place, end)


@register("coupling", dims=(1,))
class PositionCoupling(PlaceIds):
    """A learned table indexed by coupled position ids: digits of equal significance share a row.

    Args:
        max_position: the largest id (the reference's ``max_position``; its addition runs use 17 for numbers of up to
            10 digits and 202 for up to 100). A sequence whose largest place id is ``n`` needs ``n + 2 <= max_position``.
        randomize: draw ``start`` per sequence in training (the reference's ``randomize``); False: always 1.
        convention: ``"down"`` (ids count down from the operators: the reference until 2024-09, the paper's) or
            ``"up"`` (its mirror image, ids growing with significance: the reference since 2024-10).

    >>> import ndpe, torch
    >>> pe = ndpe.make(dims=1, kind="coupling", dim=16, max_position=20).eval()
    >>> place = torch.tensor([1., 2., 3., 0., 1., 2., 3., 0., 1., 2., 3.])[:, None]   # 123 + 456 = 579, reversed
    >>> out = pe(positions=place).add
    >>> out.shape, bool((out[0] == out[4]).all() and (out[4] == out[8]).all())      # the units share a row
    (torch.Size([11, 16]), True)
    """

    has_parameters = True
    coordinate_based = False
    integer_positions = True
    takes_key_positions = True  # so that decoding reaches encode() and is refused there, in one line
    description = "position coupling: digits of equal significance share a learned row (Cho et al. 2024)"

    def __init__(self, *, dims: int, dim: int, heads: int = 1, max_position: int = 256, randomize: bool = True,
                 convention: str = "down"):
        super().__init__(dims=dims, dim=dim, heads=heads)
        self.convention = check_choice(convention, "convention", CONVENTIONS)
        self.max_position = check_int(max_position, "max_position", low=3)
        self.randomize = check_bool(randomize, "randomize")
        check_tables("coupling", {"table": (self.max_position + 1, dim)}, "build it with a smaller max_position")
        self.embedding = nn.Embedding(self.max_position + 1, dim)  # rows 1 .. max_position are used

    @classmethod
    def example_options(cls, dims: int) -> dict[str, Any]:
        return {"max_position": 256, "randomize": False}  # deterministic, as the contract tests compare calls

    def check_range(self, positions: Tensor, dtype: torch.dtype) -> None:
        check_place_ids(positions, "coupling")
        if torch.compiler.is_compiling():
            return
        top = int(positions.amax().item())
        random = self.training and self.randomize
        if top + 2 + int(random) > self.max_position:
            raise ValueError(f"coupling ids of place ids up to {top} need max_position >= {top + 2 + int(random)}"
                             f"{' in training (a random start)' if random else ''}, got {self.max_position}: "
                             "build it with a larger max_position")

    def encode(self, positions: Tensor, grid_shape: tuple[int, ...] | None,
               key_positions: Tensor | None = None) -> PosOut:
        if key_positions is not None:
            raise ValueError("coupling cannot decode with a KV cache: its ids count down from the sequence's longest "
                             "number (start + n + 1 - place), unknown until the sequence ends")
        place = positions[..., 0].long()  # (*, N)
        start: Tensor | int = 1
        if self.training and self.randomize:  # per sequence, uniform in 1 .. max_position - n - 1 (the reference's torch.randint)
            high = self.max_position - operand_length(place) - 1  # (*, 1), >= 1 (check_range)
            start = 1 + (torch.rand(high.shape, device=place.device) * high).long()
        return PosOut(add=self.embedding(coupled_ids(place, start, self.convention)))  # (*, N, dim)
