"""The memory budget: what ndpe sizes from a number the caller passes is estimated from shapes and refused over it.

Before allocating, every kind estimates the bytes of each tensor whose size comes from an option, a grid shape or
``past=`` rather than from a tensor the caller already holds, and refuses one over the budget with a
:class:`MemoryError` of one line: the size in GiB, what it is, and the way out (a smaller option, the flex path,
or a larger budget). Nothing is allocated before the check. What it covers:

- parameter tables and buffers, when the encoding is built: ``learned``'s table (``grid_shape x dim``), the
  ``relative`` table (``max_distance`` / ``num_buckets`` x heads), ``cope``'s ``(max_pos, head_dim)`` table and
  talking-heads matrix, ``transformer-xl``'s ``W_R`` ``(dim, dim)``, the MLPs of ``fire`` and ``cpb``, ``complex``'s
  token frequencies and every kind's per-channel buffers (``dim``);
- coordinates built from a grid shape (``pe(grid_shape)``, ``pe.coords``, :func:`ndpe.grid_coords`) and the key
  coordinates of KV-cache decoding (``pe((n,), past=p)``: ``p + n`` keys, for kinds that pair queries with keys;
  the others build the ``n`` new positions only);
- pairwise terms: a materialized bias (``alibi``, ``relative``, ``fire``, ``cpb``, from the words per pair each
  declares, :meth:`ndpe.Encoding.pair_words`), the pairwise index and masks that ``transformer-xl`` and ``cope``
  build at encode time, and their logits term per attention call (per sample of the batch, as a bias shared by the
  batch: the batch is the caller's, like its activations), ``cpb``'s MLP over distinct offsets, the random keys of
  ``RandomPositions`` (``max_len``).

Not counted: per-token fields (``add``, ``rot``, ...) and tensors the size of the caller's own inputs, which grow
linearly with the tokens as the model's activations do.

One budget for all of these, default 1 GiB: a single positional table or pairwise tensor beyond it is far past
any published model (GPT-2's position table is 6.5 MB), so one number is enough, and raising it raises them all.
``set_memory_budget(None)`` turns every check off. :func:`set_bias_budget` and :func:`bias_budget` are the same
budget under its older name (it once covered the materialized bias alone). Checks are skipped under
``torch.compile``, which traces shapes symbolically.

>>> import ndpe
>>> previous = ndpe.set_memory_budget(2 ** 20)            # 1 MiB
>>> try:
...     ndpe.grid_coords((1000, 1000))
... except MemoryError as err:
...     print(str(err).split("; ")[0])
coordinates of grid (1000, 1000) (1000000 tokens x 2 float32): ~0.0149 GiB, over the 0.000977 GiB budget
>>> ndpe.set_memory_budget(previous) == 2 ** 20
True
"""
from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Mapping, Sequence

import torch

from .checks import check_int

DEFAULT_BUDGET = 1 << 30  # bytes
_BUDGET: list[int | None] = [DEFAULT_BUDGET]


def set_memory_budget(nbytes: int | None, *, _name: str = "memory budget (bytes)") -> int | None:
    """Set the memory budget in bytes (None: no limit) and return the previous one; see the module docstring."""
    if nbytes is not None:
        check_int(nbytes, _name, low=1)
    previous = _BUDGET[0]
    _BUDGET[0] = nbytes
    return previous


def memory_budget() -> int | None:
    """The current memory budget in bytes (None: unlimited)."""
    return _BUDGET[0]


def set_bias_budget(nbytes: int | None) -> int | None:
    """The older name of :func:`set_memory_budget` (the same budget): set it in bytes, return the previous one.

    It bounds a materialized attention bias (a grid whose estimated peak exceeds it is refused before anything is
    allocated; :mod:`ndpe.flex` never builds the bias, docs/bias.md) and everything else the module docstring lists.
    """
    return set_memory_budget(nbytes, _name="bias budget (bytes)")


def bias_budget() -> int | None:
    """The older name of :func:`memory_budget`: the current budget in bytes (None: unlimited)."""
    return memory_budget()


