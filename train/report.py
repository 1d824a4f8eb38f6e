"""Turn a benchmark's ``results.csv`` into ``report.md`` and plots.

Each row of ``results.csv`` is one measurement: a trained model (domain, task, kind, seed)
evaluated at one test size under one test-time variant, or a *floor* (``kind="floor"``,
``variant=<floor name>``): what the task's data allows without learning, computed from the data.
The report aggregates over seeds (mean ± std), one table and one plot per task with the floors
drawn under the encodings, decides which kinds learned each task (beat the strongest floor in
distribution), and checks the trends the literature reports, using only the kinds that learned.
"""
from __future__ import annotations

import csv
import dataclasses
import math
import re
import statistics
from collections import defaultdict
from dataclasses import dataclass, field, fields
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

    @property
    def label(self) -> str:
        if self.kind == FLOOR:
            return FLOOR_PREFIX + self.variant
        return self.kind if self.variant == "-" else f"{self.kind} ({self.variant})"


FIELDS = [f.name for f in fields(Row)]
OLD_FIELDS = FIELDS[:-1]  # results.csv before cell_rows: read as it is (cells assumed whole)


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
    import io
    import os

    counts: dict = defaultdict(int)
    for r in rows:
        counts[(r.task, r.kind, r.seed)] += 1
    rows = [dataclasses.replace(r, cell_rows=r.cell_rows or counts[(r.task, r.kind, r.seed)]) for r in rows]
    buf = io.StringIO()
    writer = csv.DictWriter(buf, FIELDS, lineterminator="\n")
    writer.writeheader()
    for r in [*read_rows(path), *rows]:
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
               train_time_s=float(d["train_time_s"]), cell_rows=int(d.get("cell_rows", 0)))


def read_rows(path: Path) -> list[Row]:
    """The rows of a results.csv (none when it does not exist, is empty or holds a cut header).

    A damaged last line (cut mid-row) is dropped together with every row of the cell it follows, and
    so is a cell with fewer rows than it wrote (``cell_rows``: the file was cut at a line end), so
    that cell is trained again; a damaged header or a damaged row before the last is an error that
    names the file and the line.
    """
    if not path.exists():
        return []
    text = path.read_text()
    lines = text.splitlines()
    if not lines or (len(lines) == 1 and not text.endswith("\n")):
        return []  # nothing, or a header cut before its end: no rows were ever complete
    header = lines[0].split(",")
    if header not in (FIELDS, OLD_FIELDS):
        raise ResultsError(f"{path}: line 1 is not the results header {','.join(FIELDS)}; move the file away "
                           "(the benchmark then starts a new one)")
    out, damaged = [], None
    for number, line in enumerate(lines[1:], start=2):
        try:
            values = next(csv.reader([line]))
            if len(values) != len(header):
                raise ValueError(f"{len(values)} fields, expected {len(header)}")
            out.append(_parse(dict(zip(header, values))))
        except (ValueError, StopIteration) as e:
            if number != len(lines):
                raise ResultsError(f"{path}: line {number} is damaged ({e}); only a cut last line is repaired "
                                   "automatically") from None
            damaged = number
    if damaged is None and not text.endswith("\n"):
        damaged = len(lines)  # a last row without its newline may be cut inside its last field
        out.pop()
    if damaged is not None and out:
        last = (out[-1].task, out[-1].kind, out[-1].seed)
        out = [r for r in out if (r.task, r.kind, r.seed) != last]
    counts: dict = defaultdict(int)
    for r in out:
        counts[(r.task, r.kind, r.seed)] += 1
    return [r for r in out if counts[(r.task, r.kind, r.seed)] >= r.cell_rows]


@dataclass
class Cell:
    """Seeds aggregated: one (task, label, test size)."""

    mean: float
    std: float
    n: int

    @property
    def se(self) -> float:
        """Standard error of the mean (nan with fewer than two seeds)."""
        return self.std / math.sqrt(self.n) if self.n > 1 else float("nan")

    def fmt(self, digits: int = 3) -> str:
        if math.isnan(self.mean):
            return "n/a"
        return f"{self.mean:.{digits}g} ± {self.std:.2g}" if self.n > 1 else f"{self.mean:.{digits}g}"


