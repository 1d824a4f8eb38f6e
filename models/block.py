"""The shared transformer pieces: a pre-norm block and an encoder stack that encodes positions once.

Every reference model (ViT, audio, text, video) embeds its input into ``dim - pe.cat_dim`` channels,
puts prefix tokens (cls) first and hands the tokens and the grid shape to :class:`Encoder`, which
calls the encoding ONCE per forward and passes the same :class:`ndpe.PosOut` to every block.
Models never look at the kind: ``add``/``cat`` go to the tokens, ``rot``/``bias`` to attention.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import torch
from timm.layers import DropPath, Mlp, trunc_normal_
from torch import Tensor, nn

import ndpe


def make_pe(pe: Mapping[str, Any], *, dims: int, dim: int, heads: int, axes: Sequence[str] = ()) -> nn.Module:
    """Build the encoding a model config names: ``{"kind": ..., "options": {...}, "augment": ...}``.

    ``kind`` may also give each of the model's ``axes`` (its grid's axis names, e.g. ``("time", "freq")``) its
    own kind, as :class:`ndpe.PerAxis` takes them: ``{"time": "rope", "freq": {"kind": "learned", "size": 4}}``,
    every axis named once, in any order; the options then go inside each axis.

    >>> make_pe({"kind": "rope"}, dims=2, dim=64, heads=4).kind
    'rope'
    >>> make_pe({"kind": {"freq": "sinusoidal", "time": "rope"}}, dims=2, dim=64, heads=4, axes=("time", "freq")).kind
    'time=rope+freq=sinusoidal'
    """
    unknown = sorted(set(pe) - {"kind", "options", "augment"})
    if unknown:
        raise ValueError(f"unknown pe key(s) {unknown}; expected kind, options, augment")
    kind = pe.get("kind", "none")
    if isinstance(kind, Mapping):
        if pe.get("options") or pe.get("augment") is not None:
            raise ValueError("a per-axis pe takes each axis's options inside it ({axis: {kind: ..., option: ...}}) "
                             "and no augment")
        if sorted(kind) != sorted(axes):
            raise ValueError(f"a per-axis pe names each axis of this model's grid {tuple(axes)} once, got "
                             f"{tuple(kind)}")
        return ndpe.PerAxis({a: kind[a] for a in axes}, dim=dim, heads=heads)
    return ndpe.make(dims=dims, kind=kind, dim=dim, heads=heads, augment=pe.get("augment"),
                     **dict(pe.get("options") or {}))


class Block(nn.Module):
    """Pre-norm transformer block: ``x + attn(norm(x), pos)``, then ``x + mlp(norm(x))``; ``(B, T, C) -> (B, T, C)``.

    >>> blk = Block(32, heads=4)
    >>> blk(torch.randn(2, 5, 32)).shape
    torch.Size([2, 5, 32])
    """

    def __init__(self, dim: int, heads: int, *, mlp_ratio: float = 4.0, drop: float = 0.0, drop_path: float = 0.0,
                 causal: bool = False):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = ndpe.Attention(dim, heads, proj_drop=drop, causal=causal)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = Mlp(dim, int(dim * mlp_ratio), drop=drop)
        self.drop_path = DropPath(drop_path) if drop_path > 0 else nn.Identity()

    def forward(self, x: Tensor, pos: ndpe.PosOut | None = None, cache: ndpe.KVCache | None = None) -> Tensor:
        x = x + self.drop_path(self.attn(self.norm1(x), pos, cache))  # (B, T, C)
        return x + self.drop_path(self.mlp(self.norm2(x)))


class Encoder(nn.Module):
    """The encoding, ``depth`` blocks and a final LayerNorm.

    ``forward(x, grid_shape, num_prefix)``: ``x`` is ``(B, P + N, dim - pe.cat_dim)`` (``P`` prefix tokens,
    then the ``N = prod(grid_shape)`` grid tokens row-major); returns ``(B, P + N, dim)``. ``nope_every=n``
    makes every n-th block position-free (Llama 4's iRoPE): it gets no rotation, bias or logits term (what
    the encoding adds to the tokens, before the first block, stays). ``nope_temperature=(floor_scale, attn_scale)``
    adds Llama 4's attention temperature tuning to those blocks: the query of the grid token at position ``p``
    (counting cached tokens) is multiplied by ``1 + attn_scale * log(1 + floor((p + 1) / floor_scale))`` (Llama 4:
    ``(8192, 0.1)``), so attention stays sharp over long contexts. It travels in the contract, as a rotation by
    angle 0 with that amplitude for the queries and the identity for the keys (``rot``, ``rot_k``).

    >>> enc = Encoder(make_pe({"kind": "coord"}, dims=2, dim=32, heads=4), dim=32, depth=1, heads=4)
    >>> enc(torch.randn(2, 1 + 12, 32 - enc.pe.cat_dim), (3, 4), num_prefix=1).shape
    torch.Size([2, 13, 32])
    """

    def __init__(self, pe: nn.Module, *, dim: int, depth: int, heads: int, mlp_ratio: float = 4.0,
                 drop: float = 0.0, drop_path: float = 0.0, causal: bool = False, nope_every: int = 0,
                 nope_temperature: Sequence[float] | None = None):
        super().__init__()
        if isinstance(nope_every, bool) or not isinstance(nope_every, int) or nope_every < 0:
            raise ValueError(f"nope_every must be an int >= 0 (0: every block uses the encoding), got {nope_every!r}")
        self.nope_temperature = check_temperature(nope_temperature, nope_every)
        self.head_dim = dim // heads
        self.pe = pe
        # iRoPE (Llama 4's no_rope_layers): every nope_every-th block attends without the attention-level terms
        self.nope = tuple(nope_every > 0 and (i + 1) % nope_every == 0 for i in range(depth))
        rates = torch.linspace(0, drop_path, depth).tolist()  # stochastic depth grows with depth (timm ViT)
        self.blocks = nn.ModuleList(Block(dim, heads, mlp_ratio=mlp_ratio, drop=drop, drop_path=r, causal=causal)
                                    for r in rates)
        self.norm = nn.LayerNorm(dim)
        self.blocks.apply(init_weights)  # the encoding keeps its own init

    @property
    def token_dim(self) -> int:
        """Channels a model embeds tokens to: ``dim`` minus what a concatenated encoding appends."""
        return self.norm.normalized_shape[0] - self.pe.cat_dim

    def forward(self, x: Tensor, grid_shape: Sequence[int], num_prefix: int = 0,
                caches: Sequence[ndpe.KVCache] | None = None, positions: Tensor | None = None) -> Tensor:
        """``caches``: one :class:`ndpe.KVCache` per block for decoding (1D); ``x`` then holds the new tokens only
        and ``grid_shape`` their count, placed after the ``caches[0].length`` cached ones. ``positions``: the grid
        tokens' positions ``(B, N, dims)`` given by the data, passed to the encoding (its default grid otherwise)."""
        past = 0
        if caches is not None:
            if len(caches) != len(self.blocks):
                raise ValueError(f"caches: one KVCache per block ({len(self.blocks)}), got {len(caches)}")
            past = max(caches[0].length - num_prefix, 0)  # cached grid tokens (the prefix is cached first)
        pos = self.pe(tuple(grid_shape), positions=positions, num_prefix=num_prefix, dtype=x.dtype, past=past)  # once
        return self._blocks(x, pos, caches)

    def forward_packed(self, x: Tensor, grid_shapes: Sequence[Sequence[int]], num_prefix: int = 0) -> Tensor:
        """Samples of several grid shapes packed into one sequence ``x`` ``(B, T, dim - pe.cat_dim)`` (each sample's
        prefix first, then its grid tokens; ``T = sum(P + N_i)``), encoded with ``pe.packed``: positions restart per
        sample and no token attends outside its sample, so each sample's outputs equal running it alone."""
        pos = self.pe.packed([tuple(g) for g in grid_shapes], num_prefix=num_prefix, dtype=x.dtype)
        if any(self.nope):
            raise ValueError("forward_packed keeps samples apart with the encoding's mask; position-free blocks "
                             "(nope_every) would drop it: pack without nope_every")
        return self._blocks(x, pos, None)

    def _blocks(self, x: Tensor, pos: ndpe.PosOut, caches: Sequence[ndpe.KVCache] | None) -> Tensor:
        x = ndpe.apply_tokens(x, pos)  # (B, T, dim)
        free = self._free(pos, x) if any(self.nope) else pos  # no rot, bias, logits
        for i, blk in enumerate(self.blocks):
            x = blk(x, free if self.nope[i] else pos, None if caches is None else caches[i])
        return self.norm(x)


    def _free(self, pos: ndpe.PosOut, x: Tensor) -> ndpe.PosOut:
        """The position-free blocks' ``PosOut``: nothing, or the queries' temperature (see the class doc)."""
        if self.nope_temperature is None:
            return ndpe.PosOut(num_prefix=pos.num_prefix, past=pos.past)
        floor_scale, attn_scale = self.nope_temperature
        p, n = pos.num_prefix, x.shape[1] - pos.num_prefix
        grid = torch.arange(n, device=x.device, dtype=torch.float32) + max(pos.past - p, 0)
        scale = torch.cat([grid.new_ones(p), torch.log1p(torch.floor((grid + 1) / floor_scale)) * attn_scale + 1])
        amp = scale[None, :, None].expand(1, p + n, self.head_dim // 2)  # (1, T, head_dim / 2)
        zero = torch.zeros_like(amp)
        return ndpe.PosOut(rot=(amp, zero), rot_k=(torch.ones_like(amp), zero), num_prefix=p, past=pos.past)


def check_temperature(value, nope_every: int) -> tuple[float, float] | None:
    """``(floor_scale, attn_scale)``: a positive floor scale and a finite scale >= 0, for position-free blocks."""
    if value is None:
        return None
    if not isinstance(value, (tuple, list)) or len(value) != 2 or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value) \
            or value[0] <= 0 or value[1] < 0:
        raise ValueError(f"nope_temperature must be (floor_scale > 0, attn_scale >= 0), Llama 4's (8192, 0.1); "
                         f"got {value!r}")
    if nope_every == 0:
        raise ValueError("nope_temperature tunes the position-free blocks: it needs nope_every > 0")
    return float(value[0]), float(value[1])


def init_weights(m: nn.Module) -> None:
    """timm ViT init: ``trunc_normal_(std=0.02)`` linear weights, zero biases, unit LayerNorm."""
    if isinstance(m, nn.Linear):
        trunc_normal_(m.weight, std=0.02)
        if m.bias is not None:
            nn.init.zeros_(m.bias)
    elif isinstance(m, nn.LayerNorm):
        nn.init.ones_(m.weight)
        nn.init.zeros_(m.bias)


def pool(x: Tensor, mode: str, num_prefix: int) -> Tensor:
    """``(B, T, C) -> (B, C)``: the cls token (``"cls"``) or the mean of the grid tokens (``"mean"``)."""
    return x[:, 0] if mode == "cls" else x[:, num_prefix:].mean(1)


def check_pool(mode: str) -> int:
    """Validate a pooling mode and return the number of prefix tokens it needs."""
    if mode not in ("cls", "mean"):
        raise ValueError(f"pool must be 'cls' or 'mean', got {mode!r}")
    return int(mode == "cls")
