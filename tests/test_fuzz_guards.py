"""Table-driven fuzz of issue 57's surfaces: cameras (``gta``, ``prope``) and the sphere (``great-circle`` slopes,
``spherical-harmonics``), place ids (``abacus``, ``coupling``), ``ndpe.stack``'s length, ``PosOut.frame``,
``safe_extract``'s archives, and the benchmark's files (results.csv, invocations.jsonl, run_info.json, run names,
``bit_identity.read``, ``rerun_check``).

``REFUSED``: (id, thunk of a temporary folder, exception type, fragment): bad input that must raise a clear one-line
error. ``WORKS``: (id, thunk, check): input that must work, ``check(result)`` true (finite, equal to another way of
computing it). Fast: tiny grids and files.
"""
from __future__ import annotations

import bz2
import dataclasses
import gzip
import io
import json
import math
import sys
import tarfile
from pathlib import Path

import pytest
import torch

import ndpe
from conftest import raises_one_line
from ndpe.contract import PosOut
from test_prope import random_rotation, rigid

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import bit_identity  # noqa: E402
import rerun_check  # noqa: E402
from test_rerun_check import run_dir  # noqa: E402

from train import provenance  # noqa: E402
from train.config import ConfigError  # noqa: E402
from train.data.download import safe_extract  # noqa: E402
from train.results import ResultsError, Row, append_rows, read_rows  # noqa: E402

NAN, INF = float("nan"), float("inf")
F16, BF16 = torch.float16, torch.bfloat16
GRID, N = (2, 2, 3), 12


# -- cameras
def eye(n: int = N) -> torch.Tensor:
    return torch.eye(4).repeat(n, 1, 1)


def intrinsics(n: int = N) -> torch.Tensor:
    """A 64 x 64 image's: fx = fy = 64 px, the principal point at its centre."""
    return torch.tensor([[64.0, 0.0, 32.0], [0.0, 64.0, 32.0], [0.0, 0.0, 1.0]]).repeat(n, 1, 1)


def edited(t: torch.Tensor, i: int, j: int, value: float) -> torch.Tensor:
    t = t.clone()
    t[-1, i, j] = value
    return t


def camera_call(kind: str, e=None, k=None, dtype=None, positions=None, grid=GRID):
    """``pe(grid, extrinsics=e, intrinsics=k)`` of a 3D ``kind`` (prope: a 64 x 64 image), identity cameras where
    not given."""
    def run(tmp):
        opts = {"image_size": 64} if kind == "prope" else {}
        pe = ndpe.make(dims=3, kind=kind, dim=32, heads=2, **opts)
        cams = {"extrinsics": eye() if e is None else e}
        if kind == "prope":
            cams["intrinsics"] = intrinsics() if k is None else k
        return pe(grid, dtype=dtype, positions=positions, **cams)
    return run


