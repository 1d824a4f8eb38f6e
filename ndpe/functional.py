"""Pure tensor functions shared by kinds and models (no modules, no state)."""
from __future__ import annotations

import torch
from torch import Tensor


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor, pairing: str = "half") -> Tensor:
    """Rotate the first ``rot_dim = 2 * cos.shape[-1]`` channels of ``x`` ``(..., T, head_dim)``.

    ``cos``/``sin`` are ``(*, T, rot_dim // 2)``, broadcastable against ``x[..., :rot_dim // 2]``.
    ``pairing="half"`` rotates (x[i], x[i + rot_dim/2]) (GPT-NeoX / HF); ``"interleaved"``
    rotates (x[2i], x[2i+1]) (rotary-embedding-torch, timm). Channels past ``rot_dim`` pass through.
    The result has ``x``'s dtype.
    """
    half = cos.shape[-1]
    rot_dim = 2 * half
    if rot_dim > x.shape[-1]:
        raise ValueError(f"rotation needs {rot_dim} channels but x has head_dim {x.shape[-1]}")
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    xr, rest = x[..., :rot_dim], x[..., rot_dim:]
    if pairing == "half":
        x1, x2 = xr[..., :half], xr[..., half:]
        out = torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)
    elif pairing == "interleaved":
        x1, x2 = xr[..., 0::2], xr[..., 1::2]
        out = torch.stack([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).flatten(-2)
    else:
        raise ValueError(f"pairing must be 'half' or 'interleaved', got {pairing!r}")
    return out if rest.shape[-1] == 0 else torch.cat([out, rest], dim=-1)
