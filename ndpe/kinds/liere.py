"""``liere``: Lie rotational position encodings (Ostmeier et al. 2024, LieRE).

Each head ``h`` learns one skew-symmetric generator ``A_{h,a}`` per axis ``a`` (``A = W - W^T``); the token at
position ``p`` rotates its query and key by

    R_h(p) = exp(sum_a p_a A_{h,a})        (an orthogonal matrix: a rotation of the whole head)

and the logit is ``(R(p_i) q_i) . (R(p_j) k_j) / sqrt(d)``. RoPE is the special case of generators that are
2 x 2 blocks on the diagonal with fixed angles; LieRE learns them, dense (``block_size = head_dim``, the paper's)
or in ``block_size x block_size`` diagonal blocks (the ComRoPE authors' LieRE baseline). Generators of different
axes need not commute, so ``R(p_i)^T R(p_j)`` is not a function of ``p_j - p_i`` in general: LieRE is not exactly
relative (ComRoPE restricts the generators so that it is).

Not a rotation of fixed pairs, so it travels as a ``logits`` term: the rotated q . k minus the plain ``q . k /
sqrt(d)`` SDPA adds (``tests/test_liere.py`` pins it against a port of the public LieRE attention of the ComRoPE
code and a dense per-token loop). Cost: ``encode`` builds one matrix exponential per token, head and block
(``N x heads x head_dim / block_size`` exponentials of ``block_size x block_size`` matrices, once per forward); each
layer then multiplies q and k by them (``2 x B x heads x N x head_dim x block_size`` multiply-adds) and materializes
the ``(B, heads, N, N)`` term. ``benchmarks/README.md`` times it beside rope. Positions enter absolutely (a
shift changes the logits): the default ``coords="centered"`` keeps them in ``[-1, 1]`` as the reference keeps
them in ``[0, 1]``. Decodes with a KV cache (the keys' rotations from their positions).

>>> import ndpe, torch
>>> pe = ndpe.make(dims=2, kind="liere", dim=64, heads=4, block_size=8)
>>> q = k = torch.randn(2, 4, 12, 16)
>>> pe((3, 4)).logits(q, k).shape
torch.Size([2, 4, 12, 12])
"""
from __future__ import annotations

from typing import Any

import torch
from einops import rearrange
from torch import Tensor, nn

from ..base import Encoding
from ..checks import check_choice, check_devices, check_int, check_number
from ..contract import LogitsTerm, PosOut, check_leading
from ..coords import COORD_MODES
from ..memory import check_memory, check_tables
from ..registry import register


MAX_EXPONENT = 1e5  # 1-norm of sum_a p_a A_a: float32 matrix_exp stays orthogonal within ~1e-2 up to it


def liere_rotations(positions: Tensor, generators: Tensor) -> Tensor:
    """``R = exp(sum_a p_a A_a)`` per token, head and block: positions ``(..., N, dims)``, skew generators
    ``(heads, dims, blocks, b, b)`` -> ``(..., heads, N, blocks, b, b)`` float32."""
    lie = torch.einsum("...nd,hdkij->...hnkij", positions.float(), generators.float())
    b = lie.shape[-1]  # one flat batch of b x b matrices: matrix_exp views its input (a strided one fails, compiled too)
    flat = lie.reshape(-1, b, b).clone(memory_format=torch.contiguous_format)
    return torch.matrix_exp(flat).reshape(lie.shape)


def rotate_blocks(x: Tensor, rot: Tensor) -> Tensor:
    """``x`` ``(B, heads, N, d)`` multiplied block-wise by ``rot`` ``(..., heads, N, blocks, b, b)``."""
    blocks = rearrange(x.float(), "... (k b) -> ... k b", b=rot.shape[-1])
    return rearrange(torch.einsum("...kij,...kj->...ki", rot, blocks), "... k b -> ... (k b)")


