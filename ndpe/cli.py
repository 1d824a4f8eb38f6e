"""The ``ndpe`` command (also ``python -m ndpe``).

    ndpe kinds                      the registered kinds and the positional dims each supports
    ndpe options KIND               a kind's keyword options and their defaults
    ndpe viz --kind rope --grid 8 8 teaching figures (``ndpe viz --help``; needs ``pip install "ndpe[viz]"``)
    ndpe bench [ARGS...]            ``python -m train.bench ARGS...`` (from a source checkout)

Exit status 0 on success; on an error, one line ``ndpe ...: error: ...`` on stderr and a non-zero
status (2 for bad arguments, 1 otherwise), never a traceback. ``ndpe-viz`` is the older name of
``ndpe viz``.

>>> main(["options", "learned"])  # doctest: +NORMALIZE_WHITESPACE
learned (dims 1, 2, 3): ndpe.make(dims=..., kind='learned', dim=..., heads=1, <options>)
  grid_shape: tuple[int, ...]  (required)
  factorized: bool = False
  combine: str = 'add'
  resize: str | None = None
  init_std: float = 0.02
0
"""
from __future__ import annotations

import argparse
import inspect
import subprocess
import sys
from pathlib import Path

__all__ = ["main", "viz_alias"]

PROG = "ndpe"
_PASSTHROUGH = ("viz", "bench")  # subcommands whose arguments go, untouched, to another parser


def _fail(prog: str, message: str, status: int = 1) -> int:
    print(f"{prog}: error: {message}", file=sys.stderr)
    return status


def _parser() -> argparse.ArgumentParser:
    from . import __version__
    from .viz import OneLineParser

    parser = OneLineParser(prog=PROG, description="Positional encodings for transformers on 1D, 2D and 3D data.",
                           epilog='Run "ndpe COMMAND --help" for the options of viz and bench.')
    parser.add_argument("--version", action="version", version=f"ndpe {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=OneLineParser)
    commands.add_parser("kinds", help="list the encoding kinds with the positional dims each supports")
    options = commands.add_parser("options", help="a kind's keyword options and their defaults")
    options.add_argument("kind", metavar="KIND", help="a name from `ndpe kinds`")
    commands.add_parser("viz", help="draw teaching figures of an encoding (needs the viz extra)", add_help=False)
    commands.add_parser("bench", help="run the benchmark, python -m train.bench (from a checkout)", add_help=False)
    return parser


def _kinds() -> int:
    from .registry import available

    kinds = available()
    width = max(map(len, kinds))
    for kind, dims in kinds.items():
        print(f"{kind:<{width}}  dims {', '.join(map(str, dims))}")
    return 0


def _options(kind: str) -> int:
    from .registry import _lookup, available, options

    try:
        cls = _lookup(kind)
    except ValueError as err:
        return _fail(f"{PROG} options", str(err), 2)
    params = inspect.signature(cls.__init__).parameters
    print(f"{kind} (dims {', '.join(map(str, available()[kind]))}): "
          f"ndpe.make(dims=..., kind={kind!r}, dim=..., heads=1, <options>)")
    for name, default in options(kind).items():
        note = params[name].annotation
        typed = f"{name}: {note}" if isinstance(note, str) else name
        print(f"  {typed}  (required)" if default is inspect.Parameter.empty else f"  {typed} = {default!r}")
    return 0


def _viz(argv: list[str], prog: str) -> int:
    from . import viz

    try:
        viz.main(argv, prog=prog)
    except viz.MissingDependencyError as err:
        return _fail(prog, str(err))
    except (ValueError, MemoryError, OSError) as err:  # the encoding refuses the grid, --out is not writable...
        return _fail(prog, str(err).splitlines()[0] if str(err) else type(err).__name__)
    return 0


def _bench(argv: list[str]) -> int:
    """``python -m train.bench`` with ``argv``, in this directory (it must be a source checkout)."""
    if not (Path.cwd() / "train" / "bench.py").is_file():
        return _fail(f"{PROG} bench", f"train/ is not importable from {Path.cwd()}: the benchmark runs from a source "
                                      "checkout of ndpe (cd to its root); an installed wheel ships only the library")
    return subprocess.call([sys.executable, "-m", "train.bench", *argv])


def main(argv: list[str] | None = None) -> int:
    """Run the ``ndpe`` command with ``argv`` (default ``sys.argv[1:]``); return the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        if args and args[0] == "viz":
            return _viz(args[1:], f"{PROG} viz")
        if args and args[0] == "bench":
            return _bench(args[1:])
        parsed = _parser().parse_args(args)
        if parsed.command == "kinds":
            return _kinds()
        if parsed.command == "options":
            return _options(parsed.kind)
        raise AssertionError(parsed.command)  # every command is dispatched above
    except KeyboardInterrupt:
        return _fail(PROG, "interrupted", 130)
    except BrokenPipeError:  # `ndpe kinds | head -1`
        return 1


def viz_alias(argv: list[str] | None = None, prog: str = "ndpe-viz") -> int:
    """The ``ndpe-viz`` command: ``ndpe viz`` under its older name."""
    try:
        return _viz(list(sys.argv[1:] if argv is None else argv), prog)
    except KeyboardInterrupt:
        return _fail(prog, "interrupted", 130)