def aggregate(rows: list[Row]) -> dict[str, dict[str, dict[float, Cell]]]:
    """task -> label -> size_ratio -> Cell (mean, std over seeds); floors under "floor: <name>"."""
    groups: dict = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for r in rows:
        groups[r.task][r.label][r.size_ratio].append(r.value)
    out: dict = {}
    for task, by_label in groups.items():
        out[task] = {}
        for label, by_size in by_label.items():
            out[task][label] = {
                s: Cell(statistics.fmean(v), statistics.stdev(v) if len(v) > 1 else 0.0, len(v))
                for s, v in sorted(by_size.items())
            }
    return out


def split_floors(agg_task: dict[str, dict[float, Cell]]) -> tuple[dict, dict]:
    """(encodings, floors) of one task's aggregate; floors keyed by their name ("majority")."""
    encodings = {label: by for label, by in agg_task.items() if not is_floor(label)}
    floors = {label[len(FLOOR_PREFIX):]: by for label, by in agg_task.items() if is_floor(label)}
    return encodings, floors


def task_info(rows: list[Row]) -> dict[str, Row]:
    """One representative row per task (for its domain, metric, direction and sizes)."""
    info: dict[str, Row] = {}
    for r in rows:  # an encoding's row where there is one
        if r.task not in info or (info[r.task].kind == FLOOR and r.kind != FLOOR):
            info[r.task] = r
    return info


def sizes_of(rows: list[Row], task: str) -> list[tuple[float, str]]:
    """The (size_ratio, test_size) pairs of a task, smallest first."""
    return sorted({(r.size_ratio, r.test_size) for r in rows if r.task == task})


UNIT_NAMES = {"px": "px", "s": "s", "L": "L", "C": "ch", "frames": "frames"}  # test_size suffix -> label unit


def size_label(test_size: str, ratio: float) -> str:
    """A readable test size: "48px", 1.5 -> "48 px (×1.5)"; "512C" -> "512 ch (×8)"; "quadrant" stays."""
    m = re.fullmatch(r"([0-9]*\.?[0-9]+)\s*([A-Za-z]+)", test_size)
    if m is None:
        return test_size if ratio == 1.0 else f"{test_size} (×{ratio:g})"
    number, unit = m.groups()
    return f"{number} {UNIT_NAMES.get(unit, unit)} (×{ratio:g})"


def within_noise(a: Cell, b: Cell) -> bool:
    """Two cells differ by less than two standard errors of their difference (or only one seed each)."""
    if a.n < 2 or b.n < 2:
        return True
    se = math.sqrt(a.std ** 2 / a.n + b.std ** 2 / b.n)
    return abs(a.mean - b.mean) <= 2 * se


def ranking(agg_task: dict[str, dict[float, Cell]], ratio: float, higher: bool) -> list[tuple[str, Cell]]:
    """The encodings (floors excluded) at one size, best first."""
    cells = [(label, by[ratio]) for label, by in agg_task.items() if ratio in by and not is_floor(label)]
    return sorted(cells, key=lambda lc: -lc[1].mean if higher else lc[1].mean)


# --- floors: did a kind learn the task? -------------------------------------------------------

def train_ratio(agg_task: dict[str, dict[float, Cell]]) -> float | None:
    """The in-distribution size of a task: ratio 1.0, or its only size (None when neither exists)."""
    ratios = {r for by in agg_task.values() for r in by}
    if 1.0 in ratios:
        return 1.0
    return ratios.pop() if len(ratios) == 1 else None


# The floor a task's "learned" rule uses when it is not the strongest one: the character LM is held to
# beating a bigram model (Press et al.'s trend needs models that use context; at the quick budget a
# model of 48 channels and 2 layers is not expected to beat a trigram model, which the report also shows).
REFERENCE_FLOORS = {"text/stdlib_lm": "bigram"}


