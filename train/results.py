"""The benchmark's records: one :class:`Row` per measurement in ``results.csv``, written atomically.

A row is a trained model (task, kind, seed, data seed) measured once: on a test split at one size
(``split="test"``), or in distribution on its training data (``"train"``: the last epoch's running
metric) or validation split (``"val"``), or a *floor* (``kind="floor"``, ``variant=<floor name>``)
computed from the data of one data seed. Learning-rate search cells are rows with ``split="val"``
and ``variant="lr-search"`` (with a second row, ``split="val-loss"``: the same model's validation loss). Every row also says where it comes from: the ndpe version, the git commit of the code
(``-dirty`` when it had uncommitted changes) and the protocol fingerprint (train/provenance.py); rows written
before those columns existed read them as "".
"""
from __future__ import annotations

import csv
import dataclasses
import math
import re
import statistics
from collections import defaultdict
from dataclasses import dataclass, fields
from pathlib import Path

FLOOR = "floor"  # the ``kind`` of floor rows
FLOOR_PREFIX = "floor: "  # the label of a floor row: "floor: majority"


@dataclass
class Row:
    """One line of results.csv."""

    domain: str
    task: str
    kind: str  # encoding as trained, e.g. "rope", "rope+cape", "conv+coord"; "floor" for a floor
    variant: str  # test-time variant, e.g. "-" or "yarn"; the floor's name for a floor
    seed: int  # training seed; the data seed for a floor
    train_size: str
    test_size: str
    size_ratio: float  # test size / train size along the grown axis
    metric: str
    value: float
    higher_is_better: bool
    train_time_s: float
    cell_rows: int = 0  # rows its cell wrote (set by append_rows): a cell with fewer rows on disk was cut off
    data_seed: int = 0  # the dataset's seed (a floor's seed is its data seed too)
    split: str = "test"  # test | val | train (in-distribution measurements of the same model)
    lr: float = 0.0  # the peak learning rate it trained with (0 for floors)
    weight_decay: float = 0.0
    # provenance, stamped by the driver on every row it writes (train/provenance.py); "" in rows written before
    ndpe_version: str = ""  # ndpe.__version__
    commit: str = ""  # the 40-hex git HEAD, with "-dirty" when ndpe/, models/, train/ or configs/ differ; "unknown"
    protocol: str = ""  # the protocol fingerprint: a hash of the code that says what the numbers mean
    device: str = ""  # where its cell ran: "cpu" or the GPU's name (a GPU record is never mixed with a CPU one)

    @property
    def run(self) -> tuple[int, int]:
        """The run this row belongs to: (model seed, data seed)."""
        return self.seed, self.data_seed

    @property
    def cell(self) -> tuple:
        """The cell that wrote this row (its key in results.csv)."""
        search = self.variant == SEARCH
        return cell_key(self.task, self.kind, self.seed, self.data_seed, SEARCH if search else "",
                        self.lr if search else 0.0, self.weight_decay if search else 0.0)

    @property
    def label(self) -> str:
        if self.kind == FLOOR:
            return FLOOR_PREFIX + self.variant
        return self.kind if self.variant == "-" else f"{self.kind} ({self.variant})"


FIELDS = [f.name for f in fields(Row)]
REQUIRED = FIELDS[:12]  # older results.csv files lack the later columns: they take the defaults
MEASUREMENT = ("task", "kind", "variant", "seed", "data_seed", "split", "train_size", "test_size", "lr", "weight_decay")
"""The columns that identify a row (a cell's measurement): no two rows of a results.csv share them."""
NUMBERS = ("size_ratio", "value", "train_time_s", "lr", "weight_decay")  # finite in every row


def check_finite(rows: list[Row]) -> None:
    """Refuse (``ValueError``, one line) a row with a NaN or infinite number: the driver writes none (a measurement
    that is not a number fails its cell, which is trained again on the next run)."""
    for r in rows:
        bad = [name for name in NUMBERS if not math.isfinite(getattr(r, name))]
        if bad:
            raise ValueError(f"{r.task} {r.kind} seed {r.seed} data {r.data_seed} ({r.split}, {r.test_size}): "
                             f"{', '.join(f'{n}={getattr(r, n)}' for n in bad)} is not a finite number")
