"""``pope``: polar positional embedding (Gopalakrishnan et al. 2025, arXiv 2509.10534; x-transformers'
``polar_pos_emb``).

RoPE mixes "what" and "where": a pair's rotation angle adds to the angle the content already has. PoPE separates
them: every channel ``c`` of q and k becomes a complex number whose MAGNITUDE is the content, ``softplus(q_c)``, and
whose PHASE is the position alone, ``p * f_c`` with ``f_c = base ** (-c / d)`` over all ``d = head_dim`` channels
(one frequency per channel, not per pair). The keys' phases carry a learned per-head, per-channel offset ``b_hc``,
clamped to ``[-2 pi, 0]``. The logit is the real part of the Hermitian product:

    logit[h, i, j] = sum_c softplus(q_ic) softplus(k_jc) cos((i - j) f_c - b_hc) / sqrt(d)

so it depends on positions through the offset only, and no content can shift the phase. x-transformers writes it as
``cat(softplus(q) cos, softplus(q) sin)`` against the same for k (``2 d`` channels) under the scale ``d ** -0.5``.

It is not a rotation of q and k (softplus, and twice the channels), so it travels as a ``logits`` term: the whole
PoPE logit minus the ``q . k / sqrt(d)`` that SDPA adds itself (``tests/test_pope.py`` checks the sum against
x-transformers' ``PolarEmbedding`` + ``apply_polar_pos_emb`` and a per-pair loop). Materialized ``(B, heads, Nq, Nk)``
float32 per layer; decodes with a KV cache (the keys' phases from their positions).

>>> import ndpe, torch
>>> pe = ndpe.make(dims=1, kind="pope", dim=32, heads=4)
>>> q = k = torch.randn(2, 4, 10, 8)
>>> pe((10,)).logits(q, k).shape
torch.Size([2, 4, 10, 10])
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..base import Encoding
from ..checks import check_bool, check_number
from ..contract import LogitsTerm, PosOut
from ..coords import angle_limit
from ..memory import check_memory
from ..registry import register


def pope_logits(q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor, inv_freq: Tensor, bias: Tensor) -> Tensor:
    """PoPE's logits ``(B, heads, Nq, Nk)`` float32: ``q``, ``k`` ``(B, heads, N, d)``, positions ``(N,)`` or
    ``(B, N)``, ``inv_freq`` ``(d,)``, key phase offsets ``bias`` ``(heads, 1, d)`` (already clamped)."""
    def phases(pos: Tensor) -> Tensor:
        angle = pos.double()[..., :, None] * inv_freq.double()  # (..., N, d), float64 angles
        return angle[:, None] if angle.ndim == 3 else angle  # batched positions: a heads axis

    aq, ak = phases(q_pos), phases(k_pos) + bias.double()
    mq, mk = F.softplus(q.float()), F.softplus(k.float())  # magnitudes
    qc = torch.cat([mq * aq.cos().float(), mq * aq.sin().float()], dim=-1)  # (B, heads, Nq, 2d)
    kc = torch.cat([mk * ak.cos().float(), mk * ak.sin().float()], dim=-1)
    return qc @ kc.transpose(-1, -2) * q.shape[-1] ** -0.5


@register("pope", dims=(1,))
class PoPE(Encoding):
    """Polar positional embedding: content magnitudes, position phases; see the module doc.

    Args:
        base: frequency base, ``f_c = base ** (-c / head_dim)``.
        bias_uniform_init: start the key phase offsets uniform in ``[-2 pi, 0]`` (x-transformers' option) instead of
            at 0.
    """

    has_parameters = True
    takes_key_positions = True  # decodes: the cached keys' phases come from their positions
    description = "PoPE (Gopalakrishnan et al. 2025): magnitudes softplus(q), softplus(k), phases from positions only"
    colour, marker = "#a6761d", "<"
    inv_freq: Tensor  # (head_dim,) float64 buffer

    @classmethod
    def example_options(cls, dims: int) -> dict:
        """Offsets inside the clamp: at the default 0 (its edge) a sum over all pairs has no gradient by symmetry."""
        return {"bias_uniform_init": True}

    def __init__(self, *, dims: int, dim: int, heads: int = 1, base: float = 10000.0, bias_uniform_init: bool = False):
        super().__init__(dims=dims, dim=dim, heads=heads)
        self.base = check_number(base, "base", low=1.0, inclusive=False)
        self.bias_uniform_init = check_bool(bias_uniform_init, "bias_uniform_init")
        d = self.head_dim
        self.register_buffer("inv_freq", self.base ** (-torch.arange(d, dtype=torch.float64) / d), persistent=False)
        self.learned_bias = nn.Parameter(torch.zeros(heads, 1, d))  # x-transformers' name and shape
        if bias_uniform_init:
            with torch.no_grad():
                self.learned_bias.uniform_(-2 * math.pi, 0.0)

    def position_limit(self, dtype: torch.dtype = torch.float32) -> tuple[float, str] | None:
        """Positions whose phases stay within :data:`ndpe.coords.MAX_ANGLE` (the fastest frequency is ``base ** 0``)."""
        return angle_limit(self.kind, 1.0)

    def _apply(self, fn, *args, **kwargs):
        out = super()._apply(fn, *args, **kwargs)  # keep the frequencies in float64 under .half() / .to(bf16)
        self.inv_freq = self.base ** (-torch.arange(self.head_dim, dtype=torch.float64, device=self.inv_freq.device)
                                      / self.head_dim)
        return out

    def encode(self, positions: Tensor, grid_shape, key_positions: Tensor | None = None) -> PosOut:
        q_pos = positions[..., 0]
        k_pos = q_pos if key_positions is None else key_positions[..., 0]
        inv_freq, learned = self.inv_freq, self.learned_bias

        def term(q: Tensor, k: Tensor) -> Tensor:
            if q.shape[-2] != q_pos.shape[-1] or k.shape[-2] != k_pos.shape[-1]:
                raise ValueError(f"pope was encoded for {q_pos.shape[-1]} queries and {k_pos.shape[-1]} keys (grid "
                                 f"tokens) but got q {tuple(q.shape)} and k {tuple(k.shape)}")
            if not torch.compiler.is_compiling():
                check_memory(4 * 4 * q.shape[0] * q.shape[1] * q.shape[-2] * k.shape[-2],
                             lambda: f"pope logits ({q.shape[0]} x {q.shape[1]} heads x {q.shape[-2]} x {k.shape[-2]} "
                                     "float32, with intermediates)", "use shorter sequences")
            bias = learned.clamp(-2 * math.pi, 0.0)
            content = q.float() @ k.float().transpose(-1, -2) * q.shape[-1] ** -0.5  # what SDPA adds itself
            return pope_logits(q, k, q_pos, k_pos, inv_freq, bias) - content

        return PosOut(logits=LogitsTerm(fn=term))