def reference_floor(task: str | None, agg_task, ratio: float | None, higher: bool) -> tuple[str, Cell] | None:
    """The floor of the "learned" rule: :data:`REFERENCE_FLOORS` for ``task`` if measured, else the strongest."""
    name = REFERENCE_FLOORS.get(task or "")
    by = split_floors(agg_task)[1].get(name) if name else None
    if by is not None and ratio in by:
        return name, by[ratio]
    return strongest_floor(agg_task, ratio, higher)


def strongest_floor(agg_task, ratio: float | None, higher: bool) -> tuple[str, Cell] | None:
    """The floor hardest to beat at ``ratio`` (highest if higher is better, else lowest), or None."""
    _, floors = split_floors(agg_task)
    at = [(name, by[ratio]) for name, by in floors.items() if ratio in by]
    if not at:
        return None
    return (max if higher else min)(at, key=lambda nc: nc[1].mean)


def beats(cell: Cell, floor: Cell, higher: bool) -> bool | None:
    """Whether ``cell`` beats ``floor`` by more than two standard errors of ``cell``; None with one seed."""
    if cell.n < 2:
        return None
    margin = cell.mean - floor.mean if higher else floor.mean - cell.mean
    return margin > 2 * cell.se


@dataclass
class FloorCheck:
    """Which kinds of one task learned it: beat its strongest floor in distribution."""

    ratio: float | None  # the in-distribution size
    floor: tuple[str, Cell] | None  # (name, cell) of the strongest floor there; None if no floor was measured
    learned: dict[str, Cell] = field(default_factory=dict)  # kind -> its in-distribution cell
    not_learned: dict[str, Cell] = field(default_factory=dict)
    not_shown: dict[str, Cell] = field(default_factory=dict)  # fewer than two seeds

    def usable(self, label: str) -> bool:
        """Whether ``label``'s kind may enter a comparison (learned, or no floor to check against)."""
        return self.floor is None or kind_of(label) in self.learned


def floor_check(agg_task, higher: bool, task: str | None = None) -> FloorCheck:
    """Apply the "learned the task" rule to every kind of one task (against its reference floor)."""
    ratio = train_ratio(agg_task)
    check = FloorCheck(ratio, reference_floor(task, agg_task, ratio, higher))
    encodings, _ = split_floors(agg_task)
    for label, by in sorted(encodings.items()):
        if kind_of(label) != label or ratio not in by:
            continue  # test-time variants are judged by their kind
        if check.floor is None:
            check.learned[label] = by[ratio]
            continue
        verdict = beats(by[ratio], check.floor[1], higher)
        bucket = check.not_shown if verdict is None else check.learned if verdict else check.not_learned
        bucket[label] = by[ratio]
    return check


def learned_section(agg, info) -> list[str]:
    """Lines of the "Which kinds learned each task" section."""
    lines = ["## Which kinds learned each task", "",
             "A kind learned a task iff at the training size (×1, or the only size) its mean beats the task's "
             "strongest floor there by more than two standard errors (std / √n over seeds); with one seed it "
             "cannot be shown. Exceptions (a named floor instead of the strongest): "
             + ", ".join(f"{t}: {f}" for t, f in REFERENCE_FLOORS.items())
             + ". The literature checks below compare only kinds that learned the task.", ""]
    for task in sorted(agg):
        higher = info[task].higher_is_better
        check = floor_check(agg[task], higher, task)
        head = f"- **{task}** ({info[task].metric}{'↑' if higher else '↓'})"
        if check.floor is None:
            lines.append(f"{head}: no floor measured; every kind counts as learned.")
            continue
        name, cell = check.floor
        parts = [f"{'reference' if task in REFERENCE_FLOORS else 'strongest'} floor {name} {cell.mean:.3g}",
                 "above it: " + (", ".join(check.learned) or "no kind"),
                 "not above it: " + (", ".join(f"{k} {c.fmt()}" for k, c in check.not_learned.items()) or "no kind")]
        strongest = strongest_floor(agg[task], check.ratio, higher)
        if strongest is not None and strongest[0] != name:
            also = [k for k, c in check.learned.items() if beats(c, strongest[1], higher)]
            parts.append(f"above the strongest floor ({strongest[0]} {strongest[1].mean:.3g}) too: "
                         + (", ".join(also) or "no kind"))
        if check.not_shown:
            parts.append("not shown (one seed): " + ", ".join(f"{k} {c.fmt()}" for k, c in check.not_shown.items()))
        lines.append(f"{head}: " + "; ".join(parts) + ".")
    return lines


