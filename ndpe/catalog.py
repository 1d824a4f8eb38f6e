"""What others show of each registered kind, read from its class: colour and marker, how it acts, its README row.

A kind file declares ``description``, ``colour`` and ``marker`` (class attributes of :class:`ndpe.Encoding`);
a kind that declares no colour or marker gets one derived from its name, apart from the declared ones (so a new
kind never looks like ``none`` or ``rope``). How a kind acts is read off its output, so it cannot go stale.
Figures (``ndpe.viz``, the benchmark's plots) and ``ndpe kinds --markdown`` (the README's table) read this module.

>>> colour("rope"), marker("rope"), acts_by("alibi")
('#d62728', 'o', 'bias')
"""
from __future__ import annotations

import colorsys
import math
import zlib
from collections.abc import Iterator, Mapping

import torch

from .contract import PosOut
from .fields import specs
from .registry import available, kind_class, make

# markers a kind without its own gets ("o", none's and rope's, is never derived)
MARKERS = ("s", "D", "^", "v", "<", ">", "P", "X", "h", "H", "*", "p", "d", "8")
_GOLDEN = (math.sqrt(5) - 1) / 2  # hue step between candidate colours
_APART = 0.2  # RGB distance (channels in [0, 1]) a derived colour keeps from every declared one
# how a kind acts, from the fields of its output (each field declares it: ndpe.fields.Field.acts)
ACTS = {name: spec.acts for name, spec, _ in specs(PosOut) if spec.acts}
_ORDER = ("—", "add", "concat", "rotate q, k", "rotate q, k apart", "bias", "bias after softmax", "logits from q, k",
          "transforms tokens")


def colour(kind: str) -> str:
    """``"#rrggbb"`` of ``kind``'s curves: its declared ``colour``, else one derived from its name alone among
    hues at least ``_APART`` from every declared colour (the same in every process)."""
    declared = kind_class(kind).colour
    if declared is not None:
        return declared
    taken = [_rgb(c) for c in (kind_class(k).colour for k in available()) if c is not None]
    hue = zlib.crc32(kind.encode()) / 2 ** 32
    candidates = [colorsys.hsv_to_rgb((hue + i * _GOLDEN) % 1.0, 0.75, 0.85) for i in range(32)]
    apart = [min((math.dist(c, t) for t in taken), default=1.0) for c in candidates]
    best = next((c for c, d in zip(candidates, apart) if d >= _APART), candidates[apart.index(max(apart))])
    return "#" + "".join(f"{round(255 * c):02x}" for c in best)


def marker(kind: str) -> str:
    """``kind``'s matplotlib marker: its declared ``marker``, else one of :data:`MARKERS` picked by its name."""
    declared = kind_class(kind).marker
    return declared if declared is not None else MARKERS[zlib.crc32(kind.encode()) % len(MARKERS)]


def _rgb(hex_colour: str) -> tuple[float, float, float]:
    if len(hex_colour) != 7 or hex_colour[0] != "#":
        raise ValueError(f"a kind's colour is '#rrggbb', got {hex_colour!r}")
    r, g, b = (int(hex_colour[i:i + 2], 16) / 255 for i in (1, 3, 5))
    return r, g, b


class _Colours(Mapping[str, str]):
    """Every registered kind -> :func:`colour`, read from the registry at each lookup (kinds added later too)."""

    def __getitem__(self, kind: str) -> str:
        if kind not in available():
            raise KeyError(kind)
        return colour(kind)

    def __iter__(self) -> Iterator[str]:
        return iter(available())

    def __len__(self) -> int:
        return len(available())


COLOURS: Mapping[str, str] = _Colours()


def description(kind: str) -> str:
    """One line saying what ``kind`` is: its declared ``description``, else its docstring's first line."""
    cls = kind_class(kind)
    return cls.description or (cls.__doc__ or "").strip().split("\n")[0]


def acts_by(kind: str) -> str:
    """How ``kind`` acts (:data:`ACTS`; ``"—"`` for no output), read off a small example's output."""
    dims = available()[kind][0]
    pe = make(dims=dims, kind=kind, dim=48, heads=2, **kind_class(kind).example_options(dims))
    with torch.no_grad():
        out = pe((4,) * dims)
    acts = [spec.acts for name, spec, _ in specs(type(out)) if spec.acts and getattr(out, name) is not None]
    if "rotate q, k apart" in acts:
        acts.remove("rotate q, k")
    return " + ".join(acts) or "—"


def markdown_table() -> str:
    """The kinds table of docs/reference.md: one row per registered kind (grouped by how it acts), from the kinds' classes.
    A kind's options are left to ``ndpe options KIND`` (:func:`ndpe.options`): rope alone has more than 25."""
    lines = ["| kind | dims | acts by | what it is |", "|---|---|---|---|"]
    rows = sorted((_ORDER.index(a) if a in _ORDER else len(_ORDER), a, k) for k in available() for a in [acts_by(k)])
    for _, acts, kind in rows:
        dims = " ".join(map(str, available()[kind])) + (" (causal)" if kind_class(kind).causal_only else "")
        lines.append(f"| `{kind}` | {dims} | {acts} | {description(kind)} |")
    return "\n".join(lines)
