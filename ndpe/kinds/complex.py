"""``complex``: complex-valued word-order embeddings (Wang et al. ICLR 2020, "Encoding word order in complex
embeddings"), 1D, acting on the token embeddings.

The paper makes each embedding dimension ``j`` of a word a function of its position ``p``::

    f(j, p) = r_j exp(i (w_j p + theta_j))          amplitude r_j, frequency w_j, initial phase theta_j

which satisfies its Property 1: ``f(p + k) = T_k f(p)`` with ``T_k = diag(exp(i w_j k))``, a linear map that
depends on the offset ``k`` alone. In ndpe the model's token embedding supplies the word part and this kind
multiplies in the position, through ``PosOut(tokens=TokenTerm(fn))`` (``ndpe.apply_tokens``).

Conventions:
- Channels. The ``dim`` channels of a token are ``dim / 2`` complex numbers ``z_j = Re_j + i Im_j = r_j e^{i theta_j}``:
  ``pairing="half"`` (default) reads ``Re`` from the first half and ``Im`` from the second (the layout of the
  reference code, which concatenates ``[real, imaginary]`` features, e.g. ``torch.cat([real, phase], 2)`` in its
  Transformer classifier); ``"interleaved"`` reads ``(x[2j], x[2j+1])``. So amplitude and initial phase are the
  token embedding's, word-dependent as in the paper (the reference code sets ``theta = 0``: its word embedding
  is the amplitude, ``real = r cos(w p)``, ``imag = r sin(w p)``; a model that wants that zeroes its ``Im`` channels).
- Position. ``fn(x)`` returns ``z_j e^{i w_j p}`` in the same layout: ``Re' = Re cos(w p) - Im sin(w p)``,
  ``Im' = Re sin(w p) + Im cos(w p)``, i.e. :func:`ndpe.functional.apply_rotary` of the token by the angle
  ``w_j p``. Prefix tokens pass through. Coordinates are ``index`` units (token steps); fractional positions
  are fine.
- Frequencies. ``freq`` ``(dim / 2,)`` is a learned parameter shared by all words (the paper's word-sharing
  simplification), initialised to the sinusoidal encoding's ``theta ** (-2j / dim)``: with ``z = 1`` every token
  gets ``cos(w p)`` and ``sin(w p)``, the Transformer's sinusoids at the same width (the paper's remark that
  the Transformer's position encoding is a special case). The reference code instead looks up a frequency
  vector per word (an embedding table ``|V| x D`` initialised with ``1 / 10000 ** (2 (j // 2) / D)`` for all words,
  learned in classification, frozen in translation). A per-word table needs the token ids, which ndpe's contract
  does not pass; ``token_frequencies=True`` approximates it by ``w(x) = freq + W x`` with a learned
  ``W`` ``(dim / 2, dim)`` (``freq_proj``, initialised to 0 so training starts from the shared frequencies): each
  word still gets its own frequencies and Property 1 holds word by word, but the frequency table is tied to
  the embedding (rank <= dim), not free. Freeze the frequencies with ``pe.freq.requires_grad_(False)``.
- How a real-valued model consumes it. The output is real, ``dim`` channels, consumed by ordinary layers.
  The reference code runs complex layers instead (one real weight matrix applied to ``Re`` and ``Im`` alike,
  attention logits ``|q k^T| / sqrt(d)``); a real linear layer on ``[Re | Im]`` contains that projection
  (``block_diag(W, W)``) as a special case, the modulus attention is not reproduced.
- Precision. Angles ``w p`` are computed in float64 (float32 on MPS) from the float32 parameters (gradients flow
  to ``freq``), cos/sin used in float32; the result has the dtype of ``x``. ``fn`` takes ``(B, N, dim)``
  (``N`` grid tokens) and returns the same shape.

>>> import ndpe, torch
>>> pe = ndpe.make(dims=1, kind="complex", dim=8)
>>> pe.freq.shape
torch.Size([4])
>>> pos = pe((5,), num_prefix=1)
>>> x = torch.randn(2, 6, 8)
>>> ndpe.apply_tokens(x, pos).shape
torch.Size([2, 6, 8])
"""
from __future__ import annotations

