"""``coupling``: position coupling (Cho et al. 2024), one position id shared by the digits of equal significance.

"Position Coupling: Improving Length Generalization of Arithmetic Transformers Using Task Structure". The digits of
the operands and of the result that have the same significance get the same position id, and that id indexes a
learned absolute table (the reference's ``abs_learned``). Positions are the **place ids** that ``abacus`` takes, one
per token (0: not a digit, ``i + 1``: the digit of ``10**i``; ``AdditionTask(place=True)`` supplies them); the
coupled id is the reference's (``AdditionDatasetWithCoupledPositions``), written for a sequence whose largest place
id is ``n`` (the operands' length in the decoder-only layout, where the result's top digit is only predicted)::

    digit of place p:  start + n + 1 - p        "+", "=" and every other non-digit:  start + n + 1

so the units of both operands and of the result share ``start + n``, and the operators sit one past them, as in the
reference (which reads the digits most significant first, its ids growing towards the units; ndpe's reversed
numbers keep each digit's id, so only the order of the tokens differs, as in its ``revall`` ablation).
``start`` is drawn per sequence, uniformly from ``1 .. max_position - n - 1``, in training, and is 1 in eval mode:
the reference's random start, which trains the rows that longer numbers use at test time.

Without explicit positions (``pe(grid_shape)``) the token indices are taken as place ids (a learned table read
backwards). Output: ``add`` ``(N, dim)``, or ``(B, N, dim)`` for batched ids.
Reference: github.com/HanseulJo/position-coupling ``src/data/addition.py`` (ported in ``tests/test_coupling.py``).
"""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from ..checks import check_bool, check_int
from ..contract import PosOut
from ..memory import check_tables
from ..registry import register
from .abacus import PlaceIds, check_place_ids


def coupled_ids(place: Tensor, start: Tensor | int) -> Tensor:
    """Coupled position ids ``(*, N)`` of place ids ``place`` ``(*, N)`` (long) with ``start`` per sequence
    (an int, or ``(*, 1)``); see the module doc.

    >>> coupled_ids(torch.tensor([1, 2, 0, 1, 2, 0, 1, 2]), 1)   # 12 + 34 = 46 reversed: 2 1 + 4 3 = 6 4
    tensor([3, 2, 4, 3, 2, 4, 3, 2])
    """
    top = place.amax(-1, keepdim=True)  # n: (*, 1)
    end = start + top + 1
    return torch.where(place > 0, end - place, end)


@register("coupling", dims=(1,))
class PositionCoupling(PlaceIds):
    """A learned table indexed by coupled position ids: digits of equal significance share a row.

    Args:
        max_position: the largest id (the reference's ``max_position``; its addition runs use 17 for numbers of up to
            10 digits and 202 for up to 100). A sequence whose largest place id is ``n`` needs ``n + 2 <= max_position``.
        randomize: draw ``start`` per sequence in training (the reference's ``randomize``); False: always 1.

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

    def __init__(self, *, dims: int, dim: int, heads: int = 1, max_position: int = 256, randomize: bool = True):
        super().__init__(dims=dims, dim=dim, heads=heads)
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
            high = self.max_position - place.amax(-1, keepdim=True) - 1  # (*, 1), >= 1 (check_range)
            start = 1 + (torch.rand(high.shape, device=place.device) * high).long()
        return PosOut(add=self.embedding(coupled_ids(place, start)))  # (*, N, dim)
