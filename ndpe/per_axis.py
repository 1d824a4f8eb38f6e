"""``PerAxis``: each positional axis its own kind and share of channels, merged into one :class:`~ndpe.PosOut`.

A spectrogram's time wants a relative encoding that continues, its frequency bins an absolute one
(docs/guide.md, Q5); a video's frames may take sinusoids while its rows and columns rotate. ``PerAxis`` takes the
axes by name, in grid (``ij``) order, each with its kind:

>>> import ndpe
>>> pe = ndpe.PerAxis({"time": "rope", "freq": {"kind": "learned", "size": 8}}, dim=64, heads=2)
>>> pos = pe((16, 8), num_prefix=1)            # (time, freq): 16 frames x 8 mel bins, a cls token
>>> pos.rot[0].shape, pos.add.shape            # time rotates every channel of each head; one vector per bin
(torch.Size([1, 129, 16]), torch.Size([129, 64]))
>>> pe((8, 16))                                # doctest: +ELLIPSIS
Traceback (most recent call last):
ValueError: axis 'freq' has 16 positions but is built for size=8: the grid (time, freq) is (8, 16), as if given ...

An axis is a kind name or a dict ``{"kind": ..., "channels": ..., "size": ..., **the kind's options}``:

- ``kind``: a name from :func:`ndpe.available`. It encodes its axis alone, as a 1D encoding of that axis's grid
  (its coordinates, its length: a table resizes to it, a scaling reads it). The axes whose kind rotates q and k
  are one encoding of that kind over those axes, since q and k rotate once: they share the kind and its options.
  Content-dependent kinds (a logits or tokens term: CoPE, LieRE, ...) read whole sequences and are refused.
- ``channels``: what the axis takes where it acts. Rotating axes: rotary channels of each head (rope's
  ``axis_dims``; default: the kind's split of ``head_dim`` among them). Adding axes: channels of the token, one
  block each in axis order (``[first | second | ...]``, zeros elsewhere; default: ``dim`` split evenly, all of it
  for one adding axis). Bias and concatenating kinds take none.
- ``size``: the axis's fixed length (a frequency axis: its mel bins, or patches along them). Another length there
  is refused in one line naming the layout; that is how an input in another axis order, ``(freq, time)`` for
  ``(time, freq)``, is caught where the grid is not square. A kind that needs a table size (learned's
  ``grid_shape``) takes it from ``size``.

The output equals merging the per-axis encodings by hand (``ndpe.merge`` of each one fed its axis's coordinates,
``tests/test_per_axis.py``). Explicit ``positions=`` ``(N, dims)`` give each encoding its columns, in its own units.
"""
from __future__ import annotations

import dataclasses
import inspect
import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .base import Encoding
from .catalog import acts_by
from .checks import check_float_dtype, check_heads, check_int
from .contract import PosOut, merge, pad_prefix, take_tokens
from .coords import check_grid_shape, check_positions, num_grid_tokens
from .registry import make, options

ROTATES = ("rotate q, k", "rotate q, k apart")
ADDS = "add"
WHOLE_SEQUENCE = ("logits from q, k", "transforms tokens")
_SPEC_KEYS = ("kind", "channels", "size")


@dataclass(frozen=True)
class AxisSpec:
    """One named axis of a :class:`PerAxis`: its kind, channels, fixed size and the kind's options."""

    name: str
    kind: str
    channels: int | None = None
    size: int | None = None
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    acts: str = ""  # how the kind acts (ndpe.catalog.acts_by)


def parse_axes(axes: Mapping[str, Any]) -> tuple[AxisSpec, ...]:
    """Check the ``{name: kind or dict}`` of :class:`PerAxis` (ValueError / TypeError, one line) and read it.

    >>> [(a.name, a.kind, a.options) for a in parse_axes({"time": "rope", "freq": {"kind": "learned", "size": 8}})]
    [('time', 'rope', {}), ('freq', 'learned', {'grid_shape': (8,)})]
    """
    if not isinstance(axes, Mapping) or len(axes) not in (2, 3):
        raise ValueError("PerAxis takes 2 or 3 named axes in grid order, {name: kind or {'kind': ..., 'channels': ..., "
                         f"'size': ..., options}}, e.g. {{'time': 'rope', 'freq': 'learned'}}; got {axes!r}")
    return tuple(_parse_axis(name, spec) for name, spec in axes.items())


