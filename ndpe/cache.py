"""``TensorCache``: the one cache of ndpe, for values built from tensors (whole outputs, parameter-free parts)."""
from __future__ import annotations

from collections import OrderedDict
from typing import Any

from torch import Tensor

_CACHE_SIZE = 16


class TensorCache:
    """The one cache of ndpe: a small LRU of values built from tensors, keyed by grid, device and dtype.

    An entry holds its value and the tensors a caller could change in place; ``get`` drops the entry
    when any of them changed (their version counters moved), so a cached output never serves a
    caller's edit (``attn_bias(pos) += 5``). Kinds use it for whole outputs (the base class, for
    parameter-free kinds) or for parameter-free parts of them (``relative``'s index).
    """

    def __init__(self, size: int = _CACHE_SIZE):
        self.size = size
        self._entries: OrderedDict[Any, tuple[Any, tuple[Tensor, ...], tuple[int, ...]]] = OrderedDict()

    def get(self, key: Any) -> Any:
        hit = self._entries.get(key)
        if hit is None:
            return None
        value, tensors, versions = hit
        if any(t._version != v for t, v in zip(tensors, versions)):
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return value

    def put(self, key: Any, value: Any, tensors: tuple[Tensor, ...]) -> None:
        self._entries[key] = (value, tensors, tuple(t._version for t in tensors))
        if len(self._entries) > self.size:
            self._entries.popitem(last=False)

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)
