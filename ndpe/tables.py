"""Tables of named formulas whose keyword-only parameters are their options.

RoPE's frequency schemes (:data:`ndpe.frequencies.FREQUENCIES`) and scaling types (:data:`ndpe.scaling.SCALINGS`)
are such tables, as Hugging Face keeps ``ROPE_INIT_FUNCTIONS``: one function per entry. An entry's options are
declared once, by its function's signature (``*, beta_fast=32.0``; no default: required), and everything else
derives from it: validation (:meth:`Table.resolve`), the owners named in errors, and the keyword options of the
encodings that take them (a kind's ``option_tables``: :func:`options_of`, read by ``ndpe.options``, ``repr`` and
:func:`check_known`). Adding an entry is registering one function.

>>> from ndpe.scaling import SCALINGS
>>> SCALINGS["llama3"].options
{'low_freq_factor': 1.0, 'high_freq_factor': 4.0}
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable, Generic, Iterator, TypeVar

REQUIRED = inspect.Parameter.empty  # the default of an option that has none
_NOT_OPTIONS = ("device", "dtype")  # keyword-only parameters of a formula that are not options


@dataclass(frozen=True)
class Formula:
    """One table entry: ``fn``, whose keyword-only parameters (but ``device``) are its options, and ``check``,
    which validates the options once they are all filled (and may normalize them: returns them)."""

    name: str
    fn: Callable[..., Any]
    check: Callable[[dict[str, Any]], dict[str, Any]] | None = None

    @cached_property
    def options(self) -> dict[str, Any]:
        """Option name -> default (:data:`REQUIRED` where it has none), in signature order."""
        params = inspect.signature(self.fn).parameters.values()
        return {p.name: p.default for p in params if p.kind is p.KEYWORD_ONLY and p.name not in _NOT_OPTIONS}


E = TypeVar("E", bound=Formula)


class Table(Generic[E]):
    """Entries by name; ``what`` is the option that picks one (``"scaling"``, ``"freqs"``) and ``entries`` what they
    are (``"frequency schemes"``), both used in errors."""

    def __init__(self, what: str, entries: str = "entries"):
        self.what, self.entries = what, entries
        self._entries: dict[str, E] = {}
        self._defaults: dict[str, Any] = {}  # every entry's options (None where required), kept with the entries

    def register(self, entry: E) -> E:
        """Add ``entry``; a name registers once, and an option shared with another entry keeps one default."""
        if entry.name in self._entries:
            raise ValueError(f"{self.what}={entry.name!r} is already registered")
        known = self.defaults()
        for name, default in entry.options.items():
            default = None if default is REQUIRED else default
            if name in known and not equal(known[name], default):
                raise ValueError(f"option {name!r} of {self.what}={entry.name!r} defaults to {default!r}, but other "
                                 f"entries default it to {known[name]!r}: one option, one default")
        self._entries[entry.name] = entry
        self._changed()
        return entry

    def unregister(self, name: str) -> E:
        """Remove the entry ``name`` and return it (an entry defined for a while: tests, examples)."""
        entry = self[name]
        del self._entries[name]
        self._changed()
        return entry

    def _changed(self) -> None:
        self._defaults = {}
        for entry in self._entries.values():
            for name, default in entry.options.items():
                self._defaults.setdefault(name, None if default is REQUIRED else default)

    def __getitem__(self, name: str) -> E:
        if not isinstance(name, str) or name not in self._entries:
            raise ValueError(f"{self.what} must be None or one of {tuple(self._entries)}, got {name!r}")
        return self._entries[name]

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def defaults(self) -> dict[str, Any]:
        """Every entry's options with their defaults (None for a required one), in registration order."""
        return dict(self._defaults)

    def owners(self, option: str) -> tuple[str, ...]:
        """The entries that declare ``option``."""
        return tuple(n for n, e in self._entries.items() if option in e.options)

    def given(self, options: dict[str, Any]) -> dict[str, Any]:
        """The options set away from their defaults; a name no entry declares raises (one line, the valid ones)."""
        defaults = self.defaults()
        unknown = sorted(set(options) - set(defaults))
        if unknown:
            raise TypeError(f"unknown {self.what} option(s) {unknown}; valid options: {sorted(defaults)}")
        return {n: v for n, v in options.items() if not equal(v, defaults[n])}

    def refuse(self, option: str, name: str | None) -> ValueError:
        """The error for ``option`` set with ``what=name``, which does not read it."""
        owners = " or ".join(map(repr, self.owners(option)))
        return ValueError(f"{option} is used by {self.what}={owners} only, not by {self.what}={name!r}")

    def pick(self, name: str | None, options: dict[str, Any], default: str) -> str:
        """``name``, or else the one entry whose options ``options`` sets away from their defaults, else ``default``;
        options of two entries refuse in one line."""
        if name is not None:
            return name
        given = self.given(options)
        owners = list(dict.fromkeys(o for n in given for o in self.owners(n)))
        if len(owners) > 1:
            raise ValueError(f"{', '.join(given)} set options of {len(owners)} {self.entries} "
                             f"({', '.join(map(repr, owners))}): pass one of them, or {self.what}= to pick it")
        return owners[0] if owners else default

    def resolve(self, name: str, options: dict[str, Any]) -> dict[str, Any]:
        """Entry ``name``'s options, every one, from ``options``: another entry's option set away from its default
        raises, as does a required one left out; then the entry's ``check``."""
        entry = self[name]
        for option in self.given(options):
            if option not in entry.options:
                raise self.refuse(option, name)
        out = {n: options.get(n, default) for n, default in entry.options.items()}
        missing = [n for n, v in out.items() if v is REQUIRED or (v is None and entry.options[n] is REQUIRED)]
        if missing:
            raise ValueError(f"{self.what}={name!r} needs {' and '.join(missing)}=")
        return entry.check(out) if entry.check is not None else out


def options_of(*tables: Table) -> dict[str, Any]:
    """Every option the entries of ``tables`` declare, with its default (None for a required one), in table and
    registration order: what a kind taking those tables' options as keywords (its ``option_tables``) accepts."""
    out: dict[str, Any] = {}
    for table in tables:
        for name, default in table.defaults().items():
            out.setdefault(name, default)
    return out


def check_known(owner: str, options: dict[str, Any], known: dict[str, Any]) -> None:
    """Refuse (``TypeError``, one line naming the valid ones) a keyword in ``options`` that is not in ``known`` (a
    kind's options, :meth:`ndpe.Encoding.option_defaults`); ``owner`` names what was called."""
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise TypeError(f"{owner} got unknown option(s) {unknown}; valid options: {sorted(known)}")


def equal(a: Any, b: Any) -> bool:
    """``a == b`` as a bool, False where the comparison fails or is ambiguous (tensors, arrays)."""
    try:
        return bool(a == b)
    except (TypeError, ValueError, RuntimeError):
        return False