def _parse_axis(name: Any, spec: Any) -> AxisSpec:
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"axis names are identifiers such as 'time' or 'freq', got {name!r}")
    spec = {"kind": spec} if isinstance(spec, str) else spec
    if not isinstance(spec, Mapping) or "kind" not in spec:
        raise TypeError(f"axis {name!r}: expected a kind name or a dict with 'kind' (and 'channels', 'size', the "
                        f"kind's options), got {spec!r}")
    kind, channels, size = spec["kind"], spec.get("channels"), spec.get("size")
    valid = options(kind)  # an unknown kind raises, listing the kinds
    opts = {k: v for k, v in spec.items() if k not in _SPEC_KEYS}
    unknown = sorted(set(opts) - set(valid))
    if unknown:
        raise TypeError(f"axis {name!r}: unknown option(s) {unknown} for kind {kind!r}; valid: 'channels', 'size' and "
                        f"{sorted(valid)}")
    for value, what in ((channels, "channels"), (size, "size")):
        if value is not None:
            check_int(value, f"axis {name!r} {what}", low=1)
    with torch.random.fork_rng(devices=[]):  # reading how the kind acts builds an example: keep the seed's stream
        acts = acts_by(kind)
    if acts in WHOLE_SEQUENCE:
        raise ValueError(f"axis {name!r}: kind {kind!r} ({acts}) computes its term from whole sequences, so it cannot "
                         "encode one axis; use it on the whole grid (ndpe.make)")
    if channels is not None and acts not in ROTATES and acts != ADDS:
        raise ValueError(f"axis {name!r}: kind {kind!r} acts by {acts}, so it takes no channels (they are for kinds "
                         "that rotate or add)")
    if size is not None and "grid_shape" not in opts and valid.get("grid_shape", None) is inspect.Parameter.empty:
        opts["grid_shape"] = (size,)
    return AxisSpec(name, kind, channels, size, opts, acts)


