"""``none``: no positional encoding (the NoPE baseline). Attention alone, causal masks aside, is permutation-equivariant."""
from ..base import Encoding
from ..contract import PosOut
from ..registry import register


@register("none")
class NoPE(Encoding):
    """Encodes nothing: ``pe(grid)`` is an empty :class:`PosOut`, which every apply function passes through.

    >>> import ndpe
    >>> ndpe.make(dims=1, kind="none", dim=32)((10,)).add is None
    True
    """

    description = "no position (NoPE baseline)"
    colour, marker = "#000000", "o"

    position_free = True

    def __init__(self, *, dims: int, dim: int, heads: int = 1):
        super().__init__(dims=dims, dim=dim, heads=heads)

    def encode(self, positions, grid_shape):
        return PosOut()
