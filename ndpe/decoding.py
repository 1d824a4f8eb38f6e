"""KV-cache decoding: ``pe((n,), past=p)``, the encoding of ``n`` new tokens after ``p`` cached ones.

Per-token fields cover the new tokens (positions ``p .. p + n - 1``); pairwise fields (bias, logits) cover the ``n``
new queries against all ``num_prefix + p + n`` keys, from the keys' coordinates, which a kind declaring
``takes_key_positions`` takes as ``encode(..., key_positions=)``. The prefix tokens are in the cache, so no prefix
rows are added; the output's ``past`` says how many keys the cache must hold. :meth:`ndpe.Encoding.forward` calls
:func:`decode` when given ``past=``.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import Tensor

from .contract import PosOut, pad_prefix
from .coords import grid_coords
from .memory import check_bias_size, check_memory, coords_bytes


def decode(pe: Any, grid_shape: tuple[int, ...] | None, positions: Tensor | None, num_prefix: int,
           dtype: torch.dtype | None, past: int) -> PosOut:
    """``pe((n,), past=p)``: n new queries at positions p .. p + n - 1 against the p + n cached keys; ``pe`` is the
    :class:`ndpe.Encoding` (its module imports this one), the other arguments its ``forward``'s, checked."""
    if pe.dims != 1:
        raise ValueError(f"past= (KV-cache decoding) needs a token order, dims=1; got dims={pe.dims}")
    if grid_shape is None or positions is not None:
        raise ValueError("past= takes grid_shape=(n,) for the n new tokens and no explicit positions")
    if pe.augment is not None and pe.training:
        raise ValueError("past= (KV-cache decoding) is for inference: call pe.eval() to turn position augmentation off")
    if pe.coords_mode != "index":
        raise ValueError(f"past= (KV-cache decoding) needs coords='index': {pe.coords_mode!r} coordinates are "
                         "normalized by the sequence length, which grows with every decoded token")
    n = grid_shape[0]
    check_bias_size(pe, None, n, (past + n,), num_prefix, num_keys=past + n)
    if pe.takes_key_positions:  # the keys' coordinates (past + n, 1), checked from the shape first
        if not torch.compiler.is_compiling():
            check_memory(coords_bytes((past + n,)), f"{pe.kind} keys for decoding past={past} + {n} new "
                         f"tokens ({past + n} float32 key coordinates)", "decode with a shorter past (a KV cache "
                         "that long also holds past + n keys per layer)")
        keys = grid_coords((past + n,), pe.coords_mode, device=pe.device)  # (past + n, 1)
        pe.check_range(keys, dtype or torch.float32)
        out = pe.encode(keys[past:], (past + n,), key_positions=keys)
    else:  # per-token fields: the n new positions past .. past + n - 1 only
        new = torch.arange(past, past + n, device=pe.device).to(torch.float32)[:, None]
        pe.check_range(new, dtype or torch.float32)
        out = pe.encode(new, (past + n,))
        if out.bias is not None or out.logits is not None:
            raise ValueError(f"kind {pe.kind!r} pairs queries with keys but does not declare takes_key_positions "
                             "= True (encode taking key_positions=), so it cannot decode with a KV cache")
    out = dataclasses.replace(pad_prefix(out, 0, k_prefix=num_prefix), past=num_prefix + past)
    return out if dtype is None else out.to(dtype)
