"""``comrope``: ComRoPE, rotations by trainable commuting angle matrices (Yu et al. 2025, "ComRoPE: Scalable and
Robust Rotary Position Embedding Parameterized by Trainable Commuting Angle Matrices").

As LieRE (``liere``), the token at position ``p`` rotates its query and key by ``R_h(p) = exp(sum_a p_a A_{h,a})``,
with skew-symmetric angle matrices ``A_{h,a}`` made of ``block_size x block_size`` diagonal blocks ``B_{h,a,j}``;
unlike LieRE, the blocks of different axes commute, so ``R(p_i)^T R(p_j) = R(p_j - p_i)``: the logit depends on the
offset alone (the paper's "RoPE equation"), in 1D, 2D and 3D, whatever the weights. Two constructions, both the
paper's and its public code's (``tests/test_comrope.py`` ports it):

- ``variant="ap"`` (ComRoPE-AP, axis partition): block ``j`` turns with one axis only, axis ``j mod dims``:
  ``B_{a,j} = P_j - P_j^T`` if ``j = a (mod dims)``, else 0. Blocks of different axes act on different channels, so
  they commute. Needs ``dims * block_size`` to divide head_dim.
- ``variant="ld"`` (ComRoPE-LD, linearly dependent; the default): every axis scales one learned block,
  ``B_{a,j} = theta_{a,j} (P_j - P_j^T)``, so block ``j`` turns by ``exp((sum_a theta_{a,j} p_a)(P_j - P_j^T))``:
  multiples of one matrix commute. ``P`` is learned per head, the scales ``theta`` per axis and block (shared by the
  heads, as the reference's ``multiplier``).

With ``block_size=2`` every block is a plane rotation: AP is axial RoPE with learned angles, LD is RoPE-Mixed with
learned directions. Larger blocks turn ``block_size``-dimensional subspaces.

Why a ``logits`` term, not ``rot`` with a ``basis`` (as ``string``): commuting skew blocks share a real eigenbasis,
so ComRoPE is RoPE in some orthogonal basis, but that basis is the eigenvectors of the learned blocks; reaching it
takes an eigendecomposition per block and forward whose gradient divides by the gaps between the block's angles
(unbounded where two of them meet), while the matrix exponential's gradient is always defined and, per block of 8,
costs little. So it travels as LieRE does: the rotated ``q . k`` minus the plain ``q . k / sqrt(d)`` that SDPA adds.
Cost (as ``liere`` with the same blocks): ``encode`` builds ``N x heads x head_dim / block_size`` exponentials of
``block_size x block_size`` matrices, once per forward; each layer multiplies q and k by them and materializes the
``(B, heads, N, N)`` term. ``benchmarks/README.md`` ("Learned rotations") times it beside rope: about 27x rope's layer
call at ViT-S 14 x 14 and 11x on video 8 x 14 x 14 with blocks of 8 (3.2 and 75 MiB built), as LieRE's. Positions: ``coords="centered"`` (``[-1, 1]``;
the reference's ``[0, 1]`` is half that range, so ``init_std=0.5`` here draws the reference's ``init_std=1`` angles).
Decodes with a KV cache (the keys' rotations from their positions).

>>> import ndpe, torch
>>> pe = ndpe.make(dims=2, kind="comrope", dim=64, heads=4, block_size=4)
>>> q = k = torch.randn(2, 4, 12, 16)
>>> pe((3, 4)).logits(q, k).shape
torch.Size([2, 4, 12, 12])
"""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from ..base import Encoding
from ..checks import check_choice, check_int, check_number
from ..coords import COORD_MODES
from ..memory import check_tables
from ..registry import register
from .liere import LieRE