def rotations(dtype, translation: float = 3.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    return rigid(random_rotation(g, N), translation * torch.randn(N, 3, generator=g, dtype=torch.float64)).to(dtype)


def reflected() -> torch.Tensor:
    e = eye()
    e[-1, 0, 0] = -1.0
    return e


def finite_frame(out: PosOut) -> bool:
    return all(bool(torch.isfinite(t).all()) for t in out.frame)


def inverse_pairs(out: PosOut) -> bool:
    """Every token's ``D D^-1`` within 1e-2 of the identity (the frame as returned, in float64)."""
    d, d_inv = (t.double().unflatten(-1, (-1, 4, 4)) + torch.eye(4, dtype=torch.float64) for t in out.frame)
    return bool(((d @ d_inv) - torch.eye(4, dtype=torch.float64)).abs().max() < 1e-2)


REFUSED: list[tuple] = []
WORKS: list[tuple] = []
for kind in ("gta", "prope"):
    REFUSED += [
        (f"{kind} translation nan", camera_call(kind, e=edited(eye(), 0, 3, NAN)), ValueError, "NaN or inf"),
        (f"{kind} translation inf", camera_call(kind, e=edited(eye(), 1, 3, INF)), ValueError, "NaN or inf"),
        (f"{kind} translation -inf", camera_call(kind, e=edited(eye(), 2, 3, -INF)), ValueError, "NaN or inf"),
        (f"{kind} rotation nan", camera_call(kind, e=edited(eye(), 0, 0, NAN)), ValueError, "NaN or inf"),
        (f"{kind} bottom row nan", camera_call(kind, e=edited(eye(), 3, 0, NAN)), ValueError, "NaN or inf"),
        (f"{kind} translation 3e38", camera_call(kind, e=edited(eye(), 0, 3, 3e38)), ValueError, "overflows float32"),
        (f"{kind} translation -1e38", camera_call(kind, e=edited(eye(), 2, 3, -1e38)), ValueError, "overflows float32"),
        (f"{kind} translation 7e4 float16", camera_call(kind, e=edited(eye(), 0, 3, 7e4), dtype=F16), ValueError,
         "overflows float16"),
        (f"{kind} translation 2e4 float16", camera_call(kind, e=edited(eye(), 1, 3, 2e4), dtype=F16), ValueError,
         "overflows float16"),
        (f"{kind} translation 1e38 bfloat16", camera_call(kind, e=edited(eye(), 0, 3, 1e38), dtype=BF16), ValueError,
         "overflows bfloat16"),
        (f"{kind} reflection", camera_call(kind, e=reflected()), ValueError, "det R = -1"),
        (f"{kind} reflection float16", camera_call(kind, e=reflected().half()), ValueError, "det R = -1"),
        (f"{kind} squashed axis", camera_call(kind, e=edited(eye(), 0, 0, 2.0)), ValueError, "rigid transforms"),
        (f"{kind} bottom row 2", camera_call(kind, e=edited(eye(), 3, 3, 2.0)), ValueError, "rigid transforms"),
        (f"{kind} empty camera batch", camera_call(kind, e=eye()[None][:0],
                                                   k=intrinsics()[None][:0] if kind == "prope" else None),
         ValueError, "B >= 1"),
        (f"{kind} extrinsics on meta", camera_call(kind, e=eye().to("meta")), ValueError, "meta device"),
        (f"{kind} extrinsics int", camera_call(kind, e=eye().long()), ValueError, "floating"),
        (f"{kind} extrinsics list", camera_call(kind, e=[[1.0]]), ValueError, "floating"),
        (f"{kind} extrinsics 3 x 3", camera_call(kind, e=torch.eye(3).repeat(N, 1, 1)), ValueError, "one per grid"),
        (f"{kind} one camera short", camera_call(kind, e=eye(N - 1),
                                                 k=intrinsics(N - 1) if kind == "prope" else None),
         ValueError, "one per grid token"),
        (f"{kind} batched positions against other cameras",
         camera_call(kind, e=eye().expand(3, N, 4, 4), k=intrinsics().expand(3, N, 3, 3) if kind == "prope" else None,
                     positions=torch.zeros(2, N, 3)), ValueError, "batch of 2 but the cameras one of 3"),
        (f"{kind} positions 1e30 with cameras", camera_call(kind, positions=torch.full((N, 3), 1e30)), ValueError,
         "positions reach 1e+30"),
        (f"{kind} positions -1e14 with cameras", camera_call(kind, positions=torch.full((N, 3), -1e14)), ValueError,
         "float64 angles"),
        (f"{kind} positions nan with cameras", camera_call(kind, positions=torch.full((N, 3), NAN)), ValueError,
         "NaN or inf"),
        (f"{kind} positions 1e30 without cameras",
         lambda tmp, kind=kind: ndpe.make(dims=3, kind=kind, dim=32, heads=2)(positions=torch.full((N, 3), 1e30)),
         ValueError, "positions reach"),
    ]
    WORKS += [
        (f"{kind} float16 extrinsics", camera_call(kind, e=rotations(F16)), finite_frame),
        (f"{kind} bfloat16 extrinsics", camera_call(kind, e=rotations(BF16)), finite_frame),
        (f"{kind} float64 extrinsics", camera_call(kind, e=rotations(torch.float64)), finite_frame),
        (f"{kind} translation 1e4 float16", camera_call(kind, e=edited(eye(), 0, 3, 1e4), dtype=F16), finite_frame),
        (f"{kind} translation 1e30 float32", camera_call(kind, e=edited(eye(), 0, 3, 1e30)), finite_frame),
        (f"{kind} rotations in float32 keep D D^-1 = I", camera_call(kind, e=rotations(torch.float32)), inverse_pairs),
        (f"{kind} positions 1e6 with cameras", camera_call(kind, positions=torch.full((N, 3), 1e6)), finite_frame),
        (f"{kind} batched positions, shared cameras", camera_call(kind, positions=torch.zeros(2, N, 3)),
         lambda out: out.frame[0].shape[0] == 2),
        (f"{kind} one batch of positions, batched cameras", camera_call(
            kind, e=eye().expand(3, N, 4, 4), k=intrinsics().expand(3, N, 3, 3) if kind == "prope" else None,
            positions=torch.zeros(1, N, 3)), lambda out: out.frame[0].shape[0] == 3),
    ]

K = intrinsics()
REFUSED += [
    ("prope fx inf", camera_call("prope", k=edited(K, 0, 0, INF)), ValueError, "NaN or inf"),
    ("prope fx nan", camera_call("prope", k=edited(K, 0, 0, NAN)), ValueError, "NaN or inf"),
    ("prope fy nan", camera_call("prope", k=edited(K, 1, 1, NAN)), ValueError, "NaN or inf"),
    ("prope cx nan", camera_call("prope", k=edited(K, 0, 2, NAN)), ValueError, "NaN or inf"),
    ("prope cy inf", camera_call("prope", k=edited(K, 1, 2, INF)), ValueError, "NaN or inf"),
    ("prope cy -inf", camera_call("prope", k=edited(K, 1, 2, -INF)), ValueError, "NaN or inf"),
    ("prope fx 0", camera_call("prope", k=edited(K, 0, 0, 0.0)), ValueError, "positive focal"),
    ("prope fy -64", camera_call("prope", k=edited(K, 1, 1, -64.0)), ValueError, "positive focal"),
    ("prope fx 1e-45", camera_call("prope", k=edited(K, 0, 0, 1e-45)), ValueError, "ill-conditioned"),
    ("prope fx 1e-3 px", camera_call("prope", k=edited(K, 0, 0, 1e-3)), ValueError, "ill-conditioned"),
    ("prope fx 1e-3 px, cx 1e4 px", camera_call("prope", k=edited(edited(K, 0, 0, 1e-3), 0, 2, 1e4)), ValueError,
     "ill-conditioned"),
    ("prope cx 1e7 px", camera_call("prope", k=edited(K, 0, 2, 1e7)), ValueError, "ill-conditioned"),
    ("prope fy 1e9 px", camera_call("prope", k=edited(K, 1, 1, 1e9)), ValueError, "ill-conditioned"),
    ("prope skew K[0, 1] = 5", camera_call("prope", k=edited(K, 0, 1, 5.0)), ValueError, "no skew"),
    ("prope skew K[0, 1] = -0.1", camera_call("prope", k=edited(K, 0, 1, -0.1)), ValueError, "no skew"),
    ("prope K[1, 0] = 1", camera_call("prope", k=edited(K, 1, 0, 1.0)), ValueError, "no skew"),
    ("prope K[2, 2] = 5", camera_call("prope", k=edited(K, 2, 2, 5.0)), ValueError, "bottom row (0, 0, 1)"),
    ("prope K[2, 0] = 1", camera_call("prope", k=edited(K, 2, 0, 1.0)), ValueError, "bottom row (0, 0, 1)"),
    ("prope K[2, 1] = -3", camera_call("prope", k=edited(K, 2, 1, -3.0)), ValueError, "bottom row (0, 0, 1)"),
    ("prope K[2, 2] = 0", camera_call("prope", k=edited(K, 2, 2, 0.0)), ValueError, "bottom row (0, 0, 1)"),
    ("prope intrinsics on meta", camera_call("prope", k=K.to("meta")), ValueError, "meta device"),
    ("prope intrinsics int", camera_call("prope", k=K.long()), ValueError, "floating tensor of 3 x 3"),
    ("prope intrinsics 4 x 4", camera_call("prope", k=eye()), ValueError, "floating tensor of 3 x 3"),
    ("prope intrinsics missing", lambda tmp: ndpe.make(dims=3, kind="prope", dim=32, heads=2)(GRID, extrinsics=eye()),
     ValueError, "extrinsics= and intrinsics="),
    ("gta given intrinsics", lambda tmp: ndpe.make(dims=3, kind="gta", dim=32, heads=2)(
        GRID, extrinsics=eye(), intrinsics=K), ValueError, "intrinsics are PRoPE's"),
]
WORKS += [
    ("prope fx 1e-3 px skew (within 1e-4 fx)", camera_call("prope", k=edited(K, 0, 1, 1e-3)), finite_frame),
    ("prope float16 intrinsics", camera_call("prope", k=K.half()), inverse_pairs),
    ("prope wide lens fx 8 px", camera_call("prope", k=edited(K, 0, 0, 8.0)), inverse_pairs),
    ("prope narrow lens fx 6400 px", camera_call("prope", k=edited(K, 0, 0, 6400.0)), inverse_pairs),
    ("prope principal point off the image", camera_call("prope", k=edited(K, 0, 2, 640.0)), inverse_pairs),
    ("prope float16 output", camera_call("prope", dtype=F16), finite_frame),
]


# -- the sphere
def great_circle(slope: float, dtype=None, unit: str = "degree", grid=(6, 12), positions=None):
    def run(tmp):
        pe = ndpe.make(dims=2, kind="great-circle", dim=8, heads=2, unit=unit, slopes=[slope, 0.5])
        return pe(grid, dtype=dtype) if positions is None else pe(positions=positions, dtype=dtype)
    return run


def finite_bias(out: PosOut) -> bool:
    return bool(torch.isfinite(out.bias).all())


for slope, dtype, unit in [(-1000.0, F16, "degree"), (1000.0, F16, "degree"), (-400.0, F16, "degree"),
                           (4.0, F16, "km"), (-4.0, F16, "km"), (-3e4, F16, "radian"), (-1e37, torch.float32, "degree"),
                           (1e37, BF16, "degree"), (-1e35, torch.float32, "km")]:
    REFUSED.append((f"great-circle slope {slope:g} per {unit} {dtype}", great_circle(slope, dtype, unit), ValueError,
                    "give biases up to"))
REFUSED.append(("great-circle slope -1000 float16 on positions", great_circle(
    -1000.0, F16, positions=torch.tensor([[0.0, 0.0], [0.0, 90.0]])), ValueError, "give biases up to"))
for slope, dtype, unit in [(-300.0, F16, "degree"), (300.0, F16, "degree"), (3.0, F16, "km"), (-2e4, F16, "radian"),
                           (-1000.0, torch.float32, "degree"), (-1e35, torch.float32, "degree"),
                           (-1e33, BF16, "km")]:
    WORKS.append((f"great-circle slope {slope:g} per {unit} {dtype}", great_circle(slope, dtype, unit), finite_bias))


def harmonics(dtype):
    def run(tmp):
        pe = ndpe.make(dims=2, kind="spherical-harmonics", dim=32, max_degree=3)
        p = torch.tensor([[48, 2], [-33, 151], [90, -180], [0, 0]])
        return pe(positions=p.to(dtype)).cat, pe(positions=p.double()).cat
    return run


for dtype in (torch.int64, torch.int32, torch.int16):
    WORKS.append((f"spherical-harmonics {dtype} positions are degrees", harmonics(dtype),
                  lambda pair: torch.allclose(pair[0].double(), pair[1].double(), atol=1e-6)))


# -- place ids
def place(kind: str, positions, train: bool = False, **opts):
    def run(tmp):
        pe = ndpe.make(dims=1, kind=kind, dim=8, **opts).train(train)
        return pe(positions=positions)
    return run


BOOL_IDS = torch.tensor([[True], [False], [True]])
for kind, opts in (("abacus", {"size": 16, "max_k": 4}), ("coupling", {"max_position": 16})):
    REFUSED += [
        (f"{kind} bool place ids", place(kind, BOOL_IDS, **opts), TypeError, "got a bool tensor"),
        (f"{kind} bool place ids in training", place(kind, BOOL_IDS, train=True, **opts), TypeError, "bool tensor"),
        (f"{kind} batched bool place ids", place(kind, BOOL_IDS.expand(2, 3, 1), **opts), TypeError, "bool tensor"),
        (f"{kind} place id 0.5", place(kind, torch.tensor([[0.5]]), **opts), ValueError, "integers >= 0"),
    ]
    WORKS += [(f"{kind} integer place ids", place(kind, BOOL_IDS.long(), **opts), lambda out: out.add.shape == (3, 8)),
              (f"{kind} uint8 place ids", place(kind, BOOL_IDS.to(torch.uint8), **opts),
               lambda out: out.add.shape == (3, 8))]
for size, max_k in ((16, 15), (16, 16), (16, 99), (2, 1), (1024, 1023)):
    REFUSED.append((f"abacus max_k={max_k} size={size}", lambda tmp, s=size, k=max_k: ndpe.make(
        dims=1, kind="abacus", dim=8, size=s, max_k=k), ValueError, "needs size > max_k + 1"))
WORKS += [("abacus max_k = size - 2 trains", place("abacus", torch.tensor([[1.0], [0.0]]), train=True, size=16,
                                                   max_k=14), lambda out: out.add.shape == (2, 8)),
          ("abacus default size and max_k", lambda tmp: ndpe.make(dims=1, kind="abacus", dim=8),
           lambda pe: pe.max_k == 99)]


# -- stack's length, PosOut.frame
def stack(kind: str, length: int, dims: int = 1):
    def run(tmp):
        pe = ndpe.make(dims=dims, kind=kind, dim=16, heads=2)
        return ndpe.stack([pe((4,) * dims), pe((3,) * dims)], length=length)
    return run


for kind in ("alibi", "rope", "sinusoidal", "relative", "xpos"):
    for length in ((10**6,) if kind in ("alibi", "relative") else ()) + (10**9, 10**12):  # pairs grow with length^2
        REFUSED.append((f"stack {kind} length={length:.0e}", stack(kind, length), MemoryError, "stack() of 2 samples"))
    WORKS.append((f"stack {kind} length=64", stack(kind, 64), lambda out: out.num_tokens == 64))
REFUSED.append(("stack rope 2d length 1e9", stack("rope", 10**9, dims=2), MemoryError, "padded to length"))
for width in (8, 10, 17, 4):
    REFUSED.append((f"PosOut frame width {width}", lambda tmp, w=width: PosOut(
        frame=(torch.zeros(4, w), torch.zeros(4, w))), ValueError, "not a multiple of 16"))
WORKS.append(("PosOut frame NaN (values unchecked, documented)", lambda tmp: PosOut(
    frame=(torch.full((4, 16), NAN), torch.zeros(4, 16))), lambda out: out.num_tokens == 4))


# -- safe_extract
def tar_with(name: str, fmt: int, mode: str = "w"):
    def run(tmp):
        path = tmp / "a.tar"
        with tarfile.open(path, mode, format=fmt) as tar:
            info = tarfile.TarInfo(name)
            info.size = 2
            tar.addfile(info, io.BytesIO(b"hi"))
        return safe_extract(path, tmp / "out")
    return run


def not_a_tar(content: bytes, suffix: str = ".tar"):
    def run(tmp):
        path = tmp / f"a{suffix}"
        path.write_bytes(content)
        return safe_extract(path, tmp / "out")
    return run


def truncated_tar_gz(tmp):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo("f.bin")
        info.size = 50_000
        tar.addfile(info, io.BytesIO(bytes(range(256)) * 196))
    (tmp / "t.tar.gz").write_bytes(buf.getvalue()[:400])
    return safe_extract(tmp / "t.tar.gz", tmp / "out")


for fmt, fmt_name in ((tarfile.USTAR_FORMAT, "ustar"), (tarfile.GNU_FORMAT, "gnu"), (tarfile.PAX_FORMAT, "pax")):
    REFUSED += [(f"tar {fmt_name} NUL in a member name", tar_with("a\x00b.txt", fmt), ValueError, "a NUL inside"),
                (f"tar {fmt_name} NUL in a folder name", tar_with("d\x00/../x.txt", fmt), ValueError, "a NUL inside")]
    WORKS.append((f"tar {fmt_name} plain member", tar_with("d/a.txt", fmt), lambda out: (out / "d" / "a.txt").is_file()))
REFUSED += [
    ("safe_extract of text", not_a_tar(b"hello, not a tar\n" * 100), ValueError, "not a readable tar archive"),
    ("safe_extract of gzip that is no tar", not_a_tar(gzip.compress(b"x" * 5000), ".tar.gz"), ValueError,
     "not a readable tar archive"),
    ("safe_extract of damaged gzip", not_a_tar(b"\x1f\x8b" + b"junk" * 100, ".tar.gz"), ValueError,
     "not a readable tar archive"),
    ("safe_extract of bzip2 that is no tar", not_a_tar(bz2.compress(b"y" * 5000), ".tar.bz2"), ValueError,
     "not a readable tar archive"),
    ("safe_extract of an empty file", not_a_tar(b""), ValueError, "not a readable tar archive"),
    ("safe_extract of a truncated tar.gz", truncated_tar_gz, ValueError, "not a readable tar archive"),
]


# -- the benchmark's files
def row(seed: int = 0, value: float = 0.5, **kw) -> Row:
    return Row("text", "text/copy", "rope", "-", seed, "8L", "8L", 1.0, "seq_acc", value, True, 1.0, **kw)


def results_with(edit, rows=None):
    """A results.csv of three one-row cells, its text passed through ``edit``; read back."""
    def run(tmp):
        path = tmp / "results.csv"
        append_rows(path, rows or [row(0), row(1), row(2)])
        path.write_text(edit(path.read_text()))
        return read_rows(path)
    return run


def line_edit(number: int, old: str, new: str):
    def edit(text):
        lines = text.splitlines(keepends=True)
        lines[number - 1] = lines[number - 1].replace(old, new, 1)
        return "".join(lines)
    return edit


def duplicate_line(number: int):
    def edit(text):
        lines = text.splitlines(keepends=True)
        return "".join(lines[:number] + [lines[number - 1]] + lines[number:])
    return edit


for bad in ("nan", "inf", "-inf", "NaN"):
    REFUSED.append((f"results.csv value {bad} before the last row", results_with(line_edit(2, ",0.5,", f",{bad},")),
                    ResultsError, "not a finite number"))
REFUSED += [
    ("results.csv size_ratio nan", results_with(line_edit(3, ",1.0,", ",nan,")), ResultsError, "size_ratio=nan"),
    ("results.csv train_time_s inf", results_with(line_edit(2, ",True,1.0,", ",True,inf,")), ResultsError,
     "train_time_s=inf"),
    ("results.csv a row twice", results_with(duplicate_line(2)), ResultsError, "repeats the measurement of line 2"),
    ("results.csv the last row twice", results_with(duplicate_line(4)), ResultsError, "repeats the measurement"),
    ("results.csv a row repeated with another value", results_with(lambda t: t + t.splitlines(keepends=True)[1]
                                                                   .replace(",0.5,", ",0.7,")), ResultsError,
     "repeats the measurement"),
    ("results.csv is a folder", lambda tmp: (tmp / "r.csv").mkdir() or read_rows(tmp / "r.csv"), ResultsError,
     "cannot be read"),
]
WORKS += [
    ("results.csv value nan on the last line: repaired as a cut tail (its cell and the one before redone)",
     results_with(line_edit(4, ",0.5,", ",nan,")), lambda rows: [r.seed for r in rows] == [0]),
    ("results.csv the same cell at two sizes", results_with(lambda t: t, rows=[
        row(0), dataclasses.replace(row(0), test_size="16L", size_ratio=2.0)]), lambda rows: len(rows) == 2),
]
for name in ("/abs/x", "../escape", "..", ".", "", "a/b", "a\\b", "a\x00b", "./x", "x/.."):
    REFUSED.append((f"run name {name!r}", lambda tmp, n=name: provenance.check_run_name(n), ConfigError,
                    "must be a run name"))
for name in ("quick", "mine-2", "v1.2", "..x"):
    WORKS.append((f"run name {name!r}", lambda tmp, n=name: provenance.check_run_name(n), lambda got: bool(got)))


def invocations(*records, folder: bool = False):
    def run(tmp):
        path = tmp / provenance.INVOCATIONS
        if folder:
            path.mkdir()
        else:
            path.write_text("".join(json.dumps(r) + "\n" for r in records))
        return provenance.read_invocations(tmp)
    return run


START = {"command": "train.bench", "id": "a", "status": "started", "start": "2026-01-01T00:00:00Z"}
END = {**START, "status": "finished", "wall_s": 3.0, "cells_trained": 1, "rows_written": 2, "cells_failed": 0}
for key, value in (("wall_s", "abc"), ("cells_trained", 1.5), ("rows_written", "2"), ("machine", "cpu"),
                   ("command", 5), ("status", None), ("dirty", "yes"), ("cells_failed", True), ("end", 1)):
    REFUSED.append((f"invocations.jsonl {key}={value!r}", invocations(START, {**END, key: value}), provenance.ProvenanceError,
                    f"{key} as"))
REFUSED.append(("invocations.jsonl is a folder", invocations(folder=True), provenance.ProvenanceError, "cannot be read"))
WORKS += [("invocations.jsonl whole", invocations(START, END), lambda got: got[-1]["status"] == "finished"),
          ("invocations.jsonl a cut line is skipped", lambda tmp: (tmp / provenance.INVOCATIONS).write_text(
              json.dumps(START) + "\n{\"comm\n" + json.dumps(END) + "\n") and provenance.read_invocations(tmp),
           lambda got: len(got) == 1)]


def run_info(text: str | None):
    def run(tmp):
        path = tmp / "run_info.json"
        if text is None:
            path.mkdir()
        else:
            path.write_text(text)
        return provenance.read_run_info(tmp)
    return run


for name, text in (("not JSON", "{"), ("a list", "[1]"), ("no command", '{"date": "x"}'), ("a folder", None),
                   ("a command number", '{"command": 3}')):
    REFUSED.append((f"run_info.json {name}", run_info(text), provenance.ProvenanceError, "run_info.json is damaged"))
WORKS.append(("run_info.json whole", run_info('{"command": "c", "date": "d", "wall_s": 3}'),
              lambda info: info["command"] == "c"))


def bit_read(edit, write_bytes: bool = False):
    def run(tmp):
        path = tmp / "results.csv"
        append_rows(path, [row(0), row(1, commit="abc", protocol="p")])
        if write_bytes:
            path.write_bytes(edit(path.read_bytes()))
        else:
            path.write_text(edit(path.read_text()))
        return bit_identity.read(path)
    return run


REFUSED += [
    ("bit_identity non-UTF-8", bit_read(lambda b: b + b"\xff\xfe\n", write_bytes=True), SystemExit, "not UTF-8"),
    ("bit_identity last row cut in the provenance columns", bit_read(lambda t: t.rstrip("\n")[:-4]), SystemExit,
     "the last row is cut"),
    ("bit_identity last row cut at a comma", bit_read(lambda t: t.rstrip("\n").rsplit(",", 2)[0] + "\n"),
     SystemExit, "fields, expected"),
    ("bit_identity a short row in the middle", bit_read(line_edit(2, ",0.5,", ",")), SystemExit, "fields, expected"),
    ("bit_identity a row twice", bit_read(duplicate_line(2)), SystemExit, "two rows with the same key"),
    ("bit_identity no header", bit_read(lambda t: t.split("\n", 1)[1]), SystemExit, "not a results header"),
    ("bit_identity a folder", lambda tmp: (tmp / "d").mkdir() or bit_identity.read(tmp / "d"), SystemExit,
     "cannot be read"),
]
WORKS.append(("bit_identity whole", bit_read(lambda t: t), lambda rows: len(rows) == 2))


def rerun_check_with(edit_config=None, edit_results=None):
    """``rerun_check.main`` on a record and a rerun of it, the rerun's bench_config.yaml (bytes) or results.csv
    (text) passed through an edit; its exit status (2: a refusal, on one line of stderr)."""
    def run(tmp):
        record, rerun = run_dir(tmp / "record", (1.0, 2.0, 3.0)), run_dir(tmp / "rerun", (1.0, 2.0, 3.0), wall_s=9.0)
        if edit_config:
            (rerun / "bench_config.yaml").write_bytes(edit_config((rerun / "bench_config.yaml").read_bytes()))
        if edit_results:
            (rerun / "results.csv").write_text(edit_results((rerun / "results.csv").read_text()))
        return rerun_check.main(["--record", str(record), "--rerun", str(rerun)])
    run.command = True  # a command line's main (scripts/fuzz_outcomes.py counts an exception out of it as obscure)
    return run


REFUSED += [
    ("rerun_check bench_config with a python tag", rerun_check_with(
        lambda b: b"x: !!python/object/apply:os.system [echo]\n" + b), SystemExit, "could not determine a constructor for the tag"),
    ("rerun_check bench_config not UTF-8", rerun_check_with(lambda b: b"\xff\xfe" + b), SystemExit,
     "bench_config.yaml is not UTF-8 text"),
    ("rerun_check last row cut in the provenance columns", rerun_check_with(
        edit_results=lambda t: t.rstrip("\n")[:-6]), SystemExit, "the last row is cut"),
    ("rerun_check a rerun row twice", rerun_check_with(edit_results=duplicate_line(2)), SystemExit,
     "two rows with the same key"),
]
WORKS.append(("rerun_check whole", rerun_check_with(), lambda rc: rc == 0))


def bench_cli(*argv: str, invocation: dict | None = None, results: str | None = "csv", info: str | None = None):
    """``python -m train.bench --quick out_root=<tmp> name=r ...`` on a run directory holding a start line (or
    ``invocation``), results.csv (``"csv"``: three rows, ``"twice"``: the first twice, ``"nan"``: its value nan;
    ``"folder"``: a folder) and run_info.json (``info``)."""
    def run(tmp):
        from train import bench

        folder = tmp / "r"
        folder.mkdir()
        (folder / provenance.INVOCATIONS).write_text(json.dumps(invocation or START) + "\n")
        if results == "folder":
            (folder / "results.csv").mkdir()
        elif results is not None:
            append_rows(folder / "results.csv", [row(0), row(1), row(2)])
            edit = {"csv": lambda t: t, "twice": duplicate_line(2), "nan": line_edit(2, ",0.5,", ",nan,")}[results]
            (folder / "results.csv").write_text(edit((folder / "results.csv").read_text()))
        if info is not None:
            (folder / "run_info.json").write_text(info)
        return bench.main(["--quick", f"out_root={tmp}", "name=r", *argv])
    run.command = True
    return run


def bench_name(name: str, *argv: str):
    def run(tmp):
        from train import bench

        return bench.main(["--quick", f"out_root={tmp}", f"name={name}", *argv])
    run.command = True
    return run


REFUSED += [
    ("bench --report-only results.csv a folder", bench_cli("--report-only", results="folder"), SystemExit,
     "cannot be read as a results CSV"),
    ("bench --report-only invocations line mistyped", bench_cli("--report-only", invocation={**END, "wall_s": "x"}),
     SystemExit, "holds wall_s as str"),
    ("bench --report-only run_info.json not JSON", bench_cli("--report-only", info="{"), SystemExit,
     "run_info.json is damaged"),
    ("bench --report-only run_info.json a list", bench_cli("--report-only", info="[1]"), SystemExit,
     "run_info.json is damaged"),
    ("bench --report-only a results.csv row twice", bench_cli("--report-only", results="twice"), SystemExit,
     "repeats the measurement of line 2"),
    ("bench a results.csv row twice", bench_cli(results="twice"), SystemExit, "repeats the measurement of line 2"),
    ("bench a results.csv value nan", bench_cli(results="nan"), SystemExit, "value=nan is not a finite number"),
]
for name in ("/abs/x", "../escape", "..", "a/../../b"):
    REFUSED += [(f"bench name={name}", bench_name(name), SystemExit, "must be a run name"),
                (f"bench name={name} --report-only", bench_name(name, "--report-only"), SystemExit,
                 "must be a run name")]


def sized(kind: str, model: str, data: str):
    """``model.pe.options`` after train.main has read the training data (``resolve_model_config``)."""
    def run(tmp):
        from models import build_model
        from train.config import load_config
        from train.main import build_data, resolve_model_config

        cfg = load_config(None, ["data.name=tests.test_train:fake", "data.allow_import=true", f"data.options.kind={data}",
                                 f"model.name={model}", f"model.pe.kind={kind}",
                                 *(["model.patch_size=4"] if model == "vit" else [])])
        resolve_model_config(cfg, build_data(cfg, "train"))
        build_model(cfg.model)
        return dict(cfg.model.pe.options)
    return run


WORKS += [("train.main sizes erpe's table from the series", sized("erpe", "text", "text"),
           lambda opts: opts == {"length": 12}),
          ("train.main sizes learned's table from the patch grid", sized("learned", "vit", "image"),
           lambda opts: tuple(opts["grid_shape"]) == (4, 4))]


@pytest.mark.parametrize("name, thunk, exc, fragment", REFUSED, ids=[r[0] for r in REFUSED])
def test_bad_input_raises_a_clear_error(name, thunk, exc, fragment, tmp_path, capsys):
    """A function raises ``exc`` with one line holding ``fragment``; a command exits (not 0) with one ``error:``
    line on stderr holding it (argparse's usage above it aside) and no traceback."""
    if not getattr(thunk, "command", False):
        raises_one_line(name, lambda: thunk(tmp_path), exc, fragment)
        return
    with pytest.raises(SystemExit) as info:
        thunk(tmp_path)
    err = capsys.readouterr().err
    if isinstance(info.value.code, str):  # SystemExit("error: ..."): Python prints it to stderr on the way out
        err += info.value.code + "\n"
    lines = [line for line in err.splitlines() if "error:" in line]
    assert info.value.code not in (0, None) and "Traceback" not in err and len(lines) == 1, err
    assert fragment in lines[0], f"{name}: {lines[0]!r} lacks {fragment!r}"


@pytest.mark.parametrize("name, thunk, check", WORKS, ids=[r[0] for r in WORKS])
def test_good_input_works(name, thunk, check, tmp_path):
    assert check(thunk(tmp_path)), name


def test_table_is_large_enough():
    assert len(REFUSED) + len(WORKS) >= 150
    assert len({r[0] for r in REFUSED + WORKS}) == len(REFUSED) + len(WORKS)  # ids unique