SEARCH = "lr-search"  # the variant of a learning-rate search row
SEARCH_LOSS = "val-loss"  # the split of a search cell's second row: its validation loss (breaks ties of the metric)


def cell_key(task: str, kind: str, seed: int, data_seed: int, search: str = "", lr: float = 0.0,
             weight_decay: float = 0.0) -> tuple:
    """What identifies a cell: a model run (task, kind, seed, data seed), or one point of a search."""
    return task, kind, seed, data_seed, search, float(lr), float(weight_decay)


def is_floor(label: str) -> bool:
    """Whether an aggregated label is a floor (see ``Row.label``)."""
    return label.startswith(FLOOR_PREFIX)


def kind_of(label: str) -> str:
    """The kind of a label, without its test-time variant: "rope (yarn)" -> "rope"."""
    return label.split(" (")[0]


class ResultsError(ValueError):
    """A results.csv damaged where it cannot be repaired (a bad header or a bad row before the last cell)."""


def append_rows(path: Path, rows: list[Row]) -> None:
    """Add rows to a results CSV atomically: the whole file is rewritten to a temporary file, fsynced and renamed.

    A kill at any byte leaves either the old file or the new one, never a half-written row or a file
    without its header. A damaged tail left by older versions or other tools is dropped here (see
    :func:`read_rows`).
    """
    counts: dict = defaultdict(int)
    for r in rows:
        counts[r.cell] += 1
    rows = [dataclasses.replace(r, cell_rows=r.cell_rows or counts[r.cell]) for r in rows]
    write_rows(path, [*read_rows(path), *rows])


def write_rows(path: Path, rows: list[Row]) -> None:
    """Write a results CSV holding exactly ``rows``, atomically (a temporary file, fsynced and renamed)."""
    import io
    import os

    buf = io.StringIO()
    writer = csv.DictWriter(buf, FIELDS, lineterminator="\n")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: getattr(r, k) for k in FIELDS})
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", newline="") as f:
        f.write(buf.getvalue())
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # the rename itself survives a power cut
    finally:
        os.close(dir_fd)


def _parse(d: dict) -> Row:
    return Row(domain=d["domain"], task=d["task"], kind=d["kind"], variant=d["variant"], seed=int(d["seed"]),
               train_size=d["train_size"], test_size=d["test_size"], size_ratio=float(d["size_ratio"]),
               metric=d["metric"], value=float(d["value"]), higher_is_better=d["higher_is_better"] == "True",
               train_time_s=float(d["train_time_s"]), cell_rows=int(d.get("cell_rows", 0)),
               data_seed=int(d.get("data_seed", 0)), split=d.get("split", "test"), lr=float(d.get("lr", 0.0)),
               weight_decay=float(d.get("weight_decay", 0.0)), ndpe_version=d.get("ndpe_version", ""),
               commit=d.get("commit", ""), protocol=d.get("protocol", ""), device=d.get("device", ""))


def read_rows(path: Path) -> list[Row]:
    """The rows of a results.csv (none when it does not exist, is empty or holds a cut header).

    A damaged last line (cut mid-row) is dropped together with every row of the cell it follows, and
    so is a cell with fewer rows than it wrote (``cell_rows``: the file was cut at a line end), so
    that cell is trained again; a damaged header, a damaged row before the last (a number that is not finite
    included) or two rows of one measurement (:data:`MEASUREMENT`) is an error that names the file and the line.
    """
    if not path.exists():
        return []
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ResultsError(f"{path} is not a results CSV (byte {e.start} is not UTF-8 text); move the file away "
                           "(the benchmark then starts a new one)") from None
    except OSError as e:  # a folder, no permission
        raise ResultsError(f"{path} cannot be read as a results CSV ({e.strerror or e}); move it away (the benchmark "
                           "then starts a new one)") from None
    lines = text.splitlines()
    if not lines or (len(lines) == 1 and not text.endswith("\n")):
        return []  # nothing, or a header cut before its end: no rows were ever complete
    header = lines[0].split(",")
    if header[:len(REQUIRED)] != REQUIRED or not set(header) <= set(FIELDS):
        raise ResultsError(f"{path}: line 1 is not the results header {','.join(FIELDS)}; move the file away "
                           "(the benchmark then starts a new one)")
    out: list[tuple[int, Row]] = []  # (line number, row)
    damaged = None
    for number, line in enumerate(lines[1:], start=2):
        try:
            values = next(csv.reader([line]))
            if len(values) != len(header):
                raise ValueError(f"{len(values)} fields, expected {len(header)}")
            row = _parse(dict(zip(header, values)))
            check_finite([row])
            out.append((number, row))
        except (ValueError, StopIteration) as e:
            if number != len(lines):
                raise ResultsError(f"{path}: line {number} is damaged ({e}); only a cut last line is repaired "
                                   "automatically") from None
            damaged = number
    if damaged is None and not text.endswith("\n"):
        damaged = len(lines)  # a last row without its newline may be cut inside its last field
        out.pop()
    if damaged is not None and out:
        last = out[-1][1].cell
        out = [(n, r) for n, r in out if r.cell != last]
    check_unique(path, out)
    rows = [r for _, r in out]
    counts: dict = defaultdict(int)
    for r in rows:
        counts[r.cell] += 1
    return [r for r in rows if counts[r.cell] >= r.cell_rows]