# --- tables -----------------------------------------------------------------------------------

def seeds_note(agg_task) -> str:
    """"3 seeds" (or "2–3 seeds") over the encoding cells of a task."""
    encodings, _ = split_floors(agg_task)
    ns = sorted({c.n for by in encodings.values() for c in by.values()})
    if not ns:
        return "0 seeds"
    span = f"{ns[0]}" if ns[0] == ns[-1] else f"{ns[0]}–{ns[-1]}"
    return f"{span} seed{'s' if ns[-1] > 1 else ''}"


def markdown_table(task: str, agg_task, sizes: list[tuple[float, str]], higher: bool, times: dict[str, float]) -> str:
    """Encodings ranked at the largest size (best bold, ``~`` within noise of it), then the floors."""
    head = ["encoding"] + [size_label(name, ratio) for ratio, name in sizes] + ["train s/run"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    top = {ratio: ranking(agg_task, ratio, higher)[0] for ratio, _ in sizes if ranking(agg_task, ratio, higher)}
    encodings, floors = split_floors(agg_task)
    for label, by_size in ranking_order(encodings, sizes, higher):
        cells = []
        for ratio, _ in sizes:
            cell = by_size.get(ratio)
            if cell is None:
                cells.append("–")
                continue
            text = cell.fmt()
            best_label, best = top[ratio]
            if label == best_label:
                text = f"**{text}**"
            elif within_noise(cell, best):
                text = f"{text} ~"
            cells.append(text)
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {times.get(kind_of(label), float('nan')):.1f} |")
    for name, by_size in sorted(floors.items()):
        cells = [by_size[ratio].fmt() if ratio in by_size else "–" for ratio, _ in sizes]
        lines.append(f"| {FLOOR_PREFIX}{name} | " + " | ".join(cells) + " | – |")
    return "\n".join(lines)


def ranking_order(agg_task, sizes, higher):
    """Rows sorted by the metric at the largest test size (rows without it last)."""
    last = sizes[-1][0]

    def key(item):
        cell = item[1].get(last)
        if cell is None or math.isnan(cell.mean):
            return math.inf
        return -cell.mean if higher else cell.mean

    return sorted(agg_task.items(), key=key)


def summary_table(agg, info) -> str:
    """One row per encoding, one column per task: the metric at the training size → at the largest size;
    a last row with each task's reference floor in distribution (the strongest, unless REFERENCE_FLOORS says)."""
    tasks = sorted(agg)
    labels = sorted({label for t in tasks for label in agg[t] if not is_floor(label)},
                    key=lambda l: (l.startswith("conv"), "(" in l, l))
    head = ["encoding"] + [f"{t} ({info[t].metric}{'↑' if info[t].higher_is_better else '↓'})" for t in tasks]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label in labels:
        cells = []
        for t in tasks:
            by = agg[t].get(label)
            if not by:
                cells.append("")
                continue
            first, last = min(by), max(by)
            a = f"{by[first].mean:.3g}" if first == 1.0 else "–"
            cells.append(a if last == first else f"{a} → {by[last].mean:.3g}")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    floor_cells = []
    for t in tasks:
        floor = reference_floor(t, agg[t], train_ratio(agg[t]), info[t].higher_is_better)
        floor_cells.append(f"{floor[0]} {floor[1].mean:.3g}" if floor else "")
    lines.append("| *floor to beat* | " + " | ".join(floor_cells) + " |")
    return "\n".join(lines)


# --- literature trends, checked against the measurements --------------------------------------

ONE_PIXEL = 2 / 63  # one pixel of a 64-pixel image in [-1, 1] coordinates


@dataclass
class Claim:
    """A trend a paper reports on ``task``.

    Comparison: every kind of ``better`` beats every kind of ``middle`` and ``worse``, and ``middle``
    beats ``worse`` (only kinds that learned the task take part). ``measure`` says what is compared:
    "largest" (the metric at the largest test size) or "degradation" (how much it worsens from the
    training size to the largest). Threshold: with ``threshold`` set, every kind of ``meets`` is on
    the good side of it and every kind of ``misses`` is not (judged for all kinds: an absolute bar
    needs no floor). ``note`` qualifies the protocol (e.g. "extrapolation, not the paper's protocol").
    """

    source: str
    text: str
    task: str
    better: list[str]
    worse: list[str]
    middle: list[str] = field(default_factory=list)
    measure: str = "largest"
    threshold: float | None = None
    meets: list[str] = field(default_factory=list)
    misses: list[str] = field(default_factory=list)
    note: str = ""

    @property
    def tiers(self) -> list[list[str]]:
        """The comparison's groups, best first (empty groups dropped)."""
        return [t for t in (self.better, self.middle, self.worse) if t]


KAZEMNEJAD = ("Kazemnejad et al. 2023", "decoder-only causal models trained on lengths up to L and tested at 2L "
              "and 4L: NoPE (`none`) and T5's relative bias length-generalize better than absolute (`learned`, "
              "`sinusoidal`) and rotary encodings; ALiBi in between")
HEO = ("Heo et al. 2024", "RoPE-Mixed ≥ RoPE-Axial (`rope-mixed`, `rope`) > `learned`/`sinusoidal` at the larger "
       "resolution (the ≥ between the two RoPEs is not checked)")
LIU = "Liu et al. 2018"
CLAIMS = [
    *[Claim(*KAZEMNEJAD, task, ["none", "relative"], ["learned", "sinusoidal", "rope"], middle=["alibi"])
      for task in ("text/copy", "text/reverse", "text/addition")],
    Claim("Press et al. 2022", "on a causal character LM, ALiBi and T5-style bias (`relative`) keep perplexity at "
          "longer contexts where sinusoidal and RoPE degrade", "text/stdlib_lm", ["alibi", "relative"],
          ["sinusoidal", "rope"], measure="degradation"),
    Claim("Sun et al. 2023", "on a causal LM, xPos (`xpos`) keeps perplexity at longer contexts better than RoPE",
          "text/stdlib_lm", ["xpos"], ["rope"], measure="degradation",
          note="full attention at test time; the paper extrapolates with blockwise causal attention"),
    Claim("Li et al. 2024", "on a causal LM, FIRE (`fire`) keeps perplexity at longer contexts better than RoPE and "
          "NoPE", "text/stdlib_lm", ["fire"], ["rope", "none"], measure="degradation"),
    Claim("Golovneva et al. 2024", "on copying beyond the training length, CoPE (`cope`) beats absolute encodings and "
          "RoPE", "text/copy", ["cope"], ["learned", "sinusoidal", "rope"],
          note="a plain copy task; the paper's are selective copy, counting and flip-flop"),
    *[Claim(*HEO, task, ["rope-mixed", "rope"], ["learned", "sinusoidal"])
      for task in ("image/shapes-zoom", "image/digits-zoom")],
    *[Claim(*HEO, task, ["rope-mixed", "rope"], ["learned", "sinusoidal"],
            note="extrapolation to a larger canvas, not the paper's protocol (which zooms the same image)")
      for task in ("image/shapes", "image/digits-canvas")],
    Claim(LIU, "CoordConv is near-perfect (error under one pixel, 2/63) on the uniform split", "coord/uniform",
          [], [], threshold=ONE_PIXEL, meets=["conv+coord"]),
    Claim(LIU, "CoordConv is near-perfect (error under one pixel, 2/63) on the held-out quadrant, where plain "
          "conv fails", "coord/quadrant", ["conv+coord"], ["conv"], threshold=ONE_PIXEL, meets=["conv+coord"],
          misses=["conv"]),
]


def measured_cell(by_size: dict[float, Cell], claim: Claim, first: float | None, last: float,
                  higher: bool) -> Cell | None:
    """What ``claim`` compares for one label: its cell at ``last``, or its worsening from ``first`` to ``last``
    (positive = worse; std of an unpaired difference), or None if not measured."""
    if claim.measure == "largest":
        return by_size.get(last)
    a, b = by_size.get(first), by_size.get(last)
    if a is None or b is None:
        return None
    drop = (a.mean - b.mean) if higher else (b.mean - a.mean)
    return Cell(drop, math.sqrt(a.std ** 2 + b.std ** 2), min(a.n, b.n))


def compare(better: dict[str, Cell], worse: dict[str, Cell], higher: bool):
    """Every pair better × worse sorted into (agree, within noise, disagree) strings."""
    wins, ties, losses = [], [], []
    for b, cb in better.items():
        for w, cw in worse.items():
            pair = f"{b} {cb.fmt()} vs {w} {cw.fmt()}"
            if within_noise(cb, cw):
                ties.append(pair)
            elif (cb.mean > cw.mean) == higher:
                wins.append(pair)
            else:
                losses.append(pair)
    return wins, ties, losses


def threshold_checks(claim: Claim, cells: dict[str, Cell], higher: bool):
    """Each ``meets``/``misses`` kind against the threshold, as (agree, within noise, disagree) strings;
    a cell is on one side when it clears the threshold by more than two standard errors."""
    wins, ties, losses = [], [], []
    op = ">" if higher else "<"
    for label, should_meet in [*[(k, True) for k in claim.meets], *[(k, False) for k in claim.misses]]:
        cell = cells.get(label)
        if cell is None:
            continue
        good = cell.mean - claim.threshold if higher else claim.threshold - cell.mean
        text = f"{label} {cell.fmt()} (should{'' if should_meet else ' not'} be {op} {claim.threshold:.3g})"
        if cell.n < 2 or abs(good) <= 2 * cell.se:
            ties.append(text)
        elif (good > 0) == should_meet:
            wins.append(text)
        else:
            losses.append(text)
    return wins, ties, losses


def verdict_of(wins: list, ties: list, losses: list) -> str:
    """agrees / partly agrees / disagrees / inconclusive from sorted checks."""
    if wins and not ties and not losses:
        return "agrees"
    if not wins and not losses:
        return "inconclusive (all differences within noise)"
    return "disagrees" if len(losses) > len(wins) else "partly agrees"


def measure_text(claim: Claim, metric: str, first: float | None, last: float) -> str:
    """What a claim's verdict measured, in words."""
    if claim.measure == "degradation":
        return f"the worsening of {metric} from ×{first:g} to ×{last:g} (smaller is better)"
    if first == last:
        return f"{metric} at its only test size"
    return f"{metric} at ×{last:g}, the largest test size"


def compare_tiers(tiers: list[dict[str, Cell]], higher: bool):
    """Every earlier tier against every later one, as (agree, within noise, disagree) strings."""
    pairs = [compare(upper, lower, higher) for i, upper in enumerate(tiers) for lower in tiers[i + 1:]]
    return tuple(sum(part, []) for part in zip(*pairs)) if pairs else ([], [], [])


def check_claim(claim: Claim, agg, info) -> str:
    """One markdown line: the claim, what was measured, and whether the measurements agree.

    Comparisons use only kinds that learned the task (the others are named as left out); with a side
    left empty the comparison is not testable. Threshold checks take every kind measured."""
    if claim.task not in agg:
        return f"- **{claim.source}**, `{claim.task}`: not measured in this run (task not selected)."
    head = f"- **{claim.source}**, `{claim.task}` — {claim.text}" + (f" [{claim.note}]" if claim.note else "")
    agg_task, row = agg[claim.task], info[claim.task]
    check = floor_check(agg_task, row.higher_is_better, claim.task)
    first, last = check.ratio, max(max(by) for by in agg_task.values())
    if claim.measure == "degradation" and first is None:
        return f"{head}. **not testable: no training-size measurement to degrade from**."
    cmp_higher = row.higher_is_better and claim.measure != "degradation"  # a worsening is better smaller
    labels = {k for t in claim.tiers for k in t} | set(claim.meets) | set(claim.misses)
    cells = {k: c for k in labels if k in agg_task
             and (c := measured_cell(agg_task[k], claim, first, last, row.higher_is_better)) is not None}
    tiers = [{k: cells[k] for k in tier if k in cells and check.usable(k)} for tier in claim.tiers]
    untestable = bool(claim.tiers) and any(not t for t in tiers)
    wins, ties, losses = ([], [], []) if untestable else compare_tiers(tiers, cmp_higher)
    if claim.threshold is not None:
        for acc, new in zip((wins, ties, losses), threshold_checks(claim, cells, cmp_higher)):
            acc.extend(new)

    notes = []
    if untestable:
        why = "too few kinds left to compare (" + "; ".join(
            f"{'/'.join(tier)} → {', '.join(t) or 'none'}" for tier, t in zip(claim.tiers, tiers)) + ")"
        notes.append(f"comparison not testable: {why}" if wins or ties or losses else why)
    left_out = sorted({kind_of(k) for tier in claim.tiers for k in tier if k in cells and not check.usable(k)})
    below = [k for k in left_out if k not in check.not_shown]
    if below:
        notes.append(f"left out (did not beat the floor in distribution): {', '.join(below)}")
    if len(below) < len(left_out):
        notes.append(f"left out (one seed, cannot show it beat the floor): "
                     f"{', '.join(k for k in left_out if k in check.not_shown)}")
    missing = sorted(labels - set(cells))
    if missing:
        notes.append(f"not in this run: {', '.join(missing)}")
    if check.floor is None and claim.tiers:
        notes.append("no floor measured, so no kind is left out")
    where = measure_text(claim, row.metric, first, last)
    if not (wins or ties or losses):
        return f"{head}. Measured: {where}. **not testable: {'; '.join(notes) or 'nothing measured'}**."
    detail = "; ".join(f"{name}: {', '.join(items)}" for name, items in
                       (("agree", wins), ("within noise", ties), ("disagree", losses)) if items)
    tail = "".join(f" {n[0].upper()}{n[1:]}." for n in notes)
    return f"{head}. Measured: {where}: **{verdict_of(wins, ties, losses)}**. {detail}.{tail}"


# --- the report -------------------------------------------------------------------------------

def train_times(rows: list[Row]) -> dict[str, dict[str, float]]:
    """task -> kind -> mean training seconds per run (floors excluded)."""
    times: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        if r.kind != FLOOR and r.variant == "-" and r.size_ratio == 1.0:
            times[r.task][r.kind].append(r.train_time_s)
    return {t: {k: statistics.fmean(v) for k, v in by.items()} for t, by in times.items()}


def write_report(run_dir: Path, header: str, select=None) -> Path:
    """Write report.md and plots for ``run_dir/results.csv`` (``select`` filters its rows); returns the path."""
    from .plots import plot_task

    rows = read_rows(run_dir / "results.csv")
    if select is not None:
        rows = select(rows)
    agg, info, times = aggregate(rows), task_info(rows), train_times(rows)
    parts = [header, "", "## Summary", "",
             "Mean over seeds at the training size → at the largest test size (× in the column tables below); "
             "the last row is the floor each task's kinds must beat in distribution.", "",
             summary_table(agg, info), "", *learned_section(agg, info), "", "## Per task", "",
             "Cells: mean ± std over seeds. **Bold**: best at that size; `~`: within noise of the best "
             "(difference under two standard errors). Sizes are test size / train size. `floor:` rows come "
             "from the data, not a model (never bold); the plots draw them as dashed grey lines.", ""]
    for task in sorted(agg):
        row = info[task]
        sizes = sizes_of(rows, task)
        arrow = "higher is better" if row.higher_is_better else "lower is better"
        plot = plot_task(task, agg[task], sizes, row.metric, run_dir / f"{task.replace('/', '_')}.png",
                         higher=row.higher_is_better)
        parts += [f"### {task} — {row.metric} ({arrow}), trained at {row.train_size}, {seeds_note(agg[task])}", "",
                  markdown_table(task, agg[task], sizes, row.higher_is_better, times.get(task, {})), "",
                  f"![{task}]({plot.name})", ""]
    parts += ["## Does it reproduce the literature?", ""]
    parts += [check_claim(c, agg, info) for c in CLAIMS]
    out = run_dir / "report.md"
    out.write_text("\n".join(parts) + "\n")
    return out