@register("comrope", dims=(1, 2, 3))
class ComRoPE(LieRE):
    """ComRoPE: learned commuting rotations, exactly relative (see the module doc).

    Args:
        variant: ``"ld"`` (linearly dependent: one block per head and block index, scaled per axis) or ``"ap"``
            (axis partition: block ``j`` turns with axis ``j mod dims``).
        block_size: size of the diagonal blocks, at least 2 (divides head_dim; ``"ap"``: ``dims * block_size`` divides
            it). Default: the largest such size up to 8 (8 at head_dim 64; 6 at the benchmark's head_dim 12).
        init_std: standard deviation of the blocks' ``P`` at init (the LD scales start standard normal, as the
            reference's).
        coords: ``"centered"`` (default), ``"pixel"`` or ``"index"`` coordinates.
    """

    description = ("ComRoPE (Yu et al. 2025): learned rotations exp(sum_a p_a A_a) with commuting angle matrices, "
                   "exactly relative")
    colour, marker = "#c51b7d", "+"

    multiplier: nn.Parameter | None  # (dims, blocks): LD's theta
    mask: Tensor  # (dims, blocks): AP's axis of each block

    def __init__(self, *, dims: int, dim: int, heads: int = 1, variant: str = "ld", block_size: int | None = None,
                 init_std: float = 0.5, coords: str = "centered"):
        Encoding.__init__(self, dims=dims, dim=dim, heads=heads)  # LieRE's parameters are not ComRoPE's
        self.variant = check_choice(variant, "variant", ("ld", "ap"))
        if variant == "ap" and self.head_dim % dims:
            raise ValueError(f"variant='ap' splits head_dim={self.head_dim} between the {dims} axes: dims must divide it")
        share = self.head_dim if variant == "ld" else self.head_dim // dims  # channels one axis' blocks may fill
        if block_size is None:  # the largest block of at most 8 that fills them
            fits = [b for b in range(2, min(share, 8) + 1) if share % b == 0]
            if not fits:
                raise ValueError(f"no block_size from 2 to 8 divides the {share} channels of variant={variant!r} "
                                 f"(head_dim={self.head_dim}): pass block_size=")
            block_size = fits[-1]
        b = check_int(block_size, "block_size", low=2)  # a 1 x 1 skew block is 0: no rotation
        if share % b:
            raise ValueError(f"block_size must divide head_dim={self.head_dim}, got {b}" if variant == "ld" else
                             f"variant='ap' gives each of the {dims} axes whole blocks: dims * block_size must divide "
                             f"head_dim={self.head_dim}, got block_size={b}")
        self.block_size = b
        self.init_std = check_number(init_std, "init_std", low=0.0, dtype=torch.float32)
        self.coords_mode = check_choice(coords, "coords", COORD_MODES)
        blocks = self.head_dim // b
        check_tables("comrope", {"blocks": (heads * blocks, b * b)}, "use a smaller block_size")
        self.weight = nn.Parameter(torch.randn(heads, blocks, b, b) * self.init_std)
        if variant == "ld":
            self.multiplier = nn.Parameter(torch.randn(dims, blocks))  # theta_{a,j}
        else:
            self.multiplier = None
            axis_of_block = torch.arange(blocks) % dims
            self.register_buffer("mask", (axis_of_block[None, :] == torch.arange(dims)[:, None]).float(),
                                 persistent=False)  # (dims, blocks): block j turns with axis j mod dims

    @classmethod
    def example_options(cls, dims: int) -> dict[str, Any]:
        """Blocks of 4 keep the small examples' exponentials cheap."""
        return {"block_size": 4}

    def generators(self) -> Tensor:
        """The commuting skew-symmetric angle matrices ``(heads, dims, blocks, b, b)``: ``theta_{a,j} (P_j - P_j^T)``
        (LD) or ``P_j - P_j^T`` on the blocks of axis ``a`` and 0 elsewhere (AP)."""
        skew = self.weight - self.weight.transpose(-1, -2)  # (heads, blocks, b, b)
        scale = self.multiplier if self.multiplier is not None else self.mask
        return skew[:, None] * scale[None, :, :, None, None]