class PerAxis(nn.Module):
    """Encodings of named axes merged into one :class:`~ndpe.PosOut` (the module doc says what an axis takes).

    Call as an encoding: ``pe(grid_shape, *, positions=None, num_prefix=0, dtype=None) -> PosOut``, ``grid_shape``
    in the order of ``axes``. ``pe.encodings`` holds each axis's encoding under its name (the rotating axes under
    their names joined by ``_``), e.g. ``pe.encodings["time"] = pe.encodings["time"].replace(scaling="yarn", ...)``.

    >>> import ndpe
    >>> video = ndpe.PerAxis({"frames": "sinusoidal", "rows": "rope", "cols": "rope"}, dim=96, heads=2)
    >>> pos = video((4, 6, 6))
    >>> pos.add.shape, pos.rot[0].shape         # frames add to all 96 channels; rows, cols rotate 24 + 24
    (torch.Size([144, 96]), torch.Size([1, 144, 24]))
    """

    if TYPE_CHECKING:  # nn.Module types __call__ as returning Any
        def __call__(self, grid_shape: Sequence[int] | None = None, *, positions: Tensor | None = None,
                     num_prefix: int = 0, dtype: torch.dtype | None = None, past: int = 0) -> PosOut: ...

    def __init__(self, axes: Mapping[str, Any], *, dim: int, heads: int = 1):
        super().__init__()
        self.head_dim = check_heads(dim, heads)
        self.specs = parse_axes(axes)
        self.axis_names = tuple(a.name for a in self.specs)
        self.dims, self.dim, self.heads = len(self.specs), dim, heads
        rotating = tuple(a for a, s in enumerate(self.specs) if s.acts in ROTATES)
        widths = self._token_widths([a for a, s in enumerate(self.specs) if s.acts == ADDS])
        self.encodings = nn.ModuleDict()
        self.cat_dim = 0  # channels the concatenating axes append
        self.axes_of: dict[str, tuple[int, ...]] = {}
        self.blocks: dict[str, tuple[int, int]] = {}  # adding axes: (first channel, channels) of the token
        first = 0
        for a, spec in enumerate(self.specs):
            if a in rotating:
                if a == rotating[0]:
                    self._add("_".join(self.axis_names[r] for r in rotating), rotating, self._rotary(rotating))
                continue
            width = widths.get(a)
            self._add(spec.name, (a,), make(dims=1, kind=spec.kind, dim=width or dim, heads=1 if width else heads,
                                            **spec.options))
            if width:
                self.blocks[spec.name] = (first, width)
                first += width
        self.kind = "+".join(f"{s.name}={s.kind}" for s in self.specs)

    def _add(self, key: str, axes: tuple[int, ...], pe: Encoding) -> None:
        self.encodings[key] = pe
        self.axes_of[key] = axes
        self.cat_dim += pe.cat_dim

    def _rotary(self, axes: tuple[int, ...]) -> Encoding:
        """One encoding over the rotating ``axes`` (q and k rotate once), each axis its rotary channels."""
        specs = [self.specs[a] for a in axes]
        named = ", ".join(f"{s.name}={s.kind}" for s in specs)
        if len({s.kind for s in specs}) > 1:
            raise ValueError(f"q and k rotate once, so the rotating axes share one kind; got {named}")
        kind, opts = specs[0].kind, dict(specs[0].options)
        if any(dict(s.options) != opts for s in specs):
            raise ValueError(f"the rotating axes ({named}) are one {kind} encoding: give them the same options, got "
                             f"{[dict(s.options) for s in specs]}")
        channels = [s.channels for s in specs]
        if any(c is not None for c in channels):
            if None in channels:
                raise ValueError(f"give channels to every rotating axis ({named}) or to none, got {channels}")
            if "axis_dims" not in options(kind):
                raise ValueError(f"kind {kind!r} has no per-axis rotary channels (axis_dims): leave channels out")
            if "axis_dims" in opts:
                raise ValueError(f"the rotating axes ({named}): give channels= or axis_dims=, not both")
            opts["axis_dims"] = tuple(channels)
        return make(dims=len(axes), kind=kind, dim=self.dim, heads=self.heads, **opts)

    def _token_widths(self, adding: list[int]) -> dict[int, int]:
        """Channels of the token each adding axis takes: its ``channels``, the rest of ``dim`` split evenly."""
        given = {a: c for a in adding if (c := self.specs[a].channels) is not None}
        rest = [a for a in adding if a not in given]
        left = self.dim - sum(given.values())
        if left < 0 or (rest and (left < len(rest) or left % len(rest))):
            named = ", ".join(f"{self.specs[a].name}={given.get(a, '?')}" for a in adding)
            raise ValueError(f"the adding axes ({named}) share the token's dim={self.dim} channels: give each its "
                             "channels, together at most dim")
        return {**given, **{a: left // len(rest) for a in rest}}

    def check_grid(self, grid_shape: Sequence[int]) -> tuple[int, ...]:
        """``grid_shape`` checked against the axes: their count, and each axis's fixed ``size``."""
        try:
            grid = check_grid_shape(grid_shape, self.dims)
        except ValueError as err:
            raise ValueError(f"{err}, {self.layout()}") from None
        for spec, n in zip(self.specs, grid):
            if spec.size is not None and n != spec.size:
                raise ValueError(f"axis {spec.name!r} has {n} positions but is built for size={spec.size}: the grid "
                                 f"{self.layout()} is {grid}{self._swap_hint(grid)}")
        return grid

    def layout(self) -> str:
        """The axis order, ``"(time, freq)"``."""
        return f"({', '.join(self.axis_names)})"

    def _swap_hint(self, grid: tuple[int, ...]) -> str:
        """Where another order of ``grid`` fits every fixed size: the rearrange that puts the input in order."""
        for order in itertools.permutations(range(self.dims)):
            if order != tuple(range(self.dims)) and all(s.size in (None, grid[o]) for s, o in zip(self.specs, order)):
                given = [""] * self.dims
                for a, o in enumerate(order):
                    given[o] = self.axis_names[a]
                return (f", as if given ({', '.join(given)}): rearrange the input, e.g. einops.rearrange(x, "
                        f"'... {' '.join(given)} -> ... {' '.join(self.axis_names)}')")
        return ""

    def forward(self, grid_shape: Sequence[int] | None = None, *, positions: Tensor | None = None,
                num_prefix: int = 0, dtype: torch.dtype | None = None, past: int = 0) -> PosOut:
        """Encode a grid (or ``positions`` ``(..., N, dims)`` in axis order): each axis by its own encoding, merged
        into one ``PosOut`` for ``num_prefix + N`` tokens; ``past`` as for an encoding (a decoder's cache length)."""
        check_int(num_prefix, "num_prefix", low=0)
        check_float_dtype(dtype)
        if past:
            raise ValueError(f"past= (KV-cache decoding) needs one token axis; this encoding has {self.layout()}")
        if grid_shape is None and positions is None:
            raise ValueError("pass grid_shape, positions, or both")
        grid = None if grid_shape is None else self.check_grid(grid_shape)
        if positions is not None:
            positions = check_positions(positions, self.dims, None if grid is None else num_grid_tokens(grid))
        outs = []
        for key, pe in self.encodings.items():
            pe, axes = cast(Encoding, pe), self.axes_of[key]
            try:
                if positions is not None:
                    out = pe(positions=positions[..., list(axes)], dtype=dtype)
                else:
                    assert grid is not None
                    index = _token_index(grid, axes, pe.device)  # (N,): each token's place in the grid of its axes
                    out = take_tokens(pe(tuple(grid[a] for a in axes), dtype=dtype), index)
            except ValueError as err:
                raise ValueError(f"axis {key!r} of the grid {self.layout()}: {err}") from err
            outs.append(self._place(key, out))
        return pad_prefix(merge(*outs), num_prefix)

    def _place(self, key: str, out: PosOut) -> PosOut:
        """An adding axis's ``add`` in its block of the token's channels (zeros elsewhere)."""
        if key not in self.blocks or out.add is None or out.add.shape[-1] == self.dim:
            return out
        first, width = self.blocks[key]
        return dataclasses.replace(out, add=F.pad(out.add, (first, self.dim - first - width)))

    def extra_repr(self) -> str:
        return f"axes={self.layout()}, dim={self.dim}, heads={self.heads}"


def _token_index(grid: tuple[int, ...], axes: tuple[int, ...], device: torch.device) -> Tensor:
    """``(N,)``: for each token of ``grid`` (row-major), its token in the grid of ``axes`` alone."""
    sub = [n if a in axes else 1 for a, n in enumerate(grid)]
    return torch.arange(math.prod(sub), device=device).reshape(sub).expand(*grid).flatten()
