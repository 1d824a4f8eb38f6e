"""Competence: the protocol's rules at the training size, and retention beyond it (train/protocol.py's bars and
floors applied to aggregated runs). The report (``train/report.py``) and the claims (``train/claims.py``) both read
it; it reads neither.

A kind **counts** on a task iff its mean passes the task's bar and it beats every floor of its runs' data (one-sided
t test per run's own data seed); it **uses position** iff it also beats the order-blind floor and NoPE (Welch).
Retention at a size is ``(m(x) - f(x)) / (m(x1) - f(x1))`` per run, ``f`` the strongest floor at each size.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from . import stats
from .protocol import TASKS
from .results import Cell, Row, aggregate, kind_of, split_floors

NOPE = "none"  # the kind without positions: the control every "uses position" claim beats


def train_ratio(agg_task: dict[str, dict[float, Cell]]) -> float | None:
    """The in-distribution size of a task: ratio 1.0, or its only size (None when neither exists)."""
    ratios = {r for by in agg_task.values() for r in by}
    if 1.0 in ratios:
        return 1.0
    return ratios.pop() if len(ratios) == 1 else None


def good(value: float, higher: bool) -> float:
    """``value`` signed so that larger is better (nan: the worst)."""
    if math.isnan(value):
        return -math.inf
    return value if higher else -value


def with_floor(cell: Cell, floor: Cell) -> list[tuple[float, float]]:
    """Per run: ``(its value, the floor of its own data seed)``; runs whose data seed has no floor are left out."""
    by_seed = {data_seed: v for (_, data_seed), v in floor.runs.items()}
    return [(v, by_seed[d]) for (_, d), v in sorted(cell.runs.items()) if d in by_seed]


def margins(cell: Cell, floor: Cell, higher: bool) -> list[float]:
    """Per run: how far it clears the floor of its own data seed (positive: better than the floor)."""
    return [good(v - f, higher) for v, f in with_floor(cell, floor)]


def beats(values: list[float]) -> bool:
    """Whether per-run margins are above 0 by a one-sided t test at ALPHA (never with fewer than two runs)."""
    if len(values) < 2:
        return False
    est = stats.t_interval(values)
    return est.mean > 0 and (est.se == 0 or est.p_value / 2 < stats.ALPHA)


def strongest_floor(floors: dict[str, dict[float, Cell]], ratio: float, higher: bool) -> tuple[str, Cell] | None:
    """The floor hardest to beat at ``ratio`` (by its mean over data seeds), or None."""
    at = [(name, by[ratio]) for name, by in floors.items() if ratio in by]
    return max(at, key=lambda nc: good(nc[1].mean, higher)) if at else None


@dataclass
class KindStatus:
    """One kind on one task, in distribution."""

    cell: Cell
    bar: bool  # passes the task's competence bar
    floors: bool  # beats every floor of its runs' data
    order: bool | None  # beats the order-blind floor and NoPE (None: NoPE itself, or no order-blind measure)

    @property
    def counts(self) -> bool:
        return self.bar and self.floors


@dataclass
class Competence:
    """A task's competence check: its bar, floors in distribution, and each kind's status."""

    task: str
    ratio: float | None
    higher: bool
    floors: dict[str, Cell] = field(default_factory=dict)  # name -> in-distribution cell
    kinds: dict[str, KindStatus] = field(default_factory=dict)

    @property
    def learned(self) -> bool:
        """Whether any kind passes the bar (the task was learned at this budget)."""
        return any(s.counts for s in self.kinds.values())

    def counts(self, label: str) -> bool:
        status = self.kinds.get(kind_of(label))
        return status is not None and status.counts

    @property
    def best(self) -> str | None:
        return max(self.kinds, key=lambda k: good(self.kinds[k].cell.mean, self.higher)) if self.kinds else None


def passes_bar(task: str, cell: Cell, floors: dict[str, Cell], higher: bool) -> bool:
    bar = TASKS[task].bar if task in TASKS else None
    if bar is None:
        return True
    if bar.value is not None:
        return good(cell.mean - bar.value, higher) >= 0
    floor = floors.get(bar.floor or "")
    return floor is not None and beats(margins(cell, floor, higher))


def in_distribution(rows: list[Row]) -> dict:
    """task -> the aggregate the competence rules read: each task's ``competence_split`` (train/protocol.py; the
    test split at the training size, or the validation split where the test split is held out, as Liu et al.'s
    quadrant)."""
    by_split = {split: aggregate(rows, split=split) for split in ("test", "val")}
    tasks = {r.task for r in rows}
    split_of = {t: TASKS[t].competence_split if t in TASKS else "test" for t in tasks}
    return {t: by_split[split_of[t]].get(t, {}) for t in tasks}


def competence(task: str, agg_task, higher: bool) -> Competence:
    """Apply the protocol's rules to every kind of one task at its training size (``agg_task``: the aggregate of
    its competence split, see :func:`in_distribution`)."""
    ratio = train_ratio(agg_task)
    encodings, floor_series = split_floors(agg_task)
    floors = {name: by[ratio] for name, by in floor_series.items() if ratio in by}
    check = Competence(task, ratio, higher, floors)
    nope = encodings.get(NOPE, {}).get(ratio)
    for label, by in sorted(encodings.items()):
        if kind_of(label) != label or ratio not in by:
            continue  # test-time variants are judged by their kind
        cell = by[ratio]
        beats_floors = all(beats(margins(cell, f, higher)) for f in floors.values())
        order = None
        if label != NOPE and ("order-blind" in floors or nope is not None):
            order = ("order-blind" not in floors or beats(margins(cell, floors["order-blind"], higher))) and (
                nope is None or beats_welch(cell, nope, higher))
        check.kinds[label] = KindStatus(cell, passes_bar(task, cell, floors, higher), beats_floors, order)
    return check


def beats_welch(a: Cell, b: Cell, higher: bool) -> bool:
    """``a`` better than ``b`` by a one-sided Welch test at ALPHA."""
    est = stats.welch([good(v, higher) for v in a.values], [good(v, higher) for v in b.values])
    return a.n > 1 and b.n > 1 and est.mean > 0 and (est.se == 0 or est.p_value / 2 < stats.ALPHA)


def retention(agg_task, label: str, ratio: float, check: Competence) -> stats.Estimate | None:
    """Per-run ``(m(x ratio) - f(x ratio)) / (m(x1) - f(x1))`` (``f``: the strongest floor at each size), t interval."""
    by = agg_task.get(label, {})
    kind = agg_task.get(kind_of(label), {})
    _, floor_series = split_floors(agg_task)
    base, at = kind.get(check.ratio), by.get(ratio)
    f1 = strongest_floor(floor_series, check.ratio, check.higher) if check.ratio is not None else None
    fk = strongest_floor(floor_series, ratio, check.higher)
    if base is None or at is None or f1 is None or fk is None or not check.counts(label):
        return None  # only kinds that count: at or below the floor the ratio is meaningless
    f1_by = {d: v for (_, d), v in f1[1].runs.items()}
    fk_by = {d: v for (_, d), v in fk[1].runs.items()}
    values = []
    for run, v in sorted(at.runs.items()):
        d = run[1]
        if run in base.runs and d in f1_by and d in fk_by and good(base.runs[run] - f1_by[d], check.higher) > 0:
            values.append(good(v - fk_by[d], check.higher) / good(base.runs[run] - f1_by[d], check.higher))
    return stats.t_interval(values) if values else None
