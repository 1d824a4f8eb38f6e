"""ndpe: positional encodings for transformers on data with 1, 2 or 3 positional axes.

>>> import ndpe, torch
>>> pe = ndpe.make(dims=2, kind="rope", dim=384, heads=6)
>>> pos = pe((14, 14), num_prefix=1)          # once per forward
>>> q = k = torch.randn(8, 6, 1 + 196, 64)
>>> q, k = ndpe.apply_qk(q, k, pos)           # inside attention
"""
from . import kinds as _kinds  # noqa: F401  (registers every kind)
from .attention import Attention, KVCache, attend, causal_mask
from .base import Encoding, bias_budget, set_bias_budget
from .combine import Combine
from .contract import LogitsTerm, PosOut, TokenTerm, apply_tokens, attn_bias, merge
from .coords import grid_coords
from .functional import apply_out, apply_qk, apply_v
from .hf import from_hf_rope, hf_cos_sin  # Hugging Face glue (docs/integrations.md)
from .kinds.coord import AddCoords
from .memory import memory_budget, set_memory_budget
from .mrope import mrope_positions
from .packing import pack, stack
from .per_axis import PerAxis
from .registry import available, make, options, register
from .scaling_config import RopeScaling

__all__ = [
    "AddCoords", "Attention", "Combine", "KVCache", "LogitsTerm", "TokenTerm", "Encoding", "PerAxis", "PosOut", "RopeScaling", "apply_out", "apply_qk", "apply_tokens", "apply_v", "attend", "attn_bias", "available",
    "bias_budget", "causal_mask", "from_hf_rope", "hf_cos_sin", "grid_coords", "make", "memory_budget", "merge", "mrope_positions", "pack", "options", "register",
    "set_bias_budget", "set_memory_budget", "stack",
]
__version__ = "0.1.0"