@register("liere", dims=(1, 2, 3))
class LieRE(Encoding):
    """LieRE: learned dense (or block) rotations ``exp(sum_a p_a A_a)``; see the module doc.

    Args:
        block_size: size of the diagonal blocks of the generators (divides head_dim; default head_dim: dense).
        init_std: standard deviation of the generators' ``W`` at init (the reference's ``init_std``).
        coords: ``"centered"`` (default), ``"pixel"`` or ``"index"`` coordinates.
    """

    has_parameters = True
    takes_key_positions = True  # decodes: cached keys rotate by their own positions
    description = "LieRE (Ostmeier et al. 2024): learned rotations exp(sum_a p_a A_a), skew generators per head"
    colour, marker = "#666666", "H"

    def __init__(self, *, dims: int, dim: int, heads: int = 1, block_size: int | None = None, init_std: float = 0.1,
                 coords: str = "centered"):
        super().__init__(dims=dims, dim=dim, heads=heads)
        b = self.head_dim if block_size is None else check_int(block_size, "block_size", low=1)
        if self.head_dim % b:
            raise ValueError(f"block_size must divide head_dim={self.head_dim}, got {b}")
        self.block_size = b
        self.init_std = check_number(init_std, "init_std", low=0.0, dtype=torch.float32)
        self.coords_mode = check_choice(coords, "coords", COORD_MODES)
        blocks = self.head_dim // b
        check_tables("liere", {"generators": (heads * dims * blocks, b * b)}, "use a smaller block_size")
        self.weight = nn.Parameter(torch.randn(heads, dims, blocks, b, b) * self.init_std)

    @classmethod
    def example_options(cls, dims: int) -> dict[str, Any]:
        """Blocks of 4 keep the small examples' exponentials cheap."""
        return {"block_size": 4}

    def generators(self) -> Tensor:
        """The skew-symmetric generators ``W - W^T``, ``(heads, dims, blocks, b, b)``."""
        return self.weight - self.weight.transpose(-1, -2)

    def check_range(self, positions: Tensor, dtype: torch.dtype) -> None:
        """Refuse positions whose exponent ``sum_a p_a A_a`` is too large for a float32 matrix exponential: past a
        1-norm of ``MAX_EXPONENT`` its result is no longer a rotation (entries off by ~1e-7 x the norm; NaN from
        ~1e9). Bounded by ``max_tokens sum_a |p_a| max_{h, block} ||A_{h,a}||_1``, without building the exponent."""
        if positions.numel() == 0 or positions.device.type == "meta" or torch.compiler.is_compiling():
            return
        with torch.no_grad():
            norms = torch.linalg.matrix_norm(self.generators().float(), ord=1)  # (heads, dims, blocks)
            per_axis = norms.transpose(0, 1).reshape(self.dims, -1).amax(-1)  # (dims,)
            reach = float((positions.abs().float() @ per_axis).max())
        if not reach <= MAX_EXPONENT:
            raise ValueError(f"{self.kind} positions {float(positions.amin()):g}..{float(positions.amax()):g} turn its "
                             f"generators by an exponent of norm up to {reach:.3g}, past the {MAX_EXPONENT:g} a float32 "
                             "matrix exponential keeps a rotation: use smaller positions (coords='centered')")

    def _rotations(self, positions: Tensor) -> Tensor:
        if not torch.compiler.is_compiling():
            lead = positions.shape[0] if positions.ndim == 3 else 1
            check_memory(3 * 4 * lead * self.heads * positions.shape[-2] * self.head_dim * self.block_size,
                         lambda: f"{self.kind} rotations ({lead} x {self.heads} heads x {positions.shape[-2]} tokens x "
                                 f"{self.head_dim // self.block_size} blocks of {self.block_size} x {self.block_size}, "
                                 "float32, with the exponential's intermediates)", "use a smaller block_size")
        return liere_rotations(positions, self.generators())

    def encode(self, positions: Tensor, grid_shape, key_positions: Tensor | None = None) -> PosOut:
        rot_q = self._rotations(positions)
        rot_k = rot_q if key_positions is None else self._rotations(key_positions)
        n_q, n_k, heads = positions.shape[-2], (positions if key_positions is None else key_positions).shape[-2], self.heads
        kind = self.kind

        def term(q: Tensor, k: Tensor) -> Tensor:
            if q.shape[-2] != n_q or k.shape[-2] != n_k:
                raise ValueError(f"{kind} was encoded for {n_q} queries and {n_k} keys (grid tokens) but got q "
                                 f"{tuple(q.shape)} and k {tuple(k.shape)}")
            check_devices(f"{kind}'s logits", q=q, k=k, encoding=rot_q.device)
            check_leading(rot_q.shape[:-4], q, "rotations")  # (B | none, heads): per-sample positions meet q's batch
            if not torch.compiler.is_compiling():
                check_memory(3 * 4 * q.shape[0] * heads * n_q * n_k,
                             lambda: f"{kind} logits ({q.shape[0]} x {heads} heads x {n_q} x {n_k} float32, with "
                                     "intermediates)", "use shorter sequences")
            scale = q.shape[-1] ** -0.5
            rotated = rotate_blocks(q, rot_q) @ rotate_blocks(k, rot_k).transpose(-1, -2)
            return (rotated - q.float() @ k.float().transpose(-1, -2)) * scale

        return PosOut(logits=LogitsTerm(fn=term))