from typing import Callable

from torch import Tensor, nn

from ..base import Encoding
from ..checks import check_bool, check_float_tensor, check_number, check_pairing
from ..contract import PosOut, TokenTerm
from ..functional import apply_rotary
from ..memory import check_tables
from ..registry import register
from ..scaling import axial_inv_freq
from .rope import angle_dtype


@register("complex", dims=(1,))
class Complex(Encoding):
    """Complex word-order embedding: token pairs ``z_j`` become ``z_j exp(i w_j p)`` (see the module docstring).

    Args:
        theta: base of the initial frequencies ``theta ** (-2j / dim)`` (> 1), the sinusoidal encoding's.
        pairing: ``"half"`` (``Re`` = first half, ``Im`` = second half; default) or ``"interleaved"``.
        token_frequencies: frequencies ``freq + W x`` depending on the token embedding ``x`` (a learned
            linear map, zero-initialised), instead of shared by all words.
    """

    has_parameters = True
    description = "complex word-order embeddings (Wang et al. 2020): token pairs `r e^{i theta}` times `e^{i w p}`"
    colour, marker = "#e7298a", "p"

    freq: nn.Parameter  # (dim / 2,) float32

    def __init__(self, *, dims: int, dim: int, heads: int = 1, theta: float = 10000.0, pairing: str = "half",
                 token_frequencies: bool = False):
        super().__init__(dims=dims, dim=dim, heads=heads)
        if dim % 2:
            raise ValueError(f"complex pairs channels as (Re, Im): it needs an even dim, got dim={dim}")
        self.theta = check_number(theta, "theta", low=1.0, inclusive=False)
        self.pairing = check_pairing(pairing)
        self.token_frequencies = check_bool(token_frequencies, "token_frequencies")
        self.freq = nn.Parameter(axial_inv_freq(dim, self.theta).float())
        self.freq_proj: nn.Linear | None = None
        if token_frequencies:
            check_tables("complex", {"token-frequency map": (dim // 2, dim)}, "use a smaller dim or "
                         "token_frequencies=False")
            self.freq_proj = nn.Linear(dim, dim // 2, bias=False)
            nn.init.zeros_(self.freq_proj.weight)

    def frequencies(self, x: Tensor | None = None) -> Tensor:
        """The frequencies ``(dim / 2,)``, or ``(..., N, dim / 2)`` per token of ``x`` with ``token_frequencies``."""
        if self.freq_proj is None or x is None:
            return self.freq
        return self.freq + self.freq_proj(x.to(self.freq.dtype))

    def encode(self, positions: Tensor, grid_shape) -> PosOut:
        pos = positions.to(angle_dtype(positions.device))  # (..., N, 1); decoding: the new tokens' positions
        n = positions.shape[-2]
        dim, pairing = self.dim, self.pairing

        def rotate(x: Tensor, angle: Tensor) -> Tensor:
            return apply_rotary(x, angle.cos().float(), angle.sin().float(), pairing)

        def check(x: Tensor) -> None:
            check_float_tensor(x, "tokens x")
            if x.shape[-1] != dim or x.shape[-2] != n:
                raise ValueError(f"complex encodes tokens (B, {n}, {dim}) (grid tokens, dim channels), "
                                 f"got {tuple(x.shape)}")

        fn: Callable[[Tensor], Tensor]
        if self.freq_proj is None:
            angle = pos * self.freq.to(pos.dtype)  # (..., N, dim / 2), computed once per forward

            def fn(x: Tensor) -> Tensor:
                check(x)
                return rotate(x, angle)
        else:
            def fn(x: Tensor) -> Tensor:
                check(x)
                return rotate(x, pos * self.frequencies(x).to(pos.dtype))
        return PosOut(tokens=TokenTerm(fn=fn))
