"""The registry of encoding kinds: ``@register`` fills it, ``make`` builds from it.

>>> import ndpe
>>> pe = ndpe.make(dims=2, kind="rope", dim=384, heads=6)
>>> sorted(ndpe.available())[:3]
['alibi', 'coord', 'fourier']
"""
from __future__ import annotations

import inspect
from typing import Callable

from torch import nn

from .checks import check_dims

_KINDS: dict[str, type[nn.Module]] = {}
_DIMS: dict[str, tuple[int, ...]] = {}
_BASE_ARGS = ("dims", "dim", "heads")


def register(name: str, *, dims: tuple[int, ...] = (1, 2, 3)) -> Callable[[type], type]:
    """Class decorator adding an encoding kind under ``name`` for the given ``dims``.

    A name can be registered once; a second registration raises ``ValueError``.
    """
    bad = [d for d in dims if d not in (1, 2, 3)]
    if bad or not dims:
        raise ValueError(f"register({name!r}): dims must be a non-empty subset of (1, 2, 3), got {dims}")

    def wrap(cls: type) -> type:
        if name in _KINDS:
            raise ValueError(f"kind {name!r} is already registered by {_KINDS[name].__module__}.{_KINDS[name].__name__}")
        _KINDS[name] = cls
        _DIMS[name] = tuple(dims)
        cls.kind = name
        cls.supported_dims = tuple(dims)
        return cls

    return wrap


def available() -> dict[str, tuple[int, ...]]:
    """All registered kinds, each with the positional dims (1, 2, 3) it supports."""
    return dict(sorted(_DIMS.items()))


def options(kind: str) -> dict[str, object]:
    """The keyword options of ``kind`` with their defaults (``inspect.Parameter.empty`` when required)."""
    cls = _lookup(kind)
    params = inspect.signature(cls.__init__).parameters
    return {n: p.default for n, p in params.items() if n != "self" and n not in _BASE_ARGS}


def _lookup(kind: str) -> type[nn.Module]:
    if not isinstance(kind, str) or kind not in _KINDS:
        raise ValueError(f"unknown kind {kind!r}; expected one of {sorted(_KINDS)}")
    return _KINDS[kind]


def make(*, dims: int, kind: str, dim: int, heads: int = 1, augment=None, **opts) -> nn.Module:
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
    cls = _lookup(kind)
    check_dims(dims, kind, _DIMS[kind])
    valid = options(kind)
    unknown = sorted(set(opts) - set(valid))
    if unknown:
        raise TypeError(f"unknown option(s) {unknown} for kind {kind!r}; valid options: {sorted(valid)}")
    pe = cls(dims=dims, dim=dim, heads=heads, **opts)
    if augment is not None:
        from .augment import make_augment

        pe.set_augment(make_augment(augment, dims=dims))
    return pe