def check_unique(path: Path, rows: list[tuple[int, Row]]) -> None:
    """Refuse (:class:`ResultsError`) two rows (``(line number, row)``) of one measurement (:data:`MEASUREMENT`):
    the driver writes each once, so a second is an edit or another file's rows appended."""
    seen: dict[tuple, int] = {}
    for number, r in rows:
        key = tuple(str(getattr(r, k)) for k in MEASUREMENT)
        if key in seen:
            raise ResultsError(f"{path}: line {number} repeats the measurement of line {seen[key]} "
                               f"({', '.join(f'{k}={v}' for k, v in zip(MEASUREMENT, key))}); remove one of them")
        seen[key] = number


@dataclass
class Cell:
    """One (task, label, test size) over runs: the value of each run, keyed by (seed, data seed)."""

    runs: dict  # (seed, data_seed) -> value

    @property
    def values(self) -> list[float]:
        return [self.runs[k] for k in sorted(self.runs)]

    @property
    def n(self) -> int:
        return len(self.runs)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.values) if self.runs else math.nan

    @property
    def std(self) -> float:
        return statistics.stdev(self.values) if self.n > 1 else 0.0

    def fmt(self, digits: int = 3) -> str:
        """``"0.812 ± 0.03"`` (mean ± std over runs), or the value alone for one run."""
        if math.isnan(self.mean):
            return "n/a"
        return f"{self.mean:.{digits}g} ± {self.std:.2g}" if self.n > 1 else f"{self.mean:.{digits}g}"


def aggregate(rows: list[Row], split: str = "test") -> dict[str, dict[str, dict[float, Cell]]]:
    """task -> label -> size_ratio -> :class:`Cell` of the rows of ``split``; floors under ``"floor: <name>"``
    (a floor's runs are keyed by (data seed, data seed))."""
    groups: dict = defaultdict(lambda: defaultdict(lambda: defaultdict(dict)))
    for r in rows:
        if r.split == split and r.variant != SEARCH:
            groups[r.task][r.label][r.size_ratio][r.run] = r.value
    return {task: {label: {s: Cell(runs) for s, runs in sorted(by_size.items())} for label, by_size in by_label.items()}
            for task, by_label in groups.items()}


def split_floors(agg_task: dict[str, dict[float, Cell]]) -> tuple[dict, dict]:
    """(encodings, floors) of one task's aggregate; floors keyed by their name ("majority")."""
    encodings = {label: by for label, by in agg_task.items() if not is_floor(label)}
    floors = {label[len(FLOOR_PREFIX):]: by for label, by in agg_task.items() if is_floor(label)}
    return encodings, floors


UNIT_NAMES = {"px": "px", "s": "s", "L": "L", "C": "ch", "frames": "frames"}  # test_size suffix -> label unit


def size_label(test_size: str, ratio: float) -> str:
    """A readable test size: "48px", 1.5 -> "48 px (×1.5)"; "512C" -> "512 ch (×8)"; "quadrant" stays."""
    m = re.fullmatch(r"([0-9]*\.?[0-9]+)\s*([A-Za-z]+)", test_size)
    if m is None:
        return test_size if ratio == 1.0 else f"{test_size} (×{ratio:g})"
    number, unit = m.groups()
    return f"{number} {UNIT_NAMES.get(unit, unit)} (×{ratio:g})"
