"""The ``ndpe`` command (also ``python -m ndpe``).

    ndpe kinds [--markdown]         the registered kinds and the positional dims each supports (--markdown: the
                                    kinds table (docs/reference.md), generated from the kinds' classes)
    ndpe options KIND               a kind's keyword options and their defaults, and the arguments of its call
    ndpe viz --kind rope --grid 8 8 teaching figures (``ndpe viz --help``; needs ``pip install "ndpe[viz]"``)
    ndpe explore [--results RUN]    the interactive explorer, one page: --out DIR/index.html (needs the viz extra;
                                    --results: a benchmark run, its explore.json written with its report)

Exit status 0 on success; on an error, one line ``ndpe ...: error: ...`` on stderr and a non-zero
status (2 for bad arguments, 1 otherwise), never a traceback. ``ndpe-viz`` is the older name of
``ndpe viz``. Arguments are parsed here; :mod:`ndpe.viz` computes and draws.

The benchmark is no ``ndpe`` command: it is reference code (``train/``, ``models/``) run from a source checkout
as ``python -m train.bench``, like torchvision's ``references/``. The wheel ships the library alone, and a library
command that ran whatever ``train/`` lies in the current directory would pair this library with another version
of the benchmark (and tie the library to the checkout's layout).

>>> main(["options", "learned"])  # doctest: +NORMALIZE_WHITESPACE
learned (dims 1, 2, 3): ndpe.make(dims=..., kind='learned', dim=..., heads=1, <options>)
  grid_shape: tuple[int, ...]  (required)
  factorized: bool = False
  combine: str = 'add'
  resize: str | None = None
  init_std: float = 0.02
  cat_dim: int = 0
call: pe(grid_shape, *, positions=None, num_prefix=0, dtype=None, past=0)  (every kind's)
0
"""
from __future__ import annotations

import argparse
import ast
import inspect
import sys
from pathlib import Path
from typing import NoReturn

__all__ = ["OneLineParser", "main", "parse_option", "viz_alias", "viz_main", "viz_parser"]

PROG = "ndpe"


def _fail(prog: str, message: str, status: int = 1) -> int:
    print(f"{prog}: error: {message}", file=sys.stderr)
    return status


def parse_option(text: str) -> tuple[str, object]:
    """``"key=value"`` -> ``(key, value)``; the value is a Python literal if it parses as one, else a string.

    >>> parse_option("grid_shape=(8, 8)"), parse_option("resize=bicubic"), parse_option("scaling=None")
    (('grid_shape', (8, 8)), ('resize', 'bicubic'), ('scaling', None))
    """
    key, sep, value = text.partition("=")
    if not sep or not key.isidentifier():
        raise argparse.ArgumentTypeError(f"an option is KEY=VALUE with KEY a kind's keyword option "
                                         f"(e.g. theta=100.0, resize=bicubic), got {text!r}")
    try:
        return key, ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return key, value


