"""The registry of encoding kinds: ``@register`` fills it, ``make`` builds from it.

>>> import ndpe
>>> pe = ndpe.make(dims=2, kind="rope", dim=384, heads=6)
>>> sorted(ndpe.available())[:2]
['abacus', 'alibi']
"""
from __future__ import annotations

import inspect
from typing import Any, Callable, TypeVar

from .base import Encoding
from .checks import check_dims

_KINDS: dict[str, type[Encoding]] = {}
_BASE_ARGS = ("dims", "dim", "heads")
_SHAPE_HINT = {1: "(length,)", 2: "(rows, cols)", 3: "(frames, rows, cols)"}
_E = TypeVar("_E", bound=type[Encoding])


def register(name: str, *, dims: tuple[int, ...] = (1, 2, 3)) -> Callable[[_E], _E]:
    """Class decorator adding an encoding kind under ``name`` for the given ``dims``.

    A name can be registered once; a second registration raises ``ValueError``.
    """
    bad = [d for d in dims if d not in (1, 2, 3)]
    if bad or not dims:
        raise ValueError(f"register({name!r}): dims must be a non-empty subset of (1, 2, 3), got {dims}")

    def wrap(cls: _E) -> _E:
        if name in _KINDS:
            raise ValueError(f"kind {name!r} is already registered by {_KINDS[name].__module__}.{_KINDS[name].__name__}")
        _KINDS[name] = cls
        cls.kind = name
        cls.supported_dims = tuple(dims)
        return cls

    return wrap


def unregister(name: str) -> type[Encoding]:
    """Remove the kind registered as ``name`` and return its class (a kind defined for a while: tests, examples)."""
    cls = lookup(name)
    del _KINDS[name]
    return cls


def available() -> dict[str, tuple[int, ...]]:
    """All registered kinds, each with the positional dims (1, 2, 3) it supports."""
    return {name: cls.supported_dims for name, cls in sorted(_KINDS.items())}


def options(kind: str) -> dict[str, object]:
    """The keyword options of ``kind`` with their defaults (``inspect.Parameter.empty`` when required)."""
    return {n: d for n, d in lookup(kind).option_defaults().items() if n not in _BASE_ARGS}


def kind_class(kind: str) -> type[Encoding]:
    """The class registered as ``kind``: its class attributes say what others need (``example_options``,
    ``task_options``, ``colour``, ...; docs/guide.md)."""
    return lookup(kind)


def lookup(kind: str) -> type[Encoding]:
    if not isinstance(kind, str) or kind not in _KINDS:
        raise ValueError(f"unknown kind {kind!r}; expected one of {sorted(_KINDS)}")
    return _KINDS[kind]


def make(*, dims: int, kind: str, dim: int, heads: int = 1, augment: Any = None, **opts: Any) -> Encoding:
    """Build an encoding of ``kind`` for ``dims`` positional axes.

    Args:
        dims: number of positional axes: 1 (text), 2 (images, spectrograms), 3 (video).
        kind: a name from ``ndpe.available()``.
        dim: model (token) width; per-head width is ``dim // heads``.
        heads: attention heads (rotary and bias kinds use it).
        augment: optional position augmentation (``"cape"``, ``"random"`` or a module),
            applied to coordinates in training mode only.
        **opts: the kind's own keyword options (``ndpe.registry.options(kind)`` lists them).

    >>> pe = make(dims=2, kind="sinusoidal", dim=64)
    >>> pe((4, 6)).add.shape
    torch.Size([24, 64])
    """
    cls = lookup(kind)
    check_dims(dims, kind, cls.supported_dims)
    valid = options(kind)
    unknown = sorted(set(opts) - set(valid))
    if unknown:
        raise TypeError(f"unknown option(s) {unknown} for kind {kind!r}; valid options: {sorted(valid)}")
    missing = [n for n, p in inspect.signature(cls.__init__).parameters.items()
               if n in valid and n not in opts and p.default is inspect.Parameter.empty
               and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    if missing:
        raise TypeError(_missing_message(kind, dims, dim, missing))
    pe = cls(dims=dims, dim=dim, heads=heads, **opts)
    if augment is not None:
        from .augment import make_augment

        pe.set_augment(make_augment(augment, dims=dims))
    return pe


def _missing_message(kind: str, dims: int, dim: int, missing: list[str]) -> str:
    """One line naming the required options of ``kind`` that were not passed, with an example."""
    if missing == ["grid_shape"]:
        example = {1: "(64,)", 2: "(14, 14)", 3: "(8, 14, 14)"}.get(dims, "(...)")
        return (f"{kind} needs grid_shape={_SHAPE_HINT.get(dims, '(n_0, n_1, ...)')}, the table's size per axis: "
                f"e.g. ndpe.make(dims={dims}, kind={kind!r}, dim={dim}, grid_shape={example})")
    return f"{kind} needs the option(s) {', '.join(missing)}; ndpe.options({kind!r}) lists them with their defaults"
