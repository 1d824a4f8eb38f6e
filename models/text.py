"""1D token transformer: causal for language modelling, bidirectional for tagging (one output per token)."""
from __future__ import annotations

import math
from typing import Any, Mapping

from torch import Tensor, nn

from .block import Encoder, init_weights, make_pe


class TextTransformer(nn.Module):
    """``(B, L) token ids -> (B, L, num_classes)`` logits (``num_classes`` = vocab size for an LM).

    ``tie_weights`` shares the token embedding with the output head (GPT-2 / nanoGPT); it needs
    ``num_classes == vocab_size`` and an encoding that does not concatenate channels.

    Token embeddings follow "Attention Is All You Need": initialized with std ``c ** -0.5`` and
    multiplied by ``sqrt(c)`` (``c`` = embedding width), so tokens enter at unit scale, the scale of
    the fixed encodings (sinusoidal, Fourier, coordinates) added to them. With GPT-2's std 0.02
    and no scaling, a unit-amplitude encoding swamps the tokens 35 to 1 and the LM barely learns.

    >>> import torch
    >>> m = TextTransformer(vocab_size=20, num_classes=20, pe={"kind": "rope"}, dim=32, depth=1, heads=4, causal=True)
    >>> m(torch.randint(0, 20, (2, 12))).shape, m(torch.randint(0, 20, (2, 30))).shape   # longer text
    (torch.Size([2, 12, 20]), torch.Size([2, 30, 20]))
    """

    def __init__(self, *, vocab_size: int, num_classes: int, pe: Mapping[str, Any], dim: int = 64, depth: int = 4,
                 heads: int = 4, causal: bool = False, tie_weights: bool = False, mlp_ratio: float = 4.0,
                 drop: float = 0.0, drop_path: float = 0.0):
        super().__init__()
        self.encoder = Encoder(make_pe(pe, dims=1, dim=dim, heads=heads), dim=dim, depth=depth, heads=heads,
                               mlp_ratio=mlp_ratio, drop=drop, drop_path=drop_path, causal=causal)
        self.tok_embed = nn.Embedding(vocab_size, self.encoder.token_dim)
        self.embed_scale = math.sqrt(self.encoder.token_dim)
        nn.init.normal_(self.tok_embed.weight, std=1 / self.embed_scale)
        self.head = nn.Linear(dim, num_classes, bias=False)
        self.head.apply(init_weights)
        if tie_weights:
            if num_classes != vocab_size or self.encoder.token_dim != dim:
                raise ValueError(f"tie_weights needs num_classes == vocab_size ({num_classes} vs {vocab_size}) and an "
                                 f"encoding without concatenated channels (cat_dim={self.encoder.pe.cat_dim})")
            self.head.weight = self.tok_embed.weight  # (vocab, dim)

    def forward(self, tokens: Tensor) -> Tensor:
        x = self.tok_embed(tokens) * self.embed_scale  # (B, L, dim - cat_dim), unit scale
        x = self.encoder(x, (tokens.shape[1],))  # (B, L, dim)
        return self.head(x)  # (B, L, num_classes)

