"""``string``: STRING, RoPE composed with a learned orthogonal matrix (Schenck et al. 2025, "Learning the RoPEs:
Better 2D and 3D Position Encodings with STRING").

The rotation of a token at position ``p`` is ``R(p) = P RoPE(p) P^T`` with ``P`` orthogonal, learned per head and
the same for every position. Then ``(R(p_i) q) . (R(p_j) k) = (RoPE(p_i) P^T q) . (RoPE(p_j) P^T k)``: RoPE's
rotation in the learned basis ``P^T``, so q . k still depends on the offset ``p_j - p_i`` alone (translation
invariance, in 2D and 3D too), while each frequency can turn along any direction of the channels. Two
parametrizations of ``P``, as the paper's:

- ``"cayley"`` (Cayley-STRING): ``P = (I - S)(I + S)^{-1}`` with ``S = W - W^T`` skew-symmetric (one solve of a
  ``rot_dim x rot_dim`` system per head and forward);
- ``"circulant"`` (Circulant-STRING): ``P = exp(C - C^T)`` with ``C`` the circulant matrix of a learned vector
  (``rot_dim`` parameters per head).

Both start at ``P = I`` (``init_std=0``: exactly ``rope``). It travels as ``rot`` with the contract's ``basis``
(``q[..., :rot_dim] @ P``: row vectors), so every rotary path (kernels, KV cache, packing) applies it; the channels
past ``rot_dim`` are left alone. The other options are ``rope``'s (``axis_dims``, ``theta``, ``coords``,
``pairing``). No installable peer: pinned against the formula (a dense per-token ``P RoPE(p) P^T``) and its
properties (``tests/test_string.py``).

>>> import ndpe, torch
>>> pe = ndpe.make(dims=2, kind="string", dim=64, heads=4, init_std=0.1)
>>> pos = pe((3, 4))
>>> pos.basis.shape, bool(torch.allclose(pos.basis @ pos.basis.transpose(-1, -2), torch.eye(16), atol=1e-5))
(torch.Size([4, 16, 16]), True)
"""
from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import torch
from torch import Tensor, nn

from ..checks import check_choice, check_number
from ..contract import PosOut
from ..memory import check_tables
from ..registry import register
from .rope import RoPE


@register("string", dims=(1, 2, 3))
class STRING(RoPE):
    """STRING: RoPE in a learned orthogonal basis (see the module doc).

    Args:
        orthogonal: ``"cayley"`` or ``"circulant"`` parametrization of the basis.
        init_std: standard deviation of the basis parameters at init (0: the identity, plain RoPE).
        axis_dims, theta, coords, pairing: as ``rope``.
    """

    has_parameters = True
    description = "STRING (Schenck et al. 2025): RoPE in a learned orthogonal basis (Cayley or circulant), still relative"
    colour, marker = "#7f3b08", "D"

    def __init__(self, *, dims: int, dim: int, heads: int = 1, orthogonal: str = "cayley", init_std: float = 0.0,
                 axis_dims: Sequence[int] | None = None, theta: float | Sequence[float] = 10000.0,
                 coords: str = "index", pairing: str = "half"):
        super().__init__(dims=dims, dim=dim, heads=heads, axis_dims=axis_dims, theta=theta, coords=coords,
                         pairing=pairing)
        self.orthogonal = check_choice(orthogonal, "orthogonal", ("cayley", "circulant"))
        self.init_std = check_number(init_std, "init_std", low=0.0, dtype=torch.float32)
        d = self.rot_dim
        shape = (heads, d, d) if orthogonal == "cayley" else (heads, d)
        check_tables("string", {"basis parameters": (heads * d, shape[-1])}, "use fewer rotated channels (axis_dims)")
        self.weight = nn.Parameter(torch.randn(shape) * self.init_std)

    @classmethod
    def example_options(cls, dims: int) -> dict[str, Any]:
        """A basis away from the identity, so the small examples see it (and its gradient)."""
        return {"init_std": 0.1}

    def basis(self) -> Tensor:
        """The orthogonal ``P`` ``(heads, rot_dim, rot_dim)`` float32."""
        w = self.weight.float()
        eye = torch.eye(w.shape[-1], device=w.device)
        if self.orthogonal == "cayley":
            skew = w - w.transpose(-1, -2)
            return torch.linalg.solve(eye + skew, eye - skew)  # (I + S)^-1 (I - S) = (I - S)(I + S)^-1: they commute
        d = w.shape[-1]
        index = (torch.arange(d, device=w.device)[None, :] - torch.arange(d, device=w.device)[:, None]) % d
        circulant = w[:, index]  # C[h, i, j] = c[h, (j - i) mod d]
        return torch.matrix_exp(circulant - circulant.transpose(-1, -2))

    def encode(self, positions: Tensor, grid_shape, key_positions: Tensor | None = None) -> PosOut:
        out = super().encode(positions, grid_shape, key_positions)
        return dataclasses.replace(out, basis=self.basis())