def _size(text: str) -> int:
    """An argument that is a size (``--grid``, ``--grow``): a positive int, refused in one line otherwise.

    >>> _size("8")
    8
    """
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"a size must be a positive int, got {text!r}")
    return value


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line on stderr (exit status 2), without the usage block."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see: {self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    from . import __version__

    parser = OneLineParser(prog=PROG, description="Positional encodings for transformers on 1D, 2D and 3D data.",
                           epilog='Run "ndpe viz --help" for the options of viz. The benchmark runs from a source '
                                  'checkout: python -m train.bench --help')
    parser.add_argument("--version", action="version", version=f"ndpe {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=OneLineParser)
    kinds = commands.add_parser("kinds", help="list the encoding kinds with the positional dims each supports")
    kinds.add_argument("--markdown", action="store_true", help="print the kinds table (docs/reference.md) instead")
    options = commands.add_parser("options", help="a kind's keyword options and their defaults")
    options.add_argument("kind", metavar="KIND", help="a name from `ndpe kinds`")
    commands.add_parser("viz", help="draw teaching figures of an encoding (needs the viz extra)", add_help=False)
    explore = commands.add_parser("explore", help="write the interactive explorer, one self-contained page "
                                  "(needs the viz extra)")
    explore.add_argument("--out", type=Path, default=Path("explorer"), help="folder for index.html (default: explorer)")
    explore.add_argument("--results", type=Path, default=None, metavar="RUN",
                         help="a benchmark run's folder (runs/NAME: its results.csv and the explore.json the "
                         "benchmark writes beside it) for the benchmark tab")
    explore.add_argument("--kinds", nargs="+", default=None, metavar="KIND", help="only these kinds (default: all)")
    return parser


def _kinds(markdown: bool = False) -> int:
    from .catalog import markdown_table
    from .registry import available

    if markdown:
        print(markdown_table())
        return 0
    kinds = available()
    width = max(map(len, kinds))
    for kind, dims in kinds.items():
        print(f"{kind:<{width}}  dims {', '.join(map(str, dims))}")
    return 0


EVERY_CALL = ("grid_shape", "positions", "num_prefix", "dtype", "past")  # the arguments of every kind's call


def call_arguments(kind: str) -> dict[str, inspect.Parameter]:
    """The arguments of ``kind``'s call beyond every kind's (:data:`EVERY_CALL`), as its ``forward`` declares them
    (``gta``: ``extrinsics``; ``prope``: and ``intrinsics``); one its class refuses (``takes_<name> = False``, as
    GTA's ``takes_intrinsics``) is left out.

    >>> list(call_arguments("prope")), list(call_arguments("gta")), list(call_arguments("rope"))
    (['extrinsics', 'intrinsics'], ['extrinsics'], [])
    """
    from .registry import kind_class

    cls = kind_class(kind)
    params = inspect.signature(cls.forward).parameters
    return {n: p for n, p in params.items()
            if n != "self" and n not in EVERY_CALL and getattr(cls, f"takes_{n}", True) is not False}


def call_signature(kind: str) -> str:
    """``pe(grid_shape, *, <the kind's own>, positions=None, num_prefix=0, dtype=None, past=0)``."""
    own = [f"{n}={p.default!r}" for n, p in call_arguments(kind).items()]
    return f"pe(grid_shape, *, {', '.join(own + ['positions=None', 'num_prefix=0', 'dtype=None', 'past=0'])})"


def call_doc(kind: str) -> str:
    """What the kind's ``forward`` docstring says of its own arguments (its text, reST roles as plain names, literals
    in Markdown's single backticks), or ""."""
    import re

    from .registry import kind_class

    if not call_arguments(kind):
        return ""
    doc = inspect.getdoc(kind_class(kind).forward) or ""
    return " ".join(re.sub(r":\w+:`~?([\w.]+)`", lambda m: m[1].rsplit(".", 1)[-1], doc).replace("``", "`").split())


def _options(kind: str) -> int:
    from .registry import lookup, available, options

    try:
        cls = lookup(kind)
    except ValueError as err:
        return _fail(f"{PROG} options", str(err), 2)
    params = inspect.signature(cls.__init__).parameters
    print(f"{kind} (dims {', '.join(map(str, available()[kind]))}): "
          f"ndpe.make(dims=..., kind={kind!r}, dim=..., heads=1, <options>)")
    for name, default in options(kind).items():
        note = params[name].annotation if name in params else None  # a table's option (Encoding.option_defaults)
        typed = f"{name}: {note}" if isinstance(note, str) else name
        print(f"  {typed}  (required)" if default is inspect.Parameter.empty else f"  {typed} = {default!r}")
    own = call_arguments(kind)
    print(f"call: {call_signature(kind)}" + ("" if own else "  (every kind's)"))
    for name, param in own.items():
        print(f"  {name}: {param.annotation} = {param.default!r}")
    if own:
        print(f"  {call_doc(kind).replace('`', '')}")
    return 0


def kinds_reference() -> str:
    """Every kind's ``ndpe.make`` options and call arguments, as a Markdown table (the docs site's API page)."""
    from .registry import available, options

    rows = [f"Every kind's call: `{call_signature('none')}`; a kind's own call arguments come before `positions`.", "",
            "| kind | dims | `ndpe.make` options (default) | call arguments of its own |", "|---|---|---|---|"]
    for kind, dims in available().items():
        opts = ", ".join(f"`{n}`" + ("" if d is inspect.Parameter.empty else f" ({d!r})".replace("|", "\\|"))
                         for n, d in options(kind).items()) or "—"
        own = ", ".join(f"`{n}`" for n in call_arguments(kind))
        rows.append(f"| `{kind}` | {' '.join(map(str, dims))} | {opts} | {own + ': ' + call_doc(kind) if own else '—'} |")
    return "\n".join(rows)


# -- ndpe viz ----------------------------------------------------------------------------------
def viz_parser(prog: str = "ndpe viz") -> argparse.ArgumentParser:
    """The ``ndpe viz`` argument parser (``--kind`` choices are the registered kinds)."""
    from . import viz
    from .registry import available

    parser = OneLineParser(prog=prog, description=(viz.__doc__ or "").split("\n")[0],
                           epilog=f"Example: {prog} --kind rope --grid 8 8 --grow 16 16 --heads 4")
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--kind", choices=sorted(available()))
    what.add_argument("--axis", type=parse_axis, action="append", metavar="NAME=KIND",
                      help="per axis, in grid order (ndpe.PerAxis), e.g. --axis time=rope --axis freq=learned; "
                           "repeatable, no --option; a learned table is sized to its axis of --grid")
    parser.add_argument("--grid", type=_size, nargs="+", required=True,
                        help="grid sizes in ij order (dims = their count)")
    parser.add_argument("--grow", type=_size, nargs="+", default=None, help="a larger grid to compare with")
    parser.add_argument("--dim", type=int, default=64, help="model width (default 64)")
    parser.add_argument("--heads", type=int, default=1, help="attention heads (default 1)")
    parser.add_argument("--option", type=parse_option, action="append", default=[], metavar="KEY=VALUE",
                        help="a keyword option of the kind, value a Python literal or a bare string; "
                             "repeatable. learned's grid_shape defaults to --grid")
    parser.add_argument("--figures", nargs="+", choices=viz.FIGURES, default=viz.FIGURES,
                        help="which figures to draw (default: all that apply)")
    parser.add_argument("--seed", type=int, default=0, help="seed for learned/random parameters (default 0)")
    parser.add_argument("--out", type=Path, default=Path("figures"), help="output folder (default ./figures)")
    parser.add_argument("--name", default=None, help="file name prefix (default <kind>_<dims>d)")
    return parser


def parse_axis(text: str) -> tuple[str, str]:
    """``"time=rope"`` -> ``("time", "rope")``, one axis of ``ndpe viz --axis``.

    >>> parse_axis("freq=learned")
    ('freq', 'learned')
    """
    name, sep, kind = text.partition("=")
    if not sep or not name.isidentifier() or not kind:
        raise argparse.ArgumentTypeError(f"an axis is NAME=KIND (e.g. time=rope), got {text!r}")
    return name, kind


def viz_main(argv: list[str] | None = None, prog: str = "ndpe viz") -> list[Path]:
    """Build one encoding from command-line arguments and draw it (:func:`ndpe.viz.draw`); return the written paths.

    The ``ndpe viz`` command calls it and exits 0; argument errors exit 2 with one line.
    """
    import torch

    from .base import Encoding
    from .per_axis import PerAxis
    from .registry import make, options
    from .viz.figures import check_prefix, draw, require_matplotlib

    parser = viz_parser(prog)
    args = parser.parse_args(argv)
    if args.name:
        try:
            check_prefix(args.name)
        except ValueError as err:
            parser.error(f"--{err}")
    require_matplotlib()
    grid = tuple(args.grid)
    if args.grow is not None and len(args.grow) != len(grid):
        parser.error(f"--grow needs one size per axis of --grid ({len(grid)}), got {args.grow}")
    if args.axis and (args.option or len(args.axis) != len(grid)):
        parser.error(f"--axis takes no --option and one axis per size of --grid ({len(grid)}), got {len(args.axis)}")
    torch.manual_seed(args.seed)
    pe: Encoding | PerAxis
    try:
        if args.axis:
            pe = PerAxis({name: {"kind": kind, **_sized(kind, (n,), {})} for (name, kind), n in zip(args.axis, grid)},
                         dim=args.dim, heads=args.heads)
        else:
            pe = make(dims=len(grid), kind=args.kind, dim=args.dim, heads=args.heads,
                      **_sized(args.kind, grid, dict(args.option)))
    except (TypeError, ValueError) as err:
        parser.error(str(err))
    paths = draw(pe, grid, tuple(args.grow) if args.grow else None, args.out, args.name, tuple(args.figures))
    for p in paths:
        print(p)
    return paths


def _sized(kind: str, grid: tuple[int, ...], opts: dict) -> dict:
    """``opts`` of ``kind``, with the required options it lacks (a table's size: learned's ``grid_shape``, erpe's
    ``length``) as the kind's ``task_options`` give them for training on ``grid``."""
    from .registry import kind_class, options

    missing = [name for name, default in options(kind).items() if default is inspect.Parameter.empty and name not in opts]
    if not missing:
        return opts
    task = kind_class(kind).task_options(dims=len(grid), causal=False, train_grid=tuple(grid), max_grid=tuple(grid))
    return {**opts, **{name: task[name] for name in missing if name in task}}


def _viz(argv: list[str], prog: str) -> int:
    from .viz import MissingDependencyError

    try:
        viz_main(argv, prog=prog)
    except MissingDependencyError as err:
        return _fail(prog, str(err))
    except (ValueError, MemoryError, OSError) as err:  # the encoding refuses the grid, --out is not writable...
        return _fail(prog, str(err).splitlines()[0] if str(err) else type(err).__name__)
    return 0


def _explore(out: Path, results: Path | None, kinds: list[str] | None) -> int:
    from .explore import write_page

    try:
        path = write_page(out, results=results, kinds=kinds,
                          progress=lambda line: print(f"{PROG} explore: {line}", file=sys.stderr, flush=True))
    except (ImportError, ValueError, OSError) as err:  # no matplotlib, no or a stale explore.json, --out...
        return _fail(f"{PROG} explore", str(err).splitlines()[0] if str(err) else type(err).__name__)
    print(path)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the ``ndpe`` command with ``argv`` (default ``sys.argv[1:]``); return the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        if args and args[0] == "viz":
            return _viz(args[1:], f"{PROG} viz")
        parsed = _parser().parse_args(args)
        if parsed.command == "kinds":
            return _kinds(markdown=parsed.markdown)
        if parsed.command == "options":
            return _options(parsed.kind)
        if parsed.command == "explore":
            return _explore(parsed.out, parsed.results, parsed.kinds)
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
