"""The rows of a fuzz table (``tests/test_fuzz_guards.py``: ``REFUSED`` and ``WORKS``) run against a checkout and
counted by outcome, for a before/after table.

    PYTHONPATH=. python scripts/fuzz_outcomes.py                   # this checkout
    git archive <old> | tar -x -C /tmp/old && cp tests/test_fuzz_guards.py /tmp/old/tests/ && \\
        PYTHONPATH=/tmp/old python scripts/fuzz_outcomes.py --root /tmp/old   # the old code, the same rows

A row meant to be refused is *clear* (a ``ValueError``, ``TypeError`` or ``MemoryError`` on one line, or a command
that exits with one ``error:`` line on stderr), *obscure* (another exception: a library's raw error, a traceback; any exception
out of a command's ``main``), *silent-wrong* (no error, and an output field that is not finite, or a frame whose
``D D^-1`` is not the identity or whose attention is not finite) or *accepted* (no error, nothing visibly wrong). A row meant to work *works* (its check holds), is *refused* (raises) or is *wrong*.
Functions a checkout lacks (the run-name check, ``read_run_info``) stand for what its command line did: no name
check (accepted), ``json.loads`` of run_info.json.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import resource
import sys
import tempfile
from collections import Counter
from pathlib import Path

import torch

# rows not run on a checkout without the run-name check (the old driver would train the quick preset, or write to
# /abs/x): counted as issue 57 recorded them, the run directory written outside out_root and the damaged results.csv
# resumed over, rc 0
NOT_RUN_BEFORE = ("bench name=", "bench a results.csv")
CLEAR = (ValueError, TypeError, MemoryError)
RAW = (json.JSONDecodeError, UnicodeDecodeError)  # ValueErrors, but a library's raw words naming no file


def shims() -> bool:
    """What a checkout without the new provenance functions did (see the module doc); whether it has them."""
    from train import provenance

    if hasattr(provenance, "ProvenanceError"):
        return True
    provenance.ProvenanceError = ValueError
    provenance.check_run_name = lambda name: name
    provenance.read_run_info = lambda run_dir: json.loads((Path(run_dir) / "run_info.json").read_text())
    return False


def visibly_wrong(out) -> bool:
    """An output field that is not finite, or a ``frame`` whose attention (random q, k, v of magnitude 1 through
    ``apply_qk``, ``apply_v``, SDPA and ``apply_out``) is not finite or whose ``D D^-1`` is not the identity."""
    import torch.nn.functional as F

    import ndpe
    from ndpe.contract import PosOut, tensors

    if not isinstance(out, PosOut):
        return False
    if not all(bool(torch.isfinite(t).all()) for t in tensors(out) if t.is_floating_point()):
        return True
    if out.frame is None or out.frame[0].shape[-1] % 16 or not out.frame[0].numel():
        return False
    d, d_inv = (t.double().unflatten(-1, (-1, 4, 4)) + torch.eye(4, dtype=torch.float64) for t in out.frame)
    if ((d @ d_inv) - torch.eye(4, dtype=torch.float64)).abs().max() > 1e-2:
        return True
    g = torch.Generator().manual_seed(0)
    q, k, v = torch.randn(3, 1, 2, out.frame[0].shape[-2], out.frame[0].shape[-1] // 4, generator=g)
    q, k, v = (t.to(out.frame[0].dtype) for t in (q, k, v))
    q, k = ndpe.apply_qk(q, k, out)
    o = ndpe.apply_out(F.scaled_dot_product_attention(q, k, ndpe.apply_v(v, out)), out)
    return not bool(torch.isfinite(o).all())


def refused_outcome(thunk, tmp: Path) -> str:
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            out = thunk(tmp)
    except SystemExit as e:  # a command's exit: one "error:" line on stderr (argparse's usage aside), no traceback
        said = err.getvalue() + (e.code + "\n" if isinstance(e.code, str) else "")
        errors = [line for line in said.splitlines() if "error:" in line]
        return "clear" if len(errors) == 1 and "Traceback" not in said else "obscure"
    except BaseException as e:  # noqa: BLE001 (what the old code raised is the point)
        if getattr(thunk, "command", False):  # a command line's main: an exception out of it is a traceback
            return "obscure"
        one_line = "\n" not in str(e).strip() and "Traceback" not in err.getvalue()
        return "clear" if isinstance(e, CLEAR) and not isinstance(e, RAW) and one_line else "obscure"
    return "silent-wrong" if visibly_wrong(out) else "accepted"


def works_outcome(thunk, check, tmp: Path) -> str:
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            return "works" if check(thunk(tmp)) else "wrong"
    except BaseException:  # noqa: BLE001
        return "refused"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1], help="the checkout")
    parser.add_argument("--table", default="test_fuzz_guards")
    parser.add_argument("--rows", action="store_true", help="also print each row's outcome")
    parser.add_argument("--memory-gb", type=float, default=16.0,
                        help="address space cap: a checkout that allocates what it should refuse fails fast")
    args = parser.parse_args()
    cap = int(args.memory_gb * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    sys.path[:0] = [str(args.root), str(args.root / "tests")]
    current = shims()
    table = importlib.import_module(args.table)
    print(f"ndpe from {Path(sys.modules['ndpe'].__file__).parent}, the table from {table.__file__}")
    refused, works = Counter(), Counter()
    for name, thunk, _, _ in table.REFUSED:
        if not current and name.startswith(NOT_RUN_BEFORE):
            outcome = "accepted"
        else:
            with tempfile.TemporaryDirectory() as tmp:
                outcome = refused_outcome(thunk, Path(tmp))
        refused[outcome] += 1
        if args.rows:
            print(f"{outcome:12} {name}")
    for name, thunk, check in table.WORKS:
        with tempfile.TemporaryDirectory() as tmp:
            outcome = works_outcome(thunk, check, Path(tmp))
        works[outcome] += 1
        if args.rows:
            print(f"{outcome:12} {name}")
    print(f"{args.root}: {len(table.REFUSED)} rows to refuse: " + ", ".join(
        f"{k} {refused[k]}" for k in ("clear", "obscure", "silent-wrong", "accepted")))
    print(f"{args.root}: {len(table.WORKS)} rows to work: " + ", ".join(
        f"{k} {works[k]}" for k in ("works", "refused", "wrong")))


if __name__ == "__main__":
    main()
