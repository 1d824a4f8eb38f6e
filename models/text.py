"""1D token transformer: causal for language modelling, bidirectional for tagging (one output per token)."""
from __future__ import annotations

import math
from typing import Any, Mapping

import torch
from torch import Tensor, nn

import ndpe

from .block import Encoder, init_weights, make_pe


class TextTransformer(nn.Module):
    """``(B, L) token ids -> (B, L, num_classes)`` logits (``num_classes`` = vocab size for an LM).

    ``nope_every=n`` makes every n-th block position-free (Llama 4's iRoPE, ``no_rope_layers``; SmolLM3);
    ``nope_temperature=(floor_scale, attn_scale)`` adds Llama 4's attention temperature tuning to them (:class:`Encoder`).
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
                 drop: float = 0.0, drop_path: float = 0.0, nope_every: int = 0,
                 nope_temperature: tuple[float, float] | None = None):
        super().__init__()
        self.encoder = Encoder(make_pe(pe, dims=1, dim=dim, heads=heads), dim=dim, depth=depth, heads=heads,
                               mlp_ratio=mlp_ratio, drop=drop, drop_path=drop_path, causal=causal, nope_every=nope_every,
                               nope_temperature=nope_temperature)
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

    @staticmethod
    def grid_for(input_shape) -> tuple[int]:
        """The ``(length,)`` grid of one token sequence (``(L,)`` ids, or ``(L, 2)`` ids and positions)."""
        return (input_shape[0],)

    def forward(self, tokens: Tensor, caches: list[ndpe.KVCache] | None = None) -> Tensor:
        """``tokens``: ``(B, L)`` ids, or ``(B, L, 2)``: ids and each token's position given by the data (e.g. the
        place ids of ``AdditionTask(place=True)``), handed to the encoding as ``positions`` whatever its kind.
        ``caches``: one :class:`ndpe.KVCache` per block (see :meth:`new_caches`) to decode with; ``tokens`` are
        then the new tokens after the cached ones."""
        positions = None
        if tokens.dim() == 3:
            if tokens.shape[-1] != 2:
                raise ValueError(f"tokens must be (B, L) ids or (B, L, 2) ids and positions, got {tuple(tokens.shape)}")
            tokens, positions = tokens[..., 0], tokens[..., 1:].float()  # (B, L), (B, L, 1)
        x = self.tok_embed(tokens) * self.embed_scale  # (B, L, dim - cat_dim), unit scale
        x = self.encoder(x, (tokens.shape[1],), caches=caches, positions=positions)  # (B, L, dim)
        return self.head(x)  # (B, L, num_classes)

    def new_caches(self) -> list[ndpe.KVCache]:
        """Empty KV caches, one per block."""
        return [ndpe.KVCache() for _ in self.encoder.blocks]

    @torch.no_grad()
    def generate(self, prompt: Tensor, max_new_tokens: int, *, temperature: float = 0.0, top_k: int | None = None,
                 use_cache: bool = True, generator: torch.Generator | None = None) -> Tensor:
        """Continue ``prompt`` ``(B, L)`` by ``max_new_tokens`` tokens; returns ``(B, L + max_new_tokens)``.

        ``temperature=0`` is greedy; otherwise tokens are sampled from ``softmax(logits / temperature)``, from the
        ``top_k`` most likely when given. With ``use_cache`` (default) the prompt is encoded once and each new token
        attends to the cached keys and values (``pe((1,), past=...)``); ``use_cache=False`` re-runs the whole
        sequence per token (the reference it must equal). Needs a causal model.

        >>> m = TextTransformer(vocab_size=11, num_classes=11, pe={"kind": "alibi"}, dim=16, depth=1, heads=2,
        ...                     causal=True).eval()
        >>> out = m.generate(torch.tensor([[1, 2, 3]]), 4)
        >>> out.shape, bool((out == m.generate(torch.tensor([[1, 2, 3]]), 4, use_cache=False)).all())
        (torch.Size([1, 7]), True)
        """
        if not self.encoder.blocks[0].attn.causal:
            raise ValueError("generate() needs a causal model (TextTransformer(causal=True)): a bidirectional one "
                             "would let earlier tokens see later ones")
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be an int >= 0, got {max_new_tokens!r}")
        if not isinstance(temperature, (int, float)) or isinstance(temperature, bool) or not temperature >= 0:
            raise ValueError(f"temperature must be a number >= 0 (0: greedy), got {temperature!r}")
        if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
            raise ValueError(f"top_k must be an int >= 1 or None, got {top_k!r}")
        if prompt.dim() != 2 or prompt.dtype != torch.long or prompt.shape[1] == 0:
            raise ValueError(f"prompt must be (B, L >= 1) token ids of dtype long, got {tuple(prompt.shape)} {prompt.dtype}")
        if prompt.shape[0] == 0:  # no sequence to continue (min() of an empty tensor would raise)
            return prompt.new_empty((0, prompt.shape[1] + max_new_tokens))
        vocab = self.tok_embed.num_embeddings
        low, high = int(prompt.min()), int(prompt.max())
        if low < 0 or high >= vocab:
            raise ValueError(f"prompt holds token id {low if low < 0 else high} outside the vocabulary 0..{vocab - 1}")
        out, caches = prompt, (self.new_caches() if use_cache else None)
        step = prompt
        for _ in range(max_new_tokens):
            logits = self(step, caches) if use_cache else self(out)
            nxt = self._pick(logits[:, -1].float(), temperature, top_k, generator)  # (B, 1)
            out = torch.cat([out, nxt], dim=1)
            step = nxt
        return out

    @staticmethod
    def _pick(logits: Tensor, temperature: float, top_k: int | None, generator: torch.Generator | None) -> Tensor:
        if temperature == 0:
            return logits.argmax(-1, keepdim=True)
        logits = logits / temperature
        if top_k is not None and top_k < logits.shape[-1]:
            kth = logits.topk(top_k, dim=-1).values[:, -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        return torch.multinomial(logits.softmax(-1), 1, generator=generator)