def gib(nbytes: int | float) -> str:
    """Bytes as GiB for a message: two decimals from 1 GiB, three significant digits below.

    >>> gib(3 << 30), gib(16 << 20), gib(1000)
    ('3.00', '0.0156', '9.31e-07')
    """
    g = nbytes / 2 ** 30
    return f"{g:.2f}" if g >= 1 else f"{g:.3g}"


def floats(shape: Iterable[int]) -> str:
    """A shape as ``AxBxC`` for a message.

    >>> floats((3, 4))
    '3x4'
    """
    return "x".join(str(int(n)) for n in shape)


def check_memory(nbytes: int, what: str | Callable[[], str], way_out: str, detail: str = "") -> None:
    """Refuse ``what``, estimated at ``nbytes``, over the budget: a one-line :class:`MemoryError` with the size, what
    it is, ``way_out`` (the smaller option or other path) and how to raise the budget. Call it before allocating.
    ``what`` may be a function returning the text, so that checks on every forward pass format nothing unless
    they refuse."""
    budget = _BUDGET[0]
    if budget is None or torch.compiler.is_compiling() or nbytes <= budget:
        return
    what = what() if callable(what) else what
    raise MemoryError(f"{what}: ~{gib(nbytes)} GiB{' ' + detail if detail else ''}, over the {gib(budget)} GiB "
                      f"budget; {way_out}, or raise the budget with ndpe.set_memory_budget(bytes) (None: no limit)")


def check_tables(kind: str, tables: Mapping[str, Sequence[int]], way_out: str) -> None:
    """Refuse float32 parameter tables ``{name: shape}`` of a kind over the budget, before they are allocated."""
    nbytes = 4 * sum(math.prod(shape) for shape in tables.values())
    what = " + ".join(f"{name} {floats(shape)}" for name, shape in tables.items())
    check_memory(nbytes, f"{kind} {what} floats", way_out)


def coords_bytes(grid_shape: Iterable[int]) -> int:
    """Peak bytes of :func:`ndpe.grid_coords` of a grid: an ``arange`` per axis, then the ``(N, dims)`` float32
    coordinates and the stacked copy they are rearranged from."""
    shape = tuple(grid_shape)
    return 4 * (sum(shape) + 2 * math.prod(shape) * len(shape))


def check_bias_size(pe: Any, batch: int | None, num_queries: int, grid_shape: Sequence[int] | None,
                    num_prefix: int, num_keys: int | None = None) -> None:
    """Refuse the bias of the encoding ``pe`` (an :class:`ndpe.Encoding`, which imports this module) over the budget from its shape, before it is built: ``batch`` positions
    (None: unbatched) of ``num_queries`` tokens; ``num_keys``: decoding (the queries are the new tokens). Its size is
    the kind's :meth:`~ndpe.Encoding.bias_bytes`; a kind that builds no bias passes."""
    if torch.compiler.is_compiling():
        return
    need = pe.bias_bytes(batch or 1, num_queries, num_prefix, num_keys)
    if need is None:
        return
    check_memory(need, lambda: _bias_text(pe, batch, num_queries, grid_shape, num_prefix, num_keys),
                 "use ndpe.flex.attention / ndpe.flex.score_mod, which never builds it (docs/bias.md)",
                 detail="with intermediates")


def _bias_text(pe: Any, batch: int | None, num_queries: int, grid_shape: Sequence[int] | None,
               num_prefix: int, num_keys: int | None) -> str:
    """What a refused bias is, for the message of :func:`check_bias_size`."""
    rows = num_queries + (num_prefix if num_keys is None else 0)
    cols = (num_queries if num_keys is None else num_keys) + num_prefix
    where = f"grid {tuple(grid_shape)}" if grid_shape is not None else f"{num_queries} positions"
    shape = (pe.heads, rows, cols) if batch is None else (batch, pe.heads, rows, cols)
    return f"{pe.kind} bias for {where} (+{num_prefix} prefix) is a {shape} float32 tensor"
